//! `rewind demo`: a scripted session in a temporary git repository (real `git init` and commit) that
//! records three turns writing, editing, chmod-ing and deleting files, then reverts to an earlier turn,
//! re-reverts to another, unreverts, and shows the diffs and summaries, printing what it does at each
//! stage. With `--json` it prints, instead, a record of every stage with the files read from disk, so a
//! test can check them.

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command as Process;

use anyhow::{Context as _, Result, bail};
use rewind_core::model::{FileDiff, MessageId, PartBody, SessionId};
use rewind_core::service::{NewMessage, NewPart, StepEnd};
use rewind_core::{RevertTarget, SnapshotPort};
use serde::Serialize;

use super::context::{Context, directory_string, explain};
use super::output::{print_diffs, print_file_summary, print_json, with_progress};
use crate::config::Settings;

/// A file as the demo reads it from disk.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct FileState {
    /// `100644` or `100755`.
    mode: &'static str,
    /// The content (the demo writes text only).
    content: String,
}

/// One stage of the demo in `demo --json`.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Stage {
    /// `initial`, `turn-1`…, `revert-to-turn-2`, `revert-to-turn-3`, `unrevert`.
    name: String,
    /// What was done.
    description: String,
    /// The snapshot of the worktree at this stage.
    snapshot: String,
    /// The earlier stage whose files this one must equal (for the revert stages).
    #[serde(skip_serializing_if = "Option::is_none")]
    same_as: Option<String>,
    /// Whether the files on disk equal that stage's.
    #[serde(skip_serializing_if = "Option::is_none")]
    matches: Option<bool>,
    /// Every file under the worktree (`.git` left out), read from disk.
    files: BTreeMap<String, FileState>,
    /// The diff of the stage's step or revert, without patches.
    changes: Vec<super::history::FileRow>,
}

/// `demo --json`.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct DemoReport {
    repository: String,
    data_dir: String,
    #[serde(rename = "sessionID")]
    session_id: String,
    stages: Vec<Stage>,
}

struct Turn {
    prompt: &'static str,
    edits: &'static [Edit],
}

