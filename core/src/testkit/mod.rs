//! Test support, behind the `testkit` feature: in-memory adapters for every port, proptest strategies for
//! sessions, and one contract suite per port that the in-memory adapters and the real ones both pass.

pub mod contract;
pub mod host;
pub mod mem_bus;
pub mod mem_repo;
pub mod mem_snapshot;
pub mod strategies;

pub use host::FakeHost;
pub use mem_bus::MemBus;
pub use mem_repo::MemRepo;
pub use mem_snapshot::{MemFs, MemHarness, MemSnapshotStore, Node};
