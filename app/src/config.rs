//! Configuration shared by the server and the command line. Each setting comes from, in order of
//! precedence: a command-line flag, a `REWIND_*` environment variable, the config file (`--config`,
//! `REWIND_CONFIG`, or `$XDG_CONFIG_HOME/rewind/config.toml` when it exists: there but unreadable, an
//! error), then the default.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, anyhow, bail};
use clap::Args;
use serde::Deserialize;

/// The default port, OpenCode's.
pub const DEFAULT_PORT: u16 = 4096;
/// The default address: loopback only.
pub const DEFAULT_HOSTNAME: &str = "127.0.0.1";
/// Untracked files larger than this are not snapshotted (2 MiB).
pub const DEFAULT_SIZE_CAP: u64 = 2 * 1024 * 1024;
/// Worktrees with more files than this are refused.
pub const DEFAULT_FILE_CAP: usize = 500_000;
/// An HTTP client's open step is abandoned after this many seconds without a request on its session.
pub const DEFAULT_STEP_TIMEOUT_SECS: u64 = 600;
/// The longest step timeout taken: a year (a lease's expiry must fit the database's 64-bit milliseconds).
pub const MAX_STEP_TIMEOUT_SECS: u64 = 365 * 24 * 3600;

/// The variable of `--project-root`: a `:`-separated list (`PATH`'s form), where the flag names one
/// directory per use.
pub const PROJECT_ROOTS_VARIABLE: &str = "REWIND_PROJECT_ROOTS";

/// The flags every command takes (each also read from its `REWIND_*` variable).
#[derive(Args, Debug, Clone, Default)]
pub struct ConfigArgs {
    /// The config file (TOML). Default: `$XDG_CONFIG_HOME/rewind/config.toml` when it exists.
    #[arg(long, env = "REWIND_CONFIG", global = true, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Where rewind keeps its database and snapshot stores. Default: `$XDG_DATA_HOME/rewind`
    /// (`~/.local/share/rewind`).
    #[arg(long, env = "REWIND_DATA_DIR", global = true, value_name = "DIR")]
    pub data_dir: Option<PathBuf>,
    /// The database: `sqlite://FILE?mode=rwc` or `postgres://…`. Default: `rewind.db` in the data directory.
    #[arg(long, env = "REWIND_DATABASE_URL", global = true, value_name = "URL")]
    pub database_url: Option<String>,
    /// `serve` only: a directory under which sessions' worktrees may lie (repeatable). The variable takes a
    /// `:`-separated list; a flag's value is one directory, `:` and all. Default: the current directory.
    /// The command line works on any directory.
    #[arg(
        long = "project-root",
        env = PROJECT_ROOTS_VARIABLE,
        global = true,
        value_name = "DIR"
    )]
    pub project_roots: Vec<PathBuf>,
    /// Untracked files larger than this many bytes are not snapshotted (they are reported as skipped).
    /// Default: 2097152 (2 MiB).
    // Out of range is a usage error (exit 2), as a value that is no number is (CLI review L1).
    #[arg(long, env = "REWIND_SIZE_CAP", global = true, value_name = "BYTES",
          value_parser = clap::value_parser!(u64).range(1..))]
    pub size_cap: Option<u64>,
    /// Worktrees with more files than this are refused. Default: 500000.
    #[arg(long, env = "REWIND_FILE_CAP", global = true, value_name = "COUNT",
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    pub file_cap: Option<usize>,
    /// Seconds without a writing request (POST, PATCH, DELETE) in its session after which an HTTP client's
    /// open step is abandoned (`exec` renews its own step every third of it). Default: 600.
    #[arg(
        long,
        env = "REWIND_STEP_TIMEOUT",
        global = true,
        value_name = "SECONDS",
        value_parser = clap::value_parser!(u64).range(1..=MAX_STEP_TIMEOUT_SECS)
    )]
    pub step_timeout: Option<u64>,
}

/// The server's own flags (OpenCode's names), also read from `REWIND_HOSTNAME`, `REWIND_PORT` and
/// `REWIND_PASSWORD`.
#[derive(Args, Debug, Clone, Default)]
pub struct ServerArgs {
    /// The address to listen on. Anything but loopback requires a password. Default: 127.0.0.1.
    #[arg(long, env = "REWIND_HOSTNAME", value_name = "HOST")]
    pub hostname: Option<String>,
    /// The port to listen on (0: any free port). Default: 4096.
    #[arg(long, env = "REWIND_PORT", value_name = "PORT")]
    pub port: Option<u16>,
    /// The HTTP basic-auth password (any user name); required on a non-loopback address.
    #[arg(
        long,
        env = "REWIND_PASSWORD",
        hide_env_values = true,
        value_name = "PASSWORD"
    )]
    pub password: Option<String>,
}

/// The config file's keys; every one is optional.
#[derive(Deserialize, Debug, Default, Clone)]
#[serde(deny_unknown_fields, rename_all = "snake_case")]
pub struct FileConfig {
    /// As `--data-dir`.
    pub data_dir: Option<PathBuf>,
    /// As `--database-url`.
    pub database_url: Option<String>,
    /// As `--hostname`.
    pub hostname: Option<String>,
    /// As `--port`.
    pub port: Option<u16>,
    /// As `--password`.
    pub password: Option<String>,
    /// As `--project-root`.
    pub project_roots: Option<Vec<PathBuf>>,
    /// As `--size-cap`.
    pub size_cap: Option<u64>,
    /// As `--file-cap`.
    pub file_cap: Option<usize>,
    /// As `--step-timeout` (seconds).
    pub step_timeout: Option<u64>,
}

