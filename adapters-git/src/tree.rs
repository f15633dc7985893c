//! Git tree objects: encoding, decoding, and the flat form (`path → (mode, blob id)`) the store computes
//! with. Byte order of full paths is git's tree order, so a `BTreeMap` walks paths as git lists them.

#[cfg(test)]
use std::collections::BTreeMap;
use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Arc;

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
    /// Whether permission bits make a regular file executable for git (the owner's execute bit).
    pub fn is_executable(permission_bits: u32) -> bool {
        permission_bits & 0o100 != 0
    }

    /// The mode a file, executable or symlink is tracked as, from its `symlink_metadata`; none for
    /// anything else (a directory, a FIFO, a device).
    pub fn of_file(meta: &std::fs::Metadata) -> Option<Mode> {
        use std::os::unix::fs::PermissionsExt;
        if meta.file_type().is_symlink() {
            Some(Mode::Link)
        } else if meta.is_file() && Mode::is_executable(meta.permissions().mode()) {
            Some(Mode::Exec)
        } else if meta.is_file() {
            Some(Mode::File)
        } else {
            None
        }
    }

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

/// A tree read: its id and its bytes.
type TreeRead = (ObjectId, Arc<[u8]>);

/// A path whose file entry differs between two snapshots, with the entry on each side.
pub type Change = (String, Option<Entry>, Option<Entry>);

/// A snapshot in flat form: every file (and symlink) path with its entry; directories are implicit.
#[cfg(test)]
pub type Flat = BTreeMap<String, Entry>;

/// Reads a snapshot's tree, and every tree below it, into flat form. A missing tree is `Missing`.
#[cfg(test)]
pub fn read_flat(odb: &Odb, id: &ObjectId) -> GitResult<Flat> {
    Ok(read_flat_with_dirs(odb, id)?.0)
}

/// Adds every object snapshot `root` reaches (its trees, the root included, and its blobs) to `out`, for
/// gc; a tree already in `out` was walked before and is not read again. A tree missing from the store
/// reaches nothing more, and the rest is still walked: `false` when the root itself is missing. Any other
/// failure to read a tree (corrupt, unreadable) is an error, since what it reaches is unknown.
///
/// `stored` says whether the store holds an object by another account than the reader's (its loose file,
/// the indexes of its packs read strictly): a tree the reader cannot find although it is stored is an
/// error, never a missing tree, so gc never decides what to delete from packs it could not read. Trees are
/// read from the store, not from the copies this process keeps (`Odb::read_tree_stored`).
pub fn reachable_from(
    odb: &Odb,
    root: &ObjectId,
    out: &mut std::collections::HashSet<ObjectId>,
    stored: &dyn Fn(&ObjectId) -> bool,
) -> GitResult<bool> {
    let mut pending = vec![*root];
    let mut root_found = true;
    while let Some(id) = pending.pop() {
        if !out.insert(id) {
            continue;
        }
        let data = match odb.read_tree_stored(&id) {
            Ok(data) => data,
            Err(GitError::Missing(_)) if stored(&id) => {
                return Err(GitError::Corrupt(format!(
                    "tree {id} is stored but could not be read (a pack of the store could not be opened)"
                )));
            }
            Err(GitError::Missing(_)) => {
                root_found &= id != *root;
                continue;
            }
            Err(error) => return Err(error),
        };
        for (_, mode, oid) in decode_borrowed(&id, &data)? {
            if mode == Mode::Tree {
                pending.push(oid);
            } else {
                out.insert(oid);
            }
        }
    }
    Ok(root_found)
}

#[cfg(test)]
fn decode(odb: &Odb, id: &ObjectId) -> GitResult<Vec<(String, Mode, ObjectId)>> {
    let data = odb.read_tree(id)?;
    Ok(decode_borrowed(id, &data)?
        .into_iter()
        .map(|(name, mode, oid)| (name.to_owned(), mode, oid))
        .collect())
}

/// The entries of a tree read (none for no tree), names borrowed from its bytes.
fn entries_of(tree: Option<&TreeRead>) -> GitResult<Vec<(&str, Mode, ObjectId)>> {
    match tree {
        Some((id, data)) => decode_borrowed(id, data),
        None => Ok(Vec::new()),
    }
}

/// The entries of tree `id` from its bytes, names borrowed from them.
fn decode_borrowed<'d>(id: &ObjectId, data: &'d [u8]) -> GitResult<Vec<(&'d str, Mode, ObjectId)>> {
    raw_entries(id, data).collect()
}

/// The entry called `name` in tree `id` (bytes `data`), a sub-tree or not as `tree` says. It reads no further
/// than the entry found: the bytes are to be checked whole first (`LazyTree::dir` does, as it reads them).
fn find_entry(id: &ObjectId, data: &[u8], name: &str, tree: bool) -> GitResult<Option<Entry>> {
    for entry in raw_entries(id, data) {
        let (found, mode, oid) = entry?;
        if found == name && (mode == Mode::Tree) == tree {
            return Ok(Some((mode, oid)));
        }
    }
    Ok(None)
}

