//! The `rewind` binary: wires the core and the adapters into a command line and an HTTP server.
//!
//! The command line and the server are not built yet (issues 5 and 6); until then the binary says so and
//! exits non-zero instead of pretending to work.

fn main() -> std::process::ExitCode {
    eprintln!(
        "rewind {}: the command line is not built yet. Run the core walkthrough instead:\n  \
         cargo run -p rewind-core --features testkit --example walkthrough",
        env!("CARGO_PKG_VERSION")
    );
    std::process::ExitCode::FAILURE
}
