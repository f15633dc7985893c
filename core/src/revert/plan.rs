//! The per-file plan of a set of patches, and the conversion of patch parts to the snapshot port's form.

use std::collections::HashSet;

use crate::error::Result;
use crate::model::{PatchPart, RelPath, SnapshotId, SnapshotPatch};

/// Converts patch parts (absolute paths) to the snapshot port's worktree-relative form. A path outside the
/// worktree is an error, so nothing is written for it.
pub fn snapshot_patches(patches: &[&PatchPart], worktree: &str) -> Result<Vec<SnapshotPatch>> {
    patches
        .iter()
        .map(|patch| {
            Ok(SnapshotPatch {
                hash: patch.hash.clone(),
                files: patch
                    .files
                    .iter()
                    .map(|file| RelPath::from_absolute(file, worktree))
                    .collect::<Result<_>>()?,
            })
        })
        .collect()
}

/// For every file named in `patches`, the snapshot whose content wins: the first patch naming it. The list
/// keeps the order of first appearance, so a path that is a file in one patch and a directory in another
/// is handled in patch order.
pub fn file_plan(patches: &[SnapshotPatch]) -> Vec<(RelPath, SnapshotId)> {
    let mut seen = HashSet::new();
    let mut plan = Vec::new();
    for patch in patches {
        for file in &patch.files {
            if seen.insert(file.clone()) {
                plan.push((file.clone(), patch.hash.clone()));
            }
        }
    }
    plan
}
