//! rewind-sql's integration tests: the `MessageRepo` contract suite and a model-based property test on
//! SQLite (in memory and in a file) and on PostgreSQL (when `REWIND_TEST_POSTGRES_URL` is set), leases and
//! the outbox under real contention, failures in the middle of a transaction, and opening stores that are
//! locked, read-only, corrupt or newer; a revert's large texts stored once; which writes wait for the disk
//! (traced with `strace`).

mod cleanup_failure;
mod contract;
mod durability;
mod ids;
mod leases;
mod model;
mod open;
mod outbox;
mod shared;
mod space;
mod support;
