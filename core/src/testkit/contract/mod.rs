//! One contract suite per port: each case is a public async function, run by the in-memory adapters' tests
//! here and by the real adapters' tests in their crates.

pub mod bus;
pub mod repo;
pub mod snapshot;
