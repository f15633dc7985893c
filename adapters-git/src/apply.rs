//! Changing the worktree: `restore`, `plan` and `revert`. Every path is checked before it is written or
//! deleted; no write goes through a symlink or outside the worktree; every write is a temporary file renamed
//! over the target; and nothing that is not tracked content at that moment is overwritten or deleted.

use std::cell::RefCell;
use std::collections::{BTreeSet, HashMap, HashSet};
use std::fs;
use std::io::{self, Read};
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::Arc;

use gix::ObjectId;
use rewind_core::model::{
    FileAction, FileActionKind, KeptPath, RelPath, RestoreOutcome, RevertDiffs, RevertOutcome,
    SnapshotId, SnapshotPatch,
};
use rewind_core::revert::file_plan;

use crate::beneath::{self, Root};
use crate::config::{ChangeHook, GitStoreConfig};
use crate::error::{GitError, GitResult};
use crate::ignore::{Ignores, OutsideRule};
use crate::odb::{Kind, Odb};
use crate::replace::{Held, Releases, preallocate};
use crate::stat_cache::{Applied, DirStat, Stat, StatCache};
use crate::store::{HiddenRules, NestedRoots, SnapshotRecord, Store, is_temp_name, temp_name};
use crate::track::track;
use crate::tree::{self, Change as TreeChange, Entry, LazyTree, Mode, diff_trees, edit};

/// What kind of thing stands at a path, without following symlinks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum OnDisk {
    Absent,
    File,
    Symlink,
    Dir,
}

fn on_disk(path: &Path) -> GitResult<OnDisk> {
    look(path).map(|(kind, _)| kind)
}

/// What stands at `path`, with its stat data when it is a file or symlink: the identity a write or delete
/// checks again right before it changes the path (`standing`).
fn look(path: &Path) -> GitResult<(OnDisk, Option<Stat>)> {
    Ok(match lstat(path)? {
        Some(meta) => {
            let kind = if meta.file_type().is_symlink() {
                OnDisk::Symlink
            } else if meta.is_dir() {
                OnDisk::Dir
            } else {
                OnDisk::File
            };
            (kind, Mode::of_file(&meta).map(|mode| Stat::of(&meta, mode)))
        }
        None => (OnDisk::Absent, None),
    })
}

/// `on_disk` of a directory's path, with its stat data when it is a directory (`DirStat`, as the walk's
/// listings record it).
fn look_dir(path: &Path) -> GitResult<DirLook> {
    Ok(match lstat(path)? {
        Some(meta) if meta.is_dir() => (OnDisk::Dir, Some(DirStat::of(&meta))),
        Some(meta) if meta.file_type().is_symlink() => (OnDisk::Symlink, None),
        Some(_) => (OnDisk::File, None),
        None => (OnDisk::Absent, None),
    })
}

/// The `lstat` of `path`; none when nothing stands there as a worktree path: absent, below a parent that
/// is not a directory (ENOTDIR), or below a symlink that loops (ELOOP: `sub -> sub` makes `sub/x`
/// unresolvable).
fn lstat(path: &Path) -> GitResult<Option<fs::Metadata>> {
    match fs::symlink_metadata(path) {
        Ok(meta) => Ok(Some(meta)),
        Err(e)
            if e.kind() == io::ErrorKind::NotFound
                || e.raw_os_error() == Some(rustix::io::Errno::NOTDIR.raw_os_error())
                || e.raw_os_error() == Some(rustix::io::Errno::LOOP.raw_os_error()) =>
        {
            Ok(None)
        }
        Err(e) => Err(GitError::io(path, e)),
    }
}

/// What a look at a directory's path found (`look_dir`).
type DirLook = (OnDisk, Option<DirStat>);

/// What the last track's listing of a directory says of the names that decide its ignore rules and
/// whether it is a git directory.
#[derive(Clone, Copy, Debug)]
struct ListedDir {
    /// The directory's stat data when it was listed.
    stat: DirStat,
    /// Whether it held a `.gitignore` (of any kind).
    gitignore: bool,
    /// Whether it held a `.git` (of any kind: a nested repository's root, or a submodule's).
    dot_git: bool,
    /// Whether it held `objects`, `refs` and `HEAD`, the names a git directory has (`laid_out_as_git_dir`
    /// then looks at them).
    git_dir_names: bool,
}

impl ListedDir {
    /// Those of the listings of the stat cache this process keeps for `store` (none when it keeps none)
    /// that are not racy, of the directories of `only` (`a/b`; the root, whose rules are always read, left
    /// out): a cache of 100,000 files lists some 5,000 directories holding 100,000 names, and looking
    /// through all of them took 3 – 5 ms.
    fn kept(store: &Store, only: &HashSet<&str>) -> HashMap<String, ListedDir> {
        StatCache::peek_kept(&store.stat_cache_path(), |cache| {
            let mut kept = HashMap::with_capacity(only.len());
            for (dir, listing) in &cache.listings {
                let dir = dir.trim_end_matches('/');
                if dir.is_empty()
                    || !only.contains(dir)
                    || StatCache::listing_stays_racy(listing, cache.started_ns)
                {
                    continue;
                }
                let mut listed = ListedDir {
                    stat: listing.stat,
                    gitignore: false,
                    dot_git: false,
                    git_dir_names: false,
                };
                // One pass over the names (a cache of 100,000 files lists some 5,000 directories).
                let mut git_dir = [false; 3];
                for entry in listing.entries.iter() {
                    match entry.name {
                        ".gitignore" => listed.gitignore = true,
                        ".git" => listed.dot_git = true,
                        "objects" => git_dir[0] = true,
                        "refs" => git_dir[1] = true,
                        "HEAD" => git_dir[2] = true,
                        _ => {}
                    }
                }
                listed.git_dir_names = git_dir == [true; 3];
                kept.insert(dir.to_owned(), listed);
            }
            kept
        })
        .unwrap_or_default()
    }
}

/// `look` at `name` in directory `dir` (`abs` is its path, for the error).
fn look_in(dir: &OwnedFd, name: &str, abs: &Path) -> GitResult<(OnDisk, Option<Stat>)> {
    match beneath::lstat_at(dir, name) {
        Ok(st) => {
            let kind = match rustix::fs::FileType::from_raw_mode(st.st_mode) {
                rustix::fs::FileType::Symlink => OnDisk::Symlink,
                rustix::fs::FileType::Directory => OnDisk::Dir,
                _ => OnDisk::File,
            };
            Ok((kind, Stat::of_rustix(&st)))
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok((OnDisk::Absent, None)),
        Err(e) => Err(GitError::io(abs, e)),
    }
}

/// Converts a snapshot id of the core to a git object id.
pub fn object_id(id: &SnapshotId) -> GitResult<ObjectId> {
    ObjectId::from_hex(id.as_str().as_bytes())
        .map_err(|e| GitError::Refused(format!("snapshot id {id}: {e}")))
}

/// Converts a git object id to a snapshot id of the core.
pub fn snapshot_id(id: &ObjectId) -> GitResult<SnapshotId> {
    SnapshotId::parse(&id.to_string()).map_err(|e| GitError::Other(e.to_string()))
}

fn rel(path: &str) -> GitResult<RelPath> {
    RelPath::new(path).map_err(|e| GitError::Other(e.to_string()))
}

/// What is tracked content now, answered per path without walking the whole worktree: the path is a file
/// or symlink under real directories, not ignored by the rules in force, not a temporary or `.git` path,
/// and not an untracked file over the size cap. Changes made by the running operation override it.
struct TrackedNow<'a> {
    store: &'a Store,
    ignores: Ignores,
    /// The paths of the last snapshot (the stat cache's), read only when a file over the size cap needs
    /// them.
    previous: RefCell<Option<HashSet<String>>>,
    size_cap: u64,
    data_dir: Option<PathBuf>,
    /// rewind's own files inside the worktree (`GitStoreConfig::own_files`), worktree-relative.
    own_files: HashSet<String>,
    overrides: HashMap<String, bool>,
    /// Whether each directory looked at is a git directory under another name (a bare repository).
    git_dirs: RefCell<HashMap<String, bool>>,
    /// The `.gitignore` text of each directory looked at, read once per operation.
    rules: RefCell<HashMap<String, Option<String>>>,
    /// The rules in force for the entries of each directory looked at (none when the directory itself is
    /// ignored), built once per operation from the texts above. A directory with no `.gitignore` of its
    /// own and no nested repository shares its parent's (a revert of 1,000 files in a worktree of
    /// 100,000 cloned the rules for each of its files and each of their directories).
    dir_rules: RefCell<HashMap<String, Option<Rc<Ignores>>>>,
    /// While planning (nothing is changed yet), what each parent directory was found to be, with its stat
    /// data when a directory, so the same directory is not looked at again for every file in it. Off while
    /// changes are made: every parent is then checked right before it is used.
    planning_dirs: RefCell<Option<HashMap<String, DirLook>>>,
    /// What the last track's listings say of each directory (`a/b`), for those that were not racy, from
    /// the stat cache this process keeps (none when it keeps none: nothing is read for it). While
    /// planning, a directory found with the stat data its listing was taken with holds the names it held
    /// then (a name made, removed or renamed in it changes its times), so the looks for names it did not
    /// hold are not made (`listed_now`). Only the directories above the paths the operation is about
    /// (`TrackedNow::new`).
    listed: HashMap<String, ListedDir>,
    /// The tests' read fault hook (`GitStoreConfig::read_fault`).
    read_fault: Option<crate::config::ReadFault>,
}

impl<'a> TrackedNow<'a> {
    /// What is tracked now in `store`'s worktree, for an operation about `paths`: the last track's
    /// listings of the directories above them are taken (`listed`), rather than all of them.
    fn new<'p>(
        store: &'a Store,
        config: &GitStoreConfig,
        paths: impl Iterator<Item = &'p str>,
    ) -> GitResult<Self> {
        let dirs: HashSet<&str> = paths
            .flat_map(|path| path.match_indices('/').map(move |(i, _)| &path[..i]))
            .collect();
        Ok(TrackedNow {
            store,
            ignores: Ignores::for_worktree(
                &store.worktree,
                &config.excludes_file,
                config.home_dir.as_deref(),
            )?,
            previous: RefCell::new(None),
            size_cap: config.size_cap,
            data_dir: fs::canonicalize(&config.data_dir).ok(),
            own_files: own_files_in(store, config),
            overrides: HashMap::new(),
            git_dirs: Default::default(),
            rules: Default::default(),
            dir_rules: Default::default(),
            planning_dirs: RefCell::new(Some(HashMap::new())),
            listed: ListedDir::kept(store, &dirs),
            read_fault: config.read_fault.clone(),
        })
    }

    /// What stands at worktree directory `dir`, remembered while planning.
    fn dir_on_disk(&self, dir: &str) -> GitResult<OnDisk> {
        if let Some((known, _)) = self
            .planning_dirs
            .borrow()
            .as_ref()
            .and_then(|m| m.get(dir).copied())
        {
            return Ok(known);
        }
        let found = look_dir(&self.store.worktree.join(dir))?;
        if let Some(memo) = self.planning_dirs.borrow_mut().as_mut() {
            memo.insert(dir.to_owned(), found);
        }
        Ok(found.0)
    }

    /// What the last track's listing of directory `dir` says, when planning found the directory with the
    /// stat data the listing was taken with (so it holds the same names).
    fn listed_now(&self, dir: &str) -> Option<ListedDir> {
        let planning = self.planning_dirs.borrow();
        let (_, stat) = planning.as_ref()?.get(dir)?;
        let listed = self.listed.get(dir)?;
        (*stat == Some(listed.stat)).then_some(*listed)
    }

    /// Planning is over: from now on every parent is looked at when it is used.
    fn stop_planning(&self) {
        *self.planning_dirs.borrow_mut() = None;
    }

    /// The `.gitignore` text of directory `dir`, read once per operation. One that exists and cannot be
    /// read is an error: read as no rules, the files it ignores would count as tracked content.
    fn gitignore_text(&self, dir: &str) -> GitResult<Option<String>> {
        if let Some(known) = self.rules.borrow().get(dir) {
            return Ok(known.clone());
        }
        let rel = if dir.is_empty() {
            ".gitignore".to_owned()
        } else {
            format!("{dir}/.gitignore")
        };
        if self.read_fault.as_ref().is_some_and(|fault| fault(&rel)) {
            return Err(GitError::Unreadable {
                path: rel,
                reason: "injected read fault".to_owned(),
            });
        }
        let text = crate::ignore::read_gitignore(&self.store.worktree.join(dir))?;
        self.rules.borrow_mut().insert(dir.to_owned(), text.clone());
        Ok(text)
    }

    /// The rules in force for the entries of directory `dir` (`""` or `a/b`), or none when `dir` or a
    /// directory above it is ignored (as `Ignores::is_path_ignored` decides, one directory at a time).
    fn rules_for(&self, dir: &str) -> GitResult<Option<Rc<Ignores>>> {
        if let Some(known) = self.dir_rules.borrow().get(dir) {
            return Ok(known.clone());
        }
        let rules = if dir.is_empty() {
            self.ignores
                .rules_below_root(self.gitignore_text("")?.as_deref())
                .map(Rc::new)
        } else {
            let parent = dir.rsplit_once('/').map_or("", |(parent, _)| parent);
            match self.rules_for(parent)? {
                Some(rules) if rules.is_ignored(dir, true) => None,
                Some(rules) => {
                    let listed = self.listed_now(dir);
                    let exclude = if listed.is_some_and(|listed| !listed.dot_git) {
                        None
                    } else {
                        crate::ignore::nested_repository_exclude(&self.store.worktree.join(dir))?
                    };
                    let text = if listed.is_some_and(|listed| !listed.gitignore) {
                        None
                    } else {
                        self.gitignore_text(dir)?
                    };
                    if exclude.is_none() && text.is_none() {
                        Some(rules)
                    } else {
                        let slashed = format!("{dir}/");
                        let mut rules = match exclude {
                            Some(exclude) => rules.nested(&slashed, exclude.as_deref()),
                            None => Ignores::clone(&rules),
                        };
                        rules.push_dir(&slashed, text.as_deref());
                        Some(Rc::new(rules))
                    }
                }
                None => None,
            }
        };
        self.dir_rules
            .borrow_mut()
            .insert(dir.to_owned(), rules.clone());
        Ok(rules)
    }

    fn contains(&self, path: &str) -> GitResult<bool> {
        if let Some(known) = self.overrides.get(path) {
            return Ok(*known);
        }
        if self.never_tracked(path) {
            return Ok(false);
        }
        for (i, _) in path.match_indices('/') {
            if self.dir_on_disk(&path[..i])? != OnDisk::Dir {
                return Ok(false);
            }
        }
        match look(&self.store.worktree.join(path)) {
            Ok((kind, stat)) => self.tracked_as_seen(path, kind, stat),
            Err(_) => Ok(false),
        }
    }

    /// A `.git` or temporary path, one inside the data dir or inside a git directory under another name,
    /// or one of rewind's own files: never tracked content, whatever stands there.
    fn never_tracked(&self, path: &str) -> bool {
        self.own_files.contains(path)
            || path.split('/').any(|c| c == ".git" || is_temp_name(c))
            || path.match_indices('/').any(|(i, _)| {
                self.data_dir.as_ref() == Some(&self.store.worktree.join(&path[..i]))
                    || self.is_git_dir(&path[..i])
            })
    }

    /// Whether worktree directory `dir` is a git directory (the walk leaves those out: `list_dir`).
    fn is_git_dir(&self, dir: &str) -> bool {
        if let Some(known) = self.git_dirs.borrow().get(dir) {
            return *known;
        }
        let found = self
            .listed_now(dir)
            .is_none_or(|listed| listed.git_dir_names)
            && crate::store::laid_out_as_git_dir(&self.store.worktree.join(dir));
        self.git_dirs.borrow_mut().insert(dir.to_owned(), found);
        found
    }

    /// `contains` for a path whose parents the caller has just found to be real directories, and which
    /// it has just looked at (`look`): what stands there is not looked at again.
    fn contains_below_dirs(&self, path: &str, kind: OnDisk, stat: Option<Stat>) -> GitResult<bool> {
        if let Some(known) = self.overrides.get(path) {
            return Ok(*known);
        }
        if self.never_tracked(path) {
            return Ok(false);
        }
        self.tracked_as_seen(path, kind, stat)
    }

    /// The rest of `contains`, for a path whose name and parents passed its checks, from what stands there.
    fn tracked_as_seen(&self, path: &str, kind: OnDisk, stat: Option<Stat>) -> GitResult<bool> {
        // A regular file has stat data; a FIFO, socket or device (`OnDisk::File` without it) is not
        // tracked content.
        match (kind, stat) {
            (OnDisk::Symlink, _) => {}
            (OnDisk::File, Some(stat)) => {
                if stat.size > self.size_cap && !self.was_tracked(path) {
                    return Ok(false);
                }
            }
            _ => return Ok(false),
        }
        let parent = path.rsplit_once('/').map_or("", |(parent, _)| parent);
        Ok(self
            .rules_for(parent)?
            .is_some_and(|rules| !rules.is_ignored(path, false)))
    }

    /// Whether `path` is in the last snapshot (a file there stays tracked when it grows past the cap).
    fn was_tracked(&self, path: &str) -> bool {
        self.previous
            .borrow_mut()
            .get_or_insert_with(|| {
                StatCache::peek(&self.store.stat_cache_path(), |cache| {
                    cache.entries.iter().map(|(p, _)| p.to_owned()).collect()
                })
            })
            .contains(path)
    }
}

/// Tracked content now: the snapshot a track just took (its trees read along the paths asked about), or
/// answered per path; changes made by the running operation override either.
enum Tracking<'a> {
    Snapshot(RefCell<LazyTree<'a>>, HashMap<String, bool>),
    PerPath(Box<TrackedNow<'a>>),
}

impl Tracking<'_> {
    fn contains(&self, path: &str) -> GitResult<bool> {
        match self {
            Tracking::Snapshot(tree, overrides) => match overrides.get(path) {
                Some(known) => Ok(*known),
                None => Ok(tree.borrow_mut().get(path)?.is_some()),
            },
            Tracking::PerPath(now) => now.contains(path),
        }
    }

    /// `contains` for a path whose parents were just found to be real directories and which was just
    /// looked at (`TrackedNow::contains_below_dirs`).
    fn contains_below_dirs(&self, path: &str, kind: OnDisk, stat: Option<Stat>) -> GitResult<bool> {
        match self {
            Tracking::Snapshot(..) => self.contains(path),
            Tracking::PerPath(now) => now.contains_below_dirs(path, kind, stat),
        }
    }

    /// Takes back what `set` said of `path` (a write that did not happen).
    fn forget(&mut self, path: &str) {
        match self {
            Tracking::Snapshot(_, overrides) => overrides.remove(path),
            Tracking::PerPath(now) => now.overrides.remove(path),
        };
    }

    fn set(&mut self, path: &str, entry: Option<(Mode, ObjectId)>) {
        match self {
            Tracking::Snapshot(_, overrides) => {
                overrides.insert(path.to_owned(), entry.is_some());
            }
            Tracking::PerPath(now) => {
                now.overrides.insert(path.to_owned(), entry.is_some());
            }
        }
    }
}

