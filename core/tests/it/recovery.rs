//! Crash safety and concurrency across processes (SPEC sections 4 and 8), on the in-memory adapters with a
//! host whose processes the test starts and kills.

use rewind_core::model::{
    EventPayload, Holder, HolderKind, IntentOperation, IntentRecord, Lease, LeaseKey, LeaseTake,
    LeaseToken, PartBody, ProcessIdentity, RelPath, Replacing, SessionFields,
};
use rewind_core::service::{NewMessage, NewPart, StepEnd};
use rewind_core::{
    Change, Error, HostPort, MessageRepo, Rewind, ServiceConfig, SnapshotPort, Transaction,
};

use crate::support::{ROOT, Turn, World, block_on};

/// A server's configuration: HTTP steps, a step timeout of a minute.
fn server_config() -> ServiceConfig {
    ServiceConfig {
        holder_kind: HolderKind::Server,
        step_timeout_ms: 60_000,
        ..ServiceConfig::default()
    }
}

fn process(pid: u32) -> ProcessIdentity {
    ProcessIdentity {
        host: "test-host".to_owned(),
        pid,
        start_time: 99,
        boot: None,
        machine: None,
    }
}

/// The session's and the worktree's leases taken by process `owner` under `token`, never expiring, as an
/// operation holds them; the holder.
async fn hold_session_and_worktree(
    w: &World,
    (session, directory): (&rewind_core::model::SessionId, &str),
    token: &LeaseToken,
    owner: &ProcessIdentity,
) -> Holder {
    let holder = Holder {
        kind: HolderKind::Process,
        process: owner.clone(),
    };
    for key in [
        LeaseKey::Session(session.clone()),
        LeaseKey::Worktree(directory.to_owned()),
    ] {
        let lease = Lease {
            key,
            token: token.clone(),
            holder: holder.clone(),
            expires_at: u64::MAX,
        };
        w.repo.take_lease(&lease, None).await.expect("lease");
    }
    holder
}

/// Leaves the state a revert by `owner` leaves when it dies after writing its intent and touching a.txt.
async fn crashed_revert(
    w: &World,
    session: &rewind_core::model::SessionId,
    owner: &ProcessIdentity,
) -> LeaseToken {
    let token = LeaseToken("tok_crashed".to_owned());
    let holder = hold_session_and_worktree(w, (session, ROOT), &token, owner).await;
    let before = w.snapshots.track(w.path()).await.expect("track").id;
    let intent = IntentRecord {
        token: token.clone(),
        session_id: session.clone(),
        directory: ROOT.to_owned(),
        operation: IntentOperation::Revert,
        holder,
        before,
        files: vec![
            RelPath::new("a.txt").expect("path"),
            RelPath::new("new.txt").expect("path"),
        ],
        created: 0,
        unreadable: None,
    };
    w.repo
        .commit(Transaction {
            guards: Vec::new(),
            changes: vec![Change::PutIntent(Box::new(intent))],
            events: Vec::new(),
        })
        .await
        .expect("intent");
    // The half-done revert: a.txt rewritten, new.txt deleted.
    w.write("a.txt", "half reverted");
    w.remove("new.txt");
    token
}

/// a.txt as a capture holds it.
fn captured_a(w: &World, capture: &rewind_core::model::SnapshotId) -> Option<Vec<u8>> {
    let tree = w.snapshots.tree(w.path(), capture).expect("stored");
    tree.get("a.txt").map(|n| n.content().to_vec())
}

/// The worktree's lease, held by this (live) process with `token`, replacing the lease of `replacing`.
async fn hold_worktree(w: &World, token: &str, replacing: Option<LeaseToken>) -> Lease {
    let lease = Lease {
        key: LeaseKey::Worktree(ROOT.to_owned()),
        token: LeaseToken(token.to_owned()),
        holder: Holder {
            kind: HolderKind::Process,
            process: w.host.this_process(),
        },
        expires_at: u64::MAX,
    };
    w.repo
        .take_lease(&lease, replacing.map(Replacing::token))
        .await
        .expect("the worktree's lease");
    lease
}

/// A session of one turn: a.txt a0 -> a1, new.txt created.
async fn one_turn_world() -> (World, rewind_core::model::Session, Turn) {
    let w = World::new();
    w.write("a.txt", "a0");
    let s = w.session().await;
    let t = w
        .turn(&s.id, "one", |w| {
            w.write("a.txt", "a1");
            w.write("new.txt", "n1");
        })
        .await;
    (w, s, t)
}

/// `one_turn_world` whose revert by process `pid` crashed half way (`crashed_revert`), that process gone.
async fn crashed_world(pid: u32) -> (World, rewind_core::model::Session, Turn, LeaseToken) {
    let (w, s, t) = one_turn_world().await;
    let dead = process(pid);
    let token = crashed_revert(&w, &s.id, &dead).await;
    w.host.kill(&dead);
    (w, s, t, token)
}

#[test]
fn a_crashed_revert_is_rolled_back_by_recovery_with_a_capture() {
    block_on(async {
        let (w, s, _, token) = crashed_world(7).await;
        let report = w.rewind.recover().await.expect("recover");
        assert_eq!(report.recovered, [token]);
        assert_eq!(
            w.state(&["a.txt", "new.txt"]),
            ["a1", "n1"],
            "wholly before the operation"
        );
        assert!(w.repo.intents().await.expect("intents").is_empty());
        let warning = w.last_warning(&s.id, "warning").await;
        assert!(warning.message.starts_with("a revert by "), "{warning:?}");
        let capture = warning.snapshot.expect("capture");
        assert_eq!(captured_a(&w, &capture), Some(b"half reverted".to_vec()));
        assert!(!w.is_reverted(&s.id).await);
        assert!(
            w.repo
                .lease(&LeaseKey::Session(s.id.clone()))
                .await
                .expect("lease")
                .is_none()
        );
        assert!(
            w.repo
                .lease(&LeaseKey::Worktree(ROOT.to_owned()))
                .await
                .expect("lease")
                .is_none()
        );
    })
}

/// A server's periodic recovery pass, skipping nothing.
async fn recover_others(w: &World) -> rewind_core::service::RecoveryReport {
    w.rewind
        .recover_others(&Default::default())
        .await
        .expect("recover")
}

/// A rename that lands while a revert runs (between its read of the session and its result's commit): the
/// revert's answer, the stored session and the revert's `session.updated` event all carry the new title,
/// and so does the unrevert's answer when a rename lands during it.
#[test]
fn a_rename_during_an_operation_shows_in_its_answer_and_stays() {
    block_on(async {
        let (w, s, t) = one_turn_world().await;
        let (w, s) = (&w, &s);
        let rename_midway = |title: &'static str| {
            let (reached, resume) = w.repo.pause_next_result_commit();
            async move {
                reached.await.expect("the result's commit is reached");
                w.rewind
                    .update_session(&s.id, SessionFields::title(title.to_owned()))
                    .await
                    .expect("the rename lands while the operation runs");
                let _ = resume.send(());
            }
        };
        let (reverted, ()) = futures::future::join(
            w.try_revert_to(&s.id, &t.user),
            rename_midway("during the revert"),
        )
        .await;
        let reverted = reverted.expect("revert");
        assert_eq!(reverted.title, "during the revert", "the revert's answer");
        let stored = w.rewind.session(&s.id).await.expect("the session");
        assert_eq!(stored, reverted, "the answer is the session as stored");
        let last_updated = w
            .events()
            .await
            .into_iter()
            .rev()
            .find_map(|e| match e.event.payload {
                EventPayload::SessionUpdated { info, .. } => Some(*info),
                _ => None,
            });
        assert_eq!(last_updated, Some(stored), "and as announced last");

        let (unreverted, ()) = futures::future::join(
            w.rewind.unrevert(&s.id),
            rename_midway("during the unrevert"),
        )
        .await;
        let unreverted = unreverted.expect("unrevert");
        assert_eq!(unreverted.title, "during the unrevert");
        assert_eq!(w.state(&["a.txt", "new.txt"]), ["a1", "n1"]);
        assert_eq!(
            w.rewind.session(&s.id).await.expect("the session"),
            unreverted
        );
    });
}

/// `recover_others` (a server's periodic pass) leaves the intents of this process's running operations
/// to them, and those it was told to skip (it failed to finish them before: each try would capture the
/// worktree again). An intent of this process whose operation has ended (its rollback failed too, on a
/// full disk say) it finishes, as it finishes a dead process's (black-box: a server's failed revert stayed
/// half done, the database saying otherwise, until the next request on its worktree).
#[test]
fn recover_others_leaves_running_operations_and_skipped_intents() {
    block_on(async {
        let (w, s, t) = one_turn_world().await;
        // A revert of this process, paused before it stores its result: its intent is there.
        let (reached, resume) = w.repo.pause_next_result_commit();
        let reverting = w.try_revert_to(&s.id, &t.user);
        let checking = async {
            reached.await.expect("the result's commit is reached");
            assert_eq!(w.repo.intents().await.expect("intents").len(), 1);
            let report = recover_others(&w).await;
            assert_eq!(
                report,
                Default::default(),
                "a running operation's: not even looked at"
            );
            assert_eq!(w.state(&["a.txt", "new.txt"]), ["a0", "-"]);
            let _ = resume.send(());
        };
        let (reverted, ()) = futures::future::join(reverting, checking).await;
        reverted.expect("revert");
        assert!(w.repo.intents().await.expect("intents").is_empty());
        w.rewind.unrevert(&s.id).await.expect("unrevert");
        assert_eq!(w.state(&["a.txt", "new.txt"]), ["a1", "n1"]);

        // One of this process whose operation ended, its leases given back as `end_operation` gives them.
        let token = crashed_revert(&w, &s.id, &w.host.this_process()).await;
        for key in [
            LeaseKey::Session(s.id.clone()),
            LeaseKey::Worktree(ROOT.to_owned()),
        ] {
            w.repo.release_lease(&key, &token).await.expect("release");
        }
        let report = recover_others(&w).await;
        assert_eq!(report.recovered, [token]);
        assert_eq!(w.state(&["a.txt", "new.txt"]), ["a1", "n1"]);
        assert!(w.repo.intents().await.expect("intents").is_empty());

        // A dead process's, skipped, then not.
        let dead = process(7);
        let token = crashed_revert(&w, &s.id, &dead).await;
        w.host.kill(&dead);
        let skip = std::iter::once(token.clone()).collect();
        let report = w.rewind.recover_others(&skip).await.expect("recover");
        assert_eq!(report, Default::default(), "skipped");
        assert_eq!(w.state(&["a.txt", "new.txt"]), ["half reverted", "-"]);
        let report = recover_others(&w).await;
        assert_eq!(report.recovered, [token]);
        assert_eq!(w.state(&["a.txt", "new.txt"]), ["a1", "n1"]);
    })
}

/// The database goes away as a server's revert stores its result and stays away through the rollback and
/// the hand-back of the leases: the revert's files stay written, its intent stays, and both leases stay as
/// the operation took them, held by this process, which runs, so SPEC 1 never lets them be taken over.
/// Once the database is back, this process gives them back as an interrupted operation's and finishes the
/// intent: in its periodic pass, and before its next operation (PostgreSQL outage fuzz: a server answered
/// 409 on the session for good, until it was restarted).
#[test]
fn leases_an_outage_kept_from_being_given_back_are_given_back_once_the_database_returns() {
    for next in ["periodic pass", "next operation"] {
        block_on(async {
            let (w, s, t) = one_turn_world().await;
            let (server, _) = server_of(&w);
            let target = to_turn(&t);
            w.repo.unreachable_from_next_result_commit();
            let Err(error) = server.revert(&s.id, target.clone()).await else {
                panic!("{next}: the revert must fail")
            };
            // Said as the outage (a client is told what to wait for), with what became of the files.
            assert_eq!(
                error.storage_fault(),
                Some(rewind_core::error::StorageFault::Unreachable),
                "{next}: {error:?}"
            );
            assert!(
                error.to_string().contains(
                    "the files are left as the revert left them; the intent record stays, and the next \
                     rewind command puts them back once the database answers"
                ),
                "{next}: {error}"
            );
            assert_eq!(
                w.state(&["a.txt", "new.txt"]),
                ["a0", "-"],
                "{next}: the rollback could not read the database, so nothing was put back"
            );
            w.repo.reachable_again();
            let intents = w.repo.intents().await.expect("intents");
            assert_eq!(intents.len(), 1, "{next}: the intent waits for recovery");
            if next == "periodic pass" {
                let report = server
                    .recover_others(&Default::default())
                    .await
                    .expect("recover");
                assert_eq!(report.recovered, [intents[0].token.clone()], "{next}");
                assert_eq!(w.state(&["a.txt", "new.txt"]), ["a1", "n1"], "{next}");
            }
            let reverted = server
                .revert(&s.id, target)
                .await
                .unwrap_or_else(|e| panic!("{next}: the revert after the outage: {e}"));
            assert!(reverted.revert.is_some(), "{next}");
            assert_eq!(w.state(&["a.txt", "new.txt"]), ["a0", "-"], "{next}");
            assert!(
                w.repo.intents().await.expect("intents").is_empty(),
                "{next}"
            );
            server.unrevert(&s.id).await.expect("unrevert");
            assert_eq!(w.state(&["a.txt", "new.txt"]), ["a1", "n1"], "{next}");
        });
    }
}

