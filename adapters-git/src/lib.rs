//! rewind-git: the snapshot store (`SnapshotPort`) on gitoxide.
//!
//! One bare object store per worktree and database, outside the worktree, under
//! `<data dir>/snapshot/<sha1 of the database identity and the canonical worktree path>`. Snapshots are git
//! tree ids; blobs hold the bytes on disk, with no filter in either direction. See `DESIGN.md` (beside this
//! crate's `Cargo.toml`) for how the stat cache, the ignore rules and the safe writes keep it exact.

mod apply;
mod attributes;
mod beneath;
mod config;
mod diff;
mod error;
mod gc;
mod git_config;
mod ignore;
mod odb;
mod pack;
mod pack_header;
mod path_map;
mod replace;
mod seed;
mod stat_cache;
mod store;
mod track;
mod tree;

pub use config::{ChangeHook, ExcludesFile, GitStoreConfig, ReadFault};
pub use error::GitError;
pub use store::disk_usage;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use rewind_core::model::{
    FileAction, FileDiff, GcReport, RelPath, RestoreOutcome, RevertDiffs, RevertOutcome,
    SkipReason, SkippedPath, SnapshotId, SnapshotPatch, TrackOutcome,
};
use rewind_core::{Error, Ready, Result, SnapshotPort};

use crate::apply::{object_id, snapshot_id};
use crate::error::GitResult;
use crate::store::Store;
use crate::tree::diff_trees;

/// The snapshot store on gitoxide: implements `rewind_core::SnapshotPort`.
#[derive(Debug, Clone)]
pub struct GitSnapshotStore {
    config: Arc<GitStoreConfig>,
}

/// The first 16 hex digits of the SHA-1 of a database identity.
fn key_of(identity: &str) -> String {
    let digest = <sha1::Sha1 as sha1::Digest>::digest(identity.as_bytes());
    let digest = gix::ObjectId::Sha1(digest.into()).to_string();
    digest[..16].to_owned()
}

impl GitSnapshotStore {
    /// A store with this configuration; nothing is created until a worktree is first used.
    pub fn new(config: GitStoreConfig) -> Self {
        GitSnapshotStore {
            config: Arc::new(config),
        }
    }

    /// The configuration.
    pub fn config(&self) -> &GitStoreConfig {
        &self.config
    }

    /// A short name of the database the stores are keyed on (the first 16 hex digits of the SHA-1 of its
    /// identity), for files kept per database in the data directory.
    pub fn database_key(&self) -> String {
        key_of(&self.config.database_identity)
    }

    /// `database_key` of each former identity of the database (`GitStoreConfig::former_identities`), for
    /// files a rewind before its identity changed kept.
    pub fn former_database_keys(&self) -> Vec<String> {
        self.config
            .former_identities
            .iter()
            .map(|identity| key_of(identity))
            .collect()
    }

    /// The directory of the bare store that holds `worktree`'s snapshots (a git dir: `objects/` with loose
    /// objects, plus rewind's own files under `rewind/`, the stat cache at `rewind/stat-cache`).
    pub fn store_dir(&self, worktree: &Path) -> Result<PathBuf> {
        let canonical = store::canonical_worktree(&self.config, worktree)?;
        Ok(store::found_location(&self.config, &canonical))
    }

    /// Removes the temporary files a crashed operation left in `worktree`, when its store has a journal
    /// and no process holds it (`store::clean_if_free`); whether it did.
    pub async fn clean_leftovers(&self, worktree: &Path) -> Result<bool> {
        let config = self.config.clone();
        let worktree = worktree.to_path_buf();
        tokio::task::spawn_blocking(move || store::clean_if_free(&config, &worktree))
            .await
            .map_err(Error::backend)?
            .map_err(Error::from)
    }

    /// Deletes one stored object, loose and from rewind's own packs (each rewritten without it), as damage
    /// to a store would; whether it was there. For tests of what a missing object does (fails closed).
    #[doc(hidden)]
    pub fn remove_object(&self, worktree: &Path, id: &SnapshotId) -> Result<bool> {
        let id = object_id(id)?;
        let remove = || -> GitResult<bool> {
            let store = Store::open(&self.config, worktree)?;
            let mut removed = false;
            let loose = store.odb.path_of(&id);
            if loose.is_file() {
                std::fs::remove_file(&loose).map_err(|e| GitError::io(&loose, e))?;
                removed = true;
            }
            let dir = store.odb.dir().join("pack");
            for own in pack::own_packs(&dir) {
                if pack::ids(&own)?.contains(&id) {
                    pack::rewrite(&dir, std::slice::from_ref(&own), |other| *other != id)?;
                    removed = true;
                }
            }
            Ok(removed)
        };
        remove().map_err(Error::from)
    }

