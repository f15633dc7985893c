//! Opening a store: connect, refuse a database that cannot be written or was migrated by a newer rewind
//! (before anything is written), then apply the pending migrations. A store opened only to read
//! (`SqlConfig::read_only`) skips the write check and the migrations, and needs the current schema.

use std::collections::BTreeSet;
use std::sync::Mutex;
use std::time::Duration;

use sea_orm::sqlx::sqlite::{SqliteAutoVacuum, SqliteJournalMode, SqliteSynchronous};
use sea_orm::{
    ConnectOptions, ConnectionTrait, Database, DatabaseConnection, DbBackend, DbErr, EntityTrait,
    IsolationLevel, SqliteTransactionMode, Statement, TransactionOptions, TransactionTrait,
};
use sea_orm_migration::seaql_migrations;
use sea_orm_migration::{MigratorTrait, SchemaManager};

use crate::SqlRepo;
use crate::config::{Backend, SqlConfig, check_schema_name, display_target};
use crate::error::{FaultKind, SqlError, classify, fault_kind};
use crate::hooks::Hooks;
use crate::migration::Migrator;

/// The size SQLite cuts the write-ahead log back to after a checkpoint (`journal_size_limit`), in bytes.
const JOURNAL_SIZE_LIMIT: &str = "67108864";

/// How often migrating is retried when another process migrated the same database at the same moment.
const MIGRATION_ATTEMPTS: u32 = 3;

/// The start of the text whose hash names PostgreSQL's advisory lock for migrating one schema; the schema's
/// name follows it.
const MIGRATION_LOCK: &str = "rewind schema migrations: ";