/// Carries out writes and deletes on one worktree, recording what it did.
struct Applier<'a> {
    store: &'a Store,
    /// The worktree, every change is made through (`beneath`).
    root: Root,
    /// The tests' race hooks (`GitStoreConfig::change_hook`, `swap_hook`, `written_hook` and
    /// `settle_hook`).
    hook: Option<ChangeHook>,
    swap_hook: Option<ChangeHook>,
    written_hook: Option<ChangeHook>,
    settle_hook: Option<ChangeHook>,
    /// What each target was when the operation looked at it (stat data, or none when absent, also when a
    /// directory on its way was missing): a revert's check against its snapshot, a restore's own look or
    /// track. A target found otherwise when it is written or deleted changed after that look, and is left
    /// as it is. A revert also puts here the file or symlink standing where a target's directory should
    /// be.
    expected: Expected,
    /// Paths the operation leaves as they are because they changed after its snapshot (a revert's
    /// `edited`, a restore's `changed_since`): never replaced, not even by a directory a write needs.
    protected: HashSet<String>,
    /// Tracked content now, updated as the applier changes it.
    tracked: Tracking<'a>,
    batch: String,
    counter: u64,
    /// Every path touched, in order, with whether it was tracked content before the first touch.
    touched: Vec<(String, bool)>,
    /// The last thing done to each touched path: its new entry, or none when deleted.
    last: HashMap<String, Option<(Mode, ObjectId)>>,
    kept: Vec<KeptPath>,
    /// For a restore of given paths: a parent standing in the way may be replaced only when it is itself
    /// in scope.
    scope: Scope,
    /// Files checked and decided but not yet written (a temporary file renamed over the target): written
    /// together, on several threads, before anything is done to a related path and before the end.
    pending: Vec<PendingWrite>,
    /// The pending paths.
    pending_paths: HashSet<String>,
    /// The stat data of each file written, right after it was written (none when it could not be taken).
    written_stats: HashMap<String, Option<Stat>>,
    /// Every directory above a pending path.
    pending_dirs: HashSet<String>,
    /// Directories the snapshot gone back to had while they held no file
    /// (`SnapshotRecord::dirs_kept_when_emptied`): a delete that empties one leaves it, as it leaves a
    /// directory that still holds something.
    existed_empty: HashSet<String>,
    /// The permission bits a file written where none stands gets, when they are not a new file's
    /// (`SnapshotRecord::modes` of the snapshot it comes from), and those of the directories it makes
    /// (`a/b/`, `dir_permissions`).
    modes: HashMap<String, u32>,
    /// The hard-linked files one of whose names the operation replaces or deletes (`Relinked`).
    relinked: Relinked,
    /// Whether `expected` says what a look through a handle on each target's directory, opened beneath
    /// the worktree, found after the plan (a revert's `changed_after_track`; a restore's comes partly
    /// from the stat cache).
    expected_looked: bool,
    /// For a revert: targets whose directory did not open beneath the worktree when the revert looked
    /// (missing, or a file or symlink on the way). `expected` holds them as absent: once the writing has
    /// made or replaced that directory, a file found there was made by someone else meanwhile. Their
    /// writes always look for themselves (they make the directory first).
    unopened: HashSet<String>,
    /// For a revert: paths where its check found a directory or a special file (targets, and the
    /// directories on the way to a target whose directory did not open). A file or symlink standing there
    /// later is someone else's, made meanwhile (`as_expected`).
    not_a_file: HashSet<String>,
    /// Whether the operation may have made or removed a directory yet (a delete, which removes the
    /// directories it empties, or a write that made a parent or replaced what stood in the way). Until
    /// it has, a write may take what `expected` says stands at its path when `expected_looked`
    /// (`Applier::write`).
    dirs_changed: bool,
    /// Files deleted by moving them aside (`remove_aside`), still at their temporary names until the
    /// deletions end (`finish`, at the first write or the operation's end), which looks at them again as
    /// at the files the writes swapped out (`settle`).
    deleted_aside: Vec<SwappedOut>,
    /// The directory handle kept last for `deleted_aside` (`keep_dir`).
    kept_dir: LastKeptDir,
    /// The files of `deleted_aside` removed to make way for a directory (`write`): written to meanwhile,
    /// such a file cannot go back to its name, which the directory holds; it is kept beside it, and its
    /// deletion stands.
    made_way: HashSet<String>,
    /// The paths deleted (or found gone) whose emptied directories are removed once the files moved
    /// aside from them are settled: at the first write, or at the operation's end (`finish`).
    emptied: Vec<String>,
    /// Every directory above a path of `emptied`: a deletion of one of these paths first ends the
    /// deletions before it (a file that a directory they emptied replaced).
    emptied_dirs: HashSet<String>,
}

impl Drop for Applier<'_> {
    /// An operation that fails before its end (`finish`) still settles the files its deletions moved
    /// aside, and removes the directories they emptied, as it did when a deletion removed its file at
    /// once: none is left at a temporary name, which the journal's clean-up would remove with whatever
    /// was written to it meanwhile.
    fn drop(&mut self) {
        let deleted = std::mem::take(&mut self.deleted_aside);
        if !deleted.is_empty() {
            let _ = self.settle_swapped(deleted);
        }
        self.remove_emptied();
    }
}

/// The files with more than one name (hard links) one of whose names an operation is about to replace or
/// delete, by device and inode. Dropping a name sets the file's status change time, and its other names
/// are the same file: each is then still what was checked, but for that time (a write sets the
/// modification time or the size). Without this, the second name of a file a step changed in place was
/// kept as "changed while rewind was writing", and the revert undid only one of them (black-box).
#[derive(Default)]
struct Relinked(std::sync::Mutex<HashSet<(u64, u64)>>);

impl Relinked {
    fn set(&self) -> std::sync::MutexGuard<'_, HashSet<(u64, u64)>> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Notes the file of `st`, about to lose one of its names, when it has others.
    fn note(&self, st: &rustix::fs::Stat) {
        if st.st_nlink > 1 {
            #[allow(clippy::unnecessary_cast)]
            self.set().insert((st.st_dev as u64, st.st_ino as u64));
        }
    }

    /// Whether `now` is `was`: the same, or the same file but for the status change time when the
    /// operation dropped another of its names.
    fn same(&self, now: Stat, was: Stat) -> bool {
        now == was
            || (Stat {
                ctime_ns: was.ctime_ns,
                ..now
            } == was
                && self.set().contains(&(now.dev, now.ino)))
    }
}

/// How many files are written at once (their IO overlaps: each rename can wait for the disk).
const WRITE_BATCH: usize = 256;
const WRITE_THREADS: usize = 16;
/// A write thread is started for every this many files, up to `WRITE_THREADS`: a thread costs about 20 µs
/// to start and then competes for the cores, and small batches gained nothing from many (`http_bench`, five
/// alternating pairs against 16 threads for any batch: reverts of 10 to 50 files 0.3 ms faster, the
/// unreverts 0.7 ms). A batch of up to this many is written on the calling thread.
const FILES_PER_WRITE_THREAD: usize = 16;

/// The threads that write (or settle) `files` files.
fn write_threads(files: usize) -> usize {
    files
        .div_ceil(FILES_PER_WRITE_THREAD)
        .clamp(1, WRITE_THREADS)
}

/// One file to write: checked and decided, with the temporary name it is written under first (in the
/// same directory).
struct PendingWrite {
    rel: String,
    tmp: String,
    abs: PathBuf,
    mode: Mode,
    id: ObjectId,
    /// What stood at the path when it was checked: its stat data, or none when nothing stood there. The
    /// file is replaced only while that is still so: a file gone since was deleted by someone else after
    /// the check, and stays deleted (the path is kept).
    was: Option<Stat>,
    /// The permission bits it gets when nothing stood there (`Applier::modes`; none: a new file's).
    bits: Option<u32>,
}

/// What each path an operation will write or delete was when it looked (`Applier::expected`): stat data,
/// or none when absent.
type Expected = HashMap<String, Option<Stat>>;

/// How a write or delete ended.
enum Done {
    /// Done; for a write, the file's stat data right after it (when it is still what was written).
    Changed(Option<Stat>),
    /// Nothing done: the path, or a directory above it, is not what was checked any more (changed by
    /// someone else meanwhile), so it is left as it is.
    Moved,
}

/// Why a path is left as it is when it changed between its check and its write or delete.
const MOVED_MEANWHILE: &str = "it, or a directory above it, changed while rewind was writing (another \
                               program at work in the worktree), so it is left as it is";

/// Why a file removed to make way for a directory is named as kept: it was written to meanwhile.
const MADE_WAY_KEPT: &str = "it was written to while rewind replaced it with the directory it needs \
                             (another program at work in the worktree); what was written is kept beside \
                             the directory as <name>.rewind-kept-<…>";

/// A failure to write the temporary file: of the store (reading the blob) or of the disk.
enum TempError {
    Store(GitError),
    Disk(io::Error),
}

/// Writes blob `id` to a temporary file beside `job.rel`, then renames it over the path while what stands
/// there is what was checked (`job.was`); the temporary file is removed when anything fails. Every step
/// goes through a handle on the file's directory, opened without following a symlink (`beneath`).
/// Returns the file's stat data as it stands after the rename, when it is still what was written (the
/// stat cache takes it, see `StatCache::note_applied`).
/// The file renamed over is handed to `releases` (see `replace.rs`).
fn write_file(
    (store, root, relinked): (&Store, &Root, &Relinked),
    (hook, swap_hook, written_hook): (
        Option<&ChangeHook>,
        Option<&ChangeHook>,
        Option<&ChangeHook>,
    ),
    job: &PendingWrite,
    thread: &mut WriteThread,
) -> GitResult<Done> {
    if let Some(hook) = hook {
        hook(&job.rel);
    }
    let before_swap = || {
        if let Some(hook) = swap_hook {
            hook(&job.rel);
        }
    };
    let (dir_rel, name) = beneath::split(&job.rel);
    let dir = match root.dir(dir_rel) {
        Ok(dir) => dir,
        Err(e) if beneath::moved(&e) => return Ok(Done::Moved),
        Err(e) => return Err(GitError::io(&job.abs, e)),
    };
    let dir_path = job.abs.parent().unwrap_or(&store.worktree);
    let remove_temp = || {
        let _ = rustix::fs::unlinkat(&dir, job.tmp.as_str(), rustix::fs::AtFlags::empty());
    };
    let temp = match write_temp(store, &dir, &job.tmp, job.mode, &job.id) {
        Ok(temp) => temp,
        Err(failure) => {
            remove_temp();
            return match failure {
                TempError::Disk(e) if beneath::moved(&e) => Ok(Done::Moved),
                TempError::Disk(e) => Err(GitError::io(&job.abs, e)),
                TempError::Store(e) => Err(e),
            };
        }
    };
    let swapped_out = match replace(
        &dir,
        &job.tmp,
        (&temp, job.bits),
        name,
        job.was,
        (dir_path, relinked),
        before_swap,
    ) {
        Ok(Some(Replaced {
            held,
            swapped_out: None,
        })) => {
            thread.releases.push(held);
            None
        }
        // Still linked at the temporary name: closing its handle frees nothing; `settle` holds it again.
        Ok(Some(Replaced {
            held: _,
            swapped_out: Some(ours),
        })) => Some(ours),
        Ok(None) => {
            remove_temp();
            return Ok(Done::Moved);
        }
        // The temporary file, or its directory, was removed meanwhile (another program's `rm -rf`):
        // nothing was written, and the path is left as that program left it (black-box: such a removal
        // failed the revert, and the rollback then put back older versions of other files).
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            remove_temp();
            return Ok(Done::Moved);
        }
        // A user's file stands at the temporary name: it stays there (`keep_aside`), noted for the next
        // opening to keep.
        Err(e) if is_stranded(&e) => {
            let _ = store.journal_stranded(&dir_path.join(&job.tmp));
            return Err(GitError::io(&job.abs, e));
        }
        Err(e) => {
            remove_temp();
            return Err(GitError::io(&job.abs, e));
        }
    };
    if let Some(hook) = written_hook {
        hook(&job.rel);
    }
    // What the stat cache learns is the file this wrote, or nothing: another program's write between the
    // rename and this look (an edit in place, or a file put there, with an old time set back, as `cp -p`,
    // `tar` and `rsync -t` do) would otherwise be learnt with the blob written here, and every later track
    // would take the file for that blob (stat-cache fuzz). The file written keeps its inode, size and
    // modification time through the rename; one changed since has another, or that recent time, which
    // keeps it racy (read again by the next track).
    let stat = beneath::lstat_at(&dir, name)
        .ok()
        .and_then(|st| Stat::of_rustix(&st))
        .filter(|stat| stat.mode == job.mode && temp.wrote(stat));
    if let (Some(ours), Some(was)) = (swapped_out, job.was) {
        let dir_handle = thread.keep_dir(dir_rel, dir);
        thread.swapped_out(SwappedOut {
            dir: dir_rel.to_owned(),
            dir_handle,
            tmp: job.tmp.clone(),
            name: name.to_owned(),
            rel: job.rel.clone(),
            was,
            ours,
            at: std::time::Instant::now(),
            dir_path: dir_path.to_path_buf(),
            ext4: temp.ext4,
        });
    }
    Ok(Done::Changed(stat))
}

/// How long a file a write swapped out stays at the temporary name, at least, before it is looked at
/// again (`settle`).
const SETTLE_AGE: std::time::Duration = std::time::Duration::from_millis(1);

/// A file a write swapped out of its name (`swap_in`), unchanged then, left at the write's temporary
/// name until the writes of the batch are done and it is at least `SETTLE_AGE` old: a program that
/// opened the file before the swap can still write to it after (a write already under way, the open's
/// truncation included), and that write, found by the second look, is put back instead of removed with
/// the file (black-box: one such write in a race audit was lost, neither on disk nor in the store). A file
/// a deletion moved aside (`remove_aside`) waits the same way, until the deletions end, with no new
/// content at its name (`ours` none).
struct SwappedOut {
    /// Its directory, worktree-relative (opened again to look when no handle is kept, `dir_handle`).
    dir: String,
    /// The handle the write used on that directory, kept (shared by the files of one directory a thread
    /// wrote one after the other, and at most `KEPT_DIR_HANDLES` at once): the file is looked at there,
    /// where it is, though another program moved the directory since (review: after an `mv` during an
    /// undo, the directory was not found by its path, the files taken for removed with it, and they stayed
    /// in it at their temporary names for good).
    dir_handle: Option<Arc<KeptDir>>,
    /// The temporary name it stands at.
    tmp: String,
    /// Its own name, where the new content stands.
    name: String,
    /// Its worktree-relative path.
    rel: String,
    /// Its stat data when it was checked, and at the swap.
    was: Stat,
    /// The new content's stat data before the swap: none for a deletion (nothing new stands at the name),
    /// or when it could not be taken.
    ours: Option<Stat>,
    /// When it was swapped out.
    at: std::time::Instant,
    /// Its directory's path, and whether it is on ext4 (for the handle that frees it, see `replace.rs`).
    dir_path: PathBuf,
    ext4: bool,
}

/// How many directory handles the swapped-out files of the process's writes keep at once; past it, a file's
/// directory is opened again by its path to look at it.
const KEPT_DIR_HANDLES: usize = 256;

/// The directory handles kept now (`KeptDir`).
static KEPT_DIRS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// A directory handle kept for the files swapped out in it (`SwappedOut::dir_handle`), counted in
/// `KEPT_DIRS` while it lives.
struct KeptDir(OwnedFd);

impl Drop for KeptDir {
    fn drop(&mut self) {
        KEPT_DIRS.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
    }
}

/// The last directory handle kept by a thread or an applier: its directory (worktree-relative), identity
/// (device, inode) and handle.
type LastKeptDir = Option<(String, (u64, u64), Arc<KeptDir>)>;

/// The handle to keep for a file swapped or moved out in `dir` (worktree-relative), opened as `fd`: the
/// last one kept (`last`) when it is the same directory, else `fd` itself, unless `KEPT_DIR_HANDLES` are
/// kept.
fn keep_dir(last: &mut LastKeptDir, dir: &str, fd: OwnedFd) -> Option<Arc<KeptDir>> {
    use std::sync::atomic::Ordering;
    #[allow(clippy::unnecessary_cast)]
    let id = rustix::fs::fstat(&fd)
        .ok()
        .map(|st| (st.st_dev as u64, st.st_ino as u64))?;
    if let Some((kept, kept_id, handle)) = last.as_ref()
        && kept == dir
        && *kept_id == id
    {
        return Some(Arc::clone(handle));
    }
    if KEPT_DIRS.fetch_add(1, Ordering::Relaxed) >= KEPT_DIR_HANDLES {
        KEPT_DIRS.fetch_sub(1, Ordering::Relaxed);
        return None;
    }
    let handle = Arc::new(KeptDir(fd));
    *last = Some((dir.to_owned(), id, Arc::clone(&handle)));
    Some(handle)
}

/// A write thread's files to hand over (`Releases`), and where it puts the files it swaps out.
struct WriteThread<'a> {
    releases: Releases,
    swapped: &'a std::sync::Mutex<Vec<SwappedOut>>,
    /// The directory handle kept last, with its directory (worktree-relative) and identity (device, inode).
    kept_dir: LastKeptDir,
}

