//! Shared test support: runtimes, stores to test on (in-memory SQLite, a SQLite file, a fresh PostgreSQL
//! schema per test), repo wrappers that own their store, and small builders for domain values.

use std::collections::BTreeSet;
use std::future::Future;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};

use async_trait::async_trait;
use rewind_core::Result;
use rewind_core::id::IdGenerator;
use rewind_core::model::{
    Event, EventId, EventPayload, FileDiff, Holder, HolderKind, IntentOperation, IntentRecord,
    Lease, LeaseKey, LeaseTake, LeaseToken, Message, MessageHead, MessageId, MessageTime,
    MessageWithParts, Part, PartBody, PartId, ProcessIdentity, RelPath, RevertHistoryEntry, Role,
    Session, SessionId, SessionTime, SnapshotId, StoredEvent, Tokens, Warning,
};
use rewind_core::ports::{MessageRepo, Transaction};
use rewind_sql::{SqlConfig, SqlRepo};
use sea_orm::{ConnectionTrait, Database, DatabaseConnection, DbBackend, Statement};
use tempfile::TempDir;

/// The variable that points the tests at a PostgreSQL server (CI sets it).
pub const POSTGRES_ENV: &str = "REWIND_TEST_POSTGRES_URL";

pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime starts")
}

/// Runs a test body on a fresh tokio runtime (the contract macro's `block_on`).
pub fn run<F: Future<Output = ()>>(body: F) {
    runtime().block_on(body);
}

pub fn postgres_url() -> Option<String> {
    std::env::var(POSTGRES_ENV)
        .ok()
        .filter(|url| !url.is_empty())
}

/// Runs a test body when a PostgreSQL server is configured, and says so when it is not. Under CI (`CI`
/// set, as `.ci/run` runs) a missing server is a failure: the PostgreSQL runs must not be skipped there.
pub fn run_pg<F: Future<Output = ()>>(body: F) {
    if postgres_url().is_some() {
        run(body);
    } else if std::env::var_os("CI").is_some() {
        panic!("{POSTGRES_ENV} is not set under CI: .ci/run must start PostgreSQL and export it");
    } else {
        eprintln!("{POSTGRES_ENV} is not set: the PostgreSQL run of this test is skipped");
    }
}

/// A SQLite file in its own temporary directory.
pub struct SqliteFile {
    pub _dir: TempDir,
    pub path: PathBuf,
}

impl SqliteFile {
    pub fn new() -> Self {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let path = dir.path().join("rewind.db");
        SqliteFile { _dir: dir, path }
    }

    pub fn config(&self) -> SqlConfig {
        SqlConfig::sqlite_file(&self.path).expect("a UTF-8 path")
    }

    pub async fn open(&self) -> SqlRepo {
        SqlRepo::open(self.config())
            .await
            .expect("the SQLite file opens")
    }
}

/// A fresh schema in the test PostgreSQL database, dropped when the value is dropped.
pub struct PgSchema {
    pub url: String,
    pub name: String,
}

static SCHEMA_COUNTER: AtomicU64 = AtomicU64::new(0);

impl PgSchema {
    pub async fn create() -> PgSchema {
        let url = postgres_url().expect("PostgreSQL runs are gated on the environment variable");
        let name = format!(
            "t_{}_{}_{}",
            std::process::id(),
            SCHEMA_COUNTER.fetch_add(1, Ordering::Relaxed),
            rand::random::<u32>()
        );
        let admin = admin(&url).await;
        admin
            .execute_unprepared(&format!("CREATE SCHEMA \"{name}\""))
            .await
            .expect("the test schema is created");
        let _ = admin.close().await;
        PgSchema { url, name }
    }

    pub fn config(&self) -> SqlConfig {
        let mut config = SqlConfig::new(self.url.clone());
        config.schema = Some(self.name.clone());
        config
    }

    pub async fn open(&self) -> SqlRepo {
        SqlRepo::open(self.config())
            .await
            .expect("the PostgreSQL schema opens")
    }

