//! Seeding the first snapshot of a committed repository from the user's index and objects (SPEC 2.1), so
//! a first track does not hash files git already hashed.
//!
//! Two rules keep it exact and make it survive whatever the user does to their repository later:
//! 1. Every object a snapshot needs is owned by the store before the snapshot id is returned: loose
//!    objects are hardlinked (copied across filesystems) into the store, and packs holding needed objects
//!    are hardlinked whole. Git never rewrites such files in place; `git gc` or a history rewrite unlinks
//!    them, which leaves the store's links intact. An object that cannot be adopted is hashed from disk.
//! 2. Nothing is seeded when the user's index may differ from the bytes on disk while the stat data
//!    matches: a repository setting `core.autocrlf`, `core.fileMode=false` or `core.symlinks=false`, or any
//!    attributes file that mentions a filter, `text`, `eol`, `crlf`, `ident` or `working-tree-encoding`
//!    (checked by keyword, as bytes: conservative, never wrong; an ignored `.gitattributes` counts, as git
//!    applies it, and one that cannot be read counts as mentioning them), or any `.gitattributes` the
//!    index holds and the disk does not (git applies the index's copy then), or attributes read from a
//!    tree (`attr.tree`, `GIT_ATTR_SOURCE`). An entry git "racily smudged"
//!    (size 0) is believed only for the empty blob, and a file over the size cap is skipped as it would be
//!    if hashed.

use std::collections::{BTreeMap, HashSet};
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use gix::ObjectId;
use gix::hashtable::HashSet as IdSet;

use crate::ignore::Enclosing;
use crate::odb::Odb;
use crate::track::IndexStat;
use crate::tree::Mode;

/// Words whose presence in an attributes file turns seeding off.
const FILTER_WORDS: &[&str] = &[
    "filter",
    "text",
    "eol",
    "crlf",
    "ident",
    "working-tree-encoding",
];

/// True when an attributes file's text may ask for a conversion between the index and the disk (git
/// reads it as bytes: a file that is not UTF-8 is searched as bytes too).
pub fn mentions_filters(text: &[u8]) -> bool {
    FILTER_WORDS
        .iter()
        .any(|word| text.windows(word.len()).any(|w| w == word.as_bytes()))
}

/// `mentions_filters` of an attributes file: absent mentions none; one that is not a regular file (a
/// symlink is not followed, as git does not for in-tree attributes) or cannot be read may mention anything.
pub fn file_mentions_filters(path: &Path) -> bool {
    match fs::symlink_metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => false,
        Ok(meta) if meta.is_file() => attributes_file_forbids(path),
        _ => true,
    }
}

struct IndexEntry {
    mode: Mode,
    id: ObjectId,
    mtime: (u32, u32),
    ctime: (u32, u32),
    ino: u32,
    uid: u32,
    gid: u32,
    size: u32,
}

/// The user's index entries by worktree path, in the stat cache's path map (every path in one string,
/// no allocation per entry: a first track of a 100,000-file repository builds this once and asks it once
/// per file; with a map of owned paths, that first track of a packed repository took 285 ms against 261,
/// medians of 5 runs of `snapshot_bench child track`, and 4 MB more). An index holds each path once at
/// stage 0, the only entries kept.
type Entries = crate::path_map::PathMap<IndexEntry>;

/// The user's index, as far as it may answer for files of the worktree.
pub struct Seed {
    entries: Entries,
    /// The index file's modification time: entries modified in its second or after it are racy.
    index_mtime: (i64, i64),
    /// The user's objects directory.
    objects: PathBuf,
}

