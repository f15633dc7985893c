//! The test harness: `spawn_app` starts the application on port 0 over a fresh git repository and data
//! directory; helpers record turns over HTTP and read the event stream.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};
use futures::StreamExt;
use rewind_app::{Application, ServerOptions, Settings};
use serde_json::{Value, json};
use tempfile::TempDir;

use crate::documented;

/// A running application with its own repository and database.
pub struct TestApp {
    /// `http://127.0.0.1:PORT`.
    pub base: String,
    /// A client with no default headers.
    pub http: reqwest::Client,
    /// The worktree (canonical path).
    pub repo: PathBuf,
    /// The data directory.
    pub data_dir: PathBuf,
    /// The database URL.
    pub database_url: String,
    /// The server's own database handle (for its test hooks).
    pub db: std::sync::Arc<rewind_sql::SqlRepo>,
    stop: Box<dyn Fn() + Send + Sync>,
    server: Option<tokio::task::JoinHandle<Result<()>>>,
    _dirs: (TempDir, TempDir),
}

/// Options of `spawn_app`.
#[derive(Default)]
pub struct AppConfig {
    /// The basic-auth password.
    pub password: Option<String>,
    /// The body limit (default 64 KiB, so the 413 test sends little).
    pub body_limit: Option<usize>,
    /// The heartbeat interval (default 10 s).
    pub heartbeat: Option<Duration>,
    /// The step timeout (default 10 minutes).
    pub step_timeout: Option<Duration>,
    /// The event bus capacity (default the server's).
    pub bus_capacity: Option<usize>,
    /// The database (default a SQLite file in the data directory).
    pub database_url: Option<String>,
    /// How often the server recovers operations whose process died (default the server's).
    pub recovery_interval: Option<Duration>,
    /// How long a connection may take to send a request's head (default the server's).
    pub header_read_timeout: Option<Duration>,
}

