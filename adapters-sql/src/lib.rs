//! rewind-sql: sessions, messages, leases and the event outbox (MessageRepo) on SeaORM.
//!
//! Not built yet: this crate holds no adapter until its issue lands, and exports nothing, so nothing can
//! mistake it for a working one.
