//! The adapter's errors: what went wrong with which database, mapped to `rewind_core::Error` at the port.

use std::time::Duration;

use rewind_core::error::StorageFault;
use sea_orm::{DbErr, RuntimeErr};

/// Every failure of the SQL adapter. Each names the database (a SQLite file or a Postgres URL without its
/// password), so a message read in a log says which store is at fault. The driver's error is the
/// `source()`, not repeated in the message, so a printed cause chain shows it once.
#[derive(Debug, thiserror::Error)]
pub enum SqlError {
    /// The URL or configuration cannot be used.
    #[error("cannot use the database {target}: {reason}")]
    Config {
        /// The database.
        target: String,
        /// What is wrong.
        reason: String,
    },
    /// The database cannot be reached or opened.
    #[error("cannot open the database {target}")]
    Open {
        /// The database.
        target: String,
        /// The driver's error.
        #[source]
        source: DriverError,
    },
    /// Another process holds the database's write lock for longer than the busy timeout.
    #[error(
        "the database {target} is locked by another process (waited {waited_ms} ms); \
         retry when the other process using it (another rewind command, say) has finished"
    )]
    Locked {
        /// The database.
        target: String,
        /// How long we waited.
        waited_ms: u128,
        /// The driver's error.
        #[source]
        source: DriverError,
    },
    /// No connection came from the pool in time (30 s): every one stayed in use (long writes waiting on
    /// each other, or more requests at once than the connections serve), or, on a SQLite file, a new one
    /// could not be opened in time (on PostgreSQL that is a server that cannot be reached:
    /// `SqlRepo::sql_error` tells the two apart by the pool's state). Reported as a busy database (`StorageFault::Busy`), which may be tried
    /// again, not as an internal fault (a soak whose server a profiler froze: a 500 "internal error").
    #[error(
        "the database {target} was too busy: no connection to it came free in time; try again once the \
         load drops"
    )]
    Saturated {
        /// The database.
        target: String,
        /// The driver's error.
        #[source]
        source: DriverError,
    },
    /// The database cannot be written (a read-only file, mount or connection).
    #[error("the database {target} is read-only; rewind needs to write to it")]
    ReadOnly {
        /// The database.
        target: String,
        /// The driver's error.
        #[source]
        source: DriverError,
    },
    /// A database opened only to read whose schema is older than this binary's: the migrations it needs
    /// cannot be applied without writing.
    #[error(
        "the database {target} was written by an older rewind and cannot be read before its schema is \
         updated, which needs writing to it; run any rewind command with write access to it once"
    )]
    OutdatedReadOnly {
        /// The database.
        target: String,
    },
    /// The file is not a SQLite database, or is damaged.
    #[error(
        "the database {target} is corrupt or is not a SQLite database; restore it from a backup, or try \
         `sqlite3 FILE .recover` into a new file put in its place; moving it aside starts afresh, without the \
         undo history it held (the snapshots stay on disk, but no session names them)"
    )]
    Corrupt {
        /// The database.
        target: String,
        /// The driver's error.
        #[source]
        source: DriverError,
    },
    /// The disk under the database failed a read or write, or is full (SQLite's `SQLITE_IOERR` and
    /// `SQLITE_FULL`, PostgreSQL's `53100` disk full).
    #[error(
        "the database {target} could not be read or written on its disk: is that disk full? Free space \
         there, then try again"
    )]
    Disk {
        /// The database.
        target: String,
        /// The driver's error.
        #[source]
        source: DriverError,
    },
    /// The database was migrated by a newer rewind: this binary does not know some of its migrations.
    #[error(
        "the database {target} was written by a newer rewind (schema migrations this version does not know: \
         {}); upgrade rewind to use it", unknown.join(", ")
    )]
    NewerSchema {
        /// The database.
        target: String,
        /// The migrations this binary does not know.
        unknown: Vec<String>,
    },
    /// The SQLite file is another program's database: it holds tables and none of rewind's migrations.
    /// Refused before anything is written to it.
    #[error(
        "the database {target} is not rewind's: it holds other tables ({}) and no rewind schema; give \
         rewind a database file of its own (--database-url), or leave the setting out for the default",
        tables.join(", ")
    )]
    NotRewind {
        /// The database.
        target: String,
        /// Some of the tables it holds.
        tables: Vec<String>,
    },
    /// rewind's schema is applied but some of its tables are gone (dropped by hand, a damaged file).
    #[error(
        "the database {target} is damaged: its table(s) {} are gone; restore it from a backup, or move it \
         aside to start afresh, without the undo history it held",
        missing.join(", ")
    )]
    MissingTables {
        /// The database.
        target: String,
        /// The tables it lacks.
        missing: Vec<String>,
    },
    /// A statement failed.
    #[error("{context} failed on the database {target}")]
    Query {
        /// The database.
        target: String,
        /// What rewind was doing.
        context: &'static str,
        /// The driver's error.
        #[source]
        source: DriverError,
    },
    /// A stored row could not be read back.
    #[error("a stored {what}{row} in the database {target} cannot be read: {reason}")]
    Decode {
        /// The database.
        target: String,
        /// Which kind of row.
        what: &'static str,
        /// Which row, when known (` (prt_…)`, ` (3 of session ses_…)`), so that it can be found.
        row: String,
        /// Why.
        reason: String,
    },
    /// A value cannot be stored (a number beyond the database's range).
    #[error("cannot store {what} in the database {target}: {reason}")]
    Encode {
        /// The database.
        target: String,
        /// Which value.
        what: &'static str,
        /// Why.
        reason: String,
    },
    /// The SQLite file was deleted or replaced while this process had it open: what it wrote now would go
    /// to a file no other process sees, and be lost when this one ends.
    #[error(
        "the database file {target} was deleted or replaced while rewind had it open; nothing was stored: \
         restart rewind to use the file now at that path"
    )]
    Replaced {
        /// The database.
        target: String,
    },
    /// A fault injected by a test hook.
    #[error("injected fault on the database {target}: {what}")]
    Injected {
        /// The database.
        target: String,
        /// Which hook.
        what: &'static str,
    },
}