/// The resolved configuration.
#[derive(Clone)]
pub struct Settings {
    /// rewind's data directory (absolute).
    pub data_dir: PathBuf,
    /// The database URL.
    pub database_url: String,
    /// The server's address.
    pub hostname: String,
    /// The server's port (0: any free port).
    pub port: u16,
    /// The server's basic-auth password.
    pub password: Option<String>,
    /// Directories under which worktrees may lie (absolute).
    pub project_roots: Vec<PathBuf>,
    /// The untracked-file size cap in bytes.
    pub size_cap: u64,
    /// The worktree file-count cap.
    pub file_cap: usize,
    /// The step timeout of HTTP clients, in milliseconds.
    pub step_timeout_ms: u64,
    /// The config file that was read, if any.
    pub config_file: Option<PathBuf>,
}

impl std::fmt::Debug for Settings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Settings")
            .field("data_dir", &self.data_dir)
            .field("database_url", &redact_url(&self.database_url))
            .field("hostname", &self.hostname)
            .field("port", &self.port)
            .field("password", &self.password.as_ref().map(|_| "<set>"))
            .field("project_roots", &self.project_roots)
            .field("size_cap", &self.size_cap)
            .field("file_cap", &self.file_cap)
            .field("step_timeout_ms", &self.step_timeout_ms)
            .field("config_file", &self.config_file)
            .finish()
    }
}

impl Settings {
    /// The defaults for a data directory: the SQLite file in it, loopback on the default port, the
    /// current directory `cwd` as the only project root.
    pub fn new(data_dir: impl Into<PathBuf>, cwd: &Path) -> Settings {
        let data_dir = absolute(cwd, &data_dir.into());
        Settings {
            database_url: default_database_url(&data_dir),
            data_dir,
            hostname: DEFAULT_HOSTNAME.to_owned(),
            port: DEFAULT_PORT,
            password: None,
            project_roots: vec![cwd.to_path_buf()],
            size_cap: DEFAULT_SIZE_CAP,
            file_cap: DEFAULT_FILE_CAP,
            step_timeout_ms: DEFAULT_STEP_TIMEOUT_SECS * 1000,
            config_file: None,
        }
    }

    /// Resolves flags and environment (already merged by clap) over the config file over the defaults.
    /// Relative paths of flags and environment are taken from `cwd`; those of the config file from the
    /// file's own directory (one file serves every worktree alike).
    pub fn resolve(args: &ConfigArgs, server: Option<&ServerArgs>, cwd: &Path) -> Result<Settings> {
        let (file, config_file) = read_config_file(args.config.as_deref(), cwd)?;
        let file_dir = config_file
            .as_deref()
            .and_then(Path::parent)
            .unwrap_or(cwd)
            .to_path_buf();
        let from_file = config_file
            .as_deref()
            .map(|file| file.display().to_string());
        // An empty `--data-dir` is refused by clap's path parser already, and an empty REWIND_DATA_DIR
        // before the command line is parsed (`cli::refuse_empty_variables`).
        // The file's own values are checked whether or not a flag or a variable overrides them: a bad file
        // is said at once, not only once the override is dropped (review: `size_cap = 0` was refused or
        // not by whether `--size-cap` was given).
        if let Some(from) = &from_file {
            if file
                .data_dir
                .as_ref()
                .is_some_and(|dir| dir.as_os_str().is_empty())
            {
                bail!(
                    "data_dir in {from} is empty: name a directory, or leave the setting out for the default"
                );
            }
            if file.size_cap == Some(0) {
                bail!("size_cap in {from} must be at least 1 byte");
            }
            if file
                .project_roots
                .as_ref()
                .is_some_and(|roots| roots.iter().any(|root| root.as_os_str().is_empty()))
            {
                bail!("a project root in {from} is empty: name a directory (project_roots)");
            }
            if file.file_cap == Some(0) {
                bail!("file_cap in {from} must be at least 1");
            }
            if file
                .step_timeout
                .is_some_and(|secs| secs == 0 || secs > MAX_STEP_TIMEOUT_SECS)
            {
                bail!(
                    "step_timeout in {from} must be from 1 second to {MAX_STEP_TIMEOUT_SECS} (a year)"
                );
            }
        }
        let data_dir = match (&args.data_dir, &file.data_dir) {
            (Some(dir), _) => absolute(cwd, dir),
            (None, Some(dir)) => absolute(&file_dir, dir),
            (None, None) => default_data_dir()?,
        };
        // Its path goes into the database URL and the stores' records: refused before anything is made.
        if data_dir.to_str().is_none() {
            bail!(
                "the data directory {} is not valid UTF-8; choose another (--data-dir, REWIND_DATA_DIR)",
                data_dir.display()
            );
        }
        let mut settings = Settings::new(data_dir, cwd);
        settings.config_file = config_file;
        match (&args.database_url, &file.database_url) {
            (Some(url), _) => settings.database_url = sqlite_url_from(cwd, url)?,
            (None, Some(url)) => settings.database_url = sqlite_url_from(&file_dir, url)?,
            (None, None) => {}
        }
        let server = server.cloned().unwrap_or_default();
        // An empty value is refused by name, as an empty variable is (`cli::refuse_empty_variables`):
        // an empty password would turn authentication off without a word (review).
        let empty = |value: &Option<String>, flag: &str, key: &str| -> Result<()> {
            if value.as_deref() != Some("") {
                return Ok(());
            }
            match &from_file {
                Some(from) if flag.is_empty() => {
                    bail!("{key} in {from} is empty: give a value, or leave the setting out")
                }
                _ => bail!("{flag} is empty: give a value, or leave it out"),
            }
        };
        empty(&server.hostname, "--hostname", "hostname")?;
        empty(&server.password, "--password", "password")?;
        empty(&args.database_url, "--database-url", "database_url")?;
        empty(&file.hostname, "", "hostname")?;
        empty(&file.password, "", "password")?;
        empty(&file.database_url, "", "database_url")?;
        if let Some(hostname) = server.hostname.or(file.hostname) {
            // An IPv6 address as a URL writes it (`[::1]`) is that address: the brackets are URL syntax,
            // and a lookup of the bracketed text fails (review: it passed the loopback check, then the
            // server failed to start with a hint about another server).
            settings.hostname = match hostname
                .strip_prefix('[')
                .and_then(|inner| inner.strip_suffix(']'))
            {
                Some(inner) if inner.parse::<std::net::Ipv6Addr>().is_ok() => inner.to_owned(),
                _ => hostname,
            };
        }
        if let Some(port) = server.port.or(file.port) {
            settings.port = port;
        }
        settings.password = server.password.or(file.password);
        let (roots, roots_from) = if args.project_roots.is_empty() {
            (file.project_roots.unwrap_or_default(), file_dir.as_path())
        } else {
            (args.project_roots.clone(), cwd)
        };
        if roots.iter().any(|root| root.as_os_str().is_empty()) {
            bail!(
                "a project root is empty: name a directory (--project-root, REWIND_PROJECT_ROOTS, project_roots)"
            );
        }
        if !roots.is_empty() {
            settings.project_roots = roots
                .iter()
                .map(|root| absolute(roots_from, root))
                .collect();
        }
        // The flags and variables are range-checked by clap (exit 2) and the file's values above; these
        // checks hold for `ConfigArgs` built in code.
        if let Some(cap) = args.size_cap.or(file.size_cap) {
            // 0 would skip every new file that is not empty: nothing a step makes could be undone.
            if cap == 0 {
                bail!("the size cap must be at least 1 byte (--size-cap or REWIND_SIZE_CAP)");
            }
            settings.size_cap = cap;
        }
        if let Some(cap) = args.file_cap.or(file.file_cap) {
            if cap == 0 {
                bail!("the file-count cap must be at least 1 (--file-cap or REWIND_FILE_CAP)");
            }
            settings.file_cap = cap;
        }
        if let Some(secs) = args.step_timeout.or(file.step_timeout) {
            if secs == 0 || secs > MAX_STEP_TIMEOUT_SECS {
                bail!(
                    "the step timeout must be from 1 second to {MAX_STEP_TIMEOUT_SECS} (a year) \
                     (--step-timeout or REWIND_STEP_TIMEOUT)"
                );
            }
            settings.step_timeout_ms = secs.saturating_mul(1000);
        }
        Ok(settings)
    }

