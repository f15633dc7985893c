//! rewind-sql: `MessageRepo` on SeaORM. rewind keeps its sessions, messages, parts, leases, intent records
//! and event outbox in an embedded SQLite file by default, and in PostgreSQL when several processes or
//! machines share one store.
//!
//! - Opening a store ([`SqlRepo::open`]) checks that the database can be written and that this binary
//!   knows every migration applied to it, then applies the pending ones; a store that is locked,
//!   read-only, corrupt or newer fails with an error naming the file or URL (without the password), and
//!   nothing is written.
//! - Every [`commit`](rewind_core::MessageRepo::commit) is one database transaction: guards, changes and
//!   outbox appends, all or nothing. Commits are serialised (SQLite's single writer, taken at `BEGIN
//!   IMMEDIATE`; on PostgreSQL an exclusive lock on the outbox table taken first in the transaction), so
//!   outbox positions follow commit order with no gaps, and guards are checked against the state the
//!   transaction commits on.
//! - Leases are conditional writes (`INSERT … ON CONFLICT DO UPDATE … WHERE token = ours OR (token =
//!   replaced [AND expires_at = as read])`), the same on both databases and across processes. On a SQLite
//!   file their commits do not wait for the disk (`SqlRepo::lease_db`); every other commit does
//!   (`synchronous=FULL`).
//! - Bodies are JSON text, never `jsonb`, so a part type rewind does not know reads back byte for byte.
//! - A revert's large texts (its text diff, its session diff) are stored once, in a `shared_text` row that
//!   the session, the session diff and their events reference (`shared.rs`).

#![forbid(unsafe_code)]

mod commit;
mod config;
mod connect;
mod convert;
mod entity;
mod error;
mod hooks;
mod lease;
mod migration;
mod read;
mod shared;

use std::collections::BTreeSet;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use async_trait::async_trait;
use rewind_core::Result;
use rewind_core::error::StorageFault;
use rewind_core::model::{
    Capture, EventId, FileDiff, IntentRecord, Lease, LeaseKey, LeaseTake, LeaseToken, MessageHead,
    MessageId, MessageWithParts, Replacing, RevertHistoryEntry, Session, SessionId, SnapshotId,
    StoredEvent, Warning,
};
use rewind_core::ports::{MessageRepo, Transaction};
use sea_orm::{
    AccessMode, ConnectionTrait, DatabaseConnection, DatabaseTransaction, DbErr, IsolationLevel,
    SqliteTransactionMode, TransactionOptions, TransactionTrait,
};

pub use config::{SqlConfig, escape_sqlite_path, redact_password};
pub use error::{DriverError, SqlError};
#[doc(hidden)]
pub use hooks::{CommitPause, CommitStart};

use config::Backend;
use hooks::Hooks;

/// How long a request waits for the PostgreSQL server while it was last found away (`SqlRepo::reachable`),
/// at most.
const OUTAGE_WAIT: Duration = Duration::from_secs(2);

/// A PostgreSQL server's outage as one handle saw it (`SqlRepo::reachable`).
struct Outage {
    /// Whether a statement found the server away (it could not be reached, or it ended the connection)
    /// and no connection was had since.
    away: tokio::sync::watch::Sender<bool>,
    /// Whether a task is getting a connection, to end the outage.
    probing: std::sync::atomic::AtomicBool,
}

/// The task that gets a connection to end an outage (`SqlRepo::reachable`), while it runs.
struct Probe(std::sync::Arc<Outage>);

impl Drop for Probe {
    fn drop(&mut self) {
        self.0
            .probing
            .store(false, std::sync::atomic::Ordering::Release);
    }
}

