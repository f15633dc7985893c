//! The services' interaction rules, checked with a mocked snapshot port (mockall) over the in-memory
//! repository: what they call, in which order, and what they must not call or store after a failure.

use std::sync::Arc;

use mockall::Sequence;
use mockall::predicate::always;
use rewind_core::model::{
    EventPayload, FileDiff, FileStatus, Holder, HolderKind, Lease, LeaseKey, LeaseTake, LeaseToken,
    MessageWithParts, OpenStep, PartBody, ProcessIdentity, RelPath, RestoreOutcome,
    RevertDescriptor, RevertDiffs, RevertOutcome, Session, SessionTime, SnapshotId, Tokens,
    TrackOutcome,
};
use rewind_core::ports::MockSnapshotPort;
use rewind_core::testkit::FakeHost;
use rewind_core::testkit::mem_repo::MemRepo;
use rewind_core::testkit::strategies::{MessageShape, PartShape, WORKTREE, build_session};
use rewind_core::{Change, Error, MessageRepo, RevertTarget, Rewind, ServiceConfig, Transaction};

use crate::support::block_on;

fn sid(n: u64) -> SnapshotId {
    SnapshotId::parse(&format!("{:040x}", 0xabc0_0000 + n)).expect("hex")
}

fn rel(path: &str) -> RelPath {
    RelPath::new(path).expect("path")
}

fn tracked(n: u64) -> rewind_core::Result<TrackOutcome> {
    Ok(TrackOutcome {
        id: sid(n),
        skipped: Vec::new(),
        hashed: 0,
    })
}

/// U0 [text]; A1 [step-start, step-finish, patch a.txt]; U2 [text]; A3 [step-start, step-finish, patch b.txt]
fn messages() -> Vec<MessageWithParts> {
    use PartShape::*;
    build_session(&[
        MessageShape {
            role: rewind_core::model::Role::User,
            parts: vec![Text],
        },
        MessageShape {
            role: rewind_core::model::Role::Assistant,
            parts: vec![StepStart, StepFinish, Patch(vec!["a.txt".to_owned()])],
        },
        MessageShape {
            role: rewind_core::model::Role::User,
            parts: vec![Text],
        },
        MessageShape {
            role: rewind_core::model::Role::Assistant,
            parts: vec![StepStart, StepFinish, Patch(vec!["b.txt".to_owned()])],
        },
    ])
}

struct Fixture {
    repo: Arc<MemRepo>,
    host: Arc<FakeHost>,
    session: Session,
    messages: Vec<MessageWithParts>,
}

/// Stores the session of `messages()` with `revert`/`applied`/`step` as given.
fn fixture(revert: Option<(SnapshotId, SnapshotId)>, step: Option<OpenStep>) -> Fixture {
    let repo = Arc::new(MemRepo::new());
    let host = Arc::new(FakeHost::new(1_900_000_000_000));
    let messages = messages();
    let session = Session {
        id: messages[0].info.session_id.clone(),
        slug: "s".to_owned(),
        project_id: "p".to_owned(),
        directory: WORKTREE.to_owned(),
        parent_id: None,
        title: "t".to_owned(),
        version: "0".to_owned(),
        metadata: None,
        time: SessionTime::default(),
        summary: None,
        cost: 0.0,
        tokens: Tokens::default(),
        revert: revert.as_ref().map(|(snapshot, _)| RevertDescriptor {
            message_id: messages[2].info.id.clone(),
            part_id: None,
            snapshot: Some(snapshot.clone()),
            diff: Some(String::new()),
        }),
        store: "memory".to_owned(),
        applied: revert.map(|(_, applied)| applied),
        reverted_at: None,
        step,
        skipped: Vec::new(),
    };
    let mut changes = vec![Change::PutSession(Box::new(session.clone()))];
    for message in &messages {
        changes.push(Change::PutMessage(Box::new(message.info.clone())));
        for part in &message.parts {
            changes.push(Change::PutPart(Box::new(part.clone())));
        }
    }
    block_on(repo.commit(Transaction {
        guards: Vec::new(),
        changes,
        events: Vec::new(),
    }))
    .expect("fixture stored");
    Fixture {
        repo,
        host,
        session,
        messages,
    }
}

