//! The `rewind` binary end to end: each test runs the real binary (assert_cmd) with its own temporary
//! data directory and worktree, and checks the files on disk against states recorded before each turn.

mod bad_input;
mod demo;
mod exec_undo_redo;
mod explicit_revert;
mod json;
mod killed_exec;
mod recovery_failure;
mod serve_log;
mod snapshot_and_gc;
mod support;
mod warnings;
