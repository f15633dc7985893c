//! The `SnapshotPort` contract suite on the in-memory store, one test per case.

use rewind_core::testkit::mem_snapshot::MemHarness;

rewind_core::snapshot_contract_tests!(
    make = MemHarness::new,
    block_on = futures::executor::block_on
);