impl Fixture {
    fn rewind(&self, snapshots: MockSnapshotPort) -> Rewind {
        Rewind::new(
            Arc::new(snapshots),
            self.repo.clone(),
            self.host.clone(),
            ServiceConfig::default(),
        )
    }

    fn last_seq(&self) -> u64 {
        block_on(self.repo.events_after(0, 100_000))
            .expect("events")
            .last()
            .map_or(0, |e| e.seq)
    }

    fn events_after(&self, seq: u64) -> Vec<EventPayload> {
        block_on(self.repo.events_after(seq, 100_000))
            .expect("events")
            .into_iter()
            .map(|e| e.event.payload)
            .collect()
    }

    /// An open step in A3 held by `process`, with its lease.
    fn open_step(&self, process: ProcessIdentity) -> OpenStep {
        let token = LeaseToken("tok_step".to_owned());
        let holder = Holder {
            kind: HolderKind::Process,
            process,
        };
        block_on(self.repo.take_lease(
            &Lease {
                key: LeaseKey::Session(self.session.id.clone()),
                token: token.clone(),
                holder: holder.clone(),
                expires_at: 0,
            },
            None,
        ))
        .expect("lease");
        OpenStep {
            message_id: self.messages[3].info.id.clone(),
            snapshot: sid(50),
            token,
            holder,
            started: 0,
        }
    }
}

fn with_step(live: bool) -> Fixture {
    with_step_of(|base| {
        let owner = ProcessIdentity {
            host: "test-host".to_owned(),
            pid: 4242,
            start_time: 7,
            boot: None,
            machine: None,
        };
        if !live {
            base.host.kill(&owner);
        }
        owner
    })
}

/// The fixture with a step open in A3, owned by the process `owner` names.
fn with_step_of(owner: impl FnOnce(&Fixture) -> ProcessIdentity) -> Fixture {
    let base = fixture(None, None);
    let step = base.open_step(owner(&base));
    let mut session = base.session.clone();
    session.step = Some(step);
    block_on(base.repo.commit(Transaction {
        guards: Vec::new(),
        changes: vec![Change::PutSession(Box::new(session.clone()))],
        events: Vec::new(),
    }))
    .expect("step stored");
    Fixture { session, ..base }
}

#[test]
fn revert_and_unrevert_with_an_open_step_are_busy_and_call_nothing_else() {
    let f = with_step(true);
    let before = f.last_seq();
    // No expectation is set: any snapshot call fails the test.
    let rewind = f.rewind(MockSnapshotPort::new());
    let target = RevertTarget {
        message_id: f.messages[0].info.id.clone(),
        part_id: None,
    };
    let revert = block_on(rewind.revert(&f.session.id, target));
    // Its own step is said as its own, not another session's of the worktree (review).
    assert!(
        matches!(&revert, Err(Error::Busy { message, .. })
            if message.contains(&format!("in session {} (this session)", f.session.id))),
        "{revert:?}"
    );
    let unrevert = block_on(rewind.unrevert(&f.session.id));
    assert!(matches!(unrevert, Err(Error::Busy { .. })), "{unrevert:?}");
    assert_eq!(f.last_seq(), before, "no event");
    let stored = block_on(f.repo.session(&f.session.id))
        .expect("read")
        .expect("session");
    assert_eq!(stored, f.session, "the session is unchanged");
}

