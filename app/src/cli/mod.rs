//! The command line (SPEC section 11): argument parsing, dispatch, and how errors and exit codes reach
//! the terminal. Each command works directly on the database and the snapshot store with the same
//! configuration as the server; its changes reach a running server's event stream through the outbox.

mod commands;
mod context;
mod demo;
mod exec;
mod gc;
mod guard;
mod history;
mod output;
mod show;
mod snapshot;

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};

use crate::config::{ConfigArgs, ServerArgs, Settings};

/// rewind: undo that can itself be undone, for coding-agent sessions and any directory.
#[derive(Parser, Debug)]
#[command(name = "rewind", version, about, propagate_version = true)]
pub struct Cli {
    /// Print machine-readable JSON instead of text (fields documented in the README).
    #[arg(long, global = true)]
    pub json: bool,
    /// The worktree to work on (default: the current directory). As with `git -C`, relative paths in the
    /// other options and `REWIND_*` variables (`--data-dir`, `--config`, a SQLite `--database-url`) are
    /// taken from it.
    #[arg(long, short = 'C', global = true, value_name = "DIR")]
    pub directory: Option<PathBuf>,
    /// Configuration shared with the server.
    #[command(flatten)]
    pub config: ConfigArgs,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The commands.
#[derive(Subcommand, Debug)]
pub enum Command {
    /// Run the HTTP server (OpenCode's session API and event stream).
    Serve(ServerArgs),
    /// Record a scripted session in a temporary repository and show revert, re-revert and unrevert.
    Demo {
        /// Keep the demo's repository in this directory instead of a temporary one.
        #[arg(long, value_name = "DIR")]
        keep: Option<PathBuf>,
    },
    /// Run a command as one step of this directory's latest session, passing its exit code through.
    Exec {
        /// Start a new session instead of continuing the latest one.
        #[arg(long)]
        new_session: bool,
        /// The command and its arguments (after `--` when the command's name starts with `-`; an option
        /// before the command that `exec` does not know is a usage error, not a command).
        #[arg(required = true, trailing_var_arg = true)]
        command: Vec<std::ffi::OsString>,
    },
    /// Undo the last turn of the latest session (OpenCode's /undo).
    Undo {
        /// The session (default: the latest of this directory).
        #[arg(long, value_name = "ID")]
        session: Option<String>,
        /// Say what it would do to each file (write, delete or keep, and why), changing nothing.
        #[arg(long)]
        dry_run: bool,
    },
    /// Redo the last undone turn (OpenCode's /redo).
    Redo {
        /// The session (default: the latest of this directory).
        #[arg(long, value_name = "ID")]
        session: Option<String>,
        /// Say what it would do to each file (write, delete or keep, and why), changing nothing.
        #[arg(long)]
        dry_run: bool,
    },
    /// The session's timeline: one line per message, each step's files, the revert point and warnings.
    Log {
        /// The session (default: the latest of this directory).
        #[arg(long, value_name = "ID")]
        session: Option<String>,
    },
    /// Revert the session to a message (or a part of it).
    Revert {
        /// The session (default: the latest of this directory).
        #[arg(long, value_name = "ID")]
        session: Option<String>,
        /// The message to revert to.
        message: String,
        /// The part to revert to.
        #[arg(long, value_name = "ID")]
        part: Option<String>,
        /// Say what it would do to each file (write, delete or keep, and why), changing nothing.
        #[arg(long)]
        dry_run: bool,
    },
    /// Undo the session's revert.
    Unrevert {
        /// The session (default: the latest of this directory).
        #[arg(long, value_name = "ID")]
        session: Option<String>,
        /// Say what it would do to each file (write, delete or keep, and why), changing nothing.
        #[arg(long)]
        dry_run: bool,
    },
    /// The diff of the session's revert.
    Diff {
        /// The session (default: the latest of this directory).
        #[arg(long, value_name = "ID")]
        session: Option<String>,
    },
    /// Sessions of this directory, the store's size on disk and the last gc.
    Status,
    /// Delete old sessions, then collect the snapshots nothing refers to.
    Gc {
        /// Delete sessions not updated (and restore captures not taken) for this many days first.
        #[arg(long, value_name = "DAYS")]
        older_than: Option<u64>,
        /// Keep objects that `track` or `revert` returned this recently, in seconds (SPEC 2.4's grace
        /// period, so a snapshot being recorded by another process is never collected).
        #[arg(long, value_name = "SECONDS", default_value_t = 3600)]
        grace_seconds: u64,
    },
    /// The snapshot store of this directory, for scripts and for getting single files back.
    #[command(subcommand)]
    Snapshot(SnapshotCommand),
}

/// `rewind snapshot …`.
#[derive(Subcommand, Debug)]
pub enum SnapshotCommand {
    /// Snapshot the directory now; prints the id and the skipped files.
    Track,
    /// The diff between two snapshots, or from one to the directory now.
    Diff {
        /// The older snapshot.
        from: String,
        /// The newer snapshot (default: the directory now).
        to: Option<String>,
    },
    /// Put the directory (or the given paths) back to a snapshot, capturing the current state first.
    Restore {
        /// The snapshot.
        id: String,
        /// Paths relative to the directory (default: everything).
        paths: Vec<PathBuf>,
    },
}

/// An error whose exit code is not 1 (a command run by `exec` that failed, say).
#[derive(Debug)]
pub struct Exit(pub u8);

impl std::fmt::Display for Exit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "exit code {}", self.0)
    }
}

