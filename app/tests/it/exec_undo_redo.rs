//! `exec` of shell commands that create, edit, chmod and delete files across several turns, then `undo`
//! and `redo` back and forth: each must give back exactly the state recorded before the turn, file by
//! file, modes included; in a plain directory and in a git checkout.

use crate::support::{Env, State, assert_state};

/// Turns that create, append, chmod, delete (a file and its directory), and make a symlink.
const TURNS: &[&str] = &[
    "printf 'one\\n' > a.txt; mkdir -p d/e; printf 'x\\n' > d/e/x.txt",
    "printf 'two\\n' >> a.txt; chmod +x d/e/x.txt; printf 'b\\n' > 'b file.txt'",
    "rm d/e/x.txt; rmdir d/e d; chmod +x a.txt; printf 'B\\n' > 'b file.txt'; printf 'c\\n' > c.txt",
    "rm 'b file.txt'; chmod -x a.txt; ln -s c.txt link; printf 'a\\nb\\nc\\n' > c.txt",
];

/// Runs the turns, recording the state before each and after the last: `states[i]` is the state
/// before turn `i` (and `states[TURNS.len()]` the final one).
fn record(env: &Env) -> Vec<State> {
    let mut states = vec![env.state()];
    for turn in TURNS {
        env.exec_sh(turn);
        states.push(env.state());
    }
    for pair in states.windows(2) {
        assert_ne!(pair[0], pair[1], "every turn changes something");
    }
    states
}

fn undo_redo_everything(env: &Env) {
    let states = record(env);
    let last = TURNS.len();
    // Undo every turn, one at a time.
    for turn in (0..last).rev() {
        env.ok(&["undo"]);
        assert_state(
            env,
            &states[turn],
            &format!("after undoing turn {}", turn + 1),
        );
    }
    let stderr = env.fails(&["undo"]);
    assert!(stderr.contains("nothing to undo"), "{stderr}");
    assert_state(env, &states[0], "after an undo with nothing to undo");

    // Redo every turn; the last redo unreverts.
    for (turn, expected) in states.iter().enumerate().skip(1) {
        env.ok(&["redo"]);
        assert_state(env, expected, &format!("after redoing turn {turn}"));
    }
    let stderr = env.fails(&["redo"]);
    assert!(stderr.contains("nothing to redo"), "{stderr}");
    assert_state(env, &states[last], "after a redo with nothing to redo");

    // Back and forth in the middle.
    env.ok(&["undo"]);
    env.ok(&["undo"]);
    assert_state(env, &states[last - 2], "after two undos");
    env.ok(&["redo"]);
    assert_state(env, &states[last - 1], "after undo, undo, redo");
    env.ok(&["undo"]);
    env.ok(&["undo"]);
    assert_state(env, &states[last - 3], "after three net undos");
    env.ok(&["redo"]);
    env.ok(&["redo"]);
    env.ok(&["redo"]);
    assert_state(env, &states[last], "after redoing everything again");
}

#[test]
fn undo_and_redo_give_back_every_state_in_a_plain_directory() {
    undo_redo_everything(&Env::plain());
}

#[test]
fn undo_and_redo_give_back_every_state_in_a_git_checkout() {
    let env = Env::git_checkout();
    let head = crate::support::git(env.path(), &["rev-parse", "HEAD"]);
    undo_redo_everything(&env);
    assert_eq!(
        crate::support::git(env.path(), &["rev-parse", "HEAD"]),
        head,
        "the user's repository is never written"
    );
    assert_eq!(
        crate::support::git(env.path(), &["status", "--porcelain", "--", "README.md"]),
        "",
        "a committed file no turn touched stays as committed"
    );
}

#[test]
fn exec_while_reverted_drops_the_redo_history() {
    let env = Env::plain();
    let states = record(&env);
    env.ok(&["undo"]);
    env.ok(&["undo"]);
    assert_state(&env, &states[2], "after two undos");

    env.exec_sh("printf 'new\\n' > new.txt");
    let mut expected = states[2].clone();
    expected.insert(
        "new.txt".to_owned(),
        ("100644".to_owned(), b"new\n".to_vec()),
    );
    assert_state(&env, &expected, "after a new turn while reverted");

    let stderr = env.fails(&["redo"]);
    assert!(
        stderr.contains("nothing to redo"),
        "the undone turns are gone: {stderr}"
    );
    let log = env.json(&["log"]);
    let messages = log["messages"].as_array().expect("messages");
    assert_eq!(
        messages.len(),
        6,
        "turns 1, 2 and the new one remain (user + assistant each): {log:#}"
    );
    assert!(messages.iter().all(|m| m["hidden"] == false));

    env.ok(&["undo"]);
    assert_state(&env, &states[2], "undoing the new turn");
    env.ok(&["undo"]);
    assert_state(&env, &states[1], "undoing turn 2");
}

#[test]
fn exec_passes_the_exit_code_through_and_still_records_the_turn() {
    let env = Env::plain();
    let before = env.state();
    let output = env
        .rewind(&["exec", "--", "sh", "-c", "printf 'x\\n' > f.txt; exit 7"])
        .output()
        .expect("runs");
    assert_eq!(output.status.code(), Some(7));
    let after = env.state();
    assert_ne!(before, after);

    let output = env
        .rewind(&["exec", "--", "rewind-test-no-such-command"])
        .output()
        .expect("runs");
    assert_eq!(output.status.code(), Some(127));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("rewind-test-no-such-command") && stderr.contains("nothing was recorded"),
        "the error names the command: {stderr}"
    );

    // The failed command's turn is recorded with reason `error`, and it can be undone; the command that
    // could not start recorded nothing.
    let log = env.json(&["log"]);
    let reasons: Vec<String> = log["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .flat_map(|m| m["steps"].as_array().cloned().unwrap_or_default())
        .map(|s| s["reason"].as_str().unwrap_or("").to_owned())
        .collect();
    assert_eq!(reasons, ["error"]);
    env.ok(&["undo"]);
    assert_state(&env, &before, "undoing the command that exited with 7");
}