/// Puts a worktree lease held by another operation (of another process, `owner`) in the fixture's store.
fn worktree_held_by(f: &Fixture, owner: &ProcessIdentity) -> LeaseToken {
    let token = LeaseToken("tok_other_operation".to_owned());
    let taken = block_on(f.repo.take_lease(
        &Lease {
            key: LeaseKey::Worktree(WORKTREE.to_owned()),
            token: token.clone(),
            holder: Holder {
                kind: HolderKind::Process,
                process: owner.clone(),
            },
            expires_at: u64::MAX,
        },
        None,
    ))
    .expect("lease");
    assert_eq!(taken, rewind_core::model::LeaseTake::Taken);
    token
}

/// While another live operation holds the worktree, a revert is busy, asks the snapshot store nothing, and
/// leaves no lease of its own behind (the two leases are taken together or, one by one, given back).
#[test]
fn a_worktree_held_by_a_live_operation_makes_revert_busy_and_takes_nothing() {
    let f = fixture(None, None);
    let owner = ProcessIdentity {
        host: "test-host".to_owned(),
        pid: 5151,
        start_time: 3,
        boot: None,
        machine: None,
    };
    let token = worktree_held_by(&f, &owner);
    // No expectation is set: any snapshot call fails the test.
    let rewind = f.rewind(MockSnapshotPort::new());
    let target = RevertTarget {
        message_id: f.messages[0].info.id.clone(),
        part_id: None,
    };
    let revert = block_on(rewind.revert(&f.session.id, target));
    assert!(
        matches!(&revert, Err(Error::Busy { message, .. }) if message.contains("Worktree is busy")),
        "{revert:?}"
    );
    assert_eq!(
        block_on(f.repo.lease(&LeaseKey::Session(f.session.id.clone()))).expect("read"),
        None,
        "the session's lease is not left taken"
    );
    assert_eq!(
        block_on(f.repo.lease(&LeaseKey::Worktree(WORKTREE.to_owned())))
            .expect("read")
            .map(|l| l.token),
        Some(token),
        "the other operation keeps the worktree"
    );
}

/// A worktree lease whose owner is gone is taken over by the next revert (the paired take is refused, the
/// one-by-one way applies the takeover rule): the revert gets as far as its track, and gives both leases
/// back when it fails there.
#[test]
fn a_worktree_held_by_a_dead_operation_is_taken_over() {
    let f = fixture(None, None);
    let owner = ProcessIdentity {
        host: "test-host".to_owned(),
        pid: 5252,
        start_time: 3,
        boot: None,
        machine: None,
    };
    worktree_held_by(&f, &owner);
    f.host.kill(&owner);
    let mut snapshots = MockSnapshotPort::new();
    snapshots
        .expect_track()
        .times(1)
        .returning(|_| Err(Error::backend("the test stops the revert here")));
    let rewind = f.rewind(snapshots);
    let target = RevertTarget {
        message_id: f.messages[0].info.id.clone(),
        part_id: None,
    };
    let revert = block_on(rewind.revert(&f.session.id, target));
    assert!(
        matches!(&revert, Err(Error::Backend(source)) if source.to_string().contains("stops the revert here")),
        "the revert took the leases and reached its track: {revert:?}"
    );
    for key in [
        LeaseKey::Session(f.session.id.clone()),
        LeaseKey::Worktree(WORKTREE.to_owned()),
    ] {
        assert_eq!(
            block_on(f.repo.lease(&key)).expect("read"),
            None,
            "{key:?} is given back after the failure"
        );
    }
}

