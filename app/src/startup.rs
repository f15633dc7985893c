//! Wiring: the core services over the real adapters (gitoxide store, SeaORM database, system host), as
//! the command line and the server both use them.

use std::sync::Arc;

use anyhow::{Context, Result};
use rewind_core::model::HolderKind;
use rewind_core::{HostPort, MessageRepo, Rewind, ServiceConfig, SnapshotPort};
use rewind_git::{GitSnapshotStore, GitStoreConfig};
use rewind_sql::SqlRepo;

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
    pub async fn open(settings: &Settings, holder: HolderKind) -> Result<Services> {
        std::fs::create_dir_all(&settings.data_dir).with_context(|| {
            format!(
                "cannot create the data directory {} (set --data-dir or REWIND_DATA_DIR)",
                settings.data_dir.display()
            )
        })?;
        let repo = SqlRepo::connect(&settings.database_url)
            .await
            .with_context(|| {
                format!(
                    "cannot open the database {}",
                    redact_url(&settings.database_url)
                )
            })?;
        let mut store_config =
            GitStoreConfig::new(settings.data_dir.clone(), repo.target().to_owned());
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
