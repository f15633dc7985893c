//! A second process for the relay scenario: opens rewind's services on a server's database (as the
//! command line would) and creates one session, printing its id; given a PARENT, the session is created
//! under that one. Usage: `rewind-test-writer DATA_DIR DATABASE_URL WORKTREE TITLE [PARENT]`.

use anyhow::{Context, Result};
use rewind_app::worktree::canonical_worktree;
use rewind_app::{Services, Settings};
use rewind_core::model::HolderKind;

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (data_dir, database_url, worktree, title, parent) = match args.as_slice() {
        [data_dir, database_url, worktree, title] => {
            (data_dir, database_url, worktree, title, None)
        }
        [data_dir, database_url, worktree, title, parent] => {
            (data_dir, database_url, worktree, title, Some(parent))
        }
        _ => {
            anyhow::bail!("usage: rewind-test-writer DATA_DIR DATABASE_URL WORKTREE TITLE [PARENT]")
        }
    };
    let mut settings = Settings::new(data_dir, std::path::Path::new(worktree));
    settings.database_url = database_url.clone();
    let services = Services::open(&settings, HolderKind::Process).await?;
    // The worktree as the server and the command line record it.
    let (_, worktree) = canonical_worktree(std::path::Path::new(worktree))?;
    let parent = parent
        .map(|id| rewind_core::model::SessionId::parse(id))
        .transpose()
        .context("a malformed parent id")?;
    let session = services
        .rewind
        .create_child_session(&worktree, Some(title.clone()), parent)
        .await
        .context("cannot create the session")?;
    println!("{}", session.id);
    Ok(())
}
