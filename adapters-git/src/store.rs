//! One snapshot store per worktree and database: a bare git dir outside the worktree, locked across
//! processes while an operation runs, with rewind's own files under `rewind/` (stat cache, per-snapshot
//! records, the log of returned ids, the journal of temporary files).

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::fs::{self, File};
use std::io::Write;
use std::path::{Component, Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use gix::ObjectId;
use serde::{Deserialize, Serialize};

use rewind_core::model::GcReport;

use crate::config::GitStoreConfig;
use crate::error::{GitError, GitResult};
use crate::ignore::OutsideRule;
use crate::odb::Odb;
use crate::replace::{Held, preallocate};

/// The prefix of every temporary file rewind writes into a worktree: `.rewind-tmp-<batch>-<n>`, where the
/// batch is 16 lowercase hex digits drawn at random for each operation and `n` counts its files.
const TEMP_PREFIX: &str = ".rewind-tmp-";

/// The name of the `n`th temporary file of `batch`.
pub fn temp_name(batch: &str, n: u64) -> String {
    format!("{TEMP_PREFIX}{batch}-{n}")
}

/// Whether `name` is a temporary file's name, of any batch: exactly `.rewind-tmp-`, 16 lowercase hex
/// digits, `-` and a decimal count. A user's own file that merely starts with the prefix
/// (`.rewind-tmp-notes`) is not one: it is tracked content like any other, and never removed.
pub fn is_temp_name(name: &str) -> bool {
    temp_batch(name).is_some()
}

/// The batch of a temporary file's name (see `is_temp_name`).
fn temp_batch(name: &str) -> Option<&str> {
    let rest = name.strip_prefix(TEMP_PREFIX)?;
    let (batch, count) = rest.split_once('-')?;
    let batch_ok = batch.len() == 16
        && batch
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
    let count_ok =
        !count.is_empty() && count.len() <= 20 && count.bytes().all(|b| b.is_ascii_digit());
    (batch_ok && count_ok).then_some(batch)
}

/// The first line of a journal, naming the batch whose temporary files it announces.
const JOURNAL_BATCH: &str = "batch ";

/// What is recorded with a snapshot id beyond its tree: what made paths untracked when it was taken.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotRecord {
    /// The worktree relative to its ignore root.
    #[serde(default)]
    pub prefix: String,
    /// The ignore rules from outside the tree in force then.
    #[serde(default)]
    pub outside: Vec<OutsideRule>,
    /// The union of the paths skipped by every track that returned this id.
    #[serde(default)]
    pub skipped: BTreeSet<String>,
    /// The other rule sets (with their prefix) in force when a track returned this id: one id can stand for
    /// several disk states, and a path ignored under any of them may have existed then.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub earlier: Vec<(String, Vec<OutsideRule>)>,
    /// The directories that held no entry (but `.git` or rewind's temporary files) at some track that
    /// returned this id since it was first recorded: the union, since one id stands for every disk state
    /// with the same files, empty directories or not, and any of them may be the one a revert goes back
    /// to. None when no track recorded it yet. A git tree holds no empty directory; a revert or restore
    /// that goes back to this snapshot leaves these (and those above them) in place when it empties them,
    /// instead of removing a directory the snapshot's disk state had. At worst an empty directory stays
    /// that the state gone back to did not have; an intersection removed one it had (review: an empty
    /// directory the user made between two steps, another session's worktree, was removed by a revert,
    /// because an earlier track of the same files had not seen it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub empty_dirs: Option<BTreeSet<String>>,
    /// The nested repositories' roots (worktree-relative, no trailing `/`) and their `info/exclude` text,
    /// as each track that returned this id found them: one map per distinct state. A snapshot holds no
    /// `.git`, so without this a path's rules then would be judged by the nested repositories on disk now,
    /// and a step that made a directory a repository (`git init`), or unmade one, would have its undo
    /// delete a file that was ignored when it began (git-layout audit). Empty in records written before.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub nested: Vec<NestedRoots>,
    /// Whether `nested` holds the state of every track of the id (the record was first written with it),
    /// so the nested repositories on disk now need not be asked too.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub nested_all: bool,
    /// The `.gitignore` files in force that the snapshot does not hold (each ignored by its own rules, as
    /// `.venv/.gitignore`'s `*` ignores itself): their directory (worktree-relative, no trailing `/`, `""`
    /// for the root) and text, as each track that returned this id found them, one map per distinct state.
    /// Without them, whether a path was ignored then would be judged without their rules, and a step that
    /// rewrote such a file, un-ignoring what it ignored, would have its undo delete files that existed
    /// when it began. Empty in records written before.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hidden_rules: Vec<HiddenRules>,
    /// Whether `hidden_rules` holds the state of every track of the id (the record was first written with
    /// it), so the `.gitignore` files on disk now need not be asked too.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub hidden_rules_all: bool,
    /// The permission bits of its files that are private beyond git's modes (they lack a bit of `0644` or
    /// `0755`), the narrowest any track that returned this id saw (at most 10,000 files per track, the
    /// most private first): a restore or revert that makes such a file where no file stands gives it
    /// these, less what the umask takes from a new file (a private file deleted by a step comes back
    /// private). A file written over keeps its own. Directories whose bits lack one of `0755`'s too, as
    /// `a/b/`: one a restore or revert makes gets their group and others bits (the owner's stay all).
    /// Empty in records written before.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub modes: BTreeMap<String, u32>,
}

/// The nested repositories a track found: each root directory and its `info/exclude` text (`None` when it
/// has none that can be read).
pub type NestedRoots = BTreeMap<String, Option<String>>;

/// The `.gitignore` files in force that a track left out of its snapshot: each directory and the text.
pub type HiddenRules = BTreeMap<String, String>;

/// What a track saw of the rules in force that its tree does not hold: the nested repositories and the
/// hidden `.gitignore` files (`SnapshotRecord::nested`, `SnapshotRecord::hidden_rules`).
#[derive(Clone, Debug, Default)]
pub struct UnheldRules {
    pub nested: NestedRoots,
    pub hidden: HiddenRules,
}

impl SnapshotRecord {
    /// The directories a revert or restore going back to this snapshot leaves when it empties them: each
    /// directory named as empty at every track of the id, and every directory above one (the worktree's
    /// root left out).
    pub fn dirs_kept_when_emptied(&self) -> HashSet<String> {
        let mut dirs = HashSet::new();
        for dir in self.empty_dirs.iter().flatten() {
            let mut at = dir.as_str();
            while dirs.insert(at.to_owned()) {
                match at.rsplit_once('/') {
                    Some((parent, _)) => at = parent,
                    None => break,
                }
            }
        }
        dirs
    }

    /// Every rule set in force when a track returned this id, with its prefix: the latest first.
    pub fn rule_sets(&self) -> impl Iterator<Item = (&String, &Vec<OutsideRule>)> {
        std::iter::once((&self.prefix, &self.outside)).chain(
            self.earlier
                .iter()
                .map(|(prefix, outside)| (prefix, outside)),
        )
    }
}

/// How long the log of returned ids keeps a line whatever a gc's grace period (`Store::returned_for_gc`):
/// another gc, which read the database's references before this one and waits for the store, is refused
/// only when it has waited that long.
const RETURNED_KEPT_MS: u64 = 3_600_000;

/// The line of the returned log that says how far (epoch milliseconds: just after the newest line cut) gc
/// cut it.
const RETURNED_CUT: &str = "cut ";

/// The log of returned ids, read.
#[derive(Default)]
struct ReturnedLog {
    /// Just after the newest line a gc cut (0: none was).
    cut: u64,
    /// Each id with the time it was returned.
    lines: Vec<(u64, ObjectId)>,
}

impl ReturnedLog {
    fn since(&self, since_ms: u64) -> Vec<ObjectId> {
        self.lines
            .iter()
            .filter(|(time, _)| *time >= since_ms)
            .map(|(_, id)| *id)
            .collect()
    }
}

