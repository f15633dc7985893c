//! Helpers: an isolated environment (data dir, worktree, config home), the binary as a command, and the
//! state of a directory read from disk (path → mode and bytes), the oracle every scenario compares with.

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command as Process;

use assert_cmd::Command;
use serde_json::Value;
use tempfile::TempDir;

/// A file as found on disk: `100644`, `100755` or `120000` (symlink, bytes = target).
pub type State = BTreeMap<String, (String, Vec<u8>)>;

/// A data directory, a worktree and an empty config home, all temporary.
pub struct Env {
    pub data: TempDir,
    pub worktree: TempDir,
    pub config_home: TempDir,
}

impl Env {
    /// A plain directory (not a git repository) as the worktree.
    pub fn plain() -> Env {
        Env {
            data: TempDir::new().expect("data dir"),
            worktree: TempDir::new().expect("worktree"),
            config_home: TempDir::new().expect("config home"),
        }
    }

    /// A git checkout with one commit as the worktree.
    pub fn git_checkout() -> Env {
        let env = Env::plain();
        std::fs::write(env.path().join("README.md"), "# project\n").expect("write");
        std::fs::write(env.path().join("a.txt"), "committed\n").expect("write");
        git(env.path(), &["init", "-q"]);
        commit_all(env.path(), "initial");
        env
    }

    pub fn path(&self) -> &Path {
        self.worktree.path()
    }

    /// `rewind --data-dir DATA -C WORKTREE ARGS…`, isolated from the user's configuration.
    pub fn rewind(&self, args: &[&str]) -> Command {
        self.rewind_in(self.path(), args)
    }

    /// `rewind` with this environment's `PATH` and home, and nothing else: no `--data-dir`, no `-C`.
    pub fn bare(&self) -> std::process::Command {
        let mut command = std::process::Command::new(assert_cmd::cargo::cargo_bin("rewind"));
        command
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", self.config_home.path())
            .env("XDG_CONFIG_HOME", self.config_home.path());
        command
    }

    /// `rewind --data-dir DATA -C DIR ARGS…`.
    pub fn rewind_in(&self, dir: &Path, args: &[&str]) -> Command {
        Command::from_std(self.process_in(dir, args))
    }

    /// The same as a `std::process::Command`, for tests that spawn and kill it.
    pub fn process_in(&self, dir: &Path, args: &[&str]) -> Process {
        let mut command = Process::new(assert_cmd::cargo::cargo_bin("rewind"));
        command
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", self.config_home.path())
            .env("XDG_CONFIG_HOME", self.config_home.path())
            .arg("--data-dir")
            .arg(self.data.path())
            .arg("-C")
            .arg(dir)
            .args(args);
        command
    }

    /// Starts `rewind exec` on a command that writes `started` and then waits for a file `go` (removing
    /// both before it ends); returns once the command has started, its step open. Killed, its command with
    /// it, if the test ends before it does: a failing test does not leave it waiting for good (which kept
    /// `cargo test` waiting on its output).
    pub fn exec_waiting_for_go(&self) -> KilledOnDrop {
        self.exec_waiting_for_go_with(&[])
    }