/// After `undo`, an `exec` that cannot run its command records nothing, so `redo` still works (black-box:
/// a mistyped option, `exec --new-sesion -- true`, ran `--new-sesion` as the command, recorded a turn,
/// and its cleanup discarded the undone turn for good). An unknown option before the command is a usage
/// error (exit 2); a command that is not found, or is not executable, exits 127 as a shell does.
#[test]
fn an_exec_that_cannot_run_its_command_keeps_the_redo_history() {
    use std::os::unix::fs::PermissionsExt;
    let env = Env::plain();
    env.exec_sh("printf 'x\\n' > x.txt");
    let done = env.state();
    env.ok(&["undo"]);
    std::fs::write(env.path().join("not-executable.sh"), "true\n").expect("write");
    std::fs::set_permissions(
        env.path().join("not-executable.sh"),
        std::fs::Permissions::from_mode(0o644),
    )
    .expect("chmod");
    // A script whose interpreter does not exist (review: it passed the check and failed to start), one
    // whose interpreter is such a script, and a program whose ELF loader does not exist (black-box).
    let executable = |name: &str, content: &[u8]| {
        std::fs::write(env.path().join(name), content).expect("write");
        std::fs::set_permissions(
            env.path().join(name),
            std::fs::Permissions::from_mode(0o755),
        )
        .expect("chmod");
    };
    executable(
        "no-interpreter.sh",
        b"#!/rewind-test/no/such/interpreter -x\ntrue\n",
    );
    let nested = format!(
        "#!{}\ntrue\n",
        env.path().join("no-interpreter.sh").display()
    );
    executable("nested.sh", nested.as_bytes());
    let mut program = std::fs::read("/bin/true").expect("/bin/true");
    let loader = b"ld-linux-x86-64.so.2";
    let at = program
        .windows(loader.len())
        .position(|w| w == loader)
        .expect("this test expects an x86-64 glibc /bin/true");
    program[at + loader.len() - 1] = b'9';
    executable("no-loader", &program);
    for (args, code) in [
        (&["exec", "--new-sesion", "--", "true"][..], 2),
        (&["exec", "--session", "x", "--", "true"][..], 2),
        (&["exec", "--", "rewind-test-no-such-command"][..], 127),
        (&["exec", "./no-such-file"][..], 127),
        (&["exec", "./not-executable.sh"][..], 127),
        (&["exec", "./no-interpreter.sh"][..], 127),
        (&["exec", "./nested.sh"][..], 127),
        (&["exec", "./no-loader"][..], 127),
        (&["exec", "--", ""][..], 127),
    ] {
        let output = env.rewind(args).output().expect("runs");
        assert_eq!(output.status.code(), Some(code), "{args:?}: {output:?}");
    }
    assert!(
        env.json(&["status"])["sessions"][0]["revertMessageID"].is_string(),
        "still reverted"
    );
    std::fs::remove_file(env.path().join("not-executable.sh")).expect("remove");
    for name in ["no-interpreter.sh", "nested.sh", "no-loader"] {
        std::fs::remove_file(env.path().join(name)).expect("remove");
    }
    env.ok(&["redo"]);
    assert_state(&env, &done, "redo after the refused commands");
    // An option after the command's name is the command's.
    env.ok(&["exec", "sh", "-c", "printf 'y\\n' > y.txt", "--new-sesion"]);
    assert_eq!(
        std::fs::read_to_string(env.path().join("y.txt")).expect("read"),
        "y\n"
    );
}

/// A command argument that is not UTF-8 is passed to the command byte for byte (clap refused it with exit
/// 2), and the user message shows it as bash reads it back (`$'\xff'`).
#[test]
fn a_command_argument_that_is_not_utf8_is_passed_through_and_undone() {
    use std::os::unix::ffi::OsStrExt;
    let env = Env::plain();
    std::fs::write(env.path().join("a.txt"), "a\n").expect("write");
    let before = env.state();
    let output = env
        .rewind(&["exec", "--", "sh", "-c", "printf '%s' \"$1\" > a.txt", "sh"])
        .arg(std::ffi::OsStr::from_bytes(b"b\xffd"))
        .output()
        .expect("runs");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(
        std::fs::read(env.path().join("a.txt")).expect("read"),
        b"b\xffd"
    );
    let log = env.json(&["log"]);
    assert_eq!(
        log["messages"][0]["text"],
        serde_json::json!("sh -c 'printf '\\''%s'\\'' \"$1\" > a.txt' sh $'b\\xffd'"),
        "{log}"
    );
    env.ok(&["undo"]);
    assert_state(
        &env,
        &before,
        "undoing the command given an argument that is not UTF-8",
    );
}

#[test]
fn stdout_and_stdin_of_the_command_are_the_terminal_s() {
    let env = Env::plain();
    let output = env
        .rewind(&[
            "exec",
            "--",
            "sh",
            "-c",
            "read line; echo \"got $line\"; echo err >&2",
        ])
        .write_stdin("hello\n")
        .output()
        .expect("runs");
    assert!(output.status.success());
    assert_eq!(String::from_utf8_lossy(&output.stdout), "got hello\n");
    assert!(String::from_utf8_lossy(&output.stderr).starts_with("err\n"));
}

#[test]
fn new_session_starts_a_separate_history() {
    let env = Env::plain();
    env.exec_sh("printf '1\\n' > one.txt");
    let before_second = env.state();
    env.exec_sh_in_a_new_session("printf '2\\n' > two.txt");
    let status = env.json(&["status"]);
    assert_eq!(status["sessions"].as_array().expect("sessions").len(), 2);
    // The latest session has one turn: undo takes it back, and then there is nothing more to undo there.
    let undone = env.ok(&["undo"]);
    assert!(
        undone.contains("`rewind redo` goes forward again"),
        "{undone}"
    );
    assert_state(&env, &before_second, "undo in the new session");
    env.fails(&["undo"]);

    // `--session` names the older session: its turn is undone and redone, the latest session is untouched.
    let latest = env.json(&["log"])["sessionID"].clone();
    let older = status["sessions"]
        .as_array()
        .expect("sessions")
        .iter()
        .find(|s| s["id"] != latest)
        .and_then(|s| s["id"].as_str())
        .expect("the other session's id")
        .to_owned();
    // The hints name the session too: without it they would act on the latest one.
    let undone = env.ok(&["undo", "--session", &older]);
    assert!(
        undone.contains(&format!(
            "`rewind redo --session {older}` goes forward again"
        )),
        "{undone}"
    );
    assert!(
        !env.path().join("one.txt").exists(),
        "the older turn is undone"
    );
    assert!(!env.path().join("two.txt").exists());
    let log = env.json(&["log"]);
    assert!(
        log["revert"].is_object(),
        "the latest session is still reverted: {log:#}"
    );
    env.ok(&["redo", "--session", &older]);
    assert_state(&env, &before_second, "redo in the older session");
    env.fails(&["redo", "--session", &older]);
}

/// A backslash is part of a file's name, not a separator (SPEC 12.10): a turn that writes `back\slash.txt`
/// finishes, and undo and redo take it away and bring it back, next to a file whose name has none.
#[test]
fn a_file_name_with_a_backslash_is_recorded_undone_and_redone() {
    let env = Env::plain();
    std::fs::write(env.path().join("a.txt"), "a\n").expect("write");
    env.exec_sh("printf 'x\\n' > 'back\\slash.txt'; printf 'b\\n' > a.txt");
    let name = env.path().join("back\\slash.txt");
    assert!(name.exists());
    env.ok(&["undo"]);
    assert!(!name.exists(), "undo removes the file the turn made");
    assert_eq!(
        std::fs::read_to_string(env.path().join("a.txt")).expect("read"),
        "a\n"
    );
    env.ok(&["redo"]);
    assert_eq!(std::fs::read_to_string(&name).expect("read"), "x\n");
    assert_eq!(
        std::fs::read_to_string(env.path().join("a.txt")).expect("read"),
        "b\n"
    );
}

