//! `rewind exec [--new-session] -- CMD…`: the command line becomes the user message and the command runs
//! as one step of an assistant message, owned by this process (a killed `exec` leaves a step the next
//! command aborts, and its command is killed with it: `guard`). The command's exit code is passed through.

use std::ffi::OsString;
use std::os::unix::process::ExitStatusExt;

use anyhow::{Context as _, Result};
use nix::sys::signal::Signal;
use rewind_core::model::FileActionKind;
use rewind_core::model::{
    MessageId, MessageWithParts, Part, PartBody, Session, SessionId, Warning,
};
use rewind_core::revert::{RevertPoint, cleanup_plan};
use rewind_core::service::{DeleteIf, NewMessage, NewPart, PreviewFile, StepEnd};
use serde::Serialize;
use tokio::signal::unix::{SignalKind, signal};

use super::Exit;
use super::context::{CHOOSE_AGAIN, Context, explain};
use super::history::{
    WARNING_FILES_SHOWN, files_not_shown, warning_count, warning_text, warnings_since,
};
use super::output::{plural, print_error_json, print_json, shell_line, with_progress};

/// `eprintln!` that cannot fail: `exec` reports its command's exit code whatever happens to its own
/// messages (a stderr that cannot be written made `eprintln!` panic, and the code was lost).
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($arg)*);
    }};
}

/// `exec --json`: printed on stdout after the command's own output.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ExecReport {
    #[serde(rename = "sessionID")]
    session_id: String,
    #[serde(rename = "userMessageID")]
    user_message_id: String,
    #[serde(rename = "assistantMessageID")]
    assistant_message_id: String,
    command: String,
    exit_code: i32,
    reason: String,
    files: Vec<String>,
    /// False when the snapshot after the command failed, or the one before it cannot be read: the step
    /// is recorded, its changes are not undoable (the session's warning says why).
    undoable: bool,
    /// The warnings the turn raised (files its snapshots left out, say).
    warnings: Vec<Warning>,
    /// How many messages a revert of the session hid, discarded before this turn (the redo history).
    discarded_messages: usize,
    /// The files of `files` that `undo` would leave as they are (the revert's preview), with why.
    undo_keeps: Vec<PreviewFile>,
}

