//! The `SnapshotPort` contract suite on the git store, one test per case, each on a fresh temporary
//! worktree.

use crate::harness::GitHarness;

rewind_core::snapshot_contract_tests!(
    make = GitHarness::new,
    block_on = |f| tokio::runtime::Runtime::new()
        .expect("a tokio runtime")
        .block_on(f)
);