/// The driver's error as people read it. A PostgreSQL server error is its message, SQLSTATE, detail and
/// hint, without the line of PostgreSQL's own C source that sqlx's text appends (`… for user "x" at line
/// 334`), which reads like a line of the user's configuration. Any other error is the driver's text. The
/// driver's error itself is kept (`DriverError::db`, and `Debug` shows it).
#[derive(Debug)]
pub struct DriverError(DbErr);

impl DriverError {
    /// The driver's error.
    pub fn db(&self) -> &DbErr {
        &self.0
    }
}

impl From<DbErr> for DriverError {
    fn from(error: DbErr) -> Self {
        DriverError(error)
    }
}

/// The database URLs this process opened (`hide_url`), as written and percent-decoded, each with the
/// form that may be shown (its password replaced): a driver's text that repeats a URL shows that form.
static URLS: std::sync::Mutex<Vec<(String, String)>> = std::sync::Mutex::new(Vec::new());

/// Makes every driver error's text show `url` (as written, or percent-decoded) without its password: the
/// driver's text of a URL it cannot parse repeats it whole (review: `postgres://u:PASS@[::1/db` showed
/// PASS in about half the runs, as the reachability probe or the pool failed first). Only whole URLs are
/// replaced: a password that is also a common word (`postgres:postgres`) stays in the server's own words
/// (`user "postgres"`).
pub(crate) fn hide_url(url: &str) {
    let shown = crate::config::redact_password(url);
    if shown == url {
        return;
    }
    let mut known = URLS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    for written in [url.to_owned(), crate::config::decoded(url)] {
        if !known.iter().any(|(known, _)| *known == written) {
            known.push((written, shown.clone()));
        }
    }
    known.sort_by_key(|(written, _)| std::cmp::Reverse(written.len()));
}