impl Seed {
    /// The seed for a worktree in `repo` (`prefix` is the worktree relative to the repository root), or
    /// none when the repository's settings or attributes outside the worktree forbid it or its index cannot
    /// be read. The attributes files inside the worktree are the caller's to check (the walk reads them).
    pub fn load(repo: &Enclosing, prefix: &str) -> Option<Seed> {
        // A system configuration file that cannot be read may set anything, and so may
        // `GIT_CONFIG_PARAMETERS`, the settings `git -c` hands to the programs it runs (an alias, a
        // hook), which gix does not read (config review: a clean filter named there was not seen).
        if std::env::var_os("GIT_CONFIG_PARAMETERS").is_some_and(|v| !v.is_empty()) {
            return None;
        }
        let system = crate::git_config::system_configs().ok()?;
        if !settings_allow(repo, &system) || attributes_forbid(repo, prefix, &system) {
            return None;
        }
        let index_path = repo.git_dir.join("index");
        // Only a regular file is opened: a FIFO put there would be waited on for good.
        let meta = fs::metadata(&index_path)
            .ok()
            .filter(fs::Metadata::is_file)?;
        let index = gix::index::File::at(
            &index_path,
            gix::hash::Kind::Sha1,
            false,
            Default::default(),
        )
        .ok()?;
        let mut entries = Entries::with_capacity(index.entries().len(), index.path_backing().len());
        for entry in index.entries() {
            // An attributes file the index holds and the disk does not: git applies the index's copy
            // when it adds files, so it may ask for a filter no walk of the disk sees.
            let path = entry.path(&index);
            if (path == ".gitattributes" || path.ends_with(b"/.gitattributes"))
                && !is_on_disk(&repo.root, path)
            {
                return None;
            }
            if entry.flags.stage_raw() != 0
                || entry.flags.intersects(
                    gix::index::entry::Flags::INTENT_TO_ADD
                        | gix::index::entry::Flags::SKIP_WORKTREE,
                )
            {
                continue;
            }
            let mode = match entry.mode {
                gix::index::entry::Mode::FILE => Mode::File,
                gix::index::entry::Mode::FILE_EXECUTABLE => Mode::Exec,
                gix::index::entry::Mode::SYMLINK => Mode::Link,
                _ => continue,
            };
            let Ok(path) = std::str::from_utf8(path) else {
                continue;
            };
            let Some(rel) = path.strip_prefix(prefix) else {
                continue;
            };
            entries.push_new(
                rel,
                IndexEntry {
                    mode,
                    id: entry.id,
                    mtime: (entry.stat.mtime.secs, entry.stat.mtime.nsecs),
                    ctime: (entry.stat.ctime.secs, entry.stat.ctime.nsecs),
                    ino: entry.stat.ino,
                    uid: entry.stat.uid,
                    gid: entry.stat.gid,
                    size: entry.stat.size,
                },
            );
        }
        // Built here, beside the walk, not by the first file the walk asks about.
        entries.prepare_lookups();
        Some(Seed {
            entries,
            index_mtime: (meta.mtime(), meta.mtime_nsec()),
            objects: repo.common_dir.join("objects"),
        })
    }

    /// The blob id the user's index records for `rel`, when its stat data matches the file on disk as git
    /// would check it and the entry is not racy.
    pub fn lookup(&self, rel: &str, seen: &IndexStat, mode: Mode) -> Option<ObjectId> {
        let entry = self.entries.get(rel)?;
        // Racy from the index's second on, as git (built without `USE_NSEC`) judges it: a file written
        // again within the timestamp tick of an entry's `git add`, in the second the index was written,
        // keeps the entry's stat data with other content. Judged by the later of the entry's modification
        // and status change times, as the stat cache judges its entries: a file whose modification time
        // was set back (`cp -p`, `touch -d`) after the entry was taken, in the same second, keeps both
        // where timestamps are whole seconds (the stat-cache fuzz, on an ext4 with 128-byte inodes).
        let racy = i64::from(entry.mtime.0.max(entry.ctime.0)) >= self.index_mtime.0;
        let matches = entry.mode == mode
            && seen.has_size(entry.size)
            && entry.mtime == seen.mtime
            && entry.ctime == seen.ctime
            && entry.ino == seen.ino
            && entry.uid == seen.uid
            && entry.gid == seen.gid;
        // git marks an entry it found racy and changed by writing its size as 0 ("racily smudged"): a
        // size 0 is believed only for the empty blob.
        let smudged = entry.size == 0 && entry.id != ObjectId::empty_blob(gix::hash::Kind::Sha1);
        (matches && !racy && !smudged).then_some(entry.id)
    }

