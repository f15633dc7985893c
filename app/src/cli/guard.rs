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
//! command (not found, not executable) comes back through a pipe the guard inherits and closes on a
//! successful `execvp`; the guard then exits with 127, as a shell does.
//!
//! Not covered: processes the command started (they are its own to end, as with `timeout(1)`), and a
//! command that is a set-user-ID, set-group-ID or file-capability program (`sudo`, `ping`): the kernel
//! clears the death signal when it starts one.

use std::ffi::{OsStr, OsString};
use std::io::{ErrorKind, Read, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, ExitCode, ExitStatus};
use std::sync::{Arc, Mutex, PoisonError};

use anyhow::{Context as _, Result, anyhow};
use nix::fcntl::{FcntlArg, FdFlag, OFlag, fcntl};
use nix::sys::prctl::set_pdeathsig;
use nix::sys::signal::{Signal, kill};
use nix::sys::wait::{Id, WaitPidFlag, waitid};
use nix::unistd::{AccessFlags, Pid, access, getppid};
use tokio::sync::oneshot;

/// The hidden first argument that makes rewind the guard of a command.
pub const GUARD: &str = "__exec-guard";

/// The status the guard exits with when the command cannot be started (a shell's "command not found").
const UNSTARTABLE: u8 = 127;

/// When rewind was started as a guard (`rewind __exec-guard PARENT FD -- CMD…`), runs the command in its
/// place and returns only when it cannot; `None` for every other command line.
pub fn run_if_guard() -> Option<ExitCode> {
    let mut args = std::env::args_os().skip(1);
    if args.next()? != GUARD {
        return None;
    }
    let number = |arg: Option<OsString>| arg.and_then(|a| a.to_str()?.parse::<i32>().ok());
    let (parent, fd) = (number(args.next()), number(args.next()));
    let separator = args.next();
    let command: Vec<OsString> = args.collect();
    let (Some(parent), Some(fd), Some(program), true) = (
        parent,
        fd,
        command.first(),
        separator.is_some_and(|s| s == "--"),
    ) else {
        eprintln!("rewind: {GUARD} is rewind's own; it is not a command");
        return Some(ExitCode::from(2));
    };
    // The pipe's write end, inherited: opened again through /proc (closed on exec, unlike the inherited
    // descriptor, which is closed now so the command does not inherit it). Only a pipe is accepted, so
    // the guard run by hand writes to no file.
    let Some(mut errors) = inherited_pipe(fd) else {
        // Run by `exec`, the command is not started, and `exec` records why (127, as for a command that
        // cannot be started); run by hand, it is refused.
        eprintln!(
            "rewind: cannot open the pipe `rewind exec` passed ({GUARD} is rewind's own; it is not a command)"
        );
        return Some(ExitCode::from(UNSTARTABLE));
    };
    if let Err(error) = set_pdeathsig(Signal::SIGKILL) {
        let _ = write!(errors, "cannot tie it to rewind's life: {error}");
        return Some(ExitCode::from(UNSTARTABLE));
    }
    // The parent may have died before the death signal was asked for: then it never comes, and the
    // command is not started at all.
    if getppid() != Pid::from_raw(parent) {
        return Some(ExitCode::FAILURE);
    }
    // `exec` returns only on failure.
    let error = Command::new(program).args(&command[1..]).exec();
    let _ = write!(errors, "{error}");
    Some(ExitCode::from(UNSTARTABLE))
}

/// Descriptor `fd` of this process opened again, when it is a pipe, and `fd` itself closed.
fn inherited_pipe(fd: i32) -> Option<std::fs::File> {
    let link = std::fs::read_link(format!("/proc/self/fd/{fd}")).ok()?;
    if !link.to_string_lossy().starts_with("pipe:") {
        return None;
    }
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(format!("/proc/self/fd/{fd}"))
        .ok()?;
    nix::unistd::close(fd).ok()?;
    Some(file)
}

/// A command started under a guard.
pub struct Guarded {
    pid: Pid,
    /// Set once the command has ended, before it is reaped: a signal is passed on only before.
    ended: Arc<Mutex<bool>>,
}

/// How a guarded command ended; the error when it could not be started or waited for.
pub type Ended = oneshot::Receiver<Result<ExitStatus>>;

impl Guarded {
    /// Passes `signal` on to the command, unless it has ended: its pid is not reaped meanwhile, so the
    /// signal cannot reach another process that took the pid.
    pub fn signal(&self, signal: Signal) {
        let ended = self.ended.lock().unwrap_or_else(PoisonError::into_inner);
        if !*ended {
            // The command may be on its way out; then there is nothing to pass the signal to.
            let _ = kill(self.pid, signal);
        }
    }
}

