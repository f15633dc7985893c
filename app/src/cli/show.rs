//! Reading a session: `log` (the timeline), `diff` (the last revert's changes) and `status` (the sessions
//! of this directory, the store's size on disk, the last gc).

use std::collections::BTreeSet;
use std::path::Path;

use anyhow::Result;
use rewind_core::SnapshotPort;
use rewind_core::model::{
    MessageWithParts, PartBody, PartId, RelPath, RevertDescriptor, Role, Session, SnapshotId,
    Warning,
};
use rewind_core::revert::RevertPoint;
use serde::Serialize;

use super::context::{Context, explain, step_is_abandoned};
use super::gc::LastGc;
use super::history::{FileRow, parts_text, print_warning};
use super::output::{
    bytes_text, colour, one_line, plural, print_diffs, print_json, restore_command, shown,
    time_text,
};
use crate::config::Settings;

/// Up to how many paths `status` writes out in the command that restores the last capture.
const CAPTURE_PATHS_SHOWN: usize = 10;

/// One step of an assistant message in `log --json`.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct StepRow {
    /// The snapshot at step start.
    start: Option<SnapshotId>,
    /// The snapshot at step end (absent when the end could not be snapshotted).
    end: Option<SnapshotId>,
    /// Why the step ended (`stop`, `error`, `aborted`), absent while it is open.
    reason: Option<String>,
    /// The files the step changed, with counts; `None` when the session's directory no longer exists (the
    /// counts come from the diff of its two snapshots, which lie in that directory's store).
    files: Option<Vec<FileRow>>,
    /// Whether the current revert hides it (one of its parts: its changes are undone).
    #[serde(skip)]
    hidden: bool,
}

/// One message in `log --json`.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct MessageRow {
    id: String,
    role: Role,
    /// Epoch milliseconds.
    created: u64,
    /// Its text parts.
    text: String,
    /// Whether the current revert hides it (wholly or from one of its parts).
    hidden: bool,
    /// Whether the current revert hides it whole (not only from one of its parts on).
    #[serde(skip)]
    hidden_whole: bool,
    /// Its text parts that the current revert does not hide (the text log's line).
    #[serde(skip)]
    visible_text: String,
    /// Whether the revert point is this message.
    revert_point: bool,
    /// Its parts, in order: `{id, type}` (targets for `rewind revert MESSAGE --part ID`).
    parts: Vec<PartRow>,
    steps: Vec<StepRow>,
}

/// A part in `log --json`.
#[derive(Serialize)]
struct PartRow {
    id: String,
    #[serde(rename = "type")]
    kind: String,
    /// Whether the current revert hides it.
    hidden: bool,
}

/// `log --json`.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct LogReport {
    #[serde(rename = "sessionID")]
    session_id: String,
    directory: String,
    title: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    revert: Option<RevertDescriptor>,
    messages: Vec<MessageRow>,
    warnings: Vec<Warning>,
}

/// How many of a step's files a line of the text `log` names; `--json` names them all.
const LOG_FILES_SHOWN: usize = 20;

/// `rewind log [--session S]`.
pub async fn log(ctx: &Context, session: Option<&str>) -> Result<()> {
    ctx.with_session(session, false, async |session| log_of(ctx, session).await)
        .await
}