    /// Runs blocking store work off the async runtime, with the store of `worktree` open and locked.
    async fn with_store<T: Send + 'static>(
        &self,
        worktree: &Path,
        work: impl FnOnce(&Store, &GitStoreConfig) -> GitResult<T> + Send + 'static,
    ) -> Result<T> {
        self.with_opened(worktree, Store::open, work).await
    }
}

impl GitSnapshotStore {
    /// `with_store` for work that only reads objects: a store on a data directory that cannot be written
    /// is read without its lock (`Store::open_to_read`).
    async fn with_store_to_read<T: Send + 'static>(
        &self,
        worktree: &Path,
        work: impl FnOnce(&Store, &GitStoreConfig) -> GitResult<T> + Send + 'static,
    ) -> Result<T> {
        self.with_opened(worktree, Store::open_to_read, work).await
    }

    /// Runs `work` off the async runtime on the store of `worktree` as `open` opens it.
    async fn with_opened<T: Send + 'static>(
        &self,
        worktree: &Path,
        open: fn(&GitStoreConfig, &Path) -> GitResult<Store>,
        work: impl FnOnce(&Store, &GitStoreConfig) -> GitResult<T> + Send + 'static,
    ) -> Result<T> {
        let config = self.config.clone();
        let worktree = worktree.to_path_buf();
        tokio::task::spawn_blocking(move || {
            let store = open(&config, &worktree)?;
            work(&store, &config)
        })
        .await
        .map_err(Error::backend)?
        .map_err(Error::from)
    }

    /// `revert` and `revert_when`: the store's thread plans, then touches files once `ready` says so.
    async fn revert_once(
        &self,
        worktree: &Path,
        patches: &[SnapshotPatch],
        base: &SnapshotId,
        ready: impl FnOnce() -> bool + Send + 'static,
    ) -> Result<RevertOutcome> {
        let patches = patches.to_vec();
        let base = object_id(base)?;
        self.with_store(worktree, move |store, config| {
            apply::revert(store, config, &patches, &base, ready)
        })
        .await
    }
}

/// A snapshot id the caller gave, checked to name a tree when the store holds it: a file's (blob's) id is bad
/// input, not a corrupt store. One the store does not hold is refused as missing, before the operation
/// does anything (a `unified_diff` snapshotted the worktree first; review), but the empty tree. The root
/// tree read here is the one the operation reads next (`Odb::read_tree` keeps it), so
/// only an id that is not a tree costs a second look.
fn check_snapshot(store: &Store, id: &gix::ObjectId) -> GitResult<()> {
    match store.odb.read_tree(id) {
        Err(error::GitError::Corrupt(_)) => {}
        // Missing: refused before anything else is done (a worktree snapshotted to compare with it).
        // The empty tree is never missing (`Odb::read_tree`).
        Err(missing @ error::GitError::Missing(_)) => return Err(missing),
        _ => return Ok(()),
    }
    match store.odb.open(id) {
        Ok((kind, _, _)) if kind != odb::Kind::Tree => Err(error::GitError::Refused(format!(
            "{id} is not a snapshot: it names a file's content in the snapshot store, not a tree; \
             `rewind snapshot track`, `rewind log --json` and warnings show snapshot ids"
        ))),
        _ => Ok(()),
    }
}

/// How the diffs of `store` are made.
fn made<'a>(
    store: &'a store::Store,
    config: &GitStoreConfig,
    attributes: &'a attributes::DiffAttributes,
) -> diff::Made<'a> {
    diff::Made {
        odb: &store.odb,
        size_cap: config.size_cap,
        attributes,
    }
}

/// What `track` returns of a track.
fn track_outcome(tracked: track::Tracked) -> GitResult<TrackOutcome> {
    let mut skipped = tracked.skipped;
    // Said, not recorded with the id: every path of such a tree is ignored, which the record's rules
    // already say.
    if tracked.ignores.worktree_ignored() {
        skipped.insert(
            0,
            SkippedPath {
                path: ".".to_owned(),
                reason: SkipReason::IgnoredWorktree,
            },
        );
    }
    Ok(TrackOutcome {
        id: snapshot_id(&tracked.id)?,
        skipped,
        hashed: tracked.hashed,
    })
}

