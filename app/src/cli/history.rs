//! Moving through a session's history: `undo` and `redo` (OpenCode's TUI `/undo` and `/redo`, reference
//! section 3.6), and the explicit `revert MESSAGE [--part P]` and `unrevert`.

use std::collections::BTreeSet;

use anyhow::{Result, anyhow, bail};
use rewind_core::model::{
    DiffSummary, FileActionKind, FileDiff, MessageId, MessageWithParts, Part, PartBody, PartId,
    RelPath, RevertDescriptor, Role, Session, SessionId, Warning,
};
use rewind_core::{HistorySeen, RevertTarget};
use serde::Serialize;

use super::context::{Context, explain};
use super::output::{one_line, plural, print_file_summary, print_json, shown, with_progress};

/// What `undo`, `redo`, `revert` and `unrevert` print with `--json`.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct MoveReport {
    #[serde(rename = "sessionID")]
    session_id: String,
    /// `revert` or `unrevert`: what was done.
    action: &'static str,
    /// The descriptor after the operation (absent when no longer reverted).
    #[serde(skip_serializing_if = "Option::is_none")]
    revert: Option<RevertDescriptor>,
    /// The text of the user message reverted to, when there is one.
    #[serde(skip_serializing_if = "Option::is_none")]
    prompt: Option<String>,
    /// How many messages are now hidden.
    hidden_messages: usize,
    /// The sums of the revert's session diff.
    #[serde(skip_serializing_if = "Option::is_none")]
    summary: Option<DiffSummary>,
    /// The files the revert undid, with counts (no patches: `rewind diff` shows them).
    files: Vec<FileRow>,
    /// Warnings this operation raised.
    warnings: Vec<Warning>,
}

/// A file of a diff, without its patch.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub struct FileRow {
    /// The worktree-relative path.
    pub file: String,
    /// Added, deleted or modified.
    pub status: rewind_core::model::FileStatus,
    /// Lines added.
    pub additions: u64,
    /// Lines removed.
    pub deletions: u64,
    /// No line diff: a binary file or one over the size cap (its counts are 0/0, as git's `--numstat`
    /// has `-`).
    pub binary: bool,
}

impl From<&FileDiff> for FileRow {
    fn from(diff: &FileDiff) -> Self {
        FileRow {
            file: diff.file.clone(),
            status: diff.status,
            additions: diff.additions,
            deletions: diff.deletions,
            // The port's rule: a row's patch is empty for a binary file or one over the size cap only.
            binary: diff.patch.is_empty(),
        }
    }
}

/// What an unrevert put back: the rows of the revert it undid (`undone`, its session diff read before),
/// but for the files it left as they were (`counts.kept`; its warning names them).
pub fn put_back(undone: Vec<FileDiff>, counts: &rewind_core::service::FileCounts) -> Vec<FileDiff> {
    let left: BTreeSet<&str> = counts.kept.iter().map(RelPath::as_str).collect();
    undone
        .into_iter()
        .filter(|diff| !left.contains(diff.file.as_str()))
        .collect()
}

impl FileRow {
    /// The counts as text: `+A -D`; `binary` for a file without a line diff; `mode changed` for a file
    /// whose content is the same and mode is not (a text row of a file there before and after, no line
    /// added or removed), where git's `--stat` also shows no line.
    pub fn counts_text(&self) -> String {
        match (self.binary, self.status, self.additions, self.deletions) {
            (true, _, _, _) => "binary".to_owned(),
            (false, rewind_core::model::FileStatus::Modified, 0, 0) => "mode changed".to_owned(),
            (false, _, additions, deletions) => format!("+{additions} -{deletions}"),
        }
    }
}

/// How many times `undo` and `redo` choose again when the session's history changed between their choice
/// and their operation (another command moved it meanwhile): past that, they give up with the error.
const CHOICES: usize = 8;

/// `rewind undo [--session S]`: revert to the last user message before the current revert point (or the
/// last user message when not reverted).
///
/// The target is chosen from the session as read here, and the revert goes on only while the session
/// still shows that history once it holds the session (`HistorySeen`); when another command moved it
/// meanwhile, the choice is made again on what it shows now. So two `undo`s run at once undo two turns.
pub async fn undo(ctx: &Context, session: Option<&str>) -> Result<()> {
    let session = ctx.session_to_change(session).await?;
    let id = session.id.clone();
    said_if_deleted_meanwhile(ctx, &id, "undo", undo_chosen(ctx, session).await).await
}

