//! Dispatch of the commands other than `serve` and `demo`: each opens the services for its directory
//! (running recovery first; the commands that only show also open a read-only database) and hands over to
//! its module. Where the SQLite database does not exist yet, those that only show or need a recorded
//! session open nothing (`status` shows the empty state, the others say so), so nothing is created.

use std::path::Path;

use anyhow::Result;

use super::context::Context;
use super::history::DryRun;
use super::{Command, SnapshotCommand, context, exec, gc, history, show, snapshot};
use crate::config::Settings;

/// Runs one command in `directory`.
/// Refuses ids of the wrong form, and `snapshot restore` paths outside the worktree (of `directory`) or
/// through a file, before anything is opened: otherwise the data directory and database are made, and
/// recovery run, for a command that was going to be refused (review).
fn check_input(command: &Command, directory: &Path) -> Result<()> {
    let session = |text: &Option<String>| -> Result<()> {
        text.as_deref().map(context::parse_session).transpose()?;
        Ok(())
    };
    match command {
        Command::Undo { session: s, .. }
        | Command::Redo { session: s, .. }
        | Command::Unrevert { session: s, .. }
        | Command::Log { session: s }
        | Command::Diff { session: s } => session(s),
        Command::Revert {
            session: s,
            message,
            part,
            ..
        } => {
            session(s)?;
            history::parse_target(message, part.as_deref()).map(|_| ())
        }
        Command::Snapshot(SnapshotCommand::Diff { from, to }) => {
            snapshot::parse_snapshot(from)?;
            to.as_deref().map(snapshot::parse_snapshot).transpose()?;
            Ok(())
        }
        Command::Snapshot(SnapshotCommand::Restore { id, paths }) => {
            snapshot::parse_snapshot(id)?;
            // A directory that cannot be opened is refused by the context, as for every command.
            if let Ok((worktree, _)) = crate::worktree::canonical_worktree(directory) {
                for path in paths {
                    snapshot::worktree_relative(&worktree, path)?;
                }
            }
            Ok(())
        }
        _ => Ok(()),
    }
}

pub async fn run(
    command: Command,
    settings: &Settings,
    directory: &Path,
    json: bool,
) -> Result<()> {
    check_input(&command, directory)?;
    // A command that only shows, or needs a recorded session or snapshot, opens no database that does not
    // exist yet: it would create one (a mistyped `--data-dir` left an empty database behind; review).
    if let Some(file) = crate::config::sqlite_file_not_created(&settings.database_url) {
        match &command {
            Command::Status => {
                return show::status_without_database(settings, directory, json, &file);
            }
            Command::Log { .. }
            | Command::Diff { .. }
            | Command::Undo { .. }
            | Command::Redo { .. }
            | Command::Revert { .. }
            | Command::Unrevert { .. }
            | Command::Gc { .. }
            | Command::Snapshot(SnapshotCommand::Diff { .. } | SnapshotCommand::Restore { .. }) => {
                context::project_directory(settings, directory)?;
                anyhow::bail!(
                    "no rewind database at {}: nothing has been recorded with this data directory, so \
                     there is nothing to show, undo or collect (is --data-dir, REWIND_DATA_DIR or --database-url \
                     the one you recorded with? `rewind exec -- COMMAND…` records a session); nothing was \
                     created",
                    file.display()
                )
            }
            _ => {}
        }
    }
    let ctx = match command {
        // These only show: a database that cannot be written is still shown.
        Command::Log { .. }
        | Command::Diff { .. }
        | Command::Status
        | Command::Undo { dry_run: true, .. }
        | Command::Redo { dry_run: true, .. }
        | Command::Revert { dry_run: true, .. }
        | Command::Unrevert { dry_run: true, .. } => {
            Context::open_to_read(settings, directory, json).await?
        }
        _ => Context::open(settings, directory, json).await?,
    };
    match command {
        Command::Exec {
            new_session,
            command,
        } => exec::run(&ctx, new_session, &command).await,
        Command::Undo {
            session,
            dry_run: true,
        } => history::dry_run(&ctx, session.as_deref(), DryRun::Undo).await,
        Command::Redo {
            session,
            dry_run: true,
        } => history::dry_run(&ctx, session.as_deref(), DryRun::Redo).await,
        Command::Revert {
            session,
            message,
            part,
            dry_run: true,
        } => {
            let target = history::parse_target(&message, part.as_deref())?;
            history::dry_run(&ctx, session.as_deref(), DryRun::Revert(target)).await
        }
        Command::Unrevert {
            session,
            dry_run: true,
        } => history::dry_run(&ctx, session.as_deref(), DryRun::Unrevert).await,
        Command::Undo { session, .. } => history::undo(&ctx, session.as_deref()).await,
        Command::Redo { session, .. } => history::redo(&ctx, session.as_deref()).await,
        Command::Revert {
            session,
            message,
            part,
            ..
        } => history::revert(&ctx, session.as_deref(), &message, part.as_deref()).await,
        Command::Unrevert { session, .. } => history::unrevert(&ctx, session.as_deref()).await,
        Command::Log { session } => show::log(&ctx, session.as_deref()).await,
        Command::Diff { session } => show::diff(&ctx, session.as_deref()).await,
        Command::Status => show::status(&ctx).await,
        Command::Gc {
            older_than,
            grace_seconds,
        } => gc::run(&ctx, older_than, grace_seconds).await,
        Command::Snapshot(SnapshotCommand::Track) => snapshot::track(&ctx).await,
        Command::Snapshot(SnapshotCommand::Diff { from, to }) => {
            snapshot::diff(&ctx, &from, to.as_deref()).await
        }
        Command::Snapshot(SnapshotCommand::Restore { id, paths }) => {
            snapshot::restore(&ctx, &id, &paths).await
        }
        // Dispatched by `cli::run` before any context is opened; never sent here.
        Command::Serve(_) | Command::Demo { .. } => {
            anyhow::bail!("`serve` and `demo` are not commands on a context")
        }
    }
}
