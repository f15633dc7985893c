//! The stat cache, like git's index: for every tracked file, the stat data seen when it was last hashed
//! and its blob id, so a re-track reads no content for files whose stat data is unchanged.
//!
//! A file modified, or whose status changed, within `RACY_MARGIN` before the cache was built is "racy" (the
//! change could fall in the same timestamp tick as our read) and is hashed again next time, as git does
//! for the modification time. The cache also keeps the tree id of every directory of the last snapshot, so
//! a re-track rewrites only the trees of directories that changed. The file ends with a CRC-32 of its
//! content; a cache that fails to parse or to verify is ignored (everything is hashed again, nothing wrong
//! is returned).
//!
//! It also holds the untracked cache (git's idea of the same name): for every directory the last walk
//! entered, its own stat data, a hash of the ignore rules that were in force for its entries, and its
//! listing (each name, its kind, and whether the rules ignored it). A directory's listing changes only
//! through its own entries being created, removed or renamed, which sets its mtime and ctime; so when the
//! directory's stat data is unchanged and not racy, its listing is reused without reading the directory, and
//! when the rules hash is unchanged too, so is which names are ignored. The files listed still get their own
//! lstat (their content can change without touching the directory).

use std::collections::{HashMap, HashSet};
use std::fs;
use std::ops::Range;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{LazyLock, Mutex, PoisonError};

use gix::ObjectId;

use crate::error::{GitError, GitResult};
use crate::path_map::{PathMap, StrList};
use crate::tree::{self, Mode, mark_dirty, write_dirty};

/// The file's format and meaning. 6: listings may name files that start with `.rewind-tmp-` without being
/// rewind's temporary files (a cache of 5 left them out, and would hide them while their directory stays
/// unchanged). 7: listings name a `.git` (ignored), which makes its directory a nested repository's root
/// with its own rules (a cache of 6 left it out, and would apply the enclosing rules there while the
/// directory stays unchanged).
const MAGIC: &[u8] = b"RWSTAT7\n";
/// The side file's format (see `SinceFile`). 2: the start time of the cache it leaves follows its generation
/// (a track writes its change there too, and moves the start time forward; a side file of 1 keeps the
/// file's).
const SIDE_MAGIC: &[u8] = b"RWSIDE2\n";
/// The side file's format before the start time was written in it.
const SIDE_MAGIC_1: &[u8] = b"RWSIDE1\n";
/// The side file grows with every operation until the next whole save; past this share of the entries,
/// the operation writes the whole file instead.
const SIDE_SHARE: usize = 4;
/// The fewest bytes an entry takes in the file: two one-byte lengths, an empty path, the mode, size, two
/// times, inode, device and blob id.
const MIN_ENTRY_BYTES: usize = 2 + 1 + 8 + 8 + 8 + 8 + 8 + 20;
/// How many stores' caches a process keeps in memory (see `MEMO`).
const MEMO_STORES: usize = 8;

/// The cache each store of this process last saved, or loaded and handed back unchanged, with the
/// generation its file holds: a load whose file still starts with that generation takes it from here
/// instead of parsing the file (a long-running server loads the same cache for every operation). Any
/// other process's save writes a new random generation. Each is kept with when it was last kept (a
/// count): when a store past `MEMO_STORES` comes, the one kept longest ago goes.
static MEMO: LazyLock<Mutex<Memo>> = LazyLock::new(Mutex::default);

#[derive(Default)]
struct Memo {
    caches: HashMap<PathBuf, (u64, StatCache)>,
    kept: u64,
}

impl Memo {
    /// Keeps `cache` as the one of `path`; when that makes more than `MEMO_STORES`, the cache kept longest
    /// ago goes (a server working on many worktrees keeps those it works on).
    fn keep(&mut self, path: &Path, cache: StatCache) {
        if self.caches.len() >= MEMO_STORES
            && !self.caches.contains_key(path)
            && let Some(oldest) = self
                .caches
                .iter()
                .min_by_key(|(_, (kept, _))| *kept)
                .map(|(path, _)| path.clone())
        {
            self.caches.remove(&oldest);
        }
        self.kept += 1;
        self.caches.insert(path.to_path_buf(), (self.kept, cache));
    }

    /// Takes the cache kept for `path`.
    fn take(&mut self, path: &Path) -> Option<StatCache> {
        self.caches.remove(path).map(|(_, cache)| cache)
    }
}
/// How close to the start of a track a modification counts as racy, in nanoseconds (covers filesystems
/// whose timestamps are as coarse as one second).
const RACY_MARGIN_NS: i128 = 1_000_000_000;

/// Whether something last changed at `changed_ns` is racy for a cache whose track began at `started_ns`:
/// its stat data then cannot tell a later change in the same clock tick, so it is read again. The change
/// is the later of the modification and the status change (`last_change_ns`): a program that sets an old
/// modification time back (`cp -p`, `rsync -t`, `tar`) cannot set the status change time, so an edit of
/// the same size within the tick of an earlier one is still caught where timestamps are whole seconds
/// (ext4 with 128-byte inodes, ext3, HFS+): by the modification time alone it was not (the tests, run on
/// such an ext4, where their backdated times fell into one second).
fn racy(changed_ns: i128, started_ns: i128) -> bool {
    changed_ns >= started_ns - RACY_MARGIN_NS
}

/// The stat data that decides whether a file must be hashed again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stat {
    /// File, executable or symlink.
    pub mode: Mode,
    /// Size in bytes.
    pub size: u64,
    /// Modification time, nanoseconds since the epoch.
    pub mtime_ns: i128,
    /// Status change time, nanoseconds since the epoch.
    pub ctime_ns: i128,
    /// Inode.
    pub ino: u64,
    /// Device.
    pub dev: u64,
}

impl Stat {
    /// The stat data of `meta` (from `symlink_metadata`) with the mode it is tracked as.
    pub fn of(meta: &fs::Metadata, mode: Mode) -> Stat {
        Stat {
            mode,
            size: meta.len(),
            mtime_ns: i128::from(meta.mtime()) * 1_000_000_000 + i128::from(meta.mtime_nsec()),
            ctime_ns: i128::from(meta.ctime()) * 1_000_000_000 + i128::from(meta.ctime_nsec()),
            ino: meta.ino(),
            dev: meta.dev(),
        }
    }

    /// The later of its modification and status change times (`racy`).
    pub fn last_change_ns(&self) -> i128 {
        self.mtime_ns.max(self.ctime_ns)
    }
}

impl Stat {
    /// The stat data of a file or symlink from rustix's `Stat`, with the mode it is tracked as (none for
    /// anything else).
    pub fn of_rustix(st: &rustix::fs::Stat) -> Option<Stat> {
        let seen = crate::track::Seen::from_rustix(st);
        seen.mode().map(|mode| seen.stat(mode))
    }
}

/// The stat data of a directory that decides whether its listing can be reused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DirStat {
    /// Modification time, nanoseconds since the epoch.
    pub mtime_ns: i128,
    /// Status change time, nanoseconds since the epoch.
    pub ctime_ns: i128,
    /// Inode.
    pub ino: u64,
    /// Device.
    pub dev: u64,
}

impl DirStat {
    /// The later of its modification and status change times (`racy`).
    pub fn last_change_ns(&self) -> i128 {
        self.mtime_ns.max(self.ctime_ns)
    }

    /// The stat data of a directory's `fstat`.
    pub fn of_rustix(stat: &rustix::fs::Stat) -> DirStat {
        DirStat {
            mtime_ns: i128::from(stat.st_mtime) * 1_000_000_000 + i128::from(stat.st_mtime_nsec),
            ctime_ns: i128::from(stat.st_ctime) * 1_000_000_000 + i128::from(stat.st_ctime_nsec),
            ino: stat.st_ino,
            dev: stat.st_dev,
        }
    }

    /// The stat data of a directory's `symlink_metadata`.
    pub fn of(meta: &fs::Metadata) -> DirStat {
        DirStat {
            mtime_ns: i128::from(meta.mtime()) * 1_000_000_000 + i128::from(meta.mtime_nsec()),
            ctime_ns: i128::from(meta.ctime()) * 1_000_000_000 + i128::from(meta.ctime_nsec()),
            ino: meta.ino(),
            dev: meta.dev(),
        }
    }
}

/// What a directory entry is, as far as the walk cares.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ListedKind {
    /// A regular file or a symlink (a candidate for tracking).
    File,
    /// A directory.
    Dir,
    /// A FIFO, socket or device (skipped and reported).
    Special,
}

/// One entry of a directory listing (its name is kept by the listing's `Names`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Listed<'a> {
    /// Its name (UTF-8: a directory holding any other name is never cached).
    pub name: &'a str,
    /// Its kind.
    pub kind: ListedKind,
    /// Whether the rules of `Listing::rules` ignore it (or it is the data dir).
    pub ignored: bool,
}

impl<'a> From<(&'a str, (ListedKind, bool))> for Listed<'a> {
    fn from((name, (kind, ignored)): (&'a str, (ListedKind, bool))) -> Self {
        Listed {
            name,
            kind,
            ignored,
        }
    }
}

/// A directory's entries in the order of their names' bytes (`Names::sort`), every name in one string
/// (`StrList`): a listing costs two allocations, not one per name (a cache of 100,000 files holds 100,000
/// names, parsed by every re-track in a new process).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Names(StrList<(ListedKind, bool)>);

impl Names {
    /// Room for `count` entries whose names take `bytes` in all.
    pub fn with_capacity(count: usize, bytes: usize) -> Names {
        Names(StrList::with_capacity(count, bytes))
    }

    pub fn push(&mut self, name: &str, kind: ListedKind, ignored: bool) {
        self.0.push(&[name], (kind, ignored));
    }

    /// The names in the order of their bytes, whatever order they were pushed in.
    pub fn sort(&mut self) {
        if !self.0.iter().is_sorted_by(|a, b| a.0 <= b.0) {
            self.0 = self.0.sorted();
        }
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The entry at position `at`.
    pub fn get(&self, at: usize) -> Option<Listed<'_>> {
        self.0.get(at).map(Listed::from)
    }

    pub fn iter(&self) -> impl Iterator<Item = Listed<'_>> {
        self.0.iter().map(Listed::from)
    }

    /// Sets whether the entry at position `at` is ignored.
    pub fn set_ignored(&mut self, at: usize, ignored: bool) {
        if let Some((_, was)) = self.0.value_mut(at) {
            *was = ignored;
        }
    }
}