impl<'a> WriteThread<'a> {
    fn new(swapped: &'a std::sync::Mutex<Vec<SwappedOut>>) -> WriteThread<'a> {
        WriteThread {
            releases: Releases::default(),
            swapped,
            kept_dir: None,
        }
    }

    /// `keep_dir` for this thread.
    fn keep_dir(&mut self, dir: &str, fd: OwnedFd) -> Option<Arc<KeptDir>> {
        keep_dir(&mut self.kept_dir, dir, fd)
    }

    fn swapped_out(&mut self, file: SwappedOut) {
        self.swapped
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(file);
    }
}

/// Looks at a swapped-out file again (`SwappedOut`): unchanged, it is removed (`Settled::Removed`); written
/// to since, it goes back to its name in place of the new content, while that stands there unchanged
/// (`AtName`), or is moved aside (`<name>.rewind-kept-<tmp>`) when something newer stands there
/// (`Aside`), and the path is left as it is. A failure to remove it is an error, and it is moved aside
/// first.
fn settle(
    root: &Root,
    file: &SwappedOut,
    hook: Option<&ChangeHook>,
    (opened, releases): &mut SettleThread,
) -> io::Result<Settled> {
    use rustix::fs::{AtFlags, Mode as Bits, OFlags, RenameFlags};
    use rustix::io::Errno;
    std::thread::sleep(SETTLE_AGE.saturating_sub(file.at.elapsed()));
    if let Some(hook) = hook {
        hook(&file.rel);
    }
    // The files are in directory order: a thread opens each directory once, through the handle the write
    // kept when there is one (the directory may have moved since, with the file in it).
    if opened.as_ref().is_none_or(|(dir, _)| *dir != file.dir) {
        let fd = match &file.dir_handle {
            Some(kept) => rustix::io::dup(&kept.0).map_err(io::Error::from),
            None => root.dir(&file.dir),
        };
        match fd {
            Ok(fd) => *opened = Some((file.dir.clone(), fd)),
            // Its directory was removed or replaced meanwhile, with the file in it.
            Err(e) if beneath::moved(&e) => return Ok(Settled::Removed),
            Err(e) => return Err(e),
        }
    }
    let Some((_, dir)) = opened.as_ref() else {
        return Ok(Settled::Removed);
    };
    let (tmp, name) = (file.tmp.as_str(), file.name.as_str());
    // Looked at through a handle, which then holds the file past its unlink (`replace.rs`).
    let out = rustix::fs::openat(
        dir,
        tmp,
        OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Bits::empty(),
    )
    .and_then(|fd| rustix::fs::fstat(&fd).map(|st| (fd, st)));
    match out {
        Ok((fd, out)) if moved_unchanged(&out, file.was) => {
            #[allow(clippy::unnecessary_cast)]
            let held = Held::of(fd, out.st_dev as u64, &file.dir_path, file.ext4);
            return match rustix::fs::unlinkat(dir, tmp, AtFlags::empty()) {
                Ok(()) | Err(Errno::NOENT) => {
                    releases.push(held);
                    Ok(Settled::Removed)
                }
                Err(e) => {
                    // Back to its name when nothing stands there (a deleted file), else beside it.
                    put_at_free_name(dir, tmp, name)?;
                    Err(e.into())
                }
            };
        }
        // Removed by another program meanwhile.
        Err(Errno::NOENT) => return Ok(Settled::Removed),
        _ => {}
    }
    let unchanged_ours =
        |st: &rustix::fs::Stat| file.ours.is_some_and(|ours| moved_unchanged(st, ours));
    Ok(match beneath::lstat_at(dir, name) {
        Ok(at_name) if unchanged_ours(&at_name) => {
            match rustix::fs::renameat_with(dir, tmp, dir, name, RenameFlags::EXCHANGE) {
                Ok(()) => {
                    // What came out is the new content, unless a newer file came to the name in between.
                    let out = beneath::lstat_at(dir, tmp);
                    if !out.is_ok_and(|out| unchanged_ours(&out))
                        || rustix::fs::unlinkat(dir, tmp, AtFlags::empty())
                            .is_err_and(|e| e != Errno::NOENT)
                    {
                        keep_aside(dir, tmp, name)?;
                    }
                    Settled::AtName
                }
                Err(Errno::NOENT) => put_at_free_name(dir, tmp, name)?,
                Err(_) => {
                    keep_aside(dir, tmp, name)?;
                    Settled::Aside
                }
            }
        }
        // Nothing stands at the name any more: the file goes back there.
        Err(e) if e.kind() == io::ErrorKind::NotFound => put_at_free_name(dir, tmp, name)?,
        // A newer write, or another file, stands there: it stays, and the file is kept beside it.
        _ => {
            keep_aside(dir, tmp, name)?;
            Settled::Aside
        }
    })
}

/// What `settle` did with a file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Settled {
    /// Unchanged (or gone): removed.
    Removed,
    /// Written to since: back at its name.
    AtName,
    /// Written to since: kept beside its name (`<name>.rewind-kept-…`).
    Aside,
}

/// A settling thread's last directory opened, and the files it hands over (`Releases`).
type SettleThread = (Option<(String, OwnedFd)>, Releases);

/// Renames `tmp` to `name` while nothing stands there, else keeps it aside (`keep_aside`, whose error it
/// returns); which of the two.
fn put_at_free_name(dir: &OwnedFd, tmp: &str, name: &str) -> io::Result<Settled> {
    if rustix::fs::renameat_with(dir, tmp, dir, name, rustix::fs::RenameFlags::NOREPLACE).is_err() {
        keep_aside(dir, tmp, name)?;
        return Ok(Settled::Aside);
    }
    Ok(Settled::AtName)
}

/// What stands at `name` of `dir` now, against `was` (the stat data of the file or symlink checked there).
enum Standing {
    /// Nothing stands there any more.
    Gone,
    /// Something else stands there.
    Other,
    /// Still `was`, held through a handle (`O_PATH`) until it is released (see `replace.rs`), with its
    /// permission bits and owner when it is a regular file.
    Same(Held, Option<(u32, Owner)>),
}

/// A file's owner and group.
type Owner = (u32, u32);

/// The owner and group a file or directory made where none stood gets: none (the process's) but for a
/// process of root's, where they are those of the directory it is made in (review: an agent run as root
/// in a container, on a project of the user's, had every file and directory an undo brought back made
/// root's, which the user could then not write in). The snapshot does not say whose a file was.
fn owner_for_new(dir: &OwnedFd) -> Option<Owner> {
    if !rustix::process::geteuid().is_root() {
        return None;
    }
    #[allow(clippy::unnecessary_cast)]
    let owner = rustix::fs::fstat(dir)
        .ok()
        .map(|st| (st.st_uid as u32, st.st_gid as u32))?;
    (owner != (0, 0)).then_some(owner)
}

/// Looks at `name` in `dir` again, through a handle, right before it is renamed over or deleted.
fn standing(
    dir: &OwnedFd,
    name: &str,
    was: Stat,
    (dir_path, relinked): (&Path, &Relinked),
    ext4: bool,
) -> io::Result<Standing> {
    use rustix::fs::{Mode as Bits, OFlags};
    let fd = match rustix::fs::openat(
        dir,
        name,
        OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Bits::empty(),
    ) {
        Ok(fd) => fd,
        Err(rustix::io::Errno::NOENT) => return Ok(Standing::Gone),
        Err(e) => return Err(e.into()),
    };
    let st = rustix::fs::fstat(&fd)?;
    if !Stat::of_rustix(&st).is_some_and(|now| relinked.same(now, was)) {
        return Ok(Standing::Other);
    }
    relinked.note(&st);
    let regular =
        rustix::fs::FileType::from_raw_mode(st.st_mode) == rustix::fs::FileType::RegularFile;
    #[allow(clippy::unnecessary_cast)]
    let (permissions, dev) = (
        regular.then_some((
            st.st_mode as u32 & 0o777,
            (st.st_uid as u32, st.st_gid as u32),
        )),
        st.st_dev as u64,
    );
    Ok(Standing::Same(
        Held::of(fd, dev, dir_path, ext4),
        permissions,
    ))
}

/// Renames `tmp` over `name` in `dir` while what stands there is `was` (its stat data when checked; none:
/// nothing stood there): for nothing, atomically (`RENAME_NOREPLACE`); for a file, right after looking at
/// it again (`standing`), whose handle is returned for `Releases`, by swapping the two (`swap_in`). None
/// when the path is not what was checked (nothing is replaced), a file gone meanwhile included: it stays
/// gone. `before_swap` is the tests' race hook.
fn replace(
    dir: &OwnedFd,
    tmp: &str,
    (temp, bits): (&Temp, Option<u32>),
    name: &str,
    was: Option<Stat>,
    at: (&Path, &Relinked),
    before_swap: impl Fn(),
) -> io::Result<Option<Replaced>> {
    use rustix::fs::RenameFlags;
    use rustix::io::Errno;
    let none = |swapped_out| Replaced {
        held: Held::none(),
        swapped_out,
    };
    if let Some(was) = was {
        match standing(dir, name, was, at, temp.ext4)? {
            Standing::Same(held, kept) => {
                // The file keeps the permissions it has (a private file stays private), with the execute
                // bits its snapshot says; a file replacing a symlink gets the bits recorded for it. Then
                // its owner and group, where this process may give them (review: as root, every file an
                // undo wrote became root's).
                temp.set_permissions(
                    kept.map(|(p, _)| kept_permissions(p, temp.executable))
                        .or(bits),
                )?;
                if let Some((_, owner)) = kept {
                    temp.set_owner(owner);
                }
                before_swap();
                return match swap_in(dir, tmp, name, was)? {
                    Swapped::In(swapped_out) => Ok(Some(Replaced { held, swapped_out })),
                    Swapped::Changed | Swapped::Gone => Ok(None),
                };
            }
            Standing::Other | Standing::Gone => return Ok(None),
        }
    }
    // Nothing stood there: the bits the snapshot recorded for it, or a new file's; as root, its
    // directory's owner (`owner_for_new`).
    temp.set_permissions(bits)?;
    if let Some(owner) = owner_for_new(dir) {
        temp.set_owner(owner);
    }
    match rustix::fs::renameat_with(dir, tmp, dir, name, RenameFlags::NOREPLACE) {
        Ok(()) => Ok(Some(none(None))),
        Err(Errno::EXIST) => Ok(None),
        Err(e) if taken_by_a_directory(e) => Ok(None),
        // A filesystem without `RENAME_NOREPLACE`: look, then rename.
        Err(Errno::INVAL | Errno::NOSYS) => match beneath::lstat_at(dir, name) {
            Ok(_) => Ok(None),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                rustix::fs::renameat(dir, tmp, dir, name)?;
                Ok(Some(none(None)))
            }
            Err(e) => Err(e),
        },
        Err(e) => Err(e.into()),
    }
}

/// What `replace` did: the handle on what stood at the name (see `replace.rs`), and, when that file was
/// swapped out to the temporary name, where it is left to be looked at again (`SwappedOut`), the new
/// content's stat data before the swap.
struct Replaced {
    held: Held,
    swapped_out: Option<Option<Stat>>,
}

/// What `swap_in` did.
enum Swapped {
    /// The new content stands at the name; what stood there, unchanged, is at the temporary name (the
    /// new content's stat data before the swap given, when it has any), or, without the swap, gone
    /// (`None`).
    In(Option<Option<Stat>>),
    /// What stood there had changed since the look (a write landed in between): it stands there again,
    /// and the new content is back at the temporary name.
    Changed,
    /// Nothing stands at the name any more; nothing was done.
    Gone,
}

/// Puts the temporary file `tmp` at `name` in `dir`, where `was` (stat data) stood at the last look. The
/// two are swapped in one step (`RENAME_EXCHANGE`), and what came out is looked at: still `was`, it is
/// left at `tmp`, for the caller to look at again and remove once the batch's writes are done (`settle`);
/// otherwise a write landed between the look and the swap (a user's edit in place, or a file put there
/// by rename), and it is swapped back, so nothing of the user's is lost (a plain rename would have
/// dropped it with no copy). Should yet another file have come to the name in that instant, the one that
/// comes out is moved aside under a name of its own (`<name>.rewind-kept-<temporary name>`) rather than
/// removed. A filesystem without the swap (NFS, some FUSE) gets a plain rename, as before.
fn swap_in(dir: &OwnedFd, tmp: &str, name: &str, was: Stat) -> io::Result<Swapped> {
    use rustix::fs::RenameFlags;
    use rustix::io::Errno;
    let ours = beneath::lstat_at(dir, tmp)?;
    match rustix::fs::renameat_with(dir, tmp, dir, name, RenameFlags::EXCHANGE) {
        Ok(()) => {}
        Err(Errno::NOENT) => return Ok(Swapped::Gone),
        Err(Errno::INVAL | Errno::NOSYS | Errno::OPNOTSUPP) => {
            return match rustix::fs::renameat(dir, tmp, dir, name) {
                Ok(()) => Ok(Swapped::In(None)),
                // Turned into a directory since the look.
                Err(e) if taken_by_a_directory(e) => Ok(Swapped::Changed),
                Err(e) => Err(e.into()),
            };
        }
        Err(e) => return Err(e.into()),
    }
    // From here on, what stands at `tmp` may be the user's: it is never left there on a failure, where
    // the caller's clean-up of the temporary name would remove it.
    let unchanged = beneath::lstat_at(dir, tmp).is_ok_and(|out| moved_unchanged(&out, was));
    if unchanged {
        return Ok(Swapped::In(Some(Stat::of_rustix(&ours))));
    }
    match rustix::fs::renameat_with(dir, tmp, dir, name, RenameFlags::EXCHANGE) {
        Ok(()) => {}
        // The new content was removed from the name meanwhile: the user's goes back there.
        Err(Errno::NOENT) => {
            put_at_free_name(dir, tmp, name)?;
            return Ok(Swapped::Changed);
        }
        Err(e) => {
            keep_aside(dir, tmp, name)?;
            return Err(e.into());
        }
    }
    let back = beneath::lstat_at(dir, tmp);
    if back.is_ok_and(|back| (back.st_dev, back.st_ino) != (ours.st_dev, ours.st_ino)) {
        // Not the new content: someone else's file.
        keep_aside(dir, tmp, name)?;
    }
    Ok(Swapped::Changed)
}

/// Moves what stands at the temporary name `tmp` (a user's file, swapped or moved out) to
/// `<name>.rewind-kept-<tmp>` beside it, where no clean-up of temporary files removes it; when that name
/// is taken or too long (a name of over 200 bytes), to `rewind-kept-<batch>-<n>`, then to one of its
/// own; by a link and an unlink where the filesystem has no `RENAME_NOREPLACE` (NFS). Nothing at `tmp`
/// any more is no failure. When it cannot be moved, the error says so (`Stranded`): the file stays at
/// `tmp`, which the caller must not remove, and the operation fails, so its journal stays and the next
/// opening of the store keeps the file (`Store::clean_journal`). Black-box: the failure went unseen,
/// and the caller's clean-up of the temporary name removed another program's file.
fn keep_aside(dir: &OwnedFd, tmp: &str, name: &str) -> io::Result<()> {
    use rustix::fs::{AtFlags, RenameFlags};
    use rustix::io::Errno;
    let names = [
        Some(format!("{name}.rewind-kept-{tmp}")),
        tmp.strip_prefix(".rewind-tmp-")
            .map(|rest| format!("rewind-kept-{rest}")),
        Some(format!("rewind-kept-{}", crate::odb::rand_suffix())),
    ];
    for kept in names.iter().flatten() {
        match rustix::fs::renameat_with(dir, tmp, dir, kept.as_str(), RenameFlags::NOREPLACE) {
            Ok(()) | Err(Errno::NOENT) => return Ok(()),
            Err(Errno::INVAL | Errno::NOSYS) => {
                match rustix::fs::linkat(dir, tmp, dir, kept.as_str(), AtFlags::empty()) {
                    Ok(()) => {
                        let _ = rustix::fs::unlinkat(dir, tmp, AtFlags::empty());
                        return Ok(());
                    }
                    Err(Errno::NOENT) => return Ok(()),
                    Err(_) => {}
                }
            }
            Err(_) => {}
        }
    }
    Err(io::Error::other(Stranded(tmp.to_owned())))
}

/// A user's file `keep_aside` could not move from its temporary name.
#[derive(Debug)]
struct Stranded(String);

impl std::fmt::Display for Stranded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "a file that changed while rewind replaced it is left at the temporary name {}: it could \
             not be moved aside; the next rewind command here keeps it as rewind-kept-*",
            self.0
        )
    }
}

impl std::error::Error for Stranded {}

/// Whether `e` is `keep_aside`'s: a user's file stands at the temporary name.
fn is_stranded(e: &io::Error) -> bool {
    e.get_ref().is_some_and(|inner| inner.is::<Stranded>())
}

/// Whether `moved`, the stat data of a file just renamed, is the file `was`: a rename sets the status
/// change time (Linux's filesystems do), so all else is compared. A write sets the modification time (or
/// the size).
fn moved_unchanged(moved: &rustix::fs::Stat, was: Stat) -> bool {
    Stat::of_rustix(moved).is_some_and(|moved| {
        Stat {
            ctime_ns: was.ctime_ns,
            ..moved
        } == was
    })
}

/// What `remove_aside` did.
enum Removal {
    /// The file was moved to the temporary name, where it waits to be looked at again (`settle`).
    Aside,
    /// Nothing stood at the name any more (deleted by someone else meanwhile).
    Gone,
    /// Something else stands at the name now: nothing was done.
    Moved,
}

/// Deletes `name` in `dir` while it is the file or symlink `was`, as `remove` does, but closing the
/// window between the last look and the unlink: the file is moved to `aside` (a temporary name of the
/// operation's batch, in a directory its journal names) in one step, and left there until the deletions
/// end (`Applier::finish`), which looks at it again (`settle`, as for a file a write swapped out): still
/// `was`, it is removed; otherwise a write landed since the look (an edit in place, or one through a
/// handle opened before the move), and it is put back and the path kept, or left beside a new file that
/// came to the name as `<name>.rewind-kept-<aside>`, never removed. `at` is the directory's path, the
/// files with other names, and whether it is on ext4.
fn remove_aside(
    dir: &OwnedFd,
    name: &str,
    was: Stat,
    (dir_path, relinked, ext4): (&Path, &Relinked, bool),
    aside: &str,
    before_move: impl Fn(),
) -> io::Result<Removal> {
    use rustix::io::Errno;
    // Only looked at: the file stays linked until it is settled, which holds it again.
    match standing(dir, name, was, (dir_path, relinked), ext4)? {
        Standing::Same(_, _) => {}
        Standing::Other => return Ok(Removal::Moved),
        Standing::Gone => return Ok(Removal::Gone),
    }
    before_move();
    match rustix::fs::renameat(dir, name, dir, aside) {
        Ok(()) => Ok(Removal::Aside),
        Err(Errno::NOENT) => Ok(Removal::Gone),
        Err(e) => Err(e.into()),
    }
}

/// Whether a rename or unlink failed because a directory stands at the name now (made there since the
/// look): the path is then left as it is.
fn taken_by_a_directory(e: rustix::io::Errno) -> bool {
    use rustix::io::Errno;
    [Errno::ISDIR, Errno::NOTEMPTY, Errno::EXIST, Errno::NOTDIR].contains(&e)
}

/// A temporary file written by `write_temp`, open until it is renamed over its target.
struct Temp {
    /// The file (none for a symlink).
    file: Option<fs::File>,
    /// Whether it is on ext4 (see `replace.rs`; a symlink: not known, `false`).
    ext4: bool,
    /// Whether the snapshot has it executable.
    executable: bool,
    /// Its permission bits as created, read back (a directory's default ACL may give others than the
    /// umask would).
    permissions: u32,
    /// Its owner and group as created, read back.
    owner: Owner,
    /// Its stat data once written (none when it could not be taken): `wrote` tells it from another
    /// program's file at its name.
    written: Option<Stat>,
}

impl Temp {
    /// Whether `stat` (taken at the name it was renamed to) is of this file as it was written: the same
    /// inode, size and modification time (a rename and a change of permissions or owner keep these).
    fn wrote(&self, stat: &Stat) -> bool {
        self.written.is_some_and(|written| {
            (written.dev, written.ino, written.size, written.mtime_ns)
                == (stat.dev, stat.ino, stat.size, stat.mtime_ns)
        })
    }

    /// Gives the file `owner` (the file it replaces has it), as far as this process may: a process of
    /// root's all of it; another, the group when it is one of its own. Best effort: otherwise the file is
    /// this process's, as any file it writes.
    fn set_owner(&self, (uid, gid): Owner) {
        let Some(file) = &self.file else {
            return;
        };
        if (uid, gid) == self.owner {
            return;
        }
        let (uid, gid) = (
            rustix::fs::Uid::from_raw(uid),
            rustix::fs::Gid::from_raw(gid),
        );
        if rustix::fs::fchown(file, Some(uid), Some(gid)).is_err() {
            let _ = rustix::fs::fchown(file, None, Some(gid));
        }
    }

