//! The command `rewind exec` runs dies with it. `exec` does not start the command itself: it starts a
//! second copy of rewind (`/proc/self/exe`, so a binary replaced meanwhile does not matter) with the
//! hidden first argument [`GUARD`], which asks the kernel to kill it when its parent dies
//! (`PR_SET_PDEATHSIG`) and then replaces itself with the command (`execvp`: same process, same pid). So
//! a `rewind exec` that is killed (`kill -9`, the OOM killer) takes its command with it: the command
//! cannot go on writing files under the step the next rewind command aborts. (A SIGTERM or an interrupt
//! is passed on, and rewind waits, as before.)
//!
//! The kernel sends the death signal when the *thread* that started the process ends, so `exec` starts it
//! from a thread of its own that lives until the command has ended ([`spawn`]). A failure to start the
//! command (not found, not executable) is written by the guard to a file `exec` names, and read back by
//! `exec` as the error `spawn` would have given; the guard then exits with 127, as a shell does.
//!
//! What dies is the command itself: processes it started are its own to end, as with `timeout(1)`.

use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, ExitStatus};

use anyhow::{Context as _, Result, anyhow};
use nix::sys::prctl::set_pdeathsig;
use nix::sys::signal::Signal;
use nix::unistd::{Pid, getppid};
use tokio::sync::oneshot;

/// The hidden first argument that makes rewind the guard of a command.
pub const GUARD: &str = "__exec-guard";

/// The status the guard exits with when the command cannot be started (a shell's "command not found").
const UNSTARTABLE: i32 = 127;

/// When rewind was started as a guard (`rewind __exec-guard PARENT ERROR-FILE -- CMD…`), runs the command
/// in its place and returns only when it cannot; `None` for every other command line.
pub fn run_if_guard() -> Option<ExitCode> {
    let mut args = std::env::args_os().skip(1);
    if args.next()? != GUARD {
        return None;
    }
    let parent = args
        .next()
        .and_then(|pid| pid.to_str()?.parse::<i32>().ok());
    let error_file = args.next().map(PathBuf::from);
    let (Some(parent), Some(error_file), Some(separator)) = (parent, error_file, args.next())
    else {
        eprintln!("rewind: {GUARD} is rewind's own; it is not a command");
        return Some(ExitCode::from(2));
    };
    let command: Vec<OsString> = args.collect();
    let (Some(program), true) = (command.first(), separator == "--") else {
        eprintln!("rewind: {GUARD} is rewind's own; it is not a command");
        return Some(ExitCode::from(2));
    };
    if let Err(error) = set_pdeathsig(Signal::SIGKILL) {
        let _ = std::fs::write(
            &error_file,
            format!("cannot tie it to rewind's life: {error}"),
        );
        return Some(ExitCode::from(UNSTARTABLE as u8));
    }
    // The parent may have died before the death signal was asked for: then it never comes, and the
    // command is not started at all.
    if getppid() != Pid::from_raw(parent) {
        return Some(ExitCode::FAILURE);
    }
    // `exec` returns only on failure.
    let error = Command::new(program).args(&command[1..]).exec();
    let _ = std::fs::write(&error_file, error.to_string());
    Some(ExitCode::from(UNSTARTABLE as u8))
}

/// A command started under a guard.
pub struct Guarded {
    /// The command's process id (the guard's, which became the command).
    pub pid: Option<Pid>,
    /// How the command ended; the error when it could not be started or waited for.
    pub status: oneshot::Receiver<Result<ExitStatus>>,
}

/// Starts `command` in `directory` under a guard (module docs), from a thread that waits for it.
pub fn spawn(directory: &Path, command: &[String]) -> Result<Guarded> {
    let (program, _) = command
        .split_first()
        .context("no command given after `--`")?;
    let error_file = tempfile::Builder::new()
        .prefix("rewind-exec-")
        .tempfile()
        .context("cannot create the file the command's start errors are written to")?
        .into_temp_path();
    let mut guard = Command::new("/proc/self/exe");
    guard
        .arg0("rewind")
        .arg(GUARD)
        .arg(std::process::id().to_string())
        .arg(&*error_file)
        .arg("--")
        .args(command)
        .current_dir(directory);
    let (started_tx, started_rx) = std::sync::mpsc::channel();
    let (status_tx, status_rx) = oneshot::channel();
    let program = program.clone();
    std::thread::Builder::new()
        .name("rewind-exec".to_owned())
        .spawn(move || {
            let mut child = match guard.spawn() {
                Ok(child) => child,
                Err(error) => {
                    let _ =
                        started_tx.send(Err(anyhow!(error).context("cannot start rewind's guard")));
                    return;
                }
            };
            let _ = started_tx.send(Ok(child.id()));
            let status = child
                .wait()
                .context("cannot wait for the command")
                .and_then(|status| unstarted(status, &error_file, &program));
            // This thread must outlive the command (module docs); it ends only now.
            let _ = status_tx.send(status);
        })
        .context("cannot start the thread that runs the command")?;
    let pid = started_rx
        .recv()
        .context("the thread that runs the command ended early")??;
    Ok(Guarded {
        pid: i32::try_from(pid).ok().map(Pid::from_raw),
        status: status_rx,
    })
}

/// `status` as it is, or the error the guard wrote when the command could not be started.
fn unstarted(status: ExitStatus, error_file: &Path, program: &str) -> Result<ExitStatus> {
    if status.code() != Some(UNSTARTABLE) {
        return Ok(status);
    }
    match std::fs::read_to_string(error_file) {
        Ok(error) if !error.is_empty() => {
            Err(anyhow!(error).context(format!("cannot start {program}")))
        }
        _ => Ok(status),
    }
}
