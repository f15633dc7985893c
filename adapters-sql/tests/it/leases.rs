//! Leases under real contention: two handles (two connection pools, as two processes would have) on one
//! SQLite file or one PostgreSQL schema. The first holder is held inside its critical section by a barrier
//! while the second tries.

use std::sync::Arc;

use rewind_core::Error;
use rewind_core::model::{LeaseKey, LeaseTake, LeaseToken, Replacing};
use rewind_core::ports::{Change, Guard, MessageRepo, Transaction};
use rewind_sql::SqlRepo;
use tokio::sync::Barrier;

use crate::support::{Ids, PgSchema, SqliteFile, lease, run, run_pg, session};

const FAR: u64 = 4_000_000_000_000;

/// The first handle takes the lease and stays inside its critical section while the second is refused;
/// once the first releases, the second gets it.
async fn second_waits_for_release(first: SqlRepo, second: SqlRepo) {
    let ids = Ids::default();
    let key = LeaseKey::Session(ids.session());
    let held = lease(&key, "token-first", 1, FAR);
    let wanted = lease(&key, "token-second", 2, FAR);
    let inside = Arc::new(Barrier::new(2));
    let tried = Arc::new(Barrier::new(2));

    let holder = tokio::spawn({
        let (inside, tried, held) = (inside.clone(), tried.clone(), held.clone());
        async move {
            let taken = first.take_lease(&held, None).await.expect("takes");
            assert_eq!(taken, LeaseTake::Taken, "a free lease is taken");
            inside.wait().await;
            // Inside the critical section until the second handle has tried.
            tried.wait().await;
            first
                .release_lease(&held.key, &held.token)
                .await
                .expect("releases");
            first
        }
    });
    inside.wait().await;
    let refused = second.take_lease(&wanted, None).await.expect("asks");
    assert_eq!(
        refused,
        LeaseTake::Held(held.clone()),
        "while the first handle holds the lease the second is refused and told who holds it"
    );
    assert!(
        !second
            .renew_lease(&key, &wanted.token, FAR + 1)
            .await
            .expect("asks"),
        "a lease one does not hold cannot be renewed"
    );
    tried.wait().await;
    let first = holder.await.expect("the holder finishes");

    let taken = second.take_lease(&wanted, None).await.expect("takes");
    assert_eq!(taken, LeaseTake::Taken, "a released lease is free again");
    assert_eq!(
        first.lease(&key).await.expect("reads"),
        Some(wanted),
        "both handles see the new holder"
    );
}

/// The first handle's lease has expired while it is still inside its critical section: expiry alone lets
/// no one in, but a takeover that names its token does, after which the first handle can neither renew,
/// commit under the lease, nor release the new holder's lease.
async fn second_takes_over_an_expired_lease(first: SqlRepo, second: SqlRepo) {
    let ids = Ids::default();
    let owner = session(&ids, "/work/takeover");
    first
        .commit(crate::support::transaction(
            vec![Change::PutSession(Box::new(owner.clone()))],
            Vec::new(),
        ))
        .await
        .expect("stores the session");
    let key = LeaseKey::Session(owner.id.clone());
    let expired = lease(&key, "token-first", 1, 1);
    let wanted = lease(&key, "token-second", 2, FAR);
    let inside = Arc::new(Barrier::new(2));
    let took_over = Arc::new(Barrier::new(2));

    let holder = tokio::spawn({
        let (inside, took_over, expired, owner) = (
            inside.clone(),
            took_over.clone(),
            expired.clone(),
            owner.clone(),
        );
        async move {
            let taken = first.take_lease(&expired, None).await.expect("takes");
            assert_eq!(taken, LeaseTake::Taken);
            inside.wait().await;
            took_over.wait().await;
            // Still inside its critical section, the stalled owner finds out.
            let renewed = first
                .renew_lease(&expired.key, &expired.token, FAR)
                .await
                .expect("asks");
            assert!(
                !renewed,
                "a lease taken over cannot be renewed by its old token"
            );
            let mut renamed = owner.clone();
            renamed.slug = "stale".to_owned();
            let stale = first
                .commit(Transaction {
                    guards: vec![Guard::LeaseHeld {
                        key: expired.key.clone(),
                        token: expired.token.clone(),
                    }],
                    changes: vec![Change::PutSession(Box::new(renamed))],
                    events: Vec::new(),
                })
                .await;
            assert!(
                matches!(stale, Err(Error::LeaseLost(_))),
                "a commit guarded by a lease taken over fails with LeaseLost, got {stale:?}"
            );
            first
                .release_lease(&expired.key, &expired.token)
                .await
                .expect("asks");
        }
    });
    inside.wait().await;
    let refused = second.take_lease(&wanted, None).await.expect("asks");
    assert_eq!(
        refused,
        LeaseTake::Held(expired.clone()),
        "an expired lease is still held until someone takes it over"
    );
    let wrong = second
        .take_lease(
            &wanted,
            Some(Replacing::token(LeaseToken("token-other".to_owned()))),
        )
        .await
        .expect("asks");
    assert_eq!(
        wrong,
        LeaseTake::Held(expired.clone()),
        "a takeover naming another token is refused"
    );
    let taken = second
        .take_lease(&wanted, Some(Replacing::seen(&expired)))
        .await
        .expect("takes over");
    assert_eq!(
        taken,
        LeaseTake::Taken,
        "replacing the expired token takes the lease over"
    );
    took_over.wait().await;
    holder.await.expect("the old holder finishes");

    assert_eq!(
        second.lease(&key).await.expect("reads"),
        Some(wanted),
        "the old holder's release did not remove the new lease"
    );
    assert_eq!(
        second
            .session(&owner.id)
            .await
            .expect("reads")
            .map(|s| s.slug),
        Some(owner.slug),
        "the stale commit changed nothing"
    );
}