    /// Whether the server would listen on a loopback address only.
    pub fn is_loopback(&self) -> bool {
        is_loopback_name(&self.hostname)
    }
}

/// Whether `host` (a name or an address, without port) is loopback.
pub fn is_loopback_name(host: &str) -> bool {
    // One pair of brackets around an address, or none (review: any number on either side passed).
    let host = host
        .strip_prefix('[')
        .and_then(|inner| inner.strip_suffix(']'))
        .unwrap_or(host);
    if host.eq_ignore_ascii_case("localhost") {
        return true;
    }
    host.parse::<std::net::IpAddr>()
        .map(|ip| ip.is_loopback())
        .unwrap_or(false)
}

/// Whether `url` names a PostgreSQL database (`postgres://` or `postgresql://`).
pub fn is_postgres_url(url: &str) -> bool {
    let lower = url.to_ascii_lowercase();
    lower.starts_with("postgres://") || lower.starts_with("postgresql://")
}

/// `sqlite://<data dir>/rewind.db?mode=rwc`, the directory escaped as a file path in a URL (a `?`, `%`
/// or `#` in it would otherwise be read as URL syntax, and another file opened; review). A data
/// directory that is not UTF-8 is refused before this (`Settings::resolve`).
pub fn default_database_url(data_dir: &Path) -> String {
    format!(
        "sqlite://{}?mode=rwc",
        rewind_sql::escape_sqlite_path(&data_dir.join("rewind.db").to_string_lossy())
    )
}

/// A URL with its password replaced, for logs and messages: the SQL adapter's rule, which hides it in the
/// user info and in a `password=` parameter.
pub use rewind_sql::redact_password as redact_url;

/// A SQLite URL with a relative file path (`sqlite:rewind.db`, `sqlite://data/rewind.db?mode=rwc`) made
/// absolute against `base`, as every other relative path of the configuration is (SQLite would take it
/// from the process's current directory); other URLs as they are. One that names no file (`sqlite://`)
/// is refused with what to write instead.
fn sqlite_url_from(base: &Path, url: &str) -> Result<String> {
    let Some(rest) = url.strip_prefix("sqlite:") else {
        return Ok(url.to_owned());
    };
    let rest = rest.strip_prefix("//").unwrap_or(rest);
    let (path, query) = match rest.split_once('?') {
        Some((path, query)) => (path, Some(query)),
        None => (rest, None),
    };
    if path.is_empty() {
        bail!(
            "the database URL {url:?} names no file; write sqlite:///path/to/rewind.db?mode=rwc (or leave \
             it out: the default is rewind.db in the data directory)"
        );
    }
    if path.starts_with(":memory:") || Path::new(path).is_absolute() {
        return Ok(url.to_owned());
    }
    let query = query.map(|q| format!("?{q}")).unwrap_or_default();
    // The directory is a file path, not URL text: a `%`, `?` or `#` in it is escaped (the relative part is
    // the user's URL text already).
    let base = base
        .to_str()
        .ok_or_else(|| anyhow!("the directory {} is not valid UTF-8", base.display()))?;
    Ok(format!(
        "sqlite://{}/{path}{query}",
        rewind_sql::escape_sqlite_path(base.trim_end_matches('/'))
    ))
}

