//! What every command starts from: the worktree it is about, the opened services (after recovery), and
//! the session it works on, with errors that say what to do.

use std::path::{Path, PathBuf};

use anyhow::{Result, anyhow, bail};
use rewind_core::MessageRepo as _;
use rewind_core::error::StorageFault;
use rewind_core::model::{HolderKind, Session, SessionId};

use super::output::shown;
use crate::config::Settings;
use crate::startup::Services;
use crate::worktree::{canonical_worktree, path_text};

/// An opened command: the services and the worktree.
pub struct Context {
    /// The services over the database and the snapshot stores.
    pub services: Services,
    /// The worktree, canonical.
    pub path: PathBuf,
    /// The worktree as sessions record it (absolute, forward slashes).
    pub directory: String,
    /// Print JSON instead of text.
    pub json: bool,
}

/// How many times a command chooses the latest session again (`exec` may create one) when the one it chose
/// or created was deleted before it was done with it.
pub const CHOOSE_AGAIN: u32 = 3;

/// A `--session` id, or why it is none.
pub fn parse_session(text: &str) -> Result<SessionId> {
    SessionId::parse(text).map_err(|error| {
        anyhow!("{error}; a session id looks like ses_… (`rewind status` lists them)")
    })
}

impl Context {
    /// Checks the directory, opens the services and runs recovery (SPEC section 11: every command first
    /// runs recovery).
    pub async fn open(settings: &Settings, directory: &Path, json: bool) -> Result<Context> {
        let (path, directory) = project_directory(settings, directory)?;
        let services = Services::open(settings, HolderKind::Process).await?;
        let report = services
            .rewind
            .recover()
            .await
            .map_err(|error| explain(error, "recovering interrupted operations"))?;
        // An operation that could not be finished keeps its worktree refused (each operation there tries
        // again and fails with the reason); commands elsewhere go on.
        for failure in &report.failed {
            eprintln!(
                "rewind: warning: an interrupted operation in {} could not be recovered: {}; operations on \
                 that directory are refused until it can be",
                shown(&failure.directory),
                failure.error
            );
        }
        // So are the temporary files a crashed `snapshot restore` (which has no intent) left here, by
        // every command, not only those that open the store; a store another process holds is not waited
        // for (it cleans them itself), and one that cannot be cleaned is left for the next.
        let _ = services.snapshots.clean_leftovers(&path).await;
        Ok(Context {
            services,
            path,
            directory,
            json,
        })
    }

    /// `open`, for a command that only shows (`log`, `diff`, `status`): a database that cannot be written
    /// (a read-only file or mount, a standby) is opened only to read, with a warning, instead of refused.
    /// Recovery needs writing, so it is not run then: the warning names the operations left interrupted,
    /// whose files may be half written until a command that can write recovers them.
    pub async fn open_to_read(
        settings: &Settings,
        directory: &Path,
        json: bool,
    ) -> Result<Context> {
        let refusal = match Context::open(settings, directory, json).await {
            Ok(ctx) => return Ok(ctx),
            Err(error) => error,
        };
        // Read-only, or another process holding the write lock past the busy timeout: readers are not
        // stopped by it (WAL), so the database is shown as it is then too (review: refused after 5 s).
        let why = match refusal
            .chain()
            .find_map(|cause| cause.downcast_ref::<rewind_core::Error>())
            .and_then(rewind_core::Error::storage_fault)
        {
            Some(StorageFault::ReadOnly) => "is read-only",
            Some(StorageFault::Locked) => "is locked by another process",
            _ => return Err(refusal),
        };
        let (path, directory) = project_directory(settings, directory)?;
        let services = Services::open_to_read(settings).await?;
        let target = crate::config::redact_url(&settings.database_url);
        let interrupted = services
            .repo
            .intents()
            .await
            .map_err(|error| explain(error, "reading the interrupted operations"))?;
        eprintln!(
            "rewind: warning: the database {target} {why}: shown as it is, without recovering \
             interrupted operations{}",
            match interrupted.len() {
                0 => String::new(),
                n => format!(
                    " ({n} left interrupted, whose files may be half written until a command that can \
                     write to the database recovers them)"
                ),
            }
        );
        Ok(Context {
            services,
            path,
            directory,
            json,
        })
    }

