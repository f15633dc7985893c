//! rewind-core's integration tests: one binary, one module per concern.
//!
//! `contract_snapshot` runs the `SnapshotPort` contract suite on the in-memory store.

mod contract_snapshot;