/// Runs `command` as a step of this directory's latest session (or a new one).
pub async fn run(ctx: &Context, new_session: bool, command: &[OsString]) -> Result<()> {
    let rewind = &ctx.services.rewind;
    let line = shell_line(command);
    // A command that cannot start records nothing (a reverted session keeps its redo history), as a
    // shell says it: exit 127.
    if let Some(program) = command.first()
        && let Err(why) = super::guard::runnable(&ctx.path, program)
    {
        let message = format!(
            "cannot run `{line}`: {why}; check the command's name and PATH (nothing was recorded)"
        );
        say!("error: {message}");
        if ctx.json {
            print_error_json(&message);
        }
        return Err(Exit(127).into());
    }
    // The latest session can be deleted between its choice and the turn's beginning (`rewind gc
    // --older-than`, `DELETE /session`): the turn then goes to the next latest, or to a new session, as
    // it would have had the command started a moment later (gc fuzz: exec failed with "Session not
    // found" on a session the user never named). So can the session this command created, still empty
    // (`gc --older-than 0` listing it the moment it exists): another is chosen or created alike (CI saw
    // the bare "Session not found" of that race).
    let mut chosen_again = 0;
    let (session, created, begun) = loop {
        let (session, created) = match (new_session, ctx.latest_session().await?) {
            (false, Some(session)) => (session, false),
            _ => (create_session(ctx, &line).await?, true),
        };
        let begun = begin_turn_in(ctx, &session, &line).await?;
        match &begun.turn {
            Err(rewind_core::Error::NotFound(_))
                if chosen_again < CHOOSE_AGAIN && ctx.is_deleted(&session.id).await =>
            {
                chosen_again += 1;
            }
            _ => break (session, created, begun),
        }
    };
    let Begun {
        turn: begun,
        warnings_before,
        discarded,
    } = begun;
    if discarded > 0 && (!ctx.json || begun.is_err()) {
        say_discarded(discarded, begun.is_ok());
    }
    let (user, assistant, _) = match begun {
        Ok(turn) => turn,
        Err(error) => {
            // A session this command created for the turn would stay behind empty: take it away again,
            // unless another process has recorded a message in it meanwhile (it is this directory's latest
            // session from the moment it exists), judged under the session's lease and by the delete's
            // own guard. Best effort: the refusal is what the user must read.
            if created {
                let _ = rewind
                    .delete_session_if(&session.id, Some(DeleteIf::Empty))
                    .await;
            }
            return Err(explain(
                error,
                "recording the command and beginning its step",
            ));
        }
    };

    // From here on the step is open: whatever happens to the command, the step is finished.
    let outcome = run_child(ctx, &session.id, command).await;
    let (code, reason, note) = match &outcome {
        Ok(status) => match (status.code(), status.signal()) {
            (Some(0), _) => (0, "stop", format!("`{line}` exited with code 0")),
            (Some(code), _) => (code, "error", format!("`{line}` exited with code {code}")),
            (None, Some(signal)) => (
                128 + signal,
                "aborted",
                format!("`{line}` was killed by signal {signal}"),
            ),
            (None, None) => (1, "error", format!("`{line}` ended without an exit code")),
        },
        Err(error) => (
            127,
            "error",
            format!(
                "`{line}` could not be run: {}",
                crate::report::chain_anyhow(error)
            ),
        ),
    };
    // The command has run: from here on its exit code is what this process reports, also when its step's
    // end cannot be recorded (a locked database, say). A failed command's code is never replaced; a
    // command that succeeded reports 1 then, so a script does not go on as if all was recorded.
    let parts = match record_end(ctx, &session.id, &assistant.info.id, &note, reason).await {
        Ok(parts) => parts,
        Err(error) => {
            let message = crate::report::chain_anyhow(&error);
            say!("error: {message}");
            if ctx.json {
                print_error_json(&message);
            }
            say!(
                "rewind: `{line}` ended (exit code {code}), but its step in session {} could not be recorded as \
                 finished; the step stays open, and the next exec, undo, redo, revert, unrevert or snapshot restore in this directory aborts it with a \
                 snapshot of the files as they are then (`rewind status` shows it)",
                session.id
            );
            report_unrunnable(&outcome, &line);
            return Err(Exit(exit_code_after_failed_record(code)).into());
        }
    };
    let files: Vec<String> = parts
        .iter()
        .filter_map(|part| part.as_patch())
        .flat_map(|patch| patch.files.iter().cloned())
        .collect();
    // The step is recorded either way; without its end snapshot its changes cannot be undone (the
    // session's warning says why), and saying "`rewind undo` takes it back" would be a false promise.
    // What the turn's snapshots left out (a file over the size cap, a FIFO) cannot be undone: said here,
    // not only in `rewind log`. The step is recorded by now: a failure to read them must not replace the
    // command's exit code.
    let warnings = warnings_since(ctx, &session, warnings_before)
        .await
        .unwrap_or_default();
    // Nor when what it changed cannot be worked out (its start's snapshot unreadable: a damaged store),
    // which its warning says (review: "recorded … no tracked file changed", exit 0).
    let undoable = parts.iter().any(
        |part| matches!(&part.body, PartBody::StepFinish(finish) if finish.snapshot.is_some()),
    ) && !warnings.iter().any(|warning| {
        warning
            .message
            .ends_with(rewind_core::service::STEP_NOT_REVERTABLE)
    });
    // What `undo` would leave as it is (a file not tracked content when the step began, such as a `.env`
    // the step un-ignored): said now, so "`rewind undo` takes it back" promises no more than it does. Only
    // a hint: a preview that cannot be made says nothing.
    let undo_keeps = if undoable && !files.is_empty() {
        undo_would_keep(ctx, &session.directory, &parts).await
    } else {
        Vec::new()
    };

    if ctx.json {
        print_json(&ExecReport {
            session_id: session.id.to_string(),
            user_message_id: user.info.id.to_string(),
            assistant_message_id: assistant.info.id.to_string(),
            command: line.clone(),
            exit_code: code,
            reason: reason.to_owned(),
            files,
            undoable,
            warnings,
            discarded_messages: discarded,
            undo_keeps,
        })?;
    } else {
        for warning in &warnings {
            say!(
                "rewind: warning: {}",
                warning_text(warning)
                    .trim_start_matches("! ")
                    .trim_end_matches('\n')
            );
        }
        if undoable && files.is_empty() {
            say!(
                "rewind: recorded in session {} (no tracked file changed)",
                session.id
            );
        } else if undoable && undo_keeps.is_empty() {
            say!(
                "rewind: recorded in session {} ({} file{} changed); `rewind undo` takes it back",
                session.id,
                files.len(),
                plural(files.len() as u64)
            );
        } else if undoable {
            say!(
                "rewind: recorded in session {} ({} file{} changed); `rewind undo` takes it back, except {} \
                 file{} it would leave as {}:",
                session.id,
                files.len(),
                plural(files.len() as u64),
                undo_keeps.len(),
                plural(undo_keeps.len() as u64),
                if undo_keeps.len() == 1 {
                    "it is"
                } else {
                    "they are"
                }
            );
            for kept in undo_keeps.iter().take(WARNING_FILES_SHOWN) {
                say!(
                    "    {}{}",
                    super::output::shown(&kept.file),
                    kept.reason
                        .as_deref()
                        .map(|why| format!(" ({why})"))
                        .unwrap_or_default()
                );
            }
            if let Some(more) = files_not_shown(undo_keeps.len()) {
                say!("    {more}");
            }
        } else {
            say!(
                "rewind: warning: recorded in session {}, but the snapshots around the command cannot tell \
                 what it changed, so its changes cannot be undone; `rewind log` shows why",
                session.id
            );
        }
    }
    report_unrunnable(&outcome, &line);
    // A step whose changes cannot be undone is not a success for a script to go on from, as a step whose
    // end could not be recorded is not: a command that succeeded reports 1 then (its failing code stays).
    let status = if undoable {
        exit_status(code)
    } else {
        exit_code_after_failed_record(code)
    };
    match status {
        0 => Ok(()),
        status => Err(Exit(status).into()),
    }
}