    /// The session named by `--session`, or the latest of this directory.
    pub async fn session(&self, explicit: Option<&str>) -> Result<Session> {
        match explicit {
            Some(text) => {
                let id = parse_session(text)?;
                let session = self
                    .services
                    .rewind
                    .session(&id)
                    .await
                    .map_err(|error| match error {
                        rewind_core::Error::NotFound(_) => anyhow!(
                            "no session {id} in the database {}; `rewind status` lists the sessions of this directory",
                            crate::config::redact_url(&self.services.settings.database_url)
                        ),
                        other => explain(other, "reading the session"),
                    })?;
                // A session of another directory is acted on where it lives: said, so a `-C` that names
                // another directory does not pass unnoticed.
                if session.directory != self.directory {
                    eprintln!(
                        "rewind: session {id} belongs to {}, not to {}; acting on {}",
                        shown(&session.directory),
                        shown(&self.directory),
                        shown(&session.directory)
                    );
                }
                Ok(session)
            }
            // The database is named: after a mistyped `--data-dir` (or another `XDG_DATA_HOME`, under sudo)
            // the way out is the right database, not a new session (CLI review L3).
            None => self.latest_session().await?.ok_or_else(|| {
                anyhow!(
                    "no rewind session in {} in the database {}; record one with `rewind exec -- COMMAND…`, \
                     or pass -C DIR or --session ID (or --data-dir / --database-url, if the session is in \
                     another database)",
                    shown(&self.directory),
                    crate::config::redact_url(&self.services.settings.database_url)
                )
            }),
        }
    }

    /// Runs `read` on the session `explicit` names, or on this directory's latest (`session_to_change`
    /// when `to_change`, for a dry run). The latest, chosen without being named, may be deleted while it is
    /// read (`rewind gc --older-than` beside it): it is then chosen again, as by the command started a
    /// moment later (gc fuzz: `log`, `diff` and `undo --dry-run` said a bare "Session not found" of a
    /// session the user never named). For commands that only read, whose output comes after their reads.
    pub async fn with_session<T>(
        &self,
        explicit: Option<&str>,
        to_change: bool,
        read: impl AsyncFn(Session) -> Result<T>,
    ) -> Result<T> {
        let mut chosen_again = 0;
        loop {
            let session = if to_change {
                self.session_to_change(explicit).await?
            } else {
                self.session(explicit).await?
            };
            let id = session.id.clone();
            match read(session).await {
                Err(_)
                    if explicit.is_none()
                        && chosen_again < CHOOSE_AGAIN
                        && self.is_deleted(&id).await =>
                {
                    chosen_again += 1;
                }
                done => return done,
            }
        }
    }

    /// `session`, for a command that writes its files (undo, redo, revert, unrevert): refused, saying what
    /// to do, when its directory no longer exists (the store's own error named the path, not the way out).
    pub async fn session_to_change(&self, explicit: Option<&str>) -> Result<Session> {
        let session = self.session(explicit).await?;
        if !Path::new(&session.directory).is_dir() {
            bail!(
                "session {}'s directory {} no longer exists, so its files cannot be reverted; put the \
                 directory back at that path (if it was moved), or delete the session's history with \
                 `rewind gc --older-than DAYS`; `rewind log --session {}` still shows it",
                session.id,
                shown(&session.directory),
                session.id
            );
        }
        Ok(session)
    }

    /// What a hint naming another command adds so that it acts on `session`: nothing when that is this
    /// directory's latest session (the default), else ` --session ID`.
    pub async fn session_flag(&self, session: &SessionId) -> String {
        match self.latest_session().await {
            Ok(Some(latest)) if &latest.id == session => String::new(),
            _ => format!(" --session {session}"),
        }
    }

    /// Whether `session` is no longer stored (deleted since it was read: `rewind gc --older-than`,
    /// `DELETE /session`).
    pub async fn is_deleted(&self, session: &SessionId) -> bool {
        matches!(
            self.services.rewind.session(session).await,
            Err(rewind_core::Error::NotFound(_))
        )
    }

    /// The newest session of this directory, if any.
    pub async fn latest_session(&self) -> Result<Option<Session>> {
        let sessions = self
            .services
            .rewind
            .sessions(Some(&self.directory))
            .await
            .map_err(|error| explain(error, "listing the sessions"))?;
        Ok(sessions.into_iter().next())
    }
}

/// The canonical directory a command is about, and its text as sessions record it. Refused when it is
/// rewind's data directory or inside it, before the database is opened (which would create its files
/// there): every operation on such a directory is refused by the snapshot store anyway.
pub fn project_directory(settings: &Settings, directory: &Path) -> Result<(PathBuf, String)> {
    let (path, directory) = canonical_worktree(directory)
        .map_err(|error| anyhow!("{error}; pass the worktree's directory with -C DIR"))?;
    if let Ok(data) = std::fs::canonicalize(&settings.data_dir)
        && path.starts_with(&data)
    {
        bail!(
            "{} is rewind's data directory {} or inside it, not a project directory; choose another \
             data directory (--data-dir or REWIND_DATA_DIR) or another directory (-C DIR)",
            path.display(),
            data.display()
        );
    }
    Ok((path, directory))
}