    /// The blob id the user's index records for `rel` as `mode` when the file may still be that blob
    /// although `lookup` does not believe its stat data (racy, or smudged by git to size 0): the id to
    /// compare with the file's own hash. An entry of another size is not offered: seeding runs only
    /// without filters, so the recorded size is the blob's, and a file of another size was edited since.
    pub fn recorded(&self, rel: &str, seen: &IndexStat, mode: Mode) -> Option<ObjectId> {
        self.entries
            .get(rel)
            .filter(|entry| entry.mode == mode && (entry.size == 0 || seen.has_size(entry.size)))
            .map(|entry| entry.id)
    }

    /// Makes the store own `ids`: hardlinks (or copies) the user's packs that hold any of them, whole, and
    /// the user's loose objects for the rest. Returns the ids the store now holds (the others must be
    /// hashed from disk) and the indexes of the packs it linked.
    pub fn adopt(&self, odb: &Odb, ids: &IdSet) -> Adopted {
        // Packs first: a cloned or collected repository holds (nearly) everything in a few packs, one link
        // each, where trying a loose link per object first would fail once per object.
        let (mut owned, packs) = self.adopt_packs(odb, ids);
        let adopted = |owned| Adopted { owned, packs };
        let loose: Vec<ObjectId> = ids
            .iter()
            .filter(|id| !owned.contains(*id))
            .copied()
            .collect();
        if loose.is_empty() {
            return adopted(owned);
        }
        // Loose objects: one hardlink each, on a few threads (the fan-out directories made first).
        let mut fanout = HashSet::new();
        for id in &loose {
            if let Some(dir) = odb.path_of(id).parent() {
                fanout.insert(dir.to_path_buf());
            }
        }
        for dir in fanout {
            let _ = fs::create_dir_all(dir);
        }
        let linked = crate::track::parallel_map(&loose, |id| {
            let hex = id.to_string();
            let source = self.objects.join(&hex[..2]).join(&hex[2..]);
            Ok(link_or_copy(&source, &odb.path_of(id)))
        })
        .unwrap_or_else(|_| vec![false; loose.len()]);
        owned.extend(
            loose
                .iter()
                .zip(linked)
                .filter(|(_, linked)| *linked)
                .map(|(id, _)| *id),
        );
        adopted(owned)
    }

    /// Links into the store every pack of the user's that holds any of `wanted` (the pack first, its
    /// index last); returns the wanted ids those packs hold, and the store's indexes of those packs.
    fn adopt_packs(&self, odb: &Odb, wanted: &IdSet) -> (IdSet, Vec<PathBuf>) {
        let mut covered = IdSet::default();
        let mut linked_indexes = Vec::new();
        let Ok(entries) = fs::read_dir(self.objects.join("pack")) else {
            return (covered, linked_indexes);
        };
        let mut sources = Vec::new();
        let target_dir = odb.dir().join("pack");
        let mut linked = false;
        for entry in entries.flatten() {
            let path = entry.path();
            if path.extension().is_none_or(|e| e != "idx") {
                continue;
            }
            let Ok(index) = gix::odb::pack::index::File::at(&path, gix::hash::Kind::Sha1) else {
                continue;
            };
            let held: Vec<ObjectId> = wanted
                .iter()
                .filter(|id| !covered.contains(*id) && index.lookup(*id).is_some())
                .copied()
                .collect();
            if held.is_empty() {
                continue;
            }
            let pack = path.with_extension("pack");
            let (Some(idx_name), Some(pack_name)) = (path.file_name(), pack.file_name()) else {
                continue;
            };
            if fs::create_dir_all(&target_dir).is_err() {
                break;
            }
            // The pack first, its index last: a store never sees an index without its pack.
            if link_or_copy(&pack, &target_dir.join(pack_name))
                && link_or_copy(&path, &target_dir.join(idx_name))
            {
                linked = true;
                covered.extend(held);
                linked_indexes.push(target_dir.join(idx_name));
                sources.push((pack_name.to_owned(), pack.clone()));
            }
        }
        if linked {
            odb.packs_changed();
            note_pack_sources(odb, &sources);
        }
        (covered, linked_indexes)
    }
}