/// Whether `program` can be started in `directory` as the guard starts it (`execvp`): a path with a `/`
/// (relative to `directory`), or a name found in `PATH`, naming a file this process may execute. `Err`
/// says why not. `exec` asks before it records its turn, so a command that cannot start (a mistyped
/// name) records nothing and leaves a reverted session's redo history whole; one that goes away between
/// the check and its start is recorded as a failed step, as before. Without `PATH` nothing is refused.
pub fn runnable(directory: &Path, program: &OsStr) -> std::result::Result<(), String> {
    let executable = |path: &Path| path.is_file() && access(path, AccessFlags::X_OK).is_ok();
    let name = program.to_string_lossy();
    if program.is_empty() {
        return Err("the command's name is empty".to_owned());
    }
    let found = if program.as_bytes().contains(&b'/') {
        let path = directory.join(program);
        match path.exists() {
            _ if executable(&path) => path,
            true => return Err(format!("{name} is not an executable file")),
            false => return Err(format!("{name}: no such file")),
        }
    } else {
        let Some(search) = std::env::var_os("PATH") else {
            return Ok(());
        };
        match std::env::split_paths(&search)
            .map(|dir| directory.join(dir).join(program))
            .find(|path| executable(path))
        {
            Some(path) => path,
            None => return Err(format!("{name}: command not found in PATH")),
        }
    };
    // What the kernel starts for it must be there too: a script's `#!` interpreter, which may be a script
    // in turn (the kernel follows four), and an ELF program's loader. A file of no known format runs with
    // `sh`; one rewind cannot read or parse is let through (its start failing is still recorded).
    let mut current = found;
    for _ in 0..5 {
        match loader(&current) {
            Some(Loader::Script(interpreter)) => {
                let interpreter = directory.join(interpreter);
                if !executable(&interpreter) {
                    return Err(format!(
                        "{name}: its interpreter {} is not an executable file",
                        interpreter.to_string_lossy().escape_debug()
                    ));
                }
                current = interpreter;
            }
            Some(Loader::Elf(interpreter)) => {
                let interpreter = directory.join(interpreter);
                return match interpreter.is_file() {
                    true => Ok(()),
                    false => Err(format!(
                        "{name}: its program loader {} is missing",
                        interpreter.to_string_lossy().escape_debug()
                    )),
                };
            }
            None => return Ok(()),
        }
    }
    Ok(())
}

/// What the kernel runs to start a file: a script's `#!` interpreter, or an ELF program's loader.
enum Loader {
    Script(std::path::PathBuf),
    Elf(std::path::PathBuf),
}

/// The interpreter a script's `#!` line names (its first word), or the loader an ELF program's
/// `PT_INTERP` names; none for another file, or one that cannot be read or parsed.
fn loader(path: &Path) -> Option<Loader> {
    let mut file = std::fs::File::open(path).ok()?;
    let mut head = [0u8; 256];
    let read = file.read(&mut head).ok()?;
    let head = &head[..read];
    if let Some(line) = head.strip_prefix(b"#!") {
        let line = line.split(|b| *b == b'\n').next()?;
        let word = line
            .split(|b| *b == b' ' || *b == b'\t')
            .find(|word| !word.is_empty())?;
        return Some(Loader::Script(OsStr::from_bytes(word).into()));
    }
    elf_interpreter(&mut file, head).map(Loader::Elf)
}

/// The path an ELF file's `PT_INTERP` program header names, read from `file` (`head`: its first bytes).
fn elf_interpreter(file: &mut std::fs::File, head: &[u8]) -> Option<std::path::PathBuf> {
    use std::io::{Seek, SeekFrom};
    if head.len() < 64 || &head[..4] != b"\x7fELF" {
        return None;
    }
    let wide = match head[4] {
        1 => false,
        2 => true,
        _ => return None,
    };
    let little = match head[5] {
        1 => true,
        2 => false,
        _ => return None,
    };
    let number = |bytes: &[u8], at: usize, size: usize| -> Option<u64> {
        let field = bytes.get(at..at + size)?;
        let mut value = 0u64;
        for i in 0..size {
            let byte = if little {
                field[size - 1 - i]
            } else {
                field[i]
            };
            value = (value << 8) | u64::from(byte);
        }
        Some(value)
    };
    let (table_at, entry_size, entries) = if wide {
        (
            number(head, 0x20, 8)?,
            number(head, 0x36, 2)?,
            number(head, 0x38, 2)?,
        )
    } else {
        (
            number(head, 0x1c, 4)?,
            number(head, 0x2a, 2)?,
            number(head, 0x2c, 2)?,
        )
    };
    if entries > 512 || entry_size < if wide { 56 } else { 32 } {
        return None;
    }
    let mut table = vec![0u8; usize::try_from(entry_size * entries).ok()?];
    file.seek(SeekFrom::Start(table_at)).ok()?;
    file.read_exact(&mut table).ok()?;
    let entry_size = usize::try_from(entry_size).ok()?;
    for entry in table.chunks_exact(entry_size) {
        // PT_INTERP
        if number(entry, 0, 4)? != 3 {
            continue;
        }
        let (at, size) = if wide {
            (number(entry, 0x08, 8)?, number(entry, 0x20, 8)?)
        } else {
            (number(entry, 0x04, 4)?, number(entry, 0x10, 4)?)
        };
        if size == 0 || size > 4096 {
            return None;
        }
        let mut path = vec![0u8; usize::try_from(size).ok()?];
        file.seek(SeekFrom::Start(at)).ok()?;
        file.read_exact(&mut path).ok()?;
        let path = path.split(|b| *b == 0).next()?;
        return Some(OsStr::from_bytes(path).into());
    }
    None
}