    /// Gives the file its final permission bits, right before it is renamed over its target: `bits`, or
    /// those of a new file. Until then only its owner can read it (it may be a private file's content).
    fn set_permissions(&self, bits: Option<u32>) -> io::Result<()> {
        let Some(file) = &self.file else {
            return Ok(());
        };
        let bits = bits.unwrap_or_else(|| new_file_permissions(self.executable));
        if bits != self.permissions {
            file.set_permissions(fs::Permissions::from_mode(bits))?;
        }
        Ok(())
    }
}

/// The permission bits of a new file, as git's checkout gives them: `0666` or `0777` less the process's
/// umask, an executable one always with the owner's execute bit.
pub(crate) fn new_file_permissions(executable: bool) -> u32 {
    let bits = if executable { 0o777 } else { 0o666 } & !umask();
    if executable { bits | 0o100 } else { bits }
}

/// The process's umask, read once from `/proc/self/status` (`umask(2)` can only be read by setting it, which
/// would race the other threads' file creations); 022 where the kernel does not say.
fn umask() -> u32 {
    static UMASK: std::sync::OnceLock<u32> = std::sync::OnceLock::new();
    *UMASK.get_or_init(|| {
        fs::read_to_string("/proc/self/status")
            .ok()
            .and_then(|status| {
                status
                    .lines()
                    .find_map(|line| line.strip_prefix("Umask:"))
                    .and_then(|value| u32::from_str_radix(value.trim(), 8).ok())
            })
            .unwrap_or(0o022)
    })
}

/// The permission bits a file that replaces one with `permissions` gets: the same, with the execute bits
/// its snapshot says (set where a read bit is, and always for the owner; or none).
fn kept_permissions(permissions: u32, executable: bool) -> u32 {
    let permissions = permissions & 0o777;
    if !executable {
        permissions & !0o111
    } else if permissions & 0o100 != 0 {
        permissions
    } else {
        permissions | ((permissions & 0o444) >> 2) | 0o100
    }
}

/// Writes blob `id` to the new file `tmp` in `dir`: a symlink, or a file only its owner can read until
/// `replace` gives it its final permissions (`Temp::set_permissions`).
fn write_temp(
    store: &Store,
    dir: &OwnedFd,
    tmp: &str,
    mode: Mode,
    id: &ObjectId,
) -> Result<Temp, TempError> {
    let (kind, size, mut reader) = store.odb.open(id).map_err(TempError::Store)?;
    if kind != Kind::Blob {
        return Err(TempError::Store(GitError::Corrupt(format!(
            "object {id} is not a blob"
        ))));
    }
    if mode == Mode::Link {
        let mut target = Vec::new();
        reader
            .read_to_end(&mut target)
            .map_err(|e| TempError::Store(GitError::Corrupt(format!("object {id}: {e}"))))?;
        if target.len() as u64 != size {
            return Err(TempError::Store(short_object(
                id,
                target.len() as u64,
                size,
            )));
        }
        rustix::fs::symlinkat(std::ffi::OsStr::from_bytes(&target), dir, tmp)
            .map_err(|e| TempError::Disk(e.into()))?;
        return Ok(Temp {
            file: None,
            ext4: false,
            executable: false,
            permissions: 0,
            owner: (0, 0),
            written: beneath::lstat_at(dir, tmp)
                .ok()
                .and_then(|st| Stat::of_rustix(&st)),
        });
    }
    use rustix::fs::{Mode as Bits, OFlags};
    let executable = mode == Mode::Exec;
    // The kernel takes the umask off the mode given here; a umask can only narrow it further.
    let fd = rustix::fs::openat(
        dir,
        tmp,
        OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Bits::from_raw_mode(0o600),
    )
    .map_err(|e| TempError::Disk(e.into()))?;
    let mut file = fs::File::from(fd);
    let ext4 = preallocate(&file, size);
    // Copied by hand, so a failure to read the object (damaged: a loose object cut short, say, which
    // seeding may have taken over from the user's repository as it was) is told from a failure to write
    // the file (review: it was reported as an error of the worktree file).
    let mut buf = vec![0u8; 64 * 1024];
    let mut copied = 0u64;
    loop {
        let n = match reader.read(&mut buf) {
            Ok(0) if copied == size => break,
            Ok(0) => return Err(TempError::Store(short_object(id, copied, size))),
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => {
                return Err(TempError::Store(GitError::Corrupt(format!(
                    "object {id}: {e}"
                ))));
            }
        };
        io::Write::write_all(&mut file, &buf[..n]).map_err(TempError::Disk)?;
        copied += n as u64;
    }
    let meta = file.metadata().map_err(TempError::Disk)?;
    let permissions = meta.permissions().mode() & 0o777;
    let owner = (
        std::os::unix::fs::MetadataExt::uid(&meta),
        std::os::unix::fs::MetadataExt::gid(&meta),
    );
    Ok(Temp {
        file: Some(file),
        ext4,
        executable,
        permissions,
        owner,
        written: Some(Stat::of(&meta, mode)),
    })
}

/// Object `id` whose stream ended after `got` bytes where its header says `size`: as damaged as one that
/// fails to read (diff review: the copy ended silently, and a short file or symlink was written).
fn short_object(id: &ObjectId, got: u64, size: u64) -> GitError {
    GitError::Corrupt(format!(
        "object {id}: {got} bytes where its header says {size}"
    ))
}

impl<'a> Applier<'a> {
    fn new(store: &'a Store, config: &GitStoreConfig, tracked: Tracking<'a>) -> GitResult<Self> {
        Ok(Applier {
            store,
            root: store.root()?,
            hook: config.change_hook.clone(),
            swap_hook: config.swap_hook.clone(),
            written_hook: config.written_hook.clone(),
            settle_hook: config.settle_hook.clone(),
            expected: HashMap::new(),
            protected: HashSet::new(),
            tracked,
            batch: crate::odb::rand_suffix(),
            counter: 0,
            touched: Vec::new(),
            last: HashMap::new(),
            kept: Vec::new(),
            scope: Scope::default(),
            pending: Vec::new(),
            pending_paths: HashSet::new(),
            written_stats: HashMap::new(),
            pending_dirs: HashSet::new(),
            existed_empty: HashSet::new(),
            modes: HashMap::new(),
            relinked: Relinked::default(),
            expected_looked: false,
            unopened: HashSet::new(),
            not_a_file: HashSet::new(),
            dirs_changed: false,
            deleted_aside: Vec::new(),
            kept_dir: None,
            made_way: HashSet::new(),
            emptied: Vec::new(),
            emptied_dirs: HashSet::new(),
        })
    }

    /// Writes the pending files, several at a time.
    fn flush(&mut self) -> GitResult<()> {
        self.write_pending(Vec::new())
    }

    /// The end of the deletions (before the first write) and of the operation: writes the pending files,
    /// looks again at the files the deletions moved aside (with those the writes swapped out, `settle`),
    /// then removes the directories the deletions left empty. A deleted file written to meanwhile,
    /// through a handle opened before it was moved, goes back (or beside what stands there now) and is
    /// kept, so its directory stays.
    fn finish(&mut self) -> GitResult<()> {
        let deleted = std::mem::take(&mut self.deleted_aside);
        let written = self.write_pending(deleted);
        self.remove_emptied();
        written
    }

    /// Removes the directories above each path of `emptied` that are empty now (`remove_empty_parents`).
    fn remove_emptied(&mut self) {
        self.emptied_dirs.clear();
        for path in std::mem::take(&mut self.emptied) {
            self.remove_empty_parents(&path);
        }
    }

    /// Writes the pending files, several at a time, then settles the files they swapped out and those of
    /// `deleted` (files the deletions moved aside).
    fn write_pending(&mut self, deleted: Vec<SwappedOut>) -> GitResult<()> {
        if self.pending.is_empty() && deleted.is_empty() {
            return Ok(());
        }
        let jobs = std::mem::take(&mut self.pending);
        self.pending_paths.clear();
        self.pending_dirs.clear();
        let at = (self.store, &self.root, &self.relinked);
        let hooks = (
            self.hook.as_ref(),
            self.swap_hook.as_ref(),
            self.written_hook.as_ref(),
        );
        let swapped = std::sync::Mutex::new(deleted);
        let outcomes = crate::track::parallel_map_on(
            &jobs,
            write_threads(jobs.len()),
            1,
            || WriteThread::new(&swapped),
            |thread, job| write_file(at, hooks, job, thread),
        );
        let swapped = swapped
            .into_inner()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let (put_back, settled) = self.settle_swapped(swapped);
        // Written to after the swap, through a handle opened before it: that write stands at the path
        // again (or beside it, when something newer stands there), and the path is left as it is. Also
        // when a write failed: a restore has no rollback to find them.
        let outcomes = match outcomes {
            Ok(outcomes) => outcomes,
            Err(error) => {
                self.keep_put_back(put_back)?;
                return Err(error);
            }
        };
        for (job, outcome) in jobs.into_iter().zip(outcomes) {
            match outcome {
                Done::Changed(stat) => {
                    self.written_stats.insert(job.rel, stat);
                }
                Done::Moved => {
                    self.unrecord(&job.rel);
                    self.keep(&job.rel, MOVED_MEANWHILE)?;
                }
            }
        }
        self.keep_put_back(put_back)?;
        settled
    }

    /// Takes back the writes and deletions of `put_back` (their files went back, or aside: `settle`): the
    /// paths are kept.
    fn keep_put_back(&mut self, put_back: Vec<(String, Settled)>) -> GitResult<()> {
        for (rel, settled) in put_back {
            if self.made_way.remove(&rel) && settled == Settled::Aside {
                // The directory made in its place stays, with what was written in it; the file is beside
                // it. Back at its name instead (the directory was removed meanwhile), it is taken back as
                // any deletion is (review).
                self.keep(&rel, MADE_WAY_KEPT)?;
                continue;
            }
            self.written_stats.remove(&rel);
            self.unrecord(&rel);
            self.keep(&rel, MOVED_MEANWHILE)?;
        }
        Ok(())
    }

    /// Looks at the files the writes swapped out again (`settle`, each once it is `SETTLE_AGE` old),
    /// several at a time: the paths whose file went back or aside, with which, and the first failure to
    /// remove one.
    fn settle_swapped(
        &self,
        mut swapped: Vec<SwappedOut>,
    ) -> (Vec<(String, Settled)>, GitResult<()>) {
        swapped.sort_unstable_by(|a, b| a.dir.cmp(&b.dir));
        let (root, hook) = (&self.root, self.settle_hook.as_ref());
        let settled = crate::track::parallel_map_on(
            &swapped,
            write_threads(swapped.len()),
            1,
            || (None, Releases::default()),
            |thread, file| Ok(settle(root, file, hook, thread).map_err(|e| (file.rel.clone(), e))),
        );
        // A thread that panicked: the files it did not look at stay at their temporary names, which the
        // journal's clean-up removes.
        let settled = match settled {
            Ok(settled) => settled,
            Err(error) => return (Vec::new(), Err(error)),
        };
        let mut put_back = Vec::new();
        let mut failed = Ok(());
        for (file, result) in swapped.iter().zip(settled) {
            match result {
                Ok(Settled::Removed) => {}
                Ok(settled) => put_back.push((file.rel.clone(), settled)),
                Err((rel, e)) => {
                    if is_stranded(&e) {
                        let _ = self.store.journal_stranded(&file.dir_path.join(&file.tmp));
                    }
                    if failed.is_ok() {
                        failed = Err(GitError::io(&self.store.worktree.join(rel), e));
                    }
                }
            }
        }
        (put_back, failed)
    }

    /// Takes back the record of a write that did not happen (`Done::Moved`).
    fn unrecord(&mut self, path: &str) {
        self.last.remove(path);
        if let Some(at) = self.touched.iter().rposition(|(p, _)| p == path) {
            self.touched.remove(at);
        }
        self.tracked.forget(path);
    }

    /// Whether what stands at `path` now (`now`, from `look`) is what the operation checked there (always,
    /// when it checked nothing there, or has changed the path itself since).
    fn as_expected(&self, path: &str, kind: OnDisk, now: Option<Stat>) -> bool {
        if self.last.contains_key(path) {
            return true;
        }
        if self.not_a_file.contains(path) {
            return !(matches!(kind, OnDisk::File | OnDisk::Symlink) && now.is_some());
        }
        match self.expected.get(path) {
            None => true,
            Some(None) => kind == OnDisk::Absent,
            Some(Some(was)) => now.is_some_and(|now| self.relinked.same(now, *was)),
        }
    }

    /// Whether the operation found a file or symlink at `path` when it looked (`expected`: a revert's
    /// check, a restore's track), and has not touched the path since.
    fn checked_a_file(&self, path: &str) -> bool {
        !self.last.contains_key(path) && matches!(self.expected.get(path), Some(Some(_)))
    }

    /// Whether a revert's check found a directory at `parent`, above target `path` whose directory it
    /// opened, and the revert has not touched it since: a file or symlink standing there now is someone
    /// else's, made meanwhile. The check looked through a handle on each target's directory, so every
    /// directory above a target it looked at stood then. (Those above a target whose directory did not
    /// open are in `not_a_file`.)
    fn was_a_dir(&self, parent: &str, path: &str) -> bool {
        self.expected_looked
            && !self.last.contains_key(parent)
            && !self.unopened.contains(path)
            && (self.expected.contains_key(path) || self.not_a_file.contains(path))
    }

    /// Writes the pending files first when `path` is one of them, lies below one, or holds one: what is
    /// on disk there is about to be looked at.
    fn flush_if_related(&mut self, path: &str) -> GitResult<()> {
        let related = self.pending_paths.contains(path)
            || self.pending_dirs.contains(path)
            || path
                .match_indices('/')
                .any(|(i, _)| self.pending_paths.contains(&path[..i]));
        if related {
            self.flush()?;
        }
        Ok(())
    }

    /// Records a change of `path` (its entry after the change, or none when deleted).
    fn record(&mut self, path: &str, before: bool, after: Option<(Mode, ObjectId)>) {
        if !self.last.contains_key(path) {
            self.touched.push((path.to_owned(), before));
        }
        self.last.insert(path.to_owned(), after);
        self.tracked.set(path, after);
    }

    /// The net effect: paths whose final content was written, and paths that were tracked before and are
    /// gone after (a path written and then replaced within the operation counts by its end state).
    fn net(&self) -> (Vec<String>, Vec<String>) {
        let (written, deleted, _) = self.net_with_created();
        (written, deleted)
    }

    /// `net`, and the written paths that were not tracked content before their first touch.
    fn net_with_created(&self) -> (Vec<String>, Vec<String>, Vec<String>) {
        let mut written = Vec::new();
        let mut deleted = Vec::new();
        let mut created = Vec::new();
        for (path, before) in &self.touched {
            match self.last.get(path) {
                Some(Some(_)) => {
                    if !*before {
                        created.push(path.clone());
                    }
                    written.push(path.clone());
                }
                _ if *before => deleted.push(path.clone()),
                _ => {}
            }
        }
        (written, deleted, created)
    }

    fn abs(&self, rel: &str) -> PathBuf {
        self.store.worktree.join(rel)
    }

    fn keep(&mut self, path: &str, reason: impl Into<String>) -> GitResult<()> {
        self.kept.push(KeptPath {
            path: rel(path)?,
            reason: reason.into(),
            from: None,
        });
        Ok(())
    }

    /// Deletes a tracked file (or symlink), then the directories this leaves empty.
    fn delete(&mut self, path: &str) -> GitResult<()> {
        self.dirs_changed = true;
        // Removing emptied directories must not race a pending write into one of them. A directory the
        // deletions before emptied may stand at the path: they end first, and it goes.
        if self.emptied_dirs.contains(path) {
            self.finish()?;
        }
        self.flush()?;
        let abs = self.abs(path);
        let (kind, now) = look(&abs)?;
        if !self.as_expected(path, kind, now) {
            return self.keep(path, MOVED_MEANWHILE);
        }
        match kind {
            // Already gone (a revert that first undid another put the state back where this file was
            // deleted): the directories that deletion left empty go now, as they would have then.
            OnDisk::Absent => {
                self.note_emptied(path);
                Ok(())
            }
            OnDisk::Dir => self.keep(path, DIR_STANDS),
            OnDisk::File | OnDisk::Symlink
                if !self.parents_are_dirs(path)?
                    || !self.tracked.contains_below_dirs(path, kind, now)? =>
            {
                self.keep(path, NOT_TRACKED_NOW)
            }
            OnDisk::File | OnDisk::Symlink => {
                let Some(was) = now else {
                    return self.keep(path, "it is not a file or symlink, so it is left as it is");
                };
                match self.remove_file(path, was)? {
                    Done::Changed(_) => {
                        self.record(path, true, None);
                        self.note_emptied(path);
                        Ok(())
                    }
                    Done::Moved => self.keep(path, MOVED_MEANWHILE),
                }
            }
        }
    }

    /// Notes `path` deleted (or found gone): the directories it leaves empty are removed after the files
    /// moved aside from them are settled (`finish`).
    fn note_emptied(&mut self, path: &str) {
        for (i, _) in path.match_indices('/') {
            self.emptied_dirs.insert(path[..i].to_owned());
        }
        self.emptied.push(path.to_owned());
    }

    /// Deletes file or symlink `path` through its directory's handle, while it is `was`: moved aside
    /// (`remove_aside`, to a temporary name of this operation's batch, whose directory the journal names)
    /// and looked at again when the deletions end (`deleted_aside`, `finish`).
    fn remove_file(&mut self, path: &str, was: Stat) -> GitResult<Done> {
        if let Some(hook) = &self.hook {
            hook(path);
        }
        self.counter += 1;
        let aside = temp_name(&self.batch, self.counter);
        let abs = self.abs(path);
        let (dir_rel, name) = beneath::split(path);
        let dir = match self.root.dir(dir_rel) {
            Ok(dir) => dir,
            Err(e) if beneath::moved(&e) => return Ok(Done::Moved),
            Err(e) => return Err(GitError::io(&abs, e)),
        };
        let dir_path = abs.parent().unwrap_or(&self.store.worktree);
        let before_move = || {
            if let Some(hook) = &self.swap_hook {
                hook(path);
            }
        };
        let ext4 = crate::replace::is_ext4_fd(&dir);
        let removal = remove_aside(
            &dir,
            name,
            was,
            (dir_path, &self.relinked, ext4),
            &aside,
            before_move,
        );
        match removal.map_err(|e| GitError::io(&abs, e))? {
            Removal::Aside => {
                let dir_handle = keep_dir(&mut self.kept_dir, dir_rel, dir);
                self.deleted_aside.push(SwappedOut {
                    dir: dir_rel.to_owned(),
                    dir_handle,
                    tmp: aside,
                    name: name.to_owned(),
                    rel: path.to_owned(),
                    was,
                    ours: None,
                    at: std::time::Instant::now(),
                    dir_path: dir_path.to_path_buf(),
                    ext4,
                });
                Ok(Done::Changed(None))
            }
            Removal::Gone => Ok(Done::Changed(None)),
            Removal::Moved => Ok(Done::Moved),
        }
    }

