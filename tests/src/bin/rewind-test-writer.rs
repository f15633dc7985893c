//! A second process for the relay scenario: opens rewind's services on a server's database (as the
//! command line would) and creates one session, printing its id. Usage:
//! `rewind-test-writer DATA_DIR DATABASE_URL WORKTREE TITLE`.

use anyhow::{Context, Result};
use rewind_app::worktree::canonical_worktree;
use rewind_app::{Services, Settings};
use rewind_core::model::HolderKind;

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [data_dir, database_url, worktree, title] = args.as_slice() else {
        anyhow::bail!("usage: rewind-test-writer DATA_DIR DATABASE_URL WORKTREE TITLE");
    };
    let mut settings = Settings::new(data_dir, std::path::Path::new(worktree));
    settings.database_url = database_url.clone();
    let services = Services::open(&settings, HolderKind::Process).await?;
    // The worktree as the server and the command line record it.
    let (_, worktree) = canonical_worktree(std::path::Path::new(worktree))?;
    let session = services
        .rewind
        .create_session(&worktree, Some(title.clone()))
        .await
        .context("cannot create the session")?;
    println!("{}", session.id);
    Ok(())
}