/// Starts `command` in `directory` under a guard (module docs), from a thread that waits for it.
pub async fn spawn(directory: &Path, command: &[OsString]) -> Result<(Guarded, Ended)> {
    let (program, _) = command
        .split_first()
        .context("no command given after `--`")?;
    let (errors, errors_in) = nix::unistd::pipe()
        .context("cannot make the pipe a command's start error comes back by")?;
    // Only the write end is for the guard.
    fcntl(&errors, FcntlArg::F_SETFD(FdFlag::FD_CLOEXEC))
        .and_then(|_| fcntl(&errors, FcntlArg::F_SETFL(OFlag::O_NONBLOCK)))
        .context("cannot set up the pipe a command's start error comes back by")?;
    let mut guard = Command::new("/proc/self/exe");
    guard
        .arg0("rewind")
        .arg(GUARD)
        .arg(std::process::id().to_string())
        .arg(errors_in.as_raw_fd().to_string())
        .arg("--")
        .args(command)
        .current_dir(directory);
    let (started_tx, started_rx) = oneshot::channel();
    let (status_tx, status_rx) = oneshot::channel();
    let ended = Arc::new(Mutex::new(false));
    let waiter = Arc::clone(&ended);
    let program = program.to_string_lossy().into_owned();
    std::thread::Builder::new()
        .name("rewind-exec".to_owned())
        .spawn(move || {
            let started = guard.spawn();
            // The guard has its copy; without this one, the pipe ends when the command starts.
            drop(errors_in);
            let mut child = match started {
                Ok(child) => child,
                Err(error) => {
                    let _ =
                        started_tx.send(Err(anyhow!(error).context("cannot start rewind's guard")));
                    return;
                }
            };
            let _ = started_tx.send(Ok(child.id()));
            let status =
                wait(&mut child, &waiter).and_then(|status| unstarted(status, errors, &program));
            // This thread must outlive the command (module docs); it ends only now.
            let _ = status_tx.send(status);
        })
        .context("cannot start the thread that runs the command")?;
    let pid = started_rx
        .await
        .context("the thread that runs the command ended early")??;
    let guarded = Guarded {
        pid: Pid::from_raw(i32::try_from(pid).context("a process id out of range")?),
        ended,
    };
    Ok((guarded, status_rx))
}

/// Waits for `child` to end, sets `ended`, then reaps it.
fn wait(child: &mut Child, ended: &Mutex<bool>) -> Result<ExitStatus> {
    let pid = Pid::from_raw(i32::try_from(child.id()).context("a process id out of range")?);
    loop {
        match waitid(Id::Pid(pid), WaitPidFlag::WEXITED | WaitPidFlag::WNOWAIT) {
            Ok(_) => break,
            Err(nix::errno::Errno::EINTR) => continue,
            Err(error) => return Err(anyhow!(error).context("cannot wait for the command")),
        }
    }
    *ended.lock().unwrap_or_else(PoisonError::into_inner) = true;
    child.wait().context("cannot wait for the command")
}

/// `status` as it is, or the error the guard wrote when the command could not be started.
fn unstarted(status: ExitStatus, errors: OwnedFd, program: &str) -> Result<ExitStatus> {
    if status.code() != Some(i32::from(UNSTARTABLE)) {
        return Ok(status);
    }
    // The guard has ended: what it wrote is in the pipe (read without waiting, in case a process the
    // command started still holds the other end).
    let mut error = String::new();
    match std::fs::File::from(errors).read_to_string(&mut error) {
        Ok(_) => {}
        Err(e) if e.kind() == ErrorKind::WouldBlock => {}
        Err(e) => return Err(anyhow!(e).context("cannot read why the command did not start")),
    }
    if error.is_empty() {
        Ok(status)
    } else {
        Err(anyhow!(error).context(format!("cannot start {program}")))
    }
}