    /// The permission bits to make directory `path` with (the umask then takes its own): the group's and
    /// others' recorded for it in the snapshot its content comes from (`a/b/` in `modes`: a private
    /// directory a step deleted comes back private), the owner's all (the operation writes in it; one
    /// that was read-only comes back writable); all when nothing is recorded.
    fn dir_permissions(&self, path: &str) -> rustix::fs::RawMode {
        let recorded = self.modes.get(&format!("{path}/")).copied();
        recorded.map_or(0o777, |bits| 0o700 | (bits & 0o077)) as rustix::fs::RawMode
    }

    /// Makes directory `path` through its parent's handle. Moved when the parent is not a directory
    /// inside the worktree any more, or something else took the name meanwhile.
    fn make_dir(&self, path: &str) -> GitResult<Done> {
        let abs = self.abs(path);
        let (dir_rel, name) = beneath::split(path);
        // Noted before it is made, so that no crash falls between the two (black-box: one directory in
        // about thirty killed operations stayed, empty, with its parents). Best effort: without the note, a
        // crash leaves the directory, empty, as before.
        let _ = self.store.journal_made_dir(&abs, true);
        if let Some(hook) = &self.hook {
            hook(path);
        }
        let bits = self.dir_permissions(path);
        let made = self.root.dir(dir_rel).and_then(|dir| {
            rustix::fs::mkdirat(&dir, name, rustix::fs::Mode::from_raw_mode(bits))
                .map_err(io::Error::from)?;
            // As root, the owner of the directory it is made in (`owner_for_new`). Best effort.
            if let Some((uid, gid)) = owner_for_new(&dir) {
                let _ = rustix::fs::chownat(
                    &dir,
                    name,
                    Some(rustix::fs::Uid::from_raw(uid)),
                    Some(rustix::fs::Gid::from_raw(gid)),
                    rustix::fs::AtFlags::SYMLINK_NOFOLLOW,
                );
            }
            Ok(())
        });
        match made {
            Ok(()) => Ok(Done::Changed(None)),
            Err(e) => {
                // Not made by this operation (someone else's now, or nowhere): withdrawn from the note.
                let _ = self.store.journal_made_dir(&abs, false);
                if beneath::moved(&e) || e.kind() == io::ErrorKind::AlreadyExists {
                    Ok(Done::Moved)
                } else {
                    Err(GitError::io(&abs, e))
                }
            }
        }
    }

    /// True when every parent of `path` is a real directory (not a symlink), so acting on `path` stays
    /// inside the worktree.
    fn parents_are_dirs(&self, path: &str) -> GitResult<bool> {
        for (i, _) in path.match_indices('/') {
            if on_disk(&self.abs(&path[..i]))? != OnDisk::Dir {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// Removes the directories above `path` that its deletion left empty, deepest first, up to the first
    /// that is not empty or that the state being put back had empty.
    fn remove_empty_parents(&self, path: &str) {
        let mut current = path;
        while let Some((parent, _)) = current.rsplit_once('/') {
            if self.existed_empty.contains(parent) {
                break;
            }
            if !self.root.remove_empty_dir(parent) {
                break;
            }
            current = parent;
        }
    }

    /// Writes blob `id` at `path` with `mode`, making its parent directories; keeps the path instead when
    /// that would overwrite or delete something that is not tracked content.
    fn write(&mut self, path: &str, mode: Mode, id: &ObjectId) -> GitResult<()> {
        // The deletions (all made before the writes) end first: a directory they emptied goes before a
        // file that replaces it is written, as it went when each deletion removed its file at once.
        if !self.emptied.is_empty() {
            self.finish()?;
        }
        self.flush_if_related(path)?;
        // A revert's check for edits (`changed_after_track`) looked at the path a moment ago through a
        // handle on its directory, opened beneath the worktree, and found a file, a symlink or nothing.
        // While this operation has changed no directory and not touched the path, that look stands for
        // this one: the writing looks again, through a handle, right before it swaps the new content in
        // (`replace`), and leaves what changed after the check as it is there (a file deleted since
        // included).
        if self.expected_looked
            && !self.dirs_changed
            && !self.last.contains_key(path)
            && !self.unopened.contains(path)
            && let Some(&checked) = self.expected.get(path)
        {
            let kind = match checked {
                None => OnDisk::Absent,
                Some(stat) if stat.mode == Mode::Link => OnDisk::Symlink,
                Some(_) => OnDisk::File,
            };
            let was_tracked = self.tracked.contains_below_dirs(path, kind, checked)?;
            if kind != OnDisk::Absent && !was_tracked {
                return self.keep(path, NOT_TRACKED_NOW);
            }
            return self.queue(path, mode, id, checked, was_tracked);
        }
        // Whether the path was tracked content before this write: asked before anything is changed when a
        // parent is not a directory; otherwise from the looks below (each path is looked at once).
        let mut was_tracked = None;
        // Parents: each must be a real directory; a tracked file or symlink standing there is replaced.
        // When the path's directory opens beneath the worktree without following a symlink, each is one
        // (one path walk, rather than a look at each parent).
        let (dir_rel, name) = beneath::split(path);
        let dir = self.root.dir(dir_rel).ok();
        let parents = if dir.is_some() { "" } else { path };
        // A parent may be made, or a file standing there replaced.
        self.dirs_changed |= dir.is_none();
        for (i, _) in parents.match_indices('/') {
            let parent = &path[..i];
            let abs = self.abs(parent);
            let (kind, now) = look(&abs)?;
            if kind != OnDisk::Dir && was_tracked.is_none() {
                was_tracked = Some(self.tracked.contains(path)?);
            }
            match kind {
                OnDisk::Dir => {}
                // The file the check found at the path is gone with this directory (another program's
                // `rm -rf`): it stays gone, and no directory is made for it (black-box: empty directories
                // were left where the user had removed them).
                OnDisk::Absent if self.checked_a_file(path) => {
                    return self.keep(path, MOVED_MEANWHILE);
                }
                OnDisk::Absent => {
                    if let Done::Moved = self.make_dir(parent)? {
                        return self.keep(path, MOVED_MEANWHILE);
                    }
                }
                OnDisk::File | OnDisk::Symlink => {
                    if !self.tracked.contains(parent)? {
                        return self.keep(
                            path,
                            format!("{parent} is a file or symlink that is not tracked content, where a directory is needed"),
                        );
                    }
                    if !self.scope.holds(parent) {
                        return self.keep(
                            path,
                            format!(
                                "{parent}, where a directory is needed, is tracked content outside the paths being \
                                 restored, so it is left as it is; restore {parent} too to put this file back"
                            ),
                        );
                    }
                    if self.protected.contains(parent)
                        || !self.as_expected(parent, kind, now)
                        || self.was_a_dir(parent, path)
                    {
                        return self.keep(
                            path,
                            format!(
                                "{parent}, where a directory is needed, changed after rewind's snapshot (its content \
                                 is in no snapshot), so it is left as it is"
                            ),
                        );
                    }
                    // Moved aside and settled with the deletions, as a deleted file is: a write that
                    // lands between the last look and the move is kept beside the new directory, not
                    // unlinked with the file (review). Its directory is added to the journal first, for
                    // the crash clean-up.
                    let removed = match now {
                        Some(was) => {
                            let abs = self.abs(parent);
                            if let Some(dir) = abs.parent() {
                                self.store.journal_temp_dir(dir)?;
                            }
                            let removed = self.remove_file(parent, was)?;
                            if let Done::Changed(_) = removed {
                                self.made_way.insert(parent.to_owned());
                            }
                            removed
                        }
                        None => Done::Moved,
                    };
                    if let Done::Moved = removed {
                        return self.keep(path, MOVED_MEANWHILE);
                    }
                    self.record(parent, true, None);
                    if let Done::Moved = self.make_dir(parent)? {
                        return self.keep(path, MOVED_MEANWHILE);
                    }
                }
            }
        }
        let abs = self.abs(path);
        let (kind, mut was) = match &dir {
            Some(dir) => look_in(dir, name, &abs)?,
            None => look(&abs)?,
        };
        let was_tracked = match was_tracked {
            Some(was_tracked) => was_tracked,
            None => self.tracked.contains_below_dirs(path, kind, was)?,
        };
        if !self.as_expected(path, kind, was) {
            return self.keep(path, MOVED_MEANWHILE);
        }
        match kind {
            OnDisk::Absent => {}
            OnDisk::Dir => {
                if !holds_only(&abs, path, &HashSet::new())? {
                    return self.keep(path, OCCUPIED_DIR);
                }
                self.dirs_changed = true;
                let (dir_rel, name) = beneath::split(path);
                let removed = self
                    .root
                    .dir(dir_rel)
                    .and_then(|dir| beneath::remove_empty_tree(&dir, name));
                match removed {
                    Ok(()) => was = None,
                    Err(e)
                        if beneath::moved(&e)
                            || e.raw_os_error()
                                == Some(rustix::io::Errno::NOTEMPTY.raw_os_error()) =>
                    {
                        return self.keep(path, OCCUPIED_DIR);
                    }
                    Err(e) => return Err(GitError::io(&abs, e)),
                }
            }
            OnDisk::File | OnDisk::Symlink if !was_tracked => {
                return self.keep(path, NOT_TRACKED_NOW);
            }
            OnDisk::File | OnDisk::Symlink => {}
        }
        self.queue(path, mode, id, was, was_tracked)
    }

    /// Adds the write of `path` to the pending ones (`was`: what the writing expects to find there).
    fn queue(
        &mut self,
        path: &str,
        mode: Mode,
        id: &ObjectId,
        was: Option<Stat>,
        was_tracked: bool,
    ) -> GitResult<()> {
        let abs = self.abs(path);
        self.counter += 1;
        let tmp = temp_name(&self.batch, self.counter);
        // Recorded bits that do not agree with the mode written (an executable, or not) are not used;
        // those used lose what the umask takes from a new file: never more open than a new file is.
        let bits = self
            .modes
            .get(path)
            .copied()
            .filter(|bits| crate::track::bits_fit(*bits, mode))
            .map(|bits| bits & new_file_permissions(mode == Mode::Exec));
        self.pending.push(PendingWrite {
            rel: path.to_owned(),
            tmp,
            abs,
            mode,
            id: *id,
            was,
            bits,
        });
        self.pending_paths.insert(path.to_owned());
        for (i, _) in path.match_indices('/') {
            self.pending_dirs.insert(path[..i].to_owned());
        }
        self.record(path, was_tracked, Some((mode, *id)));
        if self.pending.len() >= WRITE_BATCH {
            self.flush()?;
        }
        Ok(())
    }

    /// Every touched path with its end state and, for a file written, its stat data after the write: what
    /// the stat cache learns from this operation. None when any written file's stat data is unknown.
    fn applied_with_stats(&self) -> Option<Vec<Applied>> {
        self.touched
            .iter()
            .map(|(path, _)| match self.last.get(path).copied().flatten() {
                Some((_, id)) => {
                    let stat = self.written_stats.get(path).copied().flatten()?;
                    Some((path.clone(), Some((stat, id))))
                }
                None => Some((path.clone(), None)),
            })
            .collect()
    }

    /// Teaches the stat cache what this operation wrote and deleted, so the next track reads only these
    /// files again (they are racy) instead of rebuilding the cache. Best effort: the cache stays as it was
    /// when anything is unknown or it cannot be written (a full disk: the files are written, and failing
    /// here would fail the operation, then its rollback, for a cache), and a stale cache only costs
    /// re-hashing: each rewritten file has a new inode and status change time.
    /// `edited` as `StatCache::note_applied` takes it.
    fn teach_stat_cache(&self, edited: Option<(ObjectId, ObjectId, &tree::DirIds)>) {
        if let Some(changes) = self.applied_with_stats()
            && !changes.is_empty()
        {
            let _unsaved = StatCache::note_applied(self.store, &changes, edited);
        }
    }

    /// The paths an outcome reports, in path order (the writes and deletions were made in the order
    /// their directories needed).
    fn outcome_paths(paths: &[String]) -> GitResult<Vec<RelPath>> {
        let mut paths = paths
            .iter()
            .map(|p| rel(p))
            .collect::<GitResult<Vec<_>>>()?;
        paths.sort_unstable();
        Ok(paths)
    }

    /// The kept paths, in path order.
    fn outcome_kept(mut kept: Vec<KeptPath>) -> Vec<KeptPath> {
        kept.sort_by(|a, b| a.path.cmp(&b.path));
        kept
    }
}

/// The first parent of `path` that is a file or symlink which is not tracked content now (so it must not
/// be replaced by a directory), if any.
fn blocking_parent(current: &TrackedNow<'_>, path: &str) -> GitResult<Option<String>> {
    for (i, _) in path.match_indices('/') {
        let parent = &path[..i];
        match current.dir_on_disk(parent)? {
            OnDisk::Dir => continue,
            OnDisk::Absent => return Ok(None),
            OnDisk::File | OnDisk::Symlink if current.contains(parent)? => return Ok(None),
            OnDisk::File | OnDisk::Symlink => return Ok(Some(parent.to_owned())),
        }
    }
    Ok(None)
}

/// True when every parent directory of `path` is a real directory (no symlink on the way), so the path
/// names something inside the worktree.
fn parents_are_real_dirs(current: &TrackedNow<'_>, path: &str) -> GitResult<bool> {
    for (i, _) in path.match_indices('/') {
        if current.dir_on_disk(&path[..i])? != OnDisk::Dir {
            return Ok(false);
        }
    }
    Ok(true)
}

impl Applier<'_> {
    /// Journals the directories of `paths` and this applier's batch, before any temporary file is made.
    fn journal_parents(&self, paths: impl Iterator<Item = String>) -> GitResult<()> {
        let mut dirs = BTreeSet::new();
        for path in paths {
            let abs = self.store.worktree.join(&path);
            if let Some(parent) = abs.parent() {
                dirs.insert(parent.to_path_buf());
            }
        }
        if dirs.is_empty() {
            return Ok(());
        }
        self.store.journal_temp_dirs(&self.batch, &dirs)
    }
}

/// The paths a restore of given paths works on: each named path and everything below it (`None`: the
/// whole worktree). Asked once per path the restore looks at, so a path is looked up with its parents in a
/// set, not compared with every named path (a scoped undo of tens of thousands of files took time in the
/// square of their number: big-repository review).
#[derive(Clone, Default)]
struct Scope(Option<HashSet<String>>);

impl Scope {
    fn of(paths: Option<&[String]>) -> Scope {
        Scope(paths.map(|paths| paths.iter().cloned().collect()))
    }

    /// Whether `path` is a named path or lies below one.
    fn holds(&self, path: &str) -> bool {
        self.0.as_ref().is_none_or(|named| {
            crate::ignore::ancestors_and_self(path).any(|at| named.contains(at))
        })
    }
}

/// Each of `paths` and every directory above it (`dirs_above`): whether any of `paths` lies at or below a
/// path is then one lookup.
fn with_parents(paths: &[String]) -> HashSet<&str> {
    let paths = || paths.iter().map(String::as_str);
    dirs_above(paths()).into_iter().chain(paths()).collect()
}

/// Removes the empty directories at and above `paths` that were born at or after `made_since` (epoch ms,
/// less `BIRTH_SLACK_MS`) and that snapshot `to` has neither with tracked content below nor recorded as
/// seen empty at its tracks (`SnapshotPort::remove_emptied_dirs`), deepest first, each through its
/// parent's handle beneath the worktree (no symlink followed); the worktree itself never. A directory that
/// is not empty, is not a directory, is older (the user's: review) or whose birth the filesystem does not
/// record stays. None when `to`'s record does not say which directories its tracks saw empty (an old or
/// damaged record). The directories removed.
pub fn remove_emptied_dirs(
    store: &Store,
    to: &ObjectId,
    paths: &[String],
    made_since: u64,
) -> GitResult<Vec<String>> {
    let Some(record) = store.known_record(to).filter(|r| r.empty_dirs.is_some()) else {
        return Ok(Vec::new());
    };
    let kept = record.dirs_kept_when_emptied();
    let mut candidates: BTreeSet<(usize, String)> = BTreeSet::new();
    for path in paths {
        let mut at = path.as_str();
        loop {
            candidates.insert((at.matches('/').count(), at.to_owned()));
            match at.rsplit_once('/') {
                Some((parent, _)) => at = parent,
                None => break,
            }
        }
    }
    let root = store.root()?;
    let mut target = LazyTree::new(&store.odb, *to);
    let since = made_since.saturating_sub(crate::store::BIRTH_SLACK_MS);
    let mut removed = Vec::new();
    for (_, dir) in candidates.iter().rev() {
        if kept.contains(dir) || target.holds(dir)? {
            continue;
        }
        if root.remove_empty_dir_if(dir, |fd, name| born_since(fd, name, since)) {
            removed.push(dir.clone());
        }
    }
    Ok(removed)
}

/// Whether `name` in `dir` (not followed when a symlink) was born at or after `since_ms` (epoch ms); false
/// when it is not there or the filesystem does not say when it was born.
fn born_since(dir: &OwnedFd, name: &str, since_ms: u64) -> bool {
    rustix::fs::statx(
        dir,
        name,
        rustix::fs::AtFlags::SYMLINK_NOFOLLOW,
        rustix::fs::StatxFlags::BTIME,
    )
    .ok()
    .and_then(|stx| crate::store::born_ms(&stx))
    .is_some_and(|born| born >= i128::from(since_ms))
}

/// Why `restore` with `since` leaves a path alone.
const CHANGED_SINCE: &str = "it changed after the snapshot this restore started from (by someone else), so \
                             its content is in no snapshot; it is left as it is";

/// Makes the tracked content (or the paths in `scope`) equal snapshot `to`. With `since` (a snapshot the
/// caller took just before), a path in scope whose tracked content differs from `since` now is left as it
/// is and kept (`CHANGED_SINCE`).
pub fn restore(
    store: &Store,
    config: &GitStoreConfig,
    to: &ObjectId,
    scope: Option<Vec<String>>,
    since: Option<&ObjectId>,
) -> GitResult<RestoreOutcome> {
    let mut target = LazyTree::new(&store.odb, *to);
    let mut since_tree = since.map(|since| LazyTree::new(&store.odb, *since));
    let mut expected = Expected::new();
    let mut changed_since = BTreeSet::new();
    let (mut changes, tracking) = match &scope {
        Some(paths) => match changes_at_paths(
            store,
            config,
            &mut target,
            paths,
            (since_tree.as_mut(), &mut changed_since),
            &mut expected,
        )? {
            Some((changes, now)) => (changes, Tracking::PerPath(Box::new(now))),
            None => {
                changed_since.clear();
                expected.clear();
                whole_tree_changes(store, config, to, since, &mut changed_since, &mut expected)?
            }
        },
        None => whole_tree_changes(store, config, to, since, &mut changed_since, &mut expected)?,
    };
    let in_scope = Scope::of(scope.as_deref());
    changed_since.retain(|path| in_scope.holds(path));
    changes.retain(|(path, _, _)| !changed_since.contains(path));
    // An old snapshot may hold rewind's own database: it is never written back.
    let own = own_files_in(store, config);
    let own_kept: Vec<String> = changes
        .iter()
        .filter(|(p, _, _)| own.contains(p) && in_scope.holds(p))
        .map(|(p, _, _)| p.clone())
        .collect();
    changes.retain(|(path, _, _)| !own.contains(path));
    let deletions: Vec<String> = changes
        .iter()
        .filter(|(p, now, then)| in_scope.holds(p) && now.is_some() && then.is_none())
        .map(|(p, _, _)| p.clone())
        .collect();
    // A restore to a snapshot (not the scoped undo of a revert, `since`) leaves the files that snapshot
    // did not track (ignored by its rules, or skipped) as a revert's plan does: one may have existed then,
    // so it is kept, not deleted. So restoring a capture gives back a file the restore it undoes left
    // alone because it was ignored then.
    // A record that is missing or unreadable (a damaged store) leaves every such file: whether it was
    // untracked then is not known.
    let record = (!deletions.is_empty()).then(|| store.known_record(to));
    let mut untracked_then = Vec::new();
    let mut unknown_then = Vec::new();
    let deletions: Vec<String> = match record.as_ref().filter(|_| since.is_none()) {
        Some(Some(record)) => {
            let target_rules = RefCell::new(LazyTree::new(&store.odb, *to));
            let mut kept = Vec::new();
            for path in deletions {
                if untracked_at(store, record, &target_rules, &path)? {
                    untracked_then.push(path);
                } else {
                    kept.push(path);
                }
            }
            kept
        }
        Some(None) => {
            unknown_then = deletions;
            Vec::new()
        }
        None => deletions,
    };
    let writes: Vec<(String, Mode, ObjectId)> = changes
        .iter()
        .filter(|(p, _, _)| in_scope.holds(p))
        .filter_map(|(p, _, then)| then.map(|(mode, id)| (p.clone(), mode, id)))
        .collect();
    // Every blob needed is checked before any file is touched.
    if let Some((_, _, id)) = writes.iter().find(|(_, _, id)| !store.odb.contains(id)) {
        return Err(GitError::Missing(id.to_string()));
    }
    if let Some(paths) = &scope {
        // The trees of `to` along the named paths, read now (the check below needs them).
        for path in paths {
            target.holds(path)?;
        }
    }
    if let Tracking::PerPath(now) = &tracking {
        now.stop_planning();
    }
    let mut applier = Applier::new(store, config, tracking)?;
    if let Some(Some(record)) = &record
        && !deletions.is_empty()
    {
        applier.existed_empty = record.dirs_kept_when_emptied();
    }
    // The permission bits `to` recorded for its files (used for those written where none stands).
    if !writes.is_empty() {
        let recorded = match record {
            Some(Some(record)) => Some(record.modes),
            _ => store.known_record(to).map(|record| record.modes),
        };
        applier.modes = recorded.unwrap_or_default().into_iter().collect();
    }
    applier.journal_parents(
        writes
            .iter()
            .map(|(p, _, _)| p.clone())
            .chain(deletions.iter().cloned()),
    )?;
    applier.scope = in_scope;
    applier.expected = expected;
    applier.protected = changed_since.iter().cloned().collect();
    for path in &changed_since {
        applier.keep(path, CHANGED_SINCE)?;
    }
    for path in &untracked_then {
        applier.keep(path, UNTRACKED_THEN)?;
    }
    for path in &unknown_then {
        applier.keep(path, record_unknown(to))?;
    }
    for path in &own_kept {
        applier.keep(path, OWN_FILE)?;
    }
    for path in deletions.iter().rev() {
        applier.delete(path)?;
    }
    for (path, mode, id) in &writes {
        applier.write(path, *mode, id)?;
    }
    applier.finish()?;
    store.clear_journal()?;
    applier.teach_stat_cache(None);
    // Paths named in the scope that are untracked now and absent from the target stay as they are.
    if let Some(paths) = &scope {
        let left: HashSet<&String> = untracked_then.iter().chain(&unknown_then).collect();
        let deleted_below = with_parents(&deletions);
        for path in paths {
            let untracked_here = !changed_since.contains(path)
                && !left.contains(path)
                && !target.holds(path)?
                && !deleted_below.contains(path.as_str())
                && on_disk(&store.worktree.join(path))? != OnDisk::Absent;
            if untracked_here {
                applier.keep(
                    path,
                    "it is not tracked content now, so it is left as it is",
                )?;
            }
        }
    }
    let (written, deleted, created) = applier.net_with_created();
    Ok(RestoreOutcome {
        written: Applier::outcome_paths(&written)?,
        created: Applier::outcome_paths(&created)?,
        deleted: Applier::outcome_paths(&deleted)?,
        kept: Applier::outcome_kept(std::mem::take(&mut applier.kept)),
    })
}

/// Why a file to delete is kept: a directory above it is a symlink now.
const SYMLINKED_PARENT: &str =
    "a directory above it is a symlink now; nothing is deleted through it, so it is left as it is";

/// Why a file to delete is kept: a directory stands at its path.
const DIR_STANDS: &str = "a directory stands there now; it is left as it is";

/// Why a restore or revert leaves one of rewind's own files (`GitStoreConfig::own_files`).
const OWN_FILE: &str = "it is rewind's own file (its database), never tracked content";

/// rewind's own files that lie in the worktree of `store`, worktree-relative.
fn own_files_in(store: &Store, config: &GitStoreConfig) -> HashSet<String> {
    crate::config::canonical_own_files(&config.own_files)
        .into_iter()
        .filter_map(|file| {
            let rel = file.strip_prefix(&store.worktree).ok()?;
            rel.to_str().map(str::to_owned)
        })
        .collect()
}

/// Why a restore leaves a file that its snapshot does not hold.
const UNTRACKED_THEN: &str = "it was not tracked content in the snapshot restored (ignored or skipped then), so \
                              it may have existed then; it is left as it is";

/// The changes a whole restore to `to` makes: the worktree is tracked, and only the sub-trees that differ
/// between its snapshot and `to` are read. With `since`, the paths that differ between `since` and the
/// worktree now are added to `changed_since`. The stat data the track recorded for each file to be
/// overwritten or deleted goes to `expected` (see `Applier::as_expected`).
fn whole_tree_changes<'a>(
    store: &'a Store,
    config: &GitStoreConfig,
    to: &ObjectId,
    since: Option<&ObjectId>,
    changed_since: &mut BTreeSet<String>,
    expected: &mut Expected,
) -> GitResult<(Vec<TreeChange>, Tracking<'a>)> {
    let current = track(store, config)?.id;
    if let Some(since) = since {
        changed_since.extend(
            diff_trees(&store.odb, since, &current)?
                .into_iter()
                .map(|(path, _, _)| path),
        );
    }
    let changes = diff_trees(&store.odb, &current, to)?;
    recorded_stats(
        store,
        &current,
        changes
            .iter()
            .filter(|(_, now, _)| now.is_some())
            .map(|(path, _, _)| path.as_str()),
        expected,
    );
    let tracking = Tracking::Snapshot(
        RefCell::new(LazyTree::new(&store.odb, current)),
        HashMap::new(),
    );
    Ok((changes, tracking))
}

/// The stat data the stat cache recorded for each of `paths`, when the cache describes `tree` (the track
/// just taken wrote it): into `expected`. A path the cache does not hold gets no expectation.
fn recorded_stats<'p>(
    store: &Store,
    tree: &ObjectId,
    paths: impl Iterator<Item = &'p str>,
    expected: &mut Expected,
) {
    StatCache::peek(&store.stat_cache_path(), |cache| {
        if cache.tree == Some(*tree) {
            for path in paths {
                if let Some(entry) = cache.entries.get(path) {
                    expected.insert(path.to_owned(), Some(entry.stat));
                }
            }
        }
    });
}