/// The files `undo` would leave as they are: the plan of a revert of this turn, whose patches are those
/// of its one step (`parts`; the turn is the session's last, so undo's hidden range is the turn), as the
/// revert preview makes it but without reading the session's messages. None when it cannot be made.
async fn undo_would_keep(ctx: &Context, directory: &str, parts: &[Part]) -> Vec<PreviewFile> {
    let patches: Vec<_> = parts.iter().filter_map(Part::as_patch).collect();
    match ctx.services.rewind.plan_patches(directory, &patches).await {
        Ok(plan) => plan
            .into_iter()
            .filter(|file| file.action == FileActionKind::Keep)
            .collect(),
        Err(error) => {
            tracing::debug!(%error, "no plan of the undo");
            Vec::new()
        }
    }
}

/// The messages cleanup would remove from `session` (SPEC 7): those its revert hides whole (none when it
/// is not reverted, or they cannot be read).
async fn hidden_messages(ctx: &Context, session: &Session) -> Vec<MessageId> {
    let Some(revert) = &session.revert else {
        return Vec::new();
    };
    ctx.services
        .rewind
        .messages(&session.id)
        .await
        .map(|messages| cleanup_plan(&messages, &RevertPoint::of(revert)).removed_messages)
        .unwrap_or_default()
}

/// How many of the `hidden` messages are gone now (0 when they cannot be read).
async fn discarded_of(ctx: &Context, session: &SessionId, hidden: &[MessageId]) -> usize {
    if hidden.is_empty() {
        return 0;
    }
    ctx.services
        .rewind
        .messages(session)
        .await
        .map_or(0, |messages| {
            hidden
                .iter()
                .filter(|id| !messages.iter().any(|m| &m.info.id == *id))
                .count()
        })
}