#[test]
fn an_abandoned_step_is_aborted_first() {
    let f = with_step(false);
    let mut snapshots = MockSnapshotPort::new();
    let mut seq = Sequence::new();
    // The end's track and what changed since the start, from one look.
    snapshots
        .expect_track_changes()
        .withf(|_, from| from == &sid(50))
        .times(1)
        .in_sequence(&mut seq)
        .returning(|_, _| Ok((tracked(51)?, Ok(vec![rel("c.txt")]))));
    // The snapshots differ only where the patch says: no file became ignored.
    snapshots
        .expect_changed_between()
        .withf(|_, from, to| from == &sid(50) && to == &sid(51))
        .times(1)
        .in_sequence(&mut seq)
        .returning(|_, _, _| Ok(vec![rel("c.txt")]));
    snapshots
        .expect_diff()
        .times(1)
        .in_sequence(&mut seq)
        .returning(|_, _, _| Ok(Vec::new()));
    let rewind = f.rewind(snapshots);
    // Unrevert of a session that is not reverted does nothing else, once the abandoned step is aborted.
    let session = block_on(rewind.unrevert(&f.session.id)).expect("unrevert");
    assert!(session.step.is_none());
    let message = block_on(f.repo.message(&f.session.id, &f.messages[3].info.id))
        .expect("read")
        .expect("message");
    let tail: Vec<_> = message.parts.iter().rev().take(2).collect();
    match (&tail[1].body, &tail[0].body) {
        (PartBody::StepFinish(finish), PartBody::Patch(patch)) => {
            assert_eq!(finish.reason, "aborted");
            assert_eq!(finish.snapshot, Some(sid(51)));
            assert_eq!(patch.hash, sid(50));
            assert_eq!(patch.files, [format!("{WORKTREE}/c.txt")]);
        }
        other => panic!("expected step-finish and patch, got {other:?}"),
    }
    assert!(
        block_on(f.repo.lease(&LeaseKey::Session(f.session.id.clone())))
            .expect("lease")
            .is_none()
    );
    // Its end snapshot was taken at the abort, not when its owner stopped: the session is told that the
    // patch may hold later changes, and which snapshot holds the files as they were then.
    let warnings = block_on(f.repo.warnings(&f.session.id)).expect("warnings");
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(
        warnings[0].message.contains("after the owner stopped"),
        "{warnings:?}"
    );
    assert_eq!(warnings[0].snapshot, Some(sid(51)));
    assert_eq!(warnings[0].files, [format!("{WORKTREE}/c.txt")]);
}

/// A step's patch names the files its two snapshots differ in: one the worktree shows changed since the
/// start but the snapshots hold alike was written after the end's track (here `late.txt`, as a user's
/// write a moment later), not by the step, and is left out, with no warning (black-box: under concurrent
/// edits, patches named files their step's snapshots held alike).
#[test]
fn a_step_s_patch_leaves_out_a_file_written_after_its_end_snapshot() {
    let f = with_step(false);
    let mut snapshots = MockSnapshotPort::new();
    snapshots
        .expect_track_changes()
        .times(1)
        .returning(|_, _| Ok((tracked(51)?, Ok(vec![rel("c.txt"), rel("late.txt")]))));
    snapshots
        .expect_changed_between()
        .withf(|_, from, to| from == &sid(50) && to == &sid(51))
        .times(1)
        .returning(|_, _, _| Ok(vec![rel("c.txt")]));
    snapshots.expect_diff().returning(|_, _, _| Ok(Vec::new()));
    let rewind = f.rewind(snapshots);
    block_on(rewind.unrevert(&f.session.id)).expect("the abandoned step is aborted");
    let message = block_on(f.repo.message(&f.session.id, &f.messages[3].info.id))
        .expect("read")
        .expect("message");
    let patch = message
        .parts
        .iter()
        .find_map(|p| p.as_patch().filter(|patch| patch.hash == sid(50)))
        .unwrap_or_else(|| panic!("the step's patch: {:?}", message.parts));
    assert_eq!(patch.files, [format!("{WORKTREE}/c.txt")]);
    // The one warning is the abandoned step's late end, naming only the patch's file.
    let warnings = block_on(f.repo.warnings(&f.session.id)).expect("warnings");
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert_eq!(warnings[0].files, [format!("{WORKTREE}/c.txt")]);
}

