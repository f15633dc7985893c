//! `snapshot restore` with its capture, and gc (delete old sessions, then collect what nothing refers to),
//! on the in-memory adapters: the oracle is the in-memory store's own trees and files.

use std::time::Duration;

use rewind_core::MessageRepo;
use rewind_core::SnapshotPort;
use rewind_core::model::{RelPath, SnapshotId};
use rewind_core::service::{GcRequest, NewMessage};

use crate::support::{ROOT, World, block_on};

const DAY_MS: u64 = 24 * 60 * 60 * 1000;

fn collect_all() -> GcRequest {
    GcRequest {
        older_than_ms: None,
        grace: Duration::ZERO,
        directories: Vec::new(),
    }
}

/// gc of what is older than a week, then of everything unreferenced.
fn older_than_a_week() -> GcRequest {
    GcRequest {
        older_than_ms: Some(7 * DAY_MS),
        ..collect_all()
    }
}

async fn track(world: &World) -> SnapshotId {
    world.snapshots.track(world.path()).await.expect("track").id
}

/// A restore has no intent record: the caller is told the capture once it is recorded, before any file
/// is touched, so a restore killed halfway can be put back with it (`snapshot restore` prints it).
#[test]
fn restore_tells_its_capture_before_it_touches_a_file() {
    block_on(async {
        let world = World::new();
        world.write("a.txt", "a1\n");
        let first = track(&world).await;
        world.write("a.txt", "a2\n");
        let told = std::sync::Mutex::new(None);
        let done = world
            .rewind
            .restore_snapshot_reporting(ROOT, &first, None, |capture| {
                *told.lock().expect("lock") = Some((capture.clone(), world.state(&["a.txt"])));
            })
            .await
            .expect("restore");
        let (capture, files_then) = told
            .into_inner()
            .expect("lock")
            .expect("told before the restore returned");
        assert_eq!(capture, done.capture);
        assert_eq!(files_then, ["a2\n"], "no file was touched yet");
        let recorded = world.rewind.captures(Some(ROOT)).await.expect("captures");
        assert_eq!(recorded.last().map(|c| &c.snapshot), Some(&capture));
        assert_eq!(world.state(&["a.txt"]), ["a1\n"]);
    })
}

#[test]
fn restore_of_one_path_records_a_capture_first_and_touches_no_other_file() {
    block_on(async {
        let world = World::new();
        world.write("a.txt", "a1\n");
        world.write("b.txt", "b1\n");
        let first = track(&world).await;
        world.write("a.txt", "a2\n");
        world.write("b.txt", "b2\n");
        world.write("c.txt", "new\n");

        let done = world
            .rewind
            .restore_snapshot(
                ROOT,
                &first,
                Some(vec![RelPath::new("a.txt").expect("path")]),
            )
            .await
            .expect("restore");

        assert_eq!(
            world.state(&["a.txt", "b.txt", "c.txt"]),
            ["a1\n", "b2\n", "new\n"]
        );
        let captured = world
            .snapshots
            .tree(world.path(), &done.capture)
            .expect("the capture is a stored snapshot");
        assert_eq!(
            captured.get("a.txt").map(|n| n.content().to_vec()),
            Some(b"a2\n".to_vec()),
            "the capture holds the state the restore overwrote"
        );
        let captures = world.rewind.captures(Some(ROOT)).await.expect("captures");
        assert_eq!(captures.len(), 1);
        assert_eq!(captures[0].snapshot, done.capture);
        assert_eq!(captures[0].paths, ["a.txt"]);
        let referenced = world
            .repo
            .referenced_snapshots(Some(ROOT.to_owned()))
            .await
            .expect("referenced");
        assert!(referenced.contains(&done.capture));

        // The restore can itself be undone from its capture.
        world
            .rewind
            .restore_snapshot(ROOT, &done.capture, None)
            .await
            .expect("restore the capture");
        assert_eq!(
            world.state(&["a.txt", "b.txt", "c.txt"]),
            ["a2\n", "b2\n", "new\n"]
        );
    });
}