/// The changes a restore of the given `paths` to `target` makes, found without walking the worktree: each
/// path's tracked content now (looked at and hashed alone) against its entry in `target`. None when a path
/// is a directory in `target` or on disk: what lies below it is then found by the whole-tree comparison.
/// With a `since` tree, a path whose content now differs from its entry there goes to `changed_since`
/// instead. What each path was when looked at goes to `expected` (see `Applier::as_expected`).
fn changes_at_paths<'a>(
    store: &'a Store,
    config: &GitStoreConfig,
    target: &mut LazyTree<'_>,
    paths: &[String],
    (mut since, changed_since): (Option<&mut LazyTree<'_>>, &mut BTreeSet<String>),
    expected: &mut Expected,
) -> GitResult<Option<(Vec<TreeChange>, TrackedNow<'a>)>> {
    let now = TrackedNow::new(store, config, paths.iter().map(String::as_str))?;
    let mut changes = Vec::new();
    let unique: BTreeSet<&String> = paths.iter().collect();
    for path in unique {
        let then = target.get(path)?;
        if then.is_none() && target.holds(path)? {
            return Ok(None);
        }
        let abs = store.worktree.join(path);
        let current = if now.contains(path)? {
            match entry_on_disk(config, &abs, path) {
                Ok((entry, stat)) => {
                    expected.insert(path.clone(), Some(stat));
                    Some(entry)
                }
                // Deleted or replaced by a directory while it was read (another program at work): taken
                // as it stands now. A file that stands and cannot be read fails the restore.
                Err(e) => match look(&abs)? {
                    (OnDisk::Absent, _) => {
                        expected.insert(path.clone(), None);
                        None
                    }
                    (OnDisk::Dir, _) => return Ok(None),
                    _ => return Err(e),
                },
            }
        } else {
            if parents_are_real_dirs(&now, path)? {
                match look(&abs)? {
                    (OnDisk::Dir, _) => return Ok(None),
                    (OnDisk::Absent, _) => {
                        expected.insert(path.clone(), None);
                    }
                    _ => {}
                }
            } else {
                // A directory on the way is missing (or a file or symlink stands there): once the writing
                // has made it, a file found at the path was made there by someone else meanwhile.
                expected.insert(path.clone(), None);
            }
            None
        };
        if let Some(since) = since.as_deref_mut()
            && since.get(path)? != current
        {
            changed_since.insert(path.clone());
            continue;
        }
        if current != then {
            changes.push((path.clone(), current, then));
        }
    }
    Ok(Some((changes, now)))
}

/// The entry a track would record for the tracked file or symlink at `abs` (its content streamed through
/// the hash, never held whole), with the stat data seen right before it was read (an edit during the read
/// shows there).
fn entry_on_disk(
    config: &GitStoreConfig,
    abs: &Path,
    path: &str,
) -> GitResult<((Mode, ObjectId), Stat)> {
    let unreadable = |reason: String| GitError::Unreadable {
        path: path.to_owned(),
        reason,
    };
    if config.read_fault.as_ref().is_some_and(|fault| fault(path)) {
        return Err(unreadable("injected read fault".to_owned()));
    }
    for _attempt in 0..3 {
        let meta = fs::symlink_metadata(abs).map_err(|e| unreadable(e.to_string()))?;
        let mode = Mode::of_file(&meta).ok_or_else(|| {
            unreadable("it stopped being a file while it was being read".to_owned())
        })?;
        if mode == Mode::Link {
            let target = match fs::read_link(abs) {
                Ok(target) => target,
                // Not a symlink any more: look again.
                Err(e) if e.kind() == std::io::ErrorKind::InvalidInput => continue,
                Err(e) => return Err(unreadable(e.to_string())),
            };
            let id = Odb::hash(Kind::Blob, target.as_os_str().as_bytes())?;
            return Ok(((mode, id), Stat::of(&meta, mode)));
        }
        match Odb::hash_file_blob(abs, meta.len()) {
            Ok(Some(id)) => return Ok(((mode, id), Stat::of(&meta, mode))),
            // The size changed while it was read, or something else stands there now: look again.
            Ok(None) => {}
            Err(e) if crate::odb::replaced_meanwhile(&e) => {}
            Err(e) => return Err(unreadable(e.to_string())),
        }
    }
    Err(unreadable(
        "it kept changing while it was being read".to_owned(),
    ))
}

/// Why a path absent from snapshot `id` (whose record is `record`, `None` when missing or unreadable) is
/// kept rather than deleted by a revert going back to it: it was untracked then (`untracked_at`), or what
/// the snapshot left untracked is not known. `None`: it was tracked content then, and absent.
fn untracked_then(
    store: &Store,
    record: Option<&SnapshotRecord>,
    (id, tree): (&ObjectId, &RefCell<LazyTree<'_>>),
    path: &str,
) -> GitResult<Option<String>> {
    let Some(record) = record else {
        return Ok(Some(record_unknown(id)));
    };
    Ok(untracked_at(store, record, tree, path)?.then(|| {
        "it was not tracked content when the step began (ignored or skipped), so it may have existed then"
            .to_owned()
    }))
}

/// Why a file is kept when the record of snapshot `id` (what it left untracked) is missing or unreadable:
/// it may have existed, untracked, when the snapshot was taken, and deleting it could lose it.
fn record_unknown(id: &ObjectId) -> String {
    format!(
        "the snapshot store's record of snapshot {id} (which files it left untracked) is missing or cannot \
         be read, so whether this file existed then is not known; it is left as it is"
    )
}

/// Whether `path` was untracked when the snapshot of `tree` was taken: ignored by the `.gitignore` files of
/// the tree and the outside rules of its `record`, or in its skipped list.
fn untracked_at(
    store: &Store,
    record: &SnapshotRecord,
    tree: &RefCell<LazyTree<'_>>,
    path: &str,
) -> GitResult<bool> {
    if record.skipped.contains(path) {
        return Ok(true);
    }
    // Ignored under any of the rule sets in force when a track returned that id, with the nested
    // repositories as each of those tracks found them, and, unless the record holds them for every track
    // (one written before they were recorded), as they are on disk now: a path ignored under either may
    // have existed then. Only the nested roots among the path's parents matter: states that agree there
    // are judged once.
    let parents: Vec<&str> = path.match_indices('/').map(|(i, _)| &path[..i]).collect();
    let mut states = Vec::new();
    if !record.nested_all || record.nested.is_empty() {
        let mut now = NestedRoots::new();
        for dir in &parents {
            if let Some(exclude) =
                crate::ignore::nested_repository_exclude(&store.worktree.join(dir))?
            {
                now.insert((*dir).to_owned(), exclude);
            }
        }
        states.push(now);
    }
    for recorded in &record.nested {
        let state: NestedRoots = parents
            .iter()
            .filter_map(|dir| {
                recorded
                    .get(*dir)
                    .map(|exclude| ((*dir).to_owned(), exclude.clone()))
            })
            .collect();
        if !states.contains(&state) {
            states.push(state);
        }
    }
    // And with the `.gitignore` files in force then that the tree does not hold, as each track found them
    // (their directories among the path's parents), and, unless the record holds them for every track,
    // those on disk now (`None`).
    let mut hidden_states: Vec<Option<HiddenRules>> = Vec::new();
    for recorded in &record.hidden_rules {
        let state: HiddenRules = std::iter::once("")
            .chain(parents.iter().copied())
            .filter_map(|dir| recorded.get(dir).map(|text| (dir.to_owned(), text.clone())))
            .collect();
        if !hidden_states.contains(&Some(state.clone())) {
            hidden_states.push(Some(state));
        }
    }
    if !record.hidden_rules_all || record.hidden_rules.is_empty() {
        // A record written before them: the tracks it does not hold judged the tree's rules alone (the
        // verdict it gave before, kept), and the files on disk now may hold what they left out.
        if !hidden_states.contains(&Some(HiddenRules::new())) {
            hidden_states.push(Some(HiddenRules::new()));
        }
        hidden_states.push(None);
    }
    for (prefix, outside) in record.rule_sets() {
        for nested in &states {
            for hidden in &hidden_states {
                if ignored_at(
                    store,
                    tree,
                    path,
                    (prefix, outside),
                    (nested, hidden.as_ref()),
                )? {
                    return Ok(true);
                }
            }
        }
    }
    Ok(false)
}

/// Whether `path`, absent from the snapshot `tree`, was ignored under its `.gitignore` files and the
/// outside rules `outside` (with the worktree at `prefix` in its ignore root), with the nested
/// repositories `nested` (their roots among the path's parents) and the `.gitignore` files the tree does
/// not hold `hidden` (`None`: those on disk now).
fn ignored_at(
    store: &Store,
    tree: &RefCell<LazyTree<'_>>,
    path: &str,
    (prefix, outside): (&str, &[OutsideRule]),
    (nested, hidden): (&NestedRoots, Option<&HiddenRules>),
) -> GitResult<bool> {
    let ignores = Ignores::from_outside(outside.to_vec(), prefix.to_owned());
    let failed = RefCell::new(None);
    let nested_of = |dir: &str| nested.get(dir).cloned();
    // `path` is absent from that snapshot: matched as a file, as the track that took it saw no
    // directory there either.
    let gitignore_of = |dir: &str| {
        let file = if dir.is_empty() {
            ".gitignore".to_owned()
        } else {
            format!("{dir}/.gitignore")
        };
        let in_tree = match tree.borrow_mut().get(&file) {
            Ok(found) => found,
            Err(e) => {
                *failed.borrow_mut() = Some(e);
                return None;
            }
        };
        let Some((mode, id)) = in_tree else {
            return match hidden {
                Some(hidden) => hidden.get(dir).cloned(),
                None => match crate::ignore::read_gitignore(&store.worktree.join(dir)) {
                    Ok(text) => text,
                    Err(e) => {
                        *failed.borrow_mut() = Some(e);
                        None
                    }
                },
            };
        };
        if !matches!(mode, Mode::File | Mode::Exec) {
            return None;
        }
        match store.odb.read(&id, Kind::Blob) {
            Ok(bytes) => Some(String::from_utf8_lossy(&bytes).into_owned()),
            // Read as no rules, the file would count as tracked then, and be deleted.
            Err(e) => {
                *failed.borrow_mut() = Some(e);
                None
            }
        }
    };
    let ignored = ignores.is_path_ignored(path, false, gitignore_of, nested_of);
    match failed.into_inner() {
        Some(e) => Err(e),
        None => Ok(ignored),
    }
}

/// The files a plan writes, with the mode and blob of each.
type Entries = HashMap<String, (Mode, ObjectId)>;

/// The plan of a revert, with what its execution needs.
struct Planned<'a> {
    actions: Vec<FileAction>,
    entries: Entries,
    /// The permission bits recorded for files to write where none stands, and for the directories above
    /// them (`a/b/`; `SnapshotRecord::modes` of the snapshot each comes from).
    modes: HashMap<String, u32>,
    current: TrackedNow<'a>,
}