impl std::error::Error for Exit {}

/// Parses the command line, runs the command and turns its outcome into an exit code; errors go to
/// stderr with their causes.
pub fn main() -> ExitCode {
    // `rewind exec`'s command starts as a second rewind that becomes it (`guard`).
    if let Some(code) = guard::run_if_guard() {
        return code;
    }
    quiet_on_closed_stdout();
    if let Some(refusal) = refuse_empty_variables(&<Cli as clap::CommandFactory>::command()) {
        eprintln!("error: {refusal}");
        return ExitCode::from(2);
    }
    let matches = match <Cli as clap::CommandFactory>::command().try_get_matches() {
        Ok(matches) => matches,
        Err(error) => {
            if let Some(refusal) =
                invalid_variable(&<Cli as clap::CommandFactory>::command(), &error)
            {
                eprintln!("error: {refusal}");
                return ExitCode::from(2);
            }
            return usage_exit(&error);
        }
    };
    let mut cli = match <Cli as clap::FromArgMatches>::from_arg_matches(&matches) {
        Ok(cli) => cli,
        Err(error) => return usage_exit(&error),
    };
    warn_of_secrets_on_the_command_line(&matches, &cli);
    // Only the variable is a list: a `--project-root` with a `:` in its path is that one directory
    // (review: it was split into two roots, one the user never named).
    if matches.value_source("project_roots") == Some(clap::parser::ValueSource::EnvVariable) {
        cli.config.project_roots = cli
            .config
            .project_roots
            .iter()
            .flat_map(std::env::split_paths)
            .collect();
    }
    // The demo works in a temporary data directory unless one is given on its command line: a
    // `REWIND_*` variable set for everyday use would have it write its session into the user's database
    // (review).
    if matches!(cli.command, Command::Demo { .. }) {
        let typed =
            |id: &str| matches.value_source(id) == Some(clap::parser::ValueSource::CommandLine);
        if !typed("data_dir") {
            cli.config.data_dir = None;
        }
        if !typed("database_url") {
            cli.config.database_url = None;
        }
    }
    init_tracing(matches!(cli.command, Command::Serve(_)));
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("error: cannot start the async runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    let json = cli.json;
    let result = runtime.block_on(run(cli));
    // The work is done (every operation was awaited): the runtime is shut down without waiting on a
    // task that never yields. A driver's pool task once spun at 100% CPU after its command's output
    // was printed, and dropping the runtime waited for it for ever (review: sqlx#3645, fixed in the
    // sqlx this build uses; this bounds any other).
    runtime.shutdown_timeout(std::time::Duration::from_secs(2));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => match error.downcast_ref::<Exit>() {
            Some(Exit(code)) => ExitCode::from(*code),
            None => {
                let message = crate::report::chain_anyhow(&error);
                eprintln!("error: {message}");
                // A script reading stdout gets a document for a failure too (the exit code says which).
                if json {
                    output::print_error_json(&message);
                }
                ExitCode::FAILURE
            }
        },
    }
}