/// `undo` of the session it chose.
async fn undo_chosen(ctx: &Context, session: Session) -> Result<()> {
    let (mut session, aborted) = abort_open_step(ctx, session).await?;
    let mut choice = 0;
    loop {
        choice += 1;
        let messages = messages(ctx, &session).await?;
        let target = undo_target(ctx, &session, &messages).await?;
        let seen = HistorySeen::of(&session, &messages);
        let moved = revert_to(
            ctx,
            &session,
            (target, None),
            &messages,
            Some(&seen),
            &aborted,
        )
        .await?;
        match again(ctx, &session, moved, choice).await? {
            Some(now) => session = now,
            None => return Ok(()),
        }
    }
}

/// `rewind redo [--session S]`: revert to the first user message after the revert point, or unrevert when
/// there is none. Chosen as `undo` chooses, again when the history changed meanwhile.
pub async fn redo(ctx: &Context, session: Option<&str>) -> Result<()> {
    let session = ctx.session_to_change(session).await?;
    let id = session.id.clone();
    said_if_deleted_meanwhile(ctx, &id, "redo", redo_chosen(ctx, session).await).await
}

/// `redo` of the session it chose.
async fn redo_chosen(ctx: &Context, session: Session) -> Result<()> {
    let (mut session, aborted) = abort_open_step(ctx, session).await?;
    let mut choice = 0;
    loop {
        choice += 1;
        if session.revert.is_none() {
            session = reverted_or_idle(ctx, &session).await?;
        }
        let Some(revert) = session.revert.clone() else {
            return Err(nothing_to_redo(ctx, &session).await);
        };
        let messages = messages(ctx, &session).await?;
        let seen = HistorySeen::of(&session, &messages);
        let moved = match redo_target(&revert, &messages) {
            None => unrevert_session(ctx, &session, Some(&seen), &aborted).await?,
            Some(target) => {
                match revert_to(
                    ctx,
                    &session,
                    (target.clone(), None),
                    &messages,
                    Some(&seen),
                    &aborted,
                )
                .await
                {
                    Ok(moved) => moved,
                    // Another command may have made the undo permanent meanwhile (a new turn runs
                    // cleanup, which deletes the undone turns): the turn this redo aimed at is gone, and
                    // "message not found" would not say why. Only then; any other failure is reported
                    // as it is.
                    Err(error) => {
                        // The session itself deleted meanwhile is said by `redo` (gc fuzz: it was said to
                        // be a turn made permanent).
                        if ctx.is_deleted(&session.id).await {
                            return Err(error);
                        }
                        let gone = matches!(
                            ctx.services.rewind.message(&session.id, &target).await,
                            Err(rewind_core::Error::NotFound(_))
                        );
                        if gone {
                            bail!(
                                "nothing to redo in session {}: the turn to redo ({target}) is gone, made \
                                 permanent by another command while this redo ran (a new turn ends an \
                                 undo); `rewind log` shows where it stands",
                                session.id
                            );
                        }
                        return Err(error);
                    }
                }
            }
        };
        match again(ctx, &session, moved, choice).await? {
            Some(now) => session = now,
            None => return Ok(()),
        }
    }
}

/// What an `undo` or `redo` whose session was deleted while it ran says (`rewind gc --older-than`,
/// `DELETE /session`), before the failure it met (a bare "Session not found: ses_…" from whichever read or
/// write met the deletion first, or a turn taken for one made permanent: gc fuzz), which is kept after it:
/// a failure of another cause at the same time is not hidden (review). `done` is its outcome.
async fn said_if_deleted_meanwhile(
    ctx: &Context,
    session: &SessionId,
    verb: &str,
    done: Result<()>,
) -> Result<()> {
    match done {
        Err(error) if ctx.is_deleted(session).await => Err(error.context(format!(
            "nothing to {verb}: session {session} was deleted while this {verb} ran (by `rewind gc \
             --older-than` or another client); `rewind log` shows the sessions left"
        ))),
        done => done,
    }
}

