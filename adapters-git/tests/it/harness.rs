//! `GitHarness`: the contract suite's `WorktreeHarness` on a real temporary directory with the
//! `GitSnapshotStore` under test, and the small filesystem helpers the other modules share.
//!
//! Layout of one harness: a temporary base directory holding `wt/` (the worktree, a plain directory unless
//! a test makes it a repository), `data/` (the store's data directory) and whatever siblings a test adds
//! (sentinel directories outside the worktree, an excludes file, a fake home).

use std::collections::{BTreeMap, HashSet};
use std::fs;
use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Mutex, PoisonError};
use std::time::{Duration, SystemTime};

use rewind_core::SnapshotPort;
use rewind_core::model::{SnapshotId, TrackOutcome};
use rewind_core::testkit::contract::snapshot::{Node, WorktreeHarness};
use rewind_git::{ExcludesFile, GitSnapshotStore, GitStoreConfig};
use tempfile::TempDir;

/// The database identity every harness store uses.
pub const DATABASE: &str = "sqlite:///rewind-git-tests.db";

/// The first backdated mtime: a day before the tests started.
static MTIME_BASE: LazyLock<SystemTime> =
    LazyLock::new(|| SystemTime::now() - Duration::from_secs(24 * 3600));
static MTIME_COUNTER: AtomicU64 = AtomicU64::new(1);

/// Sets a regular file's mtime to an instant of its own (unique in this process, 1 ms after the previous
/// one) about a day in the past. A file written just before a track is "racy" and re-hashed by the next
/// track, as in git; the backdated, unique mtime makes every harness write look old and still changed.
pub fn backdate(path: &Path) {
    let k = MTIME_COUNTER.fetch_add(1, Ordering::Relaxed);
    let when = *MTIME_BASE + Duration::from_millis(k);
    let file = fs::File::options()
        .write(true)
        .open(path)
        .unwrap_or_else(|e| panic!("harness: open {} to set its mtime: {e}", path.display()));
    file.set_modified(when)
        .unwrap_or_else(|e| panic!("harness: set mtime of {}: {e}", path.display()));
}

/// Lets every change made so far age past the stat cache's racy margin (1 s before a track's start, on
/// the later of the modification and status change times), so the next track's cache may answer for
/// what is not changed after this: directories (their listings) and files alike. The status change time
/// cannot be set back, so this waits (1.1 s). Every directory under `root` (itself included, `.git` left
/// out) whose mtime lies in the last hour is first given an mtime of its own about a day in the past, as
/// before the wait was needed: two directories never share one.
pub fn age_past_racy(root: &Path) {
    let recent = SystemTime::now() - Duration::from_secs(3600);
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let entries = fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("harness: read_dir {}: {e}", dir.display()));
        for entry in entries {
            let entry =
                entry.unwrap_or_else(|e| panic!("harness: read_dir {}: {e}", dir.display()));
            if entry.file_name() != ".git" && entry.file_type().is_ok_and(|t| t.is_dir()) {
                stack.push(entry.path());
            }
        }
        let meta = fs::symlink_metadata(&dir)
            .unwrap_or_else(|e| panic!("harness: stat {}: {e}", dir.display()));
        if meta.modified().is_ok_and(|m| m > recent) {
            let k = MTIME_COUNTER.fetch_add(1, Ordering::Relaxed);
            let when = *MTIME_BASE + Duration::from_millis(k);
            fs::File::open(&dir)
                .and_then(|handle| handle.set_modified(when))
                .unwrap_or_else(|e| panic!("harness: set mtime of {}: {e}", dir.display()));
        }
    }
    std::thread::sleep(PAST_RACY);
}

