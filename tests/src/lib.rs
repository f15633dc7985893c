//! rewind-tests: black-box scenarios across crates (the app on port 0, real git, real SQLite).
//!
//! The scenarios arrive with the server and the command line (issues 5 and 6).