/// The user message `undo` reverts `session` to, as `messages` show it: the last one before the revert
/// point, or the last one when the session is not reverted; refused when there is none.
async fn undo_target(
    ctx: &Context,
    session: &Session,
    messages: &[MessageWithParts],
) -> Result<MessageId> {
    let users = user_messages(messages);
    let target = match &session.revert {
        Some(revert) => users.iter().rev().find(|m| m.info.id < revert.message_id),
        None => users.last(),
    };
    if let Some(target) = target {
        return Ok(target.info.id.clone());
    }
    let flag = ctx.session_flag(&session.id).await;
    bail!(
        "nothing to undo in session {}: {}",
        session.id,
        if users.is_empty() {
            "it has no user message yet".to_owned()
        } else {
            format!("every turn is already undone (`rewind redo{flag}` puts them back)")
        }
    )
}

/// The user message `redo` reverts to from the session's `revert`: the first one after the revert point;
/// `None` when there is none, and `redo` unreverts.
fn redo_target(revert: &RevertDescriptor, messages: &[MessageWithParts]) -> Option<MessageId> {
    user_messages(messages)
        .into_iter()
        .find(|m| m.info.id > revert.message_id)
        .map(|m| m.info.id.clone())
}

/// The refusal of `redo` on a session that is not reverted.
async fn nothing_to_redo(ctx: &Context, session: &Session) -> anyhow::Error {
    let flag = ctx.session_flag(&session.id).await;
    anyhow!(
        "nothing to redo in session {}: it is not reverted (`rewind undo{flag}` undoes the last turn)",
        session.id
    )
}

/// The refusal of `unrevert` on a session that is not reverted.
fn nothing_to_unrevert(session: &Session) -> anyhow::Error {
    anyhow!(
        "session {} is not reverted; nothing to unrevert",
        session.id
    )
}

/// Which command `--dry-run` stands for.
#[derive(Clone)]
pub enum DryRun {
    Undo,
    Redo,
    /// `revert MESSAGE [--part P]`, its target parsed.
    Revert((MessageId, Option<PartId>)),
    Unrevert,
}

/// What `--dry-run` prints with `--json`.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct DryRunReport {
    #[serde(rename = "sessionID")]
    session_id: String,
    /// `revert` or `unrevert`: what the command would do.
    action: &'static str,
    /// The message (and part) a revert would go back to: the point it would store, as `revert`'s
    /// `revert.messageID` says it.
    #[serde(rename = "messageID", skip_serializing_if = "Option::is_none")]
    message_id: Option<MessageId>,
    #[serde(rename = "partID", skip_serializing_if = "Option::is_none")]
    part_id: Option<PartId>,
    /// What it would do to each file: `{file, action: write|delete|keep, reason?}`, absolute paths.
    files: Vec<rewind_core::service::PreviewFile>,
    /// Whether a step is open: the command would end it first, and what the step changed so far (not
    /// recorded yet) is not in `files`.
    step_open: bool,
}

/// `undo`, `redo`, `revert` or `unrevert` with `--dry-run`: the target chosen as the command chooses it,
/// then what it would do to each file (the revert's preview, SPEC 9's `revert/preview`; an unrevert's
/// files go back to the pre-revert snapshot), changing nothing: no step is aborted, nothing is written.
/// Refused as the command would be when there is nothing to undo or redo.
pub async fn dry_run(ctx: &Context, session: Option<&str>, command: DryRun) -> Result<()> {
    // A message named with `revert` belongs to the session chosen: not tried in another one.
    if let DryRun::Revert(_) = command {
        let session = ctx.session_to_change(session).await?;
        return dry_run_of(ctx, session, command).await;
    }
    ctx.with_session(session, true, async |session| {
        dry_run_of(ctx, session, command.clone()).await
    })
    .await
}