/// Whether the filesystem holding `path` records when a file was born (`statx`'s `BTIME`): ext4 with
/// 128-byte inodes, ext3 and NFS do not.
pub fn records_birth(path: &Path) -> bool {
    use rustix::fs::{AtFlags, StatxFlags};
    rustix::fs::statx(
        rustix::fs::CWD,
        path,
        AtFlags::SYMLINK_NOFOLLOW,
        StatxFlags::BTIME,
    )
    .is_ok_and(|stx| stx.stx_mask & StatxFlags::BTIME.bits() != 0)
}

/// Longer than the stat cache's racy margin (1 s).
pub const PAST_RACY: Duration = Duration::from_millis(1100);

/// Writes a file (creating its parents) and backdates it.
/// A file attribute (`chattr +i`, immutable; `+a`, append-only) set on `path` until this is dropped, however
/// the test ends, so its directory can be removed. CI runs as root on ext4, where both hold even for root.
pub struct Flagged {
    path: PathBuf,
    flag: char,
}

impl Flagged {
    /// Sets `flag` on `path`; panics, naming what the test needs, when the filesystem has no such flag.
    pub fn set(path: &Path, flag: char) -> Flagged {
        let flagged = Flagged {
            path: path.to_owned(),
            flag,
        };
        assert!(
            flagged.chattr('+'),
            "chattr +{flag} failed: this test needs a filesystem with that flag (ext4, as root)"
        );
        flagged
    }

    fn chattr(&self, sign: char) -> bool {
        std::process::Command::new("chattr")
            .arg(format!("{sign}{}", self.flag))
            .arg(&self.path)
            .status()
            .is_ok_and(|s| s.success())
    }
}

impl Drop for Flagged {
    fn drop(&mut self) {
        self.chattr('-');
    }
}

pub fn write_file(path: &Path, bytes: &[u8]) {
    if let Some(parent) = path.parent() {
        fs::create_dir_all(parent)
            .unwrap_or_else(|e| panic!("harness: mkdir {}: {e}", parent.display()));
    }
    if fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink()) {
        fs::remove_file(path).unwrap_or_else(|e| panic!("harness: unlink {}: {e}", path.display()));
    }
    fs::write(path, bytes).unwrap_or_else(|e| panic!("harness: write {}: {e}", path.display()));
    backdate(path);
}