/// A worktree whose directory name holds a backslash (`a\b`) is that directory, not `a/b`: the session
/// records its path unchanged, the step's files are under it, and undo and redo work there while a
/// sibling `a/b` with a file of its own is never touched.
#[test]
fn a_worktree_whose_name_has_a_backslash_is_that_directory_and_no_other() {
    let env = Env::plain();
    let worktree = env.path().join("a\\b");
    let sibling = env.path().join("a").join("b");
    std::fs::create_dir_all(&worktree).expect("mkdir");
    std::fs::create_dir_all(&sibling).expect("mkdir");
    std::fs::write(worktree.join("f.txt"), "mine\n").expect("write");
    std::fs::write(sibling.join("f.txt"), "sibling\n").expect("write");
    let sibling_before = crate::support::state(&sibling);

    let exec = |script: &str| {
        let output = env
            .rewind_in(&worktree, &["--json", "exec", "--", "sh", "-c", script])
            .output()
            .expect("runs");
        assert!(output.status.success(), "{output:?}");
        serde_json::from_slice::<serde_json::Value>(&output.stdout).expect("JSON")
    };
    let report = exec("printf 'new\\n' > f.txt; printf 'x\\n' > g.txt");
    let canonical = std::fs::canonicalize(&worktree).expect("canonical");
    let expected: Vec<String> = ["f.txt", "g.txt"]
        .iter()
        .map(|name| canonical.join(name).to_str().expect("UTF-8").to_owned())
        .collect();
    let mut files: Vec<String> = report["files"]
        .as_array()
        .expect("files")
        .iter()
        .filter_map(|file| file.as_str().map(str::to_owned))
        .collect();
    files.sort();
    assert_eq!(files, expected, "{report}");

    let undo = env.rewind_in(&worktree, &["undo"]).output().expect("runs");
    assert!(undo.status.success(), "{undo:?}");
    assert_eq!(
        std::fs::read_to_string(worktree.join("f.txt")).expect("read"),
        "mine\n"
    );
    assert!(!worktree.join("g.txt").exists());
    let redo = env.rewind_in(&worktree, &["redo"]).output().expect("runs");
    assert!(redo.status.success(), "{redo:?}");
    assert_eq!(
        std::fs::read_to_string(worktree.join("g.txt")).expect("read"),
        "x\n"
    );
    assert_eq!(
        crate::support::state(&sibling),
        sibling_before,
        "the sibling a/b is untouched"
    );
    assert!(!sibling.join("g.txt").exists());
}

/// A file name with a newline is one line in the text output, quoted as git quotes it, and the turn that
/// made it is undone like any other.
#[test]
fn a_file_name_with_a_newline_is_one_quoted_line_in_the_output() {
    let env = Env::plain();
    env.exec_sh("printf 'x\\n' > 'new\nline'");
    let output = env.rewind(&["undo"]).output().expect("runs");
    assert!(output.status.success(), "{output:?}");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(stdout.contains("\"new\\nline\""), "{stdout}");
    assert!(
        !stdout.lines().any(|line| line.starts_with("line")),
        "no line starts inside the name: {stdout}"
    );
    assert!(!env.path().join("new\nline").exists());
    for command in ["log", "status"] {
        let output = env.rewind(&[command]).output().expect("runs");
        let text = String::from_utf8_lossy(&output.stdout);
        assert!(!text.lines().any(|line| line.starts_with("line")), "{text}");
    }
}

/// Runs `rewind ARGS…` under umask 077, which the command `exec` runs inherits too.
fn under_umask_077(env: &Env, args: &[&str]) {
    let rewind = env.process_in(env.path(), args);
    let mut shell = std::process::Command::new("sh");
    shell
        .env_clear()
        .envs(rewind.get_envs().filter_map(|(k, v)| v.map(|v| (k, v))))
        .arg("-c")
        .arg("umask 077 && exec \"$@\"")
        .arg("sh")
        .arg(rewind.get_program())
        .args(rewind.get_args());
    let output = shell.output().expect("runs");
    assert!(output.status.success(), "{args:?}: {output:?}");
}

fn permissions(env: &Env, path: &str) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(env.path().join(path))
        .expect("stat")
        .permissions()
        .mode()
        & 0o777
}

/// Undo and redo never make a private file readable by others: a file they write over keeps its
/// permissions (0600 stays 0600), and a file they create follows the umask (077 gives 0600), as git's
/// checkout does.
#[test]
fn undo_and_redo_keep_private_files_private() {
    use std::os::unix::fs::PermissionsExt;
    let env = Env::plain();
    std::fs::write(env.path().join("key.pem"), "k1\n").expect("write");
    std::fs::set_permissions(env.path().join("key.pem"), PermissionsExt::from_mode(0o600))
        .expect("chmod");
    under_umask_077(
        &env,
        &[
            "exec",
            "--",
            "sh",
            "-c",
            "echo k2 > key.pem; echo n > new.txt",
        ],
    );
    assert_eq!(permissions(&env, "new.txt"), 0o600);
    under_umask_077(&env, &["undo"]);
    assert_eq!(
        std::fs::read_to_string(env.path().join("key.pem")).expect("read"),
        "k1\n"
    );
    assert_eq!(permissions(&env, "key.pem"), 0o600);
    assert!(!env.path().join("new.txt").exists());
    under_umask_077(&env, &["redo"]);
    assert_eq!(
        std::fs::read_to_string(env.path().join("key.pem")).expect("read"),
        "k2\n"
    );
    assert_eq!(
        (permissions(&env, "key.pem"), permissions(&env, "new.txt")),
        (0o600, 0o600)
    );
}

/// SPEC 7: an `exec` while the session is reverted discards the hidden turn first (OpenCode's cleanup),
/// and says so: on stderr, and as `discardedMessages` in `--json`; `redo` then has nothing to bring back.
#[test]
fn an_exec_after_undo_says_the_undone_turn_is_discarded() {
    let env = Env::plain();
    env.exec_sh("printf 'a\\n' > a.txt");
    env.exec_sh("printf 'b\\n' > b.txt");
    env.ok(&["undo"]);
    let output = env
        .rewind(&["exec", "--", "sh", "-c", "printf 'c\\n' > c.txt"])
        .output()
        .expect("runs");
    assert!(output.status.success(), "{output:?}");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("its 2 hidden messages were discarded (as OpenCode does)")
            && stderr.contains("`rewind redo` can no longer bring them back"),
        "{stderr}"
    );
    let next = env.json(&["exec", "--", "sh", "-c", "printf 'd\\n' > d.txt"]);
    assert_eq!(next["discardedMessages"], 0, "{next}");
    env.ok(&["undo"]);
    let again = env.json(&["exec", "--", "sh", "-c", "printf 'e\\n' > e.txt"]);
    assert_eq!(again["discardedMessages"], 2, "{again}");
    assert!(
        !env.path().join("b.txt").exists(),
        "the files stay as the undo left them"
    );
    assert!(!env.path().join("d.txt").exists());
}

/// A refused `exec` changes nothing, also on a reverted session: a step the snapshot store would refuse
/// (here the worktree is over the file-count cap) is refused before the undone turn is discarded, so
/// `redo` still brings it back. (It used to discard first, and say so; found by a black-box run.)
#[test]
fn an_exec_that_cannot_begin_after_undo_discards_nothing() {
    let env = Env::plain();
    env.exec_sh("printf 'a\\n' > a.txt");
    env.exec_sh("printf 'b\\n' > b.txt");
    env.ok(&["undo"]);
    std::fs::write(env.path().join("c.txt"), "c\n").expect("write");
    let log = env.json(&["log"]);
    let output = env
        .rewind(&["--file-cap", "1", "exec", "--", "touch", "ran"])
        .output()
        .expect("runs");
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!stderr.contains("discarded"), "{stderr}");
    assert!(stderr.contains("file"), "says why: {stderr}");
    assert!(!env.path().join("ran").exists(), "the command did not run");
    assert_eq!(env.json(&["log"]), log, "nothing was recorded or discarded");
    env.ok(&["redo"]);
    assert_eq!(
        std::fs::read_to_string(env.path().join("b.txt")).expect("read"),
        "b\n"
    );
}