/// Whether the session's open step is abandoned (core's rule, SPEC section 4); false when none is open.
pub async fn step_is_abandoned(ctx: &Context, session: &Session) -> Result<bool> {
    ctx.services
        .rewind
        .step_is_abandoned(session)
        .await
        .map_err(|error| explain(error, "reading the session's lease"))
}

/// The canonical worktree path: it must exist and be a directory.
pub fn worktree_path(directory: &Path) -> Result<PathBuf> {
    canonical_worktree(directory)
        .map(|(path, _)| path)
        .map_err(|error| anyhow!("{error}; pass the worktree's directory with -C DIR"))
}

/// A path as sessions record it.
pub fn directory_string(path: &Path) -> Result<String> {
    Ok(path_text(path)?)
}

/// A core error as the user should read it: what went wrong while doing `what`, and what to do.
pub fn explain(error: rewind_core::Error, what: &str) -> anyhow::Error {
    use rewind_core::Error;
    // After a rollback the error says so itself (the files are back, or none had been written): "nothing
    // was changed" is not added (CLI review L9: it was said twice).
    let unchanged = |said: &str, hint: &str| {
        if said.contains(rewind_core::error::PUT_BACK)
            || said.contains(rewind_core::error::NOTHING_CHANGED)
        {
            String::new()
        } else {
            hint.to_owned()
        }
    };
    match error {
        Error::Busy { message, .. } => anyhow!(
            "{}",
            held_by_itself(
                message,
                &rewind_core::HostPort::this_process(&crate::host::SystemHost::new())
            )
        ),
        Error::Stale { message, .. } => anyhow!("{message}; try again"),
        Error::NotFound(message)
            if message.starts_with("Message") || message.starts_with("Part") =>
        {
            anyhow!("{message}; `rewind log --json` lists the session's message and part ids")
        }
        Error::NotFound(message) => anyhow!("{message}"),
        Error::InvalidInput(message) => anyhow!("{message}"),
        Error::Damaged(message) => anyhow!(
            "the snapshot store is damaged: {message} (an object rewind stored cannot be read: a disk \
             fault, a file of the store changed by hand, or an object the first snapshot took over from the \
             repository's own `.git` that was damaged there, which `git fsck` in it tells; `rewind status` \
             names the store)"
        ),
        Error::MissingObject(message) => anyhow!(
            "snapshot object missing: {message}{} (was the snapshot collected, is it from another directory's store, \
             or was the database file moved or copied? Its snapshot stores are its own at its own path)",
            unchanged(&message, "; nothing was changed")
        ),
        // The hint fits the cause: permissions only when they are what refused the read (a path too long,
        // or a file gone mid-snapshot, is not).
        Error::Unreadable { path, reason } if reason.contains("Permission denied") => anyhow!(
            "cannot read {path}: {reason}; fix its permissions and try again{}",
            unchanged(&reason, " (nothing was changed)")
        ),
        // git works below the worktree with relative paths; rewind opens each directory by its full
        // path, which the system caps at 4096 bytes (black-box: a deep tree git commits).
        Error::Unreadable { path, reason } if reason.contains("File name too long") => anyhow!(
            "cannot read {path}: {reason}; its full path is longer than the system allows (4096 bytes), \
             and rewind reads the worktree by full paths: ignore that directory (.gitignore) or make the \
             tree shallower, then try again{}",
            unchanged(&reason, " (nothing was changed)")
        ),
        Error::Unreadable { path, reason } => {
            anyhow!(
                "cannot read {path}: {reason}{}",
                unchanged(&reason, "; nothing was changed")
            )
        }
        other => anyhow::Error::new(other).context(format!("failed while {what}")),
    }
}

/// A refusal's `message`, and when the lease that refused is held by `me` (a command runs one operation at a
/// time), what that means: an earlier attempt of this command failed and could not give it back either
/// (disk-full audit: `exec` said the session was busy in its own name).
fn held_by_itself(message: String, me: &rewind_core::model::ProcessIdentity) -> String {
    if !message.contains(&format!("(held by process {} on {})", me.pid, me.host)) {
        return message;
    }
    format!(
        "{message}. That is this rewind command itself: an earlier attempt of it failed (its error is said \
         above, a full disk say) and could not give the lease back either; the next rewind command takes it \
         over once this one has ended"
    )
}

#[cfg(test)]
mod tests {
    use super::{explain, held_by_itself};