#[test]
fn restore_is_refused_while_a_step_is_open_and_changes_nothing() {
    block_on(async {
        let world = World::new();
        world.write("a.txt", "a1\n");
        let first = track(&world).await;
        let session = world.session().await;
        world
            .rewind
            .create_message(&session.id, NewMessage::user_text("go"))
            .await
            .expect("user");
        let assistant = world
            .rewind
            .create_message(&session.id, NewMessage::assistant())
            .await
            .expect("assistant");
        world
            .rewind
            .begin_step(&session.id, &assistant.info.id)
            .await
            .expect("begin");
        world.write("a.txt", "a2\n");

        let refused = world.rewind.restore_snapshot(ROOT, &first, None).await;
        assert!(
            matches!(refused, Err(rewind_core::Error::Busy { .. })),
            "{refused:?}"
        );
        assert_eq!(world.state(&["a.txt"]), ["a2\n"]);
        assert!(
            world
                .rewind
                .captures(None)
                .await
                .expect("captures")
                .is_empty()
        );
    });
}

#[test]
fn gc_collects_unreferenced_snapshots_and_keeps_every_referenced_one() {
    block_on(async {
        let world = World::new();
        let session = world.session().await;
        let one = world
            .turn(&session.id, "one", |w| w.write("a.txt", "one\n"))
            .await;
        world
            .turn(&session.id, "two", |w| w.write("a.txt", "two\n"))
            .await;
        world.write("stray.txt", "nobody refers to this\n");
        let stray = track(&world).await;
        world.remove("stray.txt");
        track(&world).await;
        let referenced = world
            .repo
            .referenced_snapshots(Some(ROOT.to_owned()))
            .await
            .expect("referenced");
        assert!(!referenced.contains(&stray));

        let summary = world.rewind.gc(collect_all()).await.expect("gc");

        assert!(summary.sessions_deleted.is_empty());
        assert_eq!(summary.worktrees.len(), 1);
        assert_eq!(summary.worktrees[0].directory, ROOT);
        assert_eq!(summary.worktrees[0].kept_snapshots, referenced.len() as u64);
        assert!(summary.objects_removed() >= 1, "{summary:?}");
        assert!(world.snapshots.tree(world.path(), &stray).is_none());
        for id in &referenced {
            assert!(
                world.snapshots.tree(world.path(), id).is_some(),
                "gc removed the referenced snapshot {id}"
            );
        }
        // The session still reverts after gc.
        world.revert_to(&session.id, &one.user).await;
        assert_eq!(world.state(&["a.txt"]), ["-"]);
    });
}

#[test]
fn gc_older_than_deletes_old_sessions_and_then_their_snapshots() {
    block_on(async {
        let world = World::new();
        let old = world.session().await;
        world
            .turn(&old.id, "old", |w| w.write("old.txt", "old\n"))
            .await;
        let old_refs = world
            .repo
            .referenced_snapshots(Some(ROOT.to_owned()))
            .await
            .expect("referenced");
        world.host.advance(10 * DAY_MS);
        world.remove("old.txt");
        let new = world.session().await;
        world
            .turn(&new.id, "new", |w| w.write("new.txt", "new\n"))
            .await;
        let new_refs: Vec<SnapshotId> = world
            .repo
            .referenced_snapshots(Some(ROOT.to_owned()))
            .await
            .expect("referenced")
            .difference(&old_refs)
            .cloned()
            .collect();

        let summary = world.rewind.gc(older_than_a_week()).await.expect("gc");

        assert_eq!(summary.sessions_deleted, std::slice::from_ref(&old.id));
        assert!(world.rewind.session(&old.id).await.is_err());
        assert!(world.rewind.session(&new.id).await.is_ok());
        let still = world
            .repo
            .referenced_snapshots(Some(ROOT.to_owned()))
            .await
            .expect("referenced");
        for id in old_refs.iter().filter(|id| !still.contains(id)) {
            assert!(
                world.snapshots.tree(world.path(), id).is_none(),
                "the deleted session's snapshot {id} was not collected"
            );
        }
        assert!(old_refs.iter().any(|id| !still.contains(id)));
        for id in &new_refs {
            assert!(world.snapshots.tree(world.path(), id).is_some());
        }
    });
}

