//! rewind's application: configuration, wiring of the core services to the adapters, the HTTP server
//! (`rewind serve`) and the command line. Only this crate knows HTTP, terminals and process exit codes.

pub mod busy;
pub mod cli;
pub mod config;
pub mod host;
pub mod http;
pub mod report;
pub mod startup;
pub mod worktree;

pub use config::Settings;
pub use host::SystemHost;
pub use startup::{Application, ServerOptions, Services};
