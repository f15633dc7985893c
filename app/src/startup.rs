//! Wiring: the core services over the real adapters (gitoxide store, SeaORM database, system host), as
//! the command line and the server both use them.

use std::collections::{HashMap, HashSet};
use std::os::unix::fs::DirBuilderExt;
use std::sync::Arc;

use anyhow::{Context, Result};
use rewind_core::model::{HolderKind, LeaseToken};
use rewind_core::service::RecoveryReport;
use rewind_core::{HostPort, MessageRepo, Rewind, ServiceConfig, SnapshotPort};
use rewind_git::{GitSnapshotStore, GitStoreConfig};
use rewind_sql::{SqlConfig, SqlRepo};

use crate::config::{Settings, redact_url};
use crate::host::SystemHost;

/// The opened adapters and the services over them.
#[derive(Clone)]
pub struct Services {
    /// The use cases.
    pub rewind: Arc<Rewind>,
    /// The database.
    pub repo: Arc<SqlRepo>,
    /// The snapshot stores.
    pub snapshots: Arc<GitSnapshotStore>,
    /// This host.
    pub host: Arc<SystemHost>,
    /// The configuration they were opened with.
    pub settings: Settings,
}

impl std::fmt::Debug for Services {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Services")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

impl Services {
    /// Creates the data directory, opens (and migrates) the database and sets up the snapshot stores.
    /// `holder` says whose leases this process takes: `Process` for the command line, `Server` for HTTP.
    /// A data directory this call made is removed again when the database cannot be opened (a URL that
    /// names no database, a server that refuses): a refused command leaves nothing behind (review).
    pub async fn open(settings: &Settings, holder: HolderKind) -> Result<Services> {
        let made = missing_dirs(&settings.data_dir);
        // Made private (0700): the snapshot stores hold copies of the worktree's files, private ones
        // included, and the database holds the sessions (review: made 0755, any local user could read a
        // 0600 key's content there). A data directory that exists keeps its mode.
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&settings.data_dir)
            .with_context(|| {
                format!(
                    "cannot create the data directory {} (set --data-dir or REWIND_DATA_DIR)",
                    settings.data_dir.display()
                )
            })?;
        let opened =
            Services::open_with(settings, holder, SqlConfig::new(&settings.database_url)).await;
        if opened.is_err() {
            // Deepest first, each only while empty (`remove_dir`): whatever came into one stays.
            for dir in made {
                let _ = std::fs::remove_dir(dir);
            }
        }
        opened
    }

    /// The services over a database opened only to read (a read-only file or mount, a standby), for the
    /// commands that only show: every write fails, and nothing is created.
    pub async fn open_to_read(settings: &Settings) -> Result<Services> {
        let mut config = SqlConfig::new(&settings.database_url);
        config.read_only = true;
        Services::open_with(settings, HolderKind::Process, config).await
    }

    async fn open_with(
        settings: &Settings,
        holder: HolderKind,
        config: SqlConfig,
    ) -> Result<Services> {
        let repo = SqlRepo::open(config).await.with_context(|| {
            let hint = crate::config::missing_sqlite_file(&settings.database_url)
                .map(|why| format!(" ({why})"))
                .unwrap_or_default();
            format!(
                "cannot open the database {}{hint}",
                redact_url(&settings.database_url)
            )
        })?;
        // One database, however its path or URL is spelled (a symlink, `..`, a relative data dir;
        // `localhost` or `127.0.0.1`, the default port or none, query parameters), and never two: a SQLite
        // database's stores are keyed on the identity it drew when first migrated and its canonical file
        // (another database made in its place, after it was moved aside, has stores of its own, and its gc
        // never weighs the first one's snapshots; review: it collected them, and the first, put back, had
        // lost them), a PostgreSQL database's on its drawn identity with its port, name and schema. A store
        // keyed as before (the canonical file alone, the spelling given) is adopted.
        let mut former = vec![repo.target().to_owned()];
        let identity = match (repo.sqlite_file(), repo.database_identity()) {
            (Some(file), drawn) => {
                let file = std::fs::canonicalize(file).map_or_else(
                    |_| repo.target().to_owned(),
                    |file| file.to_string_lossy().into_owned(),
                );
                match drawn {
                    Some(drawn) => {
                        former.insert(0, file.clone());
                        format!("sqlite database {drawn} at {file}")
                    }
                    None => file,
                }
            }
            (None, Some(drawn)) if crate::config::is_postgres_url(&settings.database_url) => {
                format!("postgres database {drawn}")
            }
            _ => repo.target().to_owned(),
        };
        let mut store_config = GitStoreConfig::new(settings.data_dir.clone(), identity.clone());
        former.retain(|spelled| *spelled != identity);
        former.dedup();
        store_config.former_identities = former;
        // A database given inside a project directory is snapshotted and reverted with it otherwise.
        store_config.own_files = repo
            .sqlite_file()
            .map(crate::config::sqlite_files)
            .unwrap_or_default();
        store_config.size_cap = settings.size_cap;
        store_config.file_cap = settings.file_cap;
        let snapshots = Arc::new(GitSnapshotStore::new(store_config));
        let repo = Arc::new(repo);
        let host = Arc::new(SystemHost::new());
        let service_config = ServiceConfig {
            holder_kind: holder,
            step_timeout_ms: settings.step_timeout_ms,
            ..ServiceConfig::default()
        };
        let rewind = Arc::new(Rewind::new(
            Arc::clone(&snapshots) as Arc<dyn SnapshotPort>,
            Arc::clone(&repo) as Arc<dyn MessageRepo>,
            Arc::clone(&host) as Arc<dyn HostPort>,
            service_config,
        ));
        Ok(Services {
            rewind,
            repo,
            snapshots,
            host,
            settings: settings.clone(),
        })
    }
}