/// The cached listing of one directory (the untracked cache).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Listing {
    /// The directory's stat data, taken before it was read.
    pub stat: DirStat,
    /// The hash of the ignore rules in force for its entries when they were matched.
    pub rules: [u8; 20],
    /// Its entries (`.git` and rewind's temporary files left out).
    pub entries: Names,
}

/// One cached file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CacheEntry {
    /// Its stat data when hashed.
    pub stat: Stat,
    /// Its blob.
    pub id: ObjectId,
}

impl CacheEntry {
    /// Whether this entry, in a cache written by a track that began at `cache_started_ns`, answers for a
    /// file whose stat data is now `stat`: the same, and not racy.
    pub fn answers(&self, stat: &Stat, cache_started_ns: i128) -> bool {
        self.stat == *stat && !racy(self.stat.last_change_ns(), cache_started_ns)
    }

    /// Whether a cache that a track starting at `started_ns` wrote would still count a file whose stat
    /// data is now `stat` as racy, with this entry's stat data: saving such a cache would teach the next
    /// track nothing.
    pub fn stays_racy(&self, stat: &Stat, started_ns: i128) -> bool {
        self.stat == *stat && racy(stat.last_change_ns(), started_ns)
    }
}

/// A path an operation wrote (with the written file's stat data and blob) or deleted (none).
pub type Applied = (String, Option<(Stat, ObjectId)>);

/// Whether every file of `changes` is racy for a cache whose track began at `started_ns`, as each file an
/// operation writes after that track is: the next track then reads it again, whatever its stat data says
/// (the operation learns only the file it wrote, but another program's write in the same clock tick would
/// show the same times). One that is not (a filesystem whose clock lags this one's) must not be learnt.
fn all_racy(changes: &[Applied], started_ns: i128) -> bool {
    changes
        .iter()
        .all(|(_, after)| after.is_none_or(|(stat, _)| racy(stat.last_change_ns(), started_ns)))
}

/// The cache: the last tracked tree and the stat data of its files.
#[derive(Clone, Debug, Default)]
pub struct StatCache {
    /// A random number written with it, new at every save (0: never saved or loaded).
    pub generation: u64,
    /// When the track that wrote it began, nanoseconds since the epoch.
    pub started_ns: i128,
    /// The tree that track returned.
    pub tree: Option<ObjectId>,
    /// Per worktree-relative path, in the order of the walk that wrote it.
    pub entries: PathMap<CacheEntry>,
    /// The tree id of every directory of `tree` (`""` is the root).
    pub dirs: HashMap<String, ObjectId>,
    /// The listing of every directory the last walk entered (`""` is the root, others end in `/`).
    pub listings: HashMap<String, Listing>,
    /// Whether `listings` may lack some of those its file holds: a copy kept in memory after a walk that
    /// did not take them all (`keep`). A track then writes the file whole, never to the side file, whose
    /// start time would judge those listings though no walk looked at them again (`save_in_place`).
    pub listings_partial: bool,
    /// What reverts, restores and tracks changed since the cache file was last written whole, when they
    /// were written to its side file instead (`generation` is then the side file's).
    pub since_file: Option<SinceFile>,
}

/// The paths and directories reverts, restores and tracks changed in the cache since its file was last
/// written whole: the side file (`side_path`) holds their entries and tree ids as they are now, the tree
/// and the start time, so the operation writes what it changed rather than every entry (9 MB at 100,000
/// files). A load applies the side file when it names the file's generation; a whole save removes it.
#[derive(Clone, Debug, Default)]
pub struct SinceFile {
    /// The generation of the cache file the side file applies to.
    file_generation: u64,
    /// That file's tree. gc keeps it as well: were the side file lost, the file's entries would be
    /// trusted again, and their blobs are reached from it.
    pub file_tree: Option<ObjectId>,
    /// The entry paths changed since (written, replaced or removed).
    paths: HashSet<String>,
    /// The directories whose tree ids changed since (set or removed).
    dirs: HashSet<String>,
}

impl SinceFile {
    /// Whether what changed is still a small enough share of a cache of `entries` entries to go to the
    /// side file (`SIDE_SHARE`).
    fn fits_side(&self, entries: usize) -> bool {
        (self.paths.len() + self.dirs.len()) * SIDE_SHARE <= entries
    }
}

impl StatCache {
    /// The blob of `path` when its stat data is unchanged and it is not racy, looked for first at position
    /// `hint` of the entries; with the position it was found at.
    pub fn fresh_near(&self, hint: usize, path: &str, stat: &Stat) -> Option<(usize, ObjectId)> {
        let (at, entry) = self.entries.get_near(hint, path)?;
        entry
            .answers(stat, self.started_ns)
            .then_some((at, entry.id))
    }

    /// Takes the cached listing of directory `dir` out of the cache when its stat data is unchanged and it
    /// is not racy: modified within `RACY_MARGIN_NS` before the track that cached it began, where a change
    /// made after that track's read could fall in the same timestamp tick and leave the mtime as it was.
    /// (The same rule as for files; any change sets the ctime too, which is compared as well.)
    /// `Err` holds the listing that could not be used (racy or changed), if there was one (boxed: the
    /// rarer way).
    pub fn take_listing(
        &mut self,
        dir: &str,
        stat: &DirStat,
    ) -> Result<Listing, Option<Box<Listing>>> {
        let listing = self.listings.remove(dir).ok_or(None)?;
        let racy = racy(listing.stat.last_change_ns(), self.started_ns);
        if listing.stat == *stat && !racy {
            Ok(listing)
        } else {
            Err(Some(Box::new(listing)))
        }
    }

    /// Whether a listing taken now would still be racy in a cache written by a track that started at
    /// `started_ns`.
    pub fn listing_stays_racy(listing: &Listing, started_ns: i128) -> bool {
        racy(listing.stat.last_change_ns(), started_ns)
    }

    /// Takes in what a revert or restore just did to the worktree (each touched path with the stat data and
    /// blob of the file written there, or none when it was deleted), as git's checkout refreshes its index:
    /// the entries of those paths are replaced (a file written where a directory or a file stood displaces
    /// their entries) and the trees of their directories rewritten, so the cache's tree stays the tree of
    /// its entries. The start time is kept: every file just written was modified after it, so it is racy
    /// and the next track hashes it again rather than trusting stat data taken after the write. Nothing is
    /// done to a cache without a tree.
    ///
    /// `edited` is `(base, applied, dirs)` when the caller already built `applied` as `base` with these
    /// changes (a revert's end state), `dirs` the directory ids that edit knows (`tree::Edit::write`): when
    /// the cache's tree is `base` and every change rewrote a file the cache holds (no path came, went or
    /// changed kind, so the cache's directories are `base`'s), the new tree is `applied` and the changed
    /// directories take their ids from `dirs` (read from `applied` when one is missing), instead of
    /// building the same trees a second time.
    pub fn note_applied(
        store: &crate::store::Store,
        changes: &[Applied],
        edited: Option<(ObjectId, ObjectId, &tree::DirIds)>,
    ) -> GitResult<()> {
        let path = store.stat_cache_path();
        // Only a cache this process holds in memory is taught: parsing a big one from disk would cost
        // the operation about what it saves the next track (and a command-line process ends here).
        let Some(mut cache) = StatCache::remembered(&path) else {
            return Ok(());
        };
        if cache.tree.is_none()
            || !cache.dirs.contains_key("")
            || !all_racy(changes, cache.started_ns)
        {
            cache.keep(&path);
            return Ok(());
        }
        let same_paths = changes
            .iter()
            .all(|(changed, after)| after.is_some() && cache.entries.contains_key(changed));
        let mut since = cache.take_since();
        let mut dirty = HashSet::new();
        let mut replaced_dirs = Vec::new();
        for (changed, after) in changes {
            // A file written below a path that held a file displaces that file.
            for (i, _) in changed.match_indices('/') {
                if cache.entries.remove(&changed[..i]).is_some() {
                    mark_dirty(&mut dirty, &changed[..i]);
                    since.paths.insert(changed[..i].to_owned());
                }
            }
            since.paths.insert(changed.clone());
            match after {
                Some((stat, id)) => {
                    if cache.dirs.contains_key(changed.as_str()) {
                        replaced_dirs.push(format!("{changed}/"));
                    }
                    cache.entries.insert(
                        changed,
                        CacheEntry {
                            stat: *stat,
                            id: *id,
                        },
                    );
                }
                None => {
                    cache.entries.remove(changed);
                }
            }
            mark_dirty(&mut dirty, changed);
        }
        if !replaced_dirs.is_empty() {
            // A file written where a directory stood displaces every file below it.
            cache.entries.retain(|entry, _| {
                let below = replaced_dirs
                    .iter()
                    .any(|dir| entry.starts_with(dir.as_str()));
                if below {
                    mark_dirty(&mut dirty, entry);
                    since.paths.insert(entry.to_owned());
                }
                !below
            });
        }
        match edited {
            Some((base, applied, known)) if same_paths && cache.tree == Some(base) => {
                // The edit that made `applied` knows the id of every directory above a change; read from
                // the tree only when one is missing.
                let ids = match dirty
                    .iter()
                    .map(|dir| Some((dir.clone(), *known.get(dir)?)))
                    .collect::<Option<Vec<_>>>()
                {
                    Some(ids) => ids,
                    None => {
                        // Every directory above a rewritten file is one the edit went through.
                        debug_assert!(false, "a changed directory the edit does not know");
                        tree::dir_ids(&store.odb, &applied, &dirty)?
                            .into_iter()
                            .collect()
                    }
                };
                for (dir, id) in ids {
                    if cache.dirs.insert(dir.clone(), id) != Some(id) {
                        since.dirs.insert(dir);
                    }
                }
                cache.tree = Some(applied);
            }
            _ => {
                let files = cache
                    .entries
                    .iter()
                    .map(|(file, entry)| (file, (entry.stat.mode, entry.id)));
                // The trees written here go out as one pack (or loose when few), before the save names them:
                // `batched` ends the batch when `write_dirty` returns.
                let (tree, dirs) = store
                    .odb
                    .batched(|| write_dirty(&store.odb, files, &cache.dirs, &dirty))?;
                for (dir, id) in &cache.dirs {
                    if dirs.get(dir) != Some(id) {
                        since.dirs.insert(dir.clone());
                    }
                }
                since.dirs.extend(
                    dirs.keys()
                        .filter(|d| !cache.dirs.contains_key(*d))
                        .cloned(),
                );
                cache.tree = Some(tree);
                cache.dirs = dirs;
            }
        }
        // Written, not only kept in memory: gc (in any process) keeps the file's tree and everything under
        // it, and the next track may return this tree as the snapshot. A cache held only in memory names
        // trees another process's gc would collect once they are older than its grace period. What changed
        // goes to the side file while it stays a small share of the entries.
        if since.fits_side(cache.entries.len()) {
            cache.since_file = Some(since);
            cache.save_side(&path)
        } else {
            cache.save(&path)
        }
    }

