//! The `rewind` binary: parses the command line and runs it (see `rewind_app::cli`).

use std::process::ExitCode;

fn main() -> ExitCode {
    rewind_app::cli::main()
}