/// The directories `create_dir_all(dir)` would make: `dir` and its ancestors that do not exist, deepest
/// first.
fn missing_dirs(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    dir.ancestors()
        .take_while(|ancestor| !ancestor.as_os_str().is_empty() && !ancestor.exists())
        .map(std::path::Path::to_path_buf)
        .collect()
}

/// Server settings that are not user configuration (tests and benchmarks change them).
#[derive(Clone, Debug)]
pub struct ServerOptions {
    /// The largest request body accepted (larger: 413).
    pub body_limit: usize,
    /// How often the outbox relay polls the database.
    pub relay_interval: std::time::Duration,
    /// How often event streams send `server.heartbeat`.
    pub heartbeat: std::time::Duration,
    /// The default worktree (default: the process's current directory).
    pub cwd: Option<std::path::PathBuf>,
    /// How many events a stream may fall behind before it gets `server.lagged`.
    pub bus_capacity: usize,
    /// How often the server looks for operations whose process died (a `rewind revert` killed mid-way)
    /// and recovers them, as start-up does.
    pub recovery_interval: std::time::Duration,
    /// How long a connection may take to send a request's head (`HEADER_READ_TIMEOUT`).
    pub header_read_timeout: std::time::Duration,
}

impl Default for ServerOptions {
    fn default() -> Self {
        ServerOptions {
            body_limit: 8 * 1024 * 1024,
            relay_interval: std::time::Duration::from_millis(50),
            heartbeat: std::time::Duration::from_secs(10),
            cwd: None,
            bus_capacity: rewind_bus::DEFAULT_CAPACITY,
            recovery_interval: std::time::Duration::from_secs(5),
            header_read_timeout: HEADER_READ_TIMEOUT,
        }
    }
}

/// The HTTP server, bound and ready: `build` then `run_until_stopped` (port 0 picks a free port, which
/// `port` tells).
pub struct Application {
    listener: tokio::net::TcpListener,
    address: std::net::SocketAddr,
    state: crate::http::AppState,
    relay_cursor: u64,
    relay_interval: std::time::Duration,
    recovery_interval: std::time::Duration,
    /// The intents start-up could not recover (logged), for the periodic recovery to try again later.
    unrecoverable: Unrecoverable,
    body_limit: usize,
    header_read_timeout: std::time::Duration,
}

impl std::fmt::Debug for Application {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Application")
            .field("address", &self.address)
            .finish_non_exhaustive()
    }
}

impl Application {
    /// Opens the services, runs recovery (SPEC section 8), finds the end of the outbox and binds the
    /// listener. Refuses a non-loopback address without a password.
    pub async fn build(settings: Settings) -> Result<Application> {
        Application::build_with(settings, ServerOptions::default()).await
    }

