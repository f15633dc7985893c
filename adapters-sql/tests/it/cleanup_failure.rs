//! A failure in the middle of the cleanup transaction (SPEC section 7: delete the hidden range, move the
//! descriptor into the history, clear it, publish the removals) leaves every row as it was and no event in
//! the outbox: a change that fails with NotFound after the hidden-range delete, a fault injected after
//! every change and event was written, and a lease guard lost before it.

use rewind_core::Error;
use rewind_core::model::{
    EventPayload, LeaseKey, LeaseTake, LeaseToken, PartBody, PatchPart, RevertDescriptor,
    RevertHistoryEntry, Role, Session, SessionId,
};
use rewind_core::ports::{Change, Guard, MessageRepo, Transaction};
use rewind_sql::SqlRepo;

use crate::support::{
    Dump, Ids, dump, file_repo, heartbeat, lease, memory_repo, message, part, pg_repo, run, run_pg,
    session, snapshot, transaction, warning,
};

/// How cleanup fails.
#[derive(Clone, Copy, Debug)]
enum Failure {
    /// The last change names a message that does not exist.
    UnknownMessage,
    /// The database transaction fails after every change and event was written.
    InjectedFault,
    /// The session lease was taken over before cleanup committed.
    LeaseLost,
}

struct Reverted {
    ids: Ids,
    session: Session,
    key: LeaseKey,
    token: LeaseToken,
    cleanup: Transaction,
}

/// A reverted session: m1 (user), m2 (assistant with a patch), m3 (user), reverted to m2's second part.
async fn reverted(repo: &dyn MessageRepo) -> Reverted {
    let ids = Ids::default();
    let mut s = session(&ids, "/work/cleanup");
    let m1 = message(&ids, &s, Role::User);
    let m2 = message(&ids, &s, Role::Assistant);
    let m2_parts = [
        part(&ids, &m2, PartBody::text("before")),
        part(&ids, &m2, PartBody::text("hidden")),
        part(
            &ids,
            &m2,
            PartBody::Patch(PatchPart {
                hash: snapshot(1),
                files: vec!["/work/cleanup/a.txt".to_owned()],
                extra: serde_json::Map::new(),
            }),
        ),
    ];
    let m3 = message(&ids, &s, Role::User);
    let m3_part = part(&ids, &m3, PartBody::text("later"));
    let descriptor = RevertDescriptor {
        message_id: m2.id.clone(),
        part_id: Some(m2_parts[1].id.clone()),
        snapshot: Some(snapshot(2)),
        diff: Some("diff".to_owned()),
    };
    s.revert = Some(descriptor.clone());
    s.applied = Some(snapshot(3));
    let raised = warning(&ids, Some(snapshot(4)), "/work/cleanup/a.txt");
    let mut changes = vec![
        Change::PutSession(Box::new(s.clone())),
        Change::PutMessage(Box::new(m1.clone())),
        Change::PutMessage(Box::new(m2.clone())),
        Change::PutMessage(Box::new(m3.clone())),
        Change::PutPart(Box::new(m3_part)),
        Change::AddWarning {
            session: s.id.clone(),
            warning: raised.clone(),
        },
    ];
    changes.extend(
        m2_parts
            .iter()
            .map(|p| Change::PutPart(Box::new(p.clone()))),
    );
    repo.commit(transaction(changes, vec![heartbeat(&ids)]))
        .await
        .expect("the reverted session is stored");
    let key = LeaseKey::Session(s.id.clone());
    let token = LeaseToken("cleanup".to_owned());
    let taken = repo
        .take_lease(&lease(&key, &token.0, 1, 4_000_000_000_000), None)
        .await
        .expect("takes");
    assert_eq!(taken, LeaseTake::Taken);

    let mut cleared = s.clone();
    cleared.revert = None;
    cleared.applied = None;
    let cleanup = Transaction {
        guards: vec![Guard::LeaseHeld {
            key: key.clone(),
            token: token.clone(),
        }],
        changes: vec![
            Change::DeleteHiddenRange {
                session: s.id.clone(),
                message: m2.id.clone(),
                part: Some(m2_parts[1].id.clone()),
            },
            Change::AddRevertHistory {
                session: s.id.clone(),
                entry: Box::new(RevertHistoryEntry {
                    time: ids.tick(),
                    descriptor,
                    applied: Some(snapshot(3)),
                    summary: None,
                    warnings: vec![raised],
                }),
            },
            Change::PutSession(Box::new(cleared.clone())),
        ],
        events: vec![
            event(
                &ids,
                EventPayload::MessageRemoved {
                    session_id: s.id.clone(),
                    message_id: m3.id.clone(),
                },
            ),
            event(
                &ids,
                EventPayload::PartRemoved {
                    session_id: s.id.clone(),
                    message_id: m2.id.clone(),
                    part_id: m2_parts[1].id.clone(),
                },
            ),
            event(
                &ids,
                EventPayload::SessionUpdated {
                    session_id: s.id.clone(),
                    info: Box::new(cleared),
                },
            ),
        ],
    };
    Reverted {
        ids,
        session: s,
        key,
        token,
        cleanup,
    }
}

