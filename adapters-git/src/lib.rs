//! rewind-git: the snapshot store (`SnapshotPort`) on gitoxide.
//!
//! One bare object store per worktree and database, outside the worktree, under
//! `<data dir>/snapshot/<sha1 of the database identity and the canonical worktree path>`. Snapshots are git
//! tree ids; blobs hold the bytes on disk, with no filter in either direction. See ARCHITECTURE.md for how
//! the stat cache, the ignore rules and the safe writes keep it exact.

mod config;

pub use config::{ExcludesFile, GitStoreConfig};

use std::path::{Path, PathBuf};

/// The snapshot store on gitoxide: implements `rewind_core::SnapshotPort`.
#[derive(Debug)]
pub struct GitSnapshotStore {
    config: GitStoreConfig,
}

impl GitSnapshotStore {
    /// A store with this configuration; nothing is created until a worktree is first tracked.
    pub fn new(config: GitStoreConfig) -> Self {
        GitSnapshotStore { config }
    }

    /// The configuration.
    pub fn config(&self) -> &GitStoreConfig {
        &self.config
    }

    /// The directory of the bare store that holds `worktree`'s snapshots (a git dir: `objects/`, plus
    /// rewind's own files under `rewind/`).
    pub fn store_dir(&self, worktree: &Path) -> rewind_core::Result<PathBuf> {
        let _ = worktree;
        Err(rewind_core::Error::backend("not built yet"))
    }
}