/// The entries of tree `id`, one by one from its bytes (names borrowed from them), without collecting them:
/// an entry that does not decode is an error, and ends the entries. Entries of other kinds (submodule
/// links) are not tracked content, and are left out.
fn raw_entries<'d>(
    id: &ObjectId,
    data: &'d [u8],
) -> impl Iterator<Item = GitResult<(&'d str, Mode, ObjectId)>> {
    let corrupt = move || GitError::Corrupt(format!("tree {id} cannot be decoded"));
    let mut rest = data;
    std::iter::from_fn(move || {
        loop {
            if rest.is_empty() {
                return None;
            }
            let entry = (|| {
                let space = rest.iter().position(|&b| b == b' ').ok_or_else(corrupt)?;
                let mode = Mode::parse(&rest[..space]);
                let after = &rest[space + 1..];
                let nul = after.iter().position(|&b| b == 0).ok_or_else(corrupt)?;
                let name = std::str::from_utf8(&after[..nul]).map_err(|_| corrupt())?;
                let after = &after[nul + 1..];
                let oid = after
                    .get(..20)
                    .and_then(|raw| ObjectId::try_from(raw).ok())
                    .ok_or_else(corrupt)?;
                rest = &after[20..];
                Ok((name, mode, oid))
            })();
            match entry {
                Ok((name, Some(mode), oid)) => return Some(Ok((name, mode, oid))),
                Ok((_, None, _)) => continue,
                Err(e) => {
                    rest = &[];
                    return Some(Err(e));
                }
            }
        }
    })
}

/// The last entry called `name` in tree bytes `data` that `raw_entries` gives (one of a kind it knows),
/// found by comparing bytes: names are not checked to be UTF-8 nor ids made for the other entries. For
/// trees already checked to decode whole (`Loaded::read`); bytes that do not decode end the search.
fn last_named(data: &[u8], name: &str) -> Option<(Mode, ObjectId)> {
    let mut rest = data;
    let mut found = None;
    while !rest.is_empty() {
        let space = rest.iter().position(|&b| b == b' ')?;
        let after = &rest[space + 1..];
        let nul = after.iter().position(|&b| b == 0)?;
        let raw_id = after.get(nul + 1..nul + 21)?;
        if &after[..nul] == name.as_bytes()
            && let Some(mode) = Mode::parse(&rest[..space])
        {
            found = Some((mode, ObjectId::try_from(raw_id).ok()?));
        }
        rest = &after[nul + 21..];
    }
    found
}

/// Reads a snapshot in flat form together with the tree id of each of its directories (`""` is the root).
#[cfg(test)]
pub fn read_flat_with_dirs(
    odb: &Odb,
    id: &ObjectId,
) -> GitResult<(Flat, HashMap<String, ObjectId>)> {
    let mut flat = Flat::new();
    let mut dirs = HashMap::new();
    read_with_dirs(odb, id, "", &mut flat, &mut dirs)?;
    Ok((flat, dirs))
}

/// The tree id of each directory of `dirs` (`""` is the root, others `a/b`; every directory above one of
/// them must be in it too) within snapshot `root`, found by descending only into those directories. A
/// directory missing from the snapshot is an error.
pub fn dir_ids(
    odb: &Odb,
    root: &ObjectId,
    dirs: &HashSet<String>,
) -> GitResult<HashMap<String, ObjectId>> {
    let mut found = HashMap::with_capacity(dirs.len());
    let mut pending = vec![(String::new(), *root)];
    while let Some((path, id)) = pending.pop() {
        let data = odb.read_tree(&id)?;
        for (name, mode, oid) in decode_borrowed(&id, &data)? {
            if mode != Mode::Tree {
                continue;
            }
            let child = if path.is_empty() {
                name.to_owned()
            } else {
                format!("{path}/{name}")
            };
            if dirs.contains(&child) {
                pending.push((child, oid));
            }
        }
        found.insert(path, id);
    }
    match dirs.iter().find(|dir| !found.contains_key(*dir)) {
        Some(dir) => Err(GitError::Other(format!(
            "directory {dir:?} is not in tree {root}"
        ))),
        None => Ok(found),
    }
}

#[cfg(test)]
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

/// The directories a change of `path` makes dirty: its parents and the root. The set holds every parent of
/// each directory in it (only this function adds to it), so the walk up from the deepest parent ends at the
/// first one already there: a whole first track (every file new) allocates each directory's name once.
pub fn mark_dirty(dirty: &mut HashSet<String>, path: &str) {
    for (i, _) in path.rmatch_indices('/') {
        if dirty.contains(&path[..i]) {
            return;
        }
        dirty.insert(path[..i].to_owned());
    }
    if !dirty.contains("") {
        dirty.insert(String::new());
    }
}

#[cfg(test)]
struct Builder<'a> {
    odb: &'a Odb,
    old: &'a HashMap<String, ObjectId>,
    dirty: &'a HashSet<String>,
    built: HashMap<String, ObjectId>,
}

#[cfg(test)]
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

#[cfg(test)]
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
        let id = write_entries(self.odb, entries)?;
        self.built.insert(dir.to_owned(), id);
        Ok(id)
    }
}

/// Git's order of tree entries: by name, a tree's name compared as if it ended with '/'. (Names hold no
/// '/', so past the shorter name the next byte, or the tree's '/', decides; nothing sorts first.)
fn git_order(a: &str, a_mode: Mode, b: &str, b_mode: Mode) -> std::cmp::Ordering {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    let common = a.len().min(b.len());
    a[..common].cmp(&b[..common]).then_with(|| {
        let next = |name: &[u8], mode: Mode| {
            name.get(common)
                .copied()
                .or((mode == Mode::Tree).then_some(b'/'))
        };
        next(a, a_mode).cmp(&next(b, b_mode))
    })
}