/// `dry_run` of `session`.
async fn dry_run_of(ctx: &Context, session: Session, command: DryRun) -> Result<()> {
    let rewind = &ctx.services.rewind;
    let messages = messages(ctx, &session).await?;
    let target = match command {
        DryRun::Undo => Some((undo_target(ctx, &session, &messages).await?, None)),
        DryRun::Revert(target) => Some(target),
        DryRun::Redo => match &session.revert {
            Some(revert) => redo_target(revert, &messages).map(|target| (target, None)),
            None => return Err(nothing_to_redo(ctx, &session).await),
        },
        DryRun::Unrevert if session.revert.is_none() => return Err(nothing_to_unrevert(&session)),
        DryRun::Unrevert => None,
    };
    let (files, message_id, part_id) = match target {
        Some((message_id, part_id)) => {
            let target = RevertTarget {
                message_id: message_id.clone(),
                part_id: part_id.clone(),
            };
            // It snapshots the worktree and reads trees: long work on a big one (SPEC 11's progress).
            let preview = with_progress("planning the revert", rewind.preview(&session.id, target))
                .await
                .map_err(|error| explain(error, "planning the revert"))?;
            // The point the revert would store (SPEC 5 moves one that is not a turn's start back to it).
            let point = preview.descriptor;
            (preview.files, Some(point.message_id), point.part_id)
        }
        None => (
            with_progress(
                "planning the unrevert",
                rewind.unrevert_preview(&session.id),
            )
            .await
            .map_err(|error| explain(error, "planning the unrevert"))?,
            None,
            None,
        ),
    };
    let action = if message_id.is_some() {
        "revert"
    } else {
        "unrevert"
    };
    let step_open = session.step.is_some();
    if ctx.json {
        return print_json(&DryRunReport {
            session_id: session.id.to_string(),
            action,
            message_id,
            part_id,
            files,
            step_open,
        });
    }
    match &message_id {
        Some(message) => {
            let text = messages
                .iter()
                .find(|m| &m.info.id == message)
                .map(|m| parts_text(&m.parts))
                .unwrap_or_default();
            println!(
                "Would revert session {} to {message} ({}){}:",
                session.id,
                one_line(&text),
                part_id
                    .as_ref()
                    .map(|part| format!(" from its part {part} on"))
                    .unwrap_or_default()
            );
        }
        None => println!("Would unrevert session {}:", session.id),
    }
    if files.is_empty() {
        println!("  no file would change");
    }
    let prefix = format!("{}/", session.directory.trim_end_matches('/'));
    for file in &files {
        let path = file.file.strip_prefix(&prefix).unwrap_or(&file.file);
        let action = match file.action {
            FileActionKind::Write => "write ",
            FileActionKind::Delete => "delete",
            FileActionKind::Keep => "keep  ",
        };
        match &file.reason {
            Some(reason) => println!("  {action}  {}  ({reason})", shown(path)),
            None => println!("  {action}  {}", shown(path)),
        }
    }
    if step_open {
        println!(
            "A step is open: the command would end it first, and what it changed so far (not recorded yet) \
             is not listed."
        );
    }
    println!("Nothing was changed (--dry-run).");
    Ok(())
}

/// How an operation chosen from a history the session showed ended, when it did not fail otherwise.
enum Moved {
    /// Done and reported.
    Done,
    /// Refused, nothing changed: the session's history is no longer the one the choice was made from.
    Stale(rewind_core::Error),
    /// Refused, nothing changed: another operation (an `undo` run at the same moment, say) holds the
    /// session or its worktree; once it is done, the history will have moved.
    Busy(rewind_core::Error),
}

/// Whether `error` is the refusal of an operation held off by another operation's lease (a revert,
/// unrevert or cleanup running), not by an open step, which may run for long: worth waiting for.
fn held_by_an_operation(error: &rewind_core::Error) -> bool {
    matches!(error, rewind_core::Error::Busy { message, .. }
        if message.contains("(held by ") && !message.contains("a step is open"))
}

/// After the `choice`-th choice of `undo` or `redo` ended as `moved`: none when it is done, the session as
/// stored now when it is to choose again, the error when it has chosen `CHOICES` times.
async fn again(
    ctx: &Context,
    session: &Session,
    moved: Moved,
    choice: usize,
) -> Result<Option<Session>> {
    match moved {
        Moved::Done => Ok(None),
        Moved::Stale(_) if choice < CHOICES => read_again(ctx, session).await.map(Some),
        Moved::Busy(_) if choice < CHOICES => {
            // Another operation is running: waited for, 0.1 s, doubling up to 1.6 s, about 6 s in all
            // (review: of two `undo`s run at once, one failed as busy instead of undoing the turn before).
            let wait = 100u64 << (choice - 1).min(4);
            tokio::time::sleep(std::time::Duration::from_millis(wait)).await;
            read_again(ctx, session).await.map(Some)
        }
        Moved::Stale(error) | Moved::Busy(error) => Err(explain(error, "reverting")),
    }
}