    /// The copy kept in memory, when the file still holds its generation.
    pub fn remembered(path: &Path) -> Option<StatCache> {
        let remembered = MEMO
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take(path)?;
        (file_generation(path) == Some(remembered.generation)).then_some(remembered)
    }

    /// Runs `f` on the copy kept in memory, when this process keeps one that the file still holds; none
    /// otherwise (the file is not read).
    pub fn peek_kept<T>(path: &Path, f: impl FnOnce(&StatCache) -> T) -> Option<T> {
        let cache = StatCache::remembered(path)?;
        let out = f(&cache);
        cache.keep(path);
        Some(out)
    }

    /// Runs `f` on the cache without taking it: the copy in memory is handed back after; one read from
    /// the file is not kept in memory (a process that does not hold the cache, a command that ends after
    /// its operation, leaves the file to the next track).
    pub fn peek<T>(path: &Path, f: impl FnOnce(&StatCache) -> T) -> T {
        match StatCache::remembered(path) {
            Some(cache) => {
                let out = f(&cache);
                cache.keep(path);
                out
            }
            None => f(&StatCache::load(path)),
        }
    }

    /// Reads the cache; a missing, unreadable or corrupt cache is empty (costing only re-hashing). The
    /// copy kept in memory is used when the file still holds its generation.
    pub fn load(path: &Path) -> StatCache {
        StatCache::load_for_gc(path).unwrap_or_default()
    }

    /// `load` for gc, which keeps what the cache references: a file that exists but cannot be read is an
    /// error (read as empty, its tree and blobs would be collected while the next track, reading it again,
    /// still returns them). A file that reads but does not parse is no cache for a track either.
    pub fn load_for_gc(path: &Path) -> GitResult<StatCache> {
        if let Some(cache) = StatCache::remembered(path) {
            return Ok(cache);
        }
        match fs::read(path) {
            Ok(bytes) => {
                let side = Side::bytes(path).map_err(|e| GitError::io(&side_path(path), e))?;
                Ok(parse_with_side(bytes, side.as_deref()).unwrap_or_default())
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(StatCache::default()),
            Err(e) => Err(GitError::io(path, e)),
        }
    }

    /// `load`, with the entries and listings (most of the file) left to parse, so a track can parse them
    /// on two threads, each as it starts what needs them (`Pending`). They are in the cache when it comes
    /// from memory (then there is nothing to parse), and when nothing could be read (then there are none).
    pub fn load_deferred(path: &Path) -> (StatCache, Option<Pending>) {
        if let Some(cache) = StatCache::remembered(path) {
            return (cache, None);
        }
        // A side file that cannot be read leaves the file's cache alone (exact: the changes it held are
        // read again, and the next save replaces it).
        let side = Side::bytes(path).ok().flatten();
        match fs::read(path)
            .ok()
            .and_then(|data| parse_deferred_with_side(data, side.as_deref()))
        {
            Some((cache, pending)) => (cache, Some(pending)),
            None => (StatCache::default(), None),
        }
    }

    /// Hands back a loaded cache, so the next load in this process need not parse the file while the file
    /// keeps its generation. The cache must be one the file's could have become without anything being
    /// trusted that the file's would not trust, and naming no tree the file does not name (gc keeps only
    /// the file's): the file's itself, or the same with fewer listings.
    pub fn keep(self, path: &Path) {
        if self.generation != 0 {
            remember(path, self);
        }
    }

    /// Writes the cache with a new generation, and keeps it in memory for the next load.
    pub fn save(self, path: &Path) -> GitResult<()> {
        let encoded = Encoded::of(&self.entries, &self.listings);
        self.save_encoded(path, encoded)
    }

    /// `save`, with the entries and listings already encoded (`Encoded::of` of this cache's own), so a
    /// track can encode them on another thread while it writes its trees.
    pub fn save_encoded(mut self, path: &Path, encoded: Encoded) -> GitResult<()> {
        self.generation = new_generation();
        // The file holds what this copy holds.
        self.listings_partial = false;
        let mut data = Vec::with_capacity(
            64 + encoded.entries.len() + self.dirs.len() * 64 + encoded.listings.len(),
        );
        data.extend_from_slice(MAGIC);
        data.extend_from_slice(&self.generation.to_le_bytes());
        data.extend_from_slice(&self.started_ns.to_le_bytes());
        put_tree(&mut data, self.tree.as_ref());
        data.extend_from_slice(&(self.entries.len() as u64).to_le_bytes());
        // The entries' length in bytes follows, so a reader can parse the rest first (see `load_deferred`).
        data.extend_from_slice(&(encoded.entries.len() as u64).to_le_bytes());
        data.extend_from_slice(&encoded.entries);
        data.extend_from_slice(&(self.dirs.len() as u64).to_le_bytes());
        for (dir, id) in &self.dirs {
            put_string(&mut data, dir);
            data.extend_from_slice(id.as_bytes());
        }
        data.extend_from_slice(&(self.listings.len() as u64).to_le_bytes());
        data.extend_from_slice(&encoded.listings);
        let sum = crc32fast::hash(&data);
        data.extend_from_slice(&sum.to_le_bytes());
        crate::store::write_atomically(path, &data)?;
        // The side file names the file's old generation: it no longer applies, and goes.
        self.since_file = None;
        let _ = fs::remove_file(side_path(path));
        remember(path, self);
        Ok(())
    }

    /// What changed since the cache file was last written whole, with `paths` (entries a track replaced
    /// in place: no path came or went) and the `dirty` directories added: when the cache has a file to add
    /// to, and that stays a small share of its `entries` (counting every dirty directory as changed).
    /// None when the cache is to be written whole (what it held since its file is then of no use).
    pub fn side_since(
        &mut self,
        paths: &[String],
        dirty: &HashSet<String>,
        entries: usize,
    ) -> Option<SinceFile> {
        if self.generation == 0 || self.tree.is_none() {
            return None;
        }
        let mut since = self.take_since();
        since.paths.extend(paths.iter().cloned());
        since.dirs.extend(dirty.iter().cloned());
        since.fits_side(entries).then_some(since)
    }

    /// What changed since the cache file was last written whole: what this cache holds of it, or a new
    /// record naming its file.
    fn take_since(&mut self) -> SinceFile {
        self.since_file.take().unwrap_or_else(|| SinceFile {
            file_generation: self.generation,
            file_tree: self.tree,
            ..SinceFile::default()
        })
    }

    /// Writes a track's cache to the side file: `since` (from `side_since` on the cache the track loaded)
    /// says what differs from the file. The track's start time goes with it: every entry, the file's too,
    /// was looked at by the track, as for a whole save.
    pub fn save_in_place(mut self, path: &Path, since: SinceFile) -> GitResult<()> {
        self.since_file = Some(since);
        self.save_side(path)
    }

    /// Writes what changed since the file was written whole (`since_file`) to the side file, with a new
    /// generation, and keeps the cache in memory for the next load.
    fn save_side(mut self, path: &Path) -> GitResult<()> {
        let Some(since) = &self.since_file else {
            return self.save(path);
        };
        let generation = new_generation();
        let mut data = Vec::with_capacity(64 + (since.paths.len() + since.dirs.len()) * 96);
        data.extend_from_slice(SIDE_MAGIC);
        data.extend_from_slice(&since.file_generation.to_le_bytes());
        data.extend_from_slice(&generation.to_le_bytes());
        data.extend_from_slice(&self.started_ns.to_le_bytes());
        put_tree(&mut data, self.tree.as_ref());
        data.extend_from_slice(&(since.paths.len() as u64).to_le_bytes());
        for changed in &since.paths {
            put_string(&mut data, changed);
            match self.entries.get(changed) {
                Some(entry) => {
                    data.push(1);
                    put_entry(&mut data, entry);
                }
                None => data.push(0),
            }
        }
        data.extend_from_slice(&(since.dirs.len() as u64).to_le_bytes());
        for dir in &since.dirs {
            put_string(&mut data, dir);
            put_tree(&mut data, self.dirs.get(dir));
        }
        let sum = crc32fast::hash(&data);
        data.extend_from_slice(&sum.to_le_bytes());
        crate::store::write_atomically(&side_path(path), &data)?;
        self.generation = generation;
        remember(path, self);
        Ok(())
    }
}

/// The side file of the cache file at `path` (see `SinceFile`).
fn side_path(path: &Path) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(".applied");
    path.with_file_name(name)
}

/// A new generation: random, never 0.
fn new_generation() -> u64 {
    loop {
        let generation = crate::odb::random_u64();
        if generation != 0 {
            return generation;
        }
    }
}

/// What a side file holds.
struct Side {
    generation: u64,
    /// The start time of the cache it leaves (none in a side file of format 1: the file's stands).
    started_ns: Option<i128>,
    tree: Option<ObjectId>,
    entries: Vec<(String, Option<CacheEntry>)>,
    dirs: Vec<(String, Option<ObjectId>)>,
}