#[test]
fn gc_leaves_a_busy_old_session_alone_and_deletes_old_captures() {
    block_on(async {
        let world = World::new();
        world.write("a.txt", "a1\n");
        let first = track(&world).await;
        world.write("a.txt", "a2\n");
        let restored = world
            .rewind
            .restore_snapshot(ROOT, &first, None)
            .await
            .expect("restore");
        let session = world.session().await;
        world
            .rewind
            .create_message(&session.id, NewMessage::user_text("go"))
            .await
            .expect("user");
        let assistant = world
            .rewind
            .create_message(&session.id, NewMessage::assistant())
            .await
            .expect("assistant");
        world
            .rewind
            .begin_step(&session.id, &assistant.info.id)
            .await
            .expect("begin");
        world.host.advance(10 * DAY_MS);

        let summary = world.rewind.gc(older_than_a_week()).await.expect("gc");

        assert!(summary.sessions_deleted.is_empty());
        assert_eq!(summary.sessions_skipped.len(), 1);
        assert_eq!(summary.sessions_skipped[0].session_id, session.id);
        assert!(world.rewind.session(&session.id).await.is_ok());
        assert_eq!(summary.captures_deleted, 1);
        assert!(
            world
                .rewind
                .captures(None)
                .await
                .expect("captures")
                .is_empty()
        );
        assert!(
            world
                .snapshots
                .tree(world.path(), &restored.capture)
                .is_none(),
            "an expired capture's snapshot is collected"
        );
    });
}

#[test]
fn restore_from_an_unknown_snapshot_records_nothing_and_changes_nothing() {
    block_on(async {
        let world = World::new();
        world.write("a.txt", "a1\n");
        let unknown = SnapshotId::parse(&"1".repeat(40)).expect("id");
        let refused = world.rewind.restore_snapshot(ROOT, &unknown, None).await;
        assert!(refused.is_err(), "{refused:?}");
        assert_eq!(world.state(&["a.txt"]), ["a1\n"]);
        assert!(
            world
                .rewind
                .captures(None)
                .await
                .expect("captures")
                .is_empty()
        );
    });
}

/// A session of three turns, each writing `a.txt` (its last content: "three").
async fn three_turns() -> (World, rewind_core::model::Session) {
    let world = World::new();
    let session = world.session().await;
    for turn in ["one", "two", "three"] {
        world
            .turn(&session.id, turn, |w| w.write("a.txt", turn))
            .await;
    }
    (world, session)
}

/// gc keeps only the newest `outbox_kept` events of the outbox (they exist to reach the event streams,
/// which follow the outbox within milliseconds); the sessions, messages and files are untouched, and
/// the events recorded after gc take the positions after the newest one kept.
#[test]
fn gc_deletes_old_outbox_events_and_keeps_the_newest() {
    block_on(async {
        let (world, session) = three_turns().await;
        let last = world.repo.last_event_seq().await.expect("outbox end");
        assert!(last > 5, "the turns recorded events: {last}");
        let keeping_five = rewind_core::Rewind::new(
            world.snapshots.clone(),
            world.repo.clone(),
            world.host.clone(),
            rewind_core::ServiceConfig {
                outbox_kept: 5,
                ..rewind_core::ServiceConfig::default()
            },
        );
        let messages_before = world.messages(&session.id).await;

        let summary = keeping_five.gc(collect_all()).await.expect("gc");
        assert_eq!(summary.events_deleted, last - 5);
        let left: Vec<u64> = world.events().await.iter().map(|e| e.seq).collect();
        assert_eq!(left, ((last - 4)..=last).collect::<Vec<_>>());
        assert_eq!(world.messages(&session.id).await, messages_before);
        assert_eq!(world.read("a.txt").as_deref(), Some("three"));

        let again = keeping_five.gc(collect_all()).await.expect("gc again");
        assert_eq!(again.events_deleted, 0, "nothing older is left");
        world
            .turn(&session.id, "four", |w| w.write("a.txt", "four"))
            .await;
        assert_eq!(
            world.events().await.first().map(|e| e.seq),
            Some(last - 4),
            "new events go after the newest kept"
        );
        assert!(world.repo.last_event_seq().await.expect("end") > last);
        // The default keeps 10,000: nothing goes.
        assert_eq!(
            world
                .rewind
                .gc(collect_all())
                .await
                .expect("gc")
                .events_deleted,
            0
        );
    });
}