/// The file beside a store's objects that names the user's pack each seeded pack was linked from:
/// gc's test of whether the user still has it (`pack_source_holds`).
fn pack_sources_path(odb: &Odb) -> Option<PathBuf> {
    odb.dir()
        .parent()
        .map(|store| store.join("rewind").join("seeded-packs"))
}

/// The user's packs the store's seeded packs were linked from, by the store's pack's file name.
pub fn pack_sources(odb: &Odb) -> BTreeMap<String, PathBuf> {
    pack_sources_path(odb)
        .and_then(|path| fs::read(path).ok())
        .and_then(|data| serde_json::from_slice(&data).ok())
        .unwrap_or_default()
}

/// Notes the user's pack each of `linked` (the store's pack's file name, the user's pack) came from. Not
/// noted (a path that is not UTF-8, a write that fails), a pack counts as the user's while it has another
/// name, as before the note existed.
fn note_pack_sources(odb: &Odb, linked: &[(std::ffi::OsString, PathBuf)]) {
    let Some(path) = pack_sources_path(odb) else {
        return;
    };
    let mut sources = pack_sources(odb);
    for (name, source) in linked {
        if let Some(name) = name.to_str()
            && source.to_str().is_some()
        {
            sources.insert(name.to_owned(), source.clone());
        }
    }
    if let Ok(data) = serde_json::to_vec(&sources) {
        let _ = crate::store::write_atomically(&path, &data);
    }
}

/// Whether the user's repository still has seeded pack `pack` (the store's file): the pack it was linked
/// from is still there, the same file. A pack with no note counts as the user's while it has another name
/// (a store seeded before the note existed). Any other name (a `git clone` that hardlinked the user's
/// objects, another store seeded from the same pack, a backup made with links) keeps no pack the user
/// has purged from the store (review: its purged history, secrets among it, stayed for good).
pub fn pack_source_holds(sources: &BTreeMap<String, PathBuf>, pack: &Path) -> bool {
    use std::os::unix::fs::MetadataExt as _;
    let Ok(ours) = fs::metadata(pack) else {
        return false;
    };
    if ours.nlink() < 2 {
        return false;
    }
    let noted = pack
        .file_name()
        .and_then(|name| name.to_str())
        .and_then(|name| sources.get(name));
    match noted {
        None => true,
        Some(source) => fs::metadata(source)
            .is_ok_and(|theirs| theirs.dev() == ours.dev() && theirs.ino() == ours.ino()),
    }
}

/// What `Seed::adopt` made the store own.
pub struct Adopted {
    /// The ids the store now holds.
    pub owned: IdSet,
    /// The store's indexes of the user's packs it linked.
    pub packs: Vec<PathBuf>,
}

/// Hardlinks `from` to `to`, copying when a link is impossible (another filesystem); true when `to` exists.
fn link_or_copy(from: &Path, to: &Path) -> bool {
    match fs::hard_link(from, to) {
        Ok(()) => return true,
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => return to.is_file(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            if !from.exists() {
                return false;
            }
            if let Some(dir) = to.parent() {
                let _ = fs::create_dir_all(dir);
            }
            if fs::hard_link(from, to).is_ok() {
                return true;
            }
        }
        Err(_) => {}
    }
    // Another filesystem (or links refused): copy, then rename into place.
    let tmp = to.with_extension(format!("tmp-{}", crate::odb::rand_suffix()));
    let copied = fs::copy(from, &tmp).is_ok() && fs::rename(&tmp, to).is_ok();
    if !copied {
        let _ = fs::remove_file(&tmp);
    }
    copied
}