    /// A command that reads this directory's latest session, which is deleted while it reads it (`rewind
    /// gc --older-than` beside it), reads the next latest instead, as it would have started a moment
    /// later (gc fuzz: `log` said a bare "Session not found"); a session named with `--session` is not
    /// exchanged for another.
    #[tokio::test]
    async fn a_latest_session_deleted_while_it_is_read_is_chosen_again() {
        let data = tempfile::tempdir().expect("a data directory");
        let worktree = tempfile::tempdir().expect("a worktree");
        let settings = crate::config::Settings::new(data.path(), worktree.path());
        let ctx = super::Context::open(&settings, worktree.path(), false)
            .await
            .expect("opens");
        let rewind = &ctx.services.rewind;
        let create = async |title: &str| {
            let session = rewind
                .create_session(&ctx.directory, Some(title.to_owned()))
                .await
                .expect("a session");
            // The next one sorts as newer.
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
            session
        };
        let older = create("older").await;
        let newer = create("newer").await;
        let reads = std::sync::Mutex::new(Vec::new());
        // Deletes the newest session as it reads it, as gc would meanwhile.
        let read = async |session: rewind_core::model::Session| {
            reads.lock().expect("reads").push(session.id.clone());
            if session.id != older.id {
                rewind
                    .delete_session(&session.id)
                    .await
                    .expect("deleted meanwhile");
            }
            rewind
                .messages(&session.id)
                .await
                .map_err(|error| explain(error, "reading the messages"))?;
            Ok(session.id)
        };
        let read_id = ctx
            .with_session(None, false, read)
            .await
            .expect("the next latest is read");
        assert_eq!(read_id, older.id);
        assert_eq!(*reads.lock().expect("reads"), [newer.id, older.id.clone()]);

        let named = create("named").await;
        let refused = ctx
            .with_session(Some(named.id.as_str()), false, read)
            .await
            .expect_err("a named session is not exchanged");
        assert!(
            refused.to_string().contains("Session not found"),
            "{refused:#}"
        );
    }

    #[test]
    fn a_lease_held_by_the_command_itself_is_said_to_be_its_own() {
        let me = rewind_core::model::ProcessIdentity {
            pid: 4242,
            host: "vm".to_owned(),
            start_time: 1,
            boot: None,
            machine: None,
        };
        let refusal = |holder: &str| {
            held_by_itself(
                format!(
                    "Session is busy: ses_1 (held by {holder}); try again when it has finished"
                ),
                &me,
            )
        };
        assert!(refusal("process 4242 on vm").contains("this rewind command itself"));
        for other in [
            "process 42 on vm",
            "process 4242 on other",
            "server process 4242 on vm",
        ] {
            assert!(!refusal(other).contains("itself"), "{other}");
        }
    }

    /// After a rollback, whose note says the files are back, "nothing was changed" is not added (it read
    /// twice: review of the rollback note).
    #[test]
    fn a_rolled_back_error_is_not_also_said_to_have_changed_nothing() {
        let note = format!(
            "the files it had changed {} revert, and the session is as it was",
            rewind_core::error::PUT_BACK
        );
        let errors = || {
            [
                rewind_core::Error::Unreadable {
                    path: "a.txt".to_owned(),
                    reason: "Permission denied (os error 13)".to_owned(),
                },
                rewind_core::Error::Unreadable {
                    path: "a.txt".to_owned(),
                    reason: "Input/output error (os error 5)".to_owned(),
                },
                rewind_core::Error::MissingObject("tree 1234".to_owned()),
            ]
        };
        for error in errors() {
            let plain = explain(error, "reverting").to_string();
            assert!(plain.contains("nothing was changed"), "{plain}");
        }
        for error in errors() {
            let noted = explain(error.noted(&note), "reverting").to_string();
            assert!(
                noted.contains(&note) && !noted.contains("nothing was changed"),
                "{noted}"
            );
        }
    }

    /// An unreadable file's hint fits its cause: permissions only when they refused the read (black-box:
    /// a path too long was told to fix its permissions).
    #[test]
    fn an_unreadable_file_s_hint_names_permissions_only_when_they_are_the_cause() {
        let unreadable = |reason: &str| {
            explain(
                rewind_core::Error::Unreadable {
                    path: "a.txt".to_owned(),
                    reason: reason.to_owned(),
                },
                "tracking",
            )
            .to_string()
        };
        let denied = unreadable("Permission denied (os error 13)");
        assert!(denied.contains("fix its permissions"), "{denied}");
        let long = unreadable("File name too long (os error 36)");
        assert!(
            long.contains("4096 bytes")
                && long.contains(".gitignore")
                && !long.contains("permissions"),
            "{long}"
        );
        for other in [
            "File name too long (os error 36)",
            "No such file or directory (os error 2)",
        ] {
            let said = unreadable(other);
            assert!(
                !said.contains("permissions") && said.contains("nothing was changed"),
                "{said}"
            );
        }
    }
}