/// An open store, locked for one operation (the lock is released when this is dropped).
#[derive(Debug)]
pub struct Store {
    /// The bare git dir.
    pub dir: PathBuf,
    /// Its objects.
    pub odb: Odb,
    /// The canonical worktree.
    pub worktree: PathBuf,
    /// The worktree's root directory, opened once the store was locked, with no symlink on its path
    /// (`Root::open_real`): every change goes through it (`Store::root`). None for a store opened to be
    /// removed, its worktree gone.
    root: Option<crate::beneath::Root>,
    /// The lock, held until this is dropped; none for a store opened only to read without it
    /// (`Store::open_to_read`).
    _lock: Option<File>,
}

/// The root directory of worktree `canonical` (`Root::open_real`), refused as `Store::open` refuses a
/// worktree that resolves elsewhere when a symlink came onto its path since it was checked.
fn open_root(canonical: &Path) -> GitResult<crate::beneath::Root> {
    crate::beneath::Root::open_real(canonical).map_err(|e| {
        if e.raw_os_error() == Some(rustix::io::Errno::LOOP.raw_os_error()) {
            GitError::Refused(format!(
                "worktree {}, or a directory above it, was replaced by a symlink; rewind works on the real \
                 directory's path, and does not follow a worktree replaced by a symlink",
                canonical.display()
            ))
        } else {
            GitError::io(canonical, e)
        }
    })
}

/// The canonical form of a worktree, refusing `/`, the home directory, rewind's data directory (and what is
/// inside it) and missing directories.
pub fn canonical_worktree(config: &GitStoreConfig, worktree: &Path) -> GitResult<PathBuf> {
    let canonical = fs::canonicalize(worktree).map_err(|e| {
        GitError::Refused(format!(
            "worktree {} cannot be used: {e}",
            worktree.display()
        ))
    })?;
    if !canonical.is_dir() {
        return Err(GitError::Refused(format!(
            "worktree {} is not a directory",
            worktree.display()
        )));
    }
    if canonical.parent().is_none() {
        return Err(GitError::Refused(
            "refusing to snapshot the filesystem root: choose a project directory".to_owned(),
        ));
    }
    if let Some(home) = config
        .home_dir
        .as_ref()
        .and_then(|h| fs::canonicalize(h).ok())
        && canonical == home
    {
        return Err(GitError::Refused(format!(
            "refusing to snapshot the home directory {}: choose a project directory",
            canonical.display()
        )));
    }
    // rewind's own data (its database and stores) is never a project: a data directory inside the worktree
    // is left out of its snapshots, but one that is the worktree, or holds it, would be snapshotted and
    // rewritten by the operations that use it.
    if let Ok(data) = fs::canonicalize(&config.data_dir)
        && canonical.starts_with(&data)
    {
        return Err(GitError::Refused(format!(
            "refusing to snapshot {}: it is rewind's data directory {} or inside it; choose another data \
             directory (--data-dir or REWIND_DATA_DIR) or another project directory",
            canonical.display(),
            data.display()
        )));
    }
    // A repository's own directory (a `.git`, or a bare repository) holds git's refs, index and objects:
    // snapshotting it would make a revert rewrite them (SPEC 2.1: the user's `.git` is never written).
    if let Some(git_dir) = git_dir_at_or_above(&canonical) {
        return Err(GitError::Refused(format!(
            "refusing to snapshot {}: {} is a git repository's own directory (its refs, index and objects), \
             not a worktree; choose the project directory that holds the repository",
            canonical.display(),
            if git_dir == canonical {
                "it".to_owned()
            } else {
                git_dir.display().to_string()
            }
        )));
    }
    Ok(canonical)
}

/// The git directory `canonical` is, or lies in, if any: a directory named `.git`, or one laid out as git
/// lays out a repository's directory (`objects/`, `refs/` and a `HEAD` that names a ref or holds an
/// object id: a bare repository, or a git dir under another name). The search stops at the first directory
/// that has a `.git` entry of its own: that is a worktree's root (a linked worktree made inside a `.git`
/// included), as git's own discovery finds it.
fn git_dir_at_or_above(canonical: &Path) -> Option<PathBuf> {
    for dir in canonical.ancestors() {
        if dir.file_name().is_some_and(|name| name == ".git") || laid_out_as_git_dir(dir) {
            return Some(dir.to_path_buf());
        }
        if fs::symlink_metadata(dir.join(".git")).is_ok() {
            return None;
        }
    }
    None
}

/// Whether `dir` holds what git checks for a repository's directory (`is_git_directory`).
pub(crate) fn laid_out_as_git_dir(dir: &Path) -> bool {
    dir.join("objects").is_dir() && dir.join("refs").is_dir() && names_a_head(&dir.join("HEAD"))
}

/// Whether the file `head` names a ref or a commit, as a git directory's `HEAD` does.
pub(crate) fn names_a_head(head: &Path) -> bool {
    // Followed when a symlink, as git does; never waited on when a FIFO.
    let Ok(head) = crate::odb::read_regular(head, true) else {
        return false;
    };
    let head = String::from_utf8_lossy(&head);
    let head = head.trim_end();
    let hex =
        |text: &str| matches!(text.len(), 40 | 64) && text.bytes().all(|b| b.is_ascii_hexdigit());
    head.starts_with("ref: refs/") || hex(head)
}

/// The worktrees whose stores lie in the data directory for this database, as each store recorded its
/// worktree (`rewind/worktree`), when its store is the one found (another database's stores, or one
/// whose record does not lead back to it, are left alone) and it can still be opened as that worktree: it
/// exists, resolves to itself (not a symlink now) and is not refused. An entry that cannot be read is
/// skipped: the listing only adds stores to a gc.
pub fn stored_worktrees(config: &GitStoreConfig) -> GitResult<Vec<PathBuf>> {
    let mut worktrees: Vec<PathBuf> = this_database_s_stores(config)?
        .into_iter()
        .map(|(_, worktree)| worktree)
        .filter(|worktree| canonical_worktree(config, worktree).is_ok_and(|c| c == *worktree))
        .collect();
    worktrees.sort();
    Ok(worktrees)
}

/// The stores in the data directory that are this database's, each with the worktree it recorded
/// (`rewind/worktree`) when that path leads back to it (another database's stores, one whose record does
/// not, and one being removed are left out); an entry that cannot be read is left out too.
fn this_database_s_stores(config: &GitStoreConfig) -> GitResult<Vec<(PathBuf, PathBuf)>> {
    let root = config.data_dir.join("snapshot");
    let entries = match fs::read_dir(&root) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(GitError::io(&root, e)),
    };
    Ok(entries
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter_map(|dir| {
            let recorded = fs::read(dir.join("rewind").join("worktree")).ok()?;
            let worktree = PathBuf::from(
                <std::ffi::OsString as std::os::unix::ffi::OsStringExt>::from_vec(recorded),
            );
            (location(config, &worktree) == dir).then_some((dir, worktree))
        })
        .collect())
}

/// The prefix of a store being removed (`remove_gone_stores`): renamed out of its place first, so no
/// process opens it half removed; one a crash left is removed by the next call.
const REMOVING_PREFIX: &str = ".removing-";

/// Removes the stores of this database whose worktree no longer exists (its path is not found), that no
/// one `named` (the worktrees the database's sessions, captures and intents name) and that returned no id
/// within `grace`: nothing can refer to their objects any more, and a store cannot be opened without its
/// worktree, so `gc` never reached them. Each is locked, checked again, renamed away and then deleted.
/// Returns each removed store's worktree with what was freed, or why it could not be removed (it stays
/// for the next gc).
pub fn remove_gone_stores(
    config: &GitStoreConfig,
    named: &BTreeSet<PathBuf>,
    grace: Duration,
) -> GitResult<Vec<(PathBuf, GitResult<GcReport>)>> {
    // What a removal a crash interrupted left.
    for leftover in fs::read_dir(config.data_dir.join("snapshot"))
        .into_iter()
        .flatten()
        .flatten()
    {
        if leftover
            .file_name()
            .to_str()
            .is_some_and(|name| name.starts_with(REMOVING_PREFIX))
        {
            let _ = fs::remove_dir_all(leftover.path());
        }
    }
    let since = now_ms().saturating_sub(crate::gc::millis(grace));
    let mut removed = Vec::new();
    for (dir, worktree) in this_database_s_stores(config)? {
        if named.contains(&worktree) {
            continue;
        }
        match remove_if_gone(&dir, &worktree, since, config.lock_wait) {
            Ok(Some(report)) => removed.push((worktree, Ok(report))),
            Ok(None) => {}
            Err(error) => removed.push((worktree, Err(error))),
        }
    }
    removed.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(removed)
}