pub(crate) async fn open(config: SqlConfig) -> Result<SqlRepo, SqlError> {
    crate::error::hide_url(&config.url);
    let target = display_target(&config.url);
    let config_error = |reason: &str| SqlError::Config {
        target: target.clone(),
        reason: reason.to_owned(),
    };
    let backend = Backend::of(&config.url)
        .ok_or_else(|| config_error("expected a sqlite:… or postgres://… URL"))?;
    // A PostgreSQL URL the driver cannot parse is refused before the driver sees it: its own text repeats
    // the URL, password and all (review).
    if backend == Backend::Postgres
        && config
            .url
            .parse::<sea_orm::sqlx::postgres::PgConnectOptions>()
            .is_err()
    {
        return Err(config_error(
            "it cannot be parsed as a PostgreSQL URL (postgres://user:password@host:port/database; \
             characters such as / ? @ : in the user or password must be percent-encoded)",
        ));
    }
    // SQLite's own errors for a directory are "unable to open" to write and a read error to read, which
    // reads as a full disk (review).
    if backend == Backend::SqliteFile && std::path::Path::new(&target).is_dir() {
        return Err(config_error("it is a directory, not a database file"));
    }
    if let Some(schema) = &config.schema {
        if backend != Backend::Postgres {
            return Err(config_error("a schema can only be given for PostgreSQL"));
        }
        if !check_schema_name(schema) {
            return Err(config_error(
                "a schema name must be a plain identifier (letters, digits, `_`)",
            ));
        }
    }

    let mut options = ConnectOptions::new(config.url.clone());
    options.sqlx_logging(false);
    options.acquire_timeout(config.acquire_timeout);
    match backend {
        Backend::SqliteMemory => {
            if config.max_connections.is_some_and(|n| n != 1) {
                return Err(config_error(
                    "an in-memory SQLite database lives in exactly one connection",
                ));
            }
            // The database lives as long as its one connection: never let the pool close it.
            options
                .max_connections(1)
                .min_connections(1)
                .idle_timeout(None)
                .max_lifetime(None);
        }
        Backend::SqliteFile => {
            options.max_connections(config.max_connections.unwrap_or(4).max(1));
            tend_sqlite_connections(
                &mut options,
                (!config.read_only).then_some(config.busy_timeout),
            );
        }
        Backend::Postgres => {
            options.max_connections(config.max_connections.unwrap_or(8).max(1));
            if let Some(schema) = &config.schema {
                options.set_schema_search_path(schema.clone());
            }
        }
    }
    let busy_timeout = config.busy_timeout;
    let read_only = config.read_only;
    // Every statement waits for a lock at most the busy timeout, also those outside a write transaction
    // (`begin_write` sets it there too): a lease's renewal or release waited, without end, on a commit of
    // a stopped process that held the same lease row `FOR SHARE` (review).
    let lock_timeout = format!("{}ms", busy_timeout.as_millis().max(1));
    options.map_sqlx_postgres_opts(move |postgres| {
        postgres.options([("lock_timeout", lock_timeout.as_str())])
    });
    // The pool's connections never create the file: one a pool opens after the database was moved or
    // deleted under a running process would make a fresh, empty database at its path (review). The file is
    // made here, once, when the URL asks for it (`mode=rwc`).
    let sqlite_file = backend == Backend::SqliteFile && !read_only;
    let existed = sqlite_file && std::path::Path::new(&target).is_file();
    let created = sqlite_file
        && !existed
        && config.url.contains("mode=rwc")
        && std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&target)
            .is_ok();
    let made = existed || created;
    if created {
        give_back_space_when_asked(&target, busy_timeout).await;
    }
    options.map_sqlx_sqlite_opts(move |sqlite| {
        if read_only {
            // Opened read-only, the file keeps the journal mode it has: setting it would write.
            return sqlite.read_only(true).busy_timeout(busy_timeout);
        }
        // WAL lets readers run beside the writer; FULL makes every commit durable before it returns
        // (an intent record is on disk before any file is touched). After a checkpoint the write-ahead log
        // is cut back to 64 MiB (a big transaction grew it for good).
        let sqlite = sqlite
            .pragma("journal_size_limit", JOURNAL_SIZE_LIMIT)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Full)
            .busy_timeout(busy_timeout)
            .foreign_keys(true);
        // (Else as the URL says: without `mode=rwc`, a missing file is not created either.)
        if made {
            sqlite.create_if_missing(false)
        } else {
            sqlite
        }
    });

    if backend == Backend::SqliteFile && !read_only {
        refuse_another_programs_database(&target, &known_migrations()).await?;
    }
    let classify =
        |context: &'static str, source: DbErr| classify(&target, busy_timeout, context, source);
    // Switching a fresh file to WAL needs a lock SQLite does not wait for: when several processes open
    // the same new file at once, a connection can fail at once with SQLITE_BUSY. Such a failure is retried
    // until the busy timeout has passed, as a busy statement would have waited.
    let started = std::time::Instant::now();
    let pooled = async {
        loop {
            match Database::connect(options.clone()).await {
                Err(source)
                    if fault_kind(&source) == FaultKind::Locked
                        && started.elapsed() < busy_timeout =>
                {
                    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                }
                other => break other,
            }
        }
    };
    let connected = if backend == Backend::Postgres {
        // The pool retries a server that cannot be reached until its acquire timeout (30 s) has passed,
        // then says only "pool timed out". One direct connection beside it says why at once (refused,
        // unknown host, failed login); when it succeeds, the pool's own connect decides.
        tokio::pin!(pooled);
        tokio::select! {
            connected = &mut pooled => connected,
            Err(source) = postgres_reachable(&config.url) => Err(source),
        }
    } else {
        pooled.await
    };
    // A SQLite file in a directory that cannot be written (a read-only mount, say): SQLite cannot make the
    // `-shm` file a WAL database is read with, when none was left beside it.
    // Opened to read, with no write-ahead log beside it to read, the file alone is the database: it is
    // read as immutable. Opened to write, it is refused as read-only, so a command that only shows opens
    // it to read (review: `log` failed with "unable to open database file").
    let connected = match connected {
        Err(source)
            if backend == Backend::SqliteFile
                && fault_kind(&source) == FaultKind::CannotOpen
                && std::fs::metadata(&target).is_ok_and(|meta| meta.is_file())
                && std::fs::File::open(&target).is_ok() =>
        {
            if !read_only {
                return Err(SqlError::ReadOnly {
                    target,
                    source: source.into(),
                });
            }
            let log = std::fs::metadata(format!("{target}-wal"));
            if log.is_ok_and(|log| log.len() > 0) {
                Err(source)
            } else {
                let mut immutable = options.clone();
                immutable.map_sqlx_sqlite_opts(move |sqlite| {
                    sqlite
                        .read_only(true)
                        .immutable(true)
                        .busy_timeout(busy_timeout)
                });
                Database::connect(immutable).await
            }
        }
        other => other,
    };
    let db = connected.map_err(|source| match fault_kind(&source) {
        FaultKind::CannotOpen | FaultKind::Other => SqlError::Open {
            target: target.clone(),
            source: source.into(),
        },
        _ => classify("connecting", source),
    })?;
    let checked = async {
        let refused = if read_only {
            None
        } else {
            writable(&db, backend)
                .await
                .map_err(|e| classify("checking that the database can be written", e))?
        };
        if let Some(source) = refused {
            return Err(SqlError::ReadOnly {
                target: target.clone(),
                source: source.into(),
            });
        }
        let applied = applied_migrations(&db)
            .await
            .map_err(|e| classify("reading the schema version", e))?;
        let known = known_migrations();
        let unknown: Vec<String> = applied.difference(&known).cloned().collect();
        if !unknown.is_empty() {
            return Err(SqlError::NewerSchema {
                target: target.clone(),
                unknown,
            });
        }
        if read_only && !known.is_subset(&applied) {
            return Err(SqlError::OutdatedReadOnly {
                target: target.clone(),
            });
        }
        if !known.is_subset(&applied) {
            migrate(&db, backend, config.schema.as_deref(), busy_timeout)
                .await
                .map_err(|e| classify("applying the schema migrations", e))?;
            // A newer rewind may have migrated the database between the look above and the lock: read
            // again, its migrations are refused as at any other start (review: the migration's error
            // path saw every known migration applied, and went on under the newer schema).
            let applied = applied_migrations(&db)
                .await
                .map_err(|e| classify("reading the schema version", e))?;
            let unknown: Vec<String> = applied.difference(&known).cloned().collect();
            if !unknown.is_empty() {
                return Err(SqlError::NewerSchema {
                    target: target.clone(),
                    unknown,
                });
            }
        }
        let missing = missing_tables(&db, backend)
            .await
            .map_err(|e| classify("reading the schema's tables", e))?;
        if !missing.is_empty() {
            return Err(SqlError::MissingTables {
                target: target.clone(),
                missing,
            });
        }
        Ok(())
    };
    if let Err(error) = checked.await {
        let _ = db.close().await;
        return Err(error);
    }
    // The file the connections opened, as SQLite names it (its full path, symlinks and `..` resolved its
    // own way), to leave out of snapshots and to see it deleted or replaced later.
    let sqlite_path = if backend == Backend::SqliteFile {
        Some(
            sqlite_main_file(&db)
                .await
                .unwrap_or_else(|| target.clone().into()),
        )
    } else {
        None
    };
    let identity = match database_identity(&db, backend).await {
        Ok(identity) => identity,
        // PostgreSQL's stores are keyed on it: without it this process would key them on the URL as
        // spelled, and use other stores than every other process of this database (review). Migrated
        // just now, the table is there, so a failure to read it is a fault, said as such.
        Err(error) if backend == Backend::Postgres && !read_only => {
            let _ = db.close().await;
            return Err(classify("reading the database's identity", error));
        }
        Err(_) => None,
    };
    let file = sqlite_path
        .as_deref()
        .and_then(|path| std::fs::metadata(path).ok())
        .map(|m| {
            use std::os::unix::fs::MetadataExt;
            (m.dev(), m.ino())
        });
    let lease_db = if backend == Backend::SqliteFile && !read_only {
        // The file the main pool opened, by SQLite's own resolution of the URL's path: a symlink on that
        // path pointed elsewhere since cannot send lease writes to another database.
        let url = sqlite_path
            .as_deref()
            .and_then(std::path::Path::to_str)
            .map(|path| format!("sqlite://{}?mode=rw", crate::escape_sqlite_path(path)))
            .unwrap_or_else(|| config.url.clone());
        match connect_lease_pool(&url, busy_timeout).await {
            Ok(lease_db) => Some(lease_db),
            Err(source) => {
                let _ = db.close().await;
                return Err(classify("connecting for lease writes", source));
            }
        }
    } else {
        None
    };
    Ok(SqlRepo {
        db,
        lease_db,
        backend,
        target,
        sqlite_path,
        busy_timeout,
        file,
        identity,
        hooks: Mutex::new(Hooks::default()),
        outage: std::sync::Arc::new(crate::Outage {
            away: tokio::sync::watch::Sender::new(false),
            probing: std::sync::atomic::AtomicBool::new(false),
        }),
    })
}