/// A revert whose result's commit was made but whose connection broke before the answer came stands: made
/// before the answer was lost, or still under way on the server and landing only after (a read beside it
/// still finds the intent). The check of the intent waits for it, as the server's write lock makes it, and
/// finds it made: the revert succeeds, nothing is put back, its leases are free (with a read, the rollback
/// began over the stored result of one landing late, and the revert was said to have failed).
#[test]
fn a_result_whose_answer_was_lost_stands() {
    for late in [false, true] {
        block_on(async {
            let (w, s, t) = one_turn_world().await;
            let (server, _) = server_of(&w);
            if late {
                w.repo.land_next_result_late();
            } else {
                w.repo.lose_next_result_answer();
            }
            let reverted = server
                .revert(&s.id, to_turn(&t))
                .await
                .unwrap_or_else(|e| panic!("late {late}: the revert stands: {e}"));
            assert!(reverted.revert.is_some(), "late {late}");
            assert_eq!(w.state(&["a.txt", "new.txt"]), ["a0", "-"], "late {late}");
            assert!(w.repo.intents().await.expect("intents").is_empty());
            let stored = server.session(&s.id).await.expect("session");
            assert!(
                stored.revert.is_some(),
                "late {late}: the session reads as reverted"
            );
            for key in [
                LeaseKey::Session(s.id.clone()),
                LeaseKey::Worktree(ROOT.to_owned()),
            ] {
                let lease = w.repo.lease(&key).await.expect("lease");
                assert!(lease.is_none(), "late {late}: {key:?} is free: {lease:?}");
            }
            server.unrevert(&s.id).await.expect("unrevert");
            assert_eq!(w.state(&["a.txt", "new.txt"]), ["a1", "n1"], "late {late}");
        });
    }
}

