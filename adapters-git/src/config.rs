//! How the git snapshot store is configured.

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// Where the user's global excludes file comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ExcludesFile {
    /// `core.excludesFile` from the git configuration (the enclosing repository's, else the global one),
    /// defaulting to `$XDG_CONFIG_HOME/git/ignore` (or `~/.config/git/ignore`), as git does.
    FromGitConfig,
    /// This file (tests pass one explicitly, so they need no environment).
    Path(PathBuf),
    /// No global excludes.
    None,
}

/// A fault hook for tests: called with a worktree-relative path before its content is read; when it answers
/// true the read fails, as a read error of the disk would. (CI runs as root, so permissions cannot make a
/// read fail.)
pub type ReadFault = Arc<dyn Fn(&str) -> bool + Send + Sync>;

/// A hook for tests: called with a worktree-relative path right before rewind writes or deletes the file
/// there, after every check, so a test can change the worktree in that moment (a directory turned into a
/// symlink, a file created or edited) and show the change is found and left alone.
pub type ChangeHook = Arc<dyn Fn(&str) + Send + Sync>;

/// The git snapshot store's configuration.
#[derive(Clone)]
pub struct GitStoreConfig {
    /// rewind's data directory; stores live under `<data_dir>/snapshot/`.
    pub data_dir: PathBuf,
    /// The identity of the database the snapshots belong to (its URL or file), so two databases never
    /// share a store and gc never weighs one database's references against another's.
    pub database_identity: String,
    /// Other spellings of the same database that stores may be keyed on (the app's identity was the
    /// database's path as given, before it was the canonical file): a store found under one, and none
    /// under `database_identity`, is moved to its place when first opened. Default: none.
    pub former_identities: Vec<String>,
    /// rewind's own files outside its data directory, which may lie in a worktree: a SQLite database
    /// given elsewhere, with its journal, WAL and shared-memory files. Snapshots leave them out, as they
    /// do ignored files and the data directory, and no restore or revert writes or deletes them (a revert
    /// would otherwise write an old copy of the database over the live one). Default: none.
    pub own_files: Vec<PathBuf>,
    /// Untracked files larger than this are skipped (default 2 MiB).
    pub size_cap: u64,
    /// A worktree with more files than this is refused (default 500,000).
    pub file_cap: usize,
    /// The global excludes file.
    pub excludes_file: ExcludesFile,
    /// The global attributes file, which diffs read the `diff` attribute from (the same three choices:
    /// `FromGitConfig` is `core.attributesFile`, defaulting to `$XDG_CONFIG_HOME/git/attributes`).
    pub attributes_file: ExcludesFile,
    /// The user's home directory, which is refused as a worktree (default `$HOME`).
    pub home_dir: Option<PathBuf>,
    /// Test fault injection; `None` in production.
    pub read_fault: Option<ReadFault>,
    /// Test race injection: called with a worktree-relative path after every check, right before a file
    /// is written or deleted there or a directory made; `None` in production.
    pub change_hook: Option<ChangeHook>,
    /// Test race injection at the last moment: called with a worktree-relative path after the last look
    /// at the file to be replaced there, right before the new content is swapped in; `None` in production.
    pub swap_hook: Option<ChangeHook>,
    /// Test race injection after the swap: called with a worktree-relative path right before the file a
    /// write swapped out there is looked at again, and removed when unchanged; `None` in production.
    pub settle_hook: Option<ChangeHook>,
    /// Test race injection right after a write: called with a worktree-relative path once the new content
    /// stands there, right before its stat data is taken for the stat cache; `None` in production.
    pub written_hook: Option<ChangeHook>,
    /// Test race injection in a track: called with a directory's worktree-relative path (`""` for the top,
    /// `a/b/` below) right before the walk looks at it; `None` in production.
    pub walk_hook: Option<ChangeHook>,
    /// How long opening a store waits for another process to let go of its lock before it is refused as
    /// busy: longer than any operation takes (an operation's lease is 2 minutes, renewed while it runs),
    /// so only a holder that hangs, or another program locking the file, meets it.
    pub lock_wait: Duration,
}

impl fmt::Debug for GitStoreConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GitStoreConfig")
            .field("data_dir", &self.data_dir)
            .field("database_identity", &self.database_identity)
            .field("former_identities", &self.former_identities)
            .field("own_files", &self.own_files)
            .field("size_cap", &self.size_cap)
            .field("file_cap", &self.file_cap)
            .field("excludes_file", &self.excludes_file)
            .field("attributes_file", &self.attributes_file)
            .field("home_dir", &self.home_dir)
            .field("read_fault", &self.read_fault.is_some())
            .field("change_hook", &self.change_hook.is_some())
            .field("swap_hook", &self.swap_hook.is_some())
            .field("settle_hook", &self.settle_hook.is_some())
            .field("written_hook", &self.written_hook.is_some())
            .field("walk_hook", &self.walk_hook.is_some())
            .field("lock_wait", &self.lock_wait)
            .finish()
    }
}

impl GitStoreConfig {
    /// The defaults for a data directory and database.
    pub fn new(data_dir: impl Into<PathBuf>, database_identity: impl Into<String>) -> Self {
        GitStoreConfig {
            data_dir: data_dir.into(),
            database_identity: database_identity.into(),
            former_identities: Vec::new(),
            own_files: Vec::new(),
            size_cap: 2 * 1024 * 1024,
            file_cap: 500_000,
            excludes_file: ExcludesFile::FromGitConfig,
            attributes_file: ExcludesFile::FromGitConfig,
            home_dir: std::env::var_os("HOME").map(PathBuf::from),
            read_fault: None,
            change_hook: None,
            swap_hook: None,
            settle_hook: None,
            written_hook: None,
            walk_hook: None,
            lock_wait: Duration::from_secs(300),
        }
    }
}

/// The files of `own` as they are found in a walk: each with its directory's symlinks resolved (the walk
/// goes through real directories). One whose directory does not exist cannot be in a worktree, and is
/// left out.
pub(crate) fn canonical_own_files(own: &[PathBuf]) -> Vec<PathBuf> {
    own.iter()
        .filter_map(|file| {
            let name = file.file_name()?;
            let dir = std::fs::canonicalize(file.parent()?).ok()?;
            Some(dir.join(name))
        })
        .collect()
}