/// `text` with every URL `hide_url` was given shown without its password.
fn without_secrets(text: String) -> String {
    let known = URLS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    known.iter().fold(text, |text, (written, shown)| {
        text.replace(written.as_str(), shown)
    })
}

impl std::fmt::Display for DriverError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&without_secrets(self.text()))
    }
}

impl DriverError {
    /// The text `Display` shows, before secrets are hidden.
    fn text(&self) -> String {
        use std::fmt::Write as _;
        let server = sqlx_error(&self.0).and_then(postgres_error);
        let Some(server) = server else {
            return self.0.to_string();
        };
        let mut text = format!(
            "the PostgreSQL server said: {} (SQLSTATE {})",
            server.message(),
            server.code()
        );
        if let Some(detail) = server.detail() {
            let _ = write!(text, "; {detail}");
        }
        if let Some(hint) = server.hint() {
            let _ = write!(text, "; hint: {hint}");
        }
        text
    }
}

// No `source()`: the driver's own text, which `Display` replaces, would be printed after it by a cause chain.
impl std::error::Error for DriverError {}

impl SqlError {
    /// Whether a PostgreSQL database could not be reached: no connection came from the pool in time (a
    /// server that is down or unreachable), or one could not be made. A connection that broke during a
    /// statement is not counted: whether that statement was stored is not known.
    pub fn is_unreachable(&self) -> bool {
        let (SqlError::Open { source, target } | SqlError::Query { source, target, .. }) = self
        else {
            return false;
        };
        if !is_postgres(target) {
            return false;
        }
        let db = source.db();
        matches!(db, DbErr::ConnectionAcquire(_))
            || sqlx_error(db).is_some_and(|e| match e {
                sea_orm::sqlx::Error::PoolTimedOut | sea_orm::sqlx::Error::PoolClosed => true,
                // Under a statement, whether it was stored is not known (`is_connection_lost`).
                sea_orm::sqlx::Error::Io(_) => matches!(db, DbErr::Conn(_)),
                _ => false,
            })
    }
}

impl SqlError {
    /// Whether the connection to a PostgreSQL server broke during a statement: the server ended it (an
    /// error of `FATAL` or `PANIC` severity, which the server sends as it closes the connection:
    /// `pg_terminate_backend`, a shutdown, a crash of another backend, an idle-session timeout) or it
    /// failed under the statement (an I/O error). Whether the statement was stored is not known; the pool
    /// drops the connection, so the next request gets a new one. An error on getting a connection
    /// (`DbErr::Conn`: nothing was sent) is not one: that is a server that cannot be reached.
    pub fn is_connection_lost(&self) -> bool {
        let SqlError::Query { source, target, .. } = self else {
            return false;
        };
        if !is_postgres(target) {
            return false;
        }
        let (DbErr::Exec(RuntimeErr::SqlxError(e)) | DbErr::Query(RuntimeErr::SqlxError(e))) =
            source.db()
        else {
            return false;
        };
        matches!(e.as_ref(), sea_orm::sqlx::Error::Io(_))
            || postgres_error(e).is_some_and(|server| {
                use sea_orm::sqlx::postgres::PgSeverity;
                matches!(server.severity(), PgSeverity::Fatal | PgSeverity::Panic)
            })
    }