/// One snapshot's trees, read on demand and each at most once: for looking up a few paths without reading
/// the whole snapshot.
pub struct LazyTree<'a> {
    odb: &'a Odb,
    root: ObjectId,
    /// Directories read (`""` is the root, others `a/b`), each tree's id and bytes, checked to decode when
    /// read and searched as they are when a name is looked up (decoding each into owned names cost a
    /// string per entry: most of the trees' share of a 1,000-file revert's plan); `None` when the path is
    /// no directory there.
    dirs: HashMap<String, Option<TreeRead>>,
}

impl<'a> LazyTree<'a> {
    /// The snapshot with root tree `root` (nothing is read yet).
    pub fn new(odb: &'a Odb, root: ObjectId) -> Self {
        LazyTree {
            odb,
            root,
            dirs: HashMap::new(),
        }
    }

    /// The tree of directory `dir` (`""` or `a/b`), or none when the snapshot has no such directory.
    fn dir(&mut self, dir: &str) -> GitResult<Option<&TreeRead>> {
        if !self.dirs.contains_key(dir) {
            let id = if dir.is_empty() {
                Some(self.root)
            } else {
                let (parent, name) = dir.rsplit_once('/').unwrap_or(("", dir));
                match self.dir(parent)? {
                    Some((parent_id, data)) => find_entry(parent_id, data, name, true)?,
                    None => None,
                }
                .map(|(_, id)| id)
            };
            let tree = match id {
                Some(id) => {
                    let data = self.odb.read_tree(&id)?;
                    // Every entry decodes, as when the tree was decoded whole.
                    for entry in raw_entries(&id, &data) {
                        entry?;
                    }
                    Some((id, data))
                }
                None => None,
            };
            self.dirs.insert(dir.to_owned(), tree);
        }
        Ok(self.dirs.get(dir).and_then(Option::as_ref))
    }

    /// The file (or symlink) entry at `path`, if the snapshot has one there.
    pub fn get(&mut self, path: &str) -> GitResult<Option<Entry>> {
        let (parent, name) = path.rsplit_once('/').unwrap_or(("", path));
        match self.dir(parent)? {
            Some((id, data)) => find_entry(id, data, name, false),
            None => Ok(None),
        }
    }

    /// True when the snapshot has a file or symlink at `path` or below it (`path` is a directory there).
    pub fn holds(&mut self, path: &str) -> GitResult<bool> {
        Ok(self.get(path)?.is_some() || self.dir(path)?.is_some())
    }
}

/// A directory being edited: its entries, with sub-directories loaded only where a change goes.
enum Node {
    File(Mode, ObjectId),
    Dir(Loaded),
}

/// What an entry of a directory being edited is (`Loaded::entry`).
enum Seen {
    File,
    /// A sub-tree not loaded yet.
    Tree(ObjectId),
    /// A sub-directory loaded (or made) for the edit.
    Loaded,
}

/// A directory read (or made) for an edit: the tree's bytes as read, and the entries set or removed since
/// over them. The entries of a tree read are not copied out (a revert of 1,000 files in a worktree of
/// 100,000 reads about 1,000 trees of `base` along its paths, and building a map of owned names for each
/// took about 8 ms of one core): only those a change goes to or through are held by name.
struct Loaded {
    /// The tree it was read from; none when the edit made it.
    from: Option<ObjectId>,
    /// Whether a change went into it (or below it): otherwise it is still `from`.
    changed: bool,
    /// The bytes of `from`, checked to decode whole when read; none when the edit made it.
    raw: Option<Arc<[u8]>>,
    /// Entries set (a file, or a sub-directory loaded) or removed (none) since, by name: they stand for
    /// the entries of `raw` of the same name.
    over: HashMap<String, Option<Node>>,
}

impl Loaded {
    fn read(odb: &Odb, id: &ObjectId) -> GitResult<Loaded> {
        let raw = odb.read_tree(id)?;
        // Every entry decodes, or the tree is an error now, before any file is touched.
        for entry in raw_entries(id, &raw) {
            entry?;
        }
        Ok(Loaded {
            from: Some(*id),
            changed: false,
            raw: Some(raw),
            over: HashMap::new(),
        })
    }

    fn made() -> Loaded {
        Loaded {
            from: None,
            changed: true,
            raw: None,
            over: HashMap::new(),
        }
    }

    /// The entry called `name`: as set since, or as read (the last entry of that name, as a map of the
    /// entries would hold it).
    fn entry(&self, name: &str) -> Option<Seen> {
        if let Some(set) = self.over.get(name) {
            return match set {
                Some(Node::File(..)) => Some(Seen::File),
                Some(Node::Dir(_)) => Some(Seen::Loaded),
                None => None,
            };
        }
        last_named(self.raw.as_ref()?, name).map(|(mode, id)| match mode {
            Mode::Tree => Seen::Tree(id),
            _ => Seen::File,
        })
    }