/// gc also keeps no more than `outbox_kept_bytes` of event text, counted from the newest event back (a
/// large revert's events outlive its session, each with its diff): with a budget the three newest events
/// fit and the fourth passes, those three stay; with none, the newest stays alone. The memory adapter
/// counts an event as its JSON text.
#[test]
fn gc_keeps_the_outbox_within_its_byte_budget() {
    block_on(async {
        let (world, session) = three_turns().await;
        let events = world.events().await;
        let seqs = |events: &[rewind_core::model::StoredEvent]| -> Vec<u64> {
            events.iter().map(|e| e.seq).collect()
        };
        let size = |e: &rewind_core::model::StoredEvent| -> u64 {
            serde_json::to_string(&e.event).map_or(0, |t| t.len() as u64)
        };
        assert!(events.len() > 5, "the turns recorded events");
        let newest_three: u64 = events.iter().rev().take(3).map(size).sum();
        let fourth = size(&events[events.len() - 4]);
        let keeping = |bytes: u64| {
            rewind_core::Rewind::new(
                world.snapshots.clone(),
                world.repo.clone(),
                world.host.clone(),
                rewind_core::ServiceConfig {
                    outbox_kept_bytes: bytes,
                    ..rewind_core::ServiceConfig::default()
                },
            )
        };
        let messages_before = world.messages(&session.id).await;

        let summary = keeping(newest_three + fourth - 1)
            .gc(collect_all())
            .await
            .expect("gc");
        assert_eq!(summary.events_deleted, events.len() as u64 - 3);
        assert_eq!(
            seqs(&world.events().await),
            seqs(&events[events.len() - 3..]),
            "the events that fit stay"
        );
        let summary = keeping(newest_three).gc(collect_all()).await.expect("gc");
        assert_eq!(summary.events_deleted, 0, "what is left fits");

        let summary = keeping(0).gc(collect_all()).await.expect("gc");
        assert_eq!(summary.events_deleted, 2);
        assert_eq!(
            seqs(&world.events().await),
            seqs(&events[events.len() - 1..]),
            "the newest event stays whatever its size"
        );
        assert_eq!(world.messages(&session.id).await, messages_before);
        assert_eq!(world.read("a.txt").as_deref(), Some("three"));
    });
}