/// Whether `worktree` is gone: its path is not found (a directory that cannot be looked at is not gone).
fn worktree_gone(worktree: &Path) -> bool {
    matches!(fs::symlink_metadata(worktree), Err(e) if e.kind() == std::io::ErrorKind::NotFound)
}

/// Removes the store `dir` of `worktree` when the worktree is gone and the store returned no id since
/// `since_ms`, checked under the store's lock; what it freed.
fn remove_if_gone(
    dir: &Path,
    worktree: &Path,
    since_ms: u64,
    wait: Duration,
) -> GitResult<Option<GcReport>> {
    if !worktree_gone(worktree) {
        return Ok(None);
    }
    let lock = lock_file(dir, wait)?;
    if !locks_the_store(&lock, dir) || !worktree_gone(worktree) {
        return Ok(None);
    }
    let store = Store::locked(dir.to_path_buf(), (worktree.to_path_buf(), None), lock);
    // Ids it returned since then, or a log cut beyond then (which may have held some): kept.
    let returned = store.read_returned()?;
    if !returned.since(since_ms).is_empty() || returned.cut > since_ms {
        return Ok(None);
    }
    let report = GcReport {
        objects_removed: count_objects(&dir.join("objects")),
        bytes_freed: disk_usage(dir),
        objects_kept: 0,
    };
    let Some(name) = dir.file_name().and_then(|n| n.to_str()) else {
        return Ok(None);
    };
    let away = dir.with_file_name(format!("{REMOVING_PREFIX}{name}"));
    fs::rename(dir, &away).map_err(|e| GitError::io(dir, e))?;
    drop(store);
    fs::remove_dir_all(&away).map_err(|e| GitError::io(&away, e))?;
    Ok(Some(report))
}

/// The objects under `objects`: loose ones, and those each pack's index counts.
fn count_objects(objects: &Path) -> u64 {
    let mut count = 0;
    for entry in fs::read_dir(objects).into_iter().flatten().flatten() {
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if name.len() == 2 && name.bytes().all(|b| b.is_ascii_hexdigit()) {
            count += fs::read_dir(entry.path())
                .into_iter()
                .flatten()
                .flatten()
                .filter(|e| !e.file_name().to_string_lossy().starts_with("tmp_"))
                .count() as u64;
        }
    }
    for entry in fs::read_dir(objects.join("pack"))
        .into_iter()
        .flatten()
        .flatten()
    {
        if entry.path().extension().is_some_and(|e| e == "idx") {
            // A version 2 index: 8 bytes of header, then 256 fan-out counts; the last is the total.
            let mut total = [0u8; 4];
            let read = File::open(entry.path()).and_then(|file| {
                std::os::unix::fs::FileExt::read_exact_at(&file, &mut total, 1028)
            });
            let total = if read.is_ok() {
                u32::from_be_bytes(total)
            } else {
                0
            };
            count += u64::from(total);
        }
    }
    count
}

/// The bytes a file takes on disk (its allocated blocks, as `du` counts them; not its length: a small
/// loose object takes a whole block). What `rewind status` shows of a store and gc says it frees.
pub fn allocated(meta: &fs::Metadata) -> u64 {
    use std::os::unix::fs::MetadataExt as _;
    meta.blocks().saturating_mul(512)
}

/// The bytes the files and directories under `dir` take on disk (`allocated`; CLI review: `status` said
/// 16 KiB of a store `du` put at 280 KiB): a store's size as `rewind status` shows it, and what gc frees
/// when it removes a whole store; 0 when it does not exist.
pub fn disk_usage(dir: &Path) -> u64 {
    let mut total = 0;
    let mut pending = vec![dir.to_path_buf()];
    while let Some(next) = pending.pop() {
        for entry in fs::read_dir(&next).into_iter().flatten().flatten() {
            let Ok(kind) = entry.file_type() else {
                continue;
            };
            if kind.is_dir() {
                pending.push(entry.path());
            }
            if kind.is_dir() || kind.is_file() {
                total += entry.metadata().map_or(0, |m| allocated(&m));
            }
        }
    }
    total
}

/// Where the store of `canonical` lives for this database.
pub fn location(config: &GitStoreConfig, canonical: &Path) -> PathBuf {
    location_for(config, &config.database_identity, canonical)
}

/// Where the store of `canonical` is found now: its place for this database, or, until a command that
/// writes has moved it there (`adopt_former_store`), its place under a former identity of the database;
/// its place for this database when it is in neither. For what only reads (`Store::open_to_read` on a
/// read-only mount, `rewind status`), which moves nothing (review: an upgraded data directory's snapshots
/// were not found there).
pub fn found_location(config: &GitStoreConfig, canonical: &Path) -> PathBuf {
    let dir = location(config, canonical);
    if dir.join("HEAD").is_file() {
        return dir;
    }
    config
        .former_identities
        .iter()
        .map(|identity| location_for(config, identity, canonical))
        .find(|former| former.join("HEAD").is_file())
        .unwrap_or(dir)
}

/// Where the store of `canonical` lives for a database of identity `identity`.
fn location_for(config: &GitStoreConfig, identity: &str, canonical: &Path) -> PathBuf {
    use sha1::Digest;
    let mut hasher = sha1::Sha1::new();
    hasher.update(identity.as_bytes());
    hasher.update(b"\0");
    hasher.update(canonical.as_os_str().as_encoded_bytes());
    config
        .data_dir
        .join("snapshot")
        .join(gix::ObjectId::Sha1(hasher.finalize().into()).to_string())
}

/// Moves the store of `canonical` kept under a former identity of this database
/// (`GitStoreConfig::former_identities`) to `dir`, its place now, when none is there yet: under the
/// former store's lock, renamed whole, so its snapshots stay this database's. One that cannot be moved
/// stays where it is (a new store is made; nothing is lost).
fn adopt_former_store(config: &GitStoreConfig, canonical: &Path, dir: &Path) {
    let former = found_location(config, canonical);
    if former == dir {
        return;
    }
    if let Ok(lock) = lock_file(&former, config.lock_wait)
        && locks_the_store(&lock, &former)
        && !dir.exists()
    {
        let _ = fs::rename(&former, dir);
    }
}

impl Store {
    /// Opens (creating on first use) and locks the store of `worktree`, and removes the temporary files a
    /// crashed operation left. `worktree` is the canonical path sessions record: one that resolves to
    /// another directory now (it, or a directory above it, was replaced by a symlink) is refused, so no
    /// operation reads or writes where the symlink leads with the snapshots of the recorded worktree.
    pub fn open(config: &GitStoreConfig, worktree: &Path) -> GitResult<Store> {
        if !worktree.is_absolute() {
            return Err(GitError::Refused(format!(
                "worktree {} is a relative path: the snapshot store is opened on the absolute, canonical path \
                 of the worktree",
                worktree.display()
            )));
        }
        // Its own refusals first (the filesystem root, the home and the data directory, by what the path
        // leads to), then why the path is not the canonical one.
        let canonical = canonical_worktree(config, worktree)?;
        if canonical != worktree {
            let why = if worktree
                .components()
                .any(|part| part == Component::ParentDir)
            {
                "it names `..`: the snapshot store is opened on the canonical path of the worktree"
            } else {
                "it, or a directory above it, is a symlink; rewind works on the real directory's path, and \
                 does not follow a worktree replaced by a symlink"
            };
            return Err(GitError::Refused(format!(
                "worktree {} resolves to {}: {why}",
                worktree.display(),
                canonical.display()
            )));
        }
        let dir = location(config, &canonical);
        let mut tries = 0;
        let lock = loop {
            tries += 1;
            if !dir.join("HEAD").is_file() {
                adopt_former_store(config, &canonical, &dir);
            }
            if !dir.join("HEAD").is_file() {
                create_bare(&dir, &canonical)?;
            }
            // An advisory lock: the OS releases it when its process dies, so a dead holder never blocks.
            // A gc that held it may have removed the store meanwhile (its worktree was gone then): the
            // lock is then on a file of the removed store (or the store's directory was gone when the
            // lock file was opened), and the store is made again.
            match lock_file(&dir, config.lock_wait) {
                Ok(lock) if locks_the_store(&lock, &dir) => break lock,
                Ok(_) if tries < 8 => {}
                Err(GitError::Io { source, .. })
                    if source.kind() == std::io::ErrorKind::NotFound && tries < 8 => {}
                Ok(_) => {
                    return Err(GitError::Busy(format!(
                        "the snapshot store {} kept being removed while it was opened; try again",
                        dir.display()
                    )));
                }
                Err(error) => return Err(error),
            }
        };
        let root = open_root(&canonical)?;
        let store = Store::locked(dir, (canonical, Some(root)), lock);
        store.clean_journal()?;
        Ok(store)
    }

