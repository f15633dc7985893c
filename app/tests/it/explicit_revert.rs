//! `revert MESSAGE [--part P]` and `unrevert` with ids taken from `log --json`: the files follow SPEC
//! section 5's hidden range, checked against the states recorded before each turn.

use crate::support::{Env, assert_state, part_id};

#[test]
fn revert_to_a_message_or_a_part_and_unrevert() {
    let env = Env::git_checkout();
    let s0 = env.state();
    env.exec_sh("printf 'one\\n' >> a.txt; printf 'n\\n' > n.txt");
    let s1 = env.state();
    env.exec_sh("rm n.txt; chmod +x a.txt");
    let s2 = env.state();
    let log = env.json(&["log"]);
    let messages = log["messages"].as_array().expect("messages").clone();
    let session = log["sessionID"].as_str().expect("id").to_owned();

    // The first user message: everything is undone.
    let first = messages[0]["id"].as_str().expect("id");
    let revert = env.json(&["revert", first]);
    assert_eq!(revert["revert"]["messageID"], first);
    assert_state(&env, &s0, "revert to the first message");

    // Turn 2's step-finish part: text precedes it in its message, so the point stays inside the
    // assistant message, and the hidden range holds turn 2's patch (SPEC 5: the matched part on).
    let assistant = &messages[3];
    let finish = part_id(assistant, "step-finish");
    let assistant_id = assistant["id"].as_str().expect("id");
    let revert = env.json(&[
        "revert",
        "--session",
        &session,
        assistant_id,
        "--part",
        finish,
    ]);
    assert_eq!(revert["revert"]["messageID"], assistant_id);
    assert_eq!(revert["revert"]["partID"], finish);
    // No message is hidden whole: the assistant message keeps its parts before the point, and `log` does
    // not mark it (CLI review L5: counted 1).
    assert_eq!(revert["hiddenMessages"], 0, "{revert:#}");
    assert_state(&env, &s1, "revert to turn 2's step-finish part");
    let log = env.json(&["log"]);
    let hidden: Vec<bool> = log["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .map(|m| m["hidden"].as_bool().expect("bool"))
        .collect();
    assert_eq!(hidden, [false, false, false, true]);
    // The parts from the step-finish on are hidden, those before it are not; the text log keeps the
    // message unmarked and puts the rule after it, naming the part (black-box: it was marked `~` whole).
    let parts = log["messages"][3]["parts"].as_array().expect("parts");
    let at = parts
        .iter()
        .position(|p| p["id"] == finish)
        .expect("the part");
    assert!(at > 0, "{parts:?}");
    assert!(
        parts
            .iter()
            .enumerate()
            .all(|(i, p)| p["hidden"] == (i >= at)),
        "{parts:?}"
    );
    let text = env.ok(&["log"]);
    let lines: Vec<&str> = text.lines().collect();
    let line = lines
        .iter()
        .position(|l| l.contains(assistant_id))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(lines[line].starts_with("  "), "not marked hidden: {text}");
    // The line shows what stays of the message: not the step whose end and patch the revert hides.
    assert!(!lines[line].contains("[step"), "{text}");
    assert!(
        lines[line + 1].starts_with(&format!("── reverted from its part {finish}")),
        "{text}"
    );

    env.ok(&["unrevert", "--session", &session]);
    assert_state(&env, &s2, "unrevert");
    let stderr = env.fails(&["unrevert"]);
    assert!(stderr.contains("not reverted"), "{stderr}");
}

/// `-C B revert --session <a session of A>` acts on A, where the session lives, and says so on stderr;
/// B's files are not touched.
#[test]
fn a_session_of_another_directory_is_acted_on_where_it_lives_and_said() {
    let env = Env::plain();
    env.exec_sh("printf 'one\\n' > a.txt");
    let log = env.json(&["log"]);
    let session = log["sessionID"].as_str().expect("id").to_owned();
    let first = log["messages"][0]["id"].as_str().expect("id").to_owned();
    let other = tempfile::TempDir::new().expect("another directory");
    std::fs::write(other.path().join("b.txt"), "b\n").expect("write");
    let output = env
        .rewind_in(other.path(), &["revert", "--session", &session, &first])
        .output()
        .expect("runs");
    assert!(output.status.success(), "{output:?}");
    let stderr = String::from_utf8_lossy(&output.stderr);
    let home = std::fs::canonicalize(env.path()).expect("canonical");
    assert!(
        stderr.contains(&format!("belongs to {}", home.display())),
        "the directory acted on is named: {stderr}"
    );
    assert!(
        !env.path().join("a.txt").exists(),
        "the revert happened in the session's directory"
    );
    assert_eq!(
        std::fs::read_to_string(other.path().join("b.txt")).expect("b.txt"),
        "b\n",
        "the other directory is untouched"
    );
}