    /// The storage fault this error is, as the core names it, if it is one a user can act on.
    pub fn fault(&self) -> Option<StorageFault> {
        match self {
            SqlError::Locked { .. } => Some(StorageFault::Locked),
            SqlError::Saturated { .. } => Some(StorageFault::Busy),
            SqlError::ReadOnly { .. } | SqlError::OutdatedReadOnly { .. } => {
                Some(StorageFault::ReadOnly)
            }
            SqlError::Replaced { .. } => Some(StorageFault::Replaced),
            SqlError::Corrupt { .. } | SqlError::MissingTables { .. } => {
                Some(StorageFault::Corrupt)
            }
            // `SQLITE_FULL` or PostgreSQL's disk full; `SQLITE_IOERR` is any other failure of the disk.
            SqlError::Disk { source, .. } if is_full(source.db()) => Some(StorageFault::DiskFull),
            _ if self.is_unreachable() => Some(StorageFault::Unreachable),
            _ if self.is_connection_lost() => Some(StorageFault::ConnectionLost),
            _ => None,
        }
    }
}

/// Whether the SQLite database `target` (a file's path; a PostgreSQL URL is not) or one of its files, its
/// `-wal` and `-shm` beside it, cannot be written now: a read-only mount (`EROFS`), an
/// immutable file (`EPERM`), no permission (`EACCES`). Asked with `access(2)`, which opens nothing: a
/// file of the database opened and closed by this process would drop the locks SQLite holds on it.
fn cannot_be_written(target: &str) -> bool {
    let file = std::path::Path::new(target);
    if !file.is_absolute() {
        return false;
    }
    let mut paths = vec![file.to_path_buf()];
    for suffix in ["-wal", "-shm"] {
        let mut name = file.as_os_str().to_owned();
        name.push(suffix);
        paths.push(name.into());
    }
    paths.iter().filter(|path| path.exists()).any(|path| {
        matches!(
            rustix::fs::access(path, rustix::fs::Access::WRITE_OK),
            Err(e) if e == rustix::io::Errno::ROFS
                || e == rustix::io::Errno::PERM
                || e == rustix::io::Errno::ACCESS
        )
    })
}

/// Whether a driver error says the disk is full: SQLite's `SQLITE_FULL` or PostgreSQL's `53100`.
fn is_full(error: &DbErr) -> bool {
    fault_kind(error) == FaultKind::Full
}

/// Each error by what it is: a fault the user can act on is `Storage` with its kind, anything else a
/// backend fault.
impl From<SqlError> for rewind_core::Error {
    fn from(error: SqlError) -> Self {
        match error.fault() {
            Some(fault) => rewind_core::Error::storage(fault, error),
            None => rewind_core::Error::backend(error),
        }
    }
}

/// What kind of fault a driver error is, as far as the user can act on it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum FaultKind {
    Locked,
    ReadOnly,
    Corrupt,
    /// The disk failed a read or write (`SQLITE_IOERR`).
    Disk,
    /// The disk is full (`SQLITE_FULL`, PostgreSQL's disk full).
    Full,
    /// SQLite could not open the file (`SQLITE_CANTOPEN`).
    CannotOpen,
    Other,
}

/// The sqlx error under a driver error, when there is one.
fn sqlx_error(error: &DbErr) -> Option<&sea_orm::sqlx::Error> {
    match error {
        DbErr::Conn(RuntimeErr::SqlxError(e))
        | DbErr::Exec(RuntimeErr::SqlxError(e))
        | DbErr::Query(RuntimeErr::SqlxError(e)) => Some(e.as_ref()),
        _ => None,
    }
}

/// The PostgreSQL server's own error, when a sqlx error is one.
fn postgres_error(
    error: &sea_orm::sqlx::Error,
) -> Option<&sea_orm::sqlx::postgres::PgDatabaseError> {
    error
        .as_database_error()
        .and_then(|e| e.try_downcast_ref::<sea_orm::sqlx::postgres::PgDatabaseError>())
}

