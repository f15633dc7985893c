//! The benchmark behind `cargo xtask bench http`: latency of revert and unrevert through HTTP.
//!
//! A repository of 5,000 committed files (about 3 KB each), a session of 10 turns in which each turn
//! changes 10 files, then, repeatedly: revert to turn 1, 5 or 9 and unrevert, each timed as one HTTP
//! request to the application on a loopback port, and the same revert and unrevert called on the core
//! directly (interleaved, so load weighs on both alike), and a read of the session through HTTP (the
//! guard, which reads the session's directory too, the store and the JSON) beside the same read on the
//! core: their difference is what the HTTP layer costs a request. Prints the median and 95th percentile of
//! each.
//!
//! Then recording in a long session: a part appended to an assistant message that already holds 300 parts
//! of 60 KB, and a step finished after 40 turns of 10 such parts (24 MB), each against the same request at
//! the start of the message or session, and the user message that begins each of those turns: what a
//! request costs should not grow with what came before.
//!
//! `--stream` keeps an event stream (`GET /event`) open and read throughout, as OpenCode's client keeps one:
//! the relay then reads and publishes every event, a revert's two carrying its diff.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use rewind_app::{Application, ServerOptions, Services, Settings};
use rewind_core::model::{HolderKind, MessageId, SessionId};
use rewind_core::{RevertTarget, SnapshotPort};
use serde_json::{Value, json};

const FILES: usize = 5_000;
const TURNS: usize = 10;
const FILES_PER_TURN: usize = 10;
const TARGETS: [usize; 3] = [1, 5, 9];

fn content(seed: usize, version: usize) -> String {
    let line =
        format!("file {seed} version {version}: the quick brown fox jumps over the lazy dog\n");
    line.repeat(3 * 1024 / line.len() + 1)
}

fn path_of(index: usize) -> String {
    format!("dir{:02}/file{index:05}.txt", index % 50)
}

fn git(dir: &Path, args: &[&str]) -> Result<()> {
    let status = Command::new("git")
        .args([
            "-c",
            "user.name=bench",
            "-c",
            "user.email=bench@rewind.invalid",
        ])
        .args(args)
        .current_dir(dir)
        .status()
        .context("cannot run git")?;
    ensure!(status.success(), "git {args:?} failed");
    Ok(())
}

async fn post(client: &reqwest::Client, url: &str, body: Value) -> Result<Value> {
    let response = client.post(url).json(&body).send().await?;
    let status = response.status();
    let body: Value = response.json().await?;
    ensure!(status.is_success(), "POST {url}: {status} {body}");
    Ok(body)
}

/// Prints `what`'s median and 95th percentile, in milliseconds.
fn latency_row(what: &str, samples: &mut [Duration]) {
    println!(
        "{what:<22} {:>10.2} {:>10.2}",
        percentile(samples, 0.5),
        percentile(samples, 0.95)
    );
}

fn percentile(samples: &mut [Duration], p: f64) -> f64 {
    samples.sort();
    let index = ((samples.len() as f64 - 1.0) * p).round() as usize;
    samples[index].as_secs_f64() * 1000.0
}