    /// `build` with non-default server options.
    pub async fn build_with(settings: Settings, options: ServerOptions) -> Result<Application> {
        if !settings.is_loopback() && settings.password.is_none() {
            // A value that cannot be a host (`127.0.0.1:80`, `http://…`) is said as such, not as a missing
            // password (review: it was). Judged by its form alone: a name that does not resolve now (the
            // DNS down) is still refused for the password, and listening tells the rest.
            let host = settings.hostname.as_str();
            if host.parse::<std::net::SocketAddr>().is_ok() || host.contains('/') {
                addresses(host, settings.port).await?;
            }
            anyhow::bail!(
                "refusing to listen on {} without a password: set --password or REWIND_PASSWORD \
                 (anything but loopback requires HTTP basic auth)",
                settings.hostname
            );
        }
        let cwd = match options.cwd.clone() {
            Some(cwd) => cwd,
            None => std::env::current_dir().context("cannot read the current directory")?,
        };
        let roots = settings
            .project_roots
            .iter()
            .map(|root| {
                let canonical = std::fs::canonicalize(root)
                    .with_context(|| format!("project root {} cannot be opened", root.display()))?;
                // A file would refuse every session with 400 once the server runs (review): said now.
                if !canonical.is_dir() {
                    anyhow::bail!(
                        "project root {} is not a directory: name the directory sessions' worktrees lie under",
                        root.display()
                    );
                }
                Ok(canonical)
            })
            .collect::<Result<Vec<_>>>()?;
        // Bound before the database is opened: an address that cannot be had (taken, not this machine's,
        // not resolved) leaves no data directory or database behind (review: it left a migrated one).
        let listener = listen(&settings.hostname, settings.port).await?;
        let services = Services::open(&settings, HolderKind::Server).await?;
        let report = services
            .rewind
            .recover()
            .await
            .context("recovery of interrupted operations failed")?;
        if !report.recovered.is_empty() || !report.in_progress.is_empty() {
            tracing::info!(
                recovered = report.recovered.len(),
                in_progress = report.in_progress.len(),
                "recovery"
            );
        }
        let mut unrecoverable = Unrecoverable::default();
        unrecoverable.note(&report, &HashSet::new(), options.recovery_interval);
        let relay_cursor = crate::http::events::outbox_end(services.repo.as_ref())
            .await
            .context("cannot read the event outbox")?;
        let address = listener.local_addr()?;
        let state = crate::http::AppState {
            bus: Arc::new(rewind_bus::BroadcastBus::new(options.bus_capacity)),
            roots: Arc::new(roots),
            cwd,
            loopback_only: settings.is_loopback(),
            password: settings.password.as_deref().map(Arc::from),
            shutdown: tokio_util::sync::CancellationToken::new(),
            relay_wake: Arc::new(tokio::sync::Notify::new()),
            requests: tokio_util::task::TaskTracker::new(),
            sessions_in_roots: Arc::default(),
            heartbeat: options.heartbeat,
            services,
        };
        Ok(Application {
            listener,
            address,
            state,
            relay_cursor,
            relay_interval: options.relay_interval,
            recovery_interval: options.recovery_interval,
            unrecoverable,
            body_limit: options.body_limit,
            header_read_timeout: options.header_read_timeout,
        })
    }

    /// The bound port.
    pub fn port(&self) -> u16 {
        self.address.port()
    }

    /// The bound address.
    pub fn address(&self) -> std::net::SocketAddr {
        self.address
    }

    /// The database handle the server uses (tests set its hooks).
    #[doc(hidden)]
    pub fn repo(&self) -> Arc<SqlRepo> {
        Arc::clone(&self.state.services.repo)
    }

    /// Cancelling this token stops the server gracefully: requests in flight finish, event streams end.
    pub fn shutdown_token(&self) -> tokio_util::sync::CancellationToken {
        self.state.shutdown.clone()
    }

    /// Serves until the shutdown token is cancelled, with the outbox relay running beside.
    pub async fn run_until_stopped(self) -> Result<()> {
        let stop = self.state.shutdown.clone();
        let relay = tokio::spawn(crate::http::events::relay(
            Arc::clone(&self.state.services.repo) as Arc<dyn MessageRepo>,
            Arc::clone(&self.state.bus),
            self.relay_cursor,
            self.relay_interval,
            Arc::clone(&self.state.relay_wake),
            stop.clone(),
        ));
        let outbox_cutter = tokio::spawn(cut_outbox_hourly(
            self.state.services.rewind.clone(),
            stop.clone(),
        ));
        let recoverer = tokio::spawn(recover_periodically(
            self.state.services.rewind.clone(),
            self.recovery_interval,
            self.unrecoverable,
            stop.clone(),
        ));
        tracing::info!(address = %self.address, "rewind serving");
        let requests = self.state.requests.clone();
        let router = crate::http::router(self.state, self.body_limit);
        let served = serve(
            self.listener,
            router,
            self.header_read_timeout,
            stop.clone(),
        )
        .await;
        stop.cancel();
        // Requests whose clients went away run on: a revert ends with its result stored.
        requests.close();
        requests.wait().await;
        let _ = relay.await;
        let _ = outbox_cutter.await;
        let _ = recoverer.await;
        tracing::info!("rewind stopped");
        served
    }
}