/// Classifies a driver error by its SQLite result code or Postgres SQLSTATE.
pub(crate) fn fault_kind(error: &DbErr) -> FaultKind {
    let Some(sqlx) = sqlx_error(error) else {
        return FaultKind::Other;
    };
    if let Some(postgres) = postgres_error(sqlx) {
        return match postgres.code() {
            "55P03" => FaultKind::Locked,            // lock_not_available
            "25006" => FaultKind::ReadOnly,          // read_only_sql_transaction
            "XX001" | "XX002" => FaultKind::Corrupt, // data_corrupted, index_corrupted
            "53100" => FaultKind::Full,              // disk_full
            _ => FaultKind::Other,
        };
    }
    let Some(code) = sqlx.as_database_error().and_then(|e| e.code()) else {
        return FaultKind::Other;
    };
    // SQLite reports its extended result code as a number; the primary code is its low byte. Only
    // SQLite's: a PostgreSQL SQLSTATE may be all digits too (kill fuzz: `22021`, a NUL byte refused, read
    // as SQLITE_BUSY, "locked"; `25006` read-only and `53100` disk full were never seen), so it is matched
    // above.
    if let Ok(extended) = code.parse::<i64>() {
        return match extended & 0xff {
            5 | 6 => FaultKind::Locked,    // SQLITE_BUSY, SQLITE_LOCKED
            8 => FaultKind::ReadOnly,      // SQLITE_READONLY
            11 | 26 => FaultKind::Corrupt, // SQLITE_CORRUPT, SQLITE_NOTADB
            10 => FaultKind::Disk,         // SQLITE_IOERR
            13 => FaultKind::Full,         // SQLITE_FULL
            14 => FaultKind::CannotOpen,   // SQLITE_CANTOPEN
            _ => FaultKind::Other,
        };
    }
    FaultKind::Other
}

/// Whether `target` (a SQLite file's path, or a PostgreSQL URL without its password) is PostgreSQL's.
fn is_postgres(target: &str) -> bool {
    target.starts_with("postgres://") || target.starts_with("postgresql://")
}

/// Whether no connection came from the pool in time.
pub(crate) fn pool_timed_out(error: &DbErr) -> bool {
    matches!(
        error,
        DbErr::ConnectionAcquire(sea_orm::error::ConnAcquireErr::Timeout)
    ) || sqlx_error(error).is_some_and(|e| matches!(e, sea_orm::sqlx::Error::PoolTimedOut))
}

