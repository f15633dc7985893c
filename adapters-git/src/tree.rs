//! Git tree objects: encoding, decoding, and the flat form (`path → (mode, blob id)`) the store computes
//! with. Byte order of full paths is git's tree order, so a `BTreeMap` walks paths as git lists them.

use std::collections::{BTreeMap, HashMap, HashSet};

use gix::ObjectId;

use crate::error::{GitError, GitResult};
use crate::odb::{Kind, Odb};

/// The mode of a tree entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Mode {
    /// `100644`
    File,
    /// `100755`
    Exec,
    /// `120000`: the blob is the link text.
    Link,
    /// `40000`
    Tree,
}

impl Mode {
    fn as_str(self) -> &'static str {
        match self {
            Mode::File => "100644",
            Mode::Exec => "100755",
            Mode::Link => "120000",
            Mode::Tree => "40000",
        }
    }

    fn parse(text: &[u8]) -> Option<Mode> {
        match text {
            b"100644" | b"100664" => Some(Mode::File),
            b"100755" => Some(Mode::Exec),
            b"120000" => Some(Mode::Link),
            b"40000" | b"040000" => Some(Mode::Tree),
            _ => None,
        }
    }

    /// The mode as git's diff headers show it.
    pub fn header(self) -> &'static str {
        match self {
            Mode::Tree => "040000",
            other => other.as_str(),
        }
    }
}

/// A file entry: its mode and blob.
pub type Entry = (Mode, ObjectId);

/// A snapshot in flat form: every file (and symlink) path with its entry; directories are implicit.
pub type Flat = BTreeMap<String, Entry>;

/// Reads a snapshot's tree, and every tree below it, into flat form. A missing tree is `Missing`.
pub fn read_flat(odb: &Odb, id: &ObjectId) -> GitResult<Flat> {
    Ok(read_flat_with_dirs(odb, id)?.0)
}

/// Every tree id of a snapshot, the root included (for gc).
pub fn tree_ids(odb: &Odb, id: &ObjectId, out: &mut Vec<ObjectId>) -> GitResult<()> {
    out.push(*id);
    for (_, mode, oid) in decode(odb, id)? {
        if mode == Mode::Tree {
            tree_ids(odb, &oid, out)?;
        }
    }
    Ok(())
}

fn decode(odb: &Odb, id: &ObjectId) -> GitResult<Vec<(String, Mode, ObjectId)>> {
    let data = odb.read(id, Kind::Tree)?;
    let corrupt = || GitError::Corrupt(format!("tree {id} cannot be decoded"));
    let mut entries = Vec::new();
    let mut rest = &data[..];
    while !rest.is_empty() {
        let space = rest.iter().position(|&b| b == b' ').ok_or_else(corrupt)?;
        let mode = Mode::parse(&rest[..space]);
        rest = &rest[space + 1..];
        let nul = rest.iter().position(|&b| b == 0).ok_or_else(corrupt)?;
        let name = String::from_utf8(rest[..nul].to_vec()).map_err(|_| corrupt())?;
        rest = &rest[nul + 1..];
        if rest.len() < 20 {
            return Err(corrupt());
        }
        let oid = ObjectId::try_from(&rest[..20]).map_err(|_| corrupt())?;
        rest = &rest[20..];
        // Entries of other kinds (submodule links) are not tracked content.
        if let Some(mode) = mode {
            entries.push((name, mode, oid));
        }
    }
    Ok(entries)
}

/// Reads a snapshot in flat form together with the tree id of each of its directories (`""` is the root).
pub fn read_flat_with_dirs(
    odb: &Odb,
    id: &ObjectId,
) -> GitResult<(Flat, HashMap<String, ObjectId>)> {
    let mut flat = Flat::new();
    let mut dirs = HashMap::new();
    read_with_dirs(odb, id, "", &mut flat, &mut dirs)?;
    Ok((flat, dirs))
}