/// Why the `REWIND_*` variables the flags are read from (each flag's `env`, as clap knows them) cannot be
/// used, if so: one set but empty, or a list (`REWIND_PROJECT_ROOTS`) with an empty entry (a leading,
/// trailing or doubled delimiter). Checked before the command line is parsed, whose error would name the
/// flag the variable stands for, which the user never typed (review).
fn refuse_empty_variables(command: &clap::Command) -> Option<String> {
    let arguments = command.get_arguments().chain(
        command
            .get_subcommands()
            .flat_map(clap::Command::get_arguments),
    );
    for argument in arguments {
        let Some(name) = argument.get_env() else {
            continue;
        };
        let Some(value) = std::env::var_os(name) else {
            continue;
        };
        let name = name.to_string_lossy();
        if value.is_empty() {
            return Some(format!(
                "{name} is set but empty: unset it (`unset {name}`), or give it a value"
            ));
        }
        let delimiter = argument
            .get_value_delimiter()
            .or_else(|| (name == crate::config::PROJECT_ROOTS_VARIABLE).then_some(':'));
        if let Some(delimiter) = delimiter
            && value.to_string_lossy().split(delimiter).any(str::is_empty)
        {
            return Some(format!(
                "{name} has an empty entry (a leading, trailing or doubled `{delimiter}`): separate the \
                 entries with a single `{delimiter}`"
            ));
        }
    }
    None
}

/// The refusal of a value that came from a `REWIND_*` variable, naming the variable: clap names only the
/// flag (`invalid value 'http' for '--port <PORT>'`), which the user never typed (review). None when the
/// error is another, or the flag was given on the command line.
fn invalid_variable(command: &clap::Command, error: &clap::Error) -> Option<String> {
    use clap::error::{ContextKind, ContextValue, ErrorKind};
    if error.kind() != ErrorKind::ValueValidation {
        return None;
    }
    let (Some(ContextValue::String(arg)), Some(ContextValue::String(value))) = (
        error.get(ContextKind::InvalidArg),
        error.get(ContextKind::InvalidValue),
    ) else {
        return None;
    };
    let flag = arg.split_whitespace().next()?;
    let argument = command
        .get_arguments()
        .chain(
            command
                .get_subcommands()
                .flat_map(clap::Command::get_arguments),
        )
        .find(|a| a.get_long().is_some_and(|long| flag == format!("--{long}")))?;
    let name = argument.get_env()?;
    if std::env::var_os(name)?.to_str() != Some(value.as_str()) {
        return None;
    }
    let typed = std::env::args_os().skip(1).any(|given| {
        given
            .to_str()
            .is_some_and(|given| given == flag || given.starts_with(&format!("{flag}=")))
    });
    if typed {
        return None;
    }
    let why = std::error::Error::source(error).map_or_else(String::new, |e| format!(": {e}"));
    Some(format!(
        "invalid value '{value}' in {} (the variable behind {flag}){why}",
        name.to_string_lossy()
    ))
}

/// Prints clap's help, version or usage error and gives its exit code (0 for help and version, 2 for a
/// usage error), as `Cli::parse` would; but help that cannot be written (`--help > /dev/full`) fails with
/// 1 and says so, as any other output does, and a closed pipe ends quietly with 141.
fn usage_exit(error: &clap::Error) -> ExitCode {
    match error.print() {
        Ok(()) => ExitCode::from(u8::try_from(error.exit_code()).unwrap_or(2)),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => ExitCode::from(141),
        Err(e) => {
            use std::io::Write as _;
            let stream = if error.use_stderr() {
                "stderr"
            } else {
                "stdout"
            };
            let _ = writeln!(std::io::stderr(), "error: cannot write to {stream}: {e}");
            ExitCode::FAILURE
        }
    }
}