    /// `exec_waiting_for_go` with the environment variables `vars` set for rewind.
    pub fn exec_waiting_for_go_with(&self, vars: &[(&str, &str)]) -> KilledOnDrop {
        let mut child = self
            .process_in(
                self.path(),
                &[
                    "exec",
                    "--",
                    "sh",
                    "-c",
                    "printf 'x\\n' > started; while [ ! -e go ]; do sleep 0.05; done; rm go started",
                ],
            )
            .envs(vars.iter().copied())
            .spawn()
            .expect("spawns");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while !self.path().join("started").exists() {
            if std::time::Instant::now() >= deadline {
                let _ = child.kill();
                panic!("the command never started");
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        KilledOnDrop(child)
    }

    /// Runs a command that must succeed; returns its stdout.
    pub fn ok(&self, args: &[&str]) -> String {
        let output = self.rewind(args).output().expect("runs");
        assert!(
            output.status.success(),
            "`rewind {}` failed ({:?}):\nstdout: {}\nstderr: {}",
            args.join(" "),
            output.status,
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8_lossy(&output.stdout).into_owned()
    }

    /// Runs a command that must fail with exit code 1; returns its stderr.
    pub fn fails(&self, args: &[&str]) -> String {
        let output = self.rewind(args).output().expect("runs");
        assert_eq!(
            output.status.code(),
            Some(1),
            "`rewind {}` should fail with exit code 1:\nstdout: {}\nstderr: {}",
            args.join(" "),
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
        assert!(
            stderr.starts_with("error: "),
            "errors go to stderr as `error: …`: {stderr:?}"
        );
        stderr
    }

    /// `rewind snapshot track`'s id of the worktree as it is.
    pub fn snapshot_id(&self) -> String {
        self.json(&["snapshot", "track"])["id"]
            .as_str()
            .expect("a snapshot id")
            .to_owned()
    }

    /// Runs a command with `--json` that must succeed; returns the parsed output.
    pub fn json(&self, args: &[&str]) -> Value {
        let mut with_json = vec!["--json"];
        with_json.extend_from_slice(args);
        let stdout = self.ok(&with_json);
        serde_json::from_str(&stdout)
            .unwrap_or_else(|error| panic!("`{}` is not JSON ({error}): {stdout}", args.join(" ")))
    }

    /// `exec -- sh -c SCRIPT`, which must succeed.
    pub fn exec_sh(&self, script: &str) {
        self.ok(&["exec", "--", "sh", "-c", script]);
    }

    /// `exec --new-session -- sh -c SCRIPT`, which must succeed.
    pub fn exec_sh_in_a_new_session(&self, script: &str) {
        self.ok(&["exec", "--new-session", "--", "sh", "-c", script]);
    }

    /// The worktree's files.
    pub fn state(&self) -> State {
        state(self.path())
    }
}

/// Every file and symlink under `root` but `.git`, with its mode and bytes.
pub fn state(root: &Path) -> State {
    let mut out = State::new();
    let mut pending: Vec<PathBuf> = vec![root.to_path_buf()];
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir).expect("read dir") {
            let entry = entry.expect("entry");
            let path = entry.path();
            if entry.file_name() == ".git" {
                continue;
            }
            let metadata = std::fs::symlink_metadata(&path).expect("lstat");
            let name = path
                .strip_prefix(root)
                .expect("inside")
                .to_str()
                .expect("utf-8")
                .to_owned();
            if metadata.file_type().is_symlink() {
                let target = std::fs::read_link(&path).expect("readlink");
                out.insert(
                    name,
                    (
                        "120000".to_owned(),
                        target.to_str().expect("utf-8").as_bytes().to_vec(),
                    ),
                );
            } else if metadata.is_dir() {
                pending.push(path);
            } else {
                let mode = if metadata.permissions().mode() & 0o111 != 0 {
                    "100755"
                } else {
                    "100644"
                };
                out.insert(name, (mode.to_owned(), std::fs::read(&path).expect("read")));
            }
        }
    }
    out
}

/// Runs git in `dir`; it must succeed.
/// Commits everything in the repository at `dir` (`git add -A`, then a commit with `message`).
pub fn commit_all(dir: &Path, message: &str) {
    git(dir, &["add", "-A"]);
    git(
        dir,
        &[
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@t.invalid",
            "-c",
            "commit.gpgsign=false",
            "commit",
            "-q",
            "-m",
            message,
        ],
    );
}

pub fn git(dir: &Path, args: &[&str]) -> String {
    let output = Process::new("git")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("git runs");
    assert!(
        output.status.success(),
        "git {args:?} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// A readable difference between two states, for assertion messages.
pub fn describe(expected: &State, actual: &State) -> String {
    let mut lines = Vec::new();
    for (path, value) in expected {
        match actual.get(path) {
            None => lines.push(format!("missing {path}")),
            Some(found) if found != value => lines.push(format!(
                "{path}: expected {} {:?}, found {} {:?}",
                value.0,
                String::from_utf8_lossy(&value.1),
                found.0,
                String::from_utf8_lossy(&found.1)
            )),
            Some(_) => {}
        }
    }
    for path in actual.keys().filter(|p| !expected.contains_key(*p)) {
        lines.push(format!("unexpected {path}"));
    }
    lines.join("\n")
}

/// Asserts that the worktree is in `expected`.
pub fn assert_state(env: &Env, expected: &State, when: &str) {
    let actual = env.state();
    assert!(
        &actual == expected,
        "{when}: the worktree differs from the recorded state:\n{}",
        describe(expected, &actual)
    );
}

/// `rewind serve --port 0` in `env`'s worktree with `RUST_LOG` set, its stdout and stderr read.
pub struct Server {
    child: std::process::Child,
    /// The port it listens on (from its first line).
    pub port: u16,
    /// Its first line on stdout, where it says it listens.
    pub first_line: String,
    log: std::thread::JoinHandle<Vec<String>>,
}

impl Server {
    pub fn start(env: &Env, rust_log: &str) -> Server {
        Self::start_with(env, rust_log, &[])
    }

    /// `start`, with more arguments after `serve --port 0`.
    pub fn start_with(env: &Env, rust_log: &str, args: &[&str]) -> Server {
        use std::io::{BufRead, BufReader};
        let mut child = env
            .process_in(env.path(), &[&["serve", "--port", "0"][..], args].concat())
            .env("RUST_LOG", rust_log)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("start rewind serve");
        let stdout = child.stdout.take().expect("stdout");
        let stderr = child.stderr.take().expect("stderr");
        let log = std::thread::spawn(move || {
            BufReader::new(stderr)
                .lines()
                .map_while(Result::ok)
                .collect::<Vec<String>>()
        });
        let mut first = String::new();
        BufReader::new(stdout)
            .read_line(&mut first)
            .expect("the server's first line");
        // `rewind listening on http://HOST:PORT`, or `{"listening":"http://HOST:PORT"}` with `--json`.
        let port = first
            .trim()
            .trim_end_matches("\"}")
            .rsplit(':')
            .next()
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| panic!("`rewind listening on http://HOST:PORT`, got {first:?}"));
        Server {
            child,
            port,
            first_line: first,
            log,
        }
    }

    /// Stops the server with SIGTERM; it must exit with success. Returns its log lines.
    pub fn stop(mut self) -> Vec<String> {
        let kill = Process::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .expect("run kill");
        assert!(kill.success());
        let status = self.child.wait().expect("the server stops");
        assert!(status.success(), "{status:?}");
        self.log.join().expect("the log reader")
    }
}

/// The id of the first part of type `kind` (`step-start`, `step-finish`, …) of a message of `log --json`.
pub fn part_id<'a>(message: &'a Value, kind: &str) -> &'a str {
    message["parts"]
        .as_array()
        .expect("parts")
        .iter()
        .find(|p| p["type"] == kind)
        .and_then(|p| p["id"].as_str())
        .unwrap_or_else(|| panic!("a {kind} part in {message}"))
}

/// `chattr FLAG PATH` (`+i` makes a file or directory immutable, also to root, as a read-only mount is);
/// whether it succeeded.
pub fn chattr(flag: &str, path: &Path) -> bool {
    Process::new("chattr")
        .arg(flag)
        .arg(path)
        .status()
        .is_ok_and(|status| status.success())
}

/// A child process killed (also when stopped) and reaped when the test ends, whether it passes or not.
pub struct KilledOnDrop(pub std::process::Child);

impl Drop for KilledOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