#[test]
fn a_second_revert_first_undoes_the_first_scoped_as_unrevert() {
    // Reverted to U2 (hiding A3's patch of b.txt): pre-revert snapshot 10, applied 11.
    let f = fixture(Some((sid(10), sid(11))), None);
    let mut snapshots = MockSnapshotPort::new();
    let mut seq = Sequence::new();
    snapshots
        .expect_track()
        .times(1)
        .in_sequence(&mut seq)
        .returning(|_| tracked(11));
    snapshots
        .expect_changed_between()
        .withf(|_, from, to| from == &sid(10) && to == &sid(11))
        .times(1)
        .returning(|_, _, _| Ok(vec![rel("b.txt")]));
    // What the user changed since the revert: applied against the worktree tracked just before. The
    // worktree is still `applied`, the same snapshot, so the store is not asked.
    snapshots
        .expect_changed_between()
        .withf(|_, from, to| from == to)
        .times(0);
    snapshots
        .expect_restore_since()
        .withf(|_, to, paths, since| {
            to == &sid(10) && paths.as_slice() == [rel("b.txt")] && since == &sid(11)
        })
        .times(1)
        .in_sequence(&mut seq)
        .returning(|_, _, _, _| {
            Ok(RestoreOutcome {
                written: vec![rel("b.txt")],
                ..Default::default()
            })
        });
    snapshots
        .expect_track()
        .times(1)
        .in_sequence(&mut seq)
        .returning(|_| tracked(10));
    snapshots
        .expect_revert()
        .withf(|_, patches, base| {
            base == &sid(10)
                && patches
                    .iter()
                    .flat_map(|p| p.files.iter())
                    .cloned()
                    .collect::<Vec<_>>()
                    == [rel("a.txt"), rel("b.txt")]
        })
        .times(1)
        .in_sequence(&mut seq)
        .returning(|_, _, _| {
            Ok(RevertOutcome {
                applied: sid(12),
                written: vec![rel("a.txt")],
                deleted: vec![rel("b.txt")],
                kept: Vec::new(),
            })
        });
    snapshots
        .expect_revert_diffs()
        .times(1)
        .returning(|_, _, _| {
            // The files the revert wrote and deleted, which the pre-revert snapshot held otherwise.
            let diff = |file: &str, status| FileDiff {
                file: file.to_owned(),
                patch: String::new(),
                additions: 1,
                deletions: 1,
                status,
            };
            Ok(RevertDiffs {
                text: "diff".to_owned(),
                files: vec![
                    diff("a.txt", FileStatus::Modified),
                    diff("b.txt", FileStatus::Added),
                ],
            })
        });
    snapshots
        .expect_changed_between()
        .withf(|_, from, _| from != &sid(10) && from != &sid(11))
        .times(1)
        .returning(|_, _, _| Ok(Vec::new()));
    let rewind = f.rewind(snapshots);
    let before = f.last_seq();
    let target = RevertTarget {
        message_id: f.messages[0].info.id.clone(),
        part_id: None,
    };
    let session = block_on(rewind.revert(&f.session.id, target)).expect("revert");
    let descriptor = session.revert.expect("descriptor");
    assert_eq!(descriptor.message_id, f.messages[0].info.id);
    assert_eq!(descriptor.snapshot, Some(sid(10)));
    assert_eq!(session.applied, Some(sid(12)));
    let kinds: Vec<_> = f
        .events_after(before)
        .iter()
        .map(EventPayload::kind)
        .collect();
    assert_eq!(
        kinds,
        ["session.diff", "session.updated"],
        "the undo publishes no session.updated of its own"
    );
    assert!(block_on(f.repo.intents()).expect("intents").is_empty());
}

