//! The HTTP server (SPEC sections 9 and 10).

use anyhow::{Result, bail};

use crate::config::Settings;

/// Runs the server until it is stopped.
pub async fn serve(settings: Settings) -> Result<()> {
    let _ = settings;
    bail!("`rewind serve` is not built yet")
}