/// A session read as not reverted, before `redo` or `unrevert` says there is nothing to do: a revert that
/// is running has not stored itself yet (busy, not "nothing to do"), and one stored since the session was
/// read is found by reading it again.
async fn reverted_or_idle(ctx: &Context, session: &Session) -> Result<Session> {
    ctx.services
        .rewind
        .refuse_if_operating(session)
        .await
        .map_err(|error| explain(error, "checking the session"))?;
    read_again(ctx, session).await
}

/// The session as it is stored now.
async fn read_again(ctx: &Context, session: &Session) -> Result<Session> {
    ctx.services
        .rewind
        .session(&session.id)
        .await
        .map_err(|error| explain(error, "reading the session"))
}

/// `rewind revert`'s message and part ids, or why they are none.
pub fn parse_target(message: &str, part: Option<&str>) -> Result<(MessageId, Option<PartId>)> {
    let message = MessageId::parse(message)
        .map_err(|error| anyhow!("{error}; `rewind log` shows the message ids (msg_…)"))?;
    let part = part
        .map(PartId::parse)
        .transpose()
        .map_err(|error| anyhow!("{error}; `rewind log --json` shows the part ids (prt_…)"))?;
    Ok((message, part))
}

/// `rewind revert [--session S] MESSAGE [--part P]`.
pub async fn revert(
    ctx: &Context,
    session: Option<&str>,
    message: &str,
    part: Option<&str>,
) -> Result<()> {
    let (message, part) = parse_target(message, part)?;
    let session = ctx.session_to_change(session).await?;
    let messages = messages(ctx, &session).await?;
    revert_to(ctx, &session, (message, part), &messages, None, &[])
        .await
        .map(|_| ())
}

/// `rewind unrevert [--session S]`.
pub async fn unrevert(ctx: &Context, session: Option<&str>) -> Result<()> {
    let mut session = ctx.session_to_change(session).await?;
    if session.revert.is_none() {
        session = reverted_or_idle(ctx, &session).await?;
    }
    if session.revert.is_none() {
        return Err(nothing_to_unrevert(&session));
    }
    unrevert_session(ctx, &session, None, &[]).await.map(|_| ())
}

/// OpenCode's TUI aborts a busy session before `/undo`: an abandoned step is aborted; a step owned by a
/// live `rewind exec` is not taken from it (the error names it). Returns the session after it and the
/// warnings the abort raised (an abandoned step's says its end snapshot is the abort's, and names the
/// files), which the operation shows with its own, as `exec` shows them (review: `undo` said nothing).
async fn abort_open_step(ctx: &Context, session: Session) -> Result<(Session, Vec<Warning>)> {
    if session.step.is_none() {
        return Ok((session, Vec::new()));
    }
    let before = warning_count(ctx, &session).await?;
    let session = ctx
        .services
        .rewind
        .abort(&session.id)
        .await
        .map_err(|error| explain(error, "aborting the open step"))?;
    let raised = warnings_since(ctx, &session, before).await?;
    Ok((session, raised))
}

async fn messages(ctx: &Context, session: &Session) -> Result<Vec<MessageWithParts>> {
    ctx.services
        .rewind
        .messages(&session.id)
        .await
        .map_err(|error| explain(error, "reading the messages"))
}

fn user_messages(messages: &[MessageWithParts]) -> Vec<&MessageWithParts> {
    messages
        .iter()
        .filter(|m| m.info.role == Role::User)
        .collect()
}