/// How long a connection may take to send a request's head, from when the server waits for one (a new
/// connection, or one kept alive after a request): past it, the connection is closed. A client that
/// sends nothing, or drips a request out, holds no connection longer (review: such connections stayed open
/// for good, and enough of them, from anyone on the network, took every file descriptor from the server,
/// password or not). An event stream, once its request is read, is not bound by it.
const HEADER_READ_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// How many connections are served at once, at most: more wait in the listen queue until one closes. Fewer
/// when the process may open few files (a quarter of its limit).
const MAX_CONNECTIONS: usize = 1024;

/// The address a request came from (its connection's peer), in the request's extensions.
pub use axum::extract::ConnectInfo;

/// Serves `router` on `listener` until `stop` is cancelled, then lets the connections finish their
/// requests (an event stream ends with `stop`). axum's `serve`, with a header read timeout
/// (`HEADER_READ_TIMEOUT`) and a bound on open connections (`MAX_CONNECTIONS`). A failed accept (the
/// process out of file descriptors) is logged and tried again after a pause.
async fn serve(
    listener: tokio::net::TcpListener,
    router: axum::Router,
    header_read_timeout: std::time::Duration,
    stop: tokio_util::sync::CancellationToken,
) -> Result<()> {
    let permits = Arc::new(tokio::sync::Semaphore::new(connection_bound()));
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(header_read_timeout);
    loop {
        let permit = tokio::select! {
            permit = Arc::clone(&permits).acquire_owned() => permit.context("the connection bound closed")?,
            () = stop.cancelled() => break,
        };
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                // Out of file descriptors or memory: a pause before the next try, or the loop would spin
                // (stopping still stops it). Anything else concerns that one connection (aborted by its
                // client before it was accepted, say): the next is accepted at once.
                Err(error) if is_resource_error(&error) => {
                    tracing::warn!(%error, "cannot accept a connection; trying again in a second");
                    tokio::select! {
                        () = tokio::time::sleep(std::time::Duration::from_secs(1)) => {}
                        () = stop.cancelled() => break,
                    }
                    continue;
                }
                Err(error) => {
                    tracing::debug!(%error, "a connection failed as it was accepted");
                    continue;
                }
            },
            () = stop.cancelled() => break,
        };
        let _ = stream.set_nodelay(true);
        // The peer's address, for the guard's log of refused requests (`ConnectInfo`).
        let service = hyper_util::service::TowerToHyperService::new(tower_layer::Layer::layer(
            &axum::Extension(ConnectInfo(peer)),
            router.clone(),
        ));
        let connection =
            graceful.watch(http.serve_connection(hyper_util::rt::TokioIo::new(stream), service));
        tokio::spawn(async move {
            if let Err(error) = connection.await {
                tracing::debug!(%error, "connection ended with an error");
            }
            drop(permit);
        });
    }
    drop(listener);
    // The connections' requests finish (a revert runs on detached from its connection anyway, and is
    // waited for apart); a connection that is still sending a request when `SHUTDOWN_GRACE` has passed
    // (one that has sent nothing yet would otherwise hold the shutdown for the header read timeout, a
    // body sent slowly for good) is closed.
    if tokio::time::timeout(SHUTDOWN_GRACE, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::info!(
            "closed the connections still open {SHUTDOWN_GRACE:?} after the shutdown began"
        );
    }
    Ok(())
}

/// How long the shutdown waits for open connections to finish their requests (`serve`).
const SHUTDOWN_GRACE: std::time::Duration = std::time::Duration::from_secs(5);

/// Whether an accept failed for want of file descriptors or memory, which a pause may give back.
fn is_resource_error(error: &std::io::Error) -> bool {
    matches!(
        error.raw_os_error(),
        Some(code) if [
            nix::errno::Errno::EMFILE as i32,
            nix::errno::Errno::ENFILE as i32,
            nix::errno::Errno::ENOBUFS as i32,
            nix::errno::Errno::ENOMEM as i32,
        ].contains(&code)
    )
}

