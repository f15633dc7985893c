//! Captures: snapshots of a worktree taken before `rewind snapshot restore` overwrote its files, recorded
//! in the database so gc keeps them and the restore can itself be undone.

use serde::{Deserialize, Serialize};

use super::SnapshotId;

/// The state of a worktree captured before a restore overwrote it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Capture {
    /// The worktree: an absolute, forward-slash path.
    pub directory: String,
    /// The snapshot holding the captured state.
    pub snapshot: SnapshotId,
    /// When it was taken, epoch milliseconds.
    pub time: u64,
    /// Why it was taken, in words a user can act on.
    pub message: String,
    /// The worktree-relative paths the operation was about (empty: the whole worktree).
    #[serde(default)]
    pub paths: Vec<String>,
    /// The token of the intent record whose files were being put back, for a recovery's or rollback's
    /// capture: a later attempt at the same intent (the first was interrupted) finds the earlier captures,
    /// which hold what the files were before any was put back.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub intent: Option<String>,
}
