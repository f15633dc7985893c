//! The commands other than `serve`.

use std::path::Path;

use anyhow::{Result, bail};

use super::Command;
use crate::config::Settings;

/// Runs one command in `directory`.
pub async fn run(
    command: Command,
    settings: &Settings,
    directory: &Path,
    json: bool,
) -> Result<()> {
    let _ = (settings, directory, json);
    bail!("`rewind {command:?}` is not built yet")
}