/// Whether `path` (relative to `root`) stands on disk as a regular file, as git reads an in-tree
/// attributes file before the index's copy (a symlink there is not followed: git reads the index's then).
fn is_on_disk(root: &Path, path: &[u8]) -> bool {
    let path = root.join(<std::ffi::OsStr as std::os::unix::ffi::OsStrExt>::from_bytes(path));
    fs::symlink_metadata(path).is_ok_and(|meta| meta.is_file())
}

fn settings_allow(repo: &Enclosing, system: &[gix::config::File]) -> bool {
    // Attributes read from a tree (`GIT_ATTR_SOURCE` in rewind's environment here, `attr.tree` in any
    // configuration file below) instead of the worktree's files may ask for filters no walk of the disk
    // sees.
    if std::env::var_os("GIT_ATTR_SOURCE").is_some() {
        return false;
    }
    let Ok(user) = gix::open(&repo.found_at) else {
        return false;
    };
    let config = user.config_snapshot();
    let allows = |config: &gix::config::File| {
        let autocrlf = config
            .string("core.autocrlf")
            .map(|v| v.to_string().to_lowercase());
        let autocrlf_off = autocrlf.as_deref().is_none_or(|v| v == "false");
        autocrlf_off
            && config.string("attr.tree").is_none()
            && config.boolean("core.fileMode").ok().flatten() != Some(false)
            && config.boolean("core.symlinks").ok().flatten() != Some(false)
    };
    // Every system file the user's git may read too, each on its own (gix reads `/etc/gitconfig`; a git
    // installed elsewhere reads its own prefix's, seed review): any that asks for a conversion stops it.
    allows(config.plumbing()) && system.iter().all(allows)
}