/// Maps a driver error to the adapter's error: a lock, a read-only or a corrupt database by what it is,
/// anything else as a failed statement, naming the database and what rewind was doing.
pub(crate) fn classify(
    target: &str,
    busy_timeout: Duration,
    context: &'static str,
    source: DbErr,
) -> SqlError {
    let target = target.to_owned();
    if !is_postgres(&target) && pool_timed_out(&source) {
        return SqlError::Saturated {
            target,
            source: source.into(),
        };
    }
    match fault_kind(&source) {
        FaultKind::Locked => SqlError::Locked {
            target,
            waited_ms: busy_timeout.as_millis(),
            source: source.into(),
        },
        FaultKind::ReadOnly => SqlError::ReadOnly {
            target,
            source: source.into(),
        },
        FaultKind::Corrupt => SqlError::Corrupt {
            target,
            source: source.into(),
        },
        // A failed write may be a file or mount that can only be read now (made so under a running server:
        // SQLite says only `SQLITE_IOERR_WRITE`; review: answered as an internal error).
        FaultKind::Disk if cannot_be_written(&target) => SqlError::ReadOnly {
            target,
            source: source.into(),
        },
        FaultKind::Disk | FaultKind::Full => SqlError::Disk {
            target,
            source: source.into(),
        },
        FaultKind::CannotOpen | FaultKind::Other => SqlError::Query {
            target,
            context,
            source: source.into(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn driver(text: &str) -> DriverError {
        DbErr::Custom(text.to_owned()).into()
    }

    /// Each fault a user can act on reaches the core as `Storage` with its kind, the adapter's error as its
    /// source; a PostgreSQL that cannot be reached is one, and so is a SQLite file whose connections all
    /// stayed busy (classified: a busy database), and so is a PostgreSQL connection that broke
    /// mid-statement (its outcome unknown); any other fault stays a backend fault.
    #[test]
    fn faults_reach_the_core_by_kind() {
        let target = || "/data/rewind.db".to_owned();
        let postgres = "postgres://rewind:***@db.internal/rewind";
        let io = || {
            std::sync::Arc::new(sea_orm::sqlx::Error::Io(std::io::Error::from(
                std::io::ErrorKind::ConnectionRefused,
            )))
        };
        let timed_out = || DbErr::ConnectionAcquire(sea_orm::error::ConnAcquireErr::Timeout);
        let busy = Duration::from_secs(5);
        let query = |target: &str, source: DbErr| SqlError::Query {
            target: target.to_owned(),
            context: "reading a session",
            source: source.into(),
        };
        let cases = [
            (
                SqlError::Locked {
                    target: target(),
                    waited_ms: 5000,
                    source: driver("database is locked"),
                },
                Some(StorageFault::Locked),
            ),
            (
                SqlError::ReadOnly {
                    target: target(),
                    source: driver("readonly"),
                },
                Some(StorageFault::ReadOnly),
            ),
            (
                SqlError::Replaced { target: target() },
                Some(StorageFault::Replaced),
            ),
            (
                SqlError::Corrupt {
                    target: target(),
                    source: driver("malformed"),
                },
                Some(StorageFault::Corrupt),
            ),
            (
                query(postgres, timed_out()),
                Some(StorageFault::Unreachable),
            ),
            (
                query(postgres, DbErr::Conn(RuntimeErr::SqlxError(io()))),
                Some(StorageFault::Unreachable),
            ),
            // A connection that broke under a statement: its outcome is not known.
            (
                query(postgres, DbErr::Exec(RuntimeErr::SqlxError(io()))),
                Some(StorageFault::ConnectionLost),
            ),
            (
                query(postgres, DbErr::Query(RuntimeErr::SqlxError(io()))),
                Some(StorageFault::ConnectionLost),
            ),
            (
                query("/data/rewind.db", DbErr::Exec(RuntimeErr::SqlxError(io()))),
                None,
            ),
            (query("/data/rewind.db", timed_out()), None),
            // Classified: a SQLite file whose connections all stayed in use is a busy database; a
            // PostgreSQL whose pool timed out is one that cannot be reached, as above, unless the handle
            // finds every connection of its pool in use (`SqlRepo::sql_error`, before this).
            (
                classify("/data/rewind.db", busy, "reading a session", timed_out()),
                Some(StorageFault::Busy),
            ),
            // A SQLite file whose path begins like a PostgreSQL URL is still a file.
            (
                classify("postgres.db", busy, "reading a session", timed_out()),
                Some(StorageFault::Busy),
            ),
            (
                classify(
                    "/data/rewind.db",
                    busy,
                    "reading a session",
                    DbErr::Query(RuntimeErr::SqlxError(std::sync::Arc::new(
                        sea_orm::sqlx::Error::PoolTimedOut,
                    ))),
                ),
                Some(StorageFault::Busy),
            ),
            (
                classify(postgres, busy, "reading a session", timed_out()),
                Some(StorageFault::Unreachable),
            ),
            (
                query(postgres, DbErr::Custom("syntax error".to_owned())),
                None,
            ),
            // An `SQLITE_IOERR` (no full-disk code) is the disk's fault, not known to be a full one.
            (
                SqlError::Disk {
                    target: target(),
                    source: driver("disk I/O error"),
                },
                None,
            ),
        ];
        for (error, fault) in cases {
            let text = error.to_string();
            let core = rewind_core::Error::from(error);
            assert_eq!(core.storage_fault(), fault, "{text}");
            assert_eq!(core.to_string(), text);
            let source = match &core {
                rewind_core::Error::Storage { source, .. }
                | rewind_core::Error::Backend(source) => source,
                other => panic!("{other:?}"),
            };
            assert!(source.downcast_ref::<SqlError>().is_some(), "{text}");
        }
    }
}