    /// Another handle on the worktree's root directory the store opened (`Store::root`'s field).
    pub fn root(&self) -> GitResult<crate::beneath::Root> {
        match &self.root {
            Some(root) => root
                .try_clone()
                .map_err(|e| GitError::io(&self.worktree, e)),
            None => Err(GitError::Refused(format!(
                "the worktree {} of this store is gone",
                self.worktree.display()
            ))),
        }
    }

    /// `open`, for an operation that only reads objects (the diff of two snapshots): a store whose lock
    /// file cannot be opened because the data directory cannot be written (a read-only mount, another
    /// user's data directory) is read without its lock, and nothing in it is cleaned or written. No
    /// operation can change the store through this mount meanwhile; a gc through another mount could
    /// remove an object mid-read, which fails the read as missing, never more.
    pub fn open_to_read(config: &GitStoreConfig, worktree: &Path) -> GitResult<Store> {
        let opened = Store::open(config, worktree);
        let unwritable = matches!(
            &opened,
            Err(GitError::Io { source, .. } | GitError::StoreWrite { source, .. }) if matches!(
                source.kind(),
                std::io::ErrorKind::ReadOnlyFilesystem | std::io::ErrorKind::PermissionDenied
            )
        );
        if !unwritable {
            return opened;
        }
        let canonical = canonical_worktree(config, worktree)?;
        let dir = found_location(config, &canonical);
        if canonical != worktree || !dir.join("HEAD").is_file() {
            return opened;
        }
        let root = open_root(&canonical)?;
        Ok(Store {
            odb: Odb::new(dir.join("objects")),
            dir,
            worktree: canonical,
            root: Some(root),
            _lock: None,
        })
    }

    /// The store at `dir` of `worktree` (with its root's handle), whose lock `lock` this process holds.
    fn locked(
        dir: PathBuf,
        (worktree, root): (PathBuf, Option<crate::beneath::Root>),
        lock: File,
    ) -> Store {
        Store {
            odb: Odb::new(dir.join("objects")),
            dir,
            worktree,
            root,
            _lock: Some(lock),
        }
    }

    fn rewind_path(&self, name: &str) -> PathBuf {
        self.dir.join("rewind").join(name)
    }

    /// The stat cache's file.
    pub fn stat_cache_path(&self) -> PathBuf {
        self.rewind_path("stat-cache")
    }

    /// The record of a snapshot (empty when none was written).
    pub fn record(&self, id: &ObjectId) -> SnapshotRecord {
        self.known_record(id).unwrap_or_default()
    }

    /// The record of a snapshot, or `None` when it has none or it cannot be read or parsed. Every id a
    /// track returned has one (written before the id is returned), so `None` for such an id is a damaged
    /// store: what the snapshot left untracked is not known.
    pub fn known_record(&self, id: &ObjectId) -> Option<SnapshotRecord> {
        fs::read(self.rewind_path("records").join(id.to_string()))
            .ok()
            .and_then(|data| serde_json::from_slice(&data).ok())
    }

    /// Merges what a track saw into the record of `id` (skipped paths, rule sets, nested repositories and
    /// hidden `.gitignore` files and empty directories are unions).
    pub fn add_record(
        &self,
        id: &ObjectId,
        prefix: &str,
        outside: &[OutsideRule],
        (skipped, empty_dirs, modes): (
            &BTreeSet<String>,
            &BTreeSet<String>,
            &BTreeMap<String, u32>,
        ),
        unheld: &UnheldRules,
    ) -> GitResult<()> {
        let mut record = self.record(id);
        let before = record.clone();
        let known = before != SnapshotRecord::default();
        if known && (record.prefix != prefix || record.outside != outside) {
            let latest = (
                std::mem::take(&mut record.prefix),
                std::mem::take(&mut record.outside),
            );
            record
                .earlier
                .retain(|(p, o)| !(p == prefix && o == outside));
            if !record.earlier.contains(&latest) {
                record.earlier.push(latest);
            }
        }
        record.prefix = prefix.to_owned();
        record.outside = outside.to_vec();
        record.skipped.extend(skipped.iter().cloned());
        // One id stands for every disk state with the same files, any of which a revert may go back to: a
        // file's bits are the narrowest any track of the id saw (a file one track saw with git's modes
        // or wider is not in its map).
        for (path, bits) in modes {
            *record.modes.entry(path.clone()).or_insert(*bits) &= *bits;
        }
        match &mut record.empty_dirs {
            Some(seen) => seen.extend(empty_dirs.iter().cloned()),
            None => record.empty_dirs = Some(empty_dirs.clone()),
        }
        if !known {
            record.nested_all = true;
            record.hidden_rules_all = true;
        }
        if !record.nested.contains(&unheld.nested) {
            record.nested.push(unheld.nested.clone());
        }
        if !record.hidden_rules.contains(&unheld.hidden) {
            record.hidden_rules.push(unheld.hidden.clone());
        }
        if record == before || (record == SnapshotRecord::default()) {
            return Ok(());
        }
        let dir = self.rewind_path("records");
        fs::create_dir_all(&dir).map_err(|e| GitError::io(&dir, e))?;
        let data = serde_json::to_vec(&record).map_err(|e| GitError::Other(e.to_string()))?;
        write_atomically(&dir.join(id.to_string()), &data)
    }

    /// Deletes the record of a collected snapshot.
    pub fn remove_record(&self, id: &ObjectId) {
        let _ = fs::remove_file(self.rewind_path("records").join(id.to_string()));
    }

    /// The ids that have a record.
    pub fn recorded_ids(&self) -> Vec<ObjectId> {
        let Ok(entries) = fs::read_dir(self.rewind_path("records")) else {
            return Vec::new();
        };
        entries
            .filter_map(|e| e.ok())
            .filter_map(|e| ObjectId::from_hex(e.file_name().as_encoded_bytes()).ok())
            .collect()
    }

    /// Logs an id that `track` or `revert` returned, with the time, so gc keeps it through its grace period.
    pub fn log_returned(&self, id: &ObjectId) -> GitResult<()> {
        let path = self.rewind_path("returned");
        let mut file = File::options()
            .create(true)
            .append(true)
            .open(&path)
            .map_err(|e| GitError::io(&path, e))?;
        // One write: with O_APPEND a line is never split by another writer, nor left half by a kill
        // that then runs into the next process's line.
        let line = format!("{} {id}\n", now_ms());
        file.write_all(line.as_bytes())
            .map_err(|e| GitError::io(&path, e))
    }

    /// The id returned last (the log's last line), read from the log's end; none when there is no log or
    /// its end cannot be read. gc keeps that line, however old (`returned_for_gc`).
    pub fn newest_returned(&self) -> Option<ObjectId> {
        use std::io::{Read, Seek, SeekFrom};
        const TAIL: u64 = 4096;
        let mut file = File::open(self.rewind_path("returned")).ok()?;
        let len = file.metadata().ok()?.len();
        file.seek(SeekFrom::Start(len.saturating_sub(TAIL))).ok()?;
        let mut tail = Vec::new();
        file.take(TAIL).read_to_end(&mut tail).ok()?;
        String::from_utf8_lossy(&tail)
            .lines()
            .rev()
            .filter(|line| !line.starts_with(RETURNED_CUT))
            .find_map(|line| {
                let (_, id) = line.split_once(' ')?;
                ObjectId::from_hex(id.trim().as_bytes()).ok()
            })
    }