/// The text of `parts`' text parts (a message's, or those of it a revert leaves), joined.
pub fn parts_text<'a>(parts: impl IntoIterator<Item = &'a Part>) -> String {
    parts
        .into_iter()
        .filter_map(|part| match &part.body {
            PartBody::Text(text) => Some(text.text.as_str()),
            _ => None,
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Reverts to `message` (`part`) and reports it; with `seen`, only while the session shows that history
/// (`Moved::Stale` when it no longer does).
/// `earlier`: warnings raised before it that it reports as its own (`abort_open_step`'s).
async fn revert_to(
    ctx: &Context,
    session: &Session,
    (message, part): (MessageId, Option<PartId>),
    messages: &[MessageWithParts],
    seen: Option<&HistorySeen>,
    earlier: &[Warning],
) -> Result<Moved> {
    let rewind = &ctx.services.rewind;
    let before = warning_count(ctx, session).await?;
    let reverted = with_progress(
        "reverting files",
        rewind.revert_as_seen(
            &session.id,
            RevertTarget {
                message_id: message,
                part_id: part,
            },
            seen,
        ),
    )
    .await;
    let reverted = match reverted {
        Ok((reverted, _)) => reverted,
        Err(error @ rewind_core::Error::Stale { .. }) if seen.is_some() => {
            return Ok(Moved::Stale(error));
        }
        Err(error) if seen.is_some() && held_by_an_operation(&error) => {
            return Ok(Moved::Busy(error));
        }
        Err(error) => return Err(explain(error, "reverting")),
    };
    report(ctx, &reverted, "revert", (earlier, before), messages, &[]).await?;
    Ok(Moved::Done)
}

/// Unreverts the session and reports it; with `seen`, only while the session shows that history
/// (`Moved::Stale` when it no longer does).
async fn unrevert_session(
    ctx: &Context,
    session: &Session,
    seen: Option<&HistorySeen>,
    earlier: &[Warning],
) -> Result<Moved> {
    let before = warning_count(ctx, session).await?;
    // The turns' changes the revert undid are those the unrevert puts back: read before it, since the diff
    // goes with the revert (black-box: `redo` named no file, and its `files` were always empty).
    // Only shown: a diff that cannot be read does not keep the files from being put back.
    let undone = match session.revert {
        Some(_) => ctx
            .services
            .rewind
            .session_diff(&session.id)
            .await
            .unwrap_or_else(|error| {
                eprintln!(
                    "rewind: warning: the files the revert changed cannot be listed: {}",
                    crate::report::chain_anyhow(&explain(error, "reading the session diff"))
                );
                Vec::new()
            }),
        None => Vec::new(),
    };
    let unreverted = with_progress(
        "putting files back",
        ctx.services.rewind.unrevert_as_seen(&session.id, seen),
    )
    .await;
    let (done, counts) = match unreverted {
        Ok(unreverted) => unreverted,
        Err(error @ rewind_core::Error::Stale { .. }) if seen.is_some() => {
            return Ok(Moved::Stale(error));
        }
        Err(error) if seen.is_some() && held_by_an_operation(&error) => {
            return Ok(Moved::Busy(error));
        }
        Err(error) => return Err(explain(error, "unreverting")),
    };
    let put_back = put_back(undone, &counts);
    report(ctx, &done, "unrevert", (earlier, before), &[], &put_back).await?;
    Ok(Moved::Done)
}

/// The session's warnings after the first `before` (those an operation raised, when `before` is
/// `warning_count` from before it).
pub(super) async fn warnings_since(
    ctx: &Context,
    session: &Session,
    before: usize,
) -> Result<Vec<Warning>> {
    Ok(ctx
        .services
        .rewind
        .warnings(&session.id)
        .await
        .map_err(|error| explain(error, "reading the warnings"))?
        .into_iter()
        .skip(before)
        .collect())
}

/// How many warnings the session has (before an operation, for `warnings_since` after it).
pub(super) async fn warning_count(ctx: &Context, session: &Session) -> Result<usize> {
    Ok(warnings_since(ctx, session, 0).await?.len())
}

async fn report(
    ctx: &Context,
    session: &Session,
    action: &'static str,
    (earlier, warnings_before): (&[Warning], usize),
    messages: &[MessageWithParts],
    put_back: &[FileDiff],
) -> Result<()> {
    let rewind = &ctx.services.rewind;
    let mut warnings = earlier.to_vec();
    warnings.extend(warnings_since(ctx, session, warnings_before).await?);
    let diffs = match session.revert {
        Some(_) => rewind
            .session_diff(&session.id)
            .await
            .map_err(|error| explain(error, "reading the session diff"))?,
        None => put_back.to_vec(),
    };
    let prompt = session.revert.as_ref().and_then(|revert| {
        messages
            .iter()
            .find(|m| m.info.id == revert.message_id && m.info.role == Role::User)
            .map(|m| parts_text(&m.parts))
    });
    // Messages hidden whole, as `log` marks them with `~`: a revert to a part leaves its message's parts
    // before it, and that message is said apart (CLI review L5: it was counted as hidden).
    let hidden = session.revert.as_ref().map_or(0, |revert| {
        let point = rewind_core::revert::RevertPoint::of(revert);
        messages
            .iter()
            .filter(|m| rewind_core::revert::is_hidden(&point, &m.info.id, None))
            .count()
    });
    let partly = session
        .revert
        .as_ref()
        .is_some_and(|revert| revert.part_id.is_some());
    if ctx.json {
        return print_json(&MoveReport {
            session_id: session.id.to_string(),
            action,
            revert: session.revert.clone(),
            prompt,
            hidden_messages: hidden,
            summary: session.revert.as_ref().and(session.summary),
            files: diffs.iter().map(FileRow::from).collect(),
            warnings,
        });
    }
    match &session.revert {
        Some(revert) => {
            println!(
                "Reverted session {} to {}{}: {} message{} hidden{}.",
                session.id,
                revert.message_id,
                prompt
                    .as_deref()
                    .map(|p| format!(" ({})", super::output::one_line(p)))
                    .unwrap_or_default(),
                hidden,
                plural(hidden as u64),
                if partly {
                    " (and the parts of that message from the revert point on)"
                } else {
                    ""
                }
            );
            if diffs.is_empty() {
                println!("  no file changed");
            } else {
                println!("  undone:");
                print_file_summary(&diffs, "    ");
            }
            let flag = ctx.session_flag(&session.id).await;
            println!(
                "`rewind redo{flag}` goes forward again, `rewind diff{flag}` shows the changes undone."
            );
        }
        None => {
            println!(
                "Session {} is no longer reverted: every turn is back.",
                session.id
            );
            if !diffs.is_empty() {
                println!("  put back:");
                print_file_summary(&diffs, "    ");
            }
        }
    }
    for warning in &warnings {
        print_warning(warning);
    }
    Ok(())
}

/// A warning, marked with `!`.
pub fn print_warning(warning: &Warning) {
    print!("{}", warning_text(warning));
}

/// How many of a warning's files the text output names; `--json` names them all.
pub const WARNING_FILES_SHOWN: usize = 50;

/// A warning as `print_warning` prints it (lines ending in a newline): its first
/// [`WARNING_FILES_SHOWN`] files, then how many more there are.
pub fn warning_text(warning: &Warning) -> String {
    let mut text = format!("! {}\n", warning.message);
    if let Some(snapshot) = &warning.snapshot
        && !warning.message.contains(snapshot.as_str())
    {
        text.push_str(&format!(
            "    the files as snapshot {snapshot} holds them (the warning says when it was taken): \
             `rewind snapshot restore {snapshot} PATH…`\n"
        ));
    }
    for file in warning.files.iter().take(WARNING_FILES_SHOWN) {
        text.push_str(&format!("    {}\n", super::output::shown(file)));
    }
    if let Some(more) = files_not_shown(warning.files.len()) {
        text.push_str(&format!("    {more}\n"));
    }
    text
}

/// Past the first [`WARNING_FILES_SHOWN`] of `count` files listed in text, the line that says how many
/// more there are.
pub fn files_not_shown(count: usize) -> Option<String> {
    files_past(count, WARNING_FILES_SHOWN)
}

/// Past the first `shown` of `count` files listed in text, the words that say how many more there are.
pub fn files_past(count: usize, shown: usize) -> Option<String> {
    let more = count.checked_sub(shown).filter(|&more| more > 0)?;
    Some(format!(
        "… and {more} more file{} (`--json` lists them all)",
        super::output::plural(more as u64)
    ))
}