fn event(ids: &Ids, payload: EventPayload) -> rewind_core::model::Event {
    rewind_core::model::Event {
        id: ids.event(),
        payload,
    }
}

async fn state(repo: &dyn MessageRepo, r: &Reverted) -> Dump {
    dump(
        repo,
        std::slice::from_ref(&r.session.id),
        std::slice::from_ref(&r.key),
    )
    .await
}

async fn failed_cleanup_changes_nothing(repo: &SqlRepo, failure: Failure) {
    let r = reverted(repo).await;
    let before = state(repo, &r).await;
    let mut cleanup = r.cleanup.clone();
    match failure {
        Failure::UnknownMessage => {
            let unknown: SessionId = r.session.id.clone();
            cleanup.changes.push(Change::DeleteHiddenRange {
                session: unknown,
                message: r.ids.message(),
                part: None,
            });
        }
        Failure::InjectedFault => repo.fail_next_commit(),
        Failure::LeaseLost => {
            let thief = lease(&r.key, "thief", 2, 4_000_000_000_000);
            let taken = repo
                .take_lease(
                    &thief,
                    Some(rewind_core::model::Replacing::token(r.token.clone())),
                )
                .await
                .expect("takes over");
            assert_eq!(taken, LeaseTake::Taken);
        }
    }
    let before = match failure {
        // The takeover itself changed the lease row, and nothing else.
        Failure::LeaseLost => state(repo, &r).await,
        _ => before,
    };

    let result = repo.commit(cleanup).await;
    match failure {
        Failure::UnknownMessage => assert!(
            matches!(result, Err(Error::NotFound(_))),
            "a change naming an unknown message fails the cleanup with NotFound, got {result:?}"
        ),
        Failure::InjectedFault => assert!(
            matches!(result, Err(Error::Backend(_))),
            "an injected fault fails the cleanup, got {result:?}"
        ),
        Failure::LeaseLost => assert!(
            matches!(result, Err(Error::LeaseLost(_))),
            "a lost lease fails the cleanup with LeaseLost, got {result:?}"
        ),
    }
    let after = state(repo, &r).await;
    assert_eq!(
        after, before,
        "a failed cleanup ({failure:?}) leaves every row as it was and appends no event"
    );

    if let Failure::LeaseLost = failure {
        return;
    }
    // The same cleanup, without the failure, goes through: the failure was the only obstacle.
    repo.commit(r.cleanup.clone())
        .await
        .expect("the cleanup commits");
    let done = state(repo, &r).await;
    assert_eq!(
        done.events.len(),
        before.events.len() + 3,
        "its three events are appended"
    );
    let messages = &done.per_session[0].messages;
    assert_eq!(messages.len(), 2, "m3 is gone");
    assert_eq!(
        messages[1].parts.len(),
        1,
        "m2 keeps only its part before the hidden one"
    );
    assert_eq!(
        done.per_session[0].history.len(),
        1,
        "the revert moved into the history"
    );
}

#[test]
fn sqlite_memory_failed_cleanup_changes_nothing() {
    run(async {
        for failure in [
            Failure::UnknownMessage,
            Failure::InjectedFault,
            Failure::LeaseLost,
        ] {
            failed_cleanup_changes_nothing(&memory_repo().await, failure).await;
        }
    });
}

#[test]
fn sqlite_file_failed_cleanup_changes_nothing() {
    run(async {
        for failure in [
            Failure::UnknownMessage,
            Failure::InjectedFault,
            Failure::LeaseLost,
        ] {
            failed_cleanup_changes_nothing(&file_repo().await.repo, failure).await;
        }
    });
}

#[test]
fn postgres_failed_cleanup_changes_nothing() {
    run_pg(async {
        for failure in [
            Failure::UnknownMessage,
            Failure::InjectedFault,
            Failure::LeaseLost,
        ] {
            let store = pg_repo().await;
            failed_cleanup_changes_nothing(&store.repo, failure).await;
        }
    });
}