/// The SQL store: a pool of connections to one SQLite file, in-memory SQLite database or PostgreSQL
/// database (or schema). Open it once and share it; handles in other processes may use the same store.
pub struct SqlRepo {
    db: DatabaseConnection,
    /// Lease writes on a SQLite file: a second pool of the same file whose commits do not wait for an
    /// `fsync` (`synchronous=NORMAL`). A lease is relied on by no one after a power loss (every process
    /// that could hold it is gone after one), and the next commit of the main pool (`FULL`: an intent, a
    /// result) syncs the shared write-ahead log, the lease writes before it included. `None`: leases go
    /// through `db` (an in-memory database, PostgreSQL, a store opened to read).
    lease_db: Option<DatabaseConnection>,
    backend: Backend,
    /// The database as messages name it: a file path, or a URL without its password.
    target: String,
    busy_timeout: Duration,
    /// A SQLite file's path as SQLite opened it (`connect::sqlite_main_file`).
    sqlite_path: Option<std::path::PathBuf>,
    /// A SQLite file's device and inode when it was opened: a write first checks that the path still
    /// names that file (`SqlError::Replaced`).
    file: Option<(u64, u64)>,
    /// `rewind_identity`'s value (see `database_identity`).
    identity: Option<String>,
    hooks: Mutex<Hooks>,
    /// PostgreSQL: whether the server is away (`reachable`); shared with the task that ends it.
    outage: std::sync::Arc<Outage>,
}

impl std::fmt::Debug for SqlRepo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqlRepo")
            .field("target", &self.target)
            .field("backend", &self.backend)
            .finish_non_exhaustive()
    }
}

impl SqlRepo {
    /// Opens the store at `url` with the default configuration (see [`SqlConfig`]).
    pub async fn connect(url: &str) -> Result<SqlRepo> {
        SqlRepo::open(SqlConfig::new(url)).await
    }

    /// Opens the store: connects, checks that the database is writable and not newer than this binary,
    /// then applies the pending migrations.
    pub async fn open(config: SqlConfig) -> Result<SqlRepo> {
        Ok(connect::open(config).await?)
    }

    /// The database as messages name it: a SQLite file's path, or the URL without its password.
    pub fn target(&self) -> &str {
        &self.target
    }

    /// The identity the database drew when it was first migrated: the same however its URL is spelled
    /// (none when it cannot be read). A copy of the database has it too.
    pub fn database_identity(&self) -> Option<&str> {
        self.identity.as_deref()
    }

    /// The file of a SQLite database, as SQLite opened it: absolute, with symlinks and `..` resolved as
    /// SQLite resolves them (none for an in-memory one or PostgreSQL).
    pub fn sqlite_file(&self) -> Option<&std::path::Path> {
        self.sqlite_path.as_deref()
    }

    /// Closes every connection of this handle, waiting until they are closed.
    pub async fn close(self) -> Result<()> {
        let target = self.target.clone();
        if let Some(lease_db) = self.lease_db {
            let _ = lease_db.close().await;
        }
        self.db.close().await.map_err(|source| {
            SqlError::Query {
                target,
                context: "closing the connections",
                source: source.into(),
            }
            .into()
        })
    }

    /// Test hook: the next commit of this handle stops after it applied its changes and appended its
    /// events, with its transaction open, until the returned pause is resumed or dropped.
    #[doc(hidden)]
    pub fn pause_next_commit(&self) -> CommitPause {
        let (pause, side) = CommitPause::new();
        self.hooks().pause = Some(side);
        pause
    }

    /// Test hook: the next commit of this handle fails after it applied its changes and appended its
    /// events (and after its pause, if one is set), so the whole transaction is rolled back.
    #[doc(hidden)]
    pub fn fail_next_commit(&self) {
        self.hooks().fail = true;
    }

    /// Test hook: tells when the next commit of this handle is about to open its write transaction.
    #[doc(hidden)]
    pub fn watch_next_commit_start(&self) -> CommitStart {
        let (started, receiver) = tokio::sync::oneshot::channel();
        self.hooks().started = Some(started);
        CommitStart { started: receiver }
    }

    /// Test hook: closes every connection of a SQLite file's pools, waiting (at most 5 s) for those in use
    /// to come back, so the next request opens a new one; whether none is left. Nothing (`false`) for
    /// other backends.
    #[doc(hidden)]
    pub async fn close_idle_connections(&self) -> bool {
        if !matches!(self.backend, Backend::SqliteFile) {
            return false;
        }
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        for db in std::iter::once(&self.db).chain(self.lease_db.as_ref()) {
            let pool = db.get_sqlite_connection_pool();
            while pool.size() > 0 && std::time::Instant::now() < deadline {
                match pool.try_acquire() {
                    Some(connection) => {
                        use sea_orm::sqlx::Connection as _;
                        let _ = connection.detach().close().await;
                    }
                    None => tokio::time::sleep(Duration::from_millis(5)).await,
                }
            }
        }
        std::iter::once(&self.db)
            .chain(self.lease_db.as_ref())
            .all(|db| db.get_sqlite_connection_pool().size() == 0)
    }