/// Makes a SQLite file's pool close a connection handed back inside a transaction instead of keeping it.
/// SQLite ends a transaction by itself on some errors (a full disk, `SQLITE_IOERR`, a trigger's
/// `RAISE(ROLLBACK)`); the driver then still counts it open, its rollback fails, and the connection went
/// back to the pool so: its next transaction began with a savepoint, which starts a real one; a second
/// failure rolled back to that savepoint and left its transaction open, and every later commit released
/// a savepoint inside it, answered as committed, never stored, the write lock held until the process
/// ended (review: `rewind serve` with the disk full answered 200 for a message it never stored). A rollback
/// the driver queued (a transaction dropped unfinished) is run first.
///
/// And, for a pool that writes (`writes`: the busy timeout to set on each connection again afterwards), a
/// connection that cannot write serves the request it was opened for and is then closed, never kept.
/// SQLite opens a file it cannot open for writing read-only, without a word (a file made immutable, or a
/// mount made read-only, under a running process), and the pool kept such a connection once the file was
/// writable again: every write it was given failed with "attempt to write a readonly database" (CI:
/// `bad_input::a_database_made_read_only_under_the_server_is_said_so_to_the_client`). Each new connection
/// is asked with a write that is rolled back (`cannot_write`, without waiting); a read-only answer marks
/// it `query_only`, and the pool closes a marked connection when it comes back. Stop 58's probe was
/// `BEGIN IMMEDIATE` alone, which on a file opened read-only begins a read transaction and says nothing
/// (seen with `strace`: the connection opened inside the read-only spell, `O_RDWR` refused, `O_RDONLY`
/// taken), so it kept the very connections it was for; and a connection it refused failed nothing at
/// once: the pool retries a connection its `after_connect` refuses until the acquire timeout, so the
/// request waited 30 s to be told the database was busy. Marked connections are counted; only while
/// there are some does a connection coming back cost a look at its mark (one closed another way, its
/// look failing or the pool closing, leaves the count up: the looks go on, nothing worse). The first
/// connection of a pool goes idle without coming back through `after_release` (sqlx's `connect_with`);
/// marked, it is met by the open's write check, which refuses the database as read-only, as it then is.
fn tend_sqlite_connections(options: &mut ConnectOptions, writes: Option<Duration>) {
    use sea_orm::sqlx::{Connection as _, Executor as _, Sqlite};
    use sqlx_core::transaction::TransactionManager as _;
    use std::sync::atomic::{AtomicUsize, Ordering};
    fn depth(conn: &sea_orm::sqlx::sqlite::SqliteConnection) -> usize {
        <Sqlite as sea_orm::sqlx::Database>::TransactionManager::get_transaction_depth(conn)
    }
    let waits = writes.map(|busy| format!("PRAGMA busy_timeout = {}", busy.as_millis()));
    let marked = std::sync::Arc::new(AtomicUsize::new(0));
    options.map_sqlx_sqlite_pool_opts(move |pool| {
        let pool = pool.after_release({
            let marked = marked.clone();
            move |conn, _| {
                let marked = marked.clone();
                Box::pin(async move {
                    if marked.load(Ordering::Acquire) > 0 {
                        let query_only: i64 = sea_orm::sqlx::query_scalar("PRAGMA query_only")
                            .fetch_one(&mut *conn)
                            .await?;
                        if query_only != 0 {
                            let _ = marked.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                                n.checked_sub(1)
                            });
                            return Ok(false);
                        }
                    }
                    if depth(conn) == 0 {
                        return Ok(true);
                    }
                    conn.ping().await?;
                    Ok(depth(conn) == 0)
                })
            }
        });
        let Some(waits) = waits.clone() else {
            return pool;
        };
        let marked = marked.clone();
        pool.after_connect(move |conn, _| {
            let (waits, marked) = (waits.clone(), marked.clone());
            Box::pin(async move {
                conn.execute("PRAGMA busy_timeout = 0").await?;
                conn.execute("BEGIN").await?;
                let cannot = cannot_write(conn).await;
                let rolled_back = conn.execute("ROLLBACK").await;
                conn.execute(sea_orm::sqlx::AssertSqlSafe(waits)).await?;
                if cannot || rolled_back.is_err() {
                    conn.execute("PRAGMA query_only = 1").await?;
                    marked.fetch_add(1, Ordering::AcqRel);
                }
                Ok(())
            })
        })
    });
}