/// Runs `git` in `dir`, failing on a non-zero exit.
pub fn git(dir: &Path, args: &[&str]) -> Result<String> {
    let output = Command::new("git")
        .args([
            "-c",
            "user.name=rewind-tests",
            "-c",
            "user.email=tests@rewind.invalid",
        ])
        .args(args)
        .current_dir(dir)
        .output()
        .context("cannot run git")?;
    ensure!(
        output.status.success(),
        "git {args:?} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

/// Starts the application over a new repository holding `a.txt` and `b.txt`, committed.
pub async fn spawn_app() -> Result<TestApp> {
    spawn_app_with(AppConfig::default()).await
}

/// `spawn_app` with options.
pub async fn spawn_app_with(config: AppConfig) -> Result<TestApp> {
    let repo_dir = tempfile::tempdir()?;
    let data = tempfile::tempdir()?;
    let repo = std::fs::canonicalize(repo_dir.path())?;
    git(&repo, &["init", "-q"])?;
    std::fs::write(repo.join("a.txt"), "a0\n")?;
    std::fs::write(repo.join("b.txt"), "b0\n")?;
    git(&repo, &["add", "-A"])?;
    git(&repo, &["commit", "-qm", "initial"])?;
    let mut settings = Settings::new(data.path(), &repo);
    settings.port = 0;
    settings.password = config.password;
    if let Some(timeout) = config.step_timeout {
        settings.step_timeout_ms = u64::try_from(timeout.as_millis())?;
    }
    if let Some(url) = config.database_url {
        settings.database_url = url;
    }
    let database_url = settings.database_url.clone();
    let options = ServerOptions {
        body_limit: config.body_limit.unwrap_or(64 * 1024),
        relay_interval: Duration::from_millis(20),
        heartbeat: config.heartbeat.unwrap_or(Duration::from_secs(10)),
        cwd: Some(repo.clone()),
        bus_capacity: config
            .bus_capacity
            .unwrap_or(ServerOptions::default().bus_capacity),
        recovery_interval: config
            .recovery_interval
            .unwrap_or(ServerOptions::default().recovery_interval),
        header_read_timeout: config
            .header_read_timeout
            .unwrap_or(ServerOptions::default().header_read_timeout),
    };
    let app = Application::build_with(settings, options).await?;
    let base = format!("http://127.0.0.1:{}", app.port());
    let token = app.shutdown_token();
    let db = app.repo();
    let stop: Box<dyn Fn() + Send + Sync> = Box::new(move || token.cancel());
    let server = tokio::spawn(app.run_until_stopped());
    Ok(TestApp {
        base,
        http: reqwest::Client::new(),
        repo,
        data_dir: data.path().to_path_buf(),
        database_url,
        db,
        stop,
        server: Some(server),
        _dirs: (repo_dir, data),
    })
}

/// `stream` once its first event, which must be `server.connected`, is read.
async fn connected(mut stream: EventStream) -> Result<EventStream> {
    let first = stream
        .next(Duration::from_secs(5))
        .await?
        .context("no first event")?;
    ensure!(
        first["type"] == "server.connected",
        "the first event is not server.connected: {first}"
    );
    Ok(stream)
}

/// A response's status and JSON body (`Value::Null` when the body is not JSON).
pub struct Reply {
    /// The status code.
    pub status: u16,
    /// The body.
    pub body: Value,
    /// The response headers.
    pub headers: reqwest::header::HeaderMap,
}

impl TestApp {
    /// `GET path`.
    pub async fn get(&self, path: &str) -> Result<Reply> {
        self.send(self.http.get(self.url(path))).await
    }

    /// `POST path` with a JSON body.
    pub async fn post(&self, path: &str, body: Value) -> Result<Reply> {
        self.send(self.http.post(self.url(path)).json(&body)).await
    }

    /// `DELETE path`.
    pub async fn delete(&self, path: &str) -> Result<Reply> {
        self.send(self.http.delete(self.url(path))).await
    }

    pub async fn patch(&self, path: &str, body: Value) -> Result<Reply> {
        self.send(self.http.patch(self.url(path)).json(&body)).await
    }

    /// The full URL of `path`.
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// Sends a request and reads its reply.
    pub async fn send(&self, request: reqwest::RequestBuilder) -> Result<Reply> {
        let (client, request) = request.build_split();
        let request = request?;
        let method = request.method().as_str().to_owned();
        let url = request.url().clone();
        let sent: Option<Value> = request
            .body()
            .and_then(reqwest::Body::as_bytes)
            .and_then(|bytes| serde_json::from_slice(bytes).ok());
        let response = client.execute(request).await?;
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        let bytes = response.bytes().await?;
        let body = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        let content_type = headers
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|value| value.to_str().ok())
            .and_then(|value| value.split(';').next())
            .unwrap_or("")
            .trim()
            .to_owned();
        documented::check_answer(&method, url.path(), status, &content_type, &body)?;
        if (200..=299).contains(&status) {
            documented::check_accepted_request(&method, &url, sent.as_ref())?;
        }
        Ok(Reply {
            status,
            body,
            headers,
        })
    }

    /// `POST path` that must succeed; its body.
    pub async fn ok(&self, path: &str, body: Value) -> Result<Value> {
        let reply = self.post(path, body).await?;
        ensure!(
            reply.status == 200,
            "POST {path} answered {}: {}",
            reply.status,
            reply.body
        );
        Ok(reply.body)
    }

    /// `GET path` that must succeed; its body.
    pub async fn read(&self, path: &str) -> Result<Value> {
        let reply = self.get(path).await?;
        ensure!(
            reply.status == 200,
            "GET {path} answered {}: {}",
            reply.status,
            reply.body
        );
        Ok(reply.body)
    }

    /// Creates a session in the repository.
    pub async fn new_session(&self) -> Result<String> {
        let session = self.ok("/session", json!({"title": "test"})).await?;
        id_of(&session)
    }

    /// Begins a turn: a user message (`text`), an assistant message and a step of it, left open. Returns
    /// the user and assistant message ids.
    pub async fn open_step(&self, session: &str, text: &str) -> Result<(String, String)> {
        let user = self
            .ok(
                &format!("/session/{session}/message"),
                json!({"parts": [{"type": "text", "text": text}]}),
            )
            .await?;
        let assistant = self
            .ok(
                &format!("/session/{session}/message"),
                json!({"role": "assistant", "parts": [{"type": "text", "text": "on it"}]}),
            )
            .await?;
        let user_id = id_of(&user["info"])?;
        let assistant_id = id_of(&assistant["info"])?;
        self.ok(
            &format!("/session/{session}/message/{assistant_id}/step"),
            json!({}),
        )
        .await?;
        Ok((user_id, assistant_id))
    }

    /// Records a turn: a user message, an assistant message and one step during which `edit` changes
    /// the worktree. Returns the user and assistant message ids.
    pub async fn turn(
        &self,
        session: &str,
        text: &str,
        edit: impl FnOnce(&Path) -> Result<()>,
    ) -> Result<(String, String)> {
        let (user_id, assistant_id) = self.open_step(session, text).await?;
        edit(&self.repo)?;
        self.ok(
            &format!("/session/{session}/message/{assistant_id}/step/finish"),
            json!({"reason": "stop", "cost": 0.5}),
        )
        .await?;
        Ok((user_id, assistant_id))
    }

    /// `turn` whose step writes `content` to the worktree's `file`.
    pub async fn turn_writing(
        &self,
        session: &str,
        text: &str,
        file: &str,
        content: &str,
    ) -> Result<(String, String)> {
        self.turn(session, text, |repo| {
            Ok(std::fs::write(repo.join(file), content)?)
        })
        .await
    }

    /// Reverts `session` to `message` (which must succeed) and returns the session.
    pub async fn revert_to(&self, session: &str, message: &str) -> Result<Value> {
        self.ok(
            &format!("/session/{session}/revert"),
            json!({"messageID": message}),
        )
        .await
    }

    /// Opens the event stream and reads its first event, which must be `server.connected`.
    pub async fn connected_events(&self) -> Result<EventStream> {
        connected(self.events().await?).await
    }

    /// `connected_events` of the stream opened for the worktree `directory` (`?directory=`).
    pub async fn connected_events_for(&self, directory: &Path) -> Result<EventStream> {
        let path = format!("/event?directory={}", directory.display());
        connected(self.events_at(&path).await?).await
    }

    /// Creates a session titled `title` from another process on the same database and data directory
    /// (`rewind-test-writer`); returns its id.
    pub async fn create_session_elsewhere(&self, title: &str) -> Result<String> {
        self.create_session_in(&self.repo, title).await
    }

    /// `create_session_elsewhere` for the worktree `worktree` (any directory, as the command line may
    /// record).
    pub async fn create_session_in(&self, worktree: &Path, title: &str) -> Result<String> {
        self.create_child_in(worktree, title, None).await
    }

    /// `create_session_in`, under the session `parent` when one is given.
    pub async fn create_child_in(
        &self,
        worktree: &Path,
        title: &str,
        parent: Option<&str>,
    ) -> Result<String> {
        let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_rewind-test-writer"))
            .arg(&self.data_dir)
            .arg(&self.database_url)
            .arg(worktree)
            .arg(title)
            .args(parent)
            .output()
            .await?;
        ensure!(
            output.status.success(),
            "the writer failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        Ok(String::from_utf8(output.stdout)?.trim().to_owned())
    }

    /// A file of the worktree, `None` when absent.
    pub fn file(&self, name: &str) -> Option<String> {
        std::fs::read_to_string(self.repo.join(name)).ok()
    }

    /// Writes a file of the worktree.
    pub fn write(&self, name: &str, text: &str) -> Result<()> {
        std::fs::write(self.repo.join(name), text)?;
        Ok(())
    }

    /// Opens the event stream.
    pub async fn events(&self) -> Result<EventStream> {
        self.events_at("/event").await
    }

    /// Opens OpenCode's stream of every worktree's events, `GET /global/event` (frames `{directory,
    /// payload}`), as a client reconnecting after the frame whose SSE `id` was `last` when one is given,
    /// naming the worktree `directory` (`x-opencode-directory`, as OpenCode's client sends it) when given.
    pub async fn global_events(
        &self,
        last: Option<&str>,
        directory: Option<&Path>,
    ) -> Result<EventStream> {
        let mut request = self.http.get(self.url("/global/event"));
        if let Some(directory) = directory {
            request = request.header("x-opencode-directory", directory.display().to_string());
        }
        match last {
            Some(last) => {
                self.open_events(request.header("last-event-id", last))
                    .await
            }
            None => self.open_events(request).await,
        }
    }

    /// Opens the event stream as a client reconnecting after the event whose SSE `id` was `last`.
    pub async fn events_resuming(&self, last: &str) -> Result<EventStream> {
        self.open_events(
            self.http
                .get(self.url("/event"))
                .header("last-event-id", last),
        )
        .await
    }

    /// `events_resuming` of the stream opened for the worktree `directory` (`?directory=`).
    pub async fn events_resuming_for(&self, directory: &Path, last: &str) -> Result<EventStream> {
        let path = format!("/event?directory={}", directory.display());
        self.open_events(self.http.get(self.url(&path)).header("last-event-id", last))
            .await
    }

    async fn events_at(&self, path: &str) -> Result<EventStream> {
        self.open_events(self.http.get(self.url(path))).await
    }

    async fn open_events(&self, request: reqwest::RequestBuilder) -> Result<EventStream> {
        let (client, request) = request.build_split();
        let request = request?;
        let frame_schema = documented::stream_schema(request.url().path())?;
        let response = client.execute(request).await?;
        ensure!(
            response.status() == 200,
            "GET /event: {}",
            response.status()
        );
        let content_type = response
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_owned();
        ensure!(
            content_type.starts_with("text/event-stream"),
            "GET /event content type {content_type:?}"
        );
        Ok(EventStream {
            bytes: Box::pin(
                response
                    .bytes_stream()
                    .map(|chunk| chunk.map(|b| b.to_vec())),
            ),
            buffer: String::new(),
            last_id: None,
            frame_schema,
        })
    }

    /// Stops the server gracefully and waits for it (it must stop within 10 s).
    pub async fn stop(mut self) -> Result<()> {
        (self.stop)();
        if let Some(server) = self.server.take() {
            tokio::time::timeout(Duration::from_secs(10), server)
                .await
                .context("the server did not stop within 10 s")???;
        }
        Ok(())
    }
}

impl Drop for TestApp {
    fn drop(&mut self) {
        (self.stop)();
    }
}

/// The `id` field of a JSON object.
pub fn id_of(value: &Value) -> Result<String> {
    value["id"]
        .as_str()
        .map(str::to_owned)
        .with_context(|| format!("no id in {value}"))
}

type ByteStream = std::pin::Pin<Box<dyn futures::Stream<Item = reqwest::Result<Vec<u8>>> + Send>>;

/// What an event stream gave next.
#[derive(Debug)]
pub enum Next {
    Event(Value),
    /// The server closed the response.
    Ended,
    /// The response broke off.
    Broken,
}

/// The SSE stream of `GET /event`, as parsed JSON events.
pub struct EventStream {
    bytes: ByteStream,
    buffer: String,
    /// The SSE `id` of the last event received that had one.
    last_id: Option<String>,
    /// The document's schema of a frame (`documented::stream_schema`), which each must fit.
    frame_schema: String,
}

impl EventStream {
    /// The next event, within `wait`; `None` when the stream ended.
    pub async fn next(&mut self, wait: Duration) -> Result<Option<Value>> {
        Ok(self.next_with_id(wait).await?.map(|(_, event)| event))
    }

    /// The next event and its frame's SSE `id` (none for the stream's own events), within `wait`; `None`
    /// when the stream ended.
    pub async fn next_with_id(
        &mut self,
        wait: Duration,
    ) -> Result<Option<(Option<String>, Value)>> {
        tokio::time::timeout(wait, self.next_event())
            .await
            .context("no event arrived in time")?
    }

    /// The next event within `wait`, or how the stream ended: closed by the server, or broken off (the
    /// response failed, as a dropped connection does).
    pub async fn next_or_break(&mut self, wait: Duration) -> Result<Next> {
        match tokio::time::timeout(wait, self.next_event())
            .await
            .context("no event arrived in time")?
        {
            Ok(Some((_, event))) => Ok(Next::Event(event)),
            Ok(None) => Ok(Next::Ended),
            Err(error) if error.is::<reqwest::Error>() => Ok(Next::Broken),
            Err(error) => Err(error),
        }
    }

    /// The SSE `id` of the last event received that had one: what a reconnecting client sends.
    pub fn last_id(&self) -> Option<&str> {
        self.last_id.as_deref()
    }

    async fn next_event(&mut self) -> Result<Option<(Option<String>, Value)>> {
        loop {
            if let Some(end) = self.buffer.find("\n\n") {
                let frame: String = self.buffer.drain(..end + 2).collect();
                let field = |name: &str| -> Vec<String> {
                    frame
                        .lines()
                        .filter_map(|line| line.strip_prefix(name))
                        .map(|value| value.strip_prefix(' ').unwrap_or(value).to_owned())
                        .collect()
                };
                let data = field("data:");
                if data.is_empty() {
                    continue;
                }
                let id = field("id:").pop();
                if id.is_some() {
                    self.last_id.clone_from(&id);
                }
                let event = serde_json::from_str(&data.join("\n"))?;
                documented::check_frame(&self.frame_schema, &event)?;
                return Ok(Some((id, event)));
            }
            match self.bytes.next().await {
                Some(chunk) => self.buffer.push_str(&String::from_utf8_lossy(&chunk?)),
                None => return Ok(None),
            }
        }
    }

    /// Events until one of type `last` (included), within `wait` each.
    pub async fn until(&mut self, last: &str) -> Result<Vec<Value>> {
        self.until_matching(last, |event| event["type"] == last)
            .await
    }

    /// The events up to and including the first for which `last` holds (`what` names it in the error).
    pub async fn until_matching(
        &mut self,
        what: &str,
        last: impl Fn(&Value) -> bool,
    ) -> Result<Vec<Value>> {
        let mut seen = Vec::new();
        loop {
            let Some(event) = self.next(Duration::from_secs(10)).await? else {
                bail!("the stream ended before {what}; saw {:?}", types(&seen));
            };
            let done = last(&event);
            seen.push(event);
            if done {
                return Ok(seen);
            }
        }
    }
}

/// The `type` of each event.
pub fn types(events: &[Value]) -> Vec<String> {
    events
        .iter()
        .map(|e| e["type"].as_str().unwrap_or("?").to_owned())
        .collect()
}