/// The file of a SQLite URL that asks SQLite to create it (`mode=rwc`, as the default database URL does),
/// when it does not exist yet: nothing was ever recorded in that database, and opening it would create it
/// (for a command that only shows, or needs a session to act on, a mistyped `--data-dir` would leave an
/// empty database behind; review).
pub fn sqlite_file_not_created(url: &str) -> Option<PathBuf> {
    let (path, query) = sqlite_url_file(url)?;
    // Only a file that is not there counts: one that cannot be looked at (another user's private data
    // directory) is left to the open, which says why (diff review). A symlink to nothing counts as not
    // there: SQLite would create the file it names (black-box review: `gc` made a database there).
    let missing = |file: &Path| matches!(std::fs::metadata(file), Err(e) if e.kind() == std::io::ErrorKind::NotFound);
    // SQLite takes a `..` after a directory that does not exist by name (`missing/../rewind.db`); the
    // system does not.
    let by_name = crate::worktree::by_name(Path::new(&path));
    (asks_to_create(query) && missing(Path::new(&path)) && missing(&by_name))
        .then(|| PathBuf::from(path))
}

/// The file path (its `%XX` escapes decoded, as SQLite's driver reads it) and the query of a SQLite URL
/// that names a file; none for another URL, one without a path, or an in-memory database.
fn sqlite_url_file(url: &str) -> Option<(String, Option<&str>)> {
    let rest = url.strip_prefix("sqlite:")?;
    let rest = rest.strip_prefix("//").unwrap_or(rest);
    let (path, query) = match rest.split_once('?') {
        Some((path, query)) => (path, Some(query)),
        None => (rest, None),
    };
    let path = crate::http::security::percent_decode(path)?;
    (!path.is_empty() && !path.starts_with(":memory:")).then_some((path, query))
}

/// Whether a SQLite URL's query asks SQLite to create the file (`mode=rwc`).
fn asks_to_create(query: Option<&str>) -> bool {
    query.is_some_and(|query| query.split('&').any(|pair| pair == "mode=rwc"))
}

/// Why a SQLite URL could not be opened, when the URL says it: its file (the URL's path, `%XX` escapes
/// decoded, as SQLite's driver reads it) does not exist and the URL does not ask SQLite to create it (no
/// `mode=rwc`, which the default database URL has).
pub fn missing_sqlite_file(url: &str) -> Option<String> {
    let (path, query) = sqlite_url_file(url)?;
    let creates = asks_to_create(query);
    if Path::new(&path).exists() {
        return None;
    }
    let add = if query.is_some() {
        "&mode=rwc"
    } else {
        "?mode=rwc"
    };
    // SQLite creates the file, never its directory.
    let missing_dir = Path::new(&path)
        .parent()
        .filter(|dir| !dir.as_os_str().is_empty() && !dir.is_dir());
    match (missing_dir, creates) {
        (Some(dir), true) => Some(format!(
            "{path} cannot be created: its directory {} does not exist; create the directory first",
            dir.display()
        )),
        (Some(dir), false) => Some(format!(
            "{path} does not exist, nor does its directory {}: create the directory, and add {add} to the URL \
             to create the database in it",
            dir.display()
        )),
        (None, true) => None,
        (None, false) => Some(format!(
            "{path} does not exist, and the URL does not ask for it to be created: add {add} to create it"
        )),
    }
}

/// The files of the SQLite database at `file` (the path the database was opened at): the database, its
/// rollback journal, its WAL and its shared-memory file, and, when `file` is a symlink, the same four
/// beside the file it leads to (where SQLite writes). Inside a worktree, snapshots must leave them out
/// (`GitStoreConfig::own_files`).
pub fn sqlite_files(file: &Path) -> Vec<PathBuf> {
    let with_sidecars = |path: &Path| {
        ["", "-journal", "-wal", "-shm"].map(|suffix| {
            let mut name = path.as_os_str().to_owned();
            name.push(suffix);
            PathBuf::from(name)
        })
    };
    let mut files = with_sidecars(file).to_vec();
    // The file itself is a symlink when its real path differs from its directory's real path and name.
    let as_named = file
        .parent()
        .and_then(|dir| std::fs::canonicalize(dir).ok())
        .zip(file.file_name())
        .map(|(dir, name)| dir.join(name));
    if let Ok(target) = std::fs::canonicalize(file)
        && Some(&target) != as_named.as_ref()
    {
        files.extend(with_sidecars(&target));
    }
    files
}

fn absolute(cwd: &Path, path: &Path) -> PathBuf {
    if path.is_absolute() {
        path.to_path_buf()
    } else {
        cwd.join(path)
    }
}

fn home_dir() -> Option<PathBuf> {
    std::env::var_os("HOME")
        .filter(|home| !home.is_empty())
        .map(PathBuf::from)
}

fn xdg_dir(variable: &str, fallback: &str) -> Option<PathBuf> {
    std::env::var_os(variable)
        .filter(|dir| !dir.is_empty())
        .map(PathBuf::from)
        .filter(|dir| dir.is_absolute())
        .or_else(|| home_dir().map(|home| home.join(fallback)))
}

fn default_data_dir() -> Result<PathBuf> {
    xdg_dir("XDG_DATA_HOME", ".local/share")
        .map(|dir| dir.join("rewind"))
        .context("no data directory: set --data-dir or REWIND_DATA_DIR (HOME is not set)")
}