    /// Deletes every row of rewind's tables, so the next test case starts from an empty store.
    pub async fn empty(&self) {
        let admin = admin(&self.url).await;
        let tables = [
            "event_outbox",
            "intent",
            "lease",
            "revert_history",
            "warning",
            "session_diff",
            "part",
            "message",
            "session",
            "shared_text",
        ]
        .map(|table| format!("\"{}\".{table}", self.name))
        .join(", ");
        admin
            .execute_unprepared(&format!("TRUNCATE {tables} RESTART IDENTITY"))
            .await
            .expect("the test schema is emptied");
        let _ = admin.close().await;
    }

    /// How many sessions wait for a lock on this schema's outbox table.
    pub async fn outbox_lock_waiters(&self) -> i64 {
        let admin = admin(&self.url).await;
        let row = admin
            .query_one_raw(Statement::from_sql_and_values(
                DbBackend::Postgres,
                "SELECT count(*) AS waiting FROM pg_locks l \
                 JOIN pg_class c ON c.oid = l.relation \
                 JOIN pg_namespace n ON n.oid = c.relnamespace \
                 WHERE NOT l.granted AND c.relname = 'event_outbox' AND n.nspname = $1",
                [self.name.clone().into()],
            ))
            .await
            .expect("pg_locks can be read")
            .expect("count returns a row");
        let waiting = row.try_get::<i64>("", "waiting").expect("a count");
        let _ = admin.close().await;
        waiting
    }
}

pub async fn admin(url: &str) -> DatabaseConnection {
    Database::connect(url)
        .await
        .expect("the test PostgreSQL server accepts connections")
}

impl Drop for PgSchema {
    fn drop(&mut self) {
        admin_after(
            &self.url,
            format!("DROP SCHEMA IF EXISTS \"{}\" CASCADE", self.name),
        );
    }
}

/// A database of its own on the test PostgreSQL server, for what is set per database; dropped (its
/// connections ended) when the value is dropped.
pub struct PgDatabase {
    /// The test server's URL with this database in place of its own.
    pub url: String,
    pub name: String,
    admin_url: String,
}

impl PgDatabase {
    pub async fn create() -> PgDatabase {
        let admin_url =
            postgres_url().expect("PostgreSQL runs are gated on the environment variable");
        let name = format!("rewind_t_{}_{}", std::process::id(), rand::random::<u32>());
        let (start, end) = database_name_span(&admin_url);
        let url = format!("{}{name}{}", &admin_url[..start], &admin_url[end..]);
        let admin = admin(&admin_url).await;
        admin
            .execute_unprepared(&format!("CREATE DATABASE \"{name}\""))
            .await
            .expect("the test database is created (the role may create databases)");
        let _ = admin.close().await;
        PgDatabase {
            url,
            name,
            admin_url,
        }
    }

    /// Runs `sql` as the test role, connected to another database (`ALTER DATABASE` of this one, say).
    pub async fn admin(&self, sql: &str) {
        let admin = admin(&self.admin_url).await;
        admin
            .execute_unprepared(sql)
            .await
            .unwrap_or_else(|error| panic!("{sql}: {error}"));
        let _ = admin.close().await;
    }
}

impl Drop for PgDatabase {
    fn drop(&mut self) {
        admin_after(
            &self.admin_url,
            format!("DROP DATABASE IF EXISTS \"{}\" WITH (FORCE)", self.name),
        );
    }
}

/// Where the database name lies in a `postgres://…/NAME?…` URL.
fn database_name_span(url: &str) -> (usize, usize) {
    let query = url.find('?').unwrap_or(url.len());
    let start = url[..query].rfind('/').expect("a URL with a database name") + 1;
    (start, query)
}

/// Runs `sql` on the server at `url`, best effort, from `Drop`: it runs inside or outside a runtime, so on
/// a thread of its own, which may block on one either way.
fn admin_after(url: &str, sql: String) {
    let url = url.to_owned();
    let dropped = std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a tokio runtime starts");
        runtime.block_on(async {
            let admin = admin(&url).await;
            let _ = admin.execute_unprepared(&sql).await;
            let _ = admin.close().await;
        });
    });
    let _ = dropped.join();
}

/// A repo together with what its store needs to live (a temporary directory, a schema to drop).
pub struct Owned<G> {
    pub repo: SqlRepo,
    pub _guard: G,
}

pub async fn memory_repo() -> SqlRepo {
    SqlRepo::connect("sqlite::memory:")
        .await
        .expect("an in-memory database opens")
}