/// Whether this connection cannot write, asked inside a transaction the caller rolls back: the file's
/// `user_version` set to the value it has, the smallest write SQLite does on any database, a new empty one
/// too. Said only by SQLite's read-only answer (`SQLITE_READONLY` and its kinds); busy at the write is
/// another connection's write lock, which says nothing against this one; any other failure (a corrupt
/// page, a disk error) is the database's own, for the request to meet and report as what it is (review: a
/// corrupt file was said to be read-only). Busy before the write (the read of `user_version`: a recovery
/// under way) leaves it unknown, and a connection not known to write is not trusted either.
async fn cannot_write(conn: &mut sea_orm::sqlx::sqlite::SqliteConnection) -> bool {
    use sea_orm::sqlx::Executor as _;
    let read = sea_orm::sqlx::query_scalar::<_, i64>("PRAGMA user_version")
        .fetch_one(&mut *conn)
        .await;
    let version = match read {
        Ok(version) => version,
        Err(error) => return matches!(primary_code(&error), Some(5 | 6 | 8)),
    };
    let written = conn
        .execute(sea_orm::sqlx::AssertSqlSafe(format!(
            "PRAGMA user_version = {version}"
        )))
        .await;
    written.is_err_and(|error| primary_code(&error) == Some(8))
}