/// Every file and symlink under `dir` (recursively, symlinks not followed, entries named `.git` left
/// out), keyed by the path relative to `dir`. FIFOs and other special files are not listed.
pub fn list_tree(dir: &Path) -> BTreeMap<String, Node> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<String, Node>) {
        let entries = match fs::read_dir(dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return,
            Err(e) => panic!("harness: read_dir {}: {e}", dir.display()),
        };
        for entry in entries {
            let entry =
                entry.unwrap_or_else(|e| panic!("harness: read_dir {}: {e}", dir.display()));
            if entry.file_name() == ".git" {
                continue;
            }
            let path = entry.path();
            let meta = fs::symlink_metadata(&path)
                .unwrap_or_else(|e| panic!("harness: stat {}: {e}", path.display()));
            if meta.is_dir() {
                walk(root, &path, out);
            } else if let Some(node) = node_at(&path) {
                let rel = path
                    .strip_prefix(root)
                    .expect("a walked path lies under its root")
                    .to_string_lossy()
                    .into_owned();
                out.insert(rel, node);
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(dir, dir, &mut out);
    out
}

/// The file or symlink at `path`, if any (a directory, a special file or nothing gives `None`).
pub fn node_at(path: &Path) -> Option<Node> {
    let meta = fs::symlink_metadata(path).ok()?;
    if meta.file_type().is_symlink() {
        let target = fs::read_link(path)
            .unwrap_or_else(|e| panic!("harness: readlink {}: {e}", path.display()));
        Some(Node::symlink(target.to_string_lossy().into_owned()))
    } else if meta.is_file() {
        let bytes =
            fs::read(path).unwrap_or_else(|e| panic!("harness: read {}: {e}", path.display()));
        Some(Node::File {
            bytes,
            executable: meta.permissions().mode() & 0o100 != 0,
        })
    } else {
        None
    }
}

/// The contract harness on a real directory. Clones share the temporary directory, the store and the
/// read faults; [`GitHarness::view`] gives one on another worktree with the same store.
#[derive(Clone)]
pub struct GitHarness {
    _temp: Arc<TempDir>,
    base: PathBuf,
    root: PathBuf,
    data_dir: PathBuf,
    store: Arc<GitSnapshotStore>,
    failing: Arc<Mutex<HashSet<String>>>,
}

impl GitHarness {
    /// Makes any read of `path` fail from now on (the fault hook), without touching it: for a file that
    /// does not exist, whose read must not even be tried.
    pub fn fail_reads_of(&self, path: &str) {
        self.failing
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(path.to_owned());
    }
    /// A plain-directory worktree with the default configuration (no global excludes file).
    pub fn new() -> Self {
        GitHarness::with_config(|_, _| {})
    }

    /// A harness whose store configuration `edit` adjusts; it gets the base directory, where it may put
    /// files the configuration names (they need not exist yet).
    pub fn with_config(edit: impl FnOnce(&mut GitStoreConfig, &Path)) -> Self {
        let temp = tempfile::Builder::new()
            .prefix("rewind-git-it-")
            .tempdir()
            .expect("harness: a temporary directory");
        let base = fs::canonicalize(temp.path()).expect("harness: canonical temp dir");
        let root = base.join("wt");
        let data_dir = base.join("data");
        fs::create_dir_all(&root).expect("harness: create the worktree");
        fs::create_dir_all(&data_dir).expect("harness: create the data dir");
        let failing: Arc<Mutex<HashSet<String>>> = Arc::default();
        let mut config = GitStoreConfig::new(&data_dir, DATABASE);
        config.excludes_file = ExcludesFile::None;
        config.attributes_file = ExcludesFile::None;
        let hook = Arc::clone(&failing);
        config.read_fault = Some(Arc::new(move |path: &str| {
            hook.lock()
                .unwrap_or_else(PoisonError::into_inner)
                .contains(path)
        }));
        edit(&mut config, &base);
        GitHarness {
            _temp: Arc::new(temp),
            base,
            root,
            data_dir,
            store: Arc::new(GitSnapshotStore::new(config)),
            failing,
        }
    }

    /// A worktree that is a git repository with an empty root commit (as OpenCode's tests use).
    pub fn git_repo() -> Self {
        let h = GitHarness::new();
        crate::git_oracle::init_repo(h.root());
        h
    }

    /// The same store and faults on another worktree (which must exist).
    pub fn view(&self, root: impl Into<PathBuf>) -> GitHarness {
        GitHarness {
            root: root.into(),
            ..self.clone()
        }
    }

    /// The temporary directory holding the worktree, the data dir and any siblings.
    pub fn base(&self) -> &Path {
        &self.base
    }

    /// The store's data directory.
    pub fn data_dir(&self) -> &Path {
        &self.data_dir
    }

    /// The adapter itself (for its methods beyond the port).
    pub fn adapter(&self) -> &GitSnapshotStore {
        &self.store
    }

    /// The bare store directory of this worktree.
    pub fn store_dir(&self) -> PathBuf {
        self.store
            .store_dir(&self.root)
            .expect("harness: the store directory of the worktree")
    }

    /// Whether the store holds object `hex`, loose or packed, as real git reads the store.
    pub fn stored(&self, hex: &str) -> bool {
        crate::git_oracle::git_succeeds(
            &self.store_dir(),
            &[
                "--git-dir",
                ".",
                "cat-file",
                "-e",
                &format!("{hex}^{{object}}"),
            ],
        )
    }

    /// An absolute path inside the worktree.
    pub fn path(&self, rel: &str) -> PathBuf {
        assert!(
            !rel.starts_with('/') && rel.split('/').all(|c| c != ".."),
            "harness: {rel:?} is not inside the worktree"
        );
        self.root.join(rel)
    }

    /// `track`, which must succeed.
    pub async fn track(&self) -> TrackOutcome {
        self.port()
            .track(&self.root)
            .await
            .unwrap_or_else(|e| panic!("track {}: {e:?}", self.root.display()))
    }

    /// The id of a successful `track`.
    pub async fn id(&self) -> SnapshotId {
        self.track().await.id
    }
}

impl WorktreeHarness for GitHarness {
    fn port(&self) -> &dyn SnapshotPort {
        &*self.store
    }

    fn root(&self) -> &Path {
        &self.root
    }

    fn write(&self, path: &str, bytes: &[u8]) {
        write_file(&self.path(path), bytes);
    }

    fn settle(&self) {
        std::thread::sleep(PAST_RACY);
    }

    fn remove(&self, path: &str) {
        let full = self.path(path);
        let meta =
            fs::symlink_metadata(&full).unwrap_or_else(|e| panic!("harness: remove {path}: {e}"));
        if meta.is_dir() {
            fs::remove_dir_all(&full)
        } else {
            fs::remove_file(&full)
        }
        .unwrap_or_else(|e| panic!("harness: remove {path}: {e}"));
        let mut dir = full.parent().map(Path::to_path_buf);
        while let Some(current) = dir {
            if current == self.root || !current.starts_with(&self.root) {
                break;
            }
            let empty = fs::read_dir(&current)
                .map(|mut entries| entries.next().is_none())
                .unwrap_or(false);
            if !empty {
                break;
            }
            fs::remove_dir(&current)
                .unwrap_or_else(|e| panic!("harness: rmdir {}: {e}", current.display()));
            dir = current.parent().map(Path::to_path_buf);
        }
    }

    fn set_executable(&self, path: &str, executable: bool) {
        let full = self.path(path);
        let meta =
            fs::symlink_metadata(&full).unwrap_or_else(|e| panic!("harness: chmod {path}: {e}"));
        assert!(meta.is_file(), "harness: chmod {path}: not a regular file");
        let mode = meta.permissions().mode();
        let mode = if executable {
            mode | 0o111
        } else {
            mode & !0o111
        };
        fs::set_permissions(&full, fs::Permissions::from_mode(mode))
            .unwrap_or_else(|e| panic!("harness: chmod {path}: {e}"));
        backdate(&full);
    }

    fn symlink(&self, path: &str, target: &str) {
        let full = self.path(path);
        if let Some(parent) = full.parent() {
            fs::create_dir_all(parent)
                .unwrap_or_else(|e| panic!("harness: mkdir {}: {e}", parent.display()));
        }
        if let Ok(meta) = fs::symlink_metadata(&full) {
            if meta.is_dir() {
                fs::remove_dir_all(&full)
            } else {
                fs::remove_file(&full)
            }
            .unwrap_or_else(|e| panic!("harness: replace {path}: {e}"));
        }
        // std cannot set a symlink's own mtime; the link text is tiny, so a re-read costs nothing.
        symlink(target, &full).unwrap_or_else(|e| panic!("harness: symlink {path}: {e}"));
    }

    fn read(&self, path: &str) -> Option<Node> {
        node_at(&self.path(path))
    }

    fn list(&self) -> BTreeMap<String, Node> {
        list_tree(&self.root)
    }

    fn fail_reads(&self, path: &str) {
        self.failing
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(path.to_owned());
        // A file that becomes unreadable in real life changes its stat data (a chmod changes the ctime),
        // so the stat cache does not answer for it: give it a new modification time too.
        backdate(&self.path(path));
    }

    fn remove_snapshot_object(&self, id: &SnapshotId) {
        let removed = self
            .store
            .remove_object(&self.root, id)
            .unwrap_or_else(|e| panic!("harness: delete {id}: {e}"));
        assert!(
            removed,
            "harness: {id} is not a loose object or in a pack of rewind's own"
        );
    }
}
