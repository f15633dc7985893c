//! rewind-tests: black-box scenarios across crates (the app on port 0, real git, real SQLite).
//!
//! The scenarios are in `tests/it/` (one integration test binary). `src/bin/rewind-test-writer.rs` is
//! a second process that writes to a server's database, so the tests can show that the outbox relay
//! brings another process's events to the server's event stream. `sdk/` runs OpenCode's own JavaScript
//! client against `rewind serve`.