/// SQLite's primary result code of a driver error (the low byte of the extended code it reports).
fn primary_code(error: &sea_orm::sqlx::Error) -> Option<i64> {
    error
        .as_database_error()
        .and_then(|e| e.code())
        .and_then(|code| code.parse::<i64>().ok())
        .map(|code| code & 0xff)
}

/// Makes the SQLite file this process just created (empty) free the pages of deleted rows when asked
/// (`SqlRepo::reclaim`, after gc): incremental auto-vacuum, which must be set before the file's header is
/// first written (switching to WAL writes it) and which SQLite keeps for good. Set once, on a connection
/// of its own: setting it on a file that has it already writes to the file, which every connection of
/// the pool would then do when it opens (and wait for another process's write lock to do it). When it
/// cannot be set (another process opened the new file first), the file keeps auto-vacuum off, and its
/// size until `VACUUM`.
async fn give_back_space_when_asked(target: &str, busy_timeout: Duration) {
    use sea_orm::sqlx::{ConnectOptions as _, Connection as _};
    let options = sea_orm::sqlx::sqlite::SqliteConnectOptions::new()
        .filename(target)
        .create_if_missing(false)
        .busy_timeout(busy_timeout)
        .auto_vacuum(SqliteAutoVacuum::Incremental)
        .journal_mode(SqliteJournalMode::Wal);
    if let Ok(connection) = options.connect().await {
        let _ = connection.close().await;
    }
}

/// The second pool of a SQLite file, for lease writes (`SqlRepo::lease_db`): the main pool's settings but
/// `synchronous=NORMAL`, so a commit appends to the write-ahead log without waiting for the disk. Two
/// connections (lease writes are serialised by SQLite's write lock anyway), opened at the first lease
/// write: a command that only reads opens none.
async fn connect_lease_pool(
    url: &str,
    busy_timeout: Duration,
) -> Result<DatabaseConnection, DbErr> {
    let mut options = ConnectOptions::new(url.to_owned());
    options
        .sqlx_logging(false)
        .max_connections(2)
        .connect_lazy(true);
    tend_sqlite_connections(&mut options, Some(busy_timeout));
    // Opened after the main pool made the file: never creating it (see `open`).
    options.map_sqlx_sqlite_opts(move |sqlite| {
        sqlite
            .pragma("journal_size_limit", JOURNAL_SIZE_LIMIT)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Normal)
            .busy_timeout(busy_timeout)
            .foreign_keys(true)
            .create_if_missing(false)
    });
    Database::connect(options).await
}

/// The identity the database drew when it was first migrated (`rewind_identity`), the same through every
/// spelling of its URL; none when it has no row, the query's error when it cannot be read. On PostgreSQL it
/// comes with the server's port, the database's name and the schema, as the server names them: a copy of the
/// database (`pg_dump` into another database or server of the same machine) keeps the drawn value, and must
/// not share its stores.
async fn database_identity(
    db: &DatabaseConnection,
    backend: Backend,
) -> Result<Option<String>, sea_orm::DbErr> {
    let (backend, sql) = match backend {
        Backend::Postgres => (
            DbBackend::Postgres,
            "SELECT current_setting('port') || ' ' || current_database() || ' ' || current_schema() \
             || ' ' || value AS value FROM rewind_identity WHERE id = 1",
        ),
        _ => (
            DbBackend::Sqlite,
            "SELECT value FROM rewind_identity WHERE id = 1",
        ),
    };
    let Some(row) = db
        .query_one_raw(Statement::from_string(backend, sql))
        .await?
    else {
        return Ok(None);
    };
    Ok(row.try_get("", "value").ok())
}