fn plan_inner<'a>(
    store: &'a Store,
    config: &GitStoreConfig,
    patches: &[SnapshotPatch],
) -> GitResult<Planned<'a>> {
    let planned = file_plan(patches);
    let current = TrackedNow::new(store, config, planned.iter().map(|(path, _)| path.as_str()))?;
    // Each snapshot's trees are read only along the paths looked up.
    let mut trees: HashMap<ObjectId, RefCell<LazyTree<'a>>> = HashMap::new();
    // Each snapshot's record, read once, when a path absent from its tree needs it (`None`: missing or
    // unreadable).
    let mut records: HashMap<ObjectId, Option<SnapshotRecord>> = HashMap::new();
    let mut actions = Vec::new();
    let mut entries = HashMap::new();
    let mut modes = HashMap::new();
    // The writes planned where a directory stands (positions in `actions`).
    let mut over_dirs = Vec::new();
    for (path, from) in planned {
        let from_id = object_id(&from)?;
        let tree = trees
            .entry(from_id)
            .or_insert_with(|| RefCell::new(LazyTree::new(&store.odb, from_id)));
        let name = path.as_str();
        let real_parents = parents_are_real_dirs(&current, name)?;
        let (exists, stat) = if real_parents {
            look(&store.worktree.join(name))?
        } else {
            (OnDisk::Absent, None)
        };
        let blocked = blocking_parent(&current, name)?;
        let (action, reason) = if let Some(parent) = blocked {
            (
                FileActionKind::Keep,
                Some(format!(
                    "{parent} is a file or symlink that is not tracked content, standing where a directory is needed"
                )),
            )
        } else if matches!(exists, OnDisk::File | OnDisk::Symlink)
            && !current.contains_below_dirs(name, exists, stat)?
        {
            (
                FileActionKind::Keep,
                Some(
                    "it exists but is not tracked content now (ignored or over the size cap)"
                        .to_owned(),
                ),
            )
        } else if current.own_files.contains(name) {
            // Absent, or not a file: still never written (an old snapshot may hold rewind's own database).
            (FileActionKind::Keep, Some(OWN_FILE.to_owned()))
        } else if let Some(entry) = tree.borrow_mut().get(name)? {
            // A file made where no file stands (a symlink may) gets the permission bits recorded for it in
            // that snapshot, if any (a file written over keeps its own), and so do the directories above
            // it that the writing makes (`Applier::make_dir`).
            if exists != OnDisk::File
                && let Some(record) = records
                    .entry(from_id)
                    .or_insert_with(|| store.known_record(&from_id))
                    .as_ref()
            {
                if let Some(bits) = record.modes.get(name) {
                    modes.insert(name.to_owned(), *bits);
                }
                for (slash, _) in name.match_indices('/') {
                    let dir = &name[..=slash];
                    if let Some(bits) = record.modes.get(dir) {
                        modes.entry(dir.to_owned()).or_insert(*bits);
                    }
                }
            }
            entries.insert(name.to_owned(), entry);
            (FileActionKind::Write, None)
        } else if let Some(reason) = untracked_then(
            store,
            records
                .entry(from_id)
                .or_insert_with(|| store.known_record(&from_id))
                .as_ref(),
            (&from_id, tree),
            name,
        )? {
            (FileActionKind::Keep, Some(reason))
        } else if matches!(exists, OnDisk::Dir) {
            // A directory stands where the file to delete was: kept, as `Applier::delete` finds it, unless
            // the plan deletes every file under it first (`keep_deletes_of_occupied_dirs`).
            (FileActionKind::Delete, None)
        } else if !real_parents && look(&store.worktree.join(name))?.0 != OnDisk::Absent {
            // A directory above it is a symlink now: what stands at the path through it is not deleted
            // (`Applier::delete` finds it not as tracked).
            (FileActionKind::Keep, Some(SYMLINKED_PARENT.to_owned()))
        } else {
            (FileActionKind::Delete, None)
        };
        if matches!(exists, OnDisk::Dir) {
            over_dirs.push(actions.len());
        }
        actions.push(FileAction {
            path,
            action,
            from,
            reason,
        });
    }
    keep_actions_on_occupied_dirs(store, &mut actions, &mut entries, &over_dirs)?;
    Ok(Planned {
        actions,
        entries,
        modes,
        current,
    })
}

/// A file the plan writes or deletes where a directory stands (`over_dirs`, positions in `actions`) is kept
/// instead, as the writing or deleting would find, unless every file under that directory is one the plan
/// deletes first (SPEC 2.4 `plan`): the directory still holding files that are not tracked content, or
/// that the plan does not remove, stays. (Deleted first, deepest first, they leave the directory empty,
/// and it goes with them: the file's write then takes its place, and its delete finds nothing there.)
fn keep_actions_on_occupied_dirs(
    store: &Store,
    actions: &mut [FileAction],
    entries: &mut HashMap<String, (Mode, ObjectId)>,
    over_dirs: &[usize],
) -> GitResult<()> {
    if over_dirs.is_empty() {
        return Ok(());
    }
    let deleted: HashSet<String> = actions
        .iter()
        .filter(|a| a.action == FileActionKind::Delete)
        .map(|a| String::from(a.path.clone()))
        .collect();
    let written: Vec<String> = actions
        .iter()
        .filter(|a| a.action == FileActionKind::Write)
        .map(|a| String::from(a.path.clone()))
        .collect();
    let dirs_written = dirs_above(written.iter().map(String::as_str));
    for &at in over_dirs {
        let action = &mut actions[at];
        let path = action.path.as_str();
        let reason = match action.action {
            FileActionKind::Write => OCCUPIED_DIR,
            // The state gone back to has a directory there (the plan writes files in it): the file is
            // absent, as it should be (`write_planned` leaves the directory).
            FileActionKind::Delete if dirs_written.contains(path) => continue,
            FileActionKind::Delete => DIR_STANDS,
            FileActionKind::Keep => continue,
        };
        if !holds_only(&store.worktree.join(path), path, &deleted)? {
            entries.remove(path);
            action.action = FileActionKind::Keep;
            action.reason = Some(reason.to_owned());
        }
    }
    Ok(())
}

/// Every directory above one of `paths`.
fn dirs_above<'p>(paths: impl Iterator<Item = &'p str>) -> HashSet<&'p str> {
    paths
        .flat_map(|path| path.match_indices('/').map(move |(i, _)| &path[..i]))
        .collect()
}

/// Why a file that is not tracked content now is not overwritten or deleted.
const NOT_TRACKED_NOW: &str = "it is not tracked content now (ignored, over the size cap, a special file such as a FIFO or \
     socket, or made by another program after rewind took the snapshot this operation started from), so it is left as it is";

/// Why a file is not written where a directory holding other files stands.
const OCCUPIED_DIR: &str = "a directory holding other files stands there; it is left as it is";

/// Whether every file (or symlink, or anything else but a directory) under directory `dir` (worktree
/// path `rel`) is one of `files`: with none, whether it holds only empty directories.
fn holds_only(dir: &Path, rel: &str, files: &HashSet<String>) -> GitResult<bool> {
    let entries = match fs::read_dir(dir) {
        Ok(entries) => entries,
        // Removed, or a directory above it replaced, while it was looked at (another program at work;
        // black-box: a revert failed with ENOTDIR here): not known to hold only those.
        Err(e) if beneath::moved(&e) => return Ok(false),
        Err(e) => return Err(GitError::io(dir, e)),
    };
    for entry in entries {
        let entry = entry.map_err(|e| GitError::io(dir, e))?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else {
            return Ok(false);
        };
        let child = format!("{rel}/{name}");
        let file_type = entry
            .file_type()
            .map_err(|e| GitError::io(&entry.path(), e))?;
        let only = if file_type.is_dir() {
            holds_only(&entry.path(), &child, files)?
        } else {
            files.contains(&child)
        };
        if !only {
            return Ok(false);
        }
    }
    Ok(true)
}

/// What a revert would do, changing nothing.
pub fn plan(
    store: &Store,
    config: &GitStoreConfig,
    patches: &[SnapshotPatch],
) -> GitResult<Vec<FileAction>> {
    let planned = plan_inner(store, config, patches)?;
    // As the revert checks before it touches anything: a blob it would write that the store does not hold
    // fails the preview as it fails the revert, rather than promise a write (black-box).
    if let Some((_, id)) = planned
        .entries
        .values()
        .find(|(_, id)| !store.odb.contains(id))
    {
        return Err(GitError::Missing(id.to_string()));
    }
    let mut actions = planned.actions;
    made_way(&planned.current, &mut actions)?;
    Ok(actions)
}

/// Lists the files and symlinks the writes of `actions` replace on their way, as deletions: one standing
/// where a directory above a written file must be. `blocking_parent` found each to be tracked content (one
/// that is not keeps the write instead), so the revert replaces it (`Applier::make_dir`; the caller's
/// snapshot taken just before holds it, SPEC 2.4), and a preview should name it as it names the files the
/// revert deletes (HTTP fuzz: it named only the file written beneath). A path the plan names itself is not
/// repeated; where the plan keeps it (a later patch's file, ignored when its step began), its entry
/// becomes the deletion the revert carries out (diff review: the preview said `keep` for a file the
/// revert removed).
fn made_way(current: &TrackedNow<'_>, actions: &mut Vec<FileAction>) -> GitResult<()> {
    let mut listed = HashSet::new();
    let mut made_way = Vec::new();
    for action in actions.iter().filter(|a| a.action == FileActionKind::Write) {
        let path = action.path.as_str();
        for (i, _) in path.match_indices('/') {
            let parent = &path[..i];
            match current.dir_on_disk(parent)? {
                OnDisk::Dir => continue,
                OnDisk::Absent => break,
                OnDisk::File | OnDisk::Symlink => {
                    if listed.insert(parent.to_owned()) {
                        made_way.push((
                            parent.to_owned(),
                            action.from.clone(),
                            format!(
                                "it stands where the directory of {path} must come back: it is replaced \
                                 (tracked content, which the snapshot taken before the revert holds)"
                            ),
                        ));
                    }
                    break;
                }
            }
        }
    }
    let at: HashMap<&str, usize> = made_way
        .iter()
        .enumerate()
        .map(|(i, (parent, _, _))| (parent.as_str(), i))
        .collect();
    let mut named = vec![false; made_way.len()];
    for action in actions.iter_mut() {
        if let Some(&i) = at.get(action.path.as_str()) {
            named[i] = true;
            if action.action == FileActionKind::Keep {
                action.action = FileActionKind::Delete;
                action.reason = Some(made_way[i].2.clone());
            }
        }
    }
    for ((parent, from, reason), named) in made_way.iter().zip(named) {
        if !named {
            actions.push(FileAction {
                path: RelPath::new(parent).map_err(|e| GitError::Other(e.to_string()))?,
                action: FileActionKind::Delete,
                from: from.clone(),
                reason: Some(reason.clone()),
            });
        }
    }
    Ok(())
}

/// Up to how many files a revert works out its diffs while it writes. Past that the diffs are long work of
/// their own that would take the cores the writes use, and are left to `revert_diffs`.
const SPECULATE_UP_TO: usize = 128;

/// From how many patch files a revert reads the patch snapshots' trees ahead of its plan, on the thread
/// that reads `base`'s: below it the plan is short, and the trees of a server's reverts mostly in its
/// cache already (`http_bench`'s revert of about 100 files was no faster with it, perhaps slower).
const READ_AHEAD_FROM: usize = 256;

/// Carries out the plan of `patches`; `applied` is `base` with the written and deleted paths replaced.
///
/// Another thread builds the `applied` the plan predicts. While this thread plans, it reads the trees of
/// `base` along every path of the patches: that is the check that the trees `applied` is made from can
/// all be read, and `ready` is not asked before it has passed. Once the plan is made it applies the
/// predicted changes and writes `applied` while the files are written, and for up to `SPECULATE_UP_TO`
/// files it then computes the revert's diffs (`diff::revert_diffs`) from it. When the writes end as
/// predicted, that tree is `applied` and the diffs are kept for the `revert_diffs` call that follows (the
/// text and session diffs then cost no time of their own). When a path had to be kept instead (the
/// worktree changed after the plan), `applied` is built again from what was done, and nothing is kept.
/// Building `applied` from trees already read fails only when its trees cannot be written to the store:
/// such a failure comes after the files are written (as it always did for a few files), and the caller's
/// intent puts them back.
///
/// No file is touched before `ready` says `true` (the plan and the checks come first): when it says
/// `false` the revert is `GitError::CalledOff`.
pub fn revert(
    store: &Store,
    config: &GitStoreConfig,
    patches: &[SnapshotPatch],
    base: &ObjectId,
    ready: impl FnOnce() -> bool,
) -> GitResult<RevertOutcome> {
    // The trees of `applied` are written as one pack (or loose when few), before the stat cache or the
    // returned log name them (`write_planned`).
    store
        .odb
        .batched(|| revert_batched(store, config, patches, base, ready))
}

fn revert_batched(
    store: &Store,
    config: &GitStoreConfig,
    patches: &[SnapshotPatch],
    base: &ObjectId,
    ready: impl FnOnce() -> bool,
) -> GitResult<RevertOutcome> {
    std::thread::scope(|scope| {
        // Dropped when this closure returns (a plan that fails included), which ends the other thread's
        // wait for the prediction before the scope waits for the thread.
        let (predict, predicted_rx) = std::sync::mpsc::channel::<(Vec<Change>, bool)>();
        let (read, read_rx) = std::sync::mpsc::channel();
        let (built, built_rx) = std::sync::mpsc::channel();
        let speculative = scope.spawn(move || -> Option<(ObjectId, RevertDiffs)> {
            // A big revert's plan looks its paths up in the patch snapshots' trees one by one, among its
            // other looks: this thread reads those trees first, ahead of it (into the process's tree
            // cache), then `base`'s, which are not needed before the plan is done.
            if patches.iter().map(|patch| patch.files.len()).sum::<usize>() >= READ_AHEAD_FROM {
                for patch in patches {
                    let Ok(id) = object_id(&patch.hash) else {
                        continue;
                    };
                    let mut tree = LazyTree::new(&store.odb, id);
                    for file in &patch.files {
                        // The plan reads it again, and says what cannot be read.
                        if tree.get(file.as_str()).is_err() {
                            break;
                        }
                    }
                }
            }
            let paths = patches
                .iter()
                .flat_map(|patch| patch.files.iter().map(RelPath::as_str));
            let mut applied = match tree::Edit::read(&store.odb, base, paths) {
                Ok(edit) => {
                    // A failed send only means the revert ended first (its plan failed).
                    let _ = read.send(Ok(()));
                    edit
                }
                Err(e) => {
                    let _ = read.send(Err(e));
                    return None;
                }
            };
            let (predicted, small) = predicted_rx.recv().ok()?;
            let applied = applied
                .apply(&store.odb, &predicted)
                .and_then(|()| applied.write(&store.odb));
            let sent = applied.as_ref().ok().map(|(id, _)| *id);
            // A failed send only means the writes did not wait for it (they failed first).
            let _ = built.send(applied);
            let applied = sent?;
            if !small {
                return None;
            }
            let changes = diff_trees(&store.odb, base, &applied).ok()?;
            // The `diff` attributes are read from the worktree as the revert leaves it: not while it
            // writes a `.gitattributes` (`revert_diffs` reads them afterwards).
            if changes
                .iter()
                .any(|(path, _, _)| path.rsplit('/').next() == Some(".gitattributes"))
            {
                return None;
            }
            let attributes = crate::diff::attributes_of(store, config, &changes);
            let made = crate::diff::Made {
                odb: &store.odb,
                size_cap: config.size_cap,
                attributes: &attributes,
            };
            // One thread: the writes have the others.
            let diffs = crate::diff::revert_diffs_on(made, &changes, 1).ok()?;
            Some((applied, diffs))
        });
        let Planned {
            actions,
            entries,
            modes,
            current,
        } = plan_inner(store, config, patches)?;
        // Every blob to be written is checked before any file is touched, and so is every tree `applied`
        // is made from (`read_rx`, below).
        if let Some((_, id)) = entries.values().find(|(_, id)| !store.odb.contains(id)) {
            return Err(GitError::Missing(id.to_string()));
        }
        let touched = actions
            .iter()
            .filter(|a| matches!(a.action, FileActionKind::Write | FileActionKind::Delete))
            .count();
        // The end state the plan predicts, in the order `write_planned` touches the files.
        let predicted: Vec<Change> = actions
            .iter()
            .rev()
            .filter(|a| a.action == FileActionKind::Delete)
            .map(|a| (String::from(a.path.clone()), None))
            .chain(
                actions
                    .iter()
                    .filter(|a| a.action == FileActionKind::Write)
                    .map(|a| (String::from(a.path.clone()), Some(entries[a.path.as_str()]))),
            )
            .collect();
        // A failed send only means the other thread stopped (a tree of `base` it could not read, which
        // `read_rx` carries).
        let _ = predict.send((predicted.clone(), touched <= SPECULATE_UP_TO));
        let prediction = Prediction {
            changes: &predicted,
            read: read_rx,
            applied: built_rx,
        };
        let earliest = patches.first().map(|p| object_id(&p.hash)).transpose()?;
        let outcome = write_planned(
            store,
            config,
            (&actions, &entries, modes),
            current,
            (base, earliest),
            ready,
            prediction,
        )?;
        let applied = object_id(&outcome.applied)?;
        if let Ok(Some((predicted, diffs))) = speculative.join()
            && predicted == applied
        {
            crate::diff::keep_revert_diffs(&store.dir, (*base, applied), config.size_cap, diffs);
        }
        Ok(outcome)
    })
}

/// A path with its end state (none: absent).
type Change = (String, Option<Entry>);

/// Why a file a revert would overwrite or delete is left as it is: it changed after the revert's snapshot.
const EDITED_MEANWHILE: &str = "it changed after rewind took the snapshot this revert started from (an edit \
                                made while the revert ran), so no snapshot holds that content; it is left as it is";

/// Why a file a revert would write is left as it is: another program deleted it, or deleted or replaced a
/// directory above it, after the revert's snapshot.
const DELETED_MEANWHILE: &str = "it, or a directory above it, was deleted or replaced after rewind took the \
                                 snapshot this revert started from (by another program, while the revert \
                                 ran), so it is left as it is";

/// What a revert's check for edits found (`changed_after_track`).
#[derive(Default)]
struct Checked {
    /// The paths that changed after the track `base` came from, with why each is left as it is: targets,
    /// and files or symlinks standing where a target's directory should be.
    edited: HashMap<String, &'static str>,
    /// What each target (and each file or symlink in a target's way) looked at was then
    /// (`Applier::expected`).
    expected: Expected,
    /// The targets whose directory did not open beneath the worktree (`Applier::unopened`).
    unopened: HashSet<String>,
    /// Where the check found a directory or a special file (`Applier::not_a_file`).
    not_a_file: HashSet<String>,
}

impl Checked {
    /// Notes each directory on the way to target `path`, whose directory did not open, as the check finds
    /// it: one that stands is expected to stand (`not_a_file`); from the first that does not on, a file or
    /// symlink there later is someone else's (expected absent), but for the file or symlink that stands
    /// there, which goes to `to_judge` as a target does (the write would replace it by a directory).
    fn note_the_way(
        &mut self,
        (root, worktree): (&Root, &Path),
        path: &str,
        seen: &mut HashMap<String, OnTheWay>,
        to_judge: &mut Vec<(String, Stat)>,
    ) -> GitResult<()> {
        let mut stopped = false;
        for (i, _) in path.match_indices('/') {
            let parent = &path[..i];
            if stopped {
                self.expected.entry(parent.to_owned()).or_insert(None);
                continue;
            }
            match on_the_way(root, worktree, parent, seen)? {
                OnTheWay::Dir => {
                    if !self.not_a_file.contains(parent) {
                        self.not_a_file.insert(parent.to_owned());
                    }
                    continue;
                }
                OnTheWay::Missing => {
                    self.expected.entry(parent.to_owned()).or_insert(None);
                }
                OnTheWay::Thing(Some(stat)) => {
                    if !self.expected.contains_key(parent) {
                        self.expected.insert(parent.to_owned(), Some(stat));
                        to_judge.push((parent.to_owned(), stat));
                    }
                }
                OnTheWay::Thing(None) => {}
            }
            stopped = true;
        }
        Ok(())
    }
}