/// A directory that was empty before a turn is there, empty, after the turn is undone, and after a turn that
/// emptied it is undone and redone: git trees hold no empty directory, so each snapshot's record names the
/// empty directories its state had. A directory the turn made goes with the turn.
#[test]
fn undo_and_redo_keep_a_directory_that_was_empty_before_the_turn() {
    let env = Env::plain();
    let dir = |rel: &str| env.path().join(rel);
    std::fs::create_dir_all(dir("logs/today")).expect("mkdir");
    env.exec_sh("printf 'x\\n' > logs/today/x.txt; mkdir made; printf 'y\\n' > made/y.txt");
    env.ok(&["undo"]);
    assert!(dir("logs/today").is_dir(), "logs/today was there, empty");
    assert!(!dir("logs/today/x.txt").exists());
    assert!(!dir("made").exists(), "the turn made it");
    env.ok(&["redo"]);
    assert!(dir("logs/today/x.txt").is_file() && dir("made/y.txt").is_file());

    env.exec_sh("rm logs/today/x.txt");
    env.ok(&["undo"]);
    assert!(dir("logs/today/x.txt").is_file());
    env.ok(&["redo"]);
    assert!(!dir("logs/today/x.txt").exists());
    assert!(
        dir("logs/today").is_dir(),
        "the turn left logs/today empty, and so does its redo"
    );
}

/// A symlink that points at itself (`sub -> sub`) where a directory was: after the user removed the
/// directory the undo brought back, the redo looked at `sub/sub` through the new symlink and failed on
/// the loop (ELOOP) every time, so the session could go neither forward nor back (found by a black-box
/// run). A path below a looping symlink is one where nothing stands.
#[test]
fn a_symlink_to_itself_where_a_directory_was_does_not_stick_the_session() {
    let env = Env::plain();
    env.exec_sh("mkdir sub; printf 'x\\n' > sub/sub");
    env.exec_sh("rm -rf sub; ln -s sub sub");
    let after = env.state();
    env.ok(&["undo"]);
    std::fs::remove_dir_all(env.path().join("sub")).expect("rm -rf sub");
    env.ok(&["redo"]);
    assert_state(&env, &after, "after the redo");
    env.ok(&["undo"]);
    assert_eq!(
        std::fs::read_to_string(env.path().join("sub/sub")).expect("read"),
        "x\n"
    );
}

/// A directory a turn made with a file in it goes when the turn is undone, also after a later turn
/// emptied it and was undone first: the second undo starts by putting that later turn's state back (where
/// the directory was there, empty), and the file it then deletes is already gone; the directories its
/// deletion left empty went with it (found by a black-box run).
#[test]
fn undoing_two_turns_removes_a_directory_the_first_made_and_the_second_emptied() {
    let env = Env::plain();
    std::fs::write(env.path().join("base"), "base\n").expect("write");
    let before = env.state();
    env.exec_sh("mkdir -p d/s; printf '1\\n' > d/s/f");
    env.exec_sh("rm d/s/f; printf '2\\n' > base");
    env.ok(&["undo"]);
    assert!(env.path().join("d/s/f").is_file());
    env.ok(&["undo"]);
    assert_state(&env, &before, "after undoing both turns");
    assert!(
        !env.path().join("d").exists(),
        "d was made by the first turn"
    );
}

/// `log --session` of a session whose directory was moved away still shows its messages, without the
/// steps' files (their counts come from that directory's snapshot store), and says why, exiting 0; with
/// the directory back, the files are shown again.
#[test]
fn log_of_a_session_whose_directory_is_gone_shows_it_without_its_files() {
    let env = Env::git_checkout();
    env.exec_sh("printf 'two\\n' > a.txt");
    let log = env.json(&["log"]);
    let id = log["sessionID"].as_str().expect("session id").to_owned();
    let files = |log: &serde_json::Value| -> Vec<serde_json::Value> {
        log["messages"]
            .as_array()
            .expect("messages")
            .iter()
            .flat_map(|m| m["steps"].as_array().cloned().unwrap_or_default())
            .map(|step| step["files"].clone())
            .collect()
    };
    let recorded = files(&log);
    assert_eq!(recorded.len(), 1, "{log:#}");
    assert_eq!(recorded[0][0]["file"], "a.txt", "{log:#}");

    let elsewhere = tempfile::TempDir::new().expect("dir");
    let moved = env.path().with_extension("moved");
    std::fs::rename(env.path(), &moved).expect("move the worktree away");
    let json = env
        .rewind_in(elsewhere.path(), &["--json", "log", "--session", &id])
        .output()
        .expect("runs");
    let text = env
        .rewind_in(elsewhere.path(), &["log", "--session", &id])
        .output()
        .expect("runs");
    // `undo` cannot revert its files, and says what to do (black-box: the store's error named the path
    // and no way out).
    let undo = env
        .rewind_in(elsewhere.path(), &["undo", "--session", &id])
        .output()
        .expect("runs");
    std::fs::rename(&moved, env.path()).expect("move the worktree back");
    let undo_error = String::from_utf8_lossy(&undo.stderr);
    assert_eq!(undo.status.code(), Some(1), "{undo_error}");
    assert!(
        undo_error.contains("no longer exists") && undo_error.contains("rewind gc --older-than"),
        "{undo_error}"
    );

    let stderr = String::from_utf8_lossy(&json.stderr);
    assert!(json.status.success(), "{stderr}");
    assert!(stderr.contains("no longer exists"), "{stderr}");
    let gone: serde_json::Value = serde_json::from_slice(&json.stdout).expect("JSON");
    assert_eq!(gone["sessionID"], id);
    assert_eq!(files(&gone), vec![serde_json::Value::Null], "{gone:#}");
    let stdout = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.status.success(),
        "{}",
        String::from_utf8_lossy(&text.stderr)
    );
    assert!(
        stdout.contains("[step stop: files not shown, the directory is gone]"),
        "{stdout}"
    );

    assert_eq!(files(&env.json(&["log", "--session", &id])), recorded);

    // Replaced by a symlink to where it went, the directory resolves elsewhere: the store refuses to diff
    // there, and `log` still shows the session, without the files, and says why.
    std::fs::rename(env.path(), &moved).expect("move the worktree away");
    std::os::unix::fs::symlink(&moved, env.path()).expect("symlink");
    let json = env
        .rewind_in(elsewhere.path(), &["--json", "log", "--session", &id])
        .output()
        .expect("runs");
    std::fs::remove_file(env.path()).expect("remove the symlink");
    std::fs::rename(&moved, env.path()).expect("move the worktree back");
    let stderr = String::from_utf8_lossy(&json.stderr);
    assert!(json.status.success(), "{stderr}");
    assert!(stderr.contains("cannot be diffed"), "{stderr}");
    let undiffable: serde_json::Value = serde_json::from_slice(&json.stdout).expect("JSON");
    assert_eq!(
        files(&undiffable),
        vec![serde_json::Value::Null],
        "{undiffable:#}"
    );
}