pub async fn file_repo() -> Owned<SqliteFile> {
    let file = SqliteFile::new();
    Owned {
        repo: file.open().await,
        _guard: file,
    }
}

pub async fn pg_repo() -> Owned<PgSchema> {
    let schema = PgSchema::create().await;
    Owned {
        repo: schema.open().await,
        _guard: schema,
    }
}

macro_rules! delegate {
    ($self:ident, $repo:ident => $call:expr) => {{
        let $repo = &$self.repo;
        $call.await
    }};
}

macro_rules! reopened {
    ($self:ident, $repo:ident => $call:expr) => {{
        let $repo = $self.file.open().await;
        let out = $call.await;
        $repo.close().await.expect("the handle closes");
        out
    }};
}

macro_rules! impl_repo {
    ($ty:ty, $with:ident) => {
        #[async_trait]
        impl MessageRepo for $ty {
            async fn session(&self, id: &SessionId) -> Result<Option<Session>> {
                $with!(self, repo => repo.session(id))
            }
            async fn sessions(&self, directory: Option<String>) -> Result<Vec<Session>> {
                $with!(self, repo => repo.sessions(directory))
            }
            async fn sessions_overlapping(&self, directory: &str) -> Result<Vec<Session>> {
                $with!(self, repo => repo.sessions_overlapping(directory))
            }
            async fn messages(&self, session: &SessionId) -> Result<Vec<MessageWithParts>> {
                $with!(self, repo => repo.messages(session))
            }
            async fn message(
                &self,
                session: &SessionId,
                message: &MessageId,
            ) -> Result<Option<MessageWithParts>> {
                $with!(self, repo => repo.message(session, message))
            }
            async fn messages_from(
                &self,
                session: &SessionId,
                from: &MessageId,
            ) -> Result<Vec<MessageWithParts>> {
                $with!(self, repo => repo.messages_from(session, from))
            }
            async fn messages_between(
                &self,
                session: &SessionId,
                from: &MessageId,
                before: Option<MessageId>,
            ) -> Result<Vec<MessageWithParts>> {
                $with!(self, repo => repo.messages_between(session, from, before))
            }
            async fn message_infos(&self, session: &SessionId) -> Result<Vec<Message>> {
                $with!(self, repo => repo.message_infos(session))
            }

            async fn message_head(
                &self,
                session: &SessionId,
                message: &MessageId,
            ) -> Result<Option<MessageHead>> {
                $with!(self, repo => repo.message_head(session, message))
            }
            async fn session_diff(&self, session: &SessionId) -> Result<Vec<FileDiff>> {
                $with!(self, repo => repo.session_diff(session))
            }
            async fn warnings(&self, session: &SessionId) -> Result<Vec<Warning>> {
                $with!(self, repo => repo.warnings(session))
            }
            async fn revert_history(&self, session: &SessionId) -> Result<Vec<RevertHistoryEntry>> {
                $with!(self, repo => repo.revert_history(session))
            }
            async fn intents(&self) -> Result<Vec<IntentRecord>> {
                $with!(self, repo => repo.intents())
            }
            async fn lease(&self, key: &LeaseKey) -> Result<Option<Lease>> {
                $with!(self, repo => repo.lease(key))
            }
            async fn leases(&self) -> Result<Vec<Lease>> {
                $with!(self, repo => repo.leases())
            }
            async fn take_lease(
                &self,
                lease: &Lease,
                replacing: Option<rewind_core::model::Replacing>,
            ) -> Result<LeaseTake> {
                $with!(self, repo => repo.take_lease(lease, replacing))
            }
            async fn take_leases(&self, leases: &[Lease]) -> Result<Vec<LeaseTake>> {
                $with!(self, repo => repo.take_leases(leases))
            }
            async fn renew_lease(
                &self,
                key: &LeaseKey,
                token: &LeaseToken,
                expires_at: u64,
            ) -> Result<bool> {
                $with!(self, repo => repo.renew_lease(key, token, expires_at))
            }
            async fn release_lease(&self, key: &LeaseKey, token: &LeaseToken) -> Result<()> {
                $with!(self, repo => repo.release_lease(key, token))
            }
            async fn commit(&self, transaction: Transaction) -> Result<()> {
                $with!(self, repo => repo.commit(transaction))
            }
            async fn events_after(&self, after: u64, limit: u32) -> Result<Vec<StoredEvent>> {
                $with!(self, repo => repo.events_after(after, limit))
            }
            async fn last_event_seq(&self) -> Result<u64> {
                $with!(self, repo => repo.last_event_seq())
            }
            async fn event_id_at(&self, seq: u64) -> Result<Option<EventId>> {
                $with!(self, repo => repo.event_id_at(seq))
            }
            async fn outbox_over(&self, bytes: u64) -> Result<Option<u64>> {
                $with!(self, repo => repo.outbox_over(bytes))
            }
            async fn referenced_snapshots(
                &self,
                directory: Option<String>,
            ) -> Result<BTreeSet<SnapshotId>> {
                $with!(self, repo => repo.referenced_snapshots(directory))
            }
            async fn captures(
                &self,
                directory: Option<String>,
            ) -> Result<Vec<rewind_core::model::Capture>> {
                $with!(self, repo => repo.captures(directory))
            }
        }
    };
}