/// The `.git` of each nested repository that a track returning `from` found, gone from the worktree now
/// (`SkipReason::RemovedGitDir`): a snapshot never holds one, so what was in it is lost to an undo.
fn removed_git_dirs(store: &Store, from: &gix::ObjectId) -> Vec<SkippedPath> {
    let Some(record) = store.known_record(from) else {
        return Vec::new();
    };
    // Only a repository every track of `from` found: one id stands for every disk state with the same
    // files, and after an undo that brought the files back without their `.git`, the same id is tracked
    // without it (review: every later step from that id was told it removed the `.git`).
    let Some((first, rest)) = record.nested.split_first() else {
        return Vec::new();
    };
    first
        .keys()
        .filter(|root| rest.iter().all(|state| state.contains_key(*root)))
        .map(|root| format!("{root}/.git"))
        .filter(|git| {
            std::fs::symlink_metadata(store.worktree.join(git))
                .is_err_and(|e| e.kind() != std::io::ErrorKind::PermissionDenied)
        })
        .map(|path| SkippedPath {
            path,
            reason: SkipReason::RemovedGitDir,
        })
        .collect()
}

/// Whether a track that skipped `skipped` left `path` out: it, or a directory above it (a git directory's
/// layout, the worktree itself when its repository ignores it), is among them.
fn left_out(skipped: &[rewind_core::model::SkippedPath], path: &str) -> bool {
    skipped.iter().any(|s| {
        s.path == "."
            || s.path == path
            || path
                .strip_prefix(s.path.trim_end_matches('/'))
                .is_some_and(|rest| rest.starts_with('/'))
    })
}

/// The tracked paths that differ between `from` and `now`, a track of the worktree just taken: a path
/// gone from the tracked content only when it is really gone.
fn changed_since(
    store: &Store,
    from: &gix::ObjectId,
    now: &track::Tracked,
    verify: bool,
) -> GitResult<Vec<RelPath>> {
    let root = store.root()?;
    let mut changed = Vec::new();
    // The ids of the copies to read back (`verify`), with their paths.
    let mut copies: Vec<(String, gix::ObjectId)> = Vec::new();
    for (path, before, after) in diff_trees(&store.odb, from, &now.id)? {
        if after.is_none() {
            // Gone from the tracked content: listed only when it is really gone, never when it is still on
            // disk but left out by this track (over the cap, say) or ignored now; a directory standing there now
            // is matched as one (`build/` ignores it). Looked up without following a symlink on the way:
            // `real/f` is gone when `real` is a symlink now, even to a directory that has an `f` (that `f`
            // is another file, not tracked as `real/f`). A FIFO, socket or device standing there is not the
            // file (it is never tracked content): the file is gone, as when a directory took its place, so
            // an undo puts it back once that is moved away, and meanwhile keeps it and names the snapshot
            // holding the file (black-box: a step that replaced a file by a FIFO left it out of its patch,
            // and no undo brought the file back, nor said where it was).
            let (dir, name) = beneath::split(&path);
            let mode = root
                .dir(dir)
                .and_then(|fd| beneath::lstat_at(&fd, name))
                .ok()
                .map(|st| rustix::fs::FileType::from_raw_mode(st.st_mode));
            let is_dir = mode.is_some_and(|t| t == rustix::fs::FileType::Directory);
            let still_there = mode.is_some_and(|t| {
                matches!(
                    t,
                    rustix::fs::FileType::RegularFile | rustix::fs::FileType::Symlink
                )
            });
            let ignored_now = now.ignores.is_path_ignored(
                &path,
                is_dir,
                |dir| {
                    ignore::read_gitignore(&store.worktree.join(dir))
                        .ok()
                        .flatten()
                },
                |dir| ignore::nested_repository_exclude(&store.worktree.join(dir)).unwrap_or(None),
            );
            // Still there, neither ignored nor left out: the walk missed it, another program deleting it
            // and making it again meanwhile (gc fuzz: left out of the step's patch, it was said to have
            // become ignored, with no rule anywhere, and no undo put its content back). The snapshot says
            // it is gone, and so does this list, so an undo puts it back as the snapshots have it.
            if ignored_now || (still_there && left_out(&now.skipped, &path)) {
                continue;
            }
        }
        if verify && let Some((_, id)) = before {
            copies.push((path.clone(), id));
        }
        changed.push(path);
    }
    // A step's end (`verify`): the copy in `from` of each file the step changed is what an undo puts
    // back, and the step's own change may have been the only other copy (a deletion): it is read whole
    // now, on every core, so a copy that cannot be read is said while the step ends, not at the undo
    // that needs it (review: a damaged pack, or a damaged object of the user's adopted by a seeded
    // snapshot, let `exec` call a deletion undoable that no undo could bring back). Only a copy that is
    // missing or damaged: another failure (out of file handles, say) is the error it is, and the step's
    // end may be tried again.
    track::parallel_map_on(
        &copies,
        track::worker_threads(),
        8,
        || (),
        |(), (path, id)| {
            store.odb.verify(id).map_err(|e| match e {
                GitError::Corrupt(_) | GitError::Missing(_) => GitError::Corrupt(format!(
                    "the copy of {path} in snapshot {from}, which an undo of this step puts back, cannot be read ({e})"
                )),
                other => other,
            })
        },
    )?;
    rel_paths(changed)
}