    fn hooks(&self) -> MutexGuard<'_, Hooks> {
        // The hooks hold no invariant a panic could break.
        self.hooks
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Maps a driver error to the adapter's error, naming the database and what rewind was doing. A
    /// PostgreSQL server found away (unreachable, or ending the connection) is noted for `reachable`.
    fn sql_error(&self, context: &'static str, source: DbErr) -> SqlError {
        let error = self.sql_error_of(context, source);
        if error.fault().is_some_and(StorageFault::is_outage) {
            self.outage.away.send_replace(true);
        }
        error
    }

    /// On PostgreSQL, after a statement found the server away (unreachable, or ending the connection) and
    /// until a connection is had again, a request waits for that at most `OUTAGE_WAIT`, then is refused as
    /// unreachable, instead of waiting out the pool's whole acquire timeout (30 s) itself: an operation
    /// that met an outage, and the rollback and lease releases after it, each answer within seconds
    /// instead of one after the other (stop 66's outage fuzz: a revert answered after 90 – 100 s). One task
    /// at a time gets the connection, with the pool's whole timeout, and ends the outage when it has one
    /// (given straight back to the pool): a server slow to accept connections is still found again.
    async fn reachable(&self) -> Result<()> {
        if self.backend != Backend::Postgres || !*self.outage.away.borrow() {
            return Ok(());
        }
        use std::sync::atomic::Ordering;
        if !self.outage.probing.swap(true, Ordering::AcqRel) {
            let pool = self.db.get_postgres_connection_pool().clone();
            // Lets go of however the task ends: dropped with its runtime too (before it ever ran, say),
            // it is not left "probing".
            let probe = Probe(self.outage.clone());
            tokio::spawn(async move {
                if pool.acquire().await.is_ok() {
                    probe.0.away.send_replace(false);
                }
                drop(probe);
            });
        }
        let mut away = self.outage.away.subscribe();
        match tokio::time::timeout(OUTAGE_WAIT, away.wait_for(|away| !*away)).await {
            Ok(Ok(_)) => Ok(()),
            _ => Err(SqlError::Query {
                target: self.target.clone(),
                context: "waiting for a connection (the server was found away)",
                source: DbErr::ConnectionAcquire(sea_orm::error::ConnAcquireErr::Timeout).into(),
            }
            .into()),
        }
    }

    /// `sql_error` without the note of an outage.
    fn sql_error_of(&self, context: &'static str, source: DbErr) -> SqlError {
        // A statement that failed on a SQLite file moved or deleted since it was opened (a connection
        // opened after that finds no file): said as such, not as the statement's own error (review: a
        // server answered "internal error" when its first query after the move came on a new connection).
        if self.replaced() {
            return SqlError::Replaced {
                target: self.target.clone(),
            };
        }
        // PostgreSQL's pool waits as long for a server that is down as for a connection to come free. A
        // wait that ran out while every connection the pool may have was out in use is a busy database
        // (retry), not one that cannot be reached (stop 58's review: it was said to be down).
        if self.backend == Backend::Postgres
            && error::pool_timed_out(&source)
            && self.postgres_pool_all_in_use()
        {
            return SqlError::Saturated {
                target: self.target.clone(),
                source: source.into(),
            };
        }
        error::classify(&self.target, self.busy_timeout, context, source)
    }

    /// Whether the PostgreSQL pool has every connection it may have, none of them idle. The pool counts a
    /// connection it is still trying to open: with the server down and as many requests waiting as the
    /// pool has connections, a wait that runs out is said to be busy too (still a 409 to retry; a request
    /// that meets a broken connection says unreachable).
    fn postgres_pool_all_in_use(&self) -> bool {
        let pool = self.db.get_postgres_connection_pool();
        pool.size() >= pool.options().get_max_connections() && pool.num_idle() == 0
    }