    /// The sub-directory called `name`, loaded when it is a tree not loaded yet; when it is a file or
    /// absent, made (replacing the file) if `make`, else none.
    fn sub(&mut self, odb: &Odb, name: &str, make: bool) -> GitResult<Option<&mut Loaded>> {
        let loaded = match self.entry(name) {
            Some(Seen::Loaded) => None,
            Some(Seen::Tree(id)) => Some(Loaded::read(odb, &id)?),
            _ if make => Some(Loaded::made()),
            _ => return Ok(None),
        };
        if let Some(loaded) = loaded {
            self.over.insert(name.to_owned(), Some(Node::Dir(loaded)));
        }
        match self.over.get_mut(name) {
            Some(Some(Node::Dir(sub))) => Ok(Some(sub)),
            _ => Err(GitError::Other(format!("editing the tree at {name}"))),
        }
    }
}

/// The tree of a snapshot being edited (`edit`): read along the paths it is told of, changed, then written.
/// Reading can start before the changes are known (a revert reads them while it plans), and it is the
/// check that every tree the changes go through can be read.
pub struct Edit {
    root: Loaded,
}

/// The tree id of each directory an edit wrote or read (`""` is the root, others `a/b`).
pub type DirIds = HashMap<String, ObjectId>;

impl Edit {
    /// Reads `base` and, for each of `paths`, every directory above it that `base` has.
    pub fn read<'p>(
        odb: &Odb,
        base: &ObjectId,
        paths: impl IntoIterator<Item = &'p str>,
    ) -> GitResult<Edit> {
        let mut root = Loaded::read(odb, base)?;
        for path in paths {
            let mut dir = &mut root;
            let mut parts = path.split('/').peekable();
            while let Some(part) = parts.next() {
                if parts.peek().is_none() {
                    break;
                }
                match dir.sub(odb, part, false)? {
                    Some(sub) => dir = sub,
                    None => break,
                }
            }
        }
        Ok(Edit { root })
    }

    /// Applies `changes` in order (a path set to a file, replacing whatever was there, directory or not;
    /// or a file removed), reading the trees on their paths not read yet.
    pub fn apply(&mut self, odb: &Odb, changes: &[(String, Option<Entry>)]) -> GitResult<()> {
        for (path, entry) in changes {
            let mut dir = &mut self.root;
            let mut parts = path.split('/').peekable();
            while let Some(part) = parts.next() {
                dir.changed = true;
                if parts.peek().is_none() {
                    match entry {
                        Some((mode, id)) => {
                            dir.over
                                .insert(part.to_owned(), Some(Node::File(*mode, *id)));
                        }
                        None => {
                            if matches!(dir.entry(part), Some(Seen::File)) {
                                dir.over.insert(part.to_owned(), None);
                            }
                        }
                    }
                    break;
                }
                // A file where a directory is needed, or nothing: a removal has nothing to remove.
                match dir.sub(odb, part, entry.is_some())? {
                    Some(sub) => dir = sub,
                    None => break,
                }
            }
        }
        Ok(())
    }

    /// Writes the directories the changes went into (deepest first) and returns the tree, with the id of
    /// every directory read or written. Directories left empty disappear, as in git.
    pub fn write(self, odb: &Odb) -> GitResult<(ObjectId, DirIds)> {
        let mut dirs = HashMap::new();
        let root = match write_loaded(odb, String::new(), self.root, &mut dirs)? {
            Some(id) => id,
            None => {
                let id = odb.write_buf(Kind::Tree, &[])?;
                dirs.insert(String::new(), id);
                id
            }
        };
        Ok((root, dirs))
    }
}

/// Writes the tree of `base` with `changes` applied in order (`Edit::apply`), reading and writing only
/// the trees on the changed paths, and returns it with its directories' ids (`Edit::write`).
pub fn edit(
    odb: &Odb,
    base: &ObjectId,
    changes: &[(String, Option<Entry>)],
) -> GitResult<(ObjectId, DirIds)> {
    let mut edit = Edit::read(odb, base, [])?;
    edit.apply(odb, changes)?;
    edit.write(odb)
}

/// Writes a loaded directory at `path` (its loaded sub-directories first), recording its id and theirs in
/// `dirs`; none when it holds nothing. One no change went into is not written again.
fn write_loaded(
    odb: &Odb,
    path: String,
    dir: Loaded,
    dirs: &mut DirIds,
) -> GitResult<Option<ObjectId>> {
    let Loaded {
        from,
        changed,
        raw,
        over,
    } = dir;
    // The entries set since, sub-directories written first.
    let mut set: Vec<(String, Mode, ObjectId)> = Vec::with_capacity(over.len());
    let mut removed: HashSet<String> = HashSet::new();
    for (name, node) in over {
        match node {
            Some(Node::File(mode, id)) => set.push((name, mode, id)),
            Some(Node::Dir(sub)) => {
                let sub_path = if path.is_empty() {
                    name.clone()
                } else {
                    format!("{path}/{name}")
                };
                match write_loaded(odb, sub_path, sub, dirs)? {
                    Some(id) => set.push((name, Mode::Tree, id)),
                    None => {
                        removed.insert(name);
                    }
                }
            }
            None => {
                removed.insert(name);
            }
        }
    }
    let id = match from {
        Some(from) if !changed => from,
        _ => {
            // The entries read, but those set or removed since (each name once: the last of that name).
            let mut kept: Vec<(&str, Mode, ObjectId)> = Vec::new();
            if let (Some(from), Some(raw)) = (from.as_ref(), raw.as_ref()) {
                let mut seen: HashSet<&str> = HashSet::new();
                let read: Vec<(&str, Mode, ObjectId)> =
                    raw_entries(from, raw).collect::<GitResult<_>>()?;
                for (name, mode, id) in read.into_iter().rev() {
                    if seen.insert(name)
                        && !removed.contains(name)
                        && !set.iter().any(|(set, _, _)| set == name)
                    {
                        kept.push((name, mode, id));
                    }
                }
            }
            kept.extend(
                set.iter()
                    .map(|(name, mode, id)| (name.as_str(), *mode, *id)),
            );
            if kept.is_empty() {
                return Ok(None);
            }
            write_entries(odb, kept)?
        }
    };
    dirs.insert(path, id);
    Ok(Some(id))
}