impl Side {
    /// The bytes of the side file of the cache file at `path`; none when there is none. One that exists
    /// and cannot be read is an error: gc would keep less than the process that wrote it holds.
    fn bytes(path: &Path) -> std::io::Result<Option<Vec<u8>>> {
        match fs::read(side_path(path)) {
            Ok(data) => Ok(Some(data)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// A side file's bytes after its magic, when they verify (checksum) and apply to the file's generation
    /// `file_generation`: a reader after that generation, and whether the file holds a start time (format
    /// 2).
    fn verified(data: &[u8], file_generation: u64) -> Option<(Reader<'_>, bool)> {
        let body_length = data.len().checked_sub(4)?;
        let (body, sum) = data.split_at(body_length);
        if crc32fast::hash(body).to_le_bytes() != sum {
            return None;
        }
        let (rest, timed) = match body.strip_prefix(SIDE_MAGIC) {
            Some(rest) => (rest, true),
            None => (body.strip_prefix(SIDE_MAGIC_1)?, false),
        };
        let mut r = Reader(rest);
        (r.u64()? == file_generation).then_some((r, timed))
    }

    /// The side file `data`, when it parses, verifies and applies to the file's generation
    /// `file_generation`; anything else is ignored (the file's cache stands alone, and is exact alone).
    fn parse(data: &[u8], file_generation: u64) -> Option<Side> {
        let (mut r, timed) = Side::verified(data, file_generation)?;
        let generation = r.u64()?;
        let started_ns = if timed {
            Some(i128::from_le_bytes(r.take(16)?.try_into().ok()?))
        } else {
            None
        };
        let tree = r.tree()?;
        let count = r.u64()?;
        // Each takes at least two bytes: a larger count is refused before anything is sized by it.
        if count > (r.0.len() / 2) as u64 {
            return None;
        }
        let mut entries = Vec::with_capacity(count as usize);
        for _ in 0..count {
            let changed = r.string()?;
            let entry = match r.take(1)?[0] {
                0 => None,
                1 => Some(r.entry()?),
                _ => return None,
            };
            entries.push((changed, entry));
        }
        let count = r.u64()?;
        if count > (r.0.len() / 2) as u64 {
            return None;
        }
        let mut dirs = Vec::with_capacity(count as usize);
        for _ in 0..count {
            dirs.push((r.string()?, r.tree()?));
        }
        r.0.is_empty().then_some(Side {
            generation,
            started_ns,
            tree,
            entries,
            dirs,
        })
    }

    /// Applies all but the entries to `cache`, the file's, and returns the entries to apply.
    fn apply(self, cache: &mut StatCache) -> Vec<(String, Option<CacheEntry>)> {
        let mut since = SinceFile {
            file_generation: cache.generation,
            file_tree: cache.tree,
            ..SinceFile::default()
        };
        for (dir, id) in self.dirs {
            match id {
                Some(id) => cache.dirs.insert(dir.clone(), id),
                None => cache.dirs.remove(&dir),
            };
            since.dirs.insert(dir);
        }
        since
            .paths
            .extend(self.entries.iter().map(|(changed, _)| changed.clone()));
        cache.generation = self.generation;
        if let Some(started_ns) = self.started_ns {
            cache.started_ns = started_ns;
        }
        cache.tree = self.tree;
        cache.since_file = Some(since);
        self.entries
    }
}

/// Sets or removes each of `changes` in `entries`.
fn apply_entries(entries: &mut PathMap<CacheEntry>, changes: &[(String, Option<CacheEntry>)]) {
    for (changed, entry) in changes {
        match entry {
            Some(entry) => {
                entries.insert(changed, *entry);
            }
            None => {
                entries.remove(changed);
            }
        }
    }
}

/// A cache's entries and listings as its file holds them.
pub struct Encoded {
    entries: Vec<u8>,
    listings: Vec<u8>,
}

impl Encoded {
    pub fn of(entries: &PathMap<CacheEntry>, listings: &HashMap<String, Listing>) -> Encoded {
        let mut data = Vec::with_capacity(entries.len() * 80);
        // In the order of the walk that wrote them (the next walk looks for each path at its position),
        // each path as the length it shares with the one before it and the rest.
        let mut previous = "";
        for (path, entry) in entries.iter() {
            let shared = previous
                .bytes()
                .zip(path.bytes())
                .take_while(|(a, b)| a == b)
                .count();
            put_varint(&mut data, shared as u64);
            put_varint(&mut data, (path.len() - shared) as u64);
            data.extend_from_slice(&path.as_bytes()[shared..]);
            previous = path;
            put_entry(&mut data, entry);
        }
        let names: usize = listings.values().map(|l| l.entries.len()).sum();
        let mut encoded_listings = Vec::with_capacity(listings.len() * 64 + names * 24);
        let out = &mut encoded_listings;
        for (dir, listing) in listings {
            put_varint(out, dir.len() as u64);
            out.extend_from_slice(dir.as_bytes());
            put_time(out, listing.stat.mtime_ns);
            put_time(out, listing.stat.ctime_ns);
            out.extend_from_slice(&listing.stat.ino.to_le_bytes());
            out.extend_from_slice(&listing.stat.dev.to_le_bytes());
            out.extend_from_slice(&listing.rules);
            put_varint(out, listing.entries.len() as u64);
            for entry in listing.entries.iter() {
                put_varint(out, entry.name.len() as u64);
                out.extend_from_slice(entry.name.as_bytes());
                let kind = match entry.kind {
                    ListedKind::File => 0,
                    ListedKind::Dir => 1,
                    ListedKind::Special => 2,
                };
                out.push(kind | if entry.ignored { 0x80 } else { 0 });
            }
        }
        Encoded {
            entries: data,
            listings: encoded_listings,
        }
    }
}

/// The entries and listings of a cache file, read and checked but not parsed yet: a track parses them on
/// two threads, the listings on the one that walks with them, the entries on one that looks at their
/// files meanwhile.
pub struct Pending {
    data: Vec<u8>,
    /// Where the entries are in `data`, and how many.
    entries: Range<usize>,
    count: u64,
    /// Where the listings are in `data` (up to the checksum), and how many.
    listings: Range<usize>,
    listing_count: u64,
    /// The side file's entries, applied after the file's.
    side: Vec<(String, Option<CacheEntry>)>,
}

impl Pending {
    /// How many entries the file holds.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// The entries; none when they do not parse (the file is then not to be trusted at all).
    pub fn parse(&self) -> Option<PathMap<CacheEntry>> {
        let mut r = Reader(self.data.get(self.entries.clone())?);
        let mut entries = parse_entries(&mut r, self.count)?;
        apply_entries(&mut entries, &self.side);
        r.0.is_empty().then_some(entries)
    }

    /// The listings; none when they do not parse (the file is then not to be trusted at all).
    pub fn listings(&self) -> Option<HashMap<String, Listing>> {
        let mut r = Reader(self.data.get(self.listings.clone())?);
        let listings = parse_listings(&mut r, self.listing_count)?;
        r.0.is_empty().then_some(listings)
    }
}

/// The cache a file's bytes `data` hold, with its side file's (`side`) applied (see `SinceFile`).
fn parse_with_side(data: Vec<u8>, side: Option<&[u8]>) -> Option<StatCache> {
    let (mut cache, pending) = parse_deferred_with_side(data, side)?;
    cache.entries = pending.parse()?;
    cache.listings = pending.listings()?;
    Some(cache)
}

/// `parse_deferred`, with the side file's bytes `side` applied when they apply (the entries when they are
/// parsed).
fn parse_deferred_with_side(data: Vec<u8>, side: Option<&[u8]>) -> Option<(StatCache, Pending)> {
    let (mut cache, mut pending) = parse_deferred(data)?;
    if let Some(side) = side.and_then(|side| Side::parse(side, cache.generation)) {
        pending.side = side.apply(&mut cache);
    }
    Some((cache, pending))
}

/// Checks the file and parses all but its entries and listings.
fn parse_deferred(data: Vec<u8>) -> Option<(StatCache, Pending)> {
    let body_length = data.len().checked_sub(4)?;
    let (body, sum) = data.split_at(body_length);
    if crc32fast::hash(body).to_le_bytes() != sum {
        return None;
    }
    let mut r = Reader(body.strip_prefix(MAGIC)?);
    let generation = u64::from_le_bytes(r.take(8)?.try_into().ok()?);
    let started_ns = i128::from_le_bytes(r.take(16)?.try_into().ok()?);
    let tree = match r.take(1)?[0] {
        1 => Some(ObjectId::try_from(r.take(20)?).ok()?),
        _ => None,
    };
    let count = u64::from_le_bytes(r.take(8)?.try_into().ok()?);
    let length = usize::try_from(u64::from_le_bytes(r.take(8)?.try_into().ok()?)).ok()?;
    // Each entry takes at least `MIN_ENTRY_BYTES`: a larger count is refused here, before anyone sizes
    // anything by it.
    if count > (length / MIN_ENTRY_BYTES) as u64 {
        return None;
    }
    let start = body_length - r.0.len();
    r.take(length)?;
    let dir_count = u64::from_le_bytes(r.take(8)?.try_into().ok()?);
    let mut dirs = HashMap::with_capacity(dir_count.min(1 << 20) as usize);
    for _ in 0..dir_count {
        let dir = r.string()?;
        dirs.insert(dir, ObjectId::try_from(r.take(20)?).ok()?);
    }
    let listing_count = u64::from_le_bytes(r.take(8)?.try_into().ok()?);
    let listings_start = body_length - r.0.len();
    let cache = StatCache {
        generation,
        started_ns,
        tree,
        entries: PathMap::default(),
        dirs,
        listings: HashMap::new(),
        listings_partial: false,
        since_file: None,
    };
    Some((
        cache,
        Pending {
            data,
            entries: start..start + length,
            count,
            listings: listings_start..body_length,
            listing_count,
            side: Vec::new(),
        },
    ))
}

/// The `count` listings `r` holds.
fn parse_listings(r: &mut Reader<'_>, count: u64) -> Option<HashMap<String, Listing>> {
    let mut listings = HashMap::with_capacity(count.min(1 << 20) as usize);
    for _ in 0..count {
        let dir = r.string()?;
        let stat = DirStat {
            mtime_ns: r.time()?,
            ctime_ns: r.time()?,
            ino: u64::from_le_bytes(r.take(8)?.try_into().ok()?),
            dev: u64::from_le_bytes(r.take(8)?.try_into().ok()?),
        };
        let rules: [u8; 20] = r.take(20)?.try_into().ok()?;
        let count = usize::try_from(r.varint()?).ok()?;
        // Each entry takes at least two bytes (its name's length and its kind): no more are reserved than
        // the bytes left could hold, with names of about 16 bytes (the string grows if they are longer).
        let room = count.min(r.0.len() / 2);
        let mut entries = Names::with_capacity(room, room * 16);
        for _ in 0..count {
            let name = r.str()?;
            let byte = r.take(1)?[0];
            let kind = match byte & 0x7f {
                0 => ListedKind::File,
                1 => ListedKind::Dir,
                2 => ListedKind::Special,
                _ => return None,
            };
            entries.push(name, kind, byte & 0x80 != 0);
        }
        listings.insert(
            dir,
            Listing {
                stat,
                rules,
                entries,
            },
        );
    }
    Some(listings)
}

fn parse_entries(r: &mut Reader<'_>, count: u64) -> Option<PathMap<CacheEntry>> {
    let slots = count.min(1 << 20) as usize;
    let mut entries = PathMap::with_capacity(slots, slots * 48);
    let mut path = Vec::new();
    for _ in 0..count {
        let shared = usize::try_from(r.varint()?).ok()?;
        let rest = usize::try_from(r.varint()?).ok()?;
        if shared > path.len() {
            return None;
        }
        path.truncate(shared);
        path.extend_from_slice(r.take(rest)?);
        let entry = r.entry()?;
        entries.push_new(std::str::from_utf8(&path).ok()?, entry);
    }
    Some(entries)
}

/// The generation of the cache the file at `path` holds, read without reading the rest of the file: the
/// side file's when it verifies (it is read whole: small) and applies to the file's generation, the
/// file's own otherwise; none when a side file cannot be read (the copy in memory is then not used).
fn file_generation(path: &Path) -> Option<u64> {
    let mut head = [0u8; MAGIC.len() + 8];
    std::io::Read::read_exact(&mut fs::File::open(path).ok()?, &mut head).ok()?;
    let generation = u64::from_le_bytes(head.strip_prefix(MAGIC)?.try_into().ok()?);
    let Some(side) = Side::bytes(path).ok()? else {
        return Some(generation);
    };
    Some(
        Side::verified(&side, generation)
            .and_then(|(mut r, _)| r.u64())
            .unwrap_or(generation),
    )
}

fn remember(path: &Path, cache: StatCache) {
    MEMO.lock()
        .unwrap_or_else(PoisonError::into_inner)
        .keep(path, cache);
}

/// Appends `n` in 7-bit groups, low first, the high bit set on all but the last.
fn put_varint(data: &mut Vec<u8>, mut n: u64) {
    while n >= 0x80 {
        data.push((n as u8 & 0x7f) | 0x80);
        n >>= 7;
    }
    data.push(n as u8);
}

/// Appends a string after its varint length.
fn put_string(data: &mut Vec<u8>, text: &str) {
    put_varint(data, text.len() as u64);
    data.extend_from_slice(text.as_bytes());
}

/// Appends a tree id after a byte saying whether there is one.
fn put_tree(data: &mut Vec<u8>, id: Option<&ObjectId>) {
    match id {
        Some(id) => {
            data.push(1);
            data.extend_from_slice(id.as_bytes());
        }
        None => data.push(0),
    }
}

/// Appends an entry but its path: mode, size, the two times, inode, device and blob id.
fn put_entry(data: &mut Vec<u8>, entry: &CacheEntry) {
    data.push(match entry.stat.mode {
        Mode::File => 0,
        Mode::Exec => 1,
        Mode::Link => 2,
        Mode::Tree => 3,
    });
    data.extend_from_slice(&entry.stat.size.to_le_bytes());
    put_time(data, entry.stat.mtime_ns);
    put_time(data, entry.stat.ctime_ns);
    data.extend_from_slice(&entry.stat.ino.to_le_bytes());
    data.extend_from_slice(&entry.stat.dev.to_le_bytes());
    data.extend_from_slice(entry.id.as_bytes());
}

/// Appends a time in nanoseconds as 8 bytes. A time outside that range (after 2262) is written as the
/// nearest one inside it: it then never equals the file's, which is hashed again, as a changed file is.
fn put_time(data: &mut Vec<u8>, ns: i128) {
    let clamped = i64::try_from(ns).unwrap_or(if ns < 0 { i64::MIN } else { i64::MAX });
    data.extend_from_slice(&clamped.to_le_bytes());
}

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.0.len() < n {
            return None;
        }
        let (head, tail) = self.0.split_at(n);
        self.0 = tail;
        Some(head)
    }

    fn varint(&mut self) -> Option<u64> {
        let mut n = 0u64;
        for shift in (0..64).step_by(7) {
            let byte = self.take(1)?[0];
            n |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                return Some(n);
            }
        }
        None
    }