enum Edit {
    Write(&'static str, &'static str),
    Chmod(&'static str, u32),
    Delete(&'static str),
}

const INITIAL: &[(&str, &str)] = &[
    (
        "README.md",
        "# greeter\n\nA tiny project for the rewind demo.\n",
    ),
    (
        "app.py",
        "def greet(name):\n    return 'hello ' + name\n\n\nprint(greet('world'))\n",
    ),
    ("old_notes.txt", "remember to write a script\n"),
];

const TURNS: &[Turn] = &[
    Turn {
        prompt: "add an executable greeting script and mention it in the README",
        edits: &[
            Edit::Write("hello.sh", "#!/bin/sh\necho hello\n"),
            Edit::Chmod("hello.sh", 0o755),
            Edit::Write(
                "README.md",
                "# greeter\n\nA tiny project for the rewind demo.\n\nRun `./hello.sh`.\n",
            ),
        ],
    },
    Turn {
        prompt: "greet by name, keep a todo list, drop the old notes",
        edits: &[
            Edit::Write("hello.sh", "#!/bin/sh\necho \"hello, ${1:-world}\"\n"),
            Edit::Write("notes/todo.md", "- greet in French\n- add tests\n"),
            Edit::Delete("old_notes.txt"),
        ],
    },
    Turn {
        prompt: "make the script plain text, remove the todo list, rewrite the app",
        edits: &[
            Edit::Chmod("hello.sh", 0o644),
            Edit::Delete("notes/todo.md"),
            Edit::Write(
                "app.py",
                "import sys\n\n\ndef greet(name):\n    return f'hello, {name}'\n\n\nprint(greet(sys.argv[1] if len(sys.argv) > 1 else 'world'))\n",
            ),
        ],
    },
];

/// Runs the demo. `settings` is the configuration to use, or `None` for a temporary data directory.
pub async fn run(settings: Option<Settings>, keep: Option<&Path>, json: bool) -> Result<()> {
    let (repository, _repository_guard) = repository_dir(keep)?;
    let cwd = std::env::current_dir().context("cannot read the current directory")?;
    let (settings, _data_guard) = match settings {
        Some(settings) => (settings, None),
        None => {
            // Private (0700), as a data directory rewind makes always is (README: the stores hold copies of
            // the files); a `--keep` leaves it behind (README audit: it was 0755).
            let data = tempfile::Builder::new()
                .prefix("rewind-demo-data-")
                .permissions(std::os::unix::fs::PermissionsExt::from_mode(0o700))
                .tempdir()
                .context("cannot create a temporary data directory")?;
            let settings = Settings::new(data.path(), &cwd);
            if keep.is_some() {
                // The repository is kept, so its sessions are kept with it.
                let _ = data.keep();
                (settings, None)
            } else {
                (settings, Some(data))
            }
        }
    };
    let say = |text: String| {
        if !json {
            println!("{text}");
        }
    };

    init_repository(&repository)?;
    say(format!(
        "== a git repository with three committed files, in {}",
        repository.display()
    ));
    let ctx = Context::open(&settings, &repository, json).await?;
    let rewind = &ctx.services.rewind;
    let session = rewind
        .create_session(&ctx.directory, Some("rewind demo".to_owned()))
        .await
        .map_err(|error| explain(error, "creating the demo session"))?;
    say(format!("== session {} records three turns", session.id));

    let mut stages = vec![stage(&ctx, "initial", "the committed files", Vec::new()).await?];
    show_files(&stages[0].files, json);
    let mut users: Vec<MessageId> = Vec::new();
    for (index, turn) in TURNS.iter().enumerate() {
        let number = index + 1;
        say(format!("\n-- turn {number}: {:?}", turn.prompt));
        let user = record_turn(&ctx, &session.id, turn, json).await?;
        users.push(user.0);
        stages.push(
            stage(
                &ctx,
                &format!("turn-{number}"),
                &format!("after turn {number}: {}", turn.prompt),
                user.1.clone(),
            )
            .await?,
        );
        if !json {
            println!("   the step changed:");
            print_file_summary(&user.1, "     ");
        }
    }

    // Revert to turn 2: turns 2 and 3 are undone, the files are as after turn 1.
    let plan: [(&str, usize, &str); 2] = [
        ("revert-to-turn-2", 1, "turn-1"),
        ("revert-to-turn-3", 2, "turn-2"),
    ];
    for (name, user_index, same_as) in plan {
        say(format!(
            "\n== revert to turn {}'s message: hides it and what follows, puts the files back as {}",
            user_index + 1,
            same_as
        ));
        let reverted = with_progress(
            "reverting",
            rewind.revert(
                &session.id,
                RevertTarget {
                    message_id: users[user_index].clone(),
                    part_id: None,
                },
            ),
        )
        .await
        .map_err(|error| explain(error, "reverting"))?;
        let diff = rewind
            .session_diff(&session.id)
            .await
            .map_err(|error| explain(error, "reading the session diff"))?;
        if !json {
            if let Some(summary) = reverted.summary {
                println!(
                    "   summary: {} files, +{} -{} undone",
                    summary.files, summary.additions, summary.deletions
                );
            }
            println!("   the changes undone (`rewind diff`):");
            print_diffs(&diff, super::output::colour());
            println!("   the timeline (`rewind log`; ~ marks hidden messages):");
            super::show::log(&ctx, Some(session.id.as_str())).await?;
        }
        stages.push(compared(&ctx, name, &stages, same_as, diff).await?);
    }

    say("\n== unrevert: every turn comes back".to_owned());
    // What the unrevert puts back: the revert's rows (review: the stage listed no change), as `redo` names
    // them, but for a file it left as it was.
    let undone = rewind
        .session_diff(&session.id)
        .await
        .map_err(|error| explain(error, "reading the session diff"))?;
    let (_, counts) = with_progress("unreverting", rewind.unrevert_counted(&session.id))
        .await
        .map_err(|error| explain(error, "unreverting"))?;
    let put_back = super::history::put_back(undone, &counts);
    if !json {
        println!("   put back:");
        print_file_summary(&put_back, "     ");
    }
    stages.push(compared(&ctx, "unrevert", &stages, "turn-3", put_back).await?);

    let all_match = stages.iter().all(|s| s.matches != Some(false));
    if json {
        print_json(&DemoReport {
            repository: ctx.directory.clone(),
            data_dir: settings.data_dir.display().to_string(),
            session_id: session.id.to_string(),
            stages,
        })?;
    } else {
        if let Some(last) = stages.last() {
            show_files(&last.files, false);
        }
        match keep {
            Some(_) => println!(
                "\nThe repository is kept in {}. Look around:\n  rewind --data-dir {} -C {} log",
                repository.display(),
                settings.data_dir.display(),
                repository.display()
            ),
            None => println!(
                "\nDone; the temporary repository is removed. `rewind demo --keep DIR` keeps it."
            ),
        }
    }
    if !all_match {
        // With `--json` the report, printed above, is the one document on stdout (its `matches` say
        // which stage differs); the exit code says it failed.
        if json {
            eprintln!(
                "error: a stage's files differ from the state they should equal (see `matches`)"
            );
            return Err(super::Exit(1).into());
        }
        bail!("a stage's files differ from the state they should equal (see above)");
    }
    Ok(())
}

/// The demo's repository: `keep` (created, and refused when not empty) or a temporary directory.
fn repository_dir(keep: Option<&Path>) -> Result<(PathBuf, Option<tempfile::TempDir>)> {
    match keep {
        Some(dir) => {
            std::fs::create_dir_all(dir)
                .with_context(|| format!("cannot create {}", dir.display()))?;
            if std::fs::read_dir(dir)
                .with_context(|| format!("cannot read {}", dir.display()))?
                .next()
                .is_some()
            {
                bail!(
                    "{} is not empty; give `--keep` a new or empty directory",
                    dir.display()
                );
            }
            Ok((super::context::worktree_path(dir)?, None))
        }
        None => {
            let dir = tempfile::Builder::new()
                .prefix("rewind-demo-")
                .tempdir()
                .context("cannot create a temporary directory")?;
            Ok((super::context::worktree_path(dir.path())?, Some(dir)))
        }
    }
}

fn git(repository: &Path, args: &[&str]) -> Result<()> {
    let status = Process::new("git")
        .args(args)
        .current_dir(repository)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .stdout(std::process::Stdio::null())
        .status()
        .context("cannot run git; the demo needs git on the PATH")?;
    if !status.success() {
        bail!(
            "`git {}` failed in {}",
            args.join(" "),
            repository.display()
        );
    }
    Ok(())
}

fn init_repository(repository: &Path) -> Result<()> {
    git(repository, &["init", "-q"])?;
    for (path, content) in INITIAL {
        write(repository, path, content)?;
    }
    git(repository, &["add", "-A"])?;
    git(
        repository,
        &[
            "-c",
            "user.name=rewind demo",
            "-c",
            "user.email=demo@rewind.invalid",
            "-c",
            "commit.gpgsign=false",
            "commit",
            "-q",
            "-m",
            "initial",
        ],
    )
}

fn write(repository: &Path, path: &str, content: &str) -> Result<()> {
    let target = repository.join(path);
    if let Some(parent) = target.parent() {
        std::fs::create_dir_all(parent)
            .with_context(|| format!("cannot create {}", parent.display()))?;
    }
    std::fs::write(&target, content).with_context(|| format!("cannot write {}", target.display()))
}

/// One turn: the prompt as the user message, then an assistant step during which the edits are made.
/// Returns the user message and the step's diff.
async fn record_turn(
    ctx: &Context,
    session: &SessionId,
    turn: &Turn,
    json: bool,
) -> Result<(MessageId, Vec<FileDiff>)> {
    let rewind = &ctx.services.rewind;
    let user = rewind
        .create_message(session, NewMessage::user_text(turn.prompt))
        .await
        .map_err(|error| explain(error, "recording the user message"))?;
    let assistant = rewind
        .create_message(session, NewMessage::assistant())
        .await
        .map_err(|error| explain(error, "recording the assistant message"))?;
    let start = rewind
        .begin_step(session, &assistant.info.id)
        .await
        .map_err(|error| explain(error, "beginning the step"))?;
    for edit in turn.edits {
        let line = apply(&ctx.path, edit)?;
        if !json {
            println!("   {line}");
        }
    }
    rewind
        .append_part(
            session,
            &assistant.info.id,
            NewPart::new(PartBody::text(format!("done: {}", turn.prompt))),
        )
        .await
        .map_err(|error| explain(error, "recording the assistant's text"))?;
    let parts = rewind
        .finish_step(session, &assistant.info.id, StepEnd::default())
        .await
        .map_err(|error| explain(error, "finishing the step"))?;
    let from = match &start.body {
        PartBody::StepStart(start) => start.snapshot.clone(),
        _ => None,
    };
    let to = parts.iter().find_map(|part| match &part.body {
        PartBody::StepFinish(finish) => finish.snapshot.clone(),
        _ => None,
    });
    let diff = match (from, to) {
        (Some(from), Some(to)) => ctx
            .services
            .snapshots
            .diff(&ctx.path, &from, &to)
            .await
            .map_err(|error| explain(error, "diffing the step"))?,
        _ => Vec::new(),
    };
    Ok((user.info.id, diff))
}

fn apply(repository: &Path, edit: &Edit) -> Result<String> {
    Ok(match edit {
        Edit::Write(path, content) => {
            let existed = repository.join(path).exists();
            write(repository, path, content)?;
            format!("{} {path}", if existed { "edit  " } else { "create" })
        }
        Edit::Chmod(path, mode) => {
            let target = repository.join(path);
            std::fs::set_permissions(&target, std::fs::Permissions::from_mode(*mode))
                .with_context(|| format!("cannot chmod {}", target.display()))?;
            format!("chmod  {path} {mode:o}")
        }
        Edit::Delete(path) => {
            let target = repository.join(path);
            std::fs::remove_file(&target)
                .with_context(|| format!("cannot delete {}", target.display()))?;
            // Like an agent's `rm`, leave no empty directory behind.
            if let Some(parent) = target.parent()
                && parent != repository
            {
                let _ = std::fs::remove_dir(parent);
            }
            format!("delete {path}")
        }
    })
}

async fn stage(
    ctx: &Context,
    name: &str,
    description: &str,
    changes: Vec<FileDiff>,
) -> Result<Stage> {
    let snapshot = ctx
        .services
        .snapshots
        .track(&ctx.path)
        .await
        .map_err(|error| explain(error, "snapshotting the stage"))?
        .id;
    Ok(Stage {
        name: name.to_owned(),
        description: description.to_owned(),
        snapshot: snapshot.to_string(),
        same_as: None,
        matches: None,
        files: read_files(&ctx.path)?,
        changes: changes.iter().map(super::history::FileRow::from).collect(),
    })
}

/// A revert or unrevert stage, compared with the earlier stage it must equal.
async fn compared(
    ctx: &Context,
    name: &str,
    stages: &[Stage],
    same_as: &str,
    changes: Vec<FileDiff>,
) -> Result<Stage> {
    let mut now = stage(ctx, name, &format!("must equal {same_as}"), changes).await?;
    let expected = stages.iter().find(|s| s.name == same_as).map(|s| &s.files);
    let matches = expected == Some(&now.files);
    if !ctx.json {
        println!(
            "   files now {} the state {same_as} left",
            if matches { "equal" } else { "DIFFER FROM" }
        );
    }
    now.same_as = Some(same_as.to_owned());
    now.matches = Some(matches);
    Ok(now)
}

fn show_files(files: &BTreeMap<String, FileState>, json: bool) {
    if json {
        return;
    }
    println!("   files:");
    for (path, state) in files {
        println!(
            "     {} {path} ({} lines)",
            state.mode,
            state.content.lines().count()
        );
    }
}

/// Every file under `root` but `.git`, with its mode and content.
pub fn read_files(root: &Path) -> Result<BTreeMap<String, FileState>> {
    let mut out = BTreeMap::new();
    let mut pending = vec![root.to_path_buf()];
    while let Some(dir) = pending.pop() {
        for entry in
            std::fs::read_dir(&dir).with_context(|| format!("cannot read {}", dir.display()))?
        {
            let entry = entry?;
            let path = entry.path();
            if entry.file_name() == ".git" {
                continue;
            }
            let metadata = std::fs::symlink_metadata(&path)?;
            if metadata.is_dir() {
                pending.push(path);
                continue;
            }
            let relative = directory_string(path.strip_prefix(root)?)?;
            let mode = if metadata.permissions().mode() & 0o111 != 0 {
                "100755"
            } else {
                "100644"
            };
            let content = std::fs::read_to_string(&path)
                .with_context(|| format!("cannot read {}", path.display()))?;
            out.insert(relative, FileState { mode, content });
        }
    }
    Ok(out)
}