/// Encodes and stores one tree from its entries (in any order).
fn write_entries<S: AsRef<str>>(
    odb: &Odb,
    mut entries: Vec<(S, Mode, ObjectId)>,
) -> GitResult<ObjectId> {
    entries.sort_by(|(a, a_mode, _), (b, b_mode, _)| {
        git_order(a.as_ref(), *a_mode, b.as_ref(), *b_mode)
    });
    let mut data = Vec::with_capacity(entries.len() * 40);
    for (name, mode, oid) in &entries {
        data.extend_from_slice(mode.as_str().as_bytes());
        data.push(b' ');
        data.extend_from_slice(name.as_ref().as_bytes());
        data.push(0);
        data.extend_from_slice(oid.as_bytes());
    }
    odb.write_buf(Kind::Tree, &data)
}

/// The file paths whose entry differs between trees `a` and `b`, with the entry on each side (none where
/// the path holds no file), in path order; sub-trees with the same id are not read.
pub fn diff_trees(odb: &Odb, a: &ObjectId, b: &ObjectId) -> GitResult<Vec<Change>> {
    let mut out = Vec::new();
    diff_into(odb, Some(a), Some(b), "", &mut out)?;
    out.sort_by(|x, y| x.0.cmp(&y.0));
    Ok(out)
}

fn diff_into(
    odb: &Odb,
    a: Option<&ObjectId>,
    b: Option<&ObjectId>,
    prefix: &str,
    out: &mut Vec<Change>,
) -> GitResult<()> {
    if a == b {
        return Ok(());
    }
    let data = |id: Option<&ObjectId>| -> GitResult<Option<TreeRead>> {
        id.map(|id| Ok((*id, odb.read_tree(id)?))).transpose()
    };
    let (left_data, right_data) = (data(a)?, data(b)?);
    let (left, right) = (
        entries_of(left_data.as_ref())?,
        entries_of(right_data.as_ref())?,
    );
    let on_left: HashMap<&str, (Mode, ObjectId)> = left
        .iter()
        .map(|&(name, mode, id)| (name, (mode, id)))
        .collect();
    let on_right: HashMap<&str, (Mode, ObjectId)> = right
        .iter()
        .map(|&(name, mode, id)| (name, (mode, id)))
        .collect();
    // Every name once (a name on both sides is visited from the left), and only where the sides differ
    // is a path built or a sub-tree read.
    let names = left.iter().map(|(name, ..)| *name).chain(
        right
            .iter()
            .map(|(name, ..)| *name)
            .filter(|name| !on_left.contains_key(name)),
    );
    for name in names {
        let (l, r) = (on_left.get(name).copied(), on_right.get(name).copied());
        if l == r {
            continue;
        }
        let path = if prefix.is_empty() {
            name.to_owned()
        } else {
            format!("{prefix}/{name}")
        };
        let tree_of =
            |e: Option<(Mode, ObjectId)>| e.filter(|(m, _)| *m == Mode::Tree).map(|(_, id)| id);
        let file_of = |e: Option<(Mode, ObjectId)>| e.filter(|(m, _)| *m != Mode::Tree);
        let (lt, rt) = (tree_of(l), tree_of(r));
        if lt.is_some() || rt.is_some() {
            diff_into(odb, lt.as_ref(), rt.as_ref(), &path, out)?;
        }
        let (lf, rf) = (file_of(l), file_of(r));
        if lf != rf {
            out.push((path, lf, rf));
        }
    }
    Ok(())
}