/// A revert that stalled past its leases and was taken over by another host's recovery, and whose result
/// commit then lost its connection (it was refused, or never arrived): the check of its intent finds it
/// gone, as a result that was made would leave it. The session, not reverted, says the result was not
/// stored, and the capture that recovery recorded before it put the files back says who finished it: the
/// revert fails, saying so (before, it said it had succeeded while the session was not reverted and the
/// files were back as before: stop 69's review). When nothing was put back (the files were as before
/// again, so no capture), or the captures cannot be read, it says it cannot tell, not that it succeeded.
#[test]
fn a_result_lost_after_another_host_took_the_operation_over_is_not_said_made() {
    for case in [
        TakenOver::PutBack,
        TakenOver::NothingPutBack,
        TakenOver::CapturesUnread,
    ] {
        result_lost_after_another_host_took_the_operation_over(case);
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum TakenOver {
    /// The recovery put the revert's files back.
    PutBack,
    /// The files were back as before the revert when the recovery came (edited back by hand).
    NothingPutBack,
    /// As `PutBack`, and the captures cannot be read when the revert asks who finished its intent.
    CapturesUnread,
}

fn result_lost_after_another_host_took_the_operation_over(case: TakenOver) {
    use rewind_core::error::StorageFault;
    block_on(async {
        let (w, s, t) = one_turn_world().await;
        let (server, lease_ms) = server_of(&w);
        let (reached, resume) = w.repo.pause_next_result_commit();
        let meanwhile = async {
            reached.await.expect("the result's commit is reached");
            if case == TakenOver::NothingPutBack {
                w.write("a.txt", "a1");
                w.write("new.txt", "n1");
            }
            let report = recover_from_another_host(&w, lease_ms).await;
            assert_eq!(report.recovered.len(), 1, "{case:?}: {report:?}");
            assert_eq!(w.state(&["a.txt", "new.txt"]), ["a1", "n1"], "{case:?}");
            w.repo.fail_next_result_commit();
            w.repo
                .fail_as("fail_next_result_commit", StorageFault::ConnectionLost);
            if case == TakenOver::CapturesUnread {
                w.repo.fail_next_captures_read();
            }
            let _ = resume.send(());
        };
        let (reverted, ()) =
            futures::future::join(server.revert(&s.id, to_turn(&t)), meanwhile).await;
        let error = reverted.expect_err("the revert was not stored");
        let message = error.to_string();
        if case == TakenOver::PutBack {
            assert!(
                matches!(error, Error::LeaseLost(_))
                    && message.contains("another process took it over: it put the files back to their state before the revert")
                    && message.contains("was not stored"),
                "{message}"
            );
        } else {
            assert!(
                error.storage_fault() == Some(StorageFault::ConnectionLost)
                    && message.contains("by its result or by another process that took the revert over, and which of the two cannot be told")
                    && message.contains("`rewind log` shows whether it is reverted"),
                "{case:?}: {message}"
            );
        }
        assert_eq!(w.state(&["a.txt", "new.txt"]), ["a1", "n1"], "{case:?}");
        let stored = server.session(&s.id).await.expect("session");
        assert!(
            stored.revert.is_none(),
            "{case:?}: not reverted: {stored:?}"
        );
        assert!(w.repo.intents().await.expect("intents").is_empty());
        server
            .revert(&s.id, to_turn(&t))
            .await
            .expect("the revert, asked again");
        assert_eq!(w.state(&["a.txt", "new.txt"]), ["a0", "-"], "{case:?}");
    });
}

/// A revert that stalled past its leases, whose recovery by another host put its files back and then
/// failed to record it (its last commit refused): that recovery leaves the leases to the interrupted
/// revert marked as such, not under the revert's own token, so the revert, once it runs again, finds
/// them lost and stores nothing (before, it found them its own again and stored its result: the session
/// reverted over files put back as before it, SPEC 8; review). The intent is finished by the next
/// operation, as after a crash.
#[test]
fn a_stalled_revert_whose_recovery_failed_after_putting_files_back_stores_nothing() {
    block_on(async {
        let (w, s, t) = one_turn_world().await;
        let (server, lease_ms) = server_of(&w);
        let (reached, resume) = w.repo.pause_next_result_commit();
        let meanwhile = async {
            reached.await.expect("the result's commit is reached");
            w.repo.fail_next_intent_delete();
            let report = recover_from_another_host(&w, lease_ms).await;
            assert_eq!(report.failed.len(), 1, "{report:?}");
            assert_eq!(w.state(&["a.txt", "new.txt"]), ["a1", "n1"], "put back");
            let _ = resume.send(());
        };
        let (reverted, ()) =
            futures::future::join(server.revert(&s.id, to_turn(&t)), meanwhile).await;
        let error = reverted.expect_err("the revert stores nothing");
        assert!(matches!(error, Error::LeaseLost(_)), "{error:?}");
        assert_eq!(w.state(&["a.txt", "new.txt"]), ["a1", "n1"]);
        // Neither lease is the revert's again, nor free: both wait for the next recovery.
        let token = w.repo.intents().await.expect("intents")[0].token.clone();
        for key in [
            LeaseKey::Session(s.id.clone()),
            LeaseKey::Worktree(ROOT.to_owned()),
        ] {
            let lease = w.repo.lease(&key).await.expect("lease");
            assert_eq!(lease.map(|l| l.token), Some(token.interrupted()), "{key:?}");
        }
        let stored = server.session(&s.id).await.expect("session");
        assert!(stored.revert.is_none(), "not reverted: {stored:?}");
        assert_eq!(w.repo.intents().await.expect("intents").len(), 1);
        server
            .revert(&s.id, to_turn(&t))
            .await
            .expect("the next revert finishes the intent first");
        assert_eq!(w.state(&["a.txt", "new.txt"]), ["a0", "-"]);
        assert!(w.repo.intents().await.expect("intents").is_empty());
    });
}

/// `a_result_lost_after_another_host_took_the_operation_over_is_not_said_made` for an unrevert: its result
/// stores no revert point, as any later unrevert or cleanup leaves none, so the capture of the recovery
/// that put its files back is what tells (review).
#[test]
fn an_unrevert_whose_result_was_lost_after_another_host_took_it_over_is_not_said_made() {
    use rewind_core::error::StorageFault;
    block_on(async {
        let (w, s, t) = one_turn_world().await;
        let (server, lease_ms) = server_of(&w);
        server.revert(&s.id, to_turn(&t)).await.expect("revert");
        assert_eq!(w.state(&["a.txt", "new.txt"]), ["a0", "-"]);
        let (reached, resume) = w.repo.pause_next_result_commit();
        let meanwhile = async {
            reached.await.expect("the result's commit is reached");
            assert_eq!(w.state(&["a.txt", "new.txt"]), ["a1", "n1"], "unreverted");
            let report = recover_from_another_host(&w, lease_ms).await;
            assert_eq!(report.recovered.len(), 1, "{report:?}");
            w.repo.fail_next_result_commit();
            w.repo
                .fail_as("fail_next_result_commit", StorageFault::ConnectionLost);
            let _ = resume.send(());
        };
        let (unreverted, ()) = futures::future::join(server.unrevert(&s.id), meanwhile).await;
        let error = unreverted.expect_err("the unrevert was not stored");
        let message = error.to_string();
        assert!(
            matches!(error, Error::LeaseLost(_))
                && message.contains(
                    "the unrevert stalled past its leases and another process took it over"
                ),
            "{message}"
        );
        assert_eq!(w.state(&["a.txt", "new.txt"]), ["a0", "-"], "put back");
        let stored = server.session(&s.id).await.expect("session");
        assert!(stored.revert.is_some(), "still reverted: {stored:?}");
        server
            .unrevert(&s.id)
            .await
            .expect("the unrevert, asked again");
        assert_eq!(w.state(&["a.txt", "new.txt"]), ["a1", "n1"]);
    });
}

/// A result commit refused before it was sent or had the write lock (the database locked by another
/// process, say) stored nothing: the files are put back at once, without asking the database again (which
/// would likely be refused alike, and leave them for recovery).
#[test]
fn a_result_refused_as_locked_is_rolled_back_without_asking_again() {
    use rewind_core::error::StorageFault;
    block_on(async {
        let (w, s, t) = one_turn_world().await;
        let (server, _) = server_of(&w);
        w.repo.fail_next_result_commit();
        w.repo
            .fail_as("fail_next_result_commit", StorageFault::Locked);
        w.repo.fail_next_intent_check();
        let error = server
            .revert(&s.id, to_turn(&t))
            .await
            .expect_err("the revert fails");
        assert_eq!(
            error.storage_fault(),
            Some(StorageFault::Locked),
            "{error:?}"
        );
        assert_eq!(
            w.state(&["a.txt", "new.txt"]),
            ["a1", "n1"],
            "put back: {error}"
        );
        assert!(w.repo.intents().await.expect("intents").is_empty());
    });
}

/// A revert whose result's commit broke its connection, and whose intent record the database then cannot
/// be asked about (so whether the commit was made is not known), leaves the intent for recovery and hands both leases to it, expired, as
/// an operation whose rollback failed does: not released, so whatever takes either next finishes the
/// intent first.
#[test]
fn a_result_whose_fate_cannot_be_read_leaves_its_leases_to_the_intent() {
    block_on(async {
        let (w, s, t) = one_turn_world().await;
        let (server, _) = server_of(&w);
        let target = to_turn(&t);
        // Armed at the result's commit: the reads of intents before it (recovery's) work.
        let (reached, resume) = w.repo.pause_next_result_commit();
        let arming = async {
            reached.await.expect("the result's commit is reached");
            w.repo.fail_next_result_commit();
            w.repo.fail_as(
                "fail_next_result_commit",
                rewind_core::error::StorageFault::ConnectionLost,
            );
            w.repo.fail_next_intent_check();
            let _ = resume.send(());
        };
        let (failed, ()) =
            futures::future::join(server.revert(&s.id, target.clone()), arming).await;
        let Err(error) = failed else {
            panic!("the revert must fail")
        };
        let message = error.to_string();
        assert!(
            message.contains("MemRepo::fail_next_result_commit")
                && message.contains(
                    "whether the revert was stored is not known, so its files are left as it wrote them"
                )
                && message.contains("puts the files back unless the revert was stored"),
            "{message}"
        );
        assert_eq!(
            w.state(&["a.txt", "new.txt"]),
            ["a0", "-"],
            "not rolled back: the commit may have been made"
        );
        let intents = w.repo.intents().await.expect("intents");
        assert_eq!(intents.len(), 1, "the intent waits for recovery");
        for key in [
            LeaseKey::Session(s.id.clone()),
            LeaseKey::Worktree(ROOT.to_owned()),
        ] {
            let lease = w.repo.lease(&key).await.expect("lease");
            let lease = lease.unwrap_or_else(|| panic!("{key:?} was released"));
            assert_eq!(lease.token, intents[0].token.interrupted(), "{key:?}");
            assert_eq!(
                lease.expires_at, 0,
                "{key:?} is the interrupted operation's"
            );
        }
        server.revert(&s.id, target).await.expect("the next revert");
        assert_eq!(w.state(&["a.txt", "new.txt"]), ["a0", "-"]);
        assert!(w.repo.intents().await.expect("intents").is_empty());
    });
}

/// A step's finish that fails as the database goes away, and after which the session cannot be read
/// either, does not know whether it closed the step. Its lease is neither released (the live step would
/// be taken for abandoned) nor left as the closer's, this live process's (the step refused for good): once
/// the database answers, the step, still open, has its own lease back, and its owner finishes it.
#[test]
fn a_finish_whose_outcome_an_outage_hides_gives_the_step_its_lease_back() {
    block_on(async {
        let w = World::new();
        w.write("a.txt", "a0");
        let (server, s, assistant) = server_step(&w).await;
        let step = server
            .session(&s.id)
            .await
            .expect("session")
            .step
            .expect("the step is open");
        w.write("a.txt", "a1");
        // The closer holds the session's lease; the database goes away before the finish stores anything.
        let (reached, resume) = w.repo.pause_next_commit();
        let outage = async {
            reached.await.expect("the finish's commit is reached");
            w.repo.go_unreachable();
            let _ = resume.send(());
        };
        let (finished, ()) = futures::future::join(
            server.finish_step(&s.id, &assistant.info.id, StepEnd::default()),
            outage,
        )
        .await;
        assert!(finished.is_err(), "{finished:?}");
        w.repo.reachable_again();
        server
            .recover_others(&Default::default())
            .await
            .expect("the periodic pass");
        let lease = w
            .repo
            .lease(&LeaseKey::Session(s.id.clone()))
            .await
            .expect("lease")
            .expect("the step's lease");
        assert_eq!(lease.token, step.token, "the step has its own lease back");
        server
            .finish_step(&s.id, &assistant.info.id, StepEnd::default())
            .await
            .expect("the owner finishes the step");
        assert!(server.session(&s.id).await.expect("session").step.is_none());
    });
}

/// A revert whose take of its two leases applies but whose answer is lost (a connection ended during the
/// commit) fails, and leaves nothing of this live process's behind: the leases it holds unknown to itself
/// are released before its next take, and the next revert runs.
#[test]
fn leases_taken_with_the_answer_lost_are_released_before_the_next_take() {
    block_on(async {
        let (w, s, t) = one_turn_world().await;
        let (server, _) = server_of(&w);
        w.repo.lose_next_take_answer();
        let failed = server.revert(&s.id, to_turn(&t)).await;
        assert!(failed.is_err(), "{failed:?}");
        assert_eq!(
            w.state(&["a.txt", "new.txt"]),
            ["a1", "n1"],
            "nothing written"
        );
        server
            .revert(&s.id, to_turn(&t))
            .await
            .expect("the next revert");
        assert_eq!(w.state(&["a.txt", "new.txt"]), ["a0", "-"]);
    });
}

/// A revert to turn `t`'s user message.
fn to_turn(t: &Turn) -> rewind_core::RevertTarget {
    rewind_core::RevertTarget {
        message_id: t.user.clone(),
        part_id: None,
    }
}

/// Another host's recovery while this host's operation stalls: the clock moves past the operation's
/// leases (`lease_ms`), the recovery runs as a process of another host, which may take them over, and
/// the host is this process again. Its report.
async fn recover_from_another_host(
    w: &World,
    lease_ms: u64,
) -> rewind_core::service::RecoveryReport {
    let this = w.host.this_process();
    w.host.advance(lease_ms + 1);
    w.host.become_process(ProcessIdentity {
        host: "another-host".to_owned(),
        ..process(9)
    });
    let report = w.rewind.recover().await.expect("recover");
    w.host.become_process(this);
    report
}

/// A server's services over `w`'s adapters (leases held as a server's), with its operations' lease time.
fn server_of(w: &World) -> (Rewind, u64) {
    let config = ServiceConfig {
        holder_kind: HolderKind::Server,
        ..ServiceConfig::default()
    };
    let lease_ms = config.operation_lease_ms;
    let server = Rewind::new(w.snapshots.clone(), w.repo.clone(), w.host.clone(), config);
    (server, lease_ms)
}

/// SPEC 1: a live process's lease is never taken over, even expired; a server's leases expire only so
/// that its HTTP steps can be abandoned. A server's revert that runs past its lease (a huge worktree, a
/// slow disk) is not taken over by another request of the same server: neither a revert (whose recovery
/// would put the files back while the first still writes) nor a message (which would take the lease over
/// to write behind it). Each is busy; the first then stores its result.
#[test]
fn a_server_operation_past_its_lease_is_not_taken_over_by_the_same_server() {
    block_on(async {
        let (w, s, t) = one_turn_world().await;
        let (server, lease_ms) = server_of(&w);
        let target = to_turn(&t);
        let (reached, resume) = w.repo.pause_next_result_commit();
        let reverting = server.revert(&s.id, target.clone());
        let meanwhile = async {
            reached.await.expect("the result's commit is reached");
            w.host.advance(lease_ms + 1);
            let again = server.revert(&s.id, target.clone()).await;
            assert!(matches!(again, Err(Error::Busy { .. })), "{again:?}");
            let message = server
                .create_message(&s.id, NewMessage::user_text("meanwhile"))
                .await;
            assert!(matches!(message, Err(Error::Busy { .. })), "{message:?}");
            assert_eq!(
                w.state(&["a.txt", "new.txt"]),
                ["a0", "-"],
                "the running revert's files, not put back"
            );
            assert_eq!(w.repo.intents().await.expect("intents").len(), 1);
            let _ = resume.send(());
        };
        let (reverted, ()) = futures::future::join(reverting, meanwhile).await;
        let reverted = reverted.expect("the running revert stores its result");
        assert!(reverted.revert.is_some());
        assert!(w.repo.intents().await.expect("intents").is_empty());
        assert_eq!(w.state(&["a.txt", "new.txt"]), ["a0", "-"]);
        // Once it has ended, its (released) leases are no obstacle.
        server.unrevert(&s.id).await.expect("unrevert");
        assert_eq!(w.state(&["a.txt", "new.txt"]), ["a1", "n1"]);
    })
}

/// SPEC 1, across processes of one host: a server's revert that runs past its lease (stopped, say) is
/// not taken over by another process on the host either (a command-line `undo`): its leases are a live
/// process's. Only a server's HTTP step expires on a live server. Black-box: a second server took a
/// stopped server's revert over, and its recovery, waiting on the store, refused unrelated requests.
#[test]
fn a_server_operation_past_its_lease_is_not_taken_over_by_another_process_on_its_host() {
    block_on(async {
        let (w, s, t) = one_turn_world().await;
        let (server, lease_ms) = server_of(&w);
        let server_process = w.host.this_process();
        let target = to_turn(&t);
        let (reached, resume) = w.repo.pause_next_result_commit();
        let reverting = server.revert(&s.id, target.clone());
        let meanwhile = async {
            reached.await.expect("the result's commit is reached");
            w.host.advance(lease_ms + 1);
            // A command-line process on the same host.
            w.host.become_process(process(31));
            let cli = w.rewind.revert(&s.id, target.clone()).await;
            assert!(matches!(cli, Err(Error::Busy { .. })), "{cli:?}");
            let report = w.rewind.recover().await.expect("recover");
            assert!(report.recovered.is_empty(), "{report:?}");
            assert_eq!(w.state(&["a.txt", "new.txt"]), ["a0", "-"]);
            w.host.become_process(server_process.clone());
            let _ = resume.send(());
        };
        let (reverted, ()) = futures::future::join(reverting, meanwhile).await;
        assert!(
            reverted
                .expect("the server's revert stores its result")
                .revert
                .is_some()
        );
        assert!(w.repo.intents().await.expect("intents").is_empty());
        assert_eq!(w.state(&["a.txt", "new.txt"]), ["a0", "-"]);
    })
}

#[test]
fn an_intent_whose_owner_still_runs_is_left_alone() {
    block_on(async {
        let (w, s, _) = one_turn_world().await;
        let token = crashed_revert(&w, &s.id, &process(8)).await;
        let report = w.rewind.recover().await.expect("recover");
        assert_eq!(report.in_progress, [token]);
        assert_eq!(
            w.state(&["a.txt", "new.txt"]),
            ["half reverted", "-"],
            "untouched"
        );
        let busy = w.revert_to_result(&s.id).await;
        assert!(matches!(busy, Err(Error::Busy { .. })), "{busy:?}");
    })
}

/// SPEC 8: a recovery whose lease is taken over while it works (it stalled past it: another host's
/// recovery may be putting the same files back) stops before it puts any file back, and records nothing
/// (review: it renewed nothing and its commits checked only that the intent was still there).
#[test]
fn a_recovery_whose_lease_is_taken_over_stops_before_it_puts_a_file_back() {
    block_on(async {
        let (w, _, _, token) = crashed_world(7).await;
        // The capture's commit: the recovery holds both leases by then.
        let (reached, resume) = w.repo.pause_next_commit();
        let key = LeaseKey::Worktree(ROOT.to_owned());
        let other = async {
            reached.await.expect("the recovery's capture is reached");
            let current = w.repo.lease(&key).await.expect("lease").expect("held");
            assert_ne!(current.token, token, "the recovery's own");
            let taken = w
                .repo
                .take_lease(
                    &Lease {
                        key: key.clone(),
                        token: LeaseToken("tok_another_host".to_owned()),
                        holder: Holder {
                            kind: HolderKind::Process,
                            process: ProcessIdentity {
                                host: "another-host".to_owned(),
                                ..process(9)
                            },
                        },
                        expires_at: u64::MAX,
                    },
                    Some(Replacing::token(current.token)),
                )
                .await
                .expect("take over");
            assert_eq!(taken, LeaseTake::Taken);
            let _ = resume.send(());
        };
        let (report, ()) = futures::future::join(w.rewind.recover(), other).await;
        let report = report.expect("recover");
        assert!(report.recovered.is_empty(), "{report:?}");
        assert_eq!(report.failed.len(), 1, "{report:?}");
        assert!(report.failed[0].error.contains("lease lost"), "{report:?}");
        assert_eq!(
            w.state(&["a.txt", "new.txt"]),
            ["half reverted", "-"],
            "nothing put back"
        );
        assert!(w.rewind.captures(None).await.expect("captures").is_empty());
        assert_eq!(w.repo.intents().await.expect("intents").len(), 1);
    })
}

/// A lease recovery judged expired (its holder on another host) and that its holder renews before the
/// takeover is not taken over: the holder is alive after all, and may be writing (review: the takeover
/// matched the token alone, so both went on).
#[test]
fn a_lease_renewed_after_recovery_judged_it_expired_is_not_taken_over() {
    block_on(async {
        let (w, s, _) = one_turn_world().await;
        let owner = ProcessIdentity {
            host: "another-host".to_owned(),
            ..process(8)
        };
        let token = crashed_revert(&w, &s.id, &owner).await;
        let session_key = LeaseKey::Session(s.id.clone());
        for key in [session_key.clone(), LeaseKey::Worktree(ROOT.to_owned())] {
            let mut expired = w.repo.lease(&key).await.expect("lease").expect("held");
            expired.expires_at = 1;
            let taken = w
                .repo
                .take_lease(&expired, Some(Replacing::token(token.clone())))
                .await
                .expect("expire it");
            assert_eq!(taken, LeaseTake::Taken);
        }
        let (reached, resume) = w.repo.pause_next_lease_take();
        let owner_renews = async {
            reached.await.expect("recovery's takeover is reached");
            let renewed = w
                .repo
                .renew_lease(&session_key, &token, u64::MAX)
                .await
                .expect("renew");
            assert!(renewed, "the owner renews its lease");
            let _ = resume.send(());
        };
        let (report, ()) = futures::future::join(w.rewind.recover(), owner_renews).await;
        let report = report.expect("recover");
        assert_eq!(
            report.in_progress,
            std::slice::from_ref(&token),
            "{report:?}"
        );
        assert_eq!(
            w.state(&["a.txt", "new.txt"]),
            ["half reverted", "-"],
            "nothing put back"
        );
        let lease = w.repo.lease(&session_key).await.expect("lease");
        assert_eq!(lease.map(|l| l.token), Some(token), "the owner keeps it");
    })
}

/// gc keeps, however old, the captures of an intent still pending: an interrupted recovery of it took
/// them before putting any file back, and they hold what the files were then (review: gc deleted them
/// with the other old captures).
#[test]
fn gc_keeps_the_captures_of_an_intent_still_pending() {
    block_on(async {
        let (w, s, _) = one_turn_world().await;
        let token = crashed_revert(&w, &s.id, &process(8)).await;
        let snapshot = w.snapshots.track(w.path()).await.expect("track").id;
        let now = w.host.now_ms();
        let capture = |intent: Option<String>, time: u64| rewind_core::model::Capture {
            directory: ROOT.to_owned(),
            snapshot: snapshot.clone(),
            time,
            message: "captured".to_owned(),
            paths: Vec::new(),
            intent,
        };
        w.repo
            .commit(Transaction {
                guards: Vec::new(),
                // The other one taken first: those taken after the pending intent's stay too.
                changes: vec![
                    Change::AddCapture(Box::new(capture(None, now - 1))),
                    Change::AddCapture(Box::new(capture(Some(token.0.clone()), now))),
                    Change::AddCapture(Box::new(capture(None, now + 1))),
                ],
                events: Vec::new(),
            })
            .await
            .expect("captures");
        const DAY_MS: u64 = 24 * 60 * 60 * 1000;
        w.host.advance(10 * DAY_MS);
        let summary = w
            .rewind
            .gc(rewind_core::service::GcRequest {
                older_than_ms: Some(7 * DAY_MS),
                grace: std::time::Duration::ZERO,
                directories: Vec::new(),
            })
            .await
            .expect("gc");
        assert_eq!(summary.captures_deleted, 1);
        let left = w.repo.captures(None).await.expect("captures");
        let intents: Vec<Option<&str>> = left.iter().map(|c| c.intent.as_deref()).collect();
        assert_eq!(intents, [Some(token.0.as_str()), None]);
    })
}

#[test]
fn the_next_operation_recovers_before_it_runs() {
    block_on(async {
        let (w, s, t) = one_turn_world().await;
        let dead = process(9);
        crashed_revert(&w, &s.id, &dead).await;
        w.host.kill(&dead);
        w.revert_to(&s.id, &t.user).await;
        assert_eq!(w.state(&["a.txt", "new.txt"]), ["a0", "-"]);
        w.rewind.unrevert(&s.id).await.expect("unrevert");
        assert_eq!(w.state(&["a.txt", "new.txt"]), ["a1", "n1"]);
    })
}

/// SPEC 8, "before any operation on a session": a revert that dies after the next operation ran its
/// recovery, while that operation waits to take its lease, is finished before the lease is taken over (the
/// operation would otherwise run on a half-reverted worktree, and its own lease would keep recovery away).
#[test]
fn a_revert_that_dies_after_the_next_operations_recovery_is_finished_before_its_lease_is_taken() {
    block_on(async {
        let (w, s, _) = one_turn_world().await;
        let assistant = w.prompt(&s.id, "two").await;
        let dead = process(12);
        // The step stops where it takes the session's lease, after its recovery found nothing to do.
        let (reached, resume) = w.repo.pause_next_lease_take();
        let beginning = w.rewind.begin_step(&s.id, &assistant);
        let crashing = async {
            reached.await.expect("the step takes its lease");
            crashed_revert(&w, &s.id, &dead).await;
            w.host.kill(&dead);
            resume.send(()).expect("resume the step");
        };
        let (begun, ()) = futures::future::join(beginning, crashing).await;
        begun.expect("the step begins once the interrupted revert is finished");
        assert_eq!(
            w.state(&["a.txt", "new.txt"]),
            ["a1", "n1"],
            "the half-done revert is put back"
        );
        assert!(w.repo.intents().await.expect("intents").is_empty());
        let session = w.rewind.session(&s.id).await.expect("session");
        assert!(session.step.is_some(), "the step is open");
        assert!(session.revert.is_none());
    })
}

/// A gone holder's lease is not taken over while its intent cannot be finished yet (another live
/// operation holds the worktree): the operation is busy, and the half-done files wait for recovery.
#[test]
fn a_gone_holders_lease_is_not_taken_while_its_intent_waits_for_the_worktree() {
    block_on(async {
        let (w, s, _) = one_turn_world().await;
        let assistant = w.prompt(&s.id, "two").await;
        let dead = process(13);
        let token = crashed_revert(&w, &s.id, &dead).await;
        w.host.kill(&dead);
        // A live process of this host holds the worktree now.
        hold_worktree(&w, "tok_live", Some(token)).await;
        let begun = w.rewind.begin_step(&s.id, &assistant).await;
        assert!(matches!(begun, Err(Error::Busy { .. })), "{begun:?}");
        // Deleting the session takes only its lease: taken, it would delete the intent with the session,
        // and the half-done files would never be put back.
        let deleted = w.rewind.delete_session(&s.id).await;
        assert!(matches!(deleted, Err(Error::Busy { .. })), "{deleted:?}");
        assert_eq!(w.state(&["a.txt", "new.txt"]), ["half reverted", "-"]);
        assert_eq!(w.repo.intents().await.expect("intents").len(), 1);
        let session = w.rewind.session(&s.id).await.expect("session");
        assert!(session.step.is_none());
    })
}

/// `begin_turn` stores a user message, its assistant message and the step together; while the worktree
/// is busy (a revert of another process holds it) it is refused and records nothing, so no turn is left
/// without its step.
#[test]
fn a_turn_that_cannot_begin_its_step_records_nothing() {
    block_on(async {
        let w = World::new();
        w.write("a.txt", "a0");
        let s = w.session().await;
        let before = w.messages(&s.id).await.len();
        let busy = hold_worktree(&w, "tok_revert", None).await;
        let refused = w
            .rewind
            .begin_turn(
                &s.id,
                NewMessage::user_text("run it"),
                NewMessage::assistant(),
            )
            .await;
        assert!(matches!(refused, Err(Error::Busy { .. })), "{refused:?}");
        assert_eq!(w.messages(&s.id).await.len(), before, "nothing recorded");
        let session = w.rewind.session(&s.id).await.expect("session");
        assert!(session.step.is_none());

        w.repo
            .release_lease(&busy.key, &busy.token)
            .await
            .expect("release");
        let (user, assistant, start) = w
            .rewind
            .begin_turn(
                &s.id,
                NewMessage::user_text("run it"),
                NewMessage::assistant(),
            )
            .await
            .expect("begin the turn");
        assert_eq!(assistant.info.parent_id.as_ref(), Some(&user.info.id));
        assert_eq!(start.message_id, assistant.info.id);
        let messages = w.messages(&s.id).await;
        assert_eq!(messages.len(), before + 2);
        let session = w.rewind.session(&s.id).await.expect("session");
        let step = session.step.expect("the step is open");
        assert_eq!(step.message_id, assistant.info.id);
        let held = w
            .repo
            .lease(&LeaseKey::Session(s.id.clone()))
            .await
            .expect("lease");
        assert_eq!(
            held.map(|lease| lease.token),
            Some(step.token),
            "the step keeps the session's lease"
        );
        w.write("a.txt", "a1");
        w.rewind
            .finish_step(&s.id, &assistant.info.id, StepEnd::default())
            .await
            .expect("finish");
        w.revert_to(&s.id, &user.info.id).await;
        assert_eq!(w.read("a.txt").as_deref(), Some("a0"));
    })
}

/// A recovery whose last step failed leaves its session's lease to the interrupted operation (expired),
/// not free: deleting the session while its worktree is busy is refused, and the intent stays for the next
/// recovery.
#[test]
fn a_failed_recovery_leaves_the_session_to_its_intent() {
    block_on(async {
        let (w, s, _, token) = crashed_world(14).await;
        w.repo.fail_next_intent_delete();
        let report = w.rewind.recover().await.expect("recover");
        assert_eq!(report.failed.len(), 1, "{report:?}");
        let lease = w
            .repo
            .lease(&LeaseKey::Session(s.id.clone()))
            .await
            .expect("lease")
            .expect("the session's lease is held");
        assert_eq!(
            lease.token,
            token.interrupted(),
            "by the interrupted operation again, marked so"
        );
        let worktree = w
            .repo
            .lease(&LeaseKey::Worktree(ROOT.to_owned()))
            .await
            .expect("lease")
            .expect("the worktree's lease is held");
        assert_eq!(
            worktree.token,
            token.interrupted(),
            "the worktree's too, marked interrupted"
        );
        // A live process of this host holds the worktree now.
        let live = hold_worktree(&w, "tok_live", Some(token.interrupted())).await;
        let deleted = w.rewind.delete_session(&s.id).await;
        assert!(matches!(deleted, Err(Error::Busy { .. })), "{deleted:?}");
        assert_eq!(w.repo.intents().await.expect("intents").len(), 1);
        // Once the worktree is free, the next operation finishes the intent first.
        w.repo
            .release_lease(&live.key, &live.token)
            .await
            .expect("release");
        w.rewind.delete_session(&s.id).await.expect("delete");
        assert!(w.repo.intents().await.expect("intents").is_empty());
    })
}

/// The recovery an operation runs first, when it meets the database away (its last commit unreachable),
/// fails the operation as that outage (a 500 that says to wait for the database), not as a busy worktree
/// (a 409, "fix the cause, then try again"; stop 67's review); any other failure of it is still the busy
/// worktree. The intent stays for the next recovery either way.
#[test]
fn an_operation_whose_recovery_meets_a_database_outage_says_so() {
    block_on(async {
        for fault in [Some(rewind_core::error::StorageFault::Unreachable), None] {
            let (w, s, _, _) = crashed_world(15).await;
            w.repo.fail_next_intent_delete();
            if let Some(fault) = fault {
                w.repo.fail_as("fail_next_intent_delete", fault);
            }
            let deleted = w.rewind.delete_session(&s.id).await;
            match fault {
                Some(fault) => assert_eq!(
                    deleted.as_ref().err().and_then(Error::storage_fault),
                    Some(fault),
                    "{deleted:?}"
                ),
                None => assert!(
                    matches!(&deleted, Err(Error::Busy { message, .. }) if message.starts_with("Worktree is busy")),
                    "{deleted:?}"
                ),
            }
            assert_eq!(w.repo.intents().await.expect("intents").len(), 1);
        }
    })
}

/// A turn recorded by process `exec` (a `rewind exec`): its user message, and the assistant message whose
/// step `exec` has begun and holds; this host is itself again afterwards.
async fn step_of(
    w: &World,
    session: &rewind_core::model::SessionId,
    exec: &ProcessIdentity,
) -> (
    rewind_core::model::MessageWithParts,
    rewind_core::model::MessageWithParts,
) {
    let me = w.host.this_process();
    w.host.become_process(exec.clone());
    let user = w
        .rewind
        .create_message(session, NewMessage::user_text("run it"))
        .await
        .expect("user");
    let assistant = w
        .rewind
        .create_message(session, NewMessage::assistant())
        .await
        .expect("assistant");
    w.rewind
        .begin_step(session, &assistant.info.id)
        .await
        .expect("begin");
    w.host.become_process(me);
    (user, assistant)
}

#[test]
fn a_killed_process_leaves_a_step_that_the_next_command_aborts() {
    block_on(async {
        let w = World::new();
        w.write("a.txt", "a0");
        let s = w.session().await;
        let exec = process(11);
        let (user, assistant) = step_of(&w, &s.id, &exec).await;
        w.write("a.txt", "written by the killed command");
        // The command is killed; the next invocation is another process.
        w.host.kill(&exec);
        let next = w
            .rewind
            .create_message(&s.id, NewMessage::user_text("next"))
            .await;
        assert!(next.is_ok(), "{next:?}");
        let message = w
            .rewind
            .message(&s.id, &assistant.info.id)
            .await
            .expect("message");
        let kinds: Vec<_> = message
            .parts
            .iter()
            .map(|p| p.body.kind().to_owned())
            .collect();
        assert_eq!(kinds, ["step-start", "step-finish", "patch"]);
        match &message.parts[1].body {
            PartBody::StepFinish(finish) => assert_eq!(finish.reason, "aborted"),
            other => panic!("{other:?}"),
        }
        w.revert_to(&s.id, &user.info.id).await;
        assert_eq!(
            w.read("a.txt").as_deref(),
            Some("a0"),
            "the aborted step is revertable"
        );
    })
}

/// Begins the step of message `message` as process `pid`, which then does `meanwhile` and is killed: a
/// `rewind exec` killed while its command ran.
async fn begin_as_dead_process(
    w: &World,
    (session, message): (
        &rewind_core::model::SessionId,
        &rewind_core::model::MessageId,
    ),
    pid: u32,
    meanwhile: impl FnOnce(&World),
) {
    let exec = process(pid);
    let me = w.host.this_process();
    w.host.become_process(exec.clone());
    w.rewind.begin_step(session, message).await.expect("begin");
    meanwhile(w);
    w.host.become_process(me);
    w.host.kill(&exec);
}

/// The reason and cost of each `step-finish` of `message`.
fn finishes_of(message: &rewind_core::model::MessageWithParts) -> Vec<(String, f64)> {
    message
        .parts
        .iter()
        .filter_map(|p| match &p.body {
            PartBody::StepFinish(finish) => Some((finish.reason.clone(), finish.cost)),
            _ => None,
        })
        .collect()
}

/// A finish asked by another process for a step whose owner is gone aborts that step, as the next
/// operation on the session does (SPEC section 4), and answers why no step is open. Review: 409 named the
/// dead process, and the step stayed open (the session busy) until some other operation came.
#[test]
fn a_finish_of_a_dead_owners_step_aborts_it_and_says_so() {
    block_on(async {
        let w = World::new();
        w.write("a.txt", "a0");
        let s = w.session().await;
        let a = w.prompt(&s.id, "run it").await;
        begin_as_dead_process(&w, (&s.id, &a), 13, |w| {
            w.write("a.txt", "written by the killed command");
        })
        .await;
        let end = StepEnd {
            cost: Some(0.25),
            ..StepEnd::default()
        };
        let finish = w.rewind.finish_step(&s.id, &a, end).await;
        assert!(
            matches!(&finish, Err(Error::InvalidInput(message))
                if message.contains("its step was aborted") && message.contains("this one, when it is the step's finish")),
            "{finish:?}"
        );
        let session = w.rewind.session(&s.id).await.expect("session");
        assert!(session.step.is_none(), "the step is closed");
        let message = w.rewind.message(&s.id, &a).await.expect("message");
        let finishes = finishes_of(&message);
        assert_eq!(
            finishes,
            [("aborted".to_owned(), 0.25)],
            "the finish's usage is the step's"
        );
        assert!(
            message
                .parts
                .iter()
                .any(|p| matches!(p.body, PartBody::Patch(_))),
            "what the step changed is recorded: {:?}",
            message.parts
        );
        // Its end is now, as the finish says: not a late one.
        let warnings = w.rewind.warnings(&s.id).await.expect("warnings");
        assert!(warnings.is_empty(), "{warnings:?}");
    })
}

/// An abort asked by the step's owner ends it at once: its end snapshot is not late, and no warning says
/// it may hold later changes (that warning is for a step found abandoned).
#[test]
fn an_owners_abort_raises_no_late_end_warning() {
    block_on(async {
        let w = World::new();
        w.write("a.txt", "a0");
        let s = w.session().await;
        let a = w.prompt(&s.id, "run it").await;
        w.rewind.begin_step(&s.id, &a).await.expect("begin");
        w.write("a.txt", "a1");
        let parts = w.rewind.abort_step(&s.id, &a).await.expect("abort");
        assert!(
            parts.iter().any(|p| matches!(p.body, PartBody::Patch(_))),
            "{parts:?}"
        );
        let warnings = w.rewind.warnings(&s.id).await.expect("warnings");
        assert!(warnings.is_empty(), "{warnings:?}");
    })
}

/// A step whose owner is gone while another live process holds its lease (closing it, say) is refused
/// naming that process, not the dead owner "still running" (review).
#[test]
fn a_step_being_closed_by_another_process_is_busy_naming_that_process() {
    block_on(async {
        let w = World::new();
        let s = w.session().await;
        let a = w.prompt(&s.id, "run it").await;
        begin_as_dead_process(&w, (&s.id, &a), 14, |_| {}).await;
        let key = LeaseKey::Session(s.id.clone());
        let step_lease = w
            .repo
            .lease(&key)
            .await
            .expect("reads")
            .expect("the step's");
        let closer = Lease {
            token: LeaseToken("tok_closing".to_owned()),
            holder: Holder {
                kind: HolderKind::Process,
                process: process(22),
            },
            ..step_lease.clone()
        };
        let taken = w
            .repo
            .take_lease(&closer, Some(Replacing::token(step_lease.token.clone())))
            .await
            .expect("takes");
        assert_eq!(taken, LeaseTake::Taken);
        for refused in [
            w.rewind
                .finish_step(&s.id, &a, StepEnd::default())
                .await
                .map(|_| ()),
            w.rewind.abort(&s.id).await.map(|_| ()),
        ] {
            let Err(Error::Busy { message, .. }) = &refused else {
                panic!("{refused:?}");
            };
            assert!(message.contains(&closer.holder.to_string()), "{message}");
            assert!(!message.contains("still running"), "{message}");
        }
    })
}

/// A server's `Rewind` (a step timeout of 60 s) on `w`, a session of it with a prompt, and the assistant
/// message whose step it has begun.
async fn server_step(
    w: &World,
) -> (
    Rewind,
    rewind_core::model::Session,
    rewind_core::model::MessageWithParts,
) {
    let config = ServiceConfig {
        holder_kind: HolderKind::Server,
        step_timeout_ms: 60_000,
        ..ServiceConfig::default()
    };
    let server = Rewind::new(w.snapshots.clone(), w.repo.clone(), w.host.clone(), config);
    let s = server.create_session(ROOT, None).await.expect("session");
    server
        .create_message(&s.id, NewMessage::user_text("go"))
        .await
        .expect("user");
    let a = server
        .create_message(&s.id, NewMessage::assistant())
        .await
        .expect("assistant");
    server.begin_step(&s.id, &a.info.id).await.expect("begin");
    (server, s, a)
}

/// A finish that comes after the step timeout of silence finds the step abandoned, as any request then
/// does: it is aborted (with the finish's usage), and the answer says so, whichever request comes first
/// (review: the finish recorded `stop`, while a part sent first aborted the step).
#[test]
fn a_finish_after_the_step_timeout_aborts_the_step() {
    block_on(async {
        let w = World::new();
        let (server, s, a) = server_step(&w).await;
        w.write("x.txt", "agent wrote this");
        w.host.advance(120_000);
        let end = StepEnd {
            cost: Some(0.5),
            ..StepEnd::default()
        };
        let late = server.finish_step(&s.id, &a.info.id, end).await;
        assert!(
            matches!(&late, Err(Error::InvalidInput(message)) if message.contains("its step was aborted")),
            "{late:?}"
        );
        let message = server.message(&s.id, &a.info.id).await.expect("message");
        let finishes = finishes_of(&message);
        assert_eq!(finishes, [("aborted".to_owned(), 0.5)]);
        assert!(
            message
                .parts
                .iter()
                .any(|p| matches!(p.body, PartBody::Patch(_))),
            "what the step changed is recorded"
        );
    })
}

/// One look of a server at the abandoned steps, none announced before and no recovery waiting.
async fn tend(rewind: &Rewind) -> rewind_core::service::AbandonedSteps {
    let none = std::collections::HashSet::new();
    rewind
        .tend_abandoned_steps(&none, &none)
        .await
        .expect("looks")
}

/// Whether the message's patch names exactly `files`.
fn patches_exactly(message: &rewind_core::model::MessageWithParts, files: &[String]) -> bool {
    message
        .parts
        .iter()
        .any(|p| matches!(&p.body, PartBody::Patch(patch) if patch.files == files))
}

/// A server sees to abandoned steps every few seconds (`tend_abandoned_steps`). An HTTP step whose client
/// has been silent past the step timeout is announced idle once (event stream review: the session stayed
/// busy to its clients) and left open: its client may still be at work (a tool running past the timeout),
/// and what it writes until the next request is in the step's patch when that request aborts it (diff
/// review). Within the timeout nothing is written; another server of the host leaves it to the step's
/// own; a second look says nothing again.
#[test]
fn a_server_announces_a_silent_step_idle_and_leaves_its_abort_to_the_next_request() {
    block_on(async {
        let w = World::new();
        let (server, s, a) = server_step(&w).await;
        let none = std::collections::HashSet::new();
        w.host.advance(30_000);
        let before = w.last_seq().await;
        let report = tend(&server).await;
        assert!(
            report.aborted.is_empty() && report.announced.is_empty() && report.failed.is_empty(),
            "{report:?}"
        );
        assert_eq!(w.last_seq().await, before, "nothing written");

        w.host.advance(60_000);
        // Another server of this host leaves it to the step's own server, which still runs.
        let me = w.host.this_process();
        w.host.become_process(process(41));
        let report = tend(&server).await;
        assert!(report.announced.is_empty(), "{report:?}");
        assert_eq!(w.last_seq().await, before, "nothing written");
        w.host.become_process(me);
        let report = tend(&server).await;
        assert!(
            report.aborted.is_empty() && report.failed.is_empty(),
            "{report:?}"
        );
        assert_eq!(report.announced.len(), 1, "{report:?}");
        assert_eq!(
            w.event_types_after(before).await,
            ["session.status", "session.idle"]
        );
        let announced: std::collections::HashSet<_> = report.announced.into_iter().collect();
        let again = w.last_seq().await;
        let report = server
            .tend_abandoned_steps(&announced, &none)
            .await
            .expect("looks");
        assert!(report.announced.is_empty(), "{report:?}");
        assert_eq!(w.last_seq().await, again, "said once");
        // The client was still at work: what it wrote is in the step's patch, with the finish's usage.
        w.write("x.txt", "written by a tool that ran past the timeout");
        let late = server
            .finish_step(
                &s.id,
                &a.info.id,
                StepEnd {
                    cost: Some(0.5),
                    ..StepEnd::default()
                },
            )
            .await;
        assert!(
            matches!(&late, Err(Error::InvalidInput(message)) if message.contains("its step was aborted")),
            "{late:?}"
        );
        let message = server.message(&s.id, &a.info.id).await.expect("message");
        assert_eq!(finishes_of(&message), [("aborted".to_owned(), 0.5)]);
        assert!(patches_exactly(&message, &[w.abs("x.txt")]), "{message:?}");
    })
}

/// A step whose owner is a process on this host that is gone (a `rewind exec` killed) is aborted by the
/// server's look at once, its changes recorded, `session.status` idle published; one whose process still
/// runs, however long, is left alone; while the store's disk is full, the step is left open for the next
/// look rather than closed without its patch (black-box review).
#[test]
fn a_server_aborts_a_step_whose_process_died() {
    block_on(async {
        let w = World::new();
        w.write("a.txt", "a0");
        let s = w.session().await;
        let exec = process(12);
        let (_, assistant) = step_of(&w, &s.id, &exec).await;
        w.write("a.txt", "written by the command");
        w.host.advance(3_600_000);
        let report = tend(&w.rewind).await;
        assert!(
            report.aborted.is_empty() && report.announced.is_empty(),
            "a live process keeps its step: {report:?}"
        );

        w.host.kill(&exec);
        // The store's disk full: the step is not closed without its patch; the pass tries again.
        w.snapshots.fill_disk(true);
        let report = tend(&w.rewind).await;
        assert!(report.aborted.is_empty(), "{report:?}");
        assert!(
            matches!(report.failed.as_slice(), [(id, error)] if *id == s.id
                && error.storage_fault() == Some(rewind_core::error::StorageFault::DiskFull)),
            "{report:?}"
        );
        assert!(
            w.repo
                .session(&s.id)
                .await
                .expect("reads")
                .expect("stored")
                .step
                .is_some()
        );
        w.snapshots.fill_disk(false);
        let before = w.last_seq().await;
        let report = tend(&w.rewind).await;
        assert_eq!(report.aborted, std::slice::from_ref(&s.id), "{report:?}");
        assert!(
            report.announced.is_empty() && report.failed.is_empty(),
            "{report:?}"
        );
        let kinds = w.event_types_after(before).await;
        assert!(kinds.iter().any(|k| k == "session.status"), "{kinds:?}");
        let session = w.repo.session(&s.id).await.expect("reads").expect("stored");
        assert!(session.step.is_none());
        let message = w
            .rewind
            .message(&s.id, &assistant.info.id)
            .await
            .expect("message");
        assert!(patches_exactly(&message, &[w.abs("a.txt")]), "{message:?}");
    })
}

/// An owner's abort of its own step whose lease had lapsed (an HTTP client silent past the step timeout)
/// is late too: the warning says the patch may hold changes made since (review: the user's edits went
/// into the patch without a word, as the abort the TUI sends before `/undo` took them).
#[test]
fn an_owners_abort_of_a_timed_out_step_warns_of_its_late_end() {
    block_on(async {
        let w = World::new();
        let (server, s, _) = server_step(&w).await;
        w.write("x.txt", "agent wrote this");
        w.host.advance(120_000);
        w.write("b.txt", "the user's own file, later");
        server.abort(&s.id).await.expect("abort");
        let warning = w.last_warning(&s.id, "the late end's warning").await;
        assert!(
            warning.message.contains("after the owner stopped"),
            "{warning:?}"
        );
        assert_eq!(warning.files, [w.abs("b.txt"), w.abs("x.txt")]);
        // Within the timeout, the owner's abort is not late.
        server
            .create_message(&s.id, NewMessage::user_text("again"))
            .await
            .expect("user");
        let a = server
            .create_message(&s.id, NewMessage::assistant())
            .await
            .expect("assistant");
        server.begin_step(&s.id, &a.info.id).await.expect("begin");
        w.write("x.txt", "agent wrote this again");
        let count = server.warnings(&s.id).await.expect("warnings").len();
        server.abort(&s.id).await.expect("abort");
        assert_eq!(
            server.warnings(&s.id).await.expect("warnings").len(),
            count,
            "no new warning"
        );
    })
}

#[test]
fn a_step_of_a_live_process_blocks_revert_in_every_session_of_the_worktree() {
    block_on(async {
        let w = World::new();
        let s1 = w.session().await;
        let t1 = w.turn(&s1.id, "one", |w| w.write("a.txt", "1")).await;
        let s2 = w.session().await;
        let a2 = w.prompt(&s2.id, "other").await;
        let exec = process(12);
        let me = w.host.this_process();
        w.host.become_process(exec);
        w.rewind.begin_step(&s2.id, &a2).await.expect("begin");
        w.host.become_process(me);
        let result = w
            .rewind
            .revert(
                &s1.id,
                rewind_core::RevertTarget {
                    message_id: t1.user.clone(),
                    part_id: None,
                },
            )
            .await;
        assert!(
            matches!(&result, Err(Error::Busy { message, .. }) if message.contains(s2.id.as_str())),
            "{result:?}"
        );
        assert_eq!(w.read("a.txt").as_deref(), Some("1"));
        // And a step cannot be finished by a process that does not own it.
        let finish = w.rewind.finish_step(&s2.id, &a2, StepEnd::default()).await;
        assert!(matches!(finish, Err(Error::Busy { .. })), "{finish:?}");
    })
}

/// A worktree where session `q` has one turn (`a.txt` from `a0` to `a1`) and session `p` an assistant
/// message `a` whose step is open (owned by this process).
async fn a_step_open_beside_a_turn() -> (
    World,
    rewind_core::model::Session,
    Turn,
    rewind_core::model::Session,
    rewind_core::model::MessageId,
) {
    let w = World::new();
    w.write("a.txt", "a0");
    let q = w.session().await;
    let t = w.turn(&q.id, "q's turn", |w| w.write("a.txt", "a1")).await;
    let p = w.session().await;
    let a = w.prompt(&p.id, "p").await;
    w.rewind.begin_step(&p.id, &a).await.expect("begin");
    (w, q, t, p, a)
}

/// Finishes the open step of message `a`, which must end with reason `stop`.
async fn finishes_with_stop(
    w: &World,
    session: &rewind_core::model::SessionId,
    a: &rewind_core::model::MessageId,
) {
    let finished = w
        .rewind
        .finish_step(session, a, StepEnd::default())
        .await
        .expect("the step finishes");
    assert!(
        finished
            .iter()
            .any(|part| matches!(&part.body, PartBody::StepFinish(f) if f.reason == "stop")),
        "{finished:?}"
    );
}

/// A step's finish refused because another operation holds the worktree (a revert of another session,
/// here its lease) leaves the step open with its own lease: the next operation on the worktree does not
/// take it for abandoned. Black-box: the finish's closing lease was released, the step had no lease any
/// more, the racing revert aborted it, and the finish, tried again, got 400 "no step is open".
#[test]
fn a_step_whose_finish_waits_for_the_worktree_keeps_its_lease() {
    block_on(async {
        let (w, q, _, p, a) = a_step_open_beside_a_turn().await;
        w.write("p.txt", "p's work");
        // Another operation holds the worktree (a live process's).
        let other = Lease {
            key: LeaseKey::Worktree(ROOT.to_owned()),
            token: LeaseToken("tok_other_operation".to_owned()),
            holder: Holder {
                kind: HolderKind::Process,
                process: process(21),
            },
            expires_at: u64::MAX,
        };
        w.repo.take_lease(&other, None).await.expect("lease");
        let refused = w.rewind.finish_step(&p.id, &a, StepEnd::default()).await;
        assert!(matches!(refused, Err(Error::Busy { .. })), "{refused:?}");
        w.repo
            .release_lease(&other.key, &other.token)
            .await
            .expect("release");
        let session = w.rewind.session(&p.id).await.expect("session");
        assert!(
            !w.rewind
                .step_is_abandoned(&session)
                .await
                .expect("abandoned?"),
            "the step keeps its lease"
        );
        // The next operation on the worktree finds the step open, not abandoned.
        let revert = w.revert_to_result(&q.id).await;
        assert!(matches!(revert, Err(Error::Busy { .. })), "{revert:?}");
        finishes_with_stop(&w, &p.id, &a).await;
    })
}

/// A step whose owner's finish holds the session's lease (the finish's own token, not the step's) is not
/// taken for abandoned by an operation of another session, neither while the finish holds it nor once it
/// has given the lease back to the step: the step is alive, and the operation is busy. Black-box, on one
/// server: a revert of another session aborted a step whose finish it had made wait (1 in about 150
/// steps, after the finish kept its lease).
#[test]
fn a_step_whose_finish_holds_its_lease_is_not_taken_for_abandoned() {
    block_on(async {
        let (w, q, t, p, a) = a_step_open_beside_a_turn().await;
        let key = LeaseKey::Session(p.id.clone());
        let step_lease = w
            .repo
            .lease(&key)
            .await
            .expect("reads")
            .expect("the step's");
        // The owner's finish holds the session's lease with a token of its own.
        let finishing = Lease {
            token: LeaseToken("tok_finishing".to_owned()),
            ..step_lease.clone()
        };
        let taken = w
            .repo
            .take_lease(&finishing, Some(Replacing::token(step_lease.token.clone())))
            .await
            .expect("takes");
        assert_eq!(taken, LeaseTake::Taken);
        let session = w.rewind.session(&p.id).await.expect("session");
        assert!(
            !w.rewind
                .step_is_abandoned(&session)
                .await
                .expect("abandoned?"),
            "a step being finished is not abandoned"
        );
        let reverted = w.try_revert_to(&q.id, &t.user).await;
        assert!(matches!(reverted, Err(Error::Busy { .. })), "{reverted:?}");
        // The finish gives the lease back to the step (it could not close it).
        let back = w
            .repo
            .take_lease(&step_lease, Some(Replacing::token(finishing.token.clone())))
            .await
            .expect("takes");
        assert_eq!(back, LeaseTake::Taken);
        let reverted = w.try_revert_to(&q.id, &t.user).await;
        assert!(matches!(reverted, Err(Error::Busy { .. })), "{reverted:?}");
        let session = w.rewind.session(&p.id).await.expect("session");
        assert!(session.step.is_some(), "the step is still open");
        assert_eq!(w.read("a.txt").as_deref(), Some("a1"), "nothing reverted");
        finishes_with_stop(&w, &p.id, &a).await;
    })
}

/// A step whose owner is finishing it (its finish holds the session's lease with a token of its own, here
/// paused at its commit) is being closed, not abandoned: a message of another session in the same
/// worktree, which aborts the worktree's abandoned steps first, is stored, and the finish closes the step
/// as its owner's. Review: the finish's token was taken for a lost lease, the message tried to abort the
/// step, found the lease held, and failed with 409.
#[test]
fn a_message_beside_a_step_being_finished_is_stored() {
    block_on(async {
        let (w, q, _, p, a) = a_step_open_beside_a_turn().await;
        w.write("p.txt", "p's work");
        let (reached, resume) = w.repo.pause_next_commit();
        let finishing = finishes_with_stop(&w, &p.id, &a);
        let meanwhile = async {
            reached.await.expect("the finish reaches its commit");
            let typed = w
                .rewind
                .create_message(&q.id, NewMessage::user_text("typed meanwhile"))
                .await;
            resume.send(()).expect("resume the finish");
            typed
        };
        let ((), typed) = futures::future::join(finishing, meanwhile).await;
        let typed = typed.expect("the message is stored");
        assert_eq!(
            w.message_ids(&q.id).await.last(),
            Some(&typed.info.id),
            "stored last"
        );
    })
}

/// The check `rewind exec` makes before its turn (`refuse_if_step_busy`), on the session as it read it: a
/// step open under its owner's lease is refused naming its owner, still running; while another token holds
/// the session's lease (the step being closed: here its owner's finish, paused at its commit) the holder
/// of that lease is named instead (review: `exec` named the step's owner while another process closed the
/// step); once the step is closed, the turn may begin.
#[test]
fn a_turn_beside_a_step_being_closed_names_who_closes_it() {
    block_on(async {
        let (w, _q, _, p, a) = a_step_open_beside_a_turn().await;
        let session = w.rewind.session(&p.id).await.expect("session");
        let open = w.rewind.refuse_if_step_busy(&session).await;
        assert!(
            matches!(&open, Err(Error::Busy { message, .. })
                if message.contains("its step is owned by") && message.contains("still running")),
            "{open:?}"
        );
        let (reached, resume) = w.repo.pause_next_commit();
        let finishing = finishes_with_stop(&w, &p.id, &a);
        let meanwhile = async {
            reached.await.expect("the finish reaches its commit");
            let checked = w.rewind.refuse_if_step_busy(&session).await;
            resume.send(()).expect("resume the finish");
            checked
        };
        let ((), closing) = futures::future::join(finishing, meanwhile).await;
        assert!(
            matches!(&closing, Err(Error::Busy { message, .. })
                if message.contains("(held by ") && !message.contains("owned by")),
            "{closing:?}"
        );
        let closed = w.rewind.session(&p.id).await.expect("session");
        let now = w.rewind.refuse_if_step_busy(&closed).await;
        assert!(now.is_ok(), "no step is open: {now:?}");
    })
}

/// Two servers' `Rewind`s on `w`'s database and store: `a` on `w`'s host and process, `b` as process 2 on
/// a host of its own (its clock and the processes it knows gone), whose handle is returned too.
fn two_servers(
    w: &World,
) -> (
    Rewind,
    Rewind,
    std::sync::Arc<rewind_core::testkit::FakeHost>,
) {
    let config = server_config();
    let a = Rewind::new(
        w.snapshots.clone(),
        w.repo.clone(),
        w.host.clone(),
        config.clone(),
    );
    let b_host = std::sync::Arc::new(rewind_core::testkit::FakeHost::new(
        rewind_core::HostPort::now_ms(&*w.host),
    ));
    b_host.become_process(process(2));
    let b = Rewind::new(w.snapshots.clone(), w.repo.clone(), b_host.clone(), config);
    (a, b, b_host)
}

/// A user message `prompt` and an assistant message recorded through `server` in session `s`, whose step
/// it has begun; the assistant message's id.
async fn step_through(
    server: &Rewind,
    s: &rewind_core::model::SessionId,
    prompt: &str,
) -> rewind_core::model::MessageId {
    server
        .create_message(s, NewMessage::user_text(prompt))
        .await
        .expect("user");
    let m = server
        .create_message(s, NewMessage::assistant())
        .await
        .expect("assistant")
        .info
        .id;
    server.begin_step(s, &m).await.expect("begin");
    m
}

/// Two servers on one database: an HTTP step begun through one is finished, and another aborted, through
/// the other, as the step belongs to its client, which may reach either (SPEC 4: its owner is "the
/// server"); a part through the other renews it. A process of the command line still may not take a live
/// server's step. Review: the other server answered 409 "Session is busy" to the finish and the abort.
#[test]
fn a_step_begun_through_one_server_is_finished_or_aborted_through_another() {
    block_on(async {
        let w = World::new();
        let (a, b, _) = two_servers(&w);
        let s = a.create_session(ROOT, None).await.expect("session");
        for abort in [false, true] {
            let m = step_through(&a, &s.id, "go").await;
            w.write("x.txt", if abort { "aborted" } else { "finished" });
            b.append_part(&s.id, &m, NewPart::new(PartBody::text("through b")))
                .await
                .expect("a part through b");
            // The command line is a process of its own: a live server's step is not its to close.
            let cli = w.rewind.abort(&s.id).await;
            assert!(matches!(cli, Err(Error::Busy { .. })), "{cli:?}");
            let parts = if abort {
                b.abort_step(&s.id, &m).await.expect("an abort through b")
            } else {
                b.finish_step(&s.id, &m, StepEnd::default())
                    .await
                    .expect("a finish through b")
            };
            let reason = parts.iter().find_map(|p| match &p.body {
                PartBody::StepFinish(finish) => Some(finish.reason.clone()),
                _ => None,
            });
            let wanted = if abort { "aborted" } else { "stop" };
            assert_eq!(reason.as_deref(), Some(wanted), "{parts:?}");
            assert!(
                parts.iter().any(|p| p.as_patch().is_some()),
                "the step's change is recorded: {parts:?}"
            );
            let session = b.session(&s.id).await.expect("session");
            assert!(session.step.is_none(), "closed");
        }
    })
}

/// An HTTP client's step is the client's, whichever server it began through (README "Databases"): when
/// the server process it began through has ended (stopped in a rolling restart, say), another server
/// neither announces it idle nor aborts it while its client keeps sending within the step timeout, and the
/// client finishes it there; silent past the timeout, it is abandoned as any. To the command line such a
/// step is abandoned at once: no client of its own keeps it (a `rewind undo` after a server's crash is not
/// held up). Multi-server fuzz: the next part through the other server aborted the step, and the finish
/// answered 400 "its owner was gone".
#[test]
fn an_http_step_outlives_the_server_it_began_through_while_its_client_is_at_work() {
    use rewind_core::testkit::FakeHost;
    block_on(async {
        let w = World::new();
        let (a, b, b_host) = two_servers(&w);
        let a_process = w.host.this_process();
        let now = rewind_core::HostPort::now_ms(&*w.host);
        let cli_host = std::sync::Arc::new(FakeHost::new(now));
        cli_host.become_process(process(3));
        let cli = Rewind::new(
            w.snapshots.clone(),
            w.repo.clone(),
            cli_host.clone(),
            ServiceConfig::default(),
        );
        let s = a.create_session(ROOT, None).await.expect("session");
        let m = step_through(&a, &s.id, "go").await;
        // Server a stops; its client goes on through b.
        b_host.kill(&a_process);
        cli_host.kill(&a_process);
        b_host.advance(30_000);
        let session = b.session(&s.id).await.expect("session");
        assert!(
            cli.step_is_abandoned(&session).await.expect("judged"),
            "to the command line, abandoned"
        );
        assert!(
            !b.step_is_abandoned(&session).await.expect("judged"),
            "to a server, its client's while it is at work"
        );
        let report = tend(&b).await;
        assert!(
            report.announced.is_empty() && report.aborted.is_empty(),
            "{report:?}"
        );
        b.append_part(&s.id, &m, NewPart::new(PartBody::text("through b")))
            .await
            .expect("a part through b");
        // 75 s after the step began, 45 s after the client's last part: within the step timeout.
        b_host.advance(45_000);
        w.write("x.txt", "the agent's work");
        let parts = b
            .finish_step(&s.id, &m, StepEnd::default())
            .await
            .expect("the client finishes its step through b");
        let reason = parts.iter().find_map(|p| match &p.body {
            PartBody::StepFinish(finish) => Some(finish.reason.clone()),
            _ => None,
        });
        assert_eq!(reason.as_deref(), Some("stop"), "{parts:?}");
        assert!(parts.iter().any(|p| p.as_patch().is_some()), "{parts:?}");

        // A step of the ended server whose client is silent: abandoned once the timeout has passed.
        w.host.set_now(rewind_core::HostPort::now_ms(&*b_host));
        step_through(&a, &s.id, "again").await;
        b_host.advance(30_000);
        let session = b.session(&s.id).await.expect("session");
        assert!(!b.step_is_abandoned(&session).await.expect("judged"));
        b_host.advance(31_000);
        assert!(b.step_is_abandoned(&session).await.expect("judged"));
        let report = tend(&b).await;
        assert_eq!(report.announced.len(), 1, "{report:?}");
    })
}

#[test]
fn a_server_step_is_abandoned_after_the_step_timeout_of_silence() {
    block_on(async {
        let w = World::new();
        let config = server_config();
        let server = Rewind::new(w.snapshots.clone(), w.repo.clone(), w.host.clone(), config);
        let s = server.create_session(ROOT, None).await.expect("session");
        let user = server
            .create_message(&s.id, NewMessage::user_text("go"))
            .await
            .expect("user");
        let a = server
            .create_message(&s.id, NewMessage::assistant())
            .await
            .expect("assistant");
        server.begin_step(&s.id, &a.info.id).await.expect("begin");
        w.write("x.txt", "agent wrote this");
        let target = rewind_core::RevertTarget {
            message_id: user.info.id.clone(),
            part_id: None,
        };
        w.host.advance(30_000);
        // A request on the session renews the step's lease.
        server
            .append_part(
                &s.id,
                &a.info.id,
                rewind_core::service::NewPart::new(PartBody::text("working")),
            )
            .await
            .expect("part");
        w.host.advance(40_000);
        let busy = server.revert(&s.id, target.clone()).await;
        assert!(
            matches!(busy, Err(Error::Busy { .. })),
            "still within the timeout: {busy:?}"
        );
        w.host.advance(30_000);
        // Past the timeout the step is abandoned: a request now (a UI polling the messages) does not bring
        // it back (black-box: it renewed the lease, and every revert stayed 409).
        server
            .note_request(&s.id, rewind_core::HostPort::now_ms(&*w.host))
            .await
            .expect("activity");
        server.messages(&s.id).await.expect("messages");
        let session = server
            .revert(&s.id, target)
            .await
            .expect("revert after the timeout");
        assert!(session.step.is_none() && session.revert.is_some());
        assert_eq!(
            w.read("x.txt"),
            None,
            "the abandoned step was aborted, then reverted"
        );
        // The agent's late step-finish is refused, saying what became of its step.
        let late = server
            .finish_step(&s.id, &a.info.id, StepEnd::default())
            .await;
        assert!(
            matches!(&late, Err(Error::InvalidInput(m)) if m.contains("its step was aborted") && m.contains("(60 s)")),
            "{late:?}"
        );
        let late = server.abort_step(&s.id, &a.info.id).await;
        assert!(
            matches!(&late, Err(Error::InvalidInput(m)) if m.contains("its step was aborted")),
            "{late:?}"
        );
        // A step finished by its owner, finished again; a message with no step; an unknown message.
        server
            .create_message(&s.id, NewMessage::user_text("again"))
            .await
            .expect("user");
        let a2 = server
            .create_message(&s.id, NewMessage::assistant())
            .await
            .expect("assistant");
        let never = server
            .finish_step(&s.id, &a2.info.id, StepEnd::default())
            .await;
        assert!(
            matches!(&never, Err(Error::InvalidInput(m)) if m.ends_with("no step was begun in it")),
            "{never:?}"
        );
        server.begin_step(&s.id, &a2.info.id).await.expect("begin");
        server
            .finish_step(&s.id, &a2.info.id, StepEnd::default())
            .await
            .expect("finish");
        let twice = server
            .finish_step(&s.id, &a2.info.id, StepEnd::default())
            .await;
        assert!(
            matches!(&twice, Err(Error::InvalidInput(m)) if m.contains("finished already (reason `stop`)")),
            "{twice:?}"
        );
        let unknown =
            rewind_core::model::MessageId::parse("msg_0123456789abABCDEFGHIJKLMN").expect("id");
        let unknown = server
            .finish_step(&s.id, &unknown, StepEnd::default())
            .await;
        assert!(matches!(&unknown, Err(Error::NotFound(_))), "{unknown:?}");
    })
}

/// Two recoveries of one dead owner's intent: the second finishes it while the first waits on its lease
/// read; the user then edits a file the intent names. The first, resumed, finds the intent gone and touches
/// nothing (it used to put the file back to the intent's `before`, losing the edit, then fail its commit).
#[test]
fn a_recovery_that_finds_its_intent_finished_meanwhile_touches_nothing() {
    block_on(async {
        let (w, _, _, token) = crashed_world(11).await;
        let (reached, resume) = w.repo.pause_next_lease_read();
        let first = w.rewind.recover();
        let meanwhile = async {
            reached.await.expect("the first recovery reads the lease");
            let report = w.rewind.recover().await.expect("the second recovery");
            assert_eq!(report.recovered, std::slice::from_ref(&token));
            w.write("a.txt", "edited after recovery");
            resume.send(()).expect("resumed");
        };
        let (first, ()) = futures::future::join(first, meanwhile).await;
        let first = first.expect("the first recovery succeeds");
        assert!(
            first.recovered.is_empty() && first.failed.is_empty(),
            "{first:?}"
        );
        assert_eq!(
            w.state(&["a.txt", "new.txt"]),
            ["edited after recovery", "n1"],
            "the user's edit is kept"
        );
        assert!(w.repo.intents().await.expect("intents").is_empty());
    })
}

/// An intent that cannot be finished (its `before` snapshot is missing from the store) does not stop
/// recovery: the other dead owner's intent is still rolled back, the failure is reported, and an operation
/// on the failing intent's worktree is refused with the reason, changing nothing.
#[test]
fn an_intent_that_cannot_be_finished_does_not_stop_the_others() {
    block_on(async {
        let (w, s, t, token) = crashed_world(12).await;
        let dead = process(12);
        let other = w.session().await;
        let broken = IntentRecord {
            token: LeaseToken("tok_broken".to_owned()),
            session_id: other.id.clone(),
            directory: ROOT.to_owned(),
            operation: IntentOperation::Unrevert,
            holder: Holder {
                kind: HolderKind::Process,
                process: dead.clone(),
            },
            before: rewind_core::model::SnapshotId::parse(&"0f".repeat(20)).expect("an id"),
            files: vec![RelPath::new("a.txt").expect("path")],
            created: 0,
            unreadable: None,
        };
        w.repo
            .commit(Transaction {
                guards: Vec::new(),
                changes: vec![Change::PutIntent(Box::new(broken.clone()))],
                events: Vec::new(),
            })
            .await
            .expect("intent");
        let report = w
            .rewind
            .recover()
            .await
            .expect("recovery reports, not fails");
        assert_eq!(report.recovered, [token]);
        assert_eq!(report.failed.len(), 1, "{report:?}");
        assert_eq!(report.failed[0].token, broken.token);
        assert_eq!(report.failed[0].directory, ROOT);
        assert_eq!(
            w.state(&["a.txt", "new.txt"]),
            ["a1", "n1"],
            "the other intent is rolled back"
        );
        let refused = w
            .rewind
            .revert(
                &s.id,
                rewind_core::RevertTarget {
                    message_id: t.user.clone(),
                    part_id: None,
                },
            )
            .await;
        assert!(
            refused.is_err(),
            "an operation on the worktree is refused: {refused:?}"
        );
        assert_eq!(
            w.state(&["a.txt", "new.txt"]),
            ["a1", "n1"],
            "nothing changed"
        );
        assert_eq!(
            w.repo.intents().await.expect("intents"),
            [broken],
            "the failing intent stays for a later recovery"
        );
    })
}

/// Recovery puts the files back and then commits; when that last commit fails, the state the files had
/// (the capture) is still recorded, so gc keeps it, and the next recovery finishes the intent.
/// ... and the next recovery, which finds the files back already, names that first capture in its warning:
/// the first recovery's warning went with its failed commit, and the capture holds the files as the crash
/// left them (black-box: a recovery killed half way left them named nowhere). A file the user changed
/// between the two attempts is in the second attempt's capture, which the warning names too.
#[test]
fn a_recovery_whose_last_commit_fails_keeps_the_state_it_put_back() {
    block_on(async {
        let (w, s, _, token) = crashed_world(13).await;
        w.repo.fail_next_intent_delete();
        let report = w.rewind.recover().await.expect("recovery reports");
        assert_eq!(report.failed.len(), 1, "{report:?}");
        assert_eq!(w.state(&["a.txt", "new.txt"]), ["a1", "n1"], "put back");
        let captures = w
            .repo
            .captures(Some(ROOT.to_owned()))
            .await
            .expect("captures");
        assert_eq!(captures.len(), 1, "the capture is recorded: {captures:?}");
        assert_eq!(
            captured_a(&w, &captures[0].snapshot),
            Some(b"half reverted".to_vec()),
            "it holds the files as the crash left them"
        );
        w.write("new.txt", "user edit");
        let report = w.rewind.recover().await.expect("the next recovery");
        assert_eq!(report.recovered, [token]);
        assert!(w.repo.intents().await.expect("intents").is_empty());
        assert_eq!(w.state(&["a.txt", "new.txt"]), ["a1", "n1"], "put back");
        let warning = w.last_warning(&s.id, "warning").await;
        assert_eq!(
            warning.snapshot.as_ref(),
            Some(&captures[0].snapshot),
            "the first capture, which holds the crash's state: {warning:?}"
        );
        assert!(warning.message.contains("interrupted"), "{warning:?}");
        assert!(
            warning.files.iter().any(|f| f.ends_with("/a.txt"))
                && warning.files.iter().any(|f| f.ends_with("/new.txt")),
            "{warning:?}"
        );
        let all = w
            .repo
            .captures(Some(ROOT.to_owned()))
            .await
            .expect("captures");
        let second = &all.last().expect("a second capture").snapshot;
        assert_ne!(second, &captures[0].snapshot);
        assert!(warning.message.contains(second.as_str()), "{warning:?}");
        let tree = w.snapshots.tree(w.path(), second).expect("stored");
        assert_eq!(
            tree.get("new.txt").map(|n| n.content().to_vec()),
            Some(b"user edit".to_vec()),
            "the user's edit between the attempts is in the second capture"
        );
    })
}

/// When the capture cannot be recorded for another reason than the intent being gone (the database failed
/// that one commit), the files are still put back and the intent finished: the warning names the capture,
/// and the capture is recorded with the last commit.
#[test]
fn a_capture_that_cannot_be_recorded_does_not_stop_the_rollback() {
    block_on(async {
        let (w, _, _, token) = crashed_world(14).await;
        w.repo.fail_next_commit();
        let report = w.rewind.recover().await.expect("recovery");
        assert_eq!(report.recovered, [token], "{report:?}");
        assert_eq!(w.state(&["a.txt", "new.txt"]), ["a1", "n1"], "put back");
        assert!(w.repo.intents().await.expect("intents").is_empty());
        // The capture refused on its own is stored with the last record.
        let captures = w.rewind.captures(None).await.expect("captures");
        assert_eq!(captures.len(), 1, "{captures:?}");
        assert_eq!(
            captured_a(&w, &captures[0].snapshot),
            Some(b"half reverted".to_vec())
        );
    })
}

/// An intent that cannot be finished in a worktree inside this one (`sub/`, its `before` snapshot
/// missing) does not stop recording messages here: it is reported and stays. A revert here, which would
/// write files of `sub/` too, is refused with the reason, and changes nothing.
/// A revert's intent for `session` in `directory` that cannot be finished (its pre-operation snapshot is
/// in no store) over `file`, with the session's and worktree's leases, left by process `pid` (killed) under
/// `token`: what a crashed revert with a lost snapshot leaves.
async fn broken_intent(
    w: &World,
    session: &rewind_core::model::SessionId,
    directory: &str,
    (pid, token): (u32, &str),
    file: &str,
) -> IntentRecord {
    let dead = process(pid);
    let token = LeaseToken(token.to_owned());
    let holder = hold_session_and_worktree(w, (session, directory), &token, &dead).await;
    let broken = IntentRecord {
        token,
        session_id: session.clone(),
        directory: directory.to_owned(),
        operation: IntentOperation::Revert,
        holder,
        before: rewind_core::model::SnapshotId::parse(&"0e".repeat(20)).expect("an id"),
        files: vec![RelPath::new(file).expect("path")],
        created: 0,
        unreadable: None,
    };
    w.repo
        .commit(Transaction {
            guards: Vec::new(),
            changes: vec![Change::PutIntent(Box::new(broken.clone()))],
            events: Vec::new(),
        })
        .await
        .expect("intent");
    w.host.kill(&dead);
    broken
}

#[test]
fn an_unfinishable_intent_inside_refuses_reverts_around_it_but_not_messages() {
    block_on(async {
        let w = World::new();
        let sub = format!("{ROOT}/sub");
        w.fs.create_worktree(std::path::PathBuf::from(&sub));
        w.write("a.txt", "a0");
        let s = w.session().await;
        let t = w.turn(&s.id, "edit", |w| w.write("a.txt", "a1")).await;
        let inner = w.rewind.create_session(&sub, None).await.expect("session");
        let broken = broken_intent(&w, &inner.id, &sub, (14, "tok_broken_inside"), "b.txt").await;

        w.rewind
            .create_message(
                &s.id,
                rewind_core::service::NewMessage::user_text("still recorded"),
            )
            .await
            .expect("a message around a broken intent inside is recorded");
        let refused = w
            .rewind
            .revert(
                &s.id,
                rewind_core::RevertTarget {
                    message_id: t.user.clone(),
                    part_id: None,
                },
            )
            .await;
        assert!(refused.is_err(), "the revert is refused: {refused:?}");
        assert_eq!(w.state(&["a.txt"]), ["a1"], "nothing changed");
        assert_eq!(
            w.repo.intents().await.expect("intents"),
            [broken],
            "the failing intent stays for a later recovery"
        );
    })
}

/// An empty session (the one a refused `rewind exec --new-session` made) is deleted also while its
/// worktree cannot be prepared (an interrupted operation there cannot be finished): it has no step or
/// revert for the preparation to look at (review: a damaged store left such a session behind as the
/// directory's latest, and `undo` then said there was nothing to undo).
#[test]
fn an_empty_session_is_deleted_while_its_worktree_cannot_be_prepared() {
    block_on(async {
        let w = World::new();
        w.write("a.txt", "a0");
        let s = w.session().await;
        broken_intent(&w, &s.id, ROOT, (15, "tok_broken_here"), "a.txt").await;
        let empty = w.session().await;
        let prepared = w.rewind.begin_turn(
            &empty.id,
            NewMessage::user_text("refused"),
            NewMessage::assistant(),
        );
        assert!(prepared.await.is_err(), "the worktree cannot be prepared");
        let deleted = w
            .rewind
            .delete_session_if(&empty.id, Some(rewind_core::service::DeleteIf::Empty))
            .await;
        assert!(matches!(deleted, Ok(true)), "{deleted:?}");
        assert!(w.rewind.session(&empty.id).await.is_err(), "gone");
    })
}

/// Another process's recovery that read an operation's intent just before the operation stored its result
/// (which deletes the intent and releases the leases together) finds the session's lease gone: it takes
/// nothing, since there is nothing to recover. It used to take the session's lease for the rest of its
/// look, and the session's next operation was refused as busy (black-box: a `rewind status` in another
/// directory made a server's revert 409 now and then).
#[test]
fn a_recovery_that_finds_the_intent_finished_meanwhile_takes_no_lease() {
    block_on(async {
        let (w, s, t) = one_turn_world().await;
        let owner = w.host.this_process();
        let target = to_turn(&t);
        let (result_reached, resume_result) = w.repo.pause_next_result_commit();
        let (reverted_tx, reverted_rx) = futures::channel::oneshot::channel();
        let reverting = async {
            let reverted = w.rewind.revert(&s.id, target).await;
            let _ = reverted_tx.send(());
            reverted
        };
        let recovering = async {
            result_reached
                .await
                .expect("the revert's result is about to be stored");
            w.host.become_process(process(41));
            let (lease_read, resume_read) = w.repo.pause_next_lease_read();
            let recovery = w.rewind.recover();
            let drive = async {
                lease_read
                    .await
                    .expect("the recovery, having read the intent, looks at the session's lease");
                // The revert stores its result meanwhile.
                w.host.become_process(owner.clone());
                let _ = resume_result.send(());
                reverted_rx.await.expect("the revert ends");
                w.host.become_process(process(41));
                // A take of a lease from here on is noted, and goes on at once (its resume dropped).
                let (take, _) = w.repo.pause_next_lease_take();
                let _ = resume_read.send(());
                // Not awaited here: looked at once the recovery has ended.
                Some(take)
            };
            let (report, take) = futures::future::join(recovery, drive).await;
            assert!(
                matches!(take.map(|mut take| take.try_recv()), Some(Ok(None))),
                "the recovery took a lease"
            );
            report
        };
        let (reverted, report) = futures::future::join(reverting, recovering).await;
        assert!(reverted.expect("the revert").revert.is_some());
        let report = report.expect("recover");
        assert!(
            report.recovered.is_empty() && report.failed.is_empty(),
            "{report:?}"
        );
        w.host.become_process(owner);
        w.rewind.unrevert(&s.id).await.expect("the session is free");
    })
}

/// A message or part refused for its input (a step part a client may not send, a field that is rewind's to
/// set) changes nothing: the checks come before the worktree is prepared, which would abort an abandoned
/// step, or finish an interrupted revert (review: that was done, then the request refused).
#[test]
fn a_refused_message_or_part_leaves_an_abandoned_step_open() {
    block_on(async {
        let (w, s, _t) = one_turn_world().await;
        let assistant = w.prompt(&s.id, "two").await;
        let dead = process(13);
        let me = w.host.this_process();
        w.host.become_process(dead.clone());
        w.rewind
            .begin_step(&s.id, &assistant)
            .await
            .expect("the dead process's step");
        w.host.become_process(me);
        w.host.kill(&dead);
        let step_part = || {
            NewPart::new(PartBody::StepStart(rewind_core::model::StepStartPart {
                snapshot: None,
                extra: Default::default(),
            }))
        };
        let mut reserved = NewMessage::user_text("x");
        reserved
            .extra
            .insert("sessionID".to_owned(), serde_json::json!("ses_x"));
        let mut with_step_part = NewMessage::user_text("x");
        with_step_part.parts.push(step_part());
        still_open(
            &w,
            &s.id,
            "a reserved field",
            w.rewind.create_message(&s.id, reserved).await.map(|_| ()),
        )
        .await;
        still_open(
            &w,
            &s.id,
            "a message with a step part",
            w.rewind
                .create_message(&s.id, with_step_part)
                .await
                .map(|_| ()),
        )
        .await;
        still_open(
            &w,
            &s.id,
            "a step part",
            w.rewind
                .append_part(&s.id, &assistant, step_part())
                .await
                .map(|_| ()),
        )
        .await;
    })
}

/// `refused` is an input error, and the session's step is still open.
async fn still_open(
    w: &World,
    session: &rewind_core::model::SessionId,
    what: &str,
    refused: rewind_core::Result<()>,
) {
    assert!(
        matches!(refused, Err(Error::InvalidInput(_))),
        "{what}: {refused:?}"
    );
    let session = w.rewind.session(session).await.expect("session");
    assert!(
        session.step.is_some(),
        "{what}: the abandoned step was aborted"
    );
}