/// A worktree whose name holds a newline is shown on one line, quoted, by `log` and `status`.
#[test]
fn a_worktree_name_with_a_newline_is_one_quoted_line_in_log_and_status() {
    let env = Env::plain();
    let worktree = env.path().join("new\nline");
    std::fs::create_dir_all(&worktree).expect("mkdir");
    let run = |args: &[&str]| {
        let output = env.rewind_in(&worktree, args).output().expect("runs");
        assert!(output.status.success(), "{output:?}");
        String::from_utf8(output.stdout).expect("UTF-8")
    };
    run(&["exec", "--", "sh", "-c", "printf 'x\\n' > f.txt"]);
    let log = run(&["log"]);
    let first = log.lines().next().expect("a first line");
    assert!(first.ends_with("/new\\nline\")"), "{log}");
    let status = run(&["status"]);
    let line = status
        .lines()
        .find(|line| line.starts_with("directory"))
        .expect("directory line");
    assert!(line.ends_with("/new\\nline\""), "{status}");
}

/// `--dry-run` of `undo`, `redo`, `revert` and `unrevert` changes nothing (files, session, warnings) and
/// lists exactly what the command then does: each file it writes or deletes, as the worktree before and
/// after says (the oracle), through a revert, a re-revert from a reverted session, a redo that re-reverts,
/// the redo that unreverts, an explicit revert and unrevert.
#[test]
fn a_dry_run_changes_nothing_and_lists_what_the_command_then_does() {
    let env = Env::plain();
    std::fs::write(env.path().join("a.txt"), "a\n").expect("write");
    std::fs::write(env.path().join("b.txt"), "b\n").expect("write");
    env.exec_sh("echo a2 > a.txt; rm b.txt; mkdir d; echo c > d/c.txt");
    env.exec_sh("echo a3 > a.txt; chmod +x d/c.txt");
    let log = env.json(&["log"]);
    let id = |at: usize| {
        log["messages"][at]["id"]
            .as_str()
            .expect("a message")
            .to_owned()
    };
    // The first turn's user message; the second turn's assistant message, which a revert moves back to
    // its user message (SPEC 5).
    let (first, second_assistant) = (id(0), id(3));
    let root = env.path().canonicalize().expect("canonical");
    let steps: [&[&str]; 8] = [
        &["undo"],
        &["undo"],
        &["redo"],
        &["redo"],
        &["revert", &first],
        &["unrevert"],
        &["revert", &second_assistant],
        &["unrevert"],
    ];
    for command in steps {
        dry_run_lists_what_follows(&env, &root, command);
    }
    // Refused as the command is: nothing left to redo.
    let refused = env.fails(&["redo", "--dry-run"]);
    assert!(refused.contains("nothing to redo"), "{refused}");
}

/// Runs `command` with `--dry-run` and checks that it changed nothing (the worktree, `log --json`), then
/// runs it and checks that the dry run listed exactly what it did (each file written or deleted, as the
/// worktree before and after says) and the same action and revert point as the command's own JSON.
fn dry_run_lists_what_follows(env: &Env, root: &std::path::Path, command: &[&str]) {
    let before = env.state();
    let log = env.json(&["log"]);
    let dry = env.json(&[command, &["--dry-run"]].concat());
    assert_eq!(env.state(), before, "{command:?} --dry-run changed files");
    assert_eq!(
        env.json(&["log"]),
        log,
        "{command:?} --dry-run changed the session"
    );
    let (mut listed, mut kept) = (std::collections::BTreeMap::new(), Vec::new());
    for f in dry["files"].as_array().expect("files") {
        let file = f["file"].as_str().expect("file");
        let rel = std::path::Path::new(file)
            .strip_prefix(root)
            .expect("inside the worktree");
        let rel = rel.to_str().expect("utf-8").to_owned();
        match f["action"].as_str().expect("action") {
            "keep" => kept.push(rel),
            action => {
                listed.insert(rel, action.to_owned());
            }
        }
    }
    let real = env.json(command);
    let after = env.state();
    for path in &kept {
        assert_eq!(
            before.get(path),
            after.get(path),
            "{command:?} changed {path}, listed as kept"
        );
    }
    let done: std::collections::BTreeMap<String, String> = before
        .keys()
        .chain(after.keys())
        .filter(|path| before.get(*path) != after.get(*path))
        .map(|path| {
            let action = if after.contains_key(path) {
                "write"
            } else {
                "delete"
            };
            (path.clone(), action.to_owned())
        })
        .collect();
    assert!(!done.is_empty(), "{command:?} changed no file");
    assert_eq!(listed, done, "{command:?}: {dry:#}");
    // What it would do is what it does: `revert` to the point the command stores, or `unrevert`.
    assert_eq!(dry["action"], real["action"], "{command:?}: {dry:#}");
    if real["action"] == "revert" {
        assert_eq!(dry["messageID"], real["revert"]["messageID"], "{command:?}");
        assert_eq!(dry["partID"], real["revert"]["partID"], "{command:?}");
    }
}

/// `--dry-run` where the undo of the current revert meets the user's changes made while reverted: a file
/// ignored since, which the unrevert leaves (the preview said `delete`), and a user's edit of a file the
/// undo puts back before the new revert keeps it as untracked when its step began (the preview said
/// `keep`, hiding the overwrite). Dry-run fuzz, D4 and D7.
#[test]
fn a_dry_run_from_a_reverted_session_lists_what_the_undo_of_its_revert_does() {
    let env = Env::plain();
    let root = env.path().canonicalize().expect("canonical");
    std::fs::create_dir(env.path().join("sub")).expect("mkdir");
    std::fs::write(env.path().join("sub/c.txt"), "c\n").expect("write");
    env.exec_sh("rm sub/c.txt; echo a2 > a.txt");
    env.ok(&["undo"]);
    std::fs::write(env.path().join(".gitignore"), "sub/\n").expect("write");
    dry_run_lists_what_follows(&env, &root, &["redo"]);
    assert!(env.path().join("sub/c.txt").is_file(), "left as it is");

    let env = Env::plain();
    let root = env.path().canonicalize().expect("canonical");
    std::fs::write(env.path().join(".gitignore"), ".env\n").expect("write");
    std::fs::write(env.path().join(".env"), "SECRET=orig\n").expect("write");
    env.exec_sh("echo a2 > a.txt; : > .gitignore");
    env.exec_sh("echo SECRET=turn2 > .env");
    env.ok(&["undo"]);
    std::fs::write(env.path().join(".env"), "SECRET=mine\n").expect("write");
    dry_run_lists_what_follows(&env, &root, &["undo"]);
    assert_eq!(
        std::fs::read_to_string(env.path().join(".env")).expect("read"),
        "SECRET=turn2\n"
    );
}

/// `--dry-run` names a file the undo replaces on its way: after the turn that edited `src/main.rs`, the
/// directory `src` was replaced by a file; the undo puts the directory back (the file is tracked content,
/// kept in the snapshot the undo takes first and named in its warning), and the dry run lists the file as
/// deleted (HTTP fuzz: the revert's preview listed only `src/main.rs`).
#[test]
fn a_dry_run_names_a_file_the_undo_replaces_on_its_way() {
    let env = Env::plain();
    let root = env.path().canonicalize().expect("canonical");
    std::fs::create_dir(env.path().join("src")).expect("mkdir");
    std::fs::write(env.path().join("src/main.rs"), "fn main() {}\n").expect("write");
    env.exec_sh("echo edited > src/main.rs");
    std::fs::remove_dir_all(env.path().join("src")).expect("rm");
    std::fs::write(env.path().join("src"), "a file now\n").expect("write");
    dry_run_lists_what_follows(&env, &root, &["undo"]);
    assert_eq!(
        std::fs::read_to_string(env.path().join("src/main.rs")).expect("read"),
        "fn main() {}\n"
    );
}