    fn time(&mut self) -> Option<i128> {
        Some(i128::from(i64::from_le_bytes(
            self.take(8)?.try_into().ok()?,
        )))
    }

    /// A UTF-8 string after its varint length.
    fn string(&mut self) -> Option<String> {
        self.str().map(str::to_owned)
    }

    fn str(&mut self) -> Option<&'a str> {
        let len = usize::try_from(self.varint()?).ok()?;
        std::str::from_utf8(self.take(len)?).ok()
    }

    fn u64(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }

    /// `put_tree`'s: the outer `None` when it does not parse.
    fn tree(&mut self) -> Option<Option<ObjectId>> {
        match self.take(1)?[0] {
            0 => Some(None),
            1 => Some(Some(ObjectId::try_from(self.take(20)?).ok()?)),
            _ => None,
        }
    }

    /// `put_entry`'s.
    fn entry(&mut self) -> Option<CacheEntry> {
        let mode = match self.take(1)?[0] {
            0 => Mode::File,
            1 => Mode::Exec,
            2 => Mode::Link,
            _ => return None,
        };
        let stat = Stat {
            mode,
            size: self.u64()?,
            mtime_ns: self.time()?,
            ctime_ns: self.time()?,
            ino: self.u64()?,
            dev: self.u64()?,
        };
        let id = ObjectId::try_from(self.take(20)?).ok()?;
        Some(CacheEntry { stat, id })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Store;

    /// A directory's stat data reads the same by path and from a handle on it: a listing cached with
    /// the handle's (`track::read_listing`) is trusted by the next look by path.
    #[test]
    fn dir_stat_by_path_and_by_handle_agree() {
        let dir = tempfile::tempdir().expect("tempdir");
        let sub = dir.path().join("sub");
        fs::create_dir(&sub).expect("mkdir");
        fs::write(sub.join("f"), "x").expect("write");
        let by_path = DirStat::of(&fs::symlink_metadata(&sub).expect("lstat"));
        let fd = rustix::fs::open(
            &sub,
            rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::DIRECTORY,
            rustix::fs::Mode::empty(),
        )
        .expect("open");
        let by_handle = DirStat::of_rustix(&rustix::fs::fstat(&fd).expect("fstat"));
        assert_eq!(by_path, by_handle);
    }

    /// Writes `text` to worktree path `rel`, making its directories.
    fn write_in(wt: &Path, rel: &str, text: &str) {
        let path = wt.join(rel);
        fs::create_dir_all(path.parent().expect("a parent")).expect("mkdir");
        fs::write(path, text).expect("write");
    }

    /// A worktree in a new temporary directory with `files` files `d<i % dirs>/f<i>.txt`, and a store
    /// configuration for it that reads no global excludes.
    fn worktree(
        files: usize,
        dirs: usize,
    ) -> (tempfile::TempDir, PathBuf, crate::config::GitStoreConfig) {
        let temp = tempfile::tempdir().expect("a temporary directory");
        let wt = temp.path().join("wt");
        for i in 0..files {
            write_in(&wt, &format!("d{}/f{i}.txt", i % dirs), &format!("{i}\n"));
        }
        let mut config = crate::config::GitStoreConfig::new(temp.path().join("data"), "unit");
        config.excludes_file = crate::config::ExcludesFile::None;
        (temp, wt, config)
    }

    /// Waits past the racy margin: a file modified before it is not racy for a track that starts after.
    fn past_racy() {
        std::thread::sleep(std::time::Duration::from_millis(1100));
    }

    /// `worktree(60, 6)`, its store, and the track of it taken once no file is racy any more; with the
    /// cache file's path.
    fn tracked_worktree() -> (
        tempfile::TempDir,
        PathBuf,
        crate::config::GitStoreConfig,
        Store,
        PathBuf,
        crate::track::Tracked,
    ) {
        let (temp, wt, config) = worktree(60, 6);
        let store = Store::open(&config, &wt).expect("open the store");
        let cache_path = store.stat_cache_path();
        past_racy();
        let tracked = crate::track::track(&store, &config).expect("track");
        (temp, wt, config, store, cache_path, tracked)
    }

    fn listing_at(mtime_ns: i128) -> (StatCache, DirStat) {
        let stat = DirStat {
            mtime_ns,
            ctime_ns: mtime_ns,
            ino: 7,
            dev: 1,
        };
        let mut cache = StatCache {
            started_ns: 100 * RACY_MARGIN_NS,
            ..StatCache::default()
        };
        cache.listings.insert(
            "d/".to_owned(),
            Listing {
                stat,
                rules: [3; 20],
                entries: {
                    let mut names = Names::default();
                    names.push("f", ListedKind::File, false);
                    names
                },
            },
        );
        (cache, stat)
    }

    /// A file whose modification time was set back (`cp -p`, `touch -d`) but whose status changed within
    /// the racy margin before the caching track began is racy: where timestamps are whole seconds, an edit
    /// of the same size in that second shows the same stat data. So is a directory's listing.
    #[test]
    fn a_status_change_within_the_margin_is_racy_whatever_the_modification_time() {
        let started = 100 * RACY_MARGIN_NS;
        let entry = |ctime_ns| CacheEntry {
            stat: Stat {
                mode: Mode::File,
                size: 5,
                mtime_ns: 10 * RACY_MARGIN_NS,
                ctime_ns,
                ino: 7,
                dev: 1,
            },
            id: ObjectId::null(gix::hash::Kind::Sha1),
        };
        let old = entry(50 * RACY_MARGIN_NS);
        assert!(old.answers(&old.stat, started), "changed long before");
        let recent = entry(started - RACY_MARGIN_NS / 2);
        assert!(
            !recent.answers(&recent.stat, started),
            "changed just before"
        );
        assert!(recent.stays_racy(&recent.stat, started));
        let (mut cache, mut stat) = listing_at(10 * RACY_MARGIN_NS);
        stat.ctime_ns = started - RACY_MARGIN_NS / 2;
        if let Some(listing) = cache.listings.get_mut("d/") {
            listing.stat = stat;
        }
        assert!(cache.take_listing("d/", &stat).is_err(), "a listing too");
    }

    /// A listing is reused only under the same stat data, and never when the directory changed within the
    /// racy margin before the caching track began (the same timestamp tick as its read, on a filesystem
    /// with coarse timestamps).
    #[test]
    fn racy_or_changed_directories_are_read_again() {
        let (cache, stat) = listing_at(50 * RACY_MARGIN_NS);
        assert!(
            cache.clone().take_listing("d/", &stat).is_ok(),
            "old and unchanged"
        );
        for changed in [
            DirStat {
                mtime_ns: stat.mtime_ns + 1,
                ..stat
            },
            DirStat {
                ctime_ns: stat.ctime_ns + 1,
                ..stat
            },
            DirStat { ino: 8, ..stat },
            DirStat { dev: 2, ..stat },
        ] {
            assert!(
                cache.clone().take_listing("d/", &changed).is_err(),
                "{changed:?}"
            );
        }
        assert!(
            cache.clone().take_listing("e/", &stat).is_err(),
            "never listed"
        );

        let (mut racy, stat) = listing_at(99 * RACY_MARGIN_NS + 1);
        assert!(racy.take_listing("d/", &stat).is_err(), "racy: read again");
    }

    /// Listings survive a save and load, from the file and from memory; a cache of the previous format is
    /// ignored.
    #[test]
    fn listings_round_trip() {
        let (cache, stat) = listing_at(50 * RACY_MARGIN_NS);
        let dir = tempfile::tempdir().expect("a temporary directory");
        let path = dir.path().join("stat-cache");
        cache.clone().save(&path).expect("save");
        // Parsed from the file: a copy of its bytes elsewhere is not in memory.
        let copy = dir.path().join("copy");
        fs::copy(&path, &copy).expect("copy");
        let mut parsed = StatCache::load(&copy);
        assert_eq!(parsed.listings, cache.listings);
        assert!(parsed.take_listing("d/", &stat).is_ok());
        let mut loaded = StatCache::load(&path);
        assert_eq!(loaded.listings, cache.listings);
        assert!(loaded.take_listing("d/", &stat).is_ok());
        let mut data = fs::read(&path).expect("read back");
        data[..MAGIC.len()].copy_from_slice(b"RWSTAT5\n");
        fs::write(&path, &data).expect("write an old header");
        assert!(StatCache::load(&path).listings.is_empty());
    }

    /// An operation's writes are learnt only when each is racy for the cache (the next track reads it
    /// again): modified no earlier than the margin before the cache's track began. Deletions always are.
    #[test]
    fn only_files_racy_for_the_cache_are_learnt_from_an_operation() {
        let id = ObjectId::from_hex(b"0123456789abcdef0123456789abcdef01234567").expect("an id");
        let written = |path: &str, mtime_ns: i128| {
            let stat = Stat {
                mode: Mode::File,
                size: 3,
                mtime_ns,
                ctime_ns: mtime_ns,
                ino: 6,
                dev: 7,
            };
            (path.to_owned(), Some((stat, id)))
        };
        let started = 100 * RACY_MARGIN_NS;
        let now = written("a", started + 5);
        let within_the_margin = written("b", started - RACY_MARGIN_NS);
        let older = written("c", started - RACY_MARGIN_NS - 1);
        let deleted = ("d".to_owned(), None);
        assert!(all_racy(&[], started));
        assert!(all_racy(
            &[now.clone(), within_the_margin.clone(), deleted.clone()],
            started
        ));
        assert!(!all_racy(&[now, older.clone(), deleted], started));
        assert!(!all_racy(&[older], started));
    }

    /// Entries survive a save and a parse from the file in their order, with paths that share bytes
    /// inside a UTF-8 character ("é" and "è" share their first byte); a time after 2262 does not fit
    /// the file and comes back different, so that file is hashed again instead of trusted.
    #[test]
    fn entries_round_trip_in_order() {
        let id = ObjectId::from_hex(b"0123456789abcdef0123456789abcdef01234567").expect("an id");
        let stat = |mtime_ns: i128| Stat {
            mode: Mode::File,
            size: 3,
            mtime_ns,
            ctime_ns: 5,
            ino: 6,
            dev: 7,
        };
        let paths = [
            "dir/é.txt",
            "dir/è.txt",
            "a",
            "dir/é.txt.bak",
            "z/deep/name",
        ];
        let mut cache = StatCache {
            started_ns: 100 * RACY_MARGIN_NS,
            tree: Some(id),
            ..StatCache::default()
        };
        for path in paths {
            cache.entries.push_new(
                path,
                CacheEntry {
                    stat: stat(RACY_MARGIN_NS),
                    id,
                },
            );
        }
        let future = i128::from(i64::MAX) + 1;
        cache.entries.push_new(
            "future",
            CacheEntry {
                stat: stat(future),
                id,
            },
        );
        let dir = tempfile::tempdir().expect("a temporary directory");
        let path = dir.path().join("stat-cache");
        cache.clone().save(&path).expect("save");
        let data = fs::read(&path).expect("read");
        let loaded = parse_with_side(data, None).expect("parse");
        let order: Vec<&str> = loaded.entries.iter().map(|(p, _)| p).collect();
        assert_eq!(order, [&paths[..], &["future"]].concat());
        for (at, path) in paths.iter().enumerate() {
            assert_eq!(
                loaded.fresh_near(at, path, &stat(RACY_MARGIN_NS)),
                Some((at, id)),
                "{path}"
            );
        }
        let kept = loaded.entries.get("future").map(|entry| entry.stat);
        assert!(kept.is_some_and(|kept| kept != stat(future)), "{kept:?}");
    }

    /// The id of the caches saved by `saved_with_entry`.
    const SAVED_TREE: &[u8] = b"0123456789abcdef0123456789abcdef01234567";

    /// `cache` with tree `SAVED_TREE` and one entry at `path`, saved to `stat-cache` in a new temporary
    /// directory: the directory, the file and its bytes.
    fn saved_with_entry(mut cache: StatCache, path: &str) -> (tempfile::TempDir, PathBuf, Vec<u8>) {
        let id = ObjectId::from_hex(SAVED_TREE).expect("an id");
        cache.tree = Some(id);
        let stat = Stat {
            mode: Mode::File,
            size: 1,
            mtime_ns: 2,
            ctime_ns: 3,
            ino: 4,
            dev: 5,
        };
        cache.entries.push_new(path, CacheEntry { stat, id });
        let dir = tempfile::tempdir().expect("a temporary directory");
        let file = dir.path().join("stat-cache");
        cache.save(&file).expect("save");
        let data = fs::read(&file).expect("read");
        (dir, file, data)
    }

    /// `data` with its checksum made to hold again.
    fn checksummed(data: &mut [u8]) {
        let body = data.len() - 4;
        let sum = crc32fast::hash(&data[..body]);
        data[body..].copy_from_slice(&sum.to_le_bytes());
    }

    /// Writes `data` (checksummed) to `file` as another process would save it: another generation, so
    /// this process's copy in memory is not used.
    fn written_by_another_process(file: &Path, data: &mut [u8]) {
        data[MAGIC.len()..MAGIC.len() + 8].copy_from_slice(&12345u64.to_le_bytes());
        checksummed(data);
        fs::write(file, data).expect("write");
    }

    /// A file whose checksum holds but whose entries do not parse (a count larger than the entries it
    /// holds, or larger than its bytes could hold) is not trusted at all: `load` gives an empty cache, and
    /// the deferred load's rest parses while its entries do not (a track then drops the file's tree too).
    #[test]
    fn entries_that_do_not_parse_distrust_the_whole_file() {
        let id = ObjectId::from_hex(SAVED_TREE).expect("an id");
        // A long path, so that one entry's bytes could hold the count of two written below.
        let (_dir, path, mut data) = saved_with_entry(StatCache::default(), &"a".repeat(100));
        // The entry count follows the magic, the generation, the start time and the tree.
        let count_at = MAGIC.len() + 8 + 16 + 1 + 20;
        data[count_at..count_at + 8].copy_from_slice(&2u64.to_le_bytes());
        written_by_another_process(&path, &mut data);

        let loaded = StatCache::load(&path);
        assert!(loaded.entries.len() == 0 && loaded.tree.is_none());
        // A count no file of this length could hold is refused before the rest is parsed: nothing is
        // sized by it.
        let mut huge = data.clone();
        huge[count_at..count_at + 8].copy_from_slice(&(1u64 << 40).to_le_bytes());
        checksummed(&mut huge);
        assert!(parse_deferred(huge).is_none());
        let (rest, pending) = StatCache::load_deferred(&path);
        assert_eq!(rest.tree, Some(id), "the rest parses");
        let pending = pending.expect("entries to parse");
        assert_eq!(pending.count(), 2);
        assert!(pending.parse().is_none(), "the entries do not");
    }

    /// A listing's names in one string: each entry comes back with its own name, kind and verdict, in
    /// order, a verdict set again changes that entry only, and two listings are equal when their entries
    /// are (the walk compares a listing read again with the cached one).
    #[test]
    fn names_give_back_each_entry_in_order() {
        let listed = [
            ("src", ListedKind::Dir, false),
            ("a.txt", ListedKind::File, false),
            ("ü ß.md", ListedKind::File, true),
            ("fifo", ListedKind::Special, false),
        ];
        let mut names = Names::default();
        for (name, kind, ignored) in listed {
            names.push(name, kind, ignored);
        }
        let got: Vec<(&str, ListedKind, bool)> =
            names.iter().map(|e| (e.name, e.kind, e.ignored)).collect();
        assert_eq!(got, listed);
        assert!(names.get(listed.len()).is_none());
        let same = names.clone();
        names.set_ignored(1, true);
        assert_eq!(
            names.get(1).map(|e| (e.name, e.ignored)),
            Some(("a.txt", true))
        );
        assert_eq!(names.get(2), same.get(2));
        assert_ne!(names, same);
        names.set_ignored(1, false);
        assert_eq!(names, same);
        // The same names split otherwise are other entries.
        let mut split = Names::default();
        split.push("srca", ListedKind::Dir, false);
        split.push(".txt", ListedKind::File, false);
        let mut whole = Names::default();
        whole.push("src", ListedKind::Dir, false);
        whole.push("a.txt", ListedKind::File, false);
        assert_ne!(split, whole);
    }

    /// A file whose checksum holds but whose listings do not parse is not trusted at all either: `load`
    /// gives an empty cache, and the deferred load's rest and entries parse while its listings do not (a
    /// track then drops the file's tree and entries).
    #[test]
    fn listings_that_do_not_parse_distrust_the_whole_file() {
        let id = ObjectId::from_hex(SAVED_TREE).expect("an id");
        let (_dir, path, mut data) = saved_with_entry(listing_at(50 * RACY_MARGIN_NS).0, "d/f");
        let body = data.len() - 4;
        // The one listing comes last, and ends with its one name's kind byte: 3 is no kind.
        assert_eq!(data[body - 1], 0, "a file, not ignored");
        data[body - 1] = 3;
        written_by_another_process(&path, &mut data);

        let loaded = StatCache::load(&path);
        assert!(loaded.entries.len() == 0 && loaded.tree.is_none() && loaded.listings.is_empty());
        let (rest, pending) = StatCache::load_deferred(&path);
        assert_eq!(rest.tree, Some(id), "the rest parses");
        let pending = pending.expect("the rest to parse");
        assert_eq!(
            pending.parse().map(|entries| entries.len()),
            Some(1),
            "the entries parse"
        );
        assert!(pending.listings().is_none(), "the listings do not");
        // Unharmed, the same file's listings parse.
        data[body - 1] = 0;
        written_by_another_process(&path, &mut data);
        assert_eq!(
            StatCache::load(&path).listings,
            listing_at(50 * RACY_MARGIN_NS).0.listings
        );
    }

    /// Past `MEMO_STORES` stores, the cache kept longest ago gives way, not every cache (a revert's plan
    /// reads the listings of the cache its track kept a moment before, while other stores come and go).
    #[test]
    fn the_cache_kept_longest_ago_gives_way_to_another_store_s() {
        let mut memo = Memo::default();
        let path = |n: usize| PathBuf::from(format!("/stores/{n}/stat-cache"));
        let cache = |n: usize| StatCache {
            started_ns: n as i128,
            ..StatCache::default()
        };
        for n in 0..MEMO_STORES {
            memo.keep(&path(n), cache(n));
        }
        // Store 0 is used again (taken and kept back): store 1 is now the one kept longest ago.
        let again = memo.take(&path(0)).expect("store 0 is kept");
        memo.keep(&path(0), again);
        memo.keep(&path(MEMO_STORES), cache(MEMO_STORES));
        assert!(memo.take(&path(1)).is_none(), "store 1 gave way");
        for n in (0..=MEMO_STORES).filter(|n| *n != 1) {
            let kept = memo.take(&path(n)).map(|cache| cache.started_ns);
            assert_eq!(kept, Some(n as i128), "store {n} is still kept");
        }
    }

    /// The copy in memory is used only while the file holds its generation: a cache another process saved
    /// over it is read from the file, and a corrupt file is ignored.
    #[test]
    fn the_copy_in_memory_gives_way_to_another_processs_save() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let path = dir.path().join("stat-cache");
        let (mut ours, _) = listing_at(50 * RACY_MARGIN_NS);
        ours.started_ns = 1;
        ours.clone().save(&path).expect("save ours");
        let loaded = StatCache::load(&path);
        assert_eq!(loaded.started_ns, 1);
        loaded.keep(&path);
        // Another process saves its own cache (here: saved elsewhere, its bytes copied over ours).
        let theirs_path = dir.path().join("theirs");
        let (mut theirs, _) = listing_at(50 * RACY_MARGIN_NS);
        theirs.started_ns = 2;
        theirs.save(&theirs_path).expect("save theirs");
        fs::copy(&theirs_path, &path).expect("copy over ours");
        let loaded = StatCache::load(&path);
        assert_eq!(
            loaded.started_ns, 2,
            "the file's cache, not the one in memory"
        );
        loaded.keep(&path);
        // A corrupt file (a byte of its generation and one of its body changed) is ignored.
        let mut data = fs::read(&path).expect("read");
        let last = data.len() - 5;
        data[last] ^= 0xff;
        data[MAGIC.len()] ^= 0xff;
        fs::write(&path, &data).expect("corrupt");
        let loaded = StatCache::load(&path);
        assert_eq!(
            (loaded.started_ns, loaded.tree),
            (0, None),
            "ignored: empty"
        );
    }

    /// The cache's tree is always the tree of its entries: after a revert and after a restore of given
    /// paths (a file replaced by a directory among them), it is the tree the worktree now holds, each
    /// written file's entry has the stat data on disk, and the start time has not moved (so each is racy).
    #[test]
    fn a_revert_and_a_restore_leave_the_cache_the_tree_of_its_entries() {
        use rewind_core::model::{RelPath, SnapshotPatch};

        let (_temp, wt, config) = worktree(12, 3);
        let write = |rel: &str, text: &str| write_in(&wt, rel, text);
        write("x", "a file\n");
        let store = Store::open(&config, &wt).expect("open the store");
        let first = crate::track::track(&store, &config).expect("track").id;
        write("d0/f0.txt", "edited\n");
        fs::remove_file(wt.join("d1/f1.txt")).expect("delete");
        fs::remove_file(wt.join("x")).expect("delete x");
        write("x/inside.txt", "x is a directory now\n");
        let second = crate::track::track(&store, &config).expect("track").id;
        let loaded = StatCache::load(&store.stat_cache_path());
        let started = loaded.started_ns;
        loaded.keep(&store.stat_cache_path());

        let consistent = |expected_tree: ObjectId| {
            let cache = StatCache::load(&store.stat_cache_path());
            let check = cache.clone();
            cache.keep(&store.stat_cache_path());
            let cache = check;
            assert_eq!(cache.tree, Some(expected_tree));
            assert_eq!(cache.started_ns, started, "the start time stays");
            let flat = crate::tree::read_flat(&store.odb, &expected_tree).expect("read the tree");
            let from_entries: crate::tree::Flat = cache
                .entries
                .iter()
                .map(|(path, entry)| (path.to_owned(), (entry.stat.mode, entry.id)))
                .collect();
            assert_eq!(from_entries, flat, "the entries are the tree's files");
            let (_, dirs) = crate::tree::read_flat_with_dirs(&store.odb, &expected_tree)
                .expect("read the tree's directories");
            assert_eq!(cache.dirs, dirs, "and the directories its directories");
            for (path, entry) in cache.entries.iter() {
                let meta = fs::symlink_metadata(wt.join(path)).expect("stat");
                assert_eq!(entry.stat, Stat::of(&meta, entry.stat.mode), "{path}");
            }
        };

        let files: Vec<RelPath> = ["d0/f0.txt", "d1/f1.txt", "x", "x/inside.txt"]
            .into_iter()
            .map(|p| RelPath::new(p).expect("a path"))
            .collect();
        let patch = SnapshotPatch {
            hash: crate::apply::snapshot_id(&first).expect("an id"),
            files,
        };
        let outcome =
            crate::apply::revert(&store, &config, &[patch], &second, || true).expect("revert");
        assert_eq!(outcome.applied.as_str(), first.to_string());
        consistent(first);

        let scope = vec!["d0/f0.txt".to_owned(), "d1/f1.txt".to_owned()];
        crate::apply::restore(&store, &config, &second, Some(scope), None).expect("restore paths");
        let expected = crate::tree::edit(
            &store.odb,
            &first,
            &[
                (
                    "d0/f0.txt".to_owned(),
                    crate::tree::LazyTree::new(&store.odb, second)
                        .get("d0/f0.txt")
                        .expect("read"),
                ),
                ("d1/f1.txt".to_owned(), None),
            ],
        )
        .expect("the expected tree")
        .0;
        consistent(expected);

        // What was taught is in the file too (gc, in any process, keeps the file's tree). A process that
        // does not hold the cache in memory (a command that ends after its revert) leaves the file as it
        // is: still the tree of its entries, and the next track finds the worktree.
        let on_disk = fs::read(store.stat_cache_path()).expect("read the cache file");
        assert_eq!(
            parse_with_side(
                on_disk,
                Side::bytes(&store.stat_cache_path())
                    .expect("read the side file")
                    .as_deref()
            )
            .and_then(|c| c.tree),
            Some(expected),
            "the taught cache is written"
        );
        drop(StatCache::load(&store.stat_cache_path()));
        let patch = SnapshotPatch {
            hash: crate::apply::snapshot_id(&first).expect("an id"),
            files: vec![RelPath::new("d0/f0.txt").expect("a path")],
        };
        crate::apply::revert(&store, &config, &[patch], &expected, || true).expect("revert again");
        let untaught = StatCache::load(&store.stat_cache_path());
        assert_eq!(
            untaught.tree,
            Some(expected),
            "not taught: the file holds what the restore taught it"
        );
        let now = crate::track::track(&store, &config).expect("track").id;
        let (want, _) = crate::tree::edit(&store.odb, &first, &[("d1/f1.txt".to_owned(), None)])
            .expect("the expected tree");
        assert_eq!(
            now, want,
            "d0/f0.txt is back as it was, d1/f1.txt still deleted"
        );
    }

    /// A track that changes a few entries in place (no path comes or goes) writes them to the side file,
    /// with its start time; the file stays as it was. A process that reads the cache from disk then finds
    /// what this one holds: its next track reads no file, which it would not do under the file's start
    /// time (the edited files were modified after it, so they would be racy and read again), and returns
    /// the same tree. A track that changes a large share of the entries writes the file whole. A side file
    /// of format 1, which holds no start time, still applies, with the file's.
    #[test]
    fn a_track_of_a_few_changed_files_writes_them_beside_the_cache_file() {
        let (_temp, wt, config, store, cache_path, first) = tracked_worktree();
        let side = side_path(&cache_path);
        assert_eq!(first.hashed, 60);
        let file_bytes = fs::read(&cache_path).expect("read the cache file");
        let file_started = StatCache::load(&cache_path).started_ns;

        write_in(&wt, "d0/f0.txt", "edited\n");
        write_in(&wt, "d1/f1.txt", "edited\n");
        past_racy();
        let second = crate::track::track(&store, &config).expect("track");
        assert_eq!(second.hashed, 2);
        assert_ne!(second.id, first.id);
        assert!(side.is_file(), "the change is written to the side file");
        assert_eq!(
            fs::read(&cache_path).expect("read the cache file"),
            file_bytes,
            "the file is not written"
        );
        let held = StatCache::remembered(&cache_path).expect("held in memory");
        let read = StatCache::load(&cache_path);
        let entries = |cache: &StatCache| -> Vec<(String, CacheEntry)> {
            cache
                .entries
                .iter()
                .map(|(path, entry)| (path.to_owned(), *entry))
                .collect()
        };
        assert_eq!(
            entries(&read),
            entries(&held),
            "read from disk: the same entries"
        );
        assert_eq!((read.tree, &read.dirs), (Some(second.id), &held.dirs));
        assert_eq!(read.listings, held.listings, "the file's listings stand");
        assert!(read.started_ns > file_started, "the track's start time");
        assert_eq!(read.started_ns, held.started_ns);
        let since = read.since_file.clone().expect("read with its side file");
        assert_eq!(since.file_tree, Some(first.id), "gc keeps the file's tree");
        assert_eq!(
            since.paths,
            ["d0/f0.txt", "d1/f1.txt"].map(str::to_owned).into()
        );
        drop((held, read));

        // A track in a process that reads the cache from disk (nothing held in memory).
        let third = crate::track::track(&store, &config).expect("track");
        assert_eq!((third.id, third.hashed), (second.id, 0), "nothing read");

        // Format 1: the same side file without the start time. (The copy in memory is taken out, so the
        // next load reads the files.)
        assert!(StatCache::remembered(&cache_path).is_some());
        let data = fs::read(&side).expect("read the side file");
        let mut old = SIDE_MAGIC_1.to_vec();
        let at = SIDE_MAGIC.len() + 16;
        old.extend_from_slice(&data[SIDE_MAGIC.len()..at]);
        old.extend_from_slice(&data[at + 16..data.len() - 4]);
        let sum = crc32fast::hash(&old);
        old.extend_from_slice(&sum.to_le_bytes());
        fs::write(&side, &old).expect("write a side file of format 1");
        let read = StatCache::load(&cache_path);
        assert_eq!(read.tree, Some(second.id), "applied");
        assert_eq!(read.started_ns, file_started, "with the file's start time");
        drop(read);
        fs::write(&side, &data).expect("put the side file back");

        // Half the files changed: the file is written whole, and the side file goes.
        for i in 0..30 {
            write_in(&wt, &format!("d{}/f{i}.txt", i % 6), "edited again\n");
        }
        let fourth = crate::track::track(&store, &config).expect("track");
        assert_eq!(fourth.hashed, 30);
        assert!(!side.exists(), "written whole");
        assert_ne!(
            fs::read(&cache_path).expect("read the cache file"),
            file_bytes
        );
        assert!(StatCache::load(&cache_path).since_file.is_none());
    }

    /// A directory whose listing the cache held, read again and found to name something that is not UTF-8,
    /// gets no listing (it cannot be cached); the file still holds the old one. A track with a few files
    /// changed in place then writes the whole file, which drops it, and not the side file, whose start time
    /// would let a later track trust that old listing (review of the track's side file).
    #[test]
    fn a_listing_the_walk_could_not_replace_makes_the_track_write_the_whole_cache() {
        use std::os::unix::ffi::OsStrExt as _;
        let (_temp, wt, config, store, cache_path, _) = tracked_worktree();
        assert!(StatCache::load(&cache_path).listings.contains_key("d2/"));

        fs::write(
            wt.join("d2")
                .join(std::ffi::OsStr::from_bytes(b"bad\xffname")),
            "x\n",
        )
        .expect("write a file whose name is not UTF-8");
        write_in(&wt, "d0/f0.txt", "edited\n");
        past_racy();
        let tracked = crate::track::track(&store, &config).expect("track");
        assert_eq!(tracked.skipped.len(), 1, "{:?}", tracked.skipped);
        assert!(!side_path(&cache_path).exists(), "written whole");
        drop(StatCache::remembered(&cache_path));
        assert!(
            !StatCache::load(&cache_path).listings.contains_key("d2/"),
            "the old listing is gone from the file"
        );
    }

    /// A copy of the cache kept in memory after a walk that did not take every listing its file holds
    /// (here one of a directory that is not there) lacks that listing. A track with a few files changed
    /// then writes the whole file, not the side file: its start time would judge the listing left in the
    /// file, which no walk looked at again (review of the track's side file).
    #[test]
    fn a_copy_in_memory_without_all_of_its_file_s_listings_makes_the_track_write_the_whole_cache() {
        let (_temp, wt, config, store, cache_path, _) = tracked_worktree();
        let mut cache = StatCache::load(&cache_path);
        let listing = cache.listings["d2/"].clone();
        cache.listings.insert("gone/".to_owned(), listing);
        cache
            .save(&cache_path)
            .expect("save the cache with a listing of a directory not there");

        let unchanged = crate::track::track(&store, &config).expect("track");
        assert_eq!(unchanged.hashed, 0);
        let held = StatCache::remembered(&cache_path).expect("held in memory");
        assert!(!held.listings.contains_key("gone/"));
        assert!(held.listings_partial, "it lacks a listing its file holds");
        held.keep(&cache_path);

        write_in(&wt, "d0/f0.txt", "edited\n");
        past_racy();
        crate::track::track(&store, &config).expect("track");
        assert!(!side_path(&cache_path).exists(), "written whole");
        drop(StatCache::remembered(&cache_path));
        let read = StatCache::load(&cache_path);
        assert!(
            !read.listings.contains_key("gone/"),
            "the file holds the walk's listings"
        );
    }

    /// A revert or restore of a few files of many writes only what it changed, to the side file; the file
    /// itself stays as the track wrote it. A process that reads the cache from disk (the side file applied)
    /// finds what the one that taught it holds in memory, and gc keeps the file's tree as well. A whole save
    /// removes the side file; one that does not verify, or names another generation, is ignored.
    #[test]
    fn a_few_changed_files_are_written_beside_the_cache_file() {
        use rewind_core::model::{RelPath, SnapshotPatch};
        use std::collections::BTreeMap;

        let (_temp, wt, config) = worktree(60, 6);
        let write = |rel: &str, text: &str| write_in(&wt, rel, text);
        let store = Store::open(&config, &wt).expect("open the store");
        let cache_path = store.stat_cache_path();
        let side = side_path(&cache_path);
        let first = crate::track::track(&store, &config).expect("track").id;
        write("d0/f0.txt", "edited\n");
        write("d1/f1.txt", "edited\n");
        let second = crate::track::track(&store, &config).expect("track").id;
        // That track wrote its two files to the side file too (`a_track_of_a_few_changed_files_writes_
        // them_beside_the_cache_file`); written whole here, as a track that changes more does.
        StatCache::load(&cache_path)
            .save(&cache_path)
            .expect("save the cache whole");
        assert!(!side.exists(), "a whole save removes the side file");
        let file_bytes = fs::read(&cache_path).expect("read the cache file");

        type Seen = (
            Option<ObjectId>,
            BTreeMap<String, CacheEntry>,
            BTreeMap<String, ObjectId>,
        );
        let seen = |cache: &StatCache| -> Seen {
            let entries = cache
                .entries
                .iter()
                .map(|(path, entry)| (path.to_owned(), *entry))
                .collect();
            let dirs = cache.dirs.clone().into_iter().collect();
            (cache.tree, entries, dirs)
        };
        // What this process holds, then what a process that reads the files finds.
        let in_memory_and_on_disk = || -> (Seen, Seen, StatCache) {
            let cache = StatCache::load(&cache_path);
            let held = seen(&cache);
            drop(cache);
            let read = StatCache::load(&cache_path);
            let from_disk = seen(&read);
            (held, from_disk, read)
        };

        let files: Vec<RelPath> = ["d0/f0.txt", "d1/f1.txt"]
            .into_iter()
            .map(|p| RelPath::new(p).expect("a path"))
            .collect();
        let patch = SnapshotPatch {
            hash: crate::apply::snapshot_id(&first).expect("an id"),
            files: files.clone(),
        };
        crate::apply::revert(&store, &config, &[patch], &second, || true).expect("revert");
        assert!(side.exists(), "the side file is written");
        assert_eq!(
            fs::read(&cache_path).expect("read the cache file"),
            file_bytes,
            "the file is not"
        );
        let (held, from_disk, read) = in_memory_and_on_disk();
        assert_eq!(held.0, Some(first), "taught: the tree gone back to");
        assert_eq!(from_disk, held, "read from disk: the same cache");
        let since = read.since_file.clone().expect("read with its side file");
        assert_eq!(since.file_tree, Some(second), "gc keeps the file's tree");
        assert_eq!(
            since.paths,
            ["d0/f0.txt", "d1/f1.txt"].map(str::to_owned).into(),
            "only what changed"
        );
        let for_gc = StatCache::load_for_gc(&cache_path).expect("load for gc");
        assert_eq!(for_gc.since_file.and_then(|s| s.file_tree), Some(second));
        read.keep(&cache_path);

        // A second operation adds to the side file.
        crate::apply::restore(&store, &config, &second, None, None).expect("restore");
        let (held, from_disk, read) = in_memory_and_on_disk();
        assert_eq!(held.0, Some(second));
        assert_eq!(from_disk, held);
        assert_eq!(
            fs::read(&cache_path).expect("read the cache file"),
            file_bytes,
            "the file is still as the track wrote it"
        );
        drop(read);

        // A side file that does not verify is ignored: the file's cache, and its tree, stand alone; the copy
        // in memory gives way too, though the side file's head is intact.
        StatCache::load(&cache_path).keep(&cache_path);
        let mut data = fs::read(&side).expect("read the side file");
        let last = data.len() - 5;
        data[last] ^= 0xff;
        fs::write(&side, &data).expect("corrupt the side file");
        assert!(StatCache::remembered(&cache_path).is_none());
        let (_, from_disk, read) = in_memory_and_on_disk();
        assert!(read.since_file.is_none());
        assert_eq!(from_disk.0, Some(second));
        data[last] ^= 0xff;
        // One naming another generation of the file is ignored too.
        data[SIDE_MAGIC.len()] ^= 0xff;
        let sum = crc32fast::hash(&data[..data.len() - 4]);
        let at = data.len() - 4;
        data[at..].copy_from_slice(&sum.to_le_bytes());
        fs::write(&side, &data).expect("write a side file of another generation");
        assert!(StatCache::load(&cache_path).since_file.is_none());

        // Put back as written, a whole save (a track that finds a change) removes it.
        data[SIDE_MAGIC.len()] ^= 0xff;
        let sum = crc32fast::hash(&data[..data.len() - 4]);
        data[at..].copy_from_slice(&sum.to_le_bytes());
        fs::write(&side, &data).expect("restore the side file");
        assert!(StatCache::load(&cache_path).since_file.is_some());
        write("d2/new.txt", "new\n");
        let third = crate::track::track(&store, &config).expect("track").id;
        assert!(!side.exists(), "a whole save removes the side file");
        let (held, from_disk, read) = in_memory_and_on_disk();
        assert!(read.since_file.is_none());
        assert_eq!(held.0, Some(third));
        assert_eq!(from_disk, held);
        read.keep(&cache_path);

        // A side file that exists and cannot be read (here: a directory stands there) fails gc's load, as
        // a cache file that cannot be read does, and the copy in memory is not used; a track's load reads
        // the file's cache alone.
        let patch = SnapshotPatch {
            hash: crate::apply::snapshot_id(&first).expect("an id"),
            files,
        };
        crate::apply::revert(&store, &config, &[patch], &third, || true).expect("revert");
        assert!(side.is_file());
        StatCache::load(&cache_path).keep(&cache_path);
        fs::remove_file(&side).expect("remove the side file");
        fs::create_dir(&side).expect("a directory in its place");
        assert!(StatCache::load_for_gc(&cache_path).is_err());
        assert!(StatCache::remembered(&cache_path).is_none());
        let (alone, _) = StatCache::load_deferred(&cache_path);
        assert_eq!(alone.tree, Some(third), "the file's own cache");
        assert!(alone.since_file.is_none());
        fs::remove_dir(&side).expect("remove the directory");
    }
}