/// `MAX_CONNECTIONS`, or a quarter of the files this process may open when that is fewer; the soft limit
/// is raised to the hard one first (a server's connections are files).
fn connection_bound() -> usize {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE) else {
        return MAX_CONNECTIONS;
    };
    let limit = if soft < hard && setrlimit(Resource::RLIMIT_NOFILE, hard, hard).is_ok() {
        hard
    } else {
        soft
    };
    usize::try_from(limit / 4)
        .unwrap_or(MAX_CONNECTIONS)
        .clamp(16, MAX_CONNECTIONS)
}

/// The intents recovery could not finish, each with when to try it again and the pause after that: the
/// periodic recovery tries them again less and less often (each try captures the worktree first), says
/// each once, and forgets one once it is finished.
#[derive(Default)]
struct Unrecoverable(HashMap<LeaseToken, (std::time::Instant, std::time::Duration)>);

impl Unrecoverable {
    /// The longest pause between two tries of one intent.
    const MOST: std::time::Duration = std::time::Duration::from_secs(600);

    /// The intents not to try now.
    fn waiting(&self) -> HashSet<LeaseToken> {
        let now = std::time::Instant::now();
        self.0
            .iter()
            .filter(|(_, (next, _))| *next > now)
            .map(|(token, _)| token.clone())
            .collect()
    }

    /// Takes in what a pass that left out `skipped` did: an intent that failed again waits twice as long
    /// (one that failed for the first time is logged), one that was tried and did not fail is forgotten.
    fn note(
        &mut self,
        report: &RecoveryReport,
        skipped: &HashSet<LeaseToken>,
        first: std::time::Duration,
    ) {
        let now = std::time::Instant::now();
        let failed: HashSet<&LeaseToken> = report.failed.iter().map(|f| &f.token).collect();
        self.0
            .retain(|token, _| skipped.contains(token) || failed.contains(token));
        for failure in &report.failed {
            match self.0.get_mut(&failure.token) {
                Some((next, pause)) => {
                    *pause = (*pause * 2).min(Self::MOST);
                    *next = now + *pause;
                }
                None => {
                    tracing::warn!(
                        directory = %failure.directory,
                        error = %failure.error,
                        "an interrupted operation could not be recovered; operations on its worktree are refused until it can be (tried again later)"
                    );
                    self.0.insert(failure.token.clone(), (now + first, first));
                }
            }
        }
    }
}

/// Recovers, every `interval`, the operations whose process died while the server runs (a `rewind revert`
/// killed mid-way, SPEC 8), as start-up does: its worktree is put back, with a capture and a warning the
/// session's clients see at once, instead of only when the next operation on the session runs. An intent
/// whose owner is alive is left alone, and so are those of this server's operations still running (one
/// of its own whose operation ended without finishing it, a rollback failed too, is finished); one it
/// could not finish is tried again after a pause that doubles each time, up to 10 minutes
/// (`Unrecoverable`). Then it sees to the steps found abandoned (`Rewind::tend_abandoned_steps`: aborted
/// when their process died, else announced idle once), so their sessions' clients see them idle at once.
async fn recover_periodically(
    rewind: Arc<Rewind>,
    interval: std::time::Duration,
    mut unrecoverable: Unrecoverable,
    stop: tokio_util::sync::CancellationToken,
) {
    // A database that cannot be read is said once, when it starts failing; so is a session whose step
    // cannot be seen to, until it can.
    let mut failing = false;
    let mut tending_fails = false;
    let mut unabortable: HashSet<rewind_core::model::SessionId> = HashSet::new();
    // The abandoned steps announced idle (each once while this server runs).
    let mut announced: HashSet<LeaseToken> = HashSet::new();
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(interval) => {}
        }
        let waiting = unrecoverable.waiting();
        match rewind.recover_others(&waiting).await {
            Ok(report) => {
                failing = false;
                if !report.recovered.is_empty() {
                    tracing::info!(
                        recovered = report.recovered.len(),
                        "recovered operations whose process died"
                    );
                }
                unrecoverable.note(&report, &waiting, interval);
            }
            Err(error) if !failing => {
                failing = true;
                tracing::warn!(%error, "cannot look for interrupted operations; trying again");
            }
            Err(_) => {}
        }
        // After recovery (SPEC 8: an interrupted operation is finished before anything else is done to its
        // worktree), the steps abandoned since.
        let waiting = unrecoverable.waiting();
        match rewind.tend_abandoned_steps(&announced, &waiting).await {
            Ok(report) => {
                tending_fails = false;
                if !report.aborted.is_empty() {
                    tracing::info!(
                        sessions = ?report.aborted.iter().map(|id| id.as_str()).collect::<Vec<_>>(),
                        "aborted steps whose process died"
                    );
                }
                for session in &report.aborted {
                    unabortable.remove(session);
                }
                // Bounded: a server that runs for months forgets the oldest (one more idle event each).
                if announced.len() > 10_000 {
                    announced.clear();
                }
                announced.extend(report.announced);
                for (session, error) in report.failed {
                    if unabortable.insert(session.clone()) {
                        tracing::warn!(%session, %error, "cannot see to an abandoned step; trying again");
                    }
                }
            }
            Err(error) if !tending_fails => {
                tending_fails = true;
                tracing::warn!(%error, "cannot look for abandoned steps; trying again");
            }
            Err(_) => {}
        }
    }
}

