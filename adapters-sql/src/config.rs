//! Where the store lives and how to connect: a SQLite file (the default), an in-memory SQLite database for
//! tests, or a PostgreSQL URL when several processes or machines share one store.

use std::path::Path;
use std::time::Duration;

use crate::error::SqlError;

/// How to open the store. Start from [`SqlConfig::new`] (or a shortcut) and set the fields to change.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct SqlConfig {
    /// `sqlite://path?mode=rwc`, `sqlite::memory:` or `postgres://user:password@host/db`.
    pub url: String,
    /// SQLite: how long a statement waits for another process's write lock before it fails (default 5 s).
    pub busy_timeout: Duration,
    /// The size of the connection pool; `None` chooses per backend (1 for an in-memory SQLite database,
    /// which lives only as long as its connection; 4 for a SQLite file; 8 for Postgres). A SQLite file
    /// that is written also gets up to two connections for lease writes (`SqlRepo`'s lease pool).
    pub max_connections: Option<u32>,
    /// How long a statement waits for a free connection of the pool before it fails (default 30 s, the
    /// driver's): as a busy database (`SqlError::Saturated`) on a SQLite file, and on PostgreSQL when
    /// every connection the pool may have was in use; otherwise on PostgreSQL as one that cannot be
    /// reached.
    pub acquire_timeout: Duration,
    /// PostgreSQL: the schema rewind's tables live in (created when missing); `None` uses the connection's
    /// `search_path`. Letters, digits and `_` only.
    pub schema: Option<String>,
    /// Open only to read (a read-only file, mount or standby, for commands that only show): the check that
    /// the database can be written and the migrations are skipped, and a schema older than this binary's is
    /// refused ([`SqlError::OutdatedReadOnly`](crate::SqlError::OutdatedReadOnly)). Every write fails.
    pub read_only: bool,
}

impl SqlConfig {
    /// A configuration with the defaults for `url`.
    pub fn new(url: impl Into<String>) -> Self {
        SqlConfig {
            url: url.into(),
            busy_timeout: Duration::from_secs(5),
            max_connections: None,
            acquire_timeout: Duration::from_secs(30),
            schema: None,
            read_only: false,
        }
    }

    /// A SQLite file, created when missing. Characters that a URL would misread (`%`, `?`, `#`) are
    /// escaped, so any UTF-8 path works.
    pub fn sqlite_file(path: &Path) -> Result<Self, SqlError> {
        let text = path.to_str().ok_or_else(|| SqlError::Config {
            target: path.to_string_lossy().into_owned(),
            reason: "the path is not valid UTF-8".to_owned(),
        })?;
        Ok(SqlConfig::new(format!(
            "sqlite://{}?mode=rwc",
            escape_sqlite_path(text)
        )))
    }

    /// An in-memory SQLite database, private to this handle (for tests).
    pub fn sqlite_memory() -> Self {
        SqlConfig::new("sqlite::memory:")
    }
}

/// A file path as a `sqlite://` URL's path: the characters a URL would misread (`%`, `?`, `#`) escaped, so
/// the driver reads back exactly `path`.
pub fn escape_sqlite_path(path: &str) -> String {
    let mut escaped = String::with_capacity(path.len());
    for c in path.chars() {
        match c {
            '%' => escaped.push_str("%25"),
            '?' => escaped.push_str("%3F"),
            '#' => escaped.push_str("%23"),
            c => escaped.push(c),
        }
    }
    escaped
}

/// The database kinds rewind supports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Backend {
    /// A SQLite file.
    SqliteFile,
    /// An in-memory SQLite database.
    SqliteMemory,
    /// PostgreSQL.
    Postgres,
}

impl Backend {
    pub(crate) fn of(url: &str) -> Option<Backend> {
        if url.starts_with("sqlite:") {
            let memory = url == "sqlite::memory:"
                || url.starts_with("sqlite::memory:?")
                || url.contains("mode=memory");
            Some(if memory {
                Backend::SqliteMemory
            } else {
                Backend::SqliteFile
            })
        } else if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            Some(Backend::Postgres)
        } else {
            None
        }
    }

    pub(crate) fn is_sqlite(self) -> bool {
        matches!(self, Backend::SqliteFile | Backend::SqliteMemory)
    }
}

/// How the database is named in messages: a SQLite file by its path, anything else by its URL with the
/// password (in the user info or a `password=` parameter) replaced by `***`.
pub(crate) fn display_target(url: &str) -> String {
    if let Some(rest) = url
        .strip_prefix("sqlite://")
        .or_else(|| url.strip_prefix("sqlite:"))
    {
        let path = rest.split('?').next().unwrap_or(rest);
        return percent_decode(path);
    }
    redact_password(url)
}

/// `url` with its password, in the user info or a `password=` parameter, replaced by `***`.
pub fn redact_password(url: &str) -> String {
    let mut shown = url.to_owned();
    if let Some(scheme_end) = shown.find("://") {
        let authority_start = scheme_end + 3;
        // The user info ends at the last `@`, wherever it is: a password holding an unencoded `/` or `?`
        // (which the driver cannot parse) is hidden too, and one `@` later in the URL hides a little more
        // than the password, never less (review).
        if let Some(at) = shown[authority_start..].rfind('@') {
            let userinfo = &shown[authority_start..authority_start + at];
            if let Some(colon) = userinfo.find(':') {
                let from = authority_start + colon + 1;
                let to = authority_start + at;
                shown.replace_range(from..to, "***");
            }
        }
    }
    // A `key=value` connection string (libpq's form, which rewind does not take, but names in its refusal):
    // its `password=` word (review: it was echoed whole).
    if !shown.contains("://") {
        return shown
            .split(' ')
            .map(|word| match word.split_once('=') {
                Some((key, _)) if key.eq_ignore_ascii_case("password") => format!("{key}=***"),
                _ => word.to_owned(),
            })
            .collect::<Vec<_>>()
            .join(" ");
    }
    if let Some(query_start) = shown.find('?') {
        let (head, query) = shown.split_at(query_start + 1);
        let redacted: Vec<String> = query
            .split('&')
            .map(|pair| match pair.split_once('=') {
                Some((key, _)) if key.eq_ignore_ascii_case("password") => format!("{key}=***"),
                _ => pair.to_owned(),
            })
            .collect();
        shown = format!("{head}{}", redacted.join("&"));
    }
    shown
}

/// `url` percent-decoded, for hiding it in a driver's text as well as written (`hide_url`).
pub(crate) fn decoded(url: &str) -> String {
    percent_decode(url)
}

fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        if bytes[i] == b'%'
            && i + 2 < bytes.len()
            && let (Some(h), Some(l)) = (hex(bytes[i + 1]), hex(bytes[i + 2]))
        {
            out.push((h * 16 + l) as u8);
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Checks a Postgres schema name: it is spliced into SQL, so only plain identifiers are accepted.
pub(crate) fn check_schema_name(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
        && name.len() <= 63
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_are_hidden() {
        assert_eq!(
            display_target("postgres://rewind:s3cret@127.0.0.1:5432/rewind_test"),
            "postgres://rewind:***@127.0.0.1:5432/rewind_test"
        );
        assert_eq!(
            display_target("postgres://u@h/db?sslmode=disable&password=x"),
            "postgres://u@h/db?sslmode=disable&password=***"
        );
        assert_eq!(
            display_target("sqlite:///tmp/a%3Fb.db?mode=rwc"),
            "/tmp/a?b.db"
        );
    }
}