#[tokio::main]
async fn main() -> Result<()> {
    let reps: usize = std::env::args()
        .skip_while(|a| a != "--reps")
        .nth(1)
        .map(|r| r.parse())
        .transpose()
        .context("--reps N")?
        .unwrap_or(20);
    let work = tempfile::tempdir()?;
    let repo = std::fs::canonicalize(work.path())?.join("repo");
    for index in 0..FILES {
        let path = repo.join(path_of(index));
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::write(path, content(index, 0))?;
    }
    git(&repo, &["init", "-q"])?;
    git(&repo, &["add", "-A"])?;
    git(&repo, &["commit", "-qm", "initial"])?;
    eprintln!("bench: {FILES} committed files in {}", repo.display());

    let mut settings = Settings::new(work.path().join("data"), &repo);
    settings.port = 0;
    // The same services in this process, to tell the core's time from the HTTP layer's.
    let direct = Services::open(&settings, HolderKind::Server).await?;
    let app = Application::build_with(
        settings,
        ServerOptions {
            cwd: Some(repo.clone()),
            ..ServerOptions::default()
        },
    )
    .await?;
    let base = format!("http://127.0.0.1:{}", app.port());
    let stop = app.shutdown_token();
    let server = tokio::spawn(app.run_until_stopped());
    let client = reqwest::Client::new();
    // `--stream`: an event stream stays open throughout and is read as fast as it comes, as a client such
    // as OpenCode's keeps one (without it the relay passes the events over unread).
    let events_read = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    if std::env::args().any(|a| a == "--stream") {
        let response = client.get(format!("{base}/event")).send().await?;
        ensure!(
            response.status() == 200,
            "GET /event: {}",
            response.status()
        );
        let counter = std::sync::Arc::clone(&events_read);
        tokio::spawn(async move {
            use futures::StreamExt;
            let mut bytes = response.bytes_stream();
            while let Some(Ok(chunk)) = bytes.next().await {
                let frames = chunk.windows(2).filter(|w| w == b"\n\n").count();
                counter.fetch_add(frames, std::sync::atomic::Ordering::Relaxed);
            }
        });
    }

    let session = post(
        &client,
        &format!("{base}/session"),
        json!({"title": "bench"}),
    )
    .await?;
    let id = session["id"].as_str().context("session id")?.to_owned();
    let mut users = Vec::new();
    let started = Instant::now();
    for turn in 0..TURNS {
        let user = post(
            &client,
            &format!("{base}/session/{id}/message"),
            json!({"parts": [{"type": "text", "text": format!("turn {turn}")}]}),
        )
        .await?;
        users.push(user["info"]["id"].as_str().context("user id")?.to_owned());
        let assistant = post(
            &client,
            &format!("{base}/session/{id}/message"),
            json!({"role": "assistant"}),
        )
        .await?;
        let mid = assistant["info"]["id"]
            .as_str()
            .context("assistant id")?
            .to_owned();
        post(
            &client,
            &format!("{base}/session/{id}/message/{mid}/step"),
            json!({}),
        )
        .await?;
        for k in 0..FILES_PER_TURN {
            // Spread the turns' files over the tree; turn t's set overlaps turn t-1's by half.
            let index = (turn * FILES_PER_TURN / 2 + k) * 37 % FILES;
            std::fs::write(repo.join(path_of(index)), content(index, turn + 1))?;
        }
        post(
            &client,
            &format!("{base}/session/{id}/message/{mid}/step/finish"),
            json!({"reason": "stop"}),
        )
        .await?;
    }
    eprintln!(
        "bench: recorded {TURNS} turns in {:.0} ms",
        started.elapsed().as_secs_f64() * 1000.0
    );

    // HTTP and direct core calls are interleaved, so machine load weighs on both alike and their
    // difference is the HTTP layer's cost. A re-track of the unchanged tree is timed alone too.
    let session_id = SessionId::parse(&id)?;
    let mut reverts: Vec<Vec<Duration>> = vec![Vec::new(); TARGETS.len()];
    let mut unreverts = Vec::new();
    let mut core_reverts = Vec::new();
    let mut core_unreverts = Vec::new();
    let mut tracks = Vec::new();
    let mut unified_diffs = Vec::new();
    let mut reads = Vec::new();
    let mut core_reads = Vec::new();
    for _ in 0..reps {
        // A read of the session through HTTP and on the core: their difference is the HTTP layer's cost.
        let t = Instant::now();
        let response = client.get(format!("{base}/session/{id}")).send().await?;
        ensure!(
            response.status().is_success(),
            "GET session: {}",
            response.status()
        );
        response.bytes().await?;
        reads.push(t.elapsed());
        let t = Instant::now();
        direct.rewind.session(&session_id).await?;
        core_reads.push(t.elapsed());
        for (slot, &turn) in TARGETS.iter().enumerate() {
            let t = Instant::now();
            let reverted = post(
                &client,
                &format!("{base}/session/{id}/revert"),
                json!({"messageID": users[turn]}),
            )
            .await?;
            reverts[slot].push(t.elapsed());
            ensure!(reverted["revert"]["messageID"] == json!(users[turn]));
            let t = Instant::now();
            post(&client, &format!("{base}/session/{id}/unrevert"), json!({})).await?;
            unreverts.push(t.elapsed());

            let target = RevertTarget {
                message_id: MessageId::parse(&users[turn])?,
                part_id: None,
            };
            let t = Instant::now();
            direct.rewind.revert(&session_id, target).await?;
            core_reverts.push(t.elapsed());
            let t = Instant::now();
            direct.rewind.unrevert(&session_id).await?;
            core_unreverts.push(t.elapsed());
        }
        let t = Instant::now();
        let tracked = direct.snapshots.track(&repo).await?;
        tracks.push(t.elapsed());
        let t = Instant::now();
        direct.snapshots.unified_diff(&repo, &tracked.id).await?;
        unified_diffs.push(t.elapsed());
    }

    println!(
        "rewind HTTP bench: {FILES} files, {TURNS} turns x {FILES_PER_TURN} files of ~3 KB, {reps} reps"
    );
    println!("{:<22} {:>10} {:>10}", "operation", "median ms", "p95 ms");
    let mut all = Vec::new();
    for (slot, &turn) in TARGETS.iter().enumerate() {
        all.extend(reverts[slot].iter().copied());
        latency_row(&format!("revert to turn {turn}"), &mut reverts[slot]);
    }
    for (what, samples) in [
        ("revert (all)", &mut all),
        ("unrevert", &mut unreverts),
        ("core revert (no HTTP)", &mut core_reverts),
        ("core unrevert", &mut core_unreverts),
        ("track (unchanged)", &mut tracks),
        ("unified_diff (no change)", &mut unified_diffs),
        ("session read (HTTP)", &mut reads),
        ("core session read", &mut core_reads),
    ] {
        latency_row(what, samples);
    }
    if std::env::args().any(|a| a == "--stream") {
        println!(
            "(an event stream was open throughout: {} frames read)",
            events_read.load(std::sync::atomic::Ordering::Relaxed)
        );
    }
    long_session(&client, &base, &repo).await?;
    stop.cancel();
    server.await??;
    Ok(())
}

