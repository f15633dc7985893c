//! The core end to end on the in-memory adapters: a session of three turns that write, edit, chmod and
//! delete files, then a revert to the first turn, a re-revert to the second, an unrevert, and the diffs and
//! summaries at each stage. `cargo run -p rewind-core --features testkit --example walkthrough`

use std::path::Path;
use std::sync::Arc;

use rewind_core::model::{MessageId, SessionId};
use rewind_core::service::{NewMessage, StepEnd};
use rewind_core::testkit::FakeHost;
use rewind_core::testkit::mem_repo::MemRepo;
use rewind_core::testkit::mem_snapshot::{MemFs, MemSnapshotStore};
use rewind_core::{RevertTarget, Rewind, ServiceConfig};

const ROOT: &str = "/demo/project";

fn main() -> Result<(), Box<dyn std::error::Error>> {
    futures::executor::block_on(run())
}

fn show(fs: &MemFs, stage: &str) {
    println!("\n  files {stage}:");
    for (path, node) in fs.list(Path::new(ROOT)) {
        let text = String::from_utf8_lossy(node.content()).replace('\n', "⏎");
        println!("    {:<6} {path:<16} {text}", node.mode());
    }
}

async fn turn(
    rewind: &Rewind,
    session: &SessionId,
    prompt: &str,
    edit: impl FnOnce(),
) -> Result<MessageId, Box<dyn std::error::Error>> {
    let user = rewind
        .create_message(session, NewMessage::user_text(prompt))
        .await?;
    let assistant = rewind
        .create_message(session, NewMessage::assistant())
        .await?;
    rewind.begin_step(session, &assistant.info.id).await?;
    edit();
    let parts = rewind
        .finish_step(session, &assistant.info.id, StepEnd::default())
        .await?;
    let files: Vec<String> = parts
        .iter()
        .filter_map(|p| p.as_patch())
        .flat_map(|p| {
            p.files.iter().map(|f| {
                f.trim_start_matches(ROOT)
                    .trim_start_matches('/')
                    .to_owned()
            })
        })
        .collect();
    println!("turn {prompt:?}: the step changed {files:?}");
    Ok(user.info.id)
}

async fn run() -> Result<(), Box<dyn std::error::Error>> {
    let fs = Arc::new(MemFs::new());
    let root = Path::new(ROOT);
    fs.create_worktree(root);
    fs.write(root, "README.md", b"# demo\n")?;
    fs.write(root, "src/main.rs", b"fn main() {}\n")?;
    let snapshots = Arc::new(MemSnapshotStore::new(fs.clone()));
    let rewind = Rewind::new(
        snapshots,
        Arc::new(MemRepo::new()),
        Arc::new(FakeHost::new(1_800_000_000_000)),
        ServiceConfig::default(),
    );
    let session = rewind
        .create_session(ROOT, Some("walkthrough".to_owned()))
        .await?;
    println!("session {} in {ROOT}", session.id);
    show(&fs, "at the start");

    let u1 = turn(&rewind, &session.id, "add a greeting", || {
        let _ = fs.write(
            root,
            "src/main.rs",
            b"fn main() {\n    println!(\"hello\");\n}\n",
        );
        let _ = fs.write(root, "run.sh", b"cargo run\n");
    })
    .await?;
    let u2 = turn(
        &rewind,
        &session.id,
        "make run.sh executable, drop the README",
        || {
            let _ = fs.set_executable(root, "run.sh", true);
            let _ = fs.remove(root, "README.md");
        },
    )
    .await?;
    let _u3 = turn(&rewind, &session.id, "add a library", || {
        let _ = fs.write(root, "src/lib.rs", b"pub fn answer() -> u32 {\n    42\n}\n");
    })
    .await?;
    show(&fs, "after three turns");

    let reverted = rewind
        .revert(
            &session.id,
            RevertTarget {
                message_id: u1,
                part_id: None,
            },
        )
        .await?;
    println!("\nrevert to turn 1: {:?}", reverted.summary);
    for diff in rewind.session_diff(&session.id).await? {
        println!(
            "  undone: {:<12} {:?} +{} -{}",
            diff.file, diff.status, diff.additions, diff.deletions
        );
    }
    show(&fs, "after revert to turn 1");

    let reverted = rewind
        .revert(
            &session.id,
            RevertTarget {
                message_id: u2,
                part_id: None,
            },
        )
        .await?;
    println!("\nre-revert to turn 2: {:?}", reverted.summary);
    show(&fs, "after re-revert to turn 2");

    rewind.unrevert(&session.id).await?;
    println!("\nunrevert");
    show(&fs, "after unrevert (as after three turns)");

    let warnings = rewind.warnings(&session.id).await?;
    println!("\nwarnings: {}", warnings.len());
    Ok(())
}