fn read_with_dirs(
    odb: &Odb,
    id: &ObjectId,
    prefix: &str,
    flat: &mut Flat,
    dirs: &mut HashMap<String, ObjectId>,
) -> GitResult<()> {
    dirs.insert(prefix.to_owned(), *id);
    for (name, mode, oid) in decode(odb, id)? {
        let path = if prefix.is_empty() {
            name
        } else {
            format!("{prefix}/{name}")
        };
        if mode == Mode::Tree {
            read_with_dirs(odb, &oid, &path, flat, dirs)?;
        } else {
            flat.insert(path, (mode, oid));
        }
    }
    Ok(())
}

/// The directories a change of `path` makes dirty: its parents and the root.
pub fn mark_dirty(dirty: &mut HashSet<String>, path: &str) {
    dirty.insert(String::new());
    for (i, _) in path.match_indices('/') {
        dirty.insert(path[..i].to_owned());
    }
}

struct Builder<'a> {
    odb: &'a Odb,
    old: &'a HashMap<String, ObjectId>,
    dirty: &'a HashSet<String>,
    built: HashMap<String, ObjectId>,
}

/// Writes `flat` as git trees, reusing the old id of every directory that is not `dirty` (a directory is
/// dirty when a path below it was added, removed or changed). Returns the root id and the id of every
/// directory of the new tree.
pub fn write_flat_reusing(
    odb: &Odb,
    flat: &Flat,
    old: &HashMap<String, ObjectId>,
    dirty: &HashSet<String>,
) -> GitResult<(ObjectId, HashMap<String, ObjectId>)> {
    let items: Vec<(&str, Entry)> = flat
        .iter()
        .map(|(path, entry)| (path.as_str(), *entry))
        .collect();
    let mut builder = Builder {
        odb,
        old,
        dirty,
        built: HashMap::new(),
    };
    let root = builder.build(&items, "")?;
    // Directories that were rebuilt replace their old ids; dirty directories that no longer exist go,
    // with everything that was below them.
    let mut dirs = old.clone();
    for gone in dirty.iter().filter(|d| !builder.built.contains_key(*d)) {
        let below = format!("{gone}/");
        dirs.retain(|d, _| d != gone && !d.starts_with(&below));
    }
    dirs.extend(builder.built);
    dirs.insert(String::new(), root);
    Ok((root, dirs))
}

impl Builder<'_> {
    fn build(&mut self, items: &[(&str, Entry)], dir: &str) -> GitResult<ObjectId> {
        if !self.dirty.contains(dir)
            && let Some(id) = self.old.get(dir)
        {
            return Ok(*id);
        }
        let mut entries: Vec<(String, Mode, ObjectId)> = Vec::new();
        let mut i = 0;
        while i < items.len() {
            let (path, entry) = items[i];
            match path.split_once('/') {
                None => {
                    entries.push((path.to_owned(), entry.0, entry.1));
                    i += 1;
                }
                Some((name, _)) => {
                    let mut sub = Vec::new();
                    while let Some((rest, entry)) = items.get(i).and_then(|(p, e)| {
                        p.strip_prefix(name)
                            .and_then(|r| r.strip_prefix('/'))
                            .map(|r| (r, *e))
                    }) {
                        sub.push((rest, entry));
                        i += 1;
                    }
                    let sub_dir = if dir.is_empty() {
                        name.to_owned()
                    } else {
                        format!("{dir}/{name}")
                    };
                    let id = self.build(&sub, &sub_dir)?;
                    entries.push((name.to_owned(), Mode::Tree, id));
                }
            }
        }
        // Git sorts entries by name, a tree's name compared as if it ended with '/'.
        entries.sort_by_key(|(name, mode, _)| sort_key(name, *mode));
        let mut data = Vec::with_capacity(entries.len() * 40);
        for (name, mode, oid) in &entries {
            data.extend_from_slice(mode.as_str().as_bytes());
            data.push(b' ');
            data.extend_from_slice(name.as_bytes());
            data.push(0);
            data.extend_from_slice(oid.as_bytes());
        }
        let id = self.odb.write_buf(Kind::Tree, &data)?;
        self.built.insert(dir.to_owned(), id);
        Ok(id)
    }
}

fn sort_key(name: &str, mode: Mode) -> Vec<u8> {
    let mut key = name.as_bytes().to_vec();
    if mode == Mode::Tree {
        key.push(b'/');
    }
    key
}