/// Part appends and step finishes early and late in a long session (see the module doc): the appends in
/// one session's first message, the finishes in another session's turns.
async fn long_session(client: &reqwest::Client, base: &str, repo: &Path) -> Result<()> {
    const PARTS: usize = 300;
    const TURNS: usize = 40;
    const SAMPLES: usize = 10;
    let big = json!({"type": "text", "text": "x".repeat(60_000)});
    // A new session's turn: its user message, its assistant message and a step begun; the assistant's URL,
    // and how long the user message's creation took.
    let turn = async |session: &str, t: usize| -> Result<(String, Duration)> {
        let messages = format!("{base}/session/{session}/message");
        let text = format!("turn {t}");
        let created = Instant::now();
        let user = post(
            client,
            &messages,
            json!({"parts": [{"type": "text", "text": text}]}),
        )
        .await?;
        let created = created.elapsed();
        let user = user["info"]["id"].as_str().context("user id")?.to_owned();
        let assistant = post(
            client,
            &messages,
            json!({"role": "assistant", "parentID": user}),
        )
        .await?;
        let assistant = assistant["info"]["id"].as_str().context("id")?;
        let url = format!("{messages}/{assistant}");
        post(client, &format!("{url}/step"), json!({})).await?;
        Ok((url, created))
    };
    let new_session = async || -> Result<String> {
        let session = post(client, &format!("{base}/session"), json!({"title": "long"})).await?;
        Ok(session["id"].as_str().context("session id")?.to_owned())
    };
    let timed = async |url: &str, body: &Value| -> Result<Duration> {
        let t = Instant::now();
        post(client, url, body.clone()).await?;
        Ok(t.elapsed())
    };
    let finish = json!({"reason": "stop"});

    let appending = new_session().await?;
    let (message, _) = turn(&appending, 0).await?;
    let mut appends = Vec::new();
    for _ in 0..PARTS {
        appends.push(timed(&format!("{message}/part"), &big).await?);
    }
    post(client, &format!("{message}/step/finish"), finish.clone()).await?;
    let mut early_appends = appends[..SAMPLES].to_vec();
    let mut late_appends = appends[PARTS - SAMPLES..].to_vec();

    let finishing = new_session().await?;
    let (mut early_finishes, mut late_finishes) = (Vec::new(), Vec::new());
    let (mut early_creates, mut late_creates) = (Vec::new(), Vec::new());
    for t in 0..TURNS + SAMPLES {
        let (message, created) = turn(&finishing, t).await?;
        for _ in 0..10 {
            post(client, &format!("{message}/part"), big.clone()).await?;
        }
        std::fs::write(repo.join("long.txt"), format!("{t}\n"))?;
        let took = timed(&format!("{message}/step/finish"), &finish).await?;
        if t < SAMPLES {
            early_finishes.push(took);
            early_creates.push(created);
        } else if t >= TURNS {
            late_finishes.push(took);
            late_creates.push(created);
        }
    }
    println!("recording in a long session (parts of 60 KB; median of {SAMPLES}, ms): early, late");
    let row = |what: String, early: &mut [Duration], late: &mut [Duration]| {
        println!(
            "{what:<34} {:>8.2} {:>8.2}",
            percentile(early, 0.5),
            percentile(late, 0.5)
        );
    };
    let turns = format!("turns 1-{SAMPLES} vs {}-{}", TURNS + 1, TURNS + SAMPLES);
    row(
        format!(
            "part append (parts 1-{SAMPLES} vs {}-{PARTS})",
            PARTS - SAMPLES + 1
        ),
        &mut early_appends,
        &mut late_appends,
    );
    row(
        format!("step finish ({turns})"),
        &mut early_finishes,
        &mut late_finishes,
    );
    row(
        format!("user message ({turns})"),
        &mut early_creates,
        &mut late_creates,
    );
    Ok(())
}