    /// For gc, which holds the lock: the ids returned at or after `since_ms`, and the log rewritten without
    /// the lines older than both `since_ms` and `RETURNED_KEPT_MS` but the last (`newest_returned`; it notes,
    /// as `cut`, the time just after the newest line it dropped). Another gc may have read the database's
    /// references before this one cut the log, and wait for the lock meanwhile: it needs the lines from the
    /// moment it read them on (`read_ms`). One whose `read_ms` lies before a cut is refused (`Busy`), since
    /// what was cut could be a snapshot stored after its read; lines older than its read, within its grace
    /// period only, were the cutting gc's to collect (black-box: a gc with the default grace, run beside a
    /// `gc --grace-seconds 0`, collected the trees of turns stored while it waited).
    pub fn returned_for_gc(&self, since_ms: u64, read_ms: u64) -> GitResult<Vec<ObjectId>> {
        let log = self.read_returned()?;
        if log.cut > read_ms {
            return Err(GitError::Busy(format!(
                "another gc collected the snapshot store {} while this one waited for it, after this one had \
                 read what the database refers to; run gc again",
                self.dir.display()
            )));
        }
        let ids = log.since(since_ms);
        let keep_from = since_ms.min(now_ms().saturating_sub(RETURNED_KEPT_MS));
        let last = log.lines.len().saturating_sub(1);
        let Some(newest_cut) = log.lines[..last]
            .iter()
            .map(|(time, _)| *time)
            .filter(|time| *time < keep_from)
            .max()
        else {
            // Nothing to cut: the log stays as it is.
            return Ok(ids);
        };
        let mut text = format!("{RETURNED_CUT}{}\n", log.cut.max(newest_cut + 1));
        for (at, (time, id)) in log.lines.iter().enumerate() {
            if *time >= keep_from || at == last {
                text.push_str(&format!("{time} {id}\n"));
            }
        }
        write_atomically(&self.rewind_path("returned"), text.as_bytes())?;
        Ok(ids)
    }

    /// Whether the log of returned ids holds `id` (a read: nothing is cut).
    pub fn was_returned(&self, id: &ObjectId) -> GitResult<bool> {
        Ok(self
            .read_returned()?
            .lines
            .iter()
            .any(|(_, returned)| returned == id))
    }

    /// The log of returned ids. Absent is empty; a log that cannot be read is an error, never empty (gc
    /// would collect what the ids returned within the grace period need).
    fn read_returned(&self) -> GitResult<ReturnedLog> {
        let path = self.rewind_path("returned");
        let text = match fs::read(&path) {
            Ok(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
            Err(e) => return Err(GitError::io(&path, e)),
        };
        let mut log = ReturnedLog::default();
        for line in text.lines() {
            if let Some(cut) = line.strip_prefix(RETURNED_CUT) {
                log.cut = log.cut.max(cut.trim().parse().unwrap_or(0));
                continue;
            }
            let Some((time, id)) = line.split_once(' ') else {
                continue;
            };
            if let (Ok(time), Ok(id)) = (time.parse::<u64>(), ObjectId::from_hex(id.as_bytes())) {
                log.lines.push((time, id));
            }
        }
        Ok(log)
    }

    /// Records the directories an operation will create temporary files in, the batch they are named
    /// after, and when (`JOURNAL_STARTED`), before it creates any.
    pub fn journal_temp_dirs(&self, batch: &str, dirs: &BTreeSet<PathBuf>) -> GitResult<()> {
        let now_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis());
        let mut text = format!("{JOURNAL_BATCH}{batch}\n{JOURNAL_STARTED}{now_ms}\n");
        for dir in dirs {
            text.push_str(&journal_path(dir));
            text.push('\n');
        }
        write_atomically(&self.rewind_path("journal"), text.as_bytes())
    }

    /// Notes in the journal a directory the operation is about to make (`made`), or, with `made` false, that
    /// it did not make it after all (appended, not synced: lost, the directory only stays, empty, as
    /// before): a crash before its file was renamed in would otherwise leave it, empty, after the
    /// rollback, which has no file there to delete (black-box).
    pub fn journal_made_dir(&self, dir: &Path, made: bool) -> GitResult<()> {
        let mark = if made { JOURNAL_MADE } else { JOURNAL_NOT_MADE };
        self.append_to_journal(&format!("{mark}{}\n", journal_path(dir)))
    }

    /// Notes in the journal the temporary file `tmp` that holds a user's file the operation could not move
    /// aside (`apply::keep_aside`'s `Stranded`): the next opening keeps it as `rewind-kept-…` whatever its
    /// birth time (one born during the operation, a save that landed mid-swap, would otherwise be taken
    /// for the operation's own and removed; review). Appended, as `journal_made_dir` appends.
    pub fn journal_stranded(&self, tmp: &Path) -> GitResult<()> {
        self.append_to_journal(&format!("{JOURNAL_STRANDED}{}\n", journal_path(tmp)))
    }

    /// Adds directory `dir` to those the journal announces temporary files in, during the operation (a file
    /// moved aside to make room for a directory, in a directory the start did not name). Appended, never
    /// rewritten: the journal's other lines stay (review: a rewrite dropped the directories named at the
    /// start while their temporary files waited), and synced, as the start's are, before the file is moved.
    pub fn journal_temp_dir(&self, dir: &Path) -> GitResult<()> {
        let path = self.rewind_path("journal");
        self.append_to_journal(&format!("{}\n", journal_path(dir)))?;
        File::open(&path)
            .and_then(|file| file.sync_data())
            .map_err(|e| GitError::io(&path, e))
    }

    /// Appends `line` to the journal (not synced: see `journal_made_dir`).
    fn append_to_journal(&self, line: &str) -> GitResult<()> {
        let path = self.rewind_path("journal");
        let mut file = File::options()
            .create(true)
            .append(true)
            .open(&path)
            .map_err(|e| GitError::io(&path, e))?;
        file.write_all(line.as_bytes())
            .map_err(|e| GitError::io(&path, e))
    }

    /// Removes the journal once every temporary file it announced has been renamed or removed.
    pub fn clear_journal(&self) -> GitResult<()> {
        let path = self.rewind_path("journal");
        match fs::remove_file(&path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(GitError::io(&path, e)),
            _ => Ok(()),
        }
    }

    /// Removes the temporary files an unfinished operation's journal announced (those of its batch, in the
    /// directories it lists), then the journal. A journal written before batches were recorded names none:
    /// then every temporary file's name of any batch is removed from those directories.
    ///
    /// A journal some of whose files could not be removed (an append-only directory, a disk error) is
    /// kept beside, as `journal-left-<n>`, where the next operation's journal does not replace it, and
    /// tried again at every opening until they are gone (black-box: once the directory's flag was cleared,
    /// the files stayed in the worktree for good, their journal dropped).
    pub fn clean_journal(&self) -> GitResult<()> {
        let path = self.rewind_path("journal");
        if let Ok(text) = fs::read_to_string(&path)
            && !self.clean_journalled(&text, true)
        {
            let kept = self.rewind_path(&format!("{JOURNAL_LEFT}{}", crate::odb::rand_suffix()));
            fs::rename(&path, &kept).map_err(|e| GitError::io(&path, e))?;
        }
        self.clear_journal()?;
        for left in left_journals(&self.dir.join("rewind")) {
            if let Ok(text) = fs::read_to_string(&left)
                // Its made directories were seen to at its first cleaning: one the user makes at such a name
                // later is the user's (review).
                && self.clean_journalled(&text, false)
            {
                let _ = fs::remove_file(&left);
            }
        }
        Ok(())
    }