/// Says that `discarded` hidden messages of a reverted session are gone: by this turn's cleanup when it
/// began (`by_this_turn`); otherwise by another process's, meanwhile (a turn that was refused discards
/// nothing: review, a refused `exec` said it had).
fn say_discarded(discarded: usize, by_this_turn: bool) {
    let (s, were) = (
        plural(discarded as u64),
        if discarded == 1 { "was" } else { "were" },
    );
    if by_this_turn {
        say!(
            "rewind: the session was reverted: its {discarded} hidden message{s} {were} discarded (as OpenCode \
             does), so `rewind redo` can no longer bring them back; the files were left as the revert put them"
        );
    } else {
        say!(
            "rewind: meanwhile another process ended the session's revert (it recorded a message or committed \
             the revert): its {discarded} hidden message{s} {were} discarded there, so `rewind redo` can no \
             longer bring them back"
        );
    }
}

/// Says why the command could not be run, when it could not.
fn report_unrunnable<T>(outcome: &Result<T>, line: &str) {
    if let Err(error) = outcome {
        say!(
            "error: cannot run `{line}`: {}; check the command's name and PATH",
            crate::report::chain_anyhow(error)
        );
    }
}

/// Records how the command ended (a text part with `note`) and finishes the step with `reason`. The step
/// is finished also when the note cannot be stored: its end snapshot is best taken now, as the command
/// left the files. A note refused then (a database locked past its busy timeout, say) is stored once more
/// after the step's end, so the turn still says how its command ended (black-box: it was lost, while the
/// step's end, waiting longer, was recorded); only when that fails too is it said on stderr.
async fn record_end(
    ctx: &Context,
    session: &SessionId,
    assistant: &MessageId,
    note: &str,
    reason: &str,
) -> Result<Vec<Part>> {
    let rewind = &ctx.services.rewind;
    let append_note = || {
        rewind.append_part(
            session,
            assistant,
            NewPart::new(PartBody::text(note.to_owned())),
        )
    };
    let noted = append_note().await;
    let end = StepEnd {
        reason: Some(reason.to_owned()),
        ..StepEnd::default()
    };
    // Another session's step or a revert may hold the worktree for a moment: the command has run, so its
    // step's end is tried again a while before it is left open for the next command to abort.
    let finished = with_progress(
        "snapshotting after the command",
        crate::busy::while_busy(FINISH_WAIT, std::time::Duration::from_millis(50), || {
            rewind.finish_step(session, assistant, end.clone())
        }),
    )
    .await;
    let mut parts = match finished {
        Ok(parts) => parts,
        Err(error) => {
            // The step stays open: the note's own failure is said too (the step's is the error).
            if let Err(note_error) = noted {
                say!(
                    "rewind: warning: {}",
                    crate::report::chain_anyhow(&explain(
                        note_error,
                        "recording the command's exit status"
                    ))
                );
            }
            return Err(explain(error, "finishing the step"));
        }
    };
    if noted.is_err() {
        match append_note().await {
            Ok(part) => parts.push(part),
            Err(error) => say!(
                "rewind: warning: {}",
                crate::report::chain_anyhow(&explain(error, "recording the command's exit status"))
            ),
        }
    }
    Ok(parts)
}

/// How long `exec` tries again to finish its step while the worktree or the session is busy.
const FINISH_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// The exit status `exec` passes on for the command's `code` (1 when it does not fit one).
fn exit_status(code: i32) -> u8 {
    u8::try_from(code).unwrap_or(1)
}

/// The exit status when the command ended with `code` and its step's end could not be recorded: the
/// command's own failure status, or 1 when it succeeded.
fn exit_code_after_failed_record(code: i32) -> u8 {
    exit_status(code).max(1)
}

/// A turn's beginning in `session` (`Rewind::begin_turn`), with what was read around it: the session's
/// warnings before it and the hidden messages its cleanup discarded.
struct Begun {
    turn: rewind_core::Result<(MessageWithParts, MessageWithParts, Part)>,
    warnings_before: usize,
    discarded: usize,
}