/// Writes the trees of the `dirty` directories (`""` is the root, others `a/b`; every directory above a
/// dirty one is dirty) from `files`, every tracked file with its entry, reusing `old`'s id for every other
/// directory. Returns the root and the id of every directory of the new tree. Unlike `write_flat_reusing`
/// it needs no sorted copy of the snapshot: only the files of dirty directories are gathered.
pub fn write_dirty<'p>(
    odb: &Odb,
    files: impl Iterator<Item = (&'p str, Entry)>,
    old: &HashMap<String, ObjectId>,
    dirty: &HashSet<String>,
) -> GitResult<(ObjectId, HashMap<String, ObjectId>)> {
    let parent_of = |path: &'p str| path.rsplit_once('/').unwrap_or(("", path));
    let mut children: HashMap<&str, Vec<(&str, Mode, ObjectId)>> = HashMap::new();
    // Files come grouped by directory (the stat cache's walk order): one lookup per run of a directory.
    let mut last: Option<(&str, Option<&String>)> = None;
    for (path, (mode, id)) in files {
        let (parent, name) = parent_of(path);
        let dirty_dir = match last {
            Some((last_parent, dir)) if last_parent == parent => dir,
            _ => {
                let dir = dirty.get(parent);
                last = Some((parent, dir));
                dir
            }
        };
        if let Some(dir) = dirty_dir {
            children
                .entry(dir.as_str())
                .or_default()
                .push((name, mode, id));
        }
    }
    // The sub-directories of each dirty directory: those of the old tree, and the dirty ones (new or not).
    let mut subdirs: HashMap<&str, BTreeSet<&str>> = HashMap::new();
    for dir in old.keys().chain(dirty.iter()) {
        if dir.is_empty() {
            continue;
        }
        let parent = dir.rsplit_once('/').map_or("", |(parent, _)| parent);
        if let Some(parent) = dirty.get(parent) {
            subdirs.entry(parent.as_str()).or_default().insert(dir);
        }
    }
    // Deepest first, so every dirty sub-directory is written before its parent.
    let mut order: Vec<&String> = dirty.iter().collect();
    order.sort_by_key(|dir| {
        std::cmp::Reverse(if dir.is_empty() {
            0
        } else {
            dir.matches('/').count() + 1
        })
    });
    let mut built: HashMap<&str, Option<ObjectId>> = HashMap::with_capacity(order.len());
    for dir in order {
        let mut entries = children.remove(dir.as_str()).unwrap_or_default();
        for sub in subdirs.get(dir.as_str()).into_iter().flatten() {
            let id = if dirty.contains(*sub) {
                built.get(sub).copied().flatten()
            } else {
                old.get(*sub).copied()
            };
            if let Some(id) = id {
                let name = sub.rsplit_once('/').map_or(*sub, |(_, name)| name);
                entries.push((name, Mode::Tree, id));
            }
        }
        let id = if entries.is_empty() {
            None
        } else {
            Some(write_entries(odb, entries)?)
        };
        built.insert(dir.as_str(), id);
    }
    let root = match (built.get("").copied(), old.get("")) {
        (Some(Some(id)), _) => id,
        (None, Some(id)) => *id,
        _ => odb.write_buf(Kind::Tree, &[])?,
    };
    let mut dirs = old.clone();
    for (dir, id) in built {
        match id {
            Some(id) => dirs.insert(dir.to_owned(), id),
            None => dirs.remove(dir),
        };
    }
    dirs.insert(String::new(), root);
    Ok((root, dirs))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `mark_dirty` stops at the first parent already marked, and still marks every parent of every path
    /// and the root, in any order of paths.
    #[test]
    fn mark_dirty_marks_every_parent_in_any_order() {
        let paths = [
            "a/b/c/file",
            "a/b/other",
            "a/x/y/z",
            "top",
            "a/b/c/d/e/deep",
            "q/r",
        ];
        let mut expected = HashSet::from([String::new()]);
        for path in paths {
            for (i, _) in path.match_indices('/') {
                expected.insert(path[..i].to_owned());
            }
        }
        for order in [paths.to_vec(), paths.iter().rev().copied().collect()] {
            let mut dirty = HashSet::new();
            for path in order {
                mark_dirty(&mut dirty, path);
            }
            assert_eq!(dirty, expected);
        }
        let mut only_root = HashSet::new();
        mark_dirty(&mut only_root, "file");
        assert_eq!(only_root, HashSet::from([String::new()]));
    }

    fn blob(odb: &Odb, text: &str) -> Entry {
        let id = odb
            .write_buf(Kind::Blob, text.as_bytes())
            .expect("write a blob");
        (Mode::File, id)
    }

    fn write(odb: &Odb, flat: &Flat) -> ObjectId {
        write_flat_reusing(odb, flat, &HashMap::new(), &HashSet::new())
            .expect("write a tree")
            .0
    }

    /// `flat` with `changes` applied in order: a path set to a file takes the place of every file below
    /// it; a removal removes that path only.
    fn edited_flat(flat: &Flat, changes: &[(String, Option<Entry>)]) -> Flat {
        let mut expected = flat.clone();
        for (path, entry) in changes {
            match entry {
                Some(entry) => {
                    let below = format!("{path}/");
                    expected.retain(|p, _| !p.starts_with(&below));
                    expected.insert(path.clone(), *entry);
                }
                None => {
                    expected.remove(path);
                }
            }
        }
        expected
    }

    /// `edit` gives the tree of the edited flat form, and `diff_trees` the paths that differ, for files
    /// replaced by directories and back, removals that empty a directory, and removals of nothing.
    #[test]
    fn edit_and_diff_agree_with_the_flat_form() {
        let temp = tempfile::tempdir().expect("a temporary directory");
        let odb = Odb::new(temp.path().join("objects"));
        let mut flat = Flat::new();
        for path in ["a/b/c.txt", "a/b/d.txt", "a/e", "f", "g/h/i", "z"] {
            flat.insert(path.to_owned(), blob(&odb, path));
        }
        let base = write(&odb, &flat);
        let x = blob(&odb, "x");
        let changes: Vec<(String, Option<Entry>)> = vec![
            ("a/b/c.txt".to_owned(), Some(x)),
            ("a/e".to_owned(), None),
            ("a/e/new".to_owned(), Some(x)),
            ("g/h".to_owned(), Some(x)),
            ("z".to_owned(), None),
            ("missing/file".to_owned(), None),
            ("f".to_owned(), None),
            ("f/under".to_owned(), Some((Mode::Exec, x.1))),
            ("a/b/d.txt".to_owned(), None),
            ("new/dir/file".to_owned(), Some(x)),
            ("new/dir/file".to_owned(), None),
        ];
        let expected = edited_flat(&flat, &changes);
        let (edited, _) = edit(&odb, &base, &changes).expect("edit");
        assert_eq!(edited, write(&odb, &expected));
        // The same tree written again from the files, only the changed directories dirty.
        let (_, old_dirs) = read_flat_with_dirs(&odb, &base).expect("read base");
        let mut dirty = HashSet::new();
        for path in flat.keys().chain(expected.keys()) {
            if flat.get(path) != expected.get(path) {
                mark_dirty(&mut dirty, path);
            }
        }
        let files = expected.iter().map(|(p, e)| (p.as_str(), *e));
        let (rewritten, dirs) = write_dirty(&odb, files, &old_dirs, &dirty).expect("write_dirty");
        assert_eq!(rewritten, edited);
        assert_eq!(
            dirs,
            read_flat_with_dirs(&odb, &edited).expect("read back").1
        );
        assert_eq!(read_flat(&odb, &edited).expect("read back"), expected);

        let diff = diff_trees(&odb, &base, &edited).expect("diff");
        let mut paths: Vec<String> = flat.keys().chain(expected.keys()).cloned().collect();
        paths.sort();
        paths.dedup();
        let want: Vec<Change> = paths
            .into_iter()
            .map(|p| {
                let (a, b) = (flat.get(&p).copied(), expected.get(&p).copied());
                (p, a, b)
            })
            .filter(|(_, a, b)| a != b)
            .collect();
        assert_eq!(diff, want);
        assert!(diff_trees(&odb, &base, &base).expect("diff").is_empty());

        let mut lazy = LazyTree::new(&odb, edited);
        assert_eq!(lazy.get("a/e/new").expect("get"), Some(x));
        assert_eq!(lazy.get("a/e").expect("get"), None);
        assert!(lazy.holds("a/e").expect("holds"));
        assert!(!lazy.holds("missing").expect("holds"));
    }

    /// A snapshot read lazily finds a file and a directory by their kind, leaves a submodule link out, and
    /// fails on a tree whose bytes do not decode, also past the entry looked up (a tree is checked whole
    /// when it is read, as when it was decoded into owned entries).
    #[test]
    fn a_lazy_tree_finds_entries_by_kind_and_fails_on_a_tree_that_does_not_decode() {
        let temp = tempfile::tempdir().expect("a temporary directory");
        let odb = Odb::new(temp.path().join("objects"));
        let file = blob(&odb, "file");
        let mut inner = Vec::new();
        inner.extend_from_slice(b"100644 f\0");
        inner.extend_from_slice(file.1.as_bytes());
        let inner = odb.write_buf(Kind::Tree, &inner).expect("a tree");
        let entry = |out: &mut Vec<u8>, mode: &str, name: &str, id: &ObjectId| {
            out.extend_from_slice(format!("{mode} {name}\0").as_bytes());
            out.extend_from_slice(id.as_bytes());
        };
        let mut root = Vec::new();
        entry(&mut root, "100755", "a", &file.1);
        entry(&mut root, "40000", "d", &inner);
        entry(&mut root, "160000", "sub", &file.1);
        entry(&mut root, "100600", "odd", &file.1);
        let root = odb.write_buf(Kind::Tree, &root).expect("a tree");
        let mut lazy = LazyTree::new(&odb, root);
        assert_eq!(lazy.get("a").expect("get"), Some((Mode::Exec, file.1)));
        assert_eq!(lazy.get("d").expect("get"), None, "a directory is no file");
        assert_eq!(lazy.get("d/f").expect("get"), Some(file));
        assert!(lazy.holds("d").expect("holds"));
        assert_eq!(lazy.get("sub").expect("get"), None, "a submodule link");
        assert!(!lazy.holds("sub").expect("holds"));
        assert_eq!(
            lazy.get("odd").expect("get"),
            None,
            "a mode git does not track"
        );
        assert_eq!(
            lazy.get("a/f").expect("get"),
            None,
            "a file is no directory"
        );

        // The first entry decodes, the second is cut short.
        let mut cut = Vec::new();
        entry(&mut cut, "100644", "a", &file.1);
        cut.extend_from_slice(b"100644 b\0abc");
        let cut = odb.write_buf(Kind::Tree, &cut).expect("a tree");
        let mut lazy = LazyTree::new(&odb, cut);
        assert!(matches!(lazy.get("a"), Err(GitError::Corrupt(_))));
        assert!(
            matches!(lazy.get("a"), Err(GitError::Corrupt(_))),
            "and again: the tree is not kept as read"
        );
    }

    /// An edit read ahead along some paths (more than it changes, and fewer) gives the tree of the edited
    /// flat form, for a file replaced by a directory and a directory by a file, removals that empty
    /// directories and removals of nothing; the id of every directory it wrote or read is that directory's
    /// in the tree read back, every directory above a change among them (a directory read ahead and not
    /// changed has its id in the base). An edit that changes nothing gives the base, an empty base
    /// included, and one that removes every file gives the empty tree.
    #[test]
    fn an_edit_read_ahead_gives_the_edited_tree_and_the_ids_of_its_directories() {
        let temp = tempfile::tempdir().expect("a temporary directory");
        let odb = Odb::new(temp.path().join("objects"));
        let mut flat = Flat::new();
        for path in [
            "a/b/c.txt",
            "a/b/d.txt",
            "a/e",
            "f",
            "g/h/i",
            "k/l/m",
            "q/r/s",
            "z",
        ] {
            flat.insert(path.to_owned(), blob(&odb, path));
        }
        let base = write(&odb, &flat);
        let x = blob(&odb, "x");
        let changes: Vec<(String, Option<Entry>)> = vec![
            ("a/b/c.txt".to_owned(), Some(x)),
            ("a/e".to_owned(), None),
            ("f/under".to_owned(), Some(x)),
            ("g/h/i".to_owned(), None),
            ("q".to_owned(), Some(x)),
            ("z/nothing".to_owned(), None),
            ("nowhere/x".to_owned(), None),
            ("new/file".to_owned(), Some(x)),
        ];
        let mut expected = edited_flat(&flat, &changes);
        // Every path above a file replaced by a directory goes too (`f` before `f/under`).
        expected.remove("f");
        let want = write(&odb, &expected);
        let (_, want_dirs) = read_flat_with_dirs(&odb, &want).expect("read back");
        // `k/l/m` and `missing/x` are read ahead and not changed; `new/file` is changed and not read ahead.
        let ahead = [
            "a/b/c.txt",
            "a/e",
            "g/h/i",
            "k/l/m",
            "missing/x",
            "f/under",
            "q/r/s",
        ];
        let mut read_ahead = Edit::read(&odb, &base, ahead).expect("read ahead");
        read_ahead.apply(&odb, &changes).expect("apply");
        let (got, dirs) = read_ahead.write(&odb).expect("write");
        assert_eq!(got, want);
        assert_eq!(read_flat(&odb, &got).expect("read back"), expected);
        for (dir, id) in &dirs {
            assert_eq!(want_dirs.get(dir), Some(id), "directory {dir:?}");
        }
        let mut dirty = HashSet::new();
        for (path, _) in &changes {
            mark_dirty(&mut dirty, path);
        }
        // `g/h` and `g` were emptied, and `q/r` replaced by the file `q`, so they are gone; every other
        // directory above a change has its id.
        dirty.retain(|d| want_dirs.contains_key(d));
        assert!(
            dirty.iter().all(|d| dirs.contains_key(d)),
            "{dirty:?} in {dirs:?}"
        );
        for gone in ["g/h", "g", "q", "q/r"] {
            assert!(!dirs.contains_key(gone), "{gone}");
        }
        // Read ahead and not changed: its id is the base's.
        let (_, base_dirs) = read_flat_with_dirs(&odb, &base).expect("read base");
        assert_eq!(dirs.get("k/l"), base_dirs.get("k/l"));
        assert!(dirs.contains_key("k/l"));

        // Nothing changed: the base itself; an empty base too.
        let unchanged = Edit::read(&odb, &base, ahead).expect("read ahead");
        assert_eq!(unchanged.write(&odb).expect("write").0, base);
        let empty = write(&odb, &Flat::new());
        let mut nothing = Edit::read(&odb, &empty, ["a/b"]).expect("read the empty tree");
        nothing
            .apply(&odb, &[("a/b".to_owned(), None)])
            .expect("apply");
        assert_eq!(nothing.write(&odb).expect("write").0, empty);
        // Every file removed: the empty tree.
        let mut all = Edit::read(&odb, &base, []).expect("read");
        let removals: Vec<(String, Option<Entry>)> =
            flat.keys().map(|p| (p.clone(), None)).collect();
        all.apply(&odb, &removals).expect("apply");
        assert_eq!(all.write(&odb).expect("write").0, empty);
    }

    /// Entries come out in git's order, a tree sorting as if its name ended with '/': the tree id is the
    /// one `git mktree` (which sorts for itself) gives the same entries.
    #[test]
    fn entries_are_written_in_gits_order() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let init = std::process::Command::new("git")
            .args(["init", "-q", "--bare"])
            .arg(dir.path())
            .status()
            .expect("run git init");
        assert!(init.success());
        let odb = Odb::new(dir.path().join("objects"));
        let (_, file) = blob(&odb, "x");
        let sub = odb.write_buf(Kind::Tree, &[]).expect("write a tree");
        let entries = vec![
            ("a0", Mode::File, file),
            ("a", Mode::Tree, sub),
            ("a.b", Mode::File, file),
            ("a-b", Mode::Exec, file),
            ("ab", Mode::Tree, sub),
            ("a.", Mode::File, file),
            ("b", Mode::Link, file),
        ];
        let ours = write_entries(&odb, entries.clone()).expect("write the tree");
        let listing: String = entries
            .iter()
            .map(|(name, mode, id)| {
                let kind = if *mode == Mode::Tree { "tree" } else { "blob" };
                format!("{} {kind} {id}\t{name}\n", mode.as_str())
            })
            .collect();
        let mut git = std::process::Command::new("git")
            .args(["mktree", "--missing"])
            .env("GIT_DIR", dir.path())
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("run git mktree");
        use std::io::Write as _;
        git.stdin
            .take()
            .expect("stdin")
            .write_all(listing.as_bytes())
            .expect("write to git");
        let out = git.wait_with_output().expect("git mktree");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(
            ours.to_string(),
            String::from_utf8_lossy(&out.stdout).trim()
        );
    }
}