    /// Whether the file at `tmp` (a temporary name of an unfinished operation that began writing at
    /// `since_ms`, epoch ms) holds content a user may have no other copy of: a regular file born before the
    /// operation began is no file it wrote but one it moved out of a name (a file a write swapped out, or
    /// one a deletion moved aside), left there by a crash before it was looked at again; its content was
    /// tracked before the operation, so it is in the store, unless a program wrote to it since, through a
    /// handle opened before the move. Such a file, and one that cannot be read to tell, is kept; anything
    /// the operation made (born since), or whose birth the filesystem does not record, is not.
    fn in_no_snapshot(&self, tmp: &Path, since_ms: u64) -> bool {
        use rustix::fs::{AtFlags, FileType, StatxFlags};
        let Ok(stx) = rustix::fs::statx(
            rustix::fs::CWD,
            tmp,
            AtFlags::SYMLINK_NOFOLLOW,
            StatxFlags::BTIME | StatxFlags::TYPE | StatxFlags::SIZE,
        ) else {
            return false;
        };
        let regular = FileType::from_raw_mode(u32::from(stx.stx_mode)) == FileType::RegularFile;
        let born_before = born_ms(&stx)
            .is_some_and(|born| born < i128::from(since_ms.saturating_sub(BIRTH_SLACK_MS)));
        if !regular || !born_before {
            return false;
        }
        match crate::odb::Odb::hash_file_blob(tmp, stx.stx_size) {
            Ok(Some(id)) => !self.odb.contains(&id),
            _ => true,
        }
    }

    /// Removes the temporary files journal `text` announces, and, with `made_too`, the directories it made
    /// that are empty; whether no temporary file is left. One that holds a user's content no snapshot
    /// has (`in_no_snapshot`) is not removed but renamed to `rewind-kept-<batch>-<n>` beside.
    fn clean_journalled(&self, text: &str, made_too: bool) -> bool {
        let mut all = true;
        let mut lines = text.lines().peekable();
        let batch = lines
            .next_if(|line| line.starts_with(JOURNAL_BATCH))
            .map(|line| &line[JOURNAL_BATCH.len()..]);
        let mut made = Vec::new();
        let mut started = None;
        let stranded: HashSet<PathBuf> = text
            .lines()
            .filter_map(|line| line.strip_prefix(JOURNAL_STRANDED))
            .map(journalled_path)
            .collect();
        for line in lines {
            if let Some(ms) = line.strip_prefix(JOURNAL_STARTED) {
                started = ms.parse::<u64>().ok();
                continue;
            }
            if line.starts_with(JOURNAL_STRANDED) {
                continue;
            }
            if let Some(dir) = line.strip_prefix(JOURNAL_MADE) {
                made.push(journalled_path(dir));
                continue;
            }
            if let Some(dir) = line.strip_prefix(JOURNAL_NOT_MADE) {
                let dir = journalled_path(dir);
                made.retain(|was| *was != dir);
                continue;
            }
            let dir = journalled_path(line);
            // Only directories inside this store's worktree are ever journalled.
            if !dir.starts_with(&self.worktree) {
                continue;
            }
            let entries = match fs::read_dir(&dir) {
                Ok(entries) => entries,
                // Gone, or no longer a directory (a later turn made a file of it): it holds nothing
                // (black-box: such journals were kept for good, one per interrupted operation).
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory
                    ) =>
                {
                    continue;
                }
                Err(_) => {
                    all = false;
                    continue;
                }
            };
            for entry in entries.flatten() {
                let name = entry.file_name();
                let ours = name
                    .to_str()
                    .and_then(temp_batch)
                    .is_some_and(|of| batch.is_none_or(|batch| batch == of));
                if !ours {
                    continue;
                }
                let path = entry.path();
                let keep = stranded.contains(&path)
                    || started.is_some_and(|since| self.in_no_snapshot(&path, since));
                let gone = if keep {
                    keep_left_file(&path)
                } else {
                    fs::remove_file(&path)
                };
                if gone.is_err_and(|e| e.kind() != std::io::ErrorKind::NotFound) {
                    all = false;
                }
            }
        }
        // The directories the operation made, deepest (last made) first, once empty: a completed
        // operation's hold its files (and its journal is gone by then).
        // Each through its parent's handle beneath the worktree: a directory on the way turned into a
        // symlink since is not followed (review).
        if made_too && let Ok(root) = self.root() {
            for dir in made.iter().rev() {
                if let Some(rel) = dir.strip_prefix(&self.worktree).ok().and_then(Path::to_str) {
                    root.remove_empty_dir(rel);
                }
            }
        }
        all
    }
}

/// The start of a journal line's path written escaped: one holding a newline (which a line cannot hold,
/// and whose parts could name other directories), a carriage return (which reading lines drops before a
/// newline) or a backslash. A path is absolute, so a line that
/// starts so is never one written plain (by this version or an earlier one).
const JOURNAL_ESCAPED: &str = "escaped ";

/// `dir` as a journal line holds it: plain, or escaped (`\\` and `\n`) after `JOURNAL_ESCAPED`.
fn journal_path(dir: &Path) -> String {
    let dir = dir.to_string_lossy();
    if !dir.contains(['\n', '\r', '\\']) {
        return dir.into_owned();
    }
    format!(
        "{JOURNAL_ESCAPED}{}",
        dir.replace('\\', "\\\\")
            .replace('\n', "\\n")
            .replace('\r', "\\r")
    )
}

/// The path a journal line's `text` holds (`journal_path`).
fn journalled_path(text: &str) -> PathBuf {
    let Some(escaped) = text.strip_prefix(JOURNAL_ESCAPED) else {
        return PathBuf::from(text);
    };
    let mut out = String::with_capacity(escaped.len());
    let mut chars = escaped.chars();
    while let Some(c) = chars.next() {
        match (c, c == '\\') {
            (_, true) => match chars.next() {
                Some('n') => out.push('\n'),
                Some('r') => out.push('\r'),
                Some(other) => out.push(other),
                None => out.push('\\'),
            },
            (c, false) => out.push(c),
        }
    }
    PathBuf::from(out)
}

/// The start of the journal line that says when the operation began writing (epoch ms).
const JOURNAL_STARTED: &str = "started ";

/// How much earlier than an operation's start (read from the system clock) a file or directory it made may
/// say it was born: the filesystem stamps times from the kernel's coarse clock, a few milliseconds behind.
pub const BIRTH_SLACK_MS: u64 = 50;

/// When the file of `stx` was born (epoch ms), when the filesystem records it (`statx` asked for
/// `BTIME`).
pub fn born_ms(stx: &rustix::fs::Statx) -> Option<i128> {
    if stx.stx_mask & rustix::fs::StatxFlags::BTIME.bits() == 0 {
        return None;
    }
    let born = &stx.stx_btime;
    Some(i128::from(born.tv_sec) * 1000 + i128::from(born.tv_nsec / 1_000_000))
}

/// The name `rewind-kept-<batch>-<n>` beside `.rewind-tmp-<batch>-<n>`, for a user's file a crash left
/// at a temporary name (`Store::in_no_snapshot`); visible, and no temporary file's name (never removed).
fn kept_name(tmp: &Path) -> Option<PathBuf> {
    let name = tmp.file_name()?.to_str()?.strip_prefix(TEMP_PREFIX)?;
    Some(tmp.with_file_name(format!("rewind-kept-{name}")))
}

/// Renames the file at `tmp` to its kept name (`kept_name`), never over another file: a name of its own
/// (a random suffix) when that is taken; by a hard link and an unlink on a filesystem without
/// `RENAME_NOREPLACE`.
fn keep_left_file(tmp: &Path) -> std::io::Result<()> {
    use rustix::fs::{CWD, RenameFlags};
    use rustix::io::Errno;
    let kept = kept_name(tmp).ok_or_else(|| std::io::Error::other("not a temporary name"))?;
    let mut name = kept.clone();
    for _ in 0..4 {
        match rustix::fs::renameat_with(CWD, tmp, CWD, &name, RenameFlags::NOREPLACE) {
            Ok(()) => return Ok(()),
            Err(Errno::EXIST) => {}
            Err(Errno::INVAL | Errno::NOSYS) => match fs::hard_link(tmp, &name) {
                Ok(()) => return fs::remove_file(tmp),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(e),
            },
            Err(e) => return Err(e.into()),
        }
        let mut another = kept.clone().into_os_string();
        another.push(format!("-{}", crate::odb::rand_suffix()));
        name = PathBuf::from(another);
    }
    Err(std::io::Error::other("no free name to keep it under"))
}

/// The start of a journal line naming a directory the operation made, or was about to
/// (`Store::journal_made_dir`).
const JOURNAL_MADE: &str = "made ";