/// The file of the main database as SQLite opened it (`PRAGMA database_list`): its unix VFS makes the
/// path absolute and resolves symlinks and `..` its own way (`missing/../x.db` by name, `link/../x.db`
/// through the link), so the path is asked of SQLite rather than worked out again. `None` when it
/// cannot say.
async fn sqlite_main_file(db: &DatabaseConnection) -> Option<std::path::PathBuf> {
    let row = db
        .query_one_raw(Statement::from_string(
            DbBackend::Sqlite,
            "SELECT file FROM pragma_database_list WHERE name = 'main'",
        ))
        .await
        .ok()??;
    let file: String = row.try_get("", "file").ok()?;
    (!file.is_empty()).then(|| file.into())
}

/// One connection to the PostgreSQL server at `url`, closed at once: the cause when it cannot be made.
async fn postgres_reachable(url: &str) -> Result<(), DbErr> {
    use sea_orm::sqlx::{ConnectOptions as _, Connection as _};
    let failed = |source: sea_orm::SqlxError| {
        DbErr::Conn(sea_orm::RuntimeErr::SqlxError(std::sync::Arc::new(source)))
    };
    let options: sea_orm::sqlx::postgres::PgConnectOptions = url.parse().map_err(failed)?;
    let connection = options.connect().await.map_err(failed)?;
    let _ = connection.close().await;
    Ok(())
}

/// Checks, without writing, that the database can be written. SQLite takes its write lock (`BEGIN
/// IMMEDIATE`, which waits out another writer up to the busy timeout), creates a table and rolls back: on a
/// read-only file `BEGIN IMMEDIATE` quietly starts a read transaction, and only a write statement fails.
/// PostgreSQL reports whether its transactions are read-only (a standby, a read-only default).
/// `Ok(Some(reason))` when it cannot.
async fn writable(db: &DatabaseConnection, backend: Backend) -> Result<Option<DbErr>, DbErr> {
    if backend.is_sqlite() {
        let txn = db
            .begin_with_options(TransactionOptions {
                sqlite_transaction_mode: Some(SqliteTransactionMode::Immediate),
                ..TransactionOptions::default()
            })
            .await?;
        let probe = txn
            .execute_unprepared("CREATE TABLE rewind_write_probe (x INTEGER)")
            .await;
        txn.rollback().await?;
        return match probe {
            Ok(_) => Ok(None),
            Err(error) if fault_kind(&error) == FaultKind::ReadOnly => Ok(Some(error)),
            Err(error) => Err(error),
        };
    }
    let row = db
        .query_one_raw(Statement::from_string(
            db.get_database_backend(),
            "SELECT current_setting('transaction_read_only') AS read_only",
        ))
        .await?;
    let read_only = match row {
        Some(row) => row.try_get::<String>("", "read_only")?,
        None => String::new(),
    };
    Ok((read_only == "on")
        .then(|| DbErr::Custom("the server accepts only read-only transactions".to_owned())))
}

fn known_migrations() -> BTreeSet<String> {
    Migrator::migrations()
        .iter()
        .map(|m| m.name().to_owned())
        .collect()
}