/// Cuts the event outbox to its newest events once an hour (as `rewind gc` does), so a server that runs
/// for months without a gc does not fill its database with delivered events.
async fn cut_outbox_hourly(rewind: Arc<Rewind>, stop: tokio_util::sync::CancellationToken) {
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(std::time::Duration::from_secs(3600)) => {}
        }
        match rewind.cut_outbox().await {
            Ok(0) => {}
            Ok(deleted) => tracing::info!(deleted, "cut the event outbox"),
            Err(error) => {
                tracing::warn!(%error, "cannot cut the event outbox; trying again in an hour")
            }
        }
    }
}

/// The addresses `hostname` names, or an error saying it names none.
async fn addresses(hostname: &str, port: u16) -> Result<Vec<std::net::SocketAddr>> {
    Ok(tokio::net::lookup_host((hostname, port))
        .await
        .with_context(|| {
            format!(
                "cannot listen on {hostname}:{port}: {hostname} is not a host name or an IP address (--hostname \
                 takes one, without a port or a scheme)"
            )
        })?
        .collect())
}

/// The listener on `hostname`:`port`, or an error whose hint fits its cause: a name that does not resolve
/// or an address not of this machine (the flag's value), a port in use (another server), or the system's
/// refusal as it is (a port below 1024 without the right to it, say). Review: every failure got the
/// hint about another server, then every one but that the hint about the flag.
async fn listen(hostname: &str, port: u16) -> Result<tokio::net::TcpListener> {
    let at = format!("cannot listen on {hostname}:{port}");
    let addresses = addresses(hostname, port).await?;
    match tokio::net::TcpListener::bind(&addresses[..]).await {
        Ok(listener) => Ok(listener),
        Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => Err(anyhow::Error::new(e).context(
            format!("{at} (is another server running? --port 0 picks a free port)"),
        )),
        Err(e) if e.kind() == std::io::ErrorKind::AddrNotAvailable => {
            Err(anyhow::Error::new(e).context(format!(
                "{at}: {hostname} is not an address of this machine (--hostname takes one of its own)"
            )))
        }
        Err(e) => Err(anyhow::Error::new(e).context(at)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rewind_core::service::RecoveryFailure;

    fn failed(token: &LeaseToken) -> RecoveryReport {
        RecoveryReport {
            failed: vec![RecoveryFailure {
                token: token.clone(),
                directory: "/w".to_owned(),
                error: "a file cannot be written".to_owned(),
            }],
            ..RecoveryReport::default()
        }
    }

    /// An intent the periodic recovery could not finish waits before it is tried again, twice as long each
    /// time it fails again, and is forgotten once a try does not fail.
    #[test]
    fn an_unrecoverable_intent_is_tried_again_less_and_less_often() {
        let token = LeaseToken("tok_stuck".to_owned());
        let first = std::time::Duration::from_millis(20);
        let mut stuck = Unrecoverable::default();
        stuck.note(&failed(&token), &HashSet::new(), first);
        assert!(stuck.waiting().contains(&token), "waits");
        std::thread::sleep(first * 2);
        assert!(stuck.waiting().is_empty(), "then is tried again");
        stuck.note(&failed(&token), &HashSet::new(), first);
        assert_eq!(stuck.0[&token].1, first * 2, "the pause doubles");
        let waiting = stuck.waiting();
        stuck.note(&RecoveryReport::default(), &waiting, first);
        assert!(stuck.0.contains_key(&token), "kept while it was not tried");
        std::thread::sleep(first * 3);
        stuck.note(&RecoveryReport::default(), &stuck.waiting(), first);
        assert!(stuck.0.is_empty(), "forgotten once a try did not fail");
    }
}