/// A reader that stops early (`rewind log | head -1`) closes stdout: the next `println!` fails with
/// `EPIPE` (Rust ignores `SIGPIPE`) and panics. The command ends there quietly instead, with the status a
/// shell gives a process `SIGPIPE` ended (141), as other command-line tools do; whatever it had already
/// stored stays stored (output is written after the work). Any other failure to write stdout (a full
/// disk, `> /dev/full`) is an error as any other: `error: …` on stderr, exit 1, not a panic; what the
/// command stored before it printed stays stored. So is stderr that cannot be written (exit 1, silent).
fn quiet_on_closed_stdout() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let payload = info.payload();
        let message = payload
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| payload.downcast_ref::<&str>().copied())
            .unwrap_or_default();
        // Nothing can be said when stderr itself cannot be written: the status says it (1, as for any
        // error), not a panic's 101.
        if message.starts_with("failed printing to stderr") {
            std::process::exit(1);
        }
        if let Some(cause) = message.strip_prefix("failed printing to stdout") {
            if message.contains("Broken pipe") {
                std::process::exit(141);
            }
            let cause = cause.trim_start_matches(':').trim();
            // Not `eprintln!`: a stderr that cannot be written either would panic inside this hook.
            use std::io::Write as _;
            let _ = writeln!(
                std::io::stderr(),
                "error: cannot write to stdout: {cause}; {}",
                output::STDOUT_LOST
            );
            std::process::exit(1);
        }
        default(info);
    }));
}

/// Says on stderr when a secret was given as a flag: a process's arguments show in the process list to
/// every user of the machine (review), where its environment and the config file do not.
fn warn_of_secrets_on_the_command_line(matches: &clap::ArgMatches, cli: &Cli) {
    let typed = |matches: &clap::ArgMatches, id: &str| {
        matches.try_get_raw(id).is_ok_and(|raw| raw.is_some())
            && matches.value_source(id) == Some(clap::parser::ValueSource::CommandLine)
    };
    if matches
        .subcommand_matches("serve")
        .is_some_and(|serve| typed(serve, "password"))
    {
        eprintln!(
            "rewind: warning: --password shows in the process list to every user of this machine; set \
             REWIND_PASSWORD, or password in the config file, instead"
        );
    }
    if typed(matches, "database_url")
        && let Some(url) = &cli.config.database_url
        && crate::config::redact_url(url) != *url
    {
        eprintln!(
            "rewind: warning: the password in --database-url shows in the process list to every user of \
             this machine; set REWIND_DATABASE_URL, or database_url in the config file, instead"
        );
    }
}

async fn run(cli: Cli) -> Result<()> {
    let cwd = std::env::current_dir().context("cannot read the current directory")?;
    let directory = match &cli.directory {
        Some(dir) if dir.is_absolute() => dir.clone(),
        Some(dir) => cwd.join(dir),
        None => cwd.clone(),
    };
    match cli.command {
        Command::Serve(server) => {
            let settings = Settings::resolve(&cli.config, Some(&server), &directory)?;
            crate::http::serve(settings, directory, cli.json).await
        }
        Command::Demo { keep } => {
            // The demo uses a temporary data directory unless one is given (on its command line). Its
            // relative paths are taken from the `-C` directory, as every command's flags are (review:
            // from the current directory).
            let settings = if cli.config.data_dir.is_some() || cli.config.database_url.is_some() {
                Some(Settings::resolve(&cli.config, None, &directory)?)
            } else {
                None
            };
            let keep = keep.map(|dir| {
                if dir.is_absolute() {
                    dir
                } else {
                    directory.join(dir)
                }
            });
            demo::run(settings, keep.as_deref(), cli.json).await
        }
        command => {
            let settings = Settings::resolve(&cli.config, None, &directory)?;
            commands::run(command, &settings, &directory, cli.json).await
        }
    }
}

fn init_tracing(server: bool) {
    // PostgreSQL's notices (`relation … already exists, skipping` from every migration check at start)
    // are no news in the server's log (review).
    let default = if server {
        "info,sqlx::postgres::notice=warn"
    } else {
        "warn"
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    // A second initialisation (tests that call `main` twice) keeps the first subscriber.
    // Colour codes only on a terminal: a log redirected to a file stays plain text.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .try_init();
}