/// True when an attributes file outside the worktree's tree may ask for conversions: the repository's
/// `info/attributes`, the `.gitattributes` files above a subdirectory worktree, the global and system ones.
fn attributes_forbid(repo: &Enclosing, prefix: &str, system: &[gix::config::File]) -> bool {
    let mut files = vec![repo.common_dir.join("info").join("attributes")];
    // Every system attributes file the user's git may read, and the attributes file each system
    // configuration file names (seed review: git built into `/usr/local` reads
    // `/usr/local/etc/gitattributes`, and a filter declared there was not seen).
    files.extend(crate::git_config::system_files("gitattributes"));
    let home = std::env::var_os("HOME").map(PathBuf::from);
    for config in system {
        if let Some(path) = config.path("core.attributesFile") {
            // One that cannot be resolved (`%(prefix)`, `~user`, no home) may name anything.
            match path.interpolate(gix::config::path::interpolate::Context {
                home_dir: home.as_deref(),
                ..Default::default()
            }) {
                Ok(path) => files.push(path),
                Err(_) => return true,
            }
        }
    }
    if let Some(config_home) = std::env::var_os("XDG_CONFIG_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".config")))
    {
        files.push(config_home.join("git").join("attributes"));
    }
    if let Ok(user) = gix::open(&repo.found_at)
        && let Ok(Some(path)) = user.config_snapshot().trusted_path("core.attributesFile")
    {
        files.push(path);
    }
    let mut dir = repo.root.clone();
    files.push(dir.join(".gitattributes"));
    for component in prefix
        .trim_end_matches('/')
        .split('/')
        .filter(|c| !c.is_empty())
    {
        dir.push(component);
        files.push(dir.join(".gitattributes"));
    }
    files.iter().any(|file| attributes_file_forbids(file))
}

/// An attributes file outside the tree: absent or naming no conversion lets seeding go on; one that
/// cannot be read may name anything. (A symlink is followed here, as git follows it for these files.)
fn attributes_file_forbids(file: &Path) -> bool {
    match crate::odb::read_regular(file, true) {
        Ok(text) => mentions_filters(&text),
        Err(e) => e.kind() != std::io::ErrorKind::NotFound,
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::MetadataExt;

    use super::*;

    /// Seeding's entries holding `entry` for `path` alone.
    fn one_entry(path: &str, entry: IndexEntry) -> Entries {
        let mut entries = Entries::default();
        entries.push_new(path, entry);
        entries
    }

    /// An entry of `mode`, `id` and `size` whose stat data is all zero.
    fn zeroed(mode: Mode, id: ObjectId, size: u32) -> IndexEntry {
        IndexEntry {
            mode,
            id,
            mtime: (0, 0),
            ctime: (0, 0),
            ino: 0,
            uid: 0,
            gid: 0,
            size,
        }
    }

    /// git writes the size of an entry it found racy and changed as 0 ("racily smudged"); with the rest of
    /// the stat data matching an empty file, such an entry is believed only when its blob is the empty one.
    /// `recorded` offers an entry's blob for confirming by hash only when the file may still be it: the
    /// same size, or an entry git smudged to size 0; never for another mode.
    #[test]
    fn recorded_offers_only_entries_the_file_may_still_be() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let path = dir.path().join("f.txt");
        fs::write(&path, b"hello\n").expect("a file");
        let seen =
            crate::track::Seen::from_std(fs::symlink_metadata(&path).expect("stat")).as_in_index();
        let id = ObjectId::from_hex(b"ce013625030ba8dba906f756967f9e9ca394464a").expect("an id");
        let seed = |size: u32, mode: Mode| Seed {
            entries: one_entry("f.txt", zeroed(mode, id, size)),
            index_mtime: (0, 0),
            objects: PathBuf::new(),
        };
        assert_eq!(
            seed(6, Mode::File).recorded("f.txt", &seen, Mode::File),
            Some(id)
        );
        assert_eq!(
            seed(0, Mode::File).recorded("f.txt", &seen, Mode::File),
            Some(id)
        );
        assert_eq!(
            seed(7, Mode::File).recorded("f.txt", &seen, Mode::File),
            None
        );
        assert_eq!(
            seed(6, Mode::Exec).recorded("f.txt", &seen, Mode::File),
            None
        );
        assert_eq!(
            seed(6, Mode::File).recorded("other.txt", &seen, Mode::File),
            None
        );
    }

    /// The entries find every path seeding pushed, and no other; an entry set again replaces the one
    /// there.
    #[test]
    fn entries_find_every_path_pushed_and_an_entry_set_again_replaces_it() {
        let entry = |size: u32| {
            zeroed(
                Mode::File,
                ObjectId::empty_blob(gix::hash::Kind::Sha1),
                size,
            )
        };
        let mut entries = Entries::with_capacity(0, 0);
        for n in 0..5_000u32 {
            entries.push_new(&format!("d{}/f{n}.txt", n % 7), entry(n));
        }
        entries.prepare_lookups();
        entries.insert("d3/f3.txt", entry(99_999));
        for n in 0..5_000u32 {
            let want = if n == 3 { 99_999 } else { n };
            let found = entries.get(&format!("d{}/f{n}.txt", n % 7)).map(|e| e.size);
            assert_eq!(found, Some(want), "d{}/f{n}.txt", n % 7);
        }
        assert_eq!(entries.len(), 5_000);
        assert!(entries.get("d0/f1.txt").is_none());
        assert!(entries.get("").is_none());
    }

    #[test]
    fn a_racily_smudged_entry_is_believed_only_for_the_empty_blob() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let path = dir.path().join("e.txt");
        fs::write(&path, b"").expect("an empty file");
        let meta = fs::symlink_metadata(&path).expect("its stat data");
        let seed = |id: ObjectId| Seed {
            entries: one_entry(
                "e.txt",
                IndexEntry {
                    mode: Mode::File,
                    id,
                    mtime: (meta.mtime() as u32, meta.mtime_nsec() as u32),
                    ctime: (meta.ctime() as u32, meta.ctime_nsec() as u32),
                    ino: meta.ino() as u32,
                    uid: meta.uid(),
                    gid: meta.gid(),
                    size: 0,
                },
            ),
            // Written long after the entry: not racy.
            index_mtime: (i64::MAX, 0),
            objects: PathBuf::new(),
        };
        let hello = ObjectId::from_hex(b"ce013625030ba8dba906f756967f9e9ca394464a").expect("an id");
        let seen = crate::track::Seen::from_std(meta.clone()).as_in_index();
        assert_eq!(seed(hello).lookup("e.txt", &seen, Mode::File), None);
        let empty = ObjectId::empty_blob(gix::hash::Kind::Sha1);
        assert_eq!(seed(empty).lookup("e.txt", &seen, Mode::File), Some(empty));
    }

    /// A seed whose index holds `e.txt` as the empty file whose stat data is `meta`, but for its
    /// modification time `mtime`, in an index written at `index_mtime`.
    fn empty_file_seed(meta: &fs::Metadata, mtime: (u32, u32), index_mtime: (i64, i64)) -> Seed {
        Seed {
            entries: one_entry(
                "e.txt",
                IndexEntry {
                    mode: Mode::File,
                    id: ObjectId::empty_blob(gix::hash::Kind::Sha1),
                    mtime,
                    ctime: (meta.ctime() as u32, meta.ctime_nsec() as u32),
                    ino: meta.ino() as u32,
                    uid: meta.uid(),
                    gid: meta.gid(),
                    size: 0,
                },
            ),
            index_mtime,
            objects: PathBuf::new(),
        }
    }

    /// An entry modified in the second the index was written is racy, also when its nanoseconds are
    /// earlier than the index's (black-box: compared to the nanosecond, it was believed).
    #[test]
    fn an_entry_of_the_index_s_second_is_racy() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let path = dir.path().join("e.txt");
        fs::write(&path, b"").expect("an empty file");
        let meta = fs::symlink_metadata(&path).expect("its stat data");
        let empty = ObjectId::empty_blob(gix::hash::Kind::Sha1);
        let mtime = (meta.mtime() as u32, 100_000_000);
        let seed = |index_mtime| empty_file_seed(&meta, mtime, index_mtime);
        let mut seen = crate::track::Seen::from_std(meta.clone()).as_in_index();
        seen.mtime = mtime;
        assert_eq!(
            seed((meta.mtime(), 900_000_000)).lookup("e.txt", &seen, Mode::File),
            None
        );
        assert_eq!(
            seed((meta.mtime() + 1, 0)).lookup("e.txt", &seen, Mode::File),
            Some(empty)
        );
    }

    /// An entry whose modification time lies long before the index was written but whose status changed
    /// in the index's second is racy too: a file rewritten with its old modification time set back, in
    /// that second, keeps every stat field where timestamps are whole seconds.
    #[test]
    fn an_entry_whose_status_changed_in_the_index_s_second_is_racy() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let path = dir.path().join("e.txt");
        fs::write(&path, b"").expect("an empty file");
        let meta = fs::symlink_metadata(&path).expect("its stat data");
        let empty = ObjectId::empty_blob(gix::hash::Kind::Sha1);
        let old = (1_000_000_000, 0);
        let seed = |index_mtime| empty_file_seed(&meta, old, index_mtime);
        let mut seen = crate::track::Seen::from_std(meta.clone()).as_in_index();
        seen.mtime = old;
        assert_eq!(
            seed((meta.ctime(), 0)).lookup("e.txt", &seen, Mode::File),
            None,
            "changed in the index's second"
        );
        assert_eq!(
            seed((meta.ctime() + 1, 0)).lookup("e.txt", &seen, Mode::File),
            Some(empty),
            "changed before it"
        );
    }
}