/// `log` of `session`.
async fn log_of(ctx: &Context, session: Session) -> Result<()> {
    let rewind = &ctx.services.rewind;
    let messages = rewind
        .messages(&session.id)
        .await
        .map_err(|error| explain(error, "reading the messages"))?;
    let warnings = rewind
        .warnings(&session.id)
        .await
        .map_err(|error| explain(error, "reading the warnings"))?;
    let point = session.revert.as_ref().map(RevertPoint::of);
    let worktree = Path::new(&session.directory);
    // Only read: a session whose directory is gone is still shown, without its steps' files.
    let gone = !worktree.is_dir();
    if gone {
        eprintln!(
            "rewind: session {}'s directory {} no longer exists: its steps' files are not shown, and it \
             cannot be reverted until the directory is back (`rewind gc --older-than DAYS` deletes old \
             sessions)",
            session.id,
            shown(&session.directory)
        );
    }
    let mut rows = Vec::new();
    // Why the steps' snapshots could not be diffed, if they could not: said once, and `log` goes on.
    let mut undiffable: Option<String> = None;
    for message in &messages {
        let part_hidden = |part: &PartId| {
            point.as_ref().is_some_and(|point| {
                rewind_core::revert::is_hidden(point, &message.info.id, Some(part))
            })
        };
        let hidden_whole = point
            .as_ref()
            .is_some_and(|point| rewind_core::revert::is_hidden(point, &message.info.id, None));
        let hidden = hidden_whole || message.parts.iter().any(|p| part_hidden(&p.id));
        rows.push(MessageRow {
            id: message.info.id.to_string(),
            role: message.info.role,
            created: message.info.time.created,
            text: parts_text(&message.parts),
            hidden,
            hidden_whole,
            revert_point: point
                .as_ref()
                .is_some_and(|p| p.message_id == message.info.id),
            parts: message
                .parts
                .iter()
                .map(|p| PartRow {
                    id: p.id.to_string(),
                    kind: p.body.kind().to_owned(),
                    hidden: part_hidden(&p.id),
                })
                .collect(),
            visible_text: parts_text(message.parts.iter().filter(|p| !part_hidden(&p.id))),
            steps: steps(
                ctx,
                (worktree, !gone),
                (message, &part_hidden),
                &mut undiffable,
            )
            .await?,
        });
    }
    if let Some(why) = &undiffable {
        eprintln!(
            "rewind: the steps' files of session {} are not shown: their snapshots cannot be diffed ({why})",
            session.id
        );
    }
    if ctx.json {
        return print_json(&LogReport {
            session_id: session.id.to_string(),
            directory: session.directory.clone(),
            title: session.title.clone(),
            revert: session.revert.clone(),
            messages: rows,
            warnings,
        });
    }
    // `log` only reads: an open step whose owner is gone stays open until the next command aborts it.
    // Read before anything is printed (`Context::with_session` may read another session after a failure).
    let flag = ctx.session_flag(&session.id).await;
    let open_step = if step_is_abandoned(ctx, &session).await? {
        " [step open: its process is gone; the next exec, undo, redo, revert, unrevert or snapshot restore aborts it]"
    } else {
        " [step open]"
    };
    println!(
        "session {}  {}  ({})",
        session.id,
        one_line(&session.title),
        shown(&session.directory)
    );
    // Warnings are shown where they happened: after the last message created before them.
    let mut pending = warnings.iter().peekable();
    for (index, row) in rows.iter().enumerate() {
        if index == 0 {
            while let Some(warning) = pending.next_if(|w| w.time < row.created) {
                print_marked_warning(warning);
            }
        }
        let back = format!("`rewind redo{flag}` or `rewind unrevert{flag}` brings it back");
        if row.revert_point && row.hidden_whole {
            println!("── reverted from here ({back}) ──");
        }
        // A message reverted from one of its parts on stays, with its parts before that one.
        let mark = if row.hidden_whole { "~" } else { " " };
        let role = match row.role {
            Role::User => "user     ",
            Role::Assistant => "assistant",
        };
        let mut line = format!("{mark} {} {role}", row.id);
        // A message reverted from one of its parts on shows what stays of it; the rule after it says the
        // rest is reverted.
        let partly = row.hidden && !row.hidden_whole;
        let text = if partly { &row.visible_text } else { &row.text };
        if !text.is_empty() {
            line.push_str(&format!(" {}", one_line(text)));
        }
        for step in row.steps.iter().filter(|step| !(partly && step.hidden)) {
            let all = step.files.as_deref().unwrap_or_default();
            let mut files: Vec<String> = all
                .iter()
                .take(LOG_FILES_SHOWN)
                .map(|f| format!("{} {}", shown(&f.file), f.counts_text()))
                .collect();
            // A step of thousands of files stays one line that can be read (black-box: 20,000 files).
            files.extend(super::history::files_past(all.len(), LOG_FILES_SHOWN));
            // An open step has no end snapshot yet: what it changed is not known.
            line.push_str(&match (&step.reason, files.is_empty()) {
                (None, _) => open_step.to_owned(),
                // A snapshot of the step failed: what it changed was not recorded.
                (Some(reason), _) if step.start.is_none() || step.end.is_none() => {
                    format!(" [step {reason}: changes not recorded]")
                }
                (Some(reason), _) if step.files.is_none() && gone => {
                    format!(" [step {reason}: files not shown, the directory is gone]")
                }
                (Some(reason), _) if step.files.is_none() => {
                    format!(" [step {reason}: files not shown, its snapshots cannot be diffed]")
                }
                (Some(reason), true) => format!(" [step {reason}: no file changed]"),
                (Some(reason), false) => format!(" [step {reason}: {}]", files.join(", ")),
            });
        }
        println!("{line}");
        if row.revert_point
            && !row.hidden_whole
            && let Some(part) = row.parts.iter().find(|p| p.hidden)
        {
            println!(
                "── reverted from its part {} ({}) on ({back}) ──",
                part.id, part.kind
            );
        }
        let next = rows.get(index + 1).map(|r| r.created);
        while let Some(warning) = pending.next_if(|w| next.is_none_or(|next| w.time < next)) {
            print_marked_warning(warning);
        }
    }
    for warning in pending {
        print_marked_warning(warning);
    }
    Ok(())
}

fn print_marked_warning(warning: &Warning) {
    print!("  [{}] ", time_text(warning.time));
    print_warning(warning);
}