/// A handle shared between test cases.
pub struct Shared(pub std::sync::Arc<SqlRepo>);

macro_rules! shared {
    ($self:ident, $repo:ident => $call:expr) => {{
        let $repo = &$self.0;
        $call.await
    }};
}

impl_repo!(Shared, shared);
impl_repo!(Owned<SqliteFile>, delegate);
impl_repo!(Owned<PgSchema>, delegate);

/// A repo that opens the SQLite file afresh for every call and closes it after: everything the contract
/// reads back must have survived every handle being dropped.
pub struct Reopening {
    pub file: SqliteFile,
}

pub async fn reopening_repo() -> Reopening {
    let file = SqliteFile::new();
    // Create the schema once, as the first open of a store does.
    file.open().await.close().await.expect("the handle closes");
    Reopening { file }
}

impl_repo!(Reopening, reopened);

/// Ids in creation order from a fake clock.
pub struct Ids {
    generator: IdGenerator,
    now: AtomicU64,
}

impl Default for Ids {
    fn default() -> Self {
        Ids {
            generator: IdGenerator::new(),
            now: AtomicU64::new(1_700_000_000_000),
        }
    }
}

impl Ids {
    pub fn tick(&self) -> u64 {
        self.now.fetch_add(1, Ordering::Relaxed) + 1
    }
    pub fn session(&self) -> SessionId {
        self.generator.descending(self.tick())
    }
    pub fn message(&self) -> MessageId {
        self.generator.ascending(self.tick(), None)
    }
    pub fn part(&self) -> PartId {
        self.generator.ascending(self.tick(), None)
    }
    pub fn event(&self) -> EventId {
        self.generator.ascending(self.tick(), None)
    }
}

pub fn snapshot(n: u64) -> SnapshotId {
    SnapshotId::parse(&format!("{n:040x}")).expect("40 hex digits")
}

pub fn session(ids: &Ids, directory: &str) -> Session {
    let id = ids.session();
    let now = ids.tick();
    Session {
        title: format!("session {id}"),
        id,
        slug: "quiet-river".to_owned(),
        project_id: "project".to_owned(),
        directory: directory.to_owned(),
        parent_id: None,
        version: "0.1.0".to_owned(),
        metadata: None,
        time: SessionTime {
            created: now,
            updated: now,
            archived: None,
        },
        summary: None,
        cost: 0.0,
        tokens: Tokens::default(),
        revert: None,
        store: format!("{directory}/.store"),
        applied: None,
        reverted_at: None,
        step: None,
        skipped: Vec::new(),
    }
}

pub fn message(ids: &Ids, session: &Session, role: Role) -> Message {
    Message {
        id: ids.message(),
        session_id: session.id.clone(),
        role,
        time: MessageTime {
            created: ids.tick(),
            completed: None,
        },
        parent_id: None,
        extra: serde_json::Map::new(),
    }
}

pub fn part(ids: &Ids, message: &Message, body: PartBody) -> Part {
    Part {
        id: ids.part(),
        session_id: message.session_id.clone(),
        message_id: message.id.clone(),
        body,
    }
}

