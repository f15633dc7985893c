//! `rewind gc [--older-than DAYS]`: deletes old sessions, then collects the objects nothing refers to, and
//! remembers when it ran (for `rewind status`) in the data directory, per database.

use std::time::Duration;

use anyhow::Result;
use rewind_core::HostPort;
use rewind_core::service::{GcRequest, GcSummary};
use serde::{Deserialize, Serialize};

use super::context::{Context, explain};
use super::output::{bytes_text, plural, print_json, shown, with_progress};

const DAY_MS: u64 = 24 * 60 * 60 * 1000;
/// What the last gc did, kept in `<data dir>/last-gc-<database>.json`: one file per database, named after
/// the identity its snapshot stores are keyed on (black-box: a gc of another database given with
/// `--database-url` showed as the default database's last gc).
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LastGc {
    /// When it ran, epoch milliseconds.
    pub time: u64,
    /// Objects removed.
    pub objects_removed: u64,
    /// Bytes freed.
    pub bytes_freed: u64,
    /// Sessions deleted.
    pub sessions_deleted: u64,
}

impl LastGc {
    /// The record of the last gc of the context's database, if any.
    pub fn read(ctx: &Context) -> Option<LastGc> {
        // Else the record a rewind before the database's identity changed kept (review: an upgraded data
        // directory showed "never").
        let former = ctx
            .services
            .snapshots
            .former_database_keys()
            .into_iter()
            .map(|key| data_dir_file(ctx, &key));
        let text = std::iter::once(record_path(ctx))
            .chain(former)
            .find_map(|path| std::fs::read_to_string(path).ok())?;
        serde_json::from_str(&text).ok()
    }

    fn write(&self, ctx: &Context) -> Result<()> {
        let path = record_path(ctx);
        // Named for this process, so two gcs at once do not write into each other's file.
        let temporary = path.with_extension(format!("json.tmp-{}", std::process::id()));
        std::fs::write(&temporary, serde_json::to_vec_pretty(self)?)?;
        std::fs::rename(&temporary, &path).inspect_err(|_| {
            let _ = std::fs::remove_file(&temporary);
        })?;
        Ok(())
    }
}

/// `<data dir>/last-gc-<the database's key>.json`.
fn record_path(ctx: &Context) -> std::path::PathBuf {
    data_dir_file(ctx, &ctx.services.snapshots.database_key())
}

/// `<data dir>/last-gc-<key>.json`.
fn data_dir_file(ctx: &Context, key: &str) -> std::path::PathBuf {
    ctx.services
        .settings
        .data_dir
        .join(format!("last-gc-{key}.json"))
}

/// `gc --json`: the service's summary plus the totals.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct GcReport {
    #[serde(flatten)]
    summary: GcSummary,
    objects_removed: u64,
    bytes_freed: u64,
}

/// `rewind gc`.
pub async fn run(ctx: &Context, older_than_days: Option<u64>, grace_seconds: u64) -> Result<()> {
    let rewind = &ctx.services.rewind;
    // This directory's store is collected too when it exists, even without a session (a store that only
    // `snapshot track` used).
    let mut directories = Vec::new();
    if let Ok(store) = ctx.services.snapshots.store_dir(&ctx.path)
        && store.exists()
    {
        directories.push(ctx.directory.clone());
    }
    let summary = with_progress(
        "collecting",
        rewind.gc(GcRequest {
            older_than_ms: older_than_days.map(|days| days.saturating_mul(DAY_MS)),
            grace: Duration::from_secs(grace_seconds),
            directories,
        }),
    )
    .await
    .map_err(|error| explain(error, "collecting garbage"))?;
    let record = LastGc {
        time: ctx.services.host.now_ms(),
        objects_removed: summary.objects_removed(),
        bytes_freed: summary.bytes_freed(),
        sessions_deleted: summary.sessions_deleted.len() as u64,
    };
    if let Err(error) = record.write(ctx) {
        eprintln!(
            "rewind: warning: cannot record the time of this gc: {}",
            crate::report::chain_anyhow(&error)
        );
    }
    let failed = failed_stores(&summary);
    if ctx.json {
        print_json(&GcReport {
            objects_removed: summary.objects_removed(),
            bytes_freed: summary.bytes_freed(),
            summary,
        })?;
        return fail_if_any(failed);
    }
    println!(
        "freed {} ({} object{}) in {} store{}; deleted {} session{} and {} capture{}",
        bytes_text(summary.bytes_freed()),
        summary.objects_removed(),
        plural(summary.objects_removed()),
        summary.worktrees.len(),
        plural(summary.worktrees.len() as u64),
        summary.sessions_deleted.len(),
        plural(summary.sessions_deleted.len() as u64),
        summary.captures_deleted,
        plural(summary.captures_deleted as u64),
    );
    if summary.events_deleted > 0 {
        println!(
            "  removed {} old event{} from the event outbox (the newest are kept)",
            summary.events_deleted,
            plural(summary.events_deleted)
        );
    }
    if summary.database_bytes_freed > 0 {
        println!(
            "  the database gave {} of deleted rows back to the file system",
            bytes_text(summary.database_bytes_freed)
        );
    }
    for id in &summary.sessions_deleted {
        println!("  deleted session {id}");
    }
    for skipped in &summary.sessions_skipped {
        println!("! kept session {}: {}", skipped.session_id, skipped.reason);
    }
    for worktree in &summary.worktrees {
        match (&worktree.report, &worktree.error) {
            (Some(report), _) if worktree.store_removed => println!(
                "  {}: gone, and no session names it: removed its store ({} object{}, {})",
                shown(&worktree.directory),
                report.objects_removed,
                plural(report.objects_removed),
                bytes_text(report.bytes_freed),
            ),
            (None, Some(error)) if worktree.store_removed => println!(
                "! {}: gone, and no session names it, but its store could not be removed: {error}",
                shown(&worktree.directory)
            ),
            (Some(report), _) => println!(
                "  {}: removed {} object{} ({}), kept {} referenced snapshot{}",
                shown(&worktree.directory),
                report.objects_removed,
                plural(report.objects_removed),
                bytes_text(report.bytes_freed),
                worktree.kept_snapshots,
                plural(worktree.kept_snapshots)
            ),
            // Left by design, no failure (CLI review L8: it read as one).
            (None, Some(error)) if worktree.left => println!(
                "  {}: left for a later gc: {error}",
                shown(&worktree.directory)
            ),
            (None, Some(error)) => {
                println!("! {}: not collected: {error}", shown(&worktree.directory))
            }
            (None, None) => {}
        }
    }
    fail_if_any(failed)
}

/// How many stores the gc could not collect or remove: it then fails (exit 1, after its report), so a
/// script sees it. A store left for a later gc by design (an operation held it, or its worktree is gone
/// while the database names it: `WorktreeGc::left`) is no failure.
fn failed_stores(summary: &rewind_core::service::GcSummary) -> usize {
    summary
        .worktrees
        .iter()
        .filter(|worktree| worktree.error.is_some() && !worktree.left)
        .count()
}

/// Exit 1, saying so on stderr, after a report with `failed` stores it could not collect.
fn fail_if_any(failed: usize) -> Result<()> {
    if failed > 0 {
        eprintln!(
            "error: {failed} snapshot store{} could not be collected; the report says why",
            plural(failed as u64)
        );
        return Err(super::Exit(1).into());
    }
    Ok(())
}
