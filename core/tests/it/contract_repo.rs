//! The `MessageRepo` contract suite on `MemRepo`, and `MemRepo`'s fault hook.

use futures::executor::block_on;
use rewind_core::Error;
use rewind_core::id::IdGenerator;
use rewind_core::model::{Event, EventId, EventPayload, Session, SessionTime, Tokens};
use rewind_core::ports::{Change, MessageRepo, Transaction};
use rewind_core::testkit::mem_repo::MemRepo;

rewind_core::repo_contract_tests!(
    make = || MemRepo::new(),
    block_on = futures::executor::block_on
);

/// The asynchronous form of `make` works too (the SQL adapters connect asynchronously).
mod async_make {
    use rewind_core::testkit::mem_repo::MemRepo;

    rewind_core::repo_contract_tests!(
        make = async { MemRepo::new() },
        block_on = futures::executor::block_on,
    );
}

fn session() -> Session {
    let id = IdGenerator::new().descending(1_700_000_000_000);
    Session {
        id,
        slug: "s".to_owned(),
        project_id: "p".to_owned(),
        directory: "/work/fault".to_owned(),
        parent_id: None,
        title: "t".to_owned(),
        version: "0".to_owned(),
        metadata: None,
        time: SessionTime::default(),
        summary: None,
        cost: 0.0,
        tokens: Tokens::default(),
        revert: None,
        store: String::new(),
        applied: None,
        reverted_at: None,
        step: None,
        skipped: Vec::new(),
    }
}

#[test]
fn fail_next_commit_fails_one_commit_and_stores_nothing() {
    block_on(async {
        let repo = MemRepo::new();
        let session = session();
        let put = || Transaction {
            guards: Vec::new(),
            changes: vec![Change::PutSession(Box::new(session.clone()))],
            events: vec![Event {
                id: IdGenerator::new().ascending::<EventId>(1_700_000_000_001, None),
                payload: EventPayload::ServerHeartbeat {},
            }],
        };
        repo.fail_next_commit();
        let result = repo.commit(put()).await;
        assert!(matches!(result, Err(Error::Backend(_))), "{result:?}");
        assert_eq!(repo.session(&session.id).await.expect("reads"), None);
        assert!(repo.events_after(0, 10).await.expect("reads").is_empty());

        repo.commit(put())
            .await
            .expect("the fault hook fails one commit only");
        assert_eq!(
            repo.session(&session.id).await.expect("reads"),
            Some(session)
        );
        let events = repo.events_after(0, 10).await.expect("reads");
        assert_eq!(events.iter().map(|e| e.seq).collect::<Vec<_>>(), vec![1]);
    });
}
