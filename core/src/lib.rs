//! rewind-core: the pure heart of rewind.
//!
//! It holds the domain types (in OpenCode's JSON shapes), the ids, the revert-point algorithm, the ports
//! (`SnapshotPort`, `MessageRepo`, `EventBus`, `HostPort`) and the services that run recording, revert,
//! unrevert, cleanup and recovery over them. It does no IO of its own: adapters implement the ports.
//! With the `testkit` feature it also offers in-memory adapters, proptest strategies and one contract suite
//! per port, which the real adapters run too.

pub mod error;
pub mod id;
pub mod model;
#[cfg(feature = "openapi")]
mod openapi;
pub mod ports;
pub mod revert;
pub mod service;
#[cfg(feature = "testkit")]
pub mod testkit;

pub use error::{Error, Result};
pub use ports::{
    Change, Delivery, EventBus, Guard, HostPort, MessageRepo, Ready, SnapshotPort, Subscription,
    Transaction,
};
pub use revert::{HistorySeen, RevertPoint, RevertTarget};
pub use service::{Rewind, ServiceConfig};