pub fn heartbeat(ids: &Ids) -> Event {
    Event {
        id: ids.event(),
        payload: EventPayload::ServerHeartbeat {},
    }
}

pub fn updated(ids: &Ids, session: &Session) -> Event {
    Event {
        id: ids.event(),
        payload: EventPayload::SessionUpdated {
            session_id: session.id.clone(),
            info: Box::new(session.clone()),
        },
    }
}

pub fn holder(pid: u32) -> Holder {
    Holder {
        kind: HolderKind::Process,
        process: ProcessIdentity {
            host: "test-host".to_owned(),
            pid,
            start_time: 7,
            boot: None,
            machine: None,
        },
    }
}

pub fn lease(key: &LeaseKey, token: &str, pid: u32, expires_at: u64) -> Lease {
    Lease {
        key: key.clone(),
        token: LeaseToken(token.to_owned()),
        holder: holder(pid),
        expires_at,
    }
}

pub fn warning(ids: &Ids, snapshot: Option<SnapshotId>, file: &str) -> Warning {
    Warning {
        time: ids.tick(),
        message: format!("{file} was overwritten"),
        snapshot,
        files: vec![file.to_owned()],
    }
}

pub fn intent(ids: &Ids, session: &Session, token: &str, before: SnapshotId) -> IntentRecord {
    IntentRecord {
        token: LeaseToken(token.to_owned()),
        session_id: session.id.clone(),
        directory: session.directory.clone(),
        operation: IntentOperation::Revert,
        holder: holder(1),
        before,
        files: vec![RelPath::new("src/lib.rs").expect("a relative path")],
        created: ids.tick(),
        unreadable: None,
    }
}

/// Commits `session` alone to `repo`.
pub async fn put_session(repo: &dyn MessageRepo, session: &Session) -> rewind_core::Result<()> {
    repo.commit(transaction(
        vec![rewind_core::Change::PutSession(Box::new(session.clone()))],
        Vec::new(),
    ))
    .await
}

pub fn transaction(changes: Vec<rewind_core::Change>, events: Vec<Event>) -> Transaction {
    Transaction {
        guards: Vec::new(),
        changes,
        events,
    }
}

/// Everything a repo holds about the given sessions and lease keys, for comparing two stores.
#[derive(Debug, PartialEq)]
pub struct Dump {
    pub sessions: Vec<Session>,
    pub per_session: Vec<SessionDump>,
    pub intents: Vec<IntentRecord>,
    pub leases: Vec<Option<Lease>>,
    pub events: Vec<StoredEvent>,
    pub referenced: BTreeSet<SnapshotId>,
}

#[derive(Debug, PartialEq)]
pub struct SessionDump {
    pub session: Option<Session>,
    pub messages: Vec<MessageWithParts>,
    pub diff: Vec<FileDiff>,
    pub warnings: Vec<Warning>,
    pub history: Vec<RevertHistoryEntry>,
}

pub async fn dump(repo: &dyn MessageRepo, sessions: &[SessionId], keys: &[LeaseKey]) -> Dump {
    let mut per_session = Vec::new();
    for id in sessions {
        per_session.push(SessionDump {
            session: repo.session(id).await.expect("reads a session"),
            messages: repo.messages(id).await.expect("reads messages"),
            diff: repo.session_diff(id).await.expect("reads a diff"),
            warnings: repo.warnings(id).await.expect("reads warnings"),
            history: repo.revert_history(id).await.expect("reads history"),
        });
    }
    let mut leases = Vec::new();
    for key in keys {
        leases.push(repo.lease(key).await.expect("reads a lease"));
    }
    // A short answer is no sign of the end (large events): read on until an empty one.
    let mut events: Vec<rewind_core::model::StoredEvent> = Vec::new();
    loop {
        let after = events.last().map_or(0, |last| last.seq);
        let batch = repo
            .events_after(after, u32::MAX)
            .await
            .expect("reads events");
        if batch.is_empty() {
            break;
        }
        events.extend(batch);
    }
    Dump {
        sessions: repo.sessions(None).await.expect("lists sessions"),
        per_session,
        intents: repo.intents().await.expect("reads intents"),
        leases,
        events,
        referenced: repo
            .referenced_snapshots(None)
            .await
            .expect("lists snapshots"),
    }
}