    /// `map_err` adapter for driver errors.
    fn fault(&self, context: &'static str) -> impl Fn(DbErr) -> rewind_core::Error + '_ {
        move |source| self.sql_error(context, source).into()
    }

    /// A transaction for reads that must see one state (a message list and its parts): a snapshot.
    async fn begin_read(&self) -> Result<DatabaseTransaction> {
        let begun = if self.backend.is_sqlite() {
            // A deferred SQLite transaction reads from one snapshot once its first read began.
            self.db.begin().await
        } else {
            self.db
                .begin_with_config(
                    Some(IsolationLevel::RepeatableRead),
                    Some(AccessMode::ReadOnly),
                )
                .await
        };
        begun.map_err(self.fault("starting a read transaction"))
    }

    /// `SqlError::Replaced` when the SQLite file this handle opened is no longer at its path; checked
    /// before every write.
    fn check_file(&self) -> Result<()> {
        if self.replaced() {
            return Err(SqlError::Replaced {
                target: self.target.clone(),
            }
            .into());
        }
        Ok(())
    }

    /// Whether the SQLite file this handle opened is no longer at its path (never for PostgreSQL or an
    /// in-memory database).
    fn replaced(&self) -> bool {
        if let (Some(opened), Some(path)) = (self.file, &self.sqlite_path) {
            use std::os::unix::fs::MetadataExt;
            let now = std::fs::metadata(path).ok().map(|m| (m.dev(), m.ino()));
            return now != Some(opened);
        }
        false
    }

    /// A transaction that will write, serialised with every other one (commits and lease takes): on SQLite
    /// it takes the database's write lock at once (`BEGIN IMMEDIATE`), waiting up to the busy timeout, so
    /// it never fails later on a lock upgrade; on PostgreSQL it takes an exclusive lock on the outbox
    /// table first, held until it ends (plain reads go on beside it). So a lease take and a commit
    /// guarded by `Guard::LeaseNotTaken` never overlap: whichever commits second sees the other.
    ///
    /// On PostgreSQL every lock the transaction waits for is waited for up to the busy timeout, as on
    /// SQLite (`lock_timeout`), then it is `SqlError::Locked`: a process stopped (`SIGSTOP`) or hung
    /// inside its transaction held every other process's writes for as long as it was stopped, HTTP
    /// requests included, with no answer (black-box).
    async fn begin_write(&self) -> Result<DatabaseTransaction> {
        self.begin_write_on(&self.db).await
    }

    /// `begin_write` for a transaction that writes leases only: on a SQLite file its commit does not wait
    /// for the disk (`lease_db`). Only there: a power loss that loses such a lease also ends every process
    /// that could hold it, whereas a PostgreSQL server that loses a commit in a crash of its own comes back
    /// to holders that are still running.
    async fn begin_lease_write(&self) -> Result<DatabaseTransaction> {
        self.begin_write_on(self.lease_db.as_ref().unwrap_or(&self.db))
            .await
    }

    /// `begin_write` on `db`.
    async fn begin_write_on(&self, db: &DatabaseConnection) -> Result<DatabaseTransaction> {
        self.check_file()?;
        if self.backend.is_sqlite() {
            return db
                .begin_with_options(TransactionOptions {
                    sqlite_transaction_mode: Some(SqliteTransactionMode::Immediate),
                    ..TransactionOptions::default()
                })
                .await
                .map_err(self.fault("starting a write transaction"));
        }
        let txn = db
            .begin()
            .await
            .map_err(self.fault("starting a write transaction"))?;
        // One round trip (a simple query may hold several statements). Milliseconds; PostgreSQL takes no
        // bind parameter in SET.
        let lock = format!(
            "SET LOCAL lock_timeout = {}; LOCK TABLE event_outbox IN EXCLUSIVE MODE",
            self.busy_timeout.as_millis().max(1)
        );
        if let Err(source) = txn.execute_unprepared(&lock).await {
            let _ = txn.rollback().await;
            return Err(self.sql_error("locking the event outbox", source).into());
        }
        Ok(txn)
    }
}

#[async_trait]
impl MessageRepo for SqlRepo {
    async fn reclaim_space(&self) -> Result<u64> {
        self.reachable().await?;
        self.reclaim().await
    }

    async fn session(&self, id: &SessionId) -> Result<Option<Session>> {
        self.reachable().await?;
        self.read_session(id).await
    }

    async fn sessions(&self, directory: Option<String>) -> Result<Vec<Session>> {
        self.reachable().await?;
        self.read_sessions(directory).await
    }