/// The migrations applied to the database, read without creating anything.
/// Refuses the SQLite file at `path` when it is another program's database: tables, and no migration of
/// rewind's. Looked at read-only, before the connections that switch it to WAL and migrate it: pointed
/// at another program's database (a slip of `--database-url`), rewind changed its journal mode for good
/// and created its tables in it (review). A file that is missing, empty, or cannot be read so is left to
/// the usual open, which says why.
async fn refuse_another_programs_database(
    path: &str,
    known: &BTreeSet<String>,
) -> Result<(), SqlError> {
    if std::fs::metadata(path).map_or(true, |meta| meta.len() == 0) {
        return Ok(());
    }
    let url = format!(
        "sqlite://{}?mode=ro",
        crate::config::escape_sqlite_path(path)
    );
    let mut options = ConnectOptions::new(url);
    options
        .max_connections(1)
        .sqlx_logging(false)
        .map_sqlx_sqlite_opts(|sqlite| sqlite.read_only(true));
    let Ok(db) = Database::connect(options).await else {
        return Ok(());
    };
    let looked = async {
        let rows = db
            .query_all_raw(Statement::from_string(
                DbBackend::Sqlite,
                "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' \
                 ORDER BY name",
            ))
            .await?;
        let tables: Vec<String> = rows
            .iter()
            .filter_map(|row| row.try_get_by_index::<String>(0).ok())
            .collect();
        let applied = if tables.iter().any(|table| table == "seaql_migrations") {
            applied_migrations(&db).await?
        } else {
            BTreeSet::new()
        };
        Ok::<_, DbErr>((tables, applied))
    };
    let looked = looked.await;
    let _ = db.close().await;
    let Ok((tables, applied)) = looked else {
        return Ok(());
    };
    if !tables.is_empty() && applied.is_disjoint(known) {
        return Err(SqlError::NotRewind {
            target: path.to_owned(),
            tables: tables
                .into_iter()
                .filter(|table| table != "seaql_migrations")
                .take(5)
                .collect(),
        });
    }
    Ok(())
}

/// The tables rewind's schema has, as its migrations made them.
const TABLES: [&str; 13] = [
    "capture",
    "event_outbox",
    "intent",
    "lease",
    "message",
    "part",
    "revert_history",
    "rewind_identity",
    "seaql_migrations",
    "session",
    "session_diff",
    "shared_text",
    "warning",
];

/// Which of rewind's tables the database lacks (dropped by hand or by a damaged file): checked at every
/// open, in one query, so such a database is refused before any operation writes an intent and touches
/// files it could then not record (review: without `event_outbox`, an undo reverted the files, failed to
/// store, and left an intent every later operation was refused for).
async fn missing_tables(db: &DatabaseConnection, backend: Backend) -> Result<Vec<String>, DbErr> {
    let (db_backend, sql) = if backend == Backend::Postgres {
        (
            DbBackend::Postgres,
            "SELECT table_name AS name FROM information_schema.tables WHERE table_schema = current_schema()",
        )
    } else {
        (
            DbBackend::Sqlite,
            "SELECT name FROM sqlite_master WHERE type = 'table'",
        )
    };
    let rows = db
        .query_all_raw(Statement::from_string(db_backend, sql))
        .await?;
    let mut present = BTreeSet::new();
    for row in rows {
        present.insert(row.try_get::<String>("", "name")?);
    }
    Ok(TABLES
        .iter()
        .filter(|table| !present.contains(**table))
        .map(|table| (*table).to_owned())
        .collect())
}

async fn applied_migrations(db: &DatabaseConnection) -> Result<BTreeSet<String>, DbErr> {
    let manager = SchemaManager::new(db);
    if !manager.has_table("seaql_migrations").await? {
        return Ok(BTreeSet::new());
    }
    Ok(seaql_migrations::Entity::find()
        .all(db)
        .await?
        .into_iter()
        .map(|m| m.version)
        .collect())
}