/// SPEC 8, "check it before each batch of writes": a second revert checks its leases again between
/// undoing the first revert and writing its own files (the track between them can be long). One taken over
/// meanwhile stops it there, the revert's writes never made and its intent left to the lease's new holder.
#[test]
fn a_second_revert_that_lost_its_lease_after_the_undo_writes_nothing_more() {
    let f = fixture(Some((sid(10), sid(11))), None);
    let mut snapshots = MockSnapshotPort::new();
    let mut seq = Sequence::new();
    snapshots
        .expect_track()
        .times(1)
        .in_sequence(&mut seq)
        .returning(|_| tracked(11));
    snapshots
        .expect_changed_between()
        .withf(|_, from, to| from == &sid(10) && to == &sid(11))
        .times(1)
        .returning(|_, _, _| Ok(vec![rel("b.txt")]));
    snapshots
        .expect_restore_since()
        .times(1)
        .in_sequence(&mut seq)
        .returning(|_, _, _, _| {
            Ok(RestoreOutcome {
                written: vec![rel("b.txt")],
                ..Default::default()
            })
        });
    // While the worktree is tracked again, past half the lease's time, another owner takes the session.
    let (repo, host) = (f.repo.clone(), f.host.clone());
    let key = LeaseKey::Session(f.session.id.clone());
    snapshots
        .expect_track()
        .times(1)
        .in_sequence(&mut seq)
        .returning(move |_| {
            host.advance(ServiceConfig::default().operation_lease_ms);
            let (repo, key) = (repo.clone(), key.clone());
            std::thread::spawn(move || {
                block_on(async {
                    let held = repo.lease(&key).await.expect("read").expect("held");
                    let thief = Lease {
                        key,
                        token: LeaseToken("tok_thief".to_owned()),
                        holder: held.holder.clone(),
                        expires_at: u64::MAX,
                    };
                    let taken = repo
                        .take_lease(
                            &thief,
                            Some(rewind_core::model::Replacing::token(held.token)),
                        )
                        .await;
                    assert!(matches!(taken, Ok(LeaseTake::Taken)), "{taken:?}");
                });
            })
            .join()
            .expect("the lease taken");
            tracked(10)
        });
    snapshots.expect_revert().times(0);
    snapshots.expect_restore_since().times(0);
    let rewind = f.rewind(snapshots);
    let target = RevertTarget {
        message_id: f.messages[0].info.id.clone(),
        part_id: None,
    };
    let result = block_on(rewind.revert(&f.session.id, target));
    assert!(matches!(result, Err(Error::LeaseLost(_))), "{result:?}");
    let intents = block_on(f.repo.intents()).expect("intents");
    assert_eq!(intents.len(), 1, "left for the lease's new holder");
}

#[test]
fn unrevert_restores_exactly_the_files_the_revert_changed() {
    let f = fixture(Some((sid(10), sid(11))), None);
    let mut snapshots = MockSnapshotPort::new();
    let mut seq = Sequence::new();
    snapshots
        .expect_track()
        .times(1)
        .in_sequence(&mut seq)
        .returning(|_| tracked(12));
    snapshots
        .expect_changed_between()
        .withf(|_, from, to| from == &sid(10) && to == &sid(11))
        .times(1)
        .returning(|_, _, _| Ok(vec![rel("a.txt"), rel("dir/b.txt")]));
    snapshots
        .expect_changed_between()
        .withf(|_, from, to| from == &sid(11) && to == &sid(12))
        .times(1)
        .in_sequence(&mut seq)
        .returning(|_, _, _| Ok(vec![rel("unrelated.txt")]));
    snapshots
        .expect_restore_since()
        .with(
            always(),
            mockall::predicate::eq(sid(10)),
            mockall::predicate::eq(vec![rel("a.txt"), rel("dir/b.txt")]),
            mockall::predicate::eq(sid(12)),
        )
        .times(1)
        .in_sequence(&mut seq)
        .returning(|_, _, _, _| Ok(RestoreOutcome::default()));
    let rewind = f.rewind(snapshots);
    let before = f.last_seq();
    let session = block_on(rewind.unrevert(&f.session.id)).expect("unrevert");
    assert!(session.revert.is_none() && session.applied.is_none());
    let kinds: Vec<_> = f
        .events_after(before)
        .iter()
        .map(EventPayload::kind)
        .collect();
    assert_eq!(kinds, ["session.updated"]);
}