/// gc reads what to keep only while the worktree's lease is free, and a step's end holds it from its
/// track to the commit that stores its end snapshot: a gc that comes in between (here while that commit
/// is paused) leaves the worktree for its next run instead of collecting the snapshot about to be stored
/// (black-box: `gc
/// --grace-seconds 0` beside a recording agent collected snapshots the database then named, and the next
/// step could never be closed). The next gc, with nothing in between, keeps it as referenced.
#[test]
fn gc_never_collects_a_snapshot_between_its_track_and_the_commit_that_stores_it() {
    block_on(async {
        let world = World::new();
        world.write("a.txt", "a0");
        let session = world.session().await;
        let message = world.prompt(&session.id, "a step").await;
        world
            .rewind
            .begin_step(&session.id, &message)
            .await
            .expect("begin");
        world.write("a.txt", "by the step");
        let (reached, resume) = world.repo.pause_next_commit();
        let finishing = world.rewind.finish_step(
            &session.id,
            &message,
            rewind_core::service::StepEnd::default(),
        );
        let gc_between = async {
            reached.await.expect("the finish reached its commit");
            // Another track (the user's `snapshot track`) moves the store's stat cache to another tree,
            // so nothing but gc's care keeps the end snapshot (review: the cache kept it anyway).
            world.write("b.txt", "after the step's end snapshot");
            track(&world).await;
            let summary = world.rewind.gc(collect_all()).await.expect("gc");
            let _ = resume.send(());
            summary
        };
        let (parts, summary) = futures::future::join(finishing, gc_between).await;
        let parts = parts.expect("the step is finished");
        let end = parts
            .iter()
            .find_map(|p| match &p.body {
                rewind_core::model::PartBody::StepFinish(finish) => finish.snapshot.clone(),
                _ => None,
            })
            .unwrap_or_else(|| panic!("an end snapshot: {parts:?}"));
        assert!(world.snapshots.tree(world.path(), &end).is_some());
        let entry = summary
            .worktrees
            .iter()
            .find(|w| w.directory == ROOT)
            .unwrap_or_else(|| panic!("{summary:?}"));
        assert!(
            entry.error.as_deref().is_some_and(
                |e| e.starts_with("Worktree is busy") && e.matches("try again").count() == 1
            ),
            "{entry:?}"
        );
        let again = world.rewind.gc(collect_all()).await.expect("gc");
        assert!(
            again.worktrees.iter().all(|w| w.error.is_none()),
            "{again:?}"
        );
        assert!(world.snapshots.tree(world.path(), &end).is_some());
    })
}

/// gc lists the sessions, then deletes the old ones one by one: a session used between the two (a turn, an
/// undo) is judged again once gc holds its lease, and stays, reported as skipped, with what the use stored
/// (black-box: the undo's revert was deleted with the session, the worktree left reverted with nothing to
/// redo it).
#[test]
fn gc_keeps_an_old_session_used_while_it_ran() {
    block_on(async {
        let world = World::new();
        let session = world.session().await;
        let turn = world
            .turn(&session.id, "one", |w| w.write("a.txt", "a1\n"))
            .await;
        world.host.advance(10 * DAY_MS);
        // gc stops where it takes the old session's lease; the session is reverted meanwhile.
        let (reached, resume) = world.repo.pause_next_lease_take();
        let collecting = world.rewind.gc(older_than_a_week());
        let reverting = async {
            reached.await.expect("gc takes the session's lease");
            let reverted = world.try_revert_to(&session.id, &turn.user).await;
            resume.send(()).expect("resume gc");
            reverted
        };
        let (summary, reverted) = futures::future::join(collecting, reverting).await;
        reverted.expect("the revert");
        let summary = summary.expect("gc");
        assert!(summary.sessions_deleted.is_empty(), "{summary:?}");
        assert_eq!(summary.sessions_skipped.len(), 1);
        assert_eq!(summary.sessions_skipped[0].session_id, session.id);
        let kept = world.rewind.session(&session.id).await.expect("kept");
        assert_eq!(
            kept.revert.as_ref().map(|r| &r.message_id),
            Some(&turn.user)
        );
        assert_eq!(world.read("a.txt"), None);
        // Unused since, it is deleted by the next gc past the cut-off.
        world.host.advance(10 * DAY_MS);
        let summary = world.rewind.gc(older_than_a_week()).await.expect("gc");
        assert_eq!(summary.sessions_deleted, std::slice::from_ref(&session.id));
    });
}