/// Applies the pending migrations, all inside one transaction (each migration a savepoint in it), so that
/// two processes opening the same fresh database at once never both create its tables:
/// - on SQLite the transaction is `BEGIN IMMEDIATE`: a second process waits for the write lock (up to the
///   busy timeout) and then finds nothing left to do, instead of failing when its read transaction cannot
///   be upgraded to a write one;
/// - on PostgreSQL the transaction first takes an advisory lock named after the schema
///   (`pg_advisory_xact_lock`, waited for up to the busy timeout, released at commit or rollback); the
///   second process waits for it, then reads the first one's committed migration rows and has nothing left
///   to do. Without the lock each would create the same table, and one would fail on a duplicate key of
///   PostgreSQL's own catalogue.
///
/// Should it fail all the same (a database being migrated by an older rewind, which takes no lock), the
/// migrations are read again: all applied means another process did the work.
async fn migrate(
    db: &DatabaseConnection,
    backend: Backend,
    schema: Option<&str>,
    busy_timeout: Duration,
) -> Result<(), DbErr> {
    let known = known_migrations();
    let mut attempt = 1;
    loop {
        let result = async {
            if backend.is_sqlite() {
                let txn = db
                    .begin_with_options(TransactionOptions {
                        sqlite_transaction_mode: Some(SqliteTransactionMode::Immediate),
                        ..TransactionOptions::default()
                    })
                    .await?;
                Migrator::up(&txn, None).await?;
                return txn.commit().await;
            }
            // READ COMMITTED whatever the server's default: each statement after the lock wait then sees
            // what the process that held it committed (under REPEATABLE READ the snapshot would be the one
            // taken before the wait, and the migrations would be tried again).
            let txn = db
                .begin_with_options(TransactionOptions {
                    isolation_level: Some(IsolationLevel::ReadCommitted),
                    ..TransactionOptions::default()
                })
                .await?;
            // `SET LOCAL` ends with the transaction; a connection of the pool keeps no changed setting. It
            // bounds every lock the migrations wait for, the advisory one first (milliseconds; PostgreSQL
            // takes at most `i32::MAX`).
            let timeout_ms = busy_timeout.as_millis().clamp(1, i32::MAX as u128);
            txn.execute_unprepared(&format!("SET LOCAL lock_timeout = {timeout_ms}"))
                .await?;
            // Named after the schema the migrations create their tables in: the configured one, or else
            // the connection's search path (the URL may set one).
            let lock = match schema {
                Some(schema) => Statement::from_sql_and_values(
                    DbBackend::Postgres,
                    "SELECT pg_advisory_xact_lock(hashtext($1))",
                    [format!("{MIGRATION_LOCK}{schema}").into()],
                ),
                None => Statement::from_sql_and_values(
                    DbBackend::Postgres,
                    "SELECT pg_advisory_xact_lock(hashtext($1 || current_setting('search_path')))",
                    [format!("{MIGRATION_LOCK}search_path ").into()],
                ),
            };
            txn.execute_raw(lock).await?;
            if let Some(schema) = schema {
                txn.execute_unprepared(&format!("CREATE SCHEMA IF NOT EXISTS \"{schema}\""))
                    .await?;
            }
            Migrator::up(&txn, None).await?;
            txn.commit().await
        }
        .await;
        match result {
            Ok(()) => return Ok(()),
            Err(error) => {
                let done = applied_migrations(db)
                    .await
                    .is_ok_and(|applied| known.is_subset(&applied));
                if done {
                    return Ok(());
                }
                // On PostgreSQL a lock waited out has already taken the whole busy timeout.
                let waited_out = !backend.is_sqlite() && fault_kind(&error) == FaultKind::Locked;
                if attempt >= MIGRATION_ATTEMPTS || waited_out {
                    return Err(error);
                }
                attempt += 1;
            }
        }
    }
}

impl SqlRepo {
    /// `MessageRepo::reclaim_space`: a SQLite file made with incremental auto-vacuum
    /// (`give_back_space_when_asked`; a file made before has it off, and keeps its size until `VACUUM`)
    /// gives its free pages back, in one write transaction that moves pages and changes no row. Elsewhere
    /// nothing is done.
    pub(crate) async fn reclaim(&self) -> rewind_core::Result<u64> {
        if self.backend != Backend::SqliteFile {
            return Ok(0);
        }
        // 2: incremental.
        if self.pragma_number("PRAGMA auto_vacuum").await? != 2 {
            return Ok(0);
        }
        let page = self.pragma_number("PRAGMA page_size").await?;
        let free = self.pragma_number("PRAGMA freelist_count").await?;
        if free == 0 {
            return Ok(0);
        }
        self.db
            .execute_unprepared("PRAGMA incremental_vacuum")
            .await
            .map_err(self.fault("giving the database's free pages back to the file system"))?;
        let left = self.pragma_number("PRAGMA freelist_count").await?;
        Ok(u64::try_from(free.saturating_sub(left).saturating_mul(page)).unwrap_or(0))
    }

    /// The number a SQLite pragma answers (0 when it answers none).
    async fn pragma_number(&self, pragma: &'static str) -> rewind_core::Result<i64> {
        let row = self
            .db
            .query_one_raw(Statement::from_string(DbBackend::Sqlite, pragma))
            .await
            .map_err(self.fault("reading the database's page counts"))?;
        Ok(row
            .and_then(|row| row.try_get_by_index::<i64>(0).ok())
            .unwrap_or_default())
    }
}