#[test]
fn a_failure_after_files_were_touched_rolls_them_back_and_stores_no_descriptor() {
    let f = fixture(None, None);
    let mut snapshots = MockSnapshotPort::new();
    let mut seq = Sequence::new();
    // before, which is also the pre-revert snapshot (the session was not reverted)
    snapshots
        .expect_track()
        .times(1)
        .in_sequence(&mut seq)
        .returning(|_| tracked(20));
    // The store is given the go-ahead once the intent is stored (the intent is checked below).
    snapshots
        .expect_revert_when()
        .times(1)
        .in_sequence(&mut seq)
        .returning(|_, _, _, mut ready| {
            assert_eq!(ready.try_recv(), Ok(Some(true)), "the go-ahead came first");
            Ok(RevertOutcome {
                applied: sid(21),
                written: vec![rel("a.txt")],
                deleted: vec![rel("b.txt")],
                kept: Vec::new(),
            })
        });
    snapshots
        .expect_revert_diffs()
        .times(1)
        .in_sequence(&mut seq)
        .returning(|_, _, _| Err(Error::backend("disk full")));
    // Whether the files changed since the last step are computed once the diffs have failed is the
    // service's business: allowed, not required.
    snapshots
        .expect_changed_between()
        .withf(|_, _, to| to == &sid(20))
        .times(0..=1)
        .returning(|_, _, _| Ok(Vec::new()));
    // Rollback: capture first, then put the intent's files back to `before`.
    snapshots
        .expect_track()
        .times(1)
        .in_sequence(&mut seq)
        .returning(|_| tracked(22));
    snapshots
        .expect_changed_between()
        .withf(|_, from, to| from == &sid(20) && to == &sid(22))
        .times(1)
        .in_sequence(&mut seq)
        .returning(|_, _, _| Ok(vec![rel("a.txt"), rel("b.txt")]));
    snapshots
        .expect_restore_since()
        .with(
            always(),
            mockall::predicate::eq(sid(20)),
            mockall::predicate::eq(vec![rel("a.txt"), rel("b.txt")]),
            mockall::predicate::eq(sid(22)),
        )
        .times(1)
        .in_sequence(&mut seq)
        .returning(|_, _, _, _| Ok(RestoreOutcome::default()));
    // Then the directories the revert made and emptied, along the intent's files.
    snapshots
        .expect_remove_emptied_dirs()
        .with(
            always(),
            mockall::predicate::eq(sid(20)),
            mockall::predicate::eq(vec![rel("a.txt"), rel("b.txt")]),
            always(),
        )
        .times(1)
        .in_sequence(&mut seq)
        .returning(|_, _, _, _| Ok(Vec::new()));
    let rewind = f.rewind(snapshots);
    let before = f.last_seq();
    let target = RevertTarget {
        message_id: f.messages[0].info.id.clone(),
        part_id: None,
    };
    let result = block_on(rewind.revert(&f.session.id, target));
    assert!(
        matches!(&result, Err(Error::Backend(e)) if e.to_string().contains("disk full")),
        "{result:?}"
    );
    let stored = block_on(f.repo.session(&f.session.id))
        .expect("read")
        .expect("session");
    assert!(
        stored.revert.is_none() && stored.applied.is_none(),
        "no descriptor stored"
    );
    let events = f.events_after(before);
    assert_eq!(events.len(), 1, "only the rollback's warning: {events:?}");
    match &events[0] {
        EventPayload::SessionWarning {
            snapshot, files, ..
        } => {
            assert_eq!(snapshot.as_ref(), Some(&sid(22)), "the capture");
            assert_eq!(
                files,
                &[format!("{WORKTREE}/a.txt"), format!("{WORKTREE}/b.txt")]
            );
        }
        other => panic!("expected a warning, got {other:?}"),
    }
    assert!(
        block_on(f.repo.intents()).expect("intents").is_empty(),
        "the intent is finished"
    );
    assert!(
        block_on(f.repo.lease(&LeaseKey::Session(f.session.id.clone())))
            .expect("lease")
            .is_none()
    );
}

