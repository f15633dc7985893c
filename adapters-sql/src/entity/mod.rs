//! The SeaORM entities, one module per table. Bodies are JSON text (never `jsonb`), so what a client stored
//! reads back byte for byte, key order included.

pub(crate) mod capture;
pub(crate) mod event_outbox;
pub(crate) mod intent;
pub(crate) mod lease;
pub(crate) mod message;
pub(crate) mod part;
pub(crate) mod revert_history;
pub(crate) mod session;
pub(crate) mod session_diff;
pub(crate) mod shared_text;
pub(crate) mod warning;