fn read_config_file(explicit: Option<&Path>, cwd: &Path) -> Result<(FileConfig, Option<PathBuf>)> {
    let path = match explicit {
        Some(path) => absolute(cwd, path),
        // Absent, the defaults hold; present but not readable as a file (a directory, a directory above it
        // that cannot be searched), it is an error as an explicit one's is: the defaults would quietly put
        // the user's turns in another data directory or database (review: they did).
        None => {
            match xdg_dir("XDG_CONFIG_HOME", ".config").map(|dir| dir.join("rewind/config.toml")) {
                // Not followed: a symlink to nothing is there, and an error (review).
                Some(path) => match std::fs::symlink_metadata(&path) {
                    Ok(_) => path,
                    Err(e)
                        if matches!(
                            e.kind(),
                            std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory
                        ) =>
                    {
                        return Ok((FileConfig::default(), None));
                    }
                    Err(e) => {
                        return Err(anyhow::Error::new(e)
                            .context(format!("cannot read the config file {}", path.display())));
                    }
                },
                None => return Ok((FileConfig::default(), None)),
            }
        }
    };
    let text = std::fs::read_to_string(&path)
        .with_context(|| format!("cannot read the config file {}", path.display()))?;
    let file: FileConfig = toml::from_str(&text).map_err(|error| {
        // The parser quotes the line it stopped at, and names a value of the wrong type: not when that
        // line sets the password (review: a start-up error showed it).
        let line = error.span().and_then(|span| {
            let start = span.start.min(text.len());
            let index = text.as_bytes()[..start].iter().filter(|&&b| b == b'\n').count();
            text.lines().nth(index)
        });
        let secret = line.is_some_and(|line| line.to_ascii_lowercase().contains("password"));
        if secret {
            anyhow::anyhow!(
                "the config file {} is not valid: the password setting cannot be read (give it as a string, \
                 password = \"…\"; its line is not shown)",
                path.display()
            )
        } else {
            anyhow::Error::new(error)
                .context(format!("the config file {} is not valid", path.display()))
        }
    })?;
    Ok((file, Some(path)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_names() {
        for host in [
            "127.0.0.1",
            "localhost",
            "::1",
            "[::1]",
            "127.1.2.3",
            "LOCALHOST",
        ] {
            assert!(is_loopback_name(host), "{host}");
        }
        for host in [
            "0.0.0.0",
            "192.168.1.2",
            "example.com",
            "::",
            "localhost.evil.com",
        ] {
            assert!(!is_loopback_name(host), "{host}");
        }
    }

    #[test]
    fn redacts_passwords() {
        assert_eq!(
            redact_url("postgres://u:secret@h:5432/db"),
            "postgres://u:***@h:5432/db"
        );
        assert_eq!(redact_url("sqlite:///x/y.db"), "sqlite:///x/y.db");
        // A password with an unencoded `/`, `?` or `@` (diff review: shown whole).
        assert_eq!(
            redact_url("postgres://u:ab/cd@h/db"),
            "postgres://u:***@h/db"
        );
        assert_eq!(
            redact_url("postgres://u:ab?cd@h/db"),
            "postgres://u:***@h/db"
        );
        assert_eq!(redact_url("postgres://u:a@b@h/db"), "postgres://u:***@h/db");
        // Also a `password=` parameter (review: it was shown in full in "cannot open the database").
        assert_eq!(
            redact_url("postgres://h/db?sslmode=disable&password=secret"),
            "postgres://h/db?sslmode=disable&password=***"
        );
        // And libpq's `key=value` form, which is refused naming it (review: echoed whole).
        assert_eq!(
            redact_url("host=x password=secret port=5"),
            "host=x password=*** port=5"
        );
    }

    /// A config file whose password line cannot be read is refused without that line or its value
    /// (review: the parser's message quoted it); another bad line is quoted as the parser quotes it.
    #[test]
    fn a_bad_password_line_is_not_quoted() -> Result<()> {
        let dir = tempfile::tempdir()?;
        let file = dir.path().join("rewind.toml");
        let refused = |text: &str| -> String {
            std::fs::write(&file, text).expect("write");
            let args = ConfigArgs {
                config: Some(file.clone()),
                ..ConfigArgs::default()
            };
            Settings::resolve(&args, None, dir.path())
                .err()
                .map(|e| format!("{e:#}"))
                .unwrap_or_default()
        };
        for text in [
            "size_cap = 5\npassword = 123456789\n",
            "password = \"123456789\n",
            "password = [\"123456789\"]\n",
        ] {
            let error = refused(text);
            assert!(error.contains("password setting cannot be read"), "{error}");
            assert!(!error.contains("123456789"), "{error}");
        }
        let error = refused("port = \"x\"\n");
        assert!(error.contains("port = \"x\""), "{error}");
        Ok(())
    }

    #[test]
    fn flags_win_over_the_file_which_wins_over_defaults() -> Result<()> {
        let dir = tempfile::tempdir()?;
        let file = dir.path().join("rewind.toml");
        std::fs::write(
            &file,
            "data_dir = \"data\"\nport = 5000\nfile_cap = 10\nstep_timeout = 7\nproject_roots = [\"/srv\"]\n",
        )?;
        let args = ConfigArgs {
            config: Some(file.clone()),
            file_cap: Some(20),
            ..ConfigArgs::default()
        };
        let settings = Settings::resolve(&args, None, dir.path())?;
        assert_eq!(settings.data_dir, dir.path().join("data"));
        assert_eq!(settings.port, 5000);
        assert_eq!(settings.file_cap, 20);
        assert_eq!(settings.step_timeout_ms, 7000);
        assert_eq!(settings.project_roots, vec![PathBuf::from("/srv")]);
        assert_eq!(settings.size_cap, DEFAULT_SIZE_CAP);
        assert_eq!(settings.hostname, DEFAULT_HOSTNAME);
        assert_eq!(
            settings.database_url,
            default_database_url(&dir.path().join("data"))
        );
        let server = ServerArgs {
            port: Some(0),
            ..ServerArgs::default()
        };
        assert_eq!(Settings::resolve(&args, Some(&server), dir.path())?.port, 0);
        Ok(())
    }

    /// An IPv6 address written as in a URL (`[::1]`) is that address, for the loopback check and for the
    /// listener; brackets around anything else are left for the lookup to refuse.
    #[test]
    fn a_bracketed_ipv6_hostname_is_the_address() -> Result<()> {
        let dir = tempfile::tempdir()?;
        let with = |hostname: &str| ServerArgs {
            hostname: Some(hostname.to_owned()),
            ..ServerArgs::default()
        };
        let args = ConfigArgs::default();
        let resolved = Settings::resolve(&args, Some(&with("[::1]")), dir.path())?;
        assert_eq!(resolved.hostname, "::1");
        assert!(resolved.is_loopback());
        let resolved = Settings::resolve(&args, Some(&with("[2001:db8::1]")), dir.path())?;
        assert_eq!(resolved.hostname, "2001:db8::1");
        assert!(!resolved.is_loopback());
        let resolved = Settings::resolve(&args, Some(&with("[localhost]")), dir.path())?;
        assert_eq!(resolved.hostname, "[localhost]");
        Ok(())
    }

    /// The missing-file hint reads the path as SQLite's driver does (escapes decoded), and says how to add
    /// `mode=rwc` to the URL's own query.
    #[test]
    fn the_missing_sqlite_file_hint_decodes_the_path_and_fits_the_query() -> Result<()> {
        let dir = tempfile::tempdir()?;
        std::fs::write(dir.path().join("a?b.db"), "")?;
        let existing = format!("sqlite://{}/a%3Fb.db", dir.path().display());
        assert_eq!(missing_sqlite_file(&existing), None);
        let missing = format!("sqlite://{}/new.db", dir.path().display());
        let hint = missing_sqlite_file(&missing).unwrap_or_default();
        assert!(hint.ends_with("add ?mode=rwc to create it"), "{hint}");
        let with_query = format!("{missing}?cache=shared");
        let hint = missing_sqlite_file(&with_query).unwrap_or_default();
        assert!(hint.ends_with("add &mode=rwc to create it"), "{hint}");
        assert_eq!(missing_sqlite_file(&format!("{missing}?mode=rwc")), None);
        // SQLite does not make the directory (black-box: the hint said to add mode=rwc, which then failed).
        let no_dir = format!("sqlite://{}/nodir/x.db", dir.path().display());
        let hint = missing_sqlite_file(&no_dir).unwrap_or_default();
        assert!(hint.contains("nor does its directory"), "{hint}");
        let hint = missing_sqlite_file(&format!("{no_dir}?mode=rwc")).unwrap_or_default();
        assert!(hint.contains("create the directory first"), "{hint}");
        Ok(())
    }

    /// A database not made yet is told from one that exists as SQLite finds it: escapes decoded, a `..`
    /// after a missing directory taken by name; only a URL that would create it counts.
    #[test]
    fn a_database_not_made_yet_is_found_as_sqlite_finds_it() -> Result<()> {
        let dir = tempfile::tempdir()?;
        let data = dir.path().join("data");
        let url = default_database_url(&data);
        assert_eq!(sqlite_file_not_created(&url), Some(data.join("rewind.db")));
        std::fs::create_dir(&data)?;
        std::fs::write(data.join("rewind.db"), "")?;
        assert_eq!(sqlite_file_not_created(&url), None);
        let around = format!("sqlite://{}/missing/../rewind.db?mode=rwc", data.display());
        assert_eq!(sqlite_file_not_created(&around), None);
        std::fs::write(dir.path().join("a?b.db"), "")?;
        let escaped = format!("sqlite://{}/a%3Fb.db?mode=rwc", dir.path().display());
        assert_eq!(sqlite_file_not_created(&escaped), None);
        let without_rwc = format!("sqlite://{}/new.db", dir.path().display());
        assert_eq!(sqlite_file_not_created(&without_rwc), None);
        assert_eq!(sqlite_file_not_created("sqlite::memory:"), None);
        assert_eq!(
            sqlite_file_not_created("postgres://u@localhost/db?mode=rwc"),
            None
        );
        Ok(())
    }

    /// An empty data directory in the config file is refused: it would be taken as the file's directory, not
    /// as "no setting".
    #[test]
    fn an_empty_data_dir_is_refused() -> Result<()> {
        let config_dir = tempfile::tempdir()?;
        let file = config_dir.path().join("rewind.toml");
        std::fs::write(&file, "data_dir = \"\"\n")?;
        let args = ConfigArgs {
            config: Some(file.clone()),
            ..ConfigArgs::default()
        };
        let error = Settings::resolve(&args, None, config_dir.path())
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(
            error.contains("data_dir in") && error.contains("is empty"),
            "{error}"
        );
        // A flag overriding it does not hide the file's mistake.
        let both = ConfigArgs {
            config: Some(file),
            data_dir: Some(PathBuf::from("d")),
            ..ConfigArgs::default()
        };
        let error = Settings::resolve(&both, None, config_dir.path())
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(error.contains("data_dir in"), "{error}");
        Ok(())
    }

    /// Relative paths in the config file are the file's directory's, whatever the worktree; those of
    /// flags are the worktree's (`cwd`).
    #[test]
    fn relative_paths_of_the_config_file_are_taken_from_its_directory() -> Result<()> {
        let config_dir = tempfile::tempdir()?;
        let worktree = tempfile::tempdir()?;
        let file = config_dir.path().join("rewind.toml");
        std::fs::write(&file, "data_dir = \"d\"\nproject_roots = [\"r\"]\n")?;
        let args = ConfigArgs {
            config: Some(file.clone()),
            ..ConfigArgs::default()
        };
        let settings = Settings::resolve(&args, None, worktree.path())?;
        assert_eq!(settings.data_dir, config_dir.path().join("d"));
        assert_eq!(settings.project_roots, vec![config_dir.path().join("r")]);
        let flags = ConfigArgs {
            config: Some(file),
            data_dir: Some(PathBuf::from("flag-d")),
            project_roots: vec![PathBuf::from("flag-r")],
            ..ConfigArgs::default()
        };
        let settings = Settings::resolve(&flags, None, worktree.path())?;
        assert_eq!(settings.data_dir, worktree.path().join("flag-d"));
        assert_eq!(settings.project_roots, vec![worktree.path().join("flag-r")]);
        Ok(())
    }

    /// The files of a SQLite database, which snapshots leave out: the database and its three sidecar
    /// files, and when the database is a symlink, the same beside the file it leads to (where SQLite
    /// writes them).
    #[test]
    fn a_sqlite_database_s_files_are_it_and_its_journal_wal_and_shm_where_sqlite_writes_them() {
        let dir = tempfile::TempDir::new().expect("temp dir");
        let dir = std::fs::canonicalize(dir.path()).expect("canonical");
        let named =
            |name: &str| ["", "-journal", "-wal", "-shm"].map(|s| dir.join(format!("{name}{s}")));
        assert_eq!(sqlite_files(&dir.join("rewind.db")), named("rewind.db"));
        std::fs::create_dir(dir.join("state")).expect("mkdir");
        std::fs::write(dir.join("state/real.db"), "").expect("write");
        std::os::unix::fs::symlink("state/real.db", dir.join("link.db")).expect("symlink");
        let mut expected = named("link.db").to_vec();
        expected.extend(
            ["", "-journal", "-wal", "-shm"].map(|s| dir.join(format!("state/real.db{s}"))),
        );
        assert_eq!(sqlite_files(&dir.join("link.db")), expected);
    }

    /// A relative SQLite path made absolute against a directory whose name has characters a URL misreads
    /// (`%`, `?`, `#`) escapes them, so the database opened is the file in that directory (review: a
    /// project directory `50%off` gave a URL the driver read as another path).
    #[test]
    fn a_relative_sqlite_path_in_a_directory_with_url_characters_is_escaped() -> Result<()> {
        let parent = tempfile::tempdir()?;
        let odd = parent.path().join("50%off?#x");
        std::fs::create_dir(&odd)?;
        let url = Settings::resolve(
            &ConfigArgs {
                database_url: Some("sqlite://rel.db?mode=rwc".to_owned()),
                ..ConfigArgs::default()
            },
            None,
            &odd,
        )?
        .database_url;
        let base = parent.path().to_str().expect("UTF-8");
        assert_eq!(
            url,
            format!("sqlite://{base}/50%25off%3F%23x/rel.db?mode=rwc")
        );
        Ok(())
    }

    /// The default database URL escapes a data directory's URL characters, so the database is the file in
    /// that directory (review: `%41` opened `A`'s, and a `?` failed as a URL parameter); a data
    /// directory that is not UTF-8 is refused.
    #[test]
    fn the_default_database_url_escapes_the_data_directory() -> Result<()> {
        let parent = tempfile::tempdir()?;
        let args = |dir: PathBuf| ConfigArgs {
            data_dir: Some(dir),
            ..ConfigArgs::default()
        };
        let url =
            Settings::resolve(&args(PathBuf::from("r%41?b#c")), None, parent.path())?.database_url;
        let base = parent.path().to_str().expect("UTF-8");
        assert_eq!(
            url,
            format!("sqlite://{base}/r%2541%3Fb%23c/rewind.db?mode=rwc")
        );
        let not_utf8 =
            PathBuf::from(<std::ffi::OsStr as std::os::unix::ffi::OsStrExt>::from_bytes(b"d\xff"));
        let error = Settings::resolve(&args(not_utf8), None, parent.path())
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(error.contains("not valid UTF-8"), "{error}");
        Ok(())
    }

    /// Empty values, zero caps and a step timeout past a year are refused by name, from a flag or the
    /// file (review: an empty password turned authentication off, a size cap of 0 skipped every new file,
    /// and a huge timeout failed deep in the database).
    #[test]
    fn empty_and_out_of_range_values_are_refused_by_name() -> Result<()> {
        let dir = tempfile::tempdir()?;
        let file = dir.path().join("rewind.toml");
        let refused = |text: &str, args: ConfigArgs, server: Option<ServerArgs>| -> String {
            std::fs::write(&file, text).expect("write");
            let args = ConfigArgs {
                config: Some(file.clone()),
                ..args
            };
            Settings::resolve(&args, server.as_ref(), dir.path())
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default()
        };
        for key in ["password", "hostname", "database_url"] {
            let error = refused(&format!("{key} = \"\"\n"), ConfigArgs::default(), None);
            assert!(
                error.contains(&format!("{key} in")) && error.contains("is empty"),
                "{error}"
            );
        }
        let error = refused(
            "password = \"secret\"\n",
            ConfigArgs::default(),
            Some(ServerArgs {
                password: Some(String::new()),
                ..ServerArgs::default()
            }),
        );
        assert!(error.contains("--password is empty"), "{error}");
        // Also when a flag overrides it.
        for roots in [vec![], vec![dir.path().to_path_buf()]] {
            let error = refused(
                "project_roots = [\"\"]\n",
                ConfigArgs {
                    project_roots: roots,
                    ..ConfigArgs::default()
                },
                None,
            );
            assert!(error.contains("a project root in"), "{error}");
            assert!(error.contains("is empty"), "{error}");
        }
        // The file's value is refused also when a flag overrides it, naming the file's key.
        for size_cap in [None, Some(5)] {
            let error = refused(
                "size_cap = 0\n",
                ConfigArgs {
                    size_cap,
                    ..ConfigArgs::default()
                },
                None,
            );
            assert!(
                error.contains("size_cap in") && error.contains("must be at least 1 byte"),
                "{error}"
            );
        }
        for (text, key) in [
            ("file_cap = 0\n", "file_cap in"),
            ("step_timeout = 0\n", "step_timeout in"),
            ("data_dir = \"\"\n", "data_dir in"),
        ] {
            let error = refused(
                text,
                ConfigArgs {
                    data_dir: Some(dir.path().join("data")),
                    file_cap: Some(5),
                    step_timeout: Some(5),
                    ..ConfigArgs::default()
                },
                None,
            );
            assert!(error.contains(key), "{text}: {error}");
        }
        let error = refused(
            "",
            ConfigArgs {
                size_cap: Some(0),
                ..ConfigArgs::default()
            },
            None,
        );
        assert!(
            error.contains("size cap must be at least 1 byte (--size-cap or REWIND_SIZE_CAP)"),
            "{error}"
        );
        let error = refused(
            "",
            ConfigArgs {
                step_timeout: Some(MAX_STEP_TIMEOUT_SECS + 1),
                ..ConfigArgs::default()
            },
            None,
        );
        assert!(
            error.contains("step timeout must be from 1 second"),
            "{error}"
        );
        // In range, all is taken.
        std::fs::write(&file, "password = \"secret\"\nsize_cap = 1\n")?;
        let settings = Settings::resolve(
            &ConfigArgs {
                config: Some(file.clone()),
                step_timeout: Some(MAX_STEP_TIMEOUT_SECS),
                ..ConfigArgs::default()
            },
            None,
            dir.path(),
        )?;
        assert_eq!(settings.password.as_deref(), Some("secret"));
        assert_eq!(settings.size_cap, 1);
        Ok(())
    }

    /// A SQLite file named by a relative path follows the same rule (SQLite itself would take it from the
    /// process's current directory); other URLs are left as they are, and one naming no file is refused.
    #[test]
    fn a_relative_sqlite_path_is_taken_from_the_same_directory_as_other_paths() -> Result<()> {
        let config_dir = tempfile::tempdir()?;
        let worktree = tempfile::tempdir()?;
        let file = config_dir.path().join("rewind.toml");
        std::fs::write(&file, "database_url = \"sqlite://db/r.db?mode=rwc\"\n")?;
        let from_file = ConfigArgs {
            config: Some(file.clone()),
            ..ConfigArgs::default()
        };
        assert_eq!(
            Settings::resolve(&from_file, None, worktree.path())?.database_url,
            format!(
                "sqlite://{}?mode=rwc",
                config_dir.path().join("db/r.db").display()
            )
        );
        for (given, expected) in [
            (
                "sqlite:rel.db".to_owned(),
                format!("sqlite://{}", worktree.path().join("rel.db").display()),
            ),
            (
                "sqlite://rel.db?mode=rwc".to_owned(),
                format!(
                    "sqlite://{}?mode=rwc",
                    worktree.path().join("rel.db").display()
                ),
            ),
            (
                "sqlite:///abs/r.db".to_owned(),
                "sqlite:///abs/r.db".to_owned(),
            ),
            ("sqlite::memory:".to_owned(), "sqlite::memory:".to_owned()),
            (
                "postgres://u@h/db".to_owned(),
                "postgres://u@h/db".to_owned(),
            ),
        ] {
            let flags = ConfigArgs {
                config: Some(file.clone()),
                database_url: Some(given.clone()),
                ..ConfigArgs::default()
            };
            assert_eq!(
                Settings::resolve(&flags, None, worktree.path())?.database_url,
                expected,
                "{given}"
            );
        }
        for empty in ["sqlite://", "sqlite:", "sqlite://?mode=rwc"] {
            let flags = ConfigArgs {
                database_url: Some(empty.to_owned()),
                data_dir: Some(worktree.path().to_path_buf()),
                ..ConfigArgs::default()
            };
            let error = match Settings::resolve(&flags, None, worktree.path()) {
                Ok(settings) => panic!("accepted {empty}: {settings:?}"),
                Err(error) => error.to_string(),
            };
            assert!(error.contains("names no file"), "{error}");
        }
        Ok(())
    }

    #[test]
    fn a_bad_config_file_is_an_error_naming_it() -> Result<()> {
        let dir = tempfile::tempdir()?;
        let file = dir.path().join("rewind.toml");
        std::fs::write(&file, "prot = 5000\n")?;
        let args = ConfigArgs {
            config: Some(file.clone()),
            data_dir: Some(dir.path().to_path_buf()),
            ..ConfigArgs::default()
        };
        let error = match Settings::resolve(&args, None, dir.path()) {
            Ok(settings) => panic!("accepted an unknown key: {settings:?}"),
            Err(error) => crate::report::chain_anyhow(&error),
        };
        assert!(
            error.contains("rewind.toml") && error.contains("prot"),
            "{error}"
        );
        Ok(())
    }
}