/// Several handles ask for one free lease at the same moment: exactly one gets it, and every other is
/// told who holds it.
async fn exactly_one_of_many_wins(handles: Vec<SqlRepo>) {
    let key = LeaseKey::Worktree("/work/race".to_owned());
    let start = Arc::new(Barrier::new(handles.len()));
    let mut tasks = Vec::new();
    for (n, repo) in handles.into_iter().enumerate() {
        let start = start.clone();
        let key = key.clone();
        tasks.push(tokio::spawn(async move {
            let mine = lease(&key, &format!("token-{n}"), n as u32, FAR);
            start.wait().await;
            let answer = repo.take_lease(&mine, None).await.expect("asks");
            (mine, answer, repo)
        }));
    }
    let mut winners = Vec::new();
    let mut refused = Vec::new();
    let mut repo = None;
    for task in tasks {
        let (mine, answer, handle) = task.await.expect("a contender finishes");
        match answer {
            LeaseTake::Taken => winners.push(mine),
            LeaseTake::Held(current) => refused.push(current),
        }
        repo = Some(handle);
    }
    assert_eq!(winners.len(), 1, "exactly one contender takes a free lease");
    assert!(
        refused.iter().all(|current| current == &winners[0]),
        "every other contender is told the winner's lease"
    );
    let stored = repo
        .expect("there were contenders")
        .lease(&key)
        .await
        .expect("reads");
    assert_eq!(
        stored.as_ref(),
        Some(&winners[0]),
        "the winner's lease is stored"
    );
}

#[test]
fn sqlite_file_second_handle_waits_for_release() {
    run(async {
        let file = SqliteFile::new();
        second_waits_for_release(file.open().await, file.open().await).await;
    });
}

#[test]
fn sqlite_file_second_handle_takes_over_an_expired_lease() {
    run(async {
        let file = SqliteFile::new();
        second_takes_over_an_expired_lease(file.open().await, file.open().await).await;
    });
}

#[test]
fn sqlite_file_exactly_one_of_many_handles_wins_a_free_lease() {
    run(async {
        let file = SqliteFile::new();
        let mut handles = Vec::new();
        for _ in 0..6 {
            handles.push(file.open().await);
        }
        exactly_one_of_many_wins(handles).await;
    });
}

#[test]
fn postgres_second_handle_waits_for_release() {
    run_pg(async {
        let schema = PgSchema::create().await;
        second_waits_for_release(schema.open().await, schema.open().await).await;
    });
}

#[test]
fn postgres_second_handle_takes_over_an_expired_lease() {
    run_pg(async {
        let schema = PgSchema::create().await;
        second_takes_over_an_expired_lease(schema.open().await, schema.open().await).await;
    });
}

#[test]
fn postgres_exactly_one_of_many_handles_wins_a_free_lease() {
    run_pg(async {
        let schema = PgSchema::create().await;
        let mut handles = Vec::new();
        for _ in 0..6 {
            handles.push(schema.open().await);
        }
        exactly_one_of_many_wins(handles).await;
    });
}
