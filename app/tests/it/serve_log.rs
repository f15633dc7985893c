//! `rewind serve` writes one log line per revert and unrevert (issue 5): the session, the files written,
//! deleted and kept, and the time taken. The real binary is started on a free port with `RUST_LOG`, a turn
//! is recorded through the HTTP API with the agent's edits made on disk, and the lines on stderr are read
//! back after SIGTERM. The server runs with `-C WORKTREE` from another current directory, and the requests
//! name no directory: `-C` is the default worktree, as for every other command.

use std::io::{Read, Write};
use std::net::TcpStream;

use serde_json::{Value, json};

use crate::support::{Env, Server};

/// One HTTP/1.1 request to the server on `port`; returns the status and the JSON body.
fn request(port: u16, method: &str, path: &str, body: &Value) -> (u16, Value) {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).expect("connect to the server");
    let body = body.to_string();
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .expect("send the request");
    let mut response = String::new();
    stream
        .read_to_string(&mut response)
        .expect("read the response");
    let (head, body) = response
        .split_once("\r\n\r\n")
        .unwrap_or_else(|| panic!("a response with a body: {response:?}"));
    assert!(
        !head
            .to_ascii_lowercase()
            .contains("transfer-encoding: chunked"),
        "{head}"
    );
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("a status line: {head}"));
    let value = serde_json::from_str(body).unwrap_or_else(|e| panic!("JSON body ({e}): {body}"));
    (status, value)
}

fn post(port: u16, path: &str, body: Value) -> Value {
    let (status, value) = request(port, "POST", path, &body);
    assert_eq!(status, 200, "POST {path}: {value}");
    value
}

#[test]
fn serve_logs_each_revert_and_unrevert_with_its_file_counts_and_time() {
    let env = Env::git_checkout();
    let server = Server::start(&env, "rewind_app=info");
    let port = server.port;

    let session = post(port, "/session", json!({}));
    let id = session["id"].as_str().expect("a session id").to_owned();
    let user = post(
        port,
        &format!("/session/{id}/message"),
        json!({"parts": [{"type": "text", "text": "change three files"}]}),
    );
    let user_id = user["info"]["id"]
        .as_str()
        .expect("a message id")
        .to_owned();
    let assistant = post(
        port,
        &format!("/session/{id}/message"),
        json!({"role": "assistant"}),
    );
    let mid = assistant["info"]["id"]
        .as_str()
        .expect("a message id")
        .to_owned();
    post(
        port,
        &format!("/session/{id}/message/{mid}/step"),
        json!({}),
    );
    std::fs::write(env.path().join("new.txt"), "created by the step\n").expect("write");
    std::fs::write(env.path().join("a.txt"), "edited by the step\n").expect("write");
    std::fs::remove_file(env.path().join("README.md")).expect("delete");
    post(
        port,
        &format!("/session/{id}/message/{mid}/step/finish"),
        json!({"reason": "stop"}),
    );
    post(
        port,
        &format!("/session/{id}/revert"),
        json!({"messageID": user_id}),
    );
    assert!(!env.path().join("new.txt").exists());
    post(port, &format!("/session/{id}/unrevert"), json!({}));
    assert!(env.path().join("new.txt").exists());

    let log: Vec<String> = server.stop();
    let line_of = |what: &str| -> &String {
        log.iter()
            .find(|line| line.contains(&format!(" {what} session=")))
            .unwrap_or_else(|| panic!("no `{what}` line in the log:\n{}", log.join("\n")))
    };
    // The revert deletes the file the step created and writes back the one it edited and the one it
    // deleted; the unrevert does the opposite.
    for (what, counts) in [
        ("revert", "written=2 deleted=1 kept=0"),
        ("unrevert", "written=2 deleted=1 kept=0"),
    ] {
        let line = line_of(what);
        assert!(line.contains(&format!("session={id}")), "{line}");
        assert!(line.contains(counts), "{line}");
        let elapsed: f64 = line
            .split("elapsed_ms=")
            .nth(1)
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|ms| ms.parse().ok())
            .unwrap_or_else(|| panic!("an elapsed_ms field: {line}"));
        assert!(elapsed > 0.0, "{line}");
    }
}

/// A SIGTERM sent the moment the server says where it listens stops it cleanly (exit status 0): the
/// signals are listened for before that line is printed. Before, the handler was installed on a task
/// spawned after it, and a quick enough SIGTERM killed the server instead. Started and stopped several
/// times, as the window was short.
#[test]
fn a_sigterm_sent_as_soon_as_the_server_says_it_listens_stops_it_cleanly() {
    let env = Env::plain();
    for _ in 0..5 {
        let log = Server::start(&env, "rewind_app=info").stop();
        assert!(
            log.iter().any(|line| line.contains("stopping")),
            "the server logged its stop: {log:?}"
        );
    }
}