    async fn sessions_overlapping(&self, directory: &str) -> Result<Vec<Session>> {
        self.reachable().await?;
        self.read_sessions_overlapping(directory).await
    }

    async fn messages(&self, session: &SessionId) -> Result<Vec<MessageWithParts>> {
        self.reachable().await?;
        self.read_messages(session).await
    }

    async fn message(
        &self,
        session: &SessionId,
        message: &MessageId,
    ) -> Result<Option<MessageWithParts>> {
        self.reachable().await?;
        self.read_message(session, message).await
    }

    async fn messages_from(
        &self,
        session: &SessionId,
        from: &MessageId,
    ) -> Result<Vec<MessageWithParts>> {
        self.reachable().await?;
        self.read_messages_from(session, Some(from), None).await
    }

    async fn messages_between(
        &self,
        session: &SessionId,
        from: &MessageId,
        before: Option<MessageId>,
    ) -> Result<Vec<MessageWithParts>> {
        self.reachable().await?;
        self.read_messages_from(session, Some(from), before.as_ref())
            .await
    }

    async fn message_infos(&self, session: &SessionId) -> Result<Vec<rewind_core::model::Message>> {
        self.reachable().await?;
        self.read_message_infos(session).await
    }

    async fn message_head(
        &self,
        session: &SessionId,
        message: &MessageId,
    ) -> Result<Option<MessageHead>> {
        self.reachable().await?;
        self.read_message_head(session, message).await
    }

    async fn session_diff(&self, session: &SessionId) -> Result<Vec<FileDiff>> {
        self.reachable().await?;
        self.read_session_diff(session).await
    }

    async fn warnings(&self, session: &SessionId) -> Result<Vec<Warning>> {
        self.reachable().await?;
        self.read_warnings(session).await
    }

    async fn revert_history(&self, session: &SessionId) -> Result<Vec<RevertHistoryEntry>> {
        self.reachable().await?;
        self.read_revert_history(session).await
    }

    async fn intents(&self) -> Result<Vec<IntentRecord>> {
        self.reachable().await?;
        self.read_intents().await
    }

    async fn lease(&self, key: &LeaseKey) -> Result<Option<Lease>> {
        self.reachable().await?;
        self.read_lease(key).await
    }

    async fn leases(&self) -> Result<Vec<Lease>> {
        self.reachable().await?;
        self.read_leases().await
    }

    async fn take_lease(&self, lease: &Lease, replacing: Option<Replacing>) -> Result<LeaseTake> {
        self.reachable().await?;
        self.take(lease, replacing).await
    }

    async fn take_leases(&self, leases: &[Lease]) -> Result<Vec<LeaseTake>> {
        self.reachable().await?;
        self.take_all(leases).await
    }

    async fn renew_lease(
        &self,
        key: &LeaseKey,
        token: &LeaseToken,
        expires_at: u64,
    ) -> Result<bool> {
        self.reachable().await?;
        self.renew(key, token, expires_at).await
    }

    async fn release_lease(&self, key: &LeaseKey, token: &LeaseToken) -> Result<()> {
        self.reachable().await?;
        self.release(key, token).await
    }

    async fn commit(&self, transaction: Transaction) -> Result<()> {
        self.reachable().await?;
        self.apply(transaction).await
    }

    async fn events_after(&self, after: u64, limit: u32) -> Result<Vec<StoredEvent>> {
        self.reachable().await?;
        self.read_events_after(after, limit).await
    }

    async fn last_event_seq(&self) -> Result<u64> {
        self.reachable().await?;
        self.read_last_event_seq().await
    }

    async fn event_id_at(&self, seq: u64) -> Result<Option<EventId>> {
        self.reachable().await?;
        self.read_event_id_at(seq).await
    }

    async fn outbox_over(&self, bytes: u64) -> Result<Option<u64>> {
        self.reachable().await?;
        self.read_outbox_over(bytes).await
    }

    async fn referenced_snapshots(
        &self,
        directory: Option<String>,
    ) -> Result<BTreeSet<SnapshotId>> {
        self.reachable().await?;
        self.read_referenced_snapshots(directory).await
    }

    async fn captures(&self, directory: Option<String>) -> Result<Vec<Capture>> {
        self.reachable().await?;
        self.read_captures(directory).await
    }
}