fn rel_paths(paths: Vec<String>) -> GitResult<Vec<RelPath>> {
    paths
        .into_iter()
        .map(|p| RelPath::new(p).map_err(|e| GitError::Other(e.to_string())))
        .collect()
}

#[async_trait]
impl SnapshotPort for GitSnapshotStore {
    async fn store_location(&self, worktree: &Path) -> Result<String> {
        Ok(self.store_dir(worktree)?.display().to_string())
    }

    async fn track(&self, worktree: &Path) -> Result<TrackOutcome> {
        self.with_store(worktree, |store, config| {
            track_outcome(track::track(store, config)?)
        })
        .await
    }

    /// Every id a track returned has its record (written before the id is returned); one whose record is
    /// lost (a damaged store) is still known from the log of returned ids, while gc keeps its line. Read
    /// as every snapshot is first (`check_snapshot`): missing, or not a tree, it is that error.
    async fn is_snapshot(&self, worktree: &Path, id: &SnapshotId) -> Result<bool> {
        let id = object_id(id)?;
        self.with_store_to_read(worktree, move |store, _| {
            check_snapshot(store, &id)?;
            Ok(store.known_record(&id).is_some() || store.was_returned(&id)?)
        })
        .await
    }

    async fn changed_files(&self, worktree: &Path, from: &SnapshotId) -> Result<Vec<RelPath>> {
        let from = object_id(from)?;
        self.with_store(worktree, move |store, config| {
            check_snapshot(store, &from)?;
            let now = track::track(store, config)?;
            changed_since(store, &from, &now, false)
        })
        .await
    }

    /// One walk: the track, and the files that differ from `from` found from the snapshot it returns.
    async fn track_changes(
        &self,
        worktree: &Path,
        from: &SnapshotId,
    ) -> Result<(TrackOutcome, Result<Vec<RelPath>>)> {
        let from = object_id(from);
        self.with_store(worktree, move |store, config| {
            let now = track::track(store, config)?;
            let from_id = from.as_ref().ok().copied();
            let changed = from
                .and_then(|from| {
                    check_snapshot(store, &from)?;
                    changed_since(store, &from, &now, true)
                })
                .map_err(Error::from);
            let mut outcome = track_outcome(now)?;
            if let Some(from) = from_id {
                outcome.skipped.extend(removed_git_dirs(store, &from));
            }
            Ok((outcome, changed))
        })
        .await
    }

    async fn changed_between(
        &self,
        worktree: &Path,
        from: &SnapshotId,
        to: &SnapshotId,
    ) -> Result<Vec<RelPath>> {
        let (from, to) = (object_id(from)?, object_id(to)?);
        self.with_store(worktree, move |store, _| {
            let changes = diff_trees(&store.odb, &from, &to)?;
            rel_paths(changes.into_iter().map(|(path, _, _)| path).collect())
        })
        .await
    }

    async fn diff(
        &self,
        worktree: &Path,
        from: &SnapshotId,
        to: &SnapshotId,
    ) -> Result<Vec<FileDiff>> {
        let (from, to) = (object_id(from)?, object_id(to)?);
        self.with_store_to_read(worktree, move |store, config| {
            check_snapshot(store, &from)?;
            check_snapshot(store, &to)?;
            let changes = diff_trees(&store.odb, &from, &to)?;
            let attributes = diff::attributes_of(store, config, &changes);
            diff::file_diffs(made(store, config, &attributes), &changes)
        })
        .await
    }

    async fn unified_diff(&self, worktree: &Path, from: &SnapshotId) -> Result<String> {
        let from = object_id(from)?;
        self.with_store(worktree, move |store, config| {
            check_snapshot(store, &from)?;
            let now = track::track(store, config)?;
            let changes = diff_trees(&store.odb, &from, &now.id)?;
            let attributes = diff::attributes_of(store, config, &changes);
            diff::unified(made(store, config, &attributes), &changes)
        })
        .await
    }