/// The steps of `message`. A step's files are those of its `patch` part (which follows its `step-finish`),
/// with their counts from the step's two snapshots: what `undo` takes back. A path the snapshots differ on
/// but the patch leaves out (a file the end snapshot skipped: over the size cap, or a special file now) is
/// not listed; the session's warning names it.
async fn steps(
    ctx: &Context,
    (worktree, present): (&Path, bool),
    (message, hidden): (&MessageWithParts, &dyn Fn(&PartId) -> bool),
    undiffable: &mut Option<String>,
) -> Result<Vec<StepRow>> {
    let mut steps: Vec<(StepRow, BTreeSet<String>)> = Vec::new();
    for part in &message.parts {
        match &part.body {
            PartBody::StepStart(start) => steps.push((
                StepRow {
                    start: start.snapshot.clone(),
                    end: None,
                    reason: None,
                    files: present.then(Vec::new),
                    hidden: hidden(&part.id),
                },
                BTreeSet::new(),
            )),
            PartBody::StepFinish(finish) => {
                if let Some((step, _)) = steps.last_mut() {
                    step.end = finish.snapshot.clone();
                    step.reason = Some(finish.reason.clone());
                    step.hidden |= hidden(&part.id);
                }
            }
            PartBody::Patch(patch) => {
                if let Some((step, _)) = steps.last_mut() {
                    // Its patch hidden, the step's changes are what the revert undid.
                    step.hidden |= hidden(&part.id);
                }
                if let (Some((_, patched)), Some(directory)) = (steps.last_mut(), worktree.to_str())
                {
                    patched.extend(patch.files.iter().filter_map(|file| {
                        RelPath::from_absolute(file, directory)
                            .ok()
                            .map(String::from)
                    }));
                }
            }
            _ => {}
        }
    }
    let mut rows = Vec::with_capacity(steps.len());
    for (mut step, patched) in steps {
        // A step whose patch names no file lists none: its snapshots are not diffed.
        // A diff that fails (the directory now resolves elsewhere, a snapshot is gone) leaves the step's
        // files unknown (`None`); `log` only reads, and shows the rest.
        if let (Some(from), Some(to), false, true) =
            (&step.start, &step.end, patched.is_empty(), present)
        {
            match ctx.services.snapshots.diff(worktree, from, to).await {
                Ok(diffs) => {
                    step.files = Some(
                        diffs
                            .iter()
                            .filter(|diff| patched.contains(&diff.file))
                            .map(FileRow::from)
                            .collect(),
                    )
                }
                Err(error) => {
                    step.files = None;
                    undiffable.get_or_insert_with(|| error.to_string());
                }
            }
        }
        rows.push(step);
    }
    Ok(rows)
}

/// `rewind diff [--session S]`: the changes the session's revert undid.
pub async fn diff(ctx: &Context, session: Option<&str>) -> Result<()> {
    ctx.with_session(session, false, async |session| diff_of(ctx, session).await)
        .await
}

/// `diff` of `session`.
async fn diff_of(ctx: &Context, session: Session) -> Result<()> {
    let diffs = ctx
        .services
        .rewind
        .session_diff(&session.id)
        .await
        .map_err(|error| explain(error, "reading the session diff"))?;
    // Said on stderr with `--json` too, whose stdout is the diff alone (review: a script could not tell
    // the last revert's diff from the current one's).
    if session.revert.is_none() {
        eprintln!(
            "rewind: session {} is not reverted{}",
            session.id,
            if diffs.is_empty() {
                ""
            } else {
                "; this is the diff of its last revert"
            }
        );
    }
    if ctx.json {
        return print_json(&diffs);
    }
    print_diffs(&diffs, colour());
    Ok(())
}

/// A session in `status --json`.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct SessionRow {
    id: String,
    title: String,
    created: u64,
    updated: u64,
    /// The revert point, while reverted.
    #[serde(rename = "revertMessageID", skip_serializing_if = "Option::is_none")]
    revert_message_id: Option<String>,
    /// Whether a step is open.
    busy: bool,
    /// Whether that step's owner is gone (the next operation on the session aborts the step).
    abandoned: bool,
}

/// `status --json`.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct StatusReport {
    directory: String,
    data_dir: String,
    store: StoreRow,
    sessions: Vec<SessionRow>,
    #[serde(skip_serializing_if = "Option::is_none")]
    last_gc: Option<LastGc>,
    /// The newest capture of this worktree (the state before a `snapshot restore`): the way back from a
    /// restore, also from one that was interrupted.
    #[serde(skip_serializing_if = "Option::is_none")]
    last_capture: Option<rewind_core::model::Capture>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct StoreRow {
    /// The store's directory (absent when this directory cannot have one, e.g. `/` or the home).
    #[serde(skip_serializing_if = "Option::is_none")]
    path: Option<String>,
    bytes: u64,
    /// Why there is no store path.
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
}