/// Begins the turn in `session`: its two messages and its step are stored together, so a step that cannot
/// begin (the session or the worktree busy, the session deleted) leaves nothing recorded.
async fn begin_turn_in(ctx: &Context, session: &Session, line: &str) -> Result<Begun> {
    let rewind = &ctx.services.rewind;
    // Refuse before recording anything when a live process (another `rewind exec`, or a server's
    // client) has a step open in this session, or is closing it; an abandoned step is aborted by the next
    // call instead.
    if let Some(step) = &session.step
        && let Err(busy) = rewind.refuse_if_step_busy(session).await
    {
        return Err(match busy {
            rewind_core::Error::Busy { message, .. } => {
                let hint = if message.contains("try again") {
                    ""
                } else {
                    "; wait for it to finish and try again"
                };
                anyhow::anyhow!(
                    "a step is open in message {}: {message}{hint}",
                    step.message_id
                )
            }
            other => explain(other, "reading the session's lease"),
        });
    }
    // Read to tell the turn's own warnings apart later; unread (the database busy, say), none is shown
    // rather than old ones (the turn's are still in `rewind log`).
    let warnings_before = warning_count(ctx, session).await.unwrap_or(usize::MAX);
    // A reverted session's hidden messages are discarded when the turn begins (SPEC 7): said afterwards,
    // since `redo` can no longer bring them back.
    let hidden = hidden_messages(ctx, session).await;
    let turn = with_progress(
        "snapshotting before the command",
        rewind.begin_turn(
            &session.id,
            NewMessage::user_text(line.to_owned()),
            NewMessage::assistant(),
        ),
    )
    .await;
    // Counted as what is gone afterwards: the cleanup is stored with the step (none when it cannot
    // begin), and another process may have unreverted the session, or run its cleanup, meanwhile.
    let discarded = discarded_of(ctx, &session.id, &hidden).await;
    Ok(Begun {
        turn,
        warnings_before,
        discarded,
    })
}

async fn create_session(ctx: &Context, line: &str) -> Result<Session> {
    let title: String = line.chars().take(60).collect();
    ctx.services
        .rewind
        .create_session(&ctx.directory, Some(title))
        .await
        .map_err(|error| explain(error, "creating a session"))
}

/// Runs the command in the worktree with the terminal's stdin, stdout and stderr. An interrupt (Ctrl-C)
/// reaches the command through the terminal's process group, and a SIGTERM sent to rewind alone (by
/// `timeout` or `kill`) is passed on to the command; either way rewind waits for the command to end, so the
/// step is still finished. A rewind killed outright takes the command with it (`guard`).
///
/// While the command runs, the step's lease is renewed every third of the step timeout: on this host a
/// live owner keeps its step whatever the lease says, but a process on another host sharing the database
/// takes an expired lease for an abandoned step (SPEC section 4) and would abort it under the command.
async fn run_child(
    ctx: &Context,
    session_id: &SessionId,
    command: &[OsString],
) -> Result<std::process::ExitStatus> {
    let mut interrupts =
        signal(SignalKind::interrupt()).context("cannot install the interrupt handler")?;
    let mut terminations =
        signal(SignalKind::terminate()).context("cannot install the termination handler")?;
    let (command, mut ended) = super::guard::spawn(&ctx.path, command).await?;
    let timeout = ctx.services.rewind.config().step_timeout_ms;
    let mut renewals =
        tokio::time::interval(std::time::Duration::from_millis((timeout / 3).max(100)));
    renewals.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // The first tick is at once; the step was taken just now.
    renewals.tick().await;
    let mut warned = false;
    loop {
        tokio::select! {
            status = &mut ended => {
                return status.context("the thread that waits for the command ended early")?;
            }
            _ = renewals.tick() => {
                if let Err(error) = ctx.services.rewind.note_activity(session_id).await
                    && !warned
                {
                    // The command goes on; the step is still finished when it ends.
                    say!("rewind: warning: cannot renew the step's lease: {error}");
                    warned = true;
                }
            }
            _ = interrupts.recv() => {}
            _ = terminations.recv() => command.signal(Signal::SIGTERM),
        }
    }
}