/// The start of a journal line withdrawing a `made` line: the directory was not made by the operation.
const JOURNAL_NOT_MADE: &str = "not made ";

/// The start of a journal line naming a temporary file that holds a user's file the operation could not
/// move aside (`Store::journal_stranded`): kept whatever its birth time.
const JOURNAL_STRANDED: &str = "stranded ";

/// The name of a journal kept because some of its files could not be removed, before its suffix.
const JOURNAL_LEFT: &str = "journal-left-";

/// The kept journals in a store's `rewind` directory (see `Store::clean_journal`).
fn left_journals(rewind_dir: &Path) -> Vec<PathBuf> {
    fs::read_dir(rewind_dir)
        .map(|entries| {
            entries
                .flatten()
                .filter(|e| {
                    e.file_name()
                        .to_str()
                        .is_some_and(|n| n.starts_with(JOURNAL_LEFT))
                })
                .map(|e| e.path())
                .collect()
        })
        .unwrap_or_default()
}

/// Removes the temporary files a crashed operation left in `worktree` (those its store's journal names),
/// when its store exists, has a journal, and no process holds it (no wait); whether it looked. Every
/// command calls it, so such files do not stay in the worktree, shown by `git status`, until one that
/// opens the store (`status` and `log` do not).
pub fn clean_if_free(config: &GitStoreConfig, worktree: &Path) -> GitResult<bool> {
    let Ok(canonical) = canonical_worktree(config, worktree) else {
        return Ok(false);
    };
    let dir = location(config, &canonical);
    if canonical != worktree
        || !dir.join("HEAD").is_file()
        || (!dir.join("rewind").join("journal").exists()
            && left_journals(&dir.join("rewind")).is_empty())
    {
        return Ok(false);
    }
    let path = dir.join("rewind").join("lock");
    let file = File::options()
        .read(true)
        .write(true)
        .open(&path)
        .map_err(|e| GitError::io(&path, e))?;
    match file.try_lock() {
        Ok(()) => {}
        Err(fs::TryLockError::WouldBlock) => return Ok(false),
        Err(fs::TryLockError::Error(e)) => return Err(GitError::io(&path, e)),
    }
    if !locks_the_store(&file, &dir) {
        return Ok(false);
    }
    // Named as its holder, so a waiter does not take the last holder's name (stopped, say) for this one.
    write_holder(&file, &path)?;
    let root = open_root(&canonical).ok();
    Store::locked(dir, (canonical, root), file).clean_journal()?;
    Ok(true)
}

/// Whether `lock` (a store's lock file, locked) is the lock file of the store at `dir` now, and that store
/// is whole: not one a gc renamed away and removed while this process waited for its lock.
fn locks_the_store(lock: &File, dir: &Path) -> bool {
    use std::os::unix::fs::MetadataExt as _;
    let (Ok(held), Ok(there)) = (
        lock.metadata(),
        fs::metadata(dir.join("rewind").join("lock")),
    ) else {
        return false;
    };
    held.dev() == there.dev() && held.ino() == there.ino() && dir.join("HEAD").is_file()
}

/// Opens the store's lock file and locks it exclusively, waiting while another process holds it, and
/// writes this process's id and start time into it. The wait is refused when the holder, as the file names
/// it, is stopped (suspended with Ctrl-Z or SIGSTOP): it would hold the store until resumed, and every
/// command would wait without a word. It must be seen stopped twice, a pause apart, with the file unchanged
/// (a new holder writes its name just after it locks). Nor does it wait past `wait`
/// (`GitStoreConfig::lock_wait`): a holder that runs and never lets go (a hung process, or another program
/// locking the file) would otherwise keep every command and request waiting without a word (black-box).
fn lock_file(dir: &Path, wait: Duration) -> GitResult<File> {
    let path = dir.join("rewind").join("lock");
    let file = File::options()
        .create(true)
        .truncate(false)
        .read(true)
        .write(true)
        .open(&path)
        .map_err(|e| crate::error::store_write(dir, &path, e))?;
    let mut pause = Duration::from_millis(2);
    let mut seen_stopped: Option<String> = None;
    let started = std::time::Instant::now();
    loop {
        match file.try_lock() {
            Ok(()) => break,
            Err(fs::TryLockError::WouldBlock) => {}
            Err(fs::TryLockError::Error(e)) => return Err(GitError::io(&path, e)),
        }
        let holder = fs::read_to_string(&path).unwrap_or_default();
        match stopped_holder(&holder) {
            Some(pid) if seen_stopped.as_deref() == Some(holder.as_str()) => {
                return Err(GitError::Busy(format!(
                    "the snapshot store of this directory is held by rewind process {pid}, which is stopped \
                     (suspended with Ctrl-Z or SIGSTOP) and holds it until it goes on: resume it (`fg`, or \
                     `kill -CONT {pid}`) or end it, then try again"
                )));
            }
            Some(_) => seen_stopped = Some(holder.clone()),
            None => seen_stopped = None,
        }
        if started.elapsed() >= wait {
            let named = holder_pid(&holder)
                .map(|pid| format!(" (the last rewind process that took it is {pid})"))
                .unwrap_or_default();
            return Err(GitError::Busy(format!(
                "the snapshot store of this directory, {}, has been locked by another process for {} s{named}; \
                 no operation takes that long: if a rewind process hangs, end it, then try again",
                dir.display(),
                wait.as_secs()
            )));
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(100));
    }
    write_holder(&file, &path)?;
    Ok(file)
}

/// The process id a lock file names (`PID START`).
fn holder_pid(holder: &str) -> Option<u32> {
    holder.split_whitespace().next()?.parse().ok()
}

/// Writes this process's id and start time into the lock file it has just locked: over the last holder's
/// name, then cut to its own length, so the file never reads empty. A waiter reads the first two fields,
/// and names this process even while a longer last name's end is still there; an empty file names no one,
/// and a holder stopped right after emptying it was waited for without a word until the lock wait ran
/// out (black-box: 3 in 40 random stops of an `undo`, its thread in `ftruncate`).
fn write_holder(file: &File, path: &Path) -> GitResult<()> {
    use std::os::unix::fs::FileExt as _;
    let me = std::process::id();
    let start = process_state(me).map_or(0, |(_, start)| start);
    let name = format!("{me} {start}\n");
    file.write_all_at(name.as_bytes(), 0)
        .and_then(|()| file.set_len(name.len() as u64))
        .map_err(|e| GitError::io(path, e))
}

/// The process a lock file names (`PID START`), when it runs still and is stopped.
fn stopped_holder(holder: &str) -> Option<u32> {
    let mut fields = holder.split_whitespace();
    let pid: u32 = fields.next()?.parse().ok()?;
    let start: u64 = fields.next()?.parse().ok()?;
    let (state, started) = process_state(pid)?;
    (started == start && matches!(state, 'T' | 't')).then_some(pid)
}

/// A process's state letter and start time (clock ticks since boot), from `/proc/PID/stat`.
fn process_state(pid: u32) -> Option<(char, u64)> {
    let text = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) is in parentheses and may hold either: the fields after it start
    // after the last `)`, with the state (field 3) first and the start time at field 22.
    let fields: Vec<&str> = text[text.rfind(')')? + 1..].split_whitespace().collect();
    Some((
        fields.first()?.chars().next()?,
        fields.get(22 - 3)?.parse().ok()?,
    ))
}

fn create_bare(dir: &Path, worktree: &Path) -> GitResult<()> {
    for sub in [
        "objects/info",
        "objects/pack",
        "refs/heads",
        "refs/tags",
        "info",
        "rewind",
    ] {
        let path = dir.join(sub);
        fs::create_dir_all(&path).map_err(|e| crate::error::store_write(dir, &path, e))?;
    }
    let config = "[core]\n\trepositoryformatversion = 0\n\tfilemode = true\n\tbare = true\n";
    write_atomically(&dir.join("config"), config.as_bytes())?;
    write_atomically(&dir.join("description"), b"rewind snapshot store\n")?;
    write_atomically(
        &dir.join("rewind").join("worktree"),
        worktree.as_os_str().as_encoded_bytes(),
    )?;
    // HEAD last: its presence marks a complete store.
    write_atomically(&dir.join("HEAD"), b"ref: refs/heads/main\n")
}