/// The planned targets that changed after the track the revert's `base` came from (an edit made while the
/// revert planned or stored its intent): overwriting or deleting one would lose content no snapshot holds.
/// A target whose stat data is what that track recorded (the stat cache, when it describes `base`) is as
/// the track saw it; any other that exists is read and compared with its entry in `base` (absent there:
/// made since). One that is gone or changed by the time it is read was edited meanwhile too, and one to
/// be written that `base` holds and that is absent was deleted meanwhile. For a target whose directory
/// does not open, the file or symlink standing on the way (which the write would replace by a directory)
/// is judged the same way.
/// Also returns what each target looked at was then (its stat data, or none when absent, also when its
/// directory is): the writes and deletes leave a target that is anything else by then as it is
/// (`Applier::as_expected`).
fn changed_after_track(
    store: &Store,
    config: &GitStoreConfig,
    actions: &[FileAction],
    base: &ObjectId,
) -> GitResult<Checked> {
    let root = store.root()?;
    let targets: Vec<&str> = actions
        .iter()
        .filter(|a| matches!(a.action, FileActionKind::Write | FileActionKind::Delete))
        .map(|a| a.path.as_str())
        .collect();
    let writes: HashSet<&str> = actions
        .iter()
        .filter(|a| a.action == FileActionKind::Write)
        .map(|a| a.path.as_str())
        .collect();
    // Each target is looked at through a handle on its directory, opened beneath the worktree without
    // following a symlink, several at a time (the work is the kernel's path walks).
    let looked = crate::track::parallel_map_on(
        &targets,
        crate::track::worker_threads(),
        64,
        || (),
        |(), path| {
            let (dir, name) = beneath::split(path);
            match root.dir(dir) {
                Ok(fd) => look_in(&fd, name, &store.worktree.join(path)).map(Some),
                // A path below a symlink or a file (or a directory gone) is not looked at: the writing
                // replaces or keeps what stands there, and nothing is read through a symlink.
                Err(e) if beneath::moved(&e) => Ok(None),
                Err(e) => Err(GitError::io(&store.worktree.join(path), e)),
            }
        },
    )?;
    let mut base_tree = LazyTree::new(&store.odb, *base);
    let mut suspects: Vec<(String, Option<Entry>, Stat)> = Vec::new();
    let mut checked = Checked::default();
    // What each directory path on the way to a target whose directory did not open was found to be.
    let mut in_the_way = HashMap::new();
    // The files and symlinks to judge: the targets that are one, and what stands in a target's way.
    let mut to_judge: Vec<(String, Stat)> = Vec::new();
    for (path, looked) in targets.iter().zip(looked) {
        match looked {
            // Made after this look, a file there would be new content: left alone, not overwritten. So is
            // one made in its directory after the writing made that directory (black-box: an undo of
            // `rm -rf d1` made d1 again and overwrote the files another program had just written there,
            // with no warning).
            // One to be written that `base` holds was deleted after the track (its directory too, when
            // that did not open): it stays deleted, rather than come back as the step had it.
            Some((OnDisk::Absent, _)) | None => {
                checked.expected.insert((*path).to_owned(), None);
                if writes.contains(path) && base_tree.get(path)?.is_some() {
                    checked.edited.insert((*path).to_owned(), DELETED_MEANWHILE);
                }
                if looked.is_none() {
                    checked.unopened.insert((*path).to_owned());
                    let at = (&root, store.worktree.as_path());
                    checked.note_the_way(at, path, &mut in_the_way, &mut to_judge)?;
                }
            }
            // A file or symlink.
            Some((_, Some(stat))) => {
                // Judged once, also when it stood in an earlier target's way.
                if checked
                    .expected
                    .insert((*path).to_owned(), Some(stat))
                    .is_none()
                {
                    to_judge.push(((*path).to_owned(), stat));
                }
            }
            // A directory or a special file: a file or symlink found there later is someone else's. One
            // to be written where `base` holds a file or symlink was replaced after the track: it stays as
            // it is, also once that directory is gone (black-box: `rm -rf` of the directory another
            // program had put there made the revert write the file back).
            Some((_, None)) => {
                checked.not_a_file.insert((*path).to_owned());
                if writes.contains(path) && base_tree.get(path)?.is_some() {
                    checked.edited.insert((*path).to_owned(), DELETED_MEANWHILE);
                }
            }
        }
    }
    StatCache::peek(&store.stat_cache_path(), |cache| -> GitResult<()> {
        let recorded = (cache.tree == Some(*base)).then_some(&cache.entries);
        for (path, stat) in to_judge {
            let as_recorded = recorded
                .and_then(|entries| entries.get(&path))
                .is_some_and(|entry| entry.stat == stat);
            if !as_recorded {
                let then = base_tree.get(&path)?;
                suspects.push((path, then, stat));
            }
        }
        Ok(())
    })?;
    let changed = crate::track::parallel_map_on(
        &suspects,
        crate::track::worker_threads(),
        8,
        || (),
        |(), (path, then, looked)| {
            let abs = store.worktree.join(path);
            match entry_on_disk(config, &abs, path) {
                Ok((now, _)) => Ok((Some(now) != *then).then(|| path.clone())),
                // Deleted, replaced or still being written while it was read (black-box: a deletion
                // there failed the revert, and the service's rollback then put back older versions of
                // the other files): edited meanwhile, left as it is. A file that is still what was
                // looked at and cannot be read fails the revert, before anything is touched.
                Err(e) => match look(&abs) {
                    Ok((_, now)) if now != Some(*looked) => Ok(Some(path.clone())),
                    _ => Err(e),
                },
            }
        },
    )?;
    for path in changed.into_iter().flatten() {
        checked.edited.insert(path, EDITED_MEANWHILE);
    }
    Ok(checked)
}

/// What a directory path on the way to a target was found to be (`on_the_way`).
#[derive(Clone, Copy)]
enum OnTheWay {
    Dir,
    /// Nothing, or its own directory no longer opens: nothing below it is looked at.
    Missing,
    /// A file or symlink (with its stat data; none for a special file).
    Thing(Option<Stat>),
}

/// What directory path `parent`, on the way to a target whose directory did not open beneath the
/// worktree, is now; `seen` keeps what each was found to be, for the next target.
fn on_the_way(
    root: &Root,
    worktree: &Path,
    parent: &str,
    seen: &mut HashMap<String, OnTheWay>,
) -> GitResult<OnTheWay> {
    if let Some(known) = seen.get(parent) {
        return Ok(*known);
    }
    let (dir, name) = beneath::split(parent);
    let abs = worktree.join(parent);
    let found = match root.dir(dir) {
        Ok(fd) => match look_in(&fd, name, &abs)? {
            (OnDisk::Dir, _) => OnTheWay::Dir,
            (OnDisk::Absent, _) => OnTheWay::Missing,
            (OnDisk::File | OnDisk::Symlink, stat) => OnTheWay::Thing(stat),
        },
        // Changed since a look above found a directory.
        Err(e) if beneath::moved(&e) => OnTheWay::Missing,
        Err(e) => return Err(GitError::io(&abs, e)),
    };
    seen.insert(parent.to_owned(), found);
    Ok(found)
}

/// The end state a revert's plan predicts, and the tree built from it on another thread.
struct Prediction<'p> {
    /// Each path to touch with its end state, in the order the writes touch them.
    changes: &'p [Change],
    /// Whether every tree of `base` on the paths of the patches could be read (the check made before
    /// `ready` is asked).
    read: std::sync::mpsc::Receiver<GitResult<()>>,
    /// `edit(base, changes)` with its directories' ids, or why it could not be built.
    applied: std::sync::mpsc::Receiver<GitResult<(ObjectId, tree::DirIds)>>,
}

/// The writing half of `revert`: once the trees of `base` were read and `ready` says so, deletes and writes
/// what the plan says (each path looked at again right before it is changed), teaches the stat cache,
/// and returns the outcome. `applied` is taken from `prediction` when the writes ended as it predicted.
fn write_planned(
    store: &Store,
    config: &GitStoreConfig,
    (actions, entries, modes): (&[FileAction], &Entries, HashMap<String, u32>),
    current: TrackedNow<'_>,
    (base, earliest): (&ObjectId, Option<ObjectId>),
    ready: impl FnOnce() -> bool,
    prediction: Prediction<'_>,
) -> GitResult<RevertOutcome> {
    let stopped =
        || GitError::Other("building the tree the revert leaves stopped unexpectedly".to_owned());
    // The trees `applied` is made from have all been read before the caller stores its intent.
    prediction.read.recv().map_err(|_| stopped())??;
    if !ready() {
        return Err(GitError::CalledOff);
    }
    // From here on every parent is looked at when it is used (the disk may have changed since the plan).
    current.stop_planning();
    let Checked {
        edited,
        expected,
        unopened,
        not_a_file,
    } = changed_after_track(store, config, actions, base)?;
    let mut applier = Applier::new(store, config, Tracking::PerPath(Box::new(current)))?;
    applier.modes = modes;
    // The state a revert goes back to is the earliest patch's snapshot (the first hidden step's start); a
    // later patch's start may have had directories that an earlier hidden step made.
    if let Some(first) = earliest {
        applier.existed_empty = store.record(&first).dirs_kept_when_emptied();
    }
    // The directories of the deletes too: a file is deleted by renaming it aside first, and a crash can
    // leave it there under a temporary name (black-box: after a `kill -9` mid-revert one stayed for good,
    // and kept later reverts from putting back the file its directory had replaced).
    applier.journal_parents(
        entries.keys().cloned().chain(
            actions
                .iter()
                .filter(|a| a.action == FileActionKind::Delete)
                .map(|a| String::from(a.path.clone())),
        ),
    )?;
    applier.expected = expected;
    applier.unopened = unopened;
    applier.not_a_file = not_a_file;
    applier.expected_looked = true;
    applier.protected = edited.keys().cloned().collect();
    // Deletions first, deepest first, as a restore does: a file that replaced a directory (or the reverse)
    // is gone before what was there comes back.
    let dirs_written = dirs_above(entries.keys().map(String::as_str));
    for action in actions.iter().rev() {
        let path = action.path.as_str();
        if action.action == FileActionKind::Delete && !edited.contains_key(path) {
            // A directory the state gone back to has (it writes files in it) stands where the file was:
            // the file is absent, as it should be (`keep_actions_on_occupied_dirs`).
            if dirs_written.contains(path) && on_disk(&store.worktree.join(path))? == OnDisk::Dir {
                continue;
            }
            applier.delete(path)?;
        }
    }
    for action in actions {
        let path = action.path.as_str();
        match action.action {
            _ if edited.contains_key(path) => applier.kept.push(KeptPath {
                path: action.path.clone(),
                reason: edited[path].to_owned(),
                from: None,
            }),
            FileActionKind::Write => {
                let (mode, id) = entries[path];
                applier.write(path, mode, &id)?;
            }
            FileActionKind::Delete => {}
            FileActionKind::Keep => applier.kept.push(KeptPath {
                path: action.path.clone(),
                reason: action.reason.clone().unwrap_or_default(),
                from: None,
            }),
        }
    }
    applier.finish()?;
    store.clear_journal()?;
    // `applied` is `base` with every touched path set to its end state, in the order they were touched
    // (a file replaced by a directory, or the reverse, ends as it ended on disk).
    let changes: Vec<(String, Option<(Mode, ObjectId)>)> = applier
        .touched
        .iter()
        .map(|(path, _)| (path.clone(), applier.last.get(path).copied().flatten()))
        .collect();
    let (applied, dirs) = if prediction.changes == changes.as_slice() {
        prediction.applied.recv().map_err(|_| stopped())??
    } else {
        // The predicted trees are not used; the batch is not ended while the other thread still adds
        // them to it (they would go out loose, one file each).
        let _ = prediction.applied.recv();
        edit(&store.odb, base, &changes)?
    };
    store.odb.end_batch()?;
    applier.teach_stat_cache(Some((*base, applied, &dirs)));
    store.log_returned(&applied)?;
    let (written, deleted) = applier.net();
    // A file the plan keeps (a later patch's, ignored when its step began) that a write replaced on its
    // way, with the directory it needed, was deleted, not kept (diff review: it was reported as both).
    let replaced: HashSet<&str> = deleted.iter().map(String::as_str).collect();
    applier.kept.retain(|kept| {
        !replaced.contains(kept.path.as_str())
            || !actions
                .iter()
                .any(|a| a.path == kept.path && a.action == FileActionKind::Keep)
    });
    let mut kept = Applier::outcome_kept(std::mem::take(&mut applier.kept));
    name_content_kept_from(store, actions, &mut kept);
    Ok(RevertOutcome {
        applied: snapshot_id(&applied)?,
        written: Applier::outcome_paths(&written)?,
        deleted: Applier::outcome_paths(&deleted)?,
        kept,
    })
}

/// Sets `KeptPath::from` on each kept path the revert was to put content at, and left because something
/// stands in the way (a directory holding other files, a file that is not tracked content): the
/// snapshot of its action (the first patch naming it), when that snapshot holds a file there. The content
/// can be put back from there once what stands there is moved away. A path the revert was to delete
/// names none, and neither does one kept because it changed while the revert ran: what stands there then
/// may be in no snapshot, which the warning of files left as they are says (diff review). Best effort,
/// after the writes: a tree that cannot be read leaves `from` unset rather than failing a revert that is
/// done. Kept paths are few: each lookup reads the trees on its path once.
fn name_content_kept_from(store: &Store, actions: &[FileAction], kept: &mut [KeptPath]) {
    const MEANWHILE: [&str; 4] = [
        MOVED_MEANWHILE,
        MADE_WAY_KEPT,
        EDITED_MEANWHILE,
        DELETED_MEANWHILE,
    ];
    if kept.is_empty() {
        return;
    }
    let by_path: HashMap<&str, &FileAction> =
        actions.iter().map(|a| (a.path.as_str(), a)).collect();
    let mut trees: HashMap<ObjectId, LazyTree<'_>> = HashMap::new();
    for kept in kept.iter_mut() {
        if MEANWHILE.contains(&kept.reason.as_str()) {
            continue;
        }
        let Some(action) = by_path.get(kept.path.as_str()) else {
            continue;
        };
        let holds = match action.action {
            FileActionKind::Write => true,
            FileActionKind::Delete => false,
            FileActionKind::Keep => object_id(&action.from).is_ok_and(|id| {
                trees
                    .entry(id)
                    .or_insert_with(|| LazyTree::new(&store.odb, id))
                    .get(kept.path.as_str())
                    .is_ok_and(|entry| entry.is_some())
            }),
        };
        if holds {
            kept.from = Some(action.from.clone());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A temporary file is known by the inode, size and modification time it had once written, which a
    /// rename and a change of permissions or owner keep (they change the status change time only); any
    /// other stat data at its name is another file's, or its own rewritten.
    #[test]
    fn a_temporary_file_is_known_by_what_a_rename_keeps() {
        let written = Stat {
            mode: Mode::File,
            size: 7,
            mtime_ns: 1_000,
            ctime_ns: 1_000,
            ino: 42,
            dev: 3,
        };
        let temp = |written: Option<Stat>| Temp {
            file: None,
            ext4: false,
            executable: false,
            permissions: 0o600,
            owner: (0, 0),
            written,
        };
        let known = temp(Some(written));
        let renamed = Stat {
            ctime_ns: 2_000,
            ..written
        };
        assert!(known.wrote(&written));
        assert!(known.wrote(&renamed));
        for other in [
            Stat { ino: 43, ..renamed },
            Stat { dev: 4, ..renamed },
            Stat { size: 8, ..renamed },
            Stat {
                mtime_ns: 999,
                ..renamed
            },
        ] {
            assert!(!known.wrote(&other), "{other:?}");
        }
        assert!(!temp(None).wrote(&written), "nothing known, nothing taken");
    }

    #[test]
    fn a_scope_holds_its_paths_and_what_lies_below_them() {
        let named = ["a/b".to_owned(), "c".to_owned()];
        let scope = Scope::of(Some(&named));
        for path in ["a/b", "a/b/x", "a/b/x/y", "c", "c/d"] {
            assert!(scope.holds(path), "{path}");
        }
        // A sibling that shares a prefix, a parent, and other paths are outside.
        for path in ["a/bc", "a/bc/x", "a", "a/c", "cd", "d/c", "b"] {
            assert!(!scope.holds(path), "{path}");
        }
        assert!(Scope::of(None).holds("anything/at/all"));
        assert!(!Scope::of(Some(&[])).holds("x"));

        let deleted = ["a/b/c".to_owned(), "a/d".to_owned(), "e".to_owned()];
        let below = with_parents(&deleted);
        let mut listed: Vec<&str> = below.iter().copied().collect();
        listed.sort_unstable();
        assert_eq!(listed, ["a", "a/b", "a/b/c", "a/d", "e"]);
    }

    /// A worktree holding `sub/a.txt` and `b.txt`, its store, and its track.
    fn tracked() -> (tempfile::TempDir, PathBuf, GitStoreConfig, Store, ObjectId) {
        let temp = tempfile::tempdir().expect("a temporary directory");
        let wt = temp.path().join("wt");
        fs::create_dir_all(wt.join("sub")).expect("mkdir");
        fs::write(wt.join("sub/a.txt"), "a\n").expect("write a");
        fs::write(wt.join("b.txt"), "b\n").expect("write b");
        let mut config = GitStoreConfig::new(temp.path().join("data"), "unit");
        config.excludes_file = crate::config::ExcludesFile::None;
        let store = Store::open(&config, &wt).expect("open the store");
        let id = crate::track::track(&store, &config).expect("track").id;
        (temp, wt, config, store, id)
    }

    fn names(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = fs::read_dir(dir)
            .expect("list")
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    /// An operation that fails after its deletions (its applier dropped before `finish`) still settles
    /// the files they moved aside: one written to meanwhile, through a handle opened before the move,
    /// goes back to its name; an unchanged one is removed with the directory it emptied. Nothing is left
    /// at a temporary name for the journal's clean-up to remove.
    #[test]
    fn a_dropped_applier_settles_what_its_deletions_moved_aside() {
        for written in [false, true] {
            let (_temp, wt, config, store, id) = tracked();
            let tracking =
                Tracking::Snapshot(RefCell::new(LazyTree::new(&store.odb, id)), HashMap::new());
            let mut open = fs::OpenOptions::new()
                .append(true)
                .open(wt.join("sub/a.txt"))
                .expect("another program opens the file");
            let mut applier = Applier::new(&store, &config, tracking).expect("an applier");
            applier.delete("sub/a.txt").expect("delete");
            assert_eq!(
                applier.deleted_aside.len(),
                1,
                "moved aside, not removed yet"
            );
            if written {
                use std::io::Write;
                open.write_all(b"appended meanwhile\n").expect("write");
            }
            drop(applier);
            if written {
                assert_eq!(names(&wt.join("sub")), ["a.txt"]);
                assert_eq!(
                    fs::read_to_string(wt.join("sub/a.txt")).expect("read"),
                    "a\nappended meanwhile\n"
                );
            } else {
                assert!(!wt.join("sub").exists(), "the emptied directory is removed");
            }
            let top = if written {
                vec!["b.txt", "sub"]
            } else {
                vec!["b.txt"]
            };
            assert_eq!(names(&wt), top);
        }
    }
}
