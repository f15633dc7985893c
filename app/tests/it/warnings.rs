//! Nothing a redo overwrites is lost: a file the user edited while the session was reverted is captured
//! before the redo puts the turn back, the warning names it with its snapshot (in the command's output and
//! in `log`), and `snapshot restore SNAPSHOT PATH` brings the user's version back.

use crate::support::Env;

#[test]
fn an_edit_made_while_reverted_is_captured_by_redo_and_can_be_restored() {
    let env = Env::plain();
    env.exec_sh("printf '1\\n' > a.txt");
    env.exec_sh("printf '2\\n' > a.txt; printf 'b\\n' > b.txt");
    env.ok(&["undo"]);
    assert!(!env.path().join("b.txt").exists());
    std::fs::write(env.path().join("b.txt"), "mine\n").expect("write");

    let redo = env.json(&["redo"]);
    assert_eq!(redo["action"], "unrevert");
    assert_eq!(
        std::fs::read_to_string(env.path().join("b.txt")).expect("read"),
        "b\n",
        "redo puts the turn's version back"
    );
    let warnings = redo["warnings"].as_array().expect("warnings");
    assert_eq!(warnings.len(), 1, "{redo:#}");
    let file = env.path().canonicalize().expect("canonical").join("b.txt");
    assert_eq!(
        warnings[0]["files"],
        serde_json::json!([file.to_str().expect("utf-8")])
    );
    let snapshot = warnings[0]["snapshot"]
        .as_str()
        .expect("snapshot")
        .to_owned();

    let log = env.json(&["log"]);
    assert_eq!(log["warnings"].as_array().expect("warnings").len(), 1);
    let text = env.ok(&["log"]);
    assert!(
        text.lines()
            .any(|l| l.contains("! ") && l.contains(&snapshot)),
        "log marks the warning: {text}"
    );

    // The absolute path the warning names is accepted as it is.
    env.ok(&[
        "snapshot",
        "restore",
        &snapshot,
        file.to_str().expect("utf-8"),
    ]);
    assert_eq!(
        std::fs::read_to_string(env.path().join("b.txt")).expect("read"),
        "mine\n"
    );
    assert_eq!(
        std::fs::read_to_string(env.path().join("a.txt")).expect("read"),
        "2\n",
        "no other file is touched"
    );
}