/// `--dry-run` of a revert from a reverted session, where the undo of the current revert puts back a file
/// that the new revert then replaces with a directory (a file it writes lies below): the file is listed as
/// the command leaves it: not listed (re-run fuzz H1: listed as written, the undo's own action), or, when
/// the user made a file there while reverted, deleted as `plan` names a file a write replaces.
#[test]
fn a_dry_run_names_a_file_the_undo_puts_back_and_the_revert_replaces() {
    // While reverted, `dir1` stays the directory the revert left (no file there: nothing to list), or the
    // user makes it a file (the undo overwrites it and the revert replaces it: deleted).
    for file_while_reverted in [false, true] {
        a_file_put_back_and_replaced(file_while_reverted);
    }
    // The file the undo puts back was there when the session was reverted and the user deleted it since
    // (diff review: listed as deleted, though no file stands there before the command or after it).
    let env = Env::plain();
    let root = env.path().canonicalize().expect("canonical");
    let src = env.path().join("src");
    std::fs::write(&src, "a\n").expect("write");
    env.exec_sh("rm src; mkdir src; echo 1 > src/main.rs");
    env.exec_sh("echo 2 > src/main.rs");
    std::fs::remove_dir_all(&src).expect("rm");
    std::fs::write(&src, "c\n").expect("write");
    let users = user_messages(&env);
    env.ok(&["revert", &users[0]]);
    std::fs::remove_file(&src).expect("rm");
    dry_run_lists_what_follows(&env, &root, &["revert", &users[1]]);
    assert_eq!(
        std::fs::read_to_string(src.join("main.rs")).expect("read"),
        "1\n"
    );
}