/// `serve --json` says where it listens as a JSON document, as every command prints JSON with `--json`
/// (black-box: it printed plain text), and its log, on a stderr that is not a terminal, has no colour
/// codes.
#[test]
fn serve_json_says_where_it_listens_as_json_and_logs_without_colour() {
    let env = Env::plain();
    let server = Server::start_with(&env, "rewind_app=info", &["--json"]);
    let first: Value = serde_json::from_str(&server.first_line).expect("a JSON document");
    assert_eq!(
        first["listening"],
        format!("http://127.0.0.1:{}", server.port)
    );
    let log = server.stop();
    assert!(!log.is_empty(), "the server logs its stop");
    assert!(log.iter().all(|line| !line.contains('\u{1b}')), "{log:?}");
}

/// A request with a wrong password is logged as refused, with the address it came from and its path, and
/// never with the password it tried (review: failed logins left no trace); one with no password at all
/// (a browser's first try) is not said at `info`; a refused `Host` is said too.
#[test]
fn serve_logs_refused_passwords_and_hosts_with_the_peer() {
    use base64::Engine as _;
    let env = Env::git_checkout();
    let server = Server::start_with(&env, "rewind_app=info", &["--password", "s3cret"]);
    let port = server.port;
    let wrong = base64::engine::general_purpose::STANDARD.encode("opencode:guess-one");
    // The raw answer to `GET /session` with the headers `headers` (each line ending in CRLF).
    let answer = |headers: &str| {
        let mut stream = TcpStream::connect(("127.0.0.1", port)).expect("connect to the server");
        write!(
            stream,
            "GET /session HTTP/1.1\r\n{headers}Connection: close\r\n\r\n"
        )
        .expect("send the request");
        let mut response = String::new();
        stream
            .read_to_string(&mut response)
            .expect("read the response");
        response
    };
    let host = format!("Host: 127.0.0.1:{port}\r\n");
    for (headers, expected) in [
        (format!("{host}Authorization: Basic {wrong}\r\n"), 401),
        (host.clone(), 401),
        ("Host: rebound.example\r\n".to_owned(), 403),
    ] {
        let response = answer(&headers);
        assert!(
            response.starts_with(&format!("HTTP/1.1 {expected}")),
            "{response}"
        );
    }
    let log = server.stop();
    let wrong_lines: Vec<&String> = log
        .iter()
        .filter(|line| line.contains("wrong password"))
        .collect();
    assert_eq!(wrong_lines.len(), 1, "{log:#?}");
    assert!(
        wrong_lines[0].contains("peer=127.0.0.1:") && wrong_lines[0].contains("/session"),
        "{log:#?}"
    );
    assert!(
        log.iter()
            .all(|line| !line.contains("guess-one") && !line.contains("s3cret")),
        "{log:#?}"
    );
    assert!(
        log.iter()
            .any(|line| line.contains("refused a request") && line.contains("rebound.example")),
        "{log:#?}"
    );
}

/// `DELETE /session/:id` aborts a step this server owns before it deletes (`rewind-tests`' scenario), but
/// never one a running `rewind exec` owns: 409 naming that process, and the session stays, until the
/// command has ended.
#[test]
fn a_session_whose_step_a_running_exec_owns_is_not_deleted() {
    let env = Env::plain();
    let server = Server::start(&env, "rewind_app=info");
    let port = server.port;
    let mut exec = env.exec_waiting_for_go();
    let status = env.json(&["status"]);
    let id = status["sessions"][0]["id"]
        .as_str()
        .expect("the session's id")
        .to_owned();
    let (code, body) = request(port, "DELETE", &format!("/session/{id}"), &json!({}));
    assert_eq!(code, 409, "{body}");
    assert_eq!(body["_tag"], "SessionBusyError", "{body}");
    assert!(
        body["message"].to_string().contains("still running"),
        "{body}"
    );
    std::fs::write(env.path().join("go"), "").expect("write");
    assert!(exec.0.wait().expect("waits").success());
    let (code, body) = request(port, "GET", &format!("/session/{id}"), &json!({}));
    assert_eq!(code, 200, "the session stayed: {body}");
    let (code, body) = request(port, "DELETE", &format!("/session/{id}"), &json!({}));
    assert_eq!((code, &body), (200, &json!(true)), "{body}");
    server.stop();
}