/// Writes a file of the store atomically (temporary file and rename).
pub fn write_atomically(path: &Path, data: &[u8]) -> GitResult<()> {
    let dir = path
        .parent()
        .ok_or_else(|| GitError::Other(format!("{} has no parent", path.display())))?;
    fs::create_dir_all(dir).map_err(|e| GitError::io(dir, e))?;
    let tmp = dir.join(format!(
        ".{}.tmp-{}-{}",
        path.file_name()
            .map(|n| n.to_string_lossy())
            .unwrap_or_default(),
        std::process::id(),
        crate::odb::rand_suffix()
    ));
    let written = File::options()
        .write(true)
        .create_new(true)
        .open(&tmp)
        .and_then(|mut file| {
            let ext4 = preallocate(&file, data.len() as u64);
            file.write_all(data).map(|()| ext4)
        });
    let ext4 = match written {
        Ok(ext4) => ext4,
        Err(e) => {
            let _ = fs::remove_file(&tmp);
            return Err(GitError::io(&tmp, e));
        }
    };
    let replaced = Held::on_ext4(path, ext4);
    fs::rename(&tmp, path).map_err(|e| {
        let _ = fs::remove_file(&tmp);
        GitError::io(path, e)
    })?;
    replaced.release();
    Ok(())
}

/// Epoch milliseconds.
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The lock file names its new holder, whatever the last one's name was, and only it.
    #[test]
    fn the_lock_file_names_its_holder_alone() {
        let temp = tempfile::tempdir().expect("a temporary directory");
        let path = temp.path().join("lock");
        let me = std::process::id();
        let expected = format!("{me} {}\n", process_state(me).map_or(0, |(_, start)| start));
        for last in ["", "1 2\n", "4194304 18446744073709551615\n"] {
            fs::write(&path, last).expect("the last holder's name");
            let file = File::options()
                .read(true)
                .write(true)
                .open(&path)
                .expect("open");
            write_holder(&file, &path).expect("write the holder");
            assert_eq!(fs::read_to_string(&path).expect("read"), expected);
        }
    }

    /// gc cuts the log of returned ids to its grace period, but keeps its last line, however old: the
    /// snapshot returned last, which a track asks about files grown past the size cap (`newest_returned`).
    /// A store of a new worktree in a temporary directory (kept while the first value lives), with its
    /// configuration.
    fn new_store() -> (tempfile::TempDir, GitStoreConfig, Store) {
        let temp = tempfile::tempdir().expect("a temporary directory");
        let wt = temp.path().join("wt");
        fs::create_dir_all(&wt).expect("mkdir");
        let mut config = GitStoreConfig::new(temp.path().join("data"), "unit");
        config.excludes_file = crate::config::ExcludesFile::None;
        let store = Store::open(&config, &wt).expect("open the store");
        (temp, config, store)
    }

    #[test]
    fn gc_keeps_the_last_returned_id() {
        let (_temp, _, store) = new_store();
        let ids: Vec<ObjectId> = ["11", "22"]
            .iter()
            .map(|b| ObjectId::from_hex(b.repeat(20).as_bytes()).expect("an id"))
            .collect();
        fs::write(
            store.rewind_path("returned"),
            format!("1000 {}\n2000 {}\n", ids[0], ids[1]),
        )
        .expect("an old log");
        assert_eq!(store.newest_returned(), Some(ids[1]));
        let now = now_ms();
        assert!(store.returned_for_gc(now, now).expect("gc").is_empty());
        let log = fs::read_to_string(store.rewind_path("returned")).expect("read");
        assert!(!log.contains(&ids[0].to_string()), "{log}");
        assert_eq!(store.newest_returned(), Some(ids[1]));
    }

    /// A crash's temporary files are removed from a directory whose name holds a newline, a carriage return
    /// or a backslash,
    /// and a directory it made there is removed, empty (black-box: its journal line was read as two
    /// paths, neither of them the directory, and the file stayed for good).
    #[test]
    fn a_journalled_directory_with_a_newline_in_its_name_is_cleaned() {
        let (_temp, config, store) = new_store();
        let wt = store.worktree.clone();
        let batch = "0123456789abcdef";
        let dirs: Vec<PathBuf> = ["we\nird", "back\\slash\\n", "cr\r"]
            .iter()
            .map(|name| wt.join(name))
            .collect();
        let made = dirs[1].join("made\nhere");
        for dir in dirs.iter().chain([&made]) {
            fs::create_dir_all(dir).expect("mkdir");
        }
        let temps: Vec<PathBuf> = dirs
            .iter()
            .map(|dir| dir.join(temp_name(batch, 1)))
            .collect();
        for tmp in &temps {
            fs::write(tmp, b"half written").expect("a temporary file");
        }
        store
            .journal_temp_dirs(batch, &dirs.iter().cloned().collect())
            .expect("journal");
        store.journal_made_dir(&made, true).expect("journal made");
        drop(store);
        let store = Store::open(&config, &wt).expect("open again");
        store.clean_journal().expect("clean");
        for tmp in &temps {
            assert!(!tmp.exists(), "{} is left", tmp.display());
        }
        assert!(!made.exists(), "the directory it made is left");
        assert!(dirs.iter().all(|dir| dir.is_dir()), "the user's stay");
    }

    /// A temporary file noted as holding a user's file the operation could not move aside is kept by the
    /// next opening, as `rewind-kept-…`, though it was born during the operation (review: taken for the
    /// operation's own by its birth time, it was removed), while the operation's own beside it goes.
    #[test]
    fn a_stranded_temporary_file_is_kept_whatever_its_birth() {
        let (_temp, config, store) = new_store();
        let wt = store.worktree.clone();
        let batch = "fedcba9876543210";
        let (stranded, ours) = (wt.join(temp_name(batch, 1)), wt.join(temp_name(batch, 2)));
        store
            .journal_temp_dirs(batch, &BTreeSet::from([wt.clone()]))
            .expect("journal");
        fs::write(&stranded, b"a save that landed mid-swap").expect("write");
        fs::write(&ours, b"half written").expect("write");
        store.journal_stranded(&stranded).expect("journal stranded");
        drop(store);
        let store = Store::open(&config, &wt).expect("open again");
        store.clean_journal().expect("clean");
        let names: Vec<String> = fs::read_dir(&wt)
            .expect("list")
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names.len(), 1, "{names:?}");
        assert!(names[0].starts_with("rewind-kept-"), "{names:?}");
        assert_eq!(
            fs::read(wt.join(&names[0])).expect("read"),
            b"a save that landed mid-swap"
        );
    }

    /// A store's size is what `du` says it takes (allocated blocks), not the sum of its files' lengths.
    /// GNU `du` (`-B1`), as on the Linux machines CI runs on.
    #[cfg(target_os = "linux")]
    #[test]
    fn disk_usage_counts_what_du_counts() {
        let temp = tempfile::tempdir().expect("a temporary directory");
        let dir = temp.path().join("store");
        fs::create_dir_all(dir.join("objects/ab")).expect("mkdir");
        for i in 0..20 {
            fs::write(dir.join(format!("objects/ab/{i:038}")), [b'x'; 100]).expect("write");
        }
        // Incompressible, so a compressing filesystem does not shrink it below its length.
        let mut state = 0x9e37_79b9_7f4a_7c15_u64;
        let noise: Vec<u8> = (0..100_000)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                state.to_le_bytes()[0]
            })
            .collect();
        fs::write(dir.join("big"), noise).expect("write");
        let output = std::process::Command::new("du")
            .args(["-s", "-B1"])
            .arg(&dir)
            .output()
            .expect("du runs");
        assert!(output.status.success());
        let text = String::from_utf8_lossy(&output.stdout);
        let du: u64 = text
            .split_whitespace()
            .next()
            .and_then(|n| n.parse().ok())
            .expect("a number");
        let own = allocated(&fs::metadata(&dir).expect("stat"));
        assert_eq!(disk_usage(&dir) + own, du, "{text}");
        assert!(disk_usage(&dir) > 20 * 100 + 100_000);
    }
}