/// The store plans while the intent record is stored, and is told to touch nothing when it cannot be:
/// the revert fails with the database's error, no file is written or rolled back, nothing is stored.
#[test]
fn a_revert_whose_intent_cannot_be_stored_touches_no_file() {
    let f = fixture(None, None);
    let mut snapshots = MockSnapshotPort::new();
    snapshots.expect_track().times(1).returning(|_| tracked(20));
    let go_ahead = Arc::new(std::sync::Mutex::new(None));
    let seen = go_ahead.clone();
    snapshots
        .expect_revert_when()
        .times(1)
        .returning(move |_, _, _, mut ready| {
            // What the store's thread would wait for (the in-memory intent's commit has ended by now).
            *seen.lock().expect("lock") = Some(ready.try_recv());
            Err(rewind_core::ports::called_off())
        });
    snapshots.expect_restore_since().times(0);
    snapshots.expect_revert().times(0);
    let rewind = f.rewind(snapshots);
    let before = f.last_seq();
    // The leases are taken without a commit of the transaction kind; the intent's commit is the next.
    f.repo.fail_next_commit();
    let target = RevertTarget {
        message_id: f.messages[0].info.id.clone(),
        part_id: None,
    };
    let result = block_on(rewind.revert(&f.session.id, target));
    assert!(
        matches!(&result, Err(Error::Backend(e)) if e.to_string().contains("injected fault")),
        "the intent's error: {result:?}"
    );
    assert_eq!(
        *go_ahead.lock().expect("lock"),
        Some(Ok(Some(false))),
        "the store was told to touch nothing"
    );
    let stored = block_on(f.repo.session(&f.session.id))
        .expect("read")
        .expect("session");
    assert!(stored.revert.is_none() && stored.applied.is_none());
    assert!(f.events_after(before).is_empty(), "no event");
    assert!(block_on(f.repo.intents()).expect("intents").is_empty());
    assert!(
        block_on(f.repo.lease(&LeaseKey::Session(f.session.id.clone())))
            .expect("lease")
            .is_none(),
        "the leases are given back"
    );
}

#[test]
fn a_step_owned_by_another_live_process_is_not_aborted() {
    let f = with_step(true);
    let rewind = f.rewind(MockSnapshotPort::new());
    let result = block_on(rewind.abort(&f.session.id));
    assert!(
        matches!(&result, Err(Error::Busy { message, .. }) if message.contains("4242")),
        "{result:?}"
    );
}

/// A step whose end finds the worktree held by another live operation (a revert, or a step of a session in
/// or around the worktree) stays open, and the refusal names the holder instead of guessing what it is.
#[test]
fn a_step_end_while_the_worktree_is_held_is_busy_names_the_holder_and_keeps_the_step() {
    // The step is this process's own (its end is not refused for the session's sake).
    let f = with_step_of(|base| rewind_core::HostPort::this_process(&*base.host));
    let other = ProcessIdentity {
        host: "test-host".to_owned(),
        pid: 5353,
        start_time: 3,
        boot: None,
        machine: None,
    };
    worktree_held_by(&f, &other);
    let before = f.last_seq();
    // No expectation is set: any snapshot call fails the test.
    let rewind = f.rewind(MockSnapshotPort::new());
    let finished = block_on(rewind.finish_step(
        &f.session.id,
        &f.messages[3].info.id,
        rewind_core::service::StepEnd::default(),
    ));
    assert!(
        matches!(&finished, Err(Error::Busy { message, .. })
            if message.contains("Worktree is busy") && message.contains("5353") && !message.contains("revert")),
        "{finished:?}"
    );
    assert_eq!(f.last_seq(), before, "no event");
    let stored = block_on(f.repo.session(&f.session.id))
        .expect("read")
        .expect("session");
    assert_eq!(stored.step, f.session.step, "the step is still open");
}