/// The command line deletes a session it created when the session's first turn cannot begin, unless it
/// holds a message: judged by the delete's own guard, so a message another process records after the
/// command looked, and before the delete took the lease, keeps the session (black-box: the message was
/// deleted with it).
#[test]
fn a_delete_of_an_empty_session_keeps_one_that_got_a_message_meanwhile() {
    use rewind_core::service::DeleteIf;
    block_on(async {
        let world = World::new();
        let session = world.session().await;
        let deleted = with_a_message_at_the_lease_take(
            &world,
            &session.id,
            world
                .rewind
                .delete_session_if(&session.id, Some(DeleteIf::Empty)),
        )
        .await;
        assert!(!deleted.expect("refused, not failed"));
        assert_eq!(world.messages(&session.id).await.len(), 1);
        // Empty, it is deleted.
        let empty = world.session().await;
        assert!(
            world
                .rewind
                .delete_session_if(&empty.id, Some(DeleteIf::Empty))
                .await
                .expect("delete")
        );
        assert!(world.rewind.session(&empty.id).await.is_err());
    });
}

/// A restore looks for open steps before it takes the worktree, and again once it holds it: a step that
/// began in between (a step holds the worktree only while it tracks) makes it busy, and nothing is
/// recorded or written (review: the restore went on, and the step's patch then named the restored files as
/// the agent's change, undone with its turn).
#[test]
fn a_restore_is_busy_when_a_step_began_before_it_held_the_worktree() {
    block_on(async {
        let world = World::new();
        world.write("a.txt", "a1\n");
        let first = track(&world).await;
        world.write("a.txt", "a2\n");
        let session = world.session().await;
        let assistant = world.prompt(&session.id, "go").await;
        let captures = world.rewind.captures(None).await.expect("captures").len();
        let (reached, resume) = world.repo.pause_next_lease_take();
        let restoring = world.rewind.restore_snapshot(ROOT, &first, None);
        let stepping = async {
            reached.await.expect("the restore takes the worktree");
            world
                .rewind
                .begin_step(&session.id, &assistant)
                .await
                .expect("the step begins while the worktree is free");
            resume.send(()).expect("resume the restore");
        };
        let (restored, ()) = futures::future::join(restoring, stepping).await;
        assert!(
            matches!(&restored, Err(rewind_core::Error::Busy { .. })),
            "{restored:?}"
        );
        assert_eq!(world.read("a.txt").as_deref(), Some("a2\n"));
        assert_eq!(
            world.rewind.captures(None).await.expect("captures").len(),
            captures
        );
    });
}

/// A message recorded without a step (a user's prompt) does not change the session's update time, but
/// it is use all the same: gc keeps an old session whose newest message is newer than the cut-off, also
/// one recorded while gc ran, before it took the session's lease.
#[test]
fn gc_keeps_an_old_session_given_a_message_while_it_ran() {
    block_on(async {
        let world = World::new();
        let session = world.session().await;
        world.host.advance(10 * DAY_MS);
        let collecting = world.rewind.gc(older_than_a_week());
        let summary = with_a_message_at_the_lease_take(&world, &session.id, collecting)
            .await
            .expect("gc");
        assert!(summary.sessions_deleted.is_empty(), "{summary:?}");
        assert_eq!(world.messages(&session.id).await.len(), 1);
    });
}

/// Runs `operation`, and records a user message in `session` where the operation is about to take its
/// next lease (still free then, so the message is stored): what another process does between the
/// operation's look and its lease.
async fn with_a_message_at_the_lease_take<T>(
    world: &World,
    session: &rewind_core::model::SessionId,
    operation: impl std::future::Future<Output = T>,
) -> T {
    let (reached, resume) = world.repo.pause_next_lease_take();
    let recording = async {
        reached.await.expect("the operation takes a lease");
        world
            .rewind
            .create_message(session, NewMessage::user_text("meanwhile"))
            .await
            .expect("the message, recorded while the lease is free");
        resume.send(()).expect("resume the operation");
    };
    futures::future::join(operation, recording).await.0
}