/// The ids of the session's user messages, in order (`log --json`).
fn user_messages(env: &Env) -> Vec<String> {
    env.json(&["log"])["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .filter(|m| m["role"] == "user")
        .map(|m| m["id"].as_str().expect("id").to_owned())
        .collect()
}

fn a_file_put_back_and_replaced(file_while_reverted: bool) {
    let env = Env::plain();
    let root = env.path().canonicalize().expect("canonical");
    let dir = env.path().join("dir1");
    std::fs::create_dir(&dir).expect("mkdir");
    std::fs::write(dir.join("f2"), "x\n").expect("write");
    env.exec_sh("rm -r dir1; echo turn A > dir1");
    // The user makes it a directory again; turn B edits a file in it; the user makes it a file again.
    std::fs::remove_file(&dir).expect("rm");
    std::fs::create_dir(&dir).expect("mkdir");
    std::fs::write(dir.join("f2"), "user\n").expect("write");
    env.exec_sh("echo turn B > dir1/f2");
    std::fs::remove_dir_all(&dir).expect("rm");
    std::fs::write(&dir, "the user's file\n").expect("write");
    let users = user_messages(&env);
    env.ok(&["revert", &users[0]]);
    if file_while_reverted {
        std::fs::remove_dir_all(&dir).expect("rm");
        std::fs::write(&dir, "made while reverted\n").expect("write");
    }
    dry_run_lists_what_follows(&env, &root, &["revert", &users[1]]);
    assert_eq!(
        std::fs::read_to_string(dir.join("f2")).expect("read"),
        "user\n"
    );
}

/// A step of many files is one line of the text `log` that names its first 20 and says how many more
/// there are (black-box: a 20,000-file step printed every name on one line); `--json` lists them all.
#[test]
fn log_names_the_first_files_of_a_big_step_and_counts_the_rest() {
    let env = Env::plain();
    env.exec_sh("for i in $(seq 1 25); do printf '%s\\n' $i > f$i.txt; done");
    let log = env.ok(&["log"]);
    let line = log
        .lines()
        .find(|line| line.contains("[step "))
        .expect("the step's line");
    assert_eq!(line.matches(".txt +1 -0").count(), 20, "{line}");
    assert!(
        line.ends_with(", … and 5 more files (`--json` lists them all)]"),
        "{line}"
    );
    let json = env.json(&["log"]);
    let files = json["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .flat_map(|m| m["steps"].as_array().cloned().unwrap_or_default())
        .map(|step| step["files"].as_array().map_or(0, Vec::len))
        .sum::<usize>();
    assert_eq!(files, 25);
}

/// A SQLite database given inside the project (`--database-url sqlite://rewind.db`, taken from the `-C`
/// directory as the README says) is rewind's own: its steps do not record it, and undo and redo never
/// write it. Black-box: each undo wrote an old copy of its WAL over the live one; after two, the session
/// had no messages, `redo` found nothing to redo, and the database was later found malformed. Also when
/// its path goes through a directory that does not exist and back (`missing/../rewind.db`, which SQLite
/// opens by name as `rewind.db`; black-box: its `-wal` and `-shm` were recorded and reverted).
#[test]
fn a_database_inside_the_worktree_is_never_recorded_nor_reverted() {
    for (url, database) in [
        ("sqlite://rewind.db?mode=rwc", "rewind.db"),
        ("sqlite://missing/../rewind.db?mode=rwc", "rewind.db"),
        // SQLite follows the link, then goes up from where it leads (review).
        ("sqlite://link/../rewind.db?mode=rwc", "sub/rewind.db"),
    ] {
        database_in_the_worktree(url, database);
    }
}

fn database_in_the_worktree(url: &str, database: &str) {
    let env = Env::plain();
    std::fs::write(env.path().join("a"), "a\n").expect("write");
    std::fs::create_dir_all(env.path().join("sub/inner")).expect("mkdir");
    std::os::unix::fs::symlink("sub/inner", env.path().join("link")).expect("symlink");
    let db = ["--database-url", url];
    fn with_db<'a>(db: &[&'a str], args: &[&'a str]) -> Vec<&'a str> {
        [db, args].concat()
    }
    env.ok(&with_db(&db, &["exec", "--", "sh", "-c", "echo b >> a"]));
    env.ok(&with_db(&db, &["exec", "--", "sh", "-c", "echo c >> a"]));
    assert!(
        env.path().join(database).is_file(),
        "{url}: the database is in the worktree, at {database}"
    );
    let log = env.json(&with_db(&db, &["log"]));
    let recorded: Vec<&str> = log["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .flat_map(|m| m["steps"].as_array().into_iter().flatten())
        .flat_map(|step| step["files"].as_array().into_iter().flatten())
        .filter_map(|f| f["file"].as_str())
        .collect();
    assert_eq!(recorded, ["a", "a"], "{url}: {log}");
    let a = env.path().join("a");
    let read = || std::fs::read_to_string(&a).expect("read a");
    env.ok(&with_db(&db, &["undo"]));
    assert_eq!(read(), "a\nb\n");
    env.ok(&with_db(&db, &["undo"]));
    assert_eq!(read(), "a\n");
    let log = env.json(&with_db(&db, &["log"]));
    assert_eq!(
        log["messages"].as_array().map(Vec::len),
        Some(4),
        "{url}: {log}"
    );
    env.ok(&with_db(&db, &["redo"]));
    env.ok(&with_db(&db, &["redo"]));
    assert_eq!(read(), "a\nb\nc\n");
}

/// The text `diff` keeps a line's `\r`: undone, a turn that changed a CRLF line end to LF shows as
/// `-x\r` / `+x` (the session diff goes from before the turn to after it), a faithful patch (black-box: both lines printed as `x`, so `rewind diff > file` lost the change).
#[test]
fn the_text_diff_keeps_carriage_returns() {
    let env = Env::plain();
    std::fs::write(env.path().join("crlf.txt"), "x\r\ny\r\n").expect("write");
    env.exec_sh("printf 'x\\ny\\r\\n' > crlf.txt");
    env.ok(&["undo"]);
    let diff = env.ok(&["diff"]);
    assert!(diff.contains("\n-x\r\n+x\n y\r\n"), "{diff:?}");
}

/// A "dotfiles" repository (`GIT_DIR=.cfg`, its git dir inside the worktree under another name): a step
/// that commits is undone without touching the git dir, so its commits stay, whether or not `GIT_DIR` is
/// set for rewind (black-box: `undo` rewound the user's refs and deleted the commit's objects).
#[test]
fn undo_leaves_a_git_dir_under_another_name_alone() {
    let env = Env::plain();
    let git_dir = env.path().join(".cfg");
    let with_git_env = |command: &mut std::process::Command| {
        command
            .env("GIT_DIR", &git_dir)
            .env("GIT_WORK_TREE", env.path())
            .env("GIT_AUTHOR_NAME", "t")
            .env("GIT_AUTHOR_EMAIL", "t@t")
            .env("GIT_COMMITTER_NAME", "t")
            .env("GIT_COMMITTER_EMAIL", "t@t");
    };
    let git = |args: &[&str]| {
        let mut command = std::process::Command::new("git");
        command.args(args).current_dir(env.path());
        with_git_env(&mut command);
        let output = command.output().expect("git");
        assert!(output.status.success(), "git {args:?}: {output:?}");
        String::from_utf8_lossy(&output.stdout).into_owned()
    };
    let init = std::process::Command::new("git")
        .args(["init", "-q", "--bare"])
        .arg(&git_dir)
        .status()
        .expect("git init");
    assert!(init.success());
    std::fs::write(env.path().join("a.txt"), "a\n").expect("write");
    git(&["add", "a.txt"]);
    git(&["commit", "-qm", "one"]);
    let mut step = env.process_in(
        env.path(),
        &[
            "exec",
            "--",
            "sh",
            "-c",
            "echo b >> a.txt && git add a.txt && git commit -qm two",
        ],
    );
    with_git_env(&mut step);
    let stepped = step.output().expect("exec");
    assert!(stepped.status.success(), "{stepped:?}");
    assert_eq!(git(&["log", "--format=%s"]), "two\none\n");
    let log = env.json(&["log"]);
    let files: Vec<String> = log["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|m| m["steps"].as_array().cloned().unwrap_or_default())
        .flat_map(|s| s["files"].as_array().cloned().unwrap_or_default())
        .filter_map(|f| f["file"].as_str().map(str::to_owned))
        .collect();
    assert_eq!(
        files,
        ["a.txt"],
        "the step records only the worktree's file: {log}"
    );
    let before = crate::support::state(&git_dir);
    // Without GIT_DIR in rewind's environment too.
    env.ok(&["undo"]);
    assert_eq!(
        std::fs::read_to_string(env.path().join("a.txt")).expect("read"),
        "a\n"
    );
    assert!(
        crate::support::state(&git_dir) == before,
        "the git dir is as the user's commit left it"
    );
    assert_eq!(git(&["log", "--format=%s"]), "two\none\n");
    env.ok(&["redo"]);
    assert_eq!(
        std::fs::read_to_string(env.path().join("a.txt")).expect("read"),
        "a\nb\n"
    );
    assert!(crate::support::state(&git_dir) == before);
}

/// One data directory, however it is spelled (`..`, a symlink, a relative path), is one database with
/// one snapshot store per worktree: a turn recorded through one spelling is undone and redone through
/// the others (black-box: each spelling made a store of its own, and `undo` failed with "snapshot object
/// missing").
#[test]
fn every_spelling_of_the_data_dir_reaches_the_same_snapshots() {
    let env = Env::plain();
    let data = std::fs::canonicalize(env.data.path()).expect("canonical");
    let parent = data.parent().expect("parent");
    let name = data.file_name().expect("name").to_str().expect("UTF-8");
    let link = tempfile::TempDir::new().expect("a place for a symlink");
    std::os::unix::fs::symlink(&data, link.path().join("data")).expect("symlink");
    let spelled = [
        data.join("..").join(name),
        link.path().join("data"),
        data.clone(),
    ];
    let rewind = |data_dir: &std::path::Path, args: &[&str]| {
        let output = env
            .bare()
            .arg("--data-dir")
            .arg(data_dir)
            .arg("-C")
            .arg(env.path())
            .args(args)
            .output()
            .expect("runs");
        assert!(output.status.success(), "{data_dir:?} {args:?}: {output:?}");
    };
    std::fs::write(env.path().join("a.txt"), "v1\n").expect("write");
    rewind(&spelled[0], &["exec", "--", "sh", "-c", "echo v2 > a.txt"]);
    let read = || std::fs::read_to_string(env.path().join("a.txt")).expect("read");
    rewind(&spelled[1], &["undo"]);
    assert_eq!(read(), "v1\n");
    rewind(&spelled[2], &["redo"]);
    assert_eq!(read(), "v2\n");
    let stores = std::fs::read_dir(parent.join(name).join("snapshot"))
        .expect("stores")
        .count();
    assert_eq!(stores, 1, "one store");
}

/// `exec` says which of the step's files `undo` would leave as they are, and undo does exactly that: a
/// `.env` that was ignored when the step began and that the step un-ignored and changed is kept (it may
/// have existed then), while the rest of the step is taken back (black-box audit: "`rewind undo` takes it
/// back" was printed, with no word of the `.env`).
#[test]
fn exec_names_the_files_undo_would_keep_and_undo_keeps_exactly_those() {
    let env = Env::git_checkout();
    std::fs::write(env.path().join(".gitignore"), ".env\n").expect("write");
    std::fs::write(env.path().join(".env"), "SECRET=orig\n").expect("write");
    crate::support::git(env.path(), &["add", ".gitignore"]);
    crate::support::git(env.path(), &["commit", "-qm", "ignore .env"]);
    let report = env.json(&[
        "exec",
        "--",
        "sh",
        "-c",
        "rm .gitignore; echo SECRET=changed > .env; echo new > n.txt",
    ]);
    let root = env.path().canonicalize().expect("canonical");
    let dotenv = root.join(".env").to_str().expect("utf-8").to_owned();
    let keeps: Vec<&str> = report["undoKeeps"]
        .as_array()
        .expect("undoKeeps")
        .iter()
        .map(|k| k["file"].as_str().expect("file"))
        .collect();
    assert_eq!(keeps, [dotenv.as_str()], "{report:#}");
    assert!(
        report["undoKeeps"][0]["reason"]
            .as_str()
            .is_some_and(|why| why.contains("not tracked content when the step began")),
        "{report:#}"
    );

    let output = env
        .rewind(&["exec", "--", "sh", "-c", "echo more >> n.txt"])
        .output()
        .expect("runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("`rewind undo` takes it back"), "{stderr}");
    assert!(
        !stderr.contains("except"),
        "nothing kept this time: {stderr}"
    );

    env.ok(&["undo"]);
    env.ok(&["undo"]);
    assert_eq!(
        std::fs::read_to_string(env.path().join(".env")).expect(".env"),
        "SECRET=changed\n",
        "kept, as exec said"
    );
    assert!(
        env.path().join(".gitignore").exists(),
        "the rest is taken back"
    );
    assert!(!env.path().join("n.txt").exists(), "the rest is taken back");
}

/// Two `rewind undo`s (or two `rewind redo`s), the second started a little after the first: each one that
/// succeeds moves the session one turn, so the worktree is the state as many turns back (or forward) as
/// succeeded; one that fails does so because the other held the session, and says so. Before
/// `HistorySeen`, a second undo that read the session before the first stored its revert, and took the
/// session after, reverted to the same turn and reported success for a turn it did not undo. That window
/// is the first command's commit falling between the second's read and its operation, so the second is
/// started at every delay from 0 to 40 ms after the first, undoing and redoing in turn.
#[test]
fn two_undos_or_redos_run_together_move_as_many_turns_as_succeed() {
    let env = Env::plain();
    let mut states = vec![env.state()];
    for turn in 0..12 {
        env.exec_sh(&format!("printf '{turn}\\n' > f{turn}.txt"));
        states.push(env.state());
    }
    let last = states.len() - 1;
    let together = |command: &str, delay: u64| -> usize {
        let spawn = || {
            env.process_in(env.path(), &[command])
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .expect("spawns")
        };
        let first = spawn();
        std::thread::sleep(std::time::Duration::from_millis(delay));
        let second = spawn();
        let mut done = 0;
        for child in [first, second] {
            let output = child.wait_with_output().expect("runs");
            let stderr = String::from_utf8_lossy(&output.stderr);
            if output.status.success() {
                done += 1;
            } else {
                assert!(
                    ["in progress", "try again"]
                        .iter()
                        .any(|why| stderr.contains(why)),
                    "`rewind {command}` failed for another reason than the other command: {stderr}"
                );
            }
        }
        done
    };
    let (mut at, mut down) = (last, true);
    for delay in 0..=40 {
        if (down && at < 2) || (!down && at + 2 > last) {
            down = !down;
        }
        let command = if down { "undo" } else { "redo" };
        let moved = together(command, delay);
        at = if down { at - moved } else { at + moved };
        assert_state(
            &env,
            &states[at],
            &format!("after two `{command}`s {delay} ms apart, {moved} of which succeeded"),
        );
    }
}

/// Two `undo`s started at the same moment undo two turns, as README says: the one that finds the other
/// running waits for it and chooses its turn again (review: it failed as busy, 5 times in 5). Repeated, so
/// that the two meet at least once.
#[test]
fn two_undos_run_at_once_undo_two_turns() {
    for round in 0..3 {
        let env = Env::plain();
        for line in ["1", "2", "3", "4"] {
            env.exec_sh(&format!("echo {line} >> a"));
        }
        let children: Vec<_> = (0..2)
            .map(|_| {
                env.process_in(env.path(), &["undo"])
                    .stdout(std::process::Stdio::null())
                    .stderr(std::process::Stdio::piped())
                    .spawn()
                    .expect("start undo")
            })
            .collect();
        for child in children {
            let output = child.wait_with_output().expect("undo ends");
            assert!(
                output.status.success(),
                "round {round}: {}",
                String::from_utf8_lossy(&output.stderr)
            );
        }
        assert_eq!(
            std::fs::read_to_string(env.path().join("a")).expect("read"),
            "1\n2\n",
            "round {round}: two turns undone"
        );
    }
}

/// OpenCode's test 28 through the user's own git configuration, as git finds it: the global excludes file
/// at its XDG default (`$XDG_CONFIG_HOME/git/ignore`), named by `core.excludesFile` in `~/.gitconfig`, or in
/// the file `GIT_CONFIG_GLOBAL` names (checklist review: the adapter's tests hand it the path). Each time
/// `git check-ignore`, run with the same environment, is the oracle: a file it ignores is not in the
/// turn's files, and `undo` leaves it as the command left it.
#[test]
fn the_global_excludes_file_is_found_where_git_finds_it() {
    /// Where the global excludes file is named.
    enum Named {
        ByDefault,
        InHomeGitconfig,
        InGitConfigGlobal,
    }
    for named in [
        Named::ByDefault,
        Named::InHomeGitconfig,
        Named::InGitConfigGlobal,
    ] {
        let env = Env::git_checkout();
        let home = env.config_home.path();
        let excludes = home.join("my-excludes");
        let mut variables: Vec<(&str, std::path::PathBuf)> = Vec::new();
        match named {
            Named::ByDefault => {
                std::fs::create_dir_all(home.join("git")).expect("mkdir");
                std::fs::write(home.join("git/ignore"), "*.env\n").expect("write");
            }
            Named::InHomeGitconfig => {
                std::fs::write(&excludes, "*.env\n").expect("write");
                let config = format!("[core]\n\texcludesFile = {}\n", excludes.display());
                std::fs::write(home.join(".gitconfig"), config).expect("write");
            }
            Named::InGitConfigGlobal => {
                std::fs::write(&excludes, "*.env\n").expect("write");
                let file = home.join("elsewhere.gitconfig");
                let config = format!("[core]\n\texcludesFile = {}\n", excludes.display());
                std::fs::write(&file, config).expect("write");
                variables.push(("GIT_CONFIG_GLOBAL", file));
            }
        }
        std::fs::write(env.path().join("secret.env"), "KEY=1\n").expect("write");
        let ignored_by_git = std::process::Command::new("git")
            .current_dir(env.path())
            .env("HOME", home)
            .env("XDG_CONFIG_HOME", home)
            .envs(variables.iter().map(|(k, v)| (*k, v)))
            .args(["check-ignore", "-q", "secret.env"])
            .status()
            .expect("git check-ignore")
            .success();
        assert!(ignored_by_git, "the oracle ignores it");
        let output = env
            .rewind(&[
                "--json",
                "exec",
                "--",
                "sh",
                "-c",
                "printf 'KEY=2\\n' > secret.env; printf 'changed\\n' > a.txt",
            ])
            .envs(variables.iter().map(|(k, v)| (*k, v)))
            .output()
            .expect("runs");
        assert!(output.status.success(), "{output:?}");
        let report: serde_json::Value = serde_json::from_slice(&output.stdout).expect("JSON");
        let files: Vec<&str> = report["files"]
            .as_array()
            .expect("files")
            .iter()
            .filter_map(|file| file.as_str())
            .collect();
        assert!(
            files.len() == 1 && files[0].ends_with("/a.txt"),
            "{files:?}"
        );
        let undo = env
            .rewind(&["undo"])
            .envs(variables.iter().map(|(k, v)| (*k, v)))
            .output()
            .expect("runs");
        assert!(undo.status.success(), "{undo:?}");
        assert_eq!(
            std::fs::read_to_string(env.path().join("a.txt")).expect("read"),
            "committed\n"
        );
        assert_eq!(
            std::fs::read_to_string(env.path().join("secret.env")).expect("read"),
            "KEY=2\n",
            "an ignored file is not undone"
        );
    }
}