/// `rewind status` where the database does not exist yet (`file`, which the data directory's URL would
/// create): the directory and no session, with nothing opened or created. The store is keyed on the
/// database's identity (drawn when it is made), so there is none yet either.
pub fn status_without_database(
    settings: &Settings,
    directory: &Path,
    json: bool,
    file: &Path,
) -> Result<()> {
    let (_, directory) = super::context::project_directory(settings, directory)?;
    let why = format!(
        "no database yet at {} (nothing recorded with this data directory)",
        file.display()
    );
    if json {
        return print_json(&StatusReport {
            directory,
            data_dir: settings.data_dir.display().to_string(),
            store: StoreRow {
                path: None,
                bytes: 0,
                error: Some(why),
            },
            sessions: Vec::new(),
            last_gc: None,
            last_capture: None,
        });
    }
    println!("directory  {}", shown(&directory));
    println!("store      none: {why}");
    println!("no session yet (`rewind exec -- COMMAND…` records one)");
    Ok(())
}

/// `rewind status`.
pub async fn status(ctx: &Context) -> Result<()> {
    let sessions = ctx
        .services
        .rewind
        .sessions(Some(&ctx.directory))
        .await
        .map_err(|error| explain(error, "listing the sessions"))?;
    let store = match ctx.services.snapshots.store_dir(&ctx.path) {
        Ok(dir) => StoreRow {
            bytes: rewind_git::disk_usage(&dir),
            path: Some(dir.display().to_string()),
            error: None,
        },
        Err(error) => StoreRow {
            path: None,
            bytes: 0,
            error: Some(error.to_string()),
        },
    };
    let last_gc = LastGc::read(ctx);
    let last_capture = ctx
        .services
        .rewind
        .captures(Some(&ctx.directory))
        .await
        .map_err(|error| explain(error, "listing the captures"))?
        .pop();
    let mut rows = Vec::new();
    for s in &sessions {
        rows.push(SessionRow {
            id: s.id.to_string(),
            title: s.title.clone(),
            created: s.time.created,
            updated: s.time.updated,
            revert_message_id: s.revert.as_ref().map(|r| r.message_id.to_string()),
            busy: s.step.is_some(),
            abandoned: step_is_abandoned(ctx, s).await?,
        });
    }
    if ctx.json {
        return print_json(&StatusReport {
            directory: ctx.directory.clone(),
            data_dir: ctx.services.settings.data_dir.display().to_string(),
            store,
            sessions: rows,
            last_gc,
            last_capture,
        });
    }
    println!("directory  {}", shown(&ctx.directory));
    match (&store.path, &store.error) {
        (Some(path), _) => println!("store      {path} ({})", bytes_text(store.bytes)),
        (None, error) => println!("store      none: {}", error.as_deref().unwrap_or("")),
    }
    match &last_gc {
        Some(gc) => println!(
            "last gc    {} (freed {}, {} object{}, {} session{} deleted)",
            time_text(gc.time),
            bytes_text(gc.bytes_freed),
            gc.objects_removed,
            plural(gc.objects_removed),
            gc.sessions_deleted,
            plural(gc.sessions_deleted)
        ),
        None => println!("last gc    never (`rewind gc` collects what nothing refers to)"),
    }
    if let Some(capture) = &last_capture {
        // The command names the capture's paths when they are few; a recovery's can be thousands.
        let put_back = if capture.paths.len() <= CAPTURE_PATHS_SHOWN {
            format!(
                "`{}` puts that state back",
                one_line(&restore_command(
                    capture.snapshot.as_str(),
                    capture.paths.iter().map(String::as_str)
                ))
            )
        } else {
            format!(
                "`rewind snapshot restore {} PATH…` puts a file back; `rewind status --json` lists its {} paths",
                capture.snapshot,
                capture.paths.len()
            )
        };
        println!(
            "capture    {} {} ({}; {put_back})",
            capture.snapshot,
            time_text(capture.time),
            one_line(&capture.message),
        );
    }
    if rows.is_empty() {
        println!("no session yet (`rewind exec -- COMMAND…` records one)");
    }
    for row in &rows {
        let state = match (&row.revert_message_id, row.busy) {
            (_, true) if row.abandoned => {
                "a step whose owner is gone is open (the next exec, undo, redo, revert, unrevert or snapshot restore aborts it)".to_owned()
            }
            (_, true) => "busy: a step is open".to_owned(),
            (Some(message), false) => format!("reverted to {message}"),
            (None, false) => "idle".to_owned(),
        };
        println!(
            "{}  {}  updated {}  {state}",
            row.id,
            one_line(&row.title),
            time_text(row.updated)
        );
    }
    Ok(())
}