    async fn revert_diffs(
        &self,
        worktree: &Path,
        before: &SnapshotId,
        applied: &SnapshotId,
    ) -> Result<RevertDiffs> {
        let (before, applied) = (object_id(before)?, object_id(applied)?);
        self.with_store(worktree, move |store, config| {
            if let Some(kept) = diff::kept_revert_diffs(
                (&store.dir, &store.odb),
                &before,
                &applied,
                config.size_cap,
            ) {
                return Ok(kept);
            }
            let changes = diff_trees(&store.odb, &before, &applied)?;
            let attributes = diff::attributes_of(store, config, &changes);
            diff::revert_diffs(made(store, config, &attributes), &changes)
        })
        .await
    }

    async fn restore(
        &self,
        worktree: &Path,
        to: &SnapshotId,
        paths: Option<Vec<RelPath>>,
    ) -> Result<RestoreOutcome> {
        let to = object_id(to)?;
        let scope = paths.map(|paths| paths.into_iter().map(String::from).collect());
        self.with_store(worktree, move |store, config| {
            check_snapshot(store, &to)?;
            apply::restore(store, config, &to, scope, None)
        })
        .await
    }

    async fn restore_since(
        &self,
        worktree: &Path,
        to: &SnapshotId,
        paths: Vec<RelPath>,
        since: &SnapshotId,
    ) -> Result<RestoreOutcome> {
        let (to, since) = (object_id(to)?, object_id(since)?);
        let scope = paths.into_iter().map(String::from).collect();
        self.with_store(worktree, move |store, config| {
            apply::restore(store, config, &to, Some(scope), Some(&since))
        })
        .await
    }

    async fn remove_emptied_dirs(
        &self,
        worktree: &Path,
        to: &SnapshotId,
        paths: Vec<RelPath>,
        made_since: u64,
    ) -> Result<Vec<RelPath>> {
        let to = object_id(to)?;
        let paths: Vec<String> = paths.into_iter().map(String::from).collect();
        let removed = self
            .with_store(worktree, move |store, _| {
                apply::remove_emptied_dirs(store, &to, &paths, made_since)
            })
            .await?;
        removed.into_iter().map(RelPath::new).collect()
    }

    async fn plan(&self, worktree: &Path, patches: &[SnapshotPatch]) -> Result<Vec<FileAction>> {
        let patches = patches.to_vec();
        self.with_store(worktree, move |store, config| {
            apply::plan(store, config, &patches)
        })
        .await
    }

    async fn revert(
        &self,
        worktree: &Path,
        patches: &[SnapshotPatch],
        base: &SnapshotId,
    ) -> Result<RevertOutcome> {
        self.revert_once(worktree, patches, base, || true).await
    }

    async fn revert_when(
        &self,
        worktree: &Path,
        patches: &[SnapshotPatch],
        base: &SnapshotId,
        ready: Ready,
    ) -> Result<RevertOutcome> {
        // The store's thread waits for the go-ahead after planning (the caller stores its intent record
        // meanwhile on the async side).
        self.revert_once(worktree, patches, base, move || {
            futures::executor::block_on(ready) == Ok(true)
        })
        .await
    }

    async fn gc(&self, worktree: &Path, keep: &[SnapshotId], grace: Duration) -> Result<GcReport> {
        // The grace period counts back from this call, not from when the store's lock is had: an id
        // returned while gc waits for it is kept.
        self.gc_since(worktree, keep, grace, store::now_ms()).await
    }

    async fn gc_since(
        &self,
        worktree: &Path,
        keep: &[SnapshotId],
        grace: Duration,
        read_ms: u64,
    ) -> Result<GcReport> {
        let keep = keep.iter().map(object_id).collect::<GitResult<Vec<_>>>()?;
        let called_ms = store::now_ms();
        self.with_store(worktree, move |store, _| {
            gc::gc(store, &keep, grace, called_ms, read_ms)
        })
        .await
    }

    async fn stored_worktrees(&self) -> Result<Vec<PathBuf>> {
        let config = self.config.clone();
        tokio::task::spawn_blocking(move || store::stored_worktrees(&config))
            .await
            .map_err(Error::backend)?
            .map_err(Error::from)
    }

    async fn remove_gone_stores(
        &self,
        named: &[PathBuf],
        grace: Duration,
    ) -> Result<Vec<(PathBuf, Result<GcReport>)>> {
        let config = self.config.clone();
        let named = named.iter().cloned().collect();
        let removed =
            tokio::task::spawn_blocking(move || store::remove_gone_stores(&config, &named, grace))
                .await
                .map_err(Error::backend)??;
        Ok(removed
            .into_iter()
            .map(|(worktree, outcome)| (worktree, outcome.map_err(Error::from)))
            .collect())
    }
}
