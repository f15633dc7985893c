//! The `MessageRepo` contract suite: one public async case per rule of the contract in `ports.rs`, run on
//! `MemRepo` here and on the SQL adapter in its crate, through `repo_contract_tests!`.
//!
//! Each case takes a fresh, empty repo and panics, naming the rule, when the repo breaks it. The cases need no
//! runtime of their own, so any executor can drive them.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, Ordering};

use serde_json::{Map, Value, json};

use crate::error::Error;
use crate::id::{EventId, IdGenerator};
use crate::model::Capture;
use crate::model::{
    Event, EventPayload, FileDiff, FileStatus, Holder, HolderKind, IntentOperation, IntentRecord,
    Lease, LeaseKey, LeaseTake, LeaseToken, Message, MessageHead, MessageId, MessageTime,
    MessageWithParts, OpenStep, Part, PartBody, PartId, PatchPart, ProcessIdentity, RelPath,
    Replacing, RevertDescriptor, RevertHistoryEntry, Role, Session, SessionFields, SessionId,
    SessionTime, SnapshotId, StepFinishPart, StepStartPart, StoredEvent, TextPart, TokenCache,
    Tokens, ToolPart, Warning,
};
use crate::ports::{Change, Guard, MessageRepo, Transaction};

/// Expands to one `#[test]` per case of the `MessageRepo` contract suite.
///
/// `make` builds a fresh, empty repo for every test, inside `block_on`. It is either a closure with no
/// arguments returning the repo, or an expression (typically an `async` block) giving a future of the repo,
/// for adapters that connect asynchronously. The repo must implement `MessageRepo` itself (not through a
/// pointer). `block_on` is anything callable with a future that runs it to completion.
///
/// ```
/// use rewind_core::testkit::mem_repo::MemRepo;
///
/// rewind_core::repo_contract_tests!(make = || MemRepo::new(), block_on = futures::executor::block_on);
///
/// // An adapter that connects asynchronously gives an `async` block instead:
/// mod connected {
///     use rewind_core::testkit::mem_repo::MemRepo;
///
///     rewind_core::repo_contract_tests!(
///         make = async { MemRepo::new() }, // e.g. `async { SqlRepo::connect(url).await.expect("connects") }`
///         block_on = futures::executor::block_on,
///     );
/// }
/// ```
#[macro_export]
macro_rules! repo_contract_tests {
    (@each ($make:expr) ($block_on:expr) $($case:ident)*) => {
        $(
            #[test]
            fn $case() {
                ($block_on)(async {
                    let repo = $make.await;
                    $crate::testkit::contract::repo::$case(&repo).await;
                });
            }
        )*
    };
    (@cases ($make:expr) ($block_on:expr)) => {
        $crate::repo_contract_tests!(@each ($make) ($block_on)
            round_trip_of_every_part_type
            messages_and_parts_come_back_in_id_order
            messages_from_an_id_on_are_those_of_the_session_from_there
            part_id_free_guard_names_the_message_that_has_the_part
            part_id_free_guard_refuses_an_id_a_part_of_the_session_has
            last_message_guard_fails_stale_once_a_message_is_stored_or_deleted
            last_part_guard_fails_stale_once_a_part_of_its_message_is_stored_or_deleted
            hidden_range_delete_without_part
            hidden_range_delete_with_part
            hidden_range_delete_comes_first_in_its_transaction
            lease_cannot_be_taken_twice
            worktree_leases_keep_out_of_worktrees_inside_and_around
            sessions_overlapping_are_those_of_worktrees_inside_and_around
            lease_can_be_taken_over_when_replacing_the_current_token
            a_takeover_of_a_lease_renewed_since_it_was_seen_is_refused
            lease_renew_and_release_need_the_token
            every_stored_lease_is_listed
            a_transaction_releases_a_lease_only_with_its_token
            leases_are_taken_together_or_not_at_all
            failed_transaction_leaves_nothing_and_writes_no_event
            changes_of_a_session_that_does_not_exist_fail_with_not_found
            guards_check_lease_and_intent
            guards_check_that_no_one_took_the_lease_nor_changed_the_revert
            message_exists_guard_checks_the_message_in_its_session
            events_come_back_in_commit_order
            referenced_snapshots_cover_every_reference
            captures_are_listed_referenced_and_deleted_by_age
            old_outbox_events_are_deleted_and_positions_never_repeat
            the_outbox_is_measured_from_its_newest_event_back
            large_revert_texts_read_back_whole_from_every_row
            texts_with_nul_bytes_read_back_as_they_were
            delete_session_cascades
            sessions_are_listed_newest_first_and_by_directory
            a_put_keeps_the_stored_title_and_a_rename_changes_only_it
            a_put_keeps_the_metadata_and_archive_time_an_update_set
            a_deleted_sessions_event_carries_what_an_update_set_since_it_was_read
        );
    };
    (make = || $repo:expr, block_on = $block_on:expr $(,)?) => {
        $crate::repo_contract_tests!(@cases (async { $repo }) ($block_on));
    };
    (make = $make:expr, block_on = $block_on:expr $(,)?) => {
        $crate::repo_contract_tests!(@cases ($make) ($block_on));
    };
}

/// Ids in creation order, from a fake clock that moves one millisecond per id.
struct Ids {
    generator: IdGenerator,
    now: AtomicU64,
}

impl Ids {
    fn new() -> Self {
        Ids {
            generator: IdGenerator::new(),
            now: AtomicU64::new(1_700_000_000_000),
        }
    }

    fn tick(&self) -> u64 {
        self.now.fetch_add(1, Ordering::Relaxed) + 1
    }

    fn session(&self) -> SessionId {
        self.generator.descending(self.tick())
    }

    fn message(&self) -> MessageId {
        self.generator.ascending(self.tick(), None)
    }

    fn part(&self) -> PartId {
        self.generator.ascending(self.tick(), None)
    }

    fn event(&self) -> EventId {
        self.generator.ascending(self.tick(), None)
    }
}

fn object(value: Value) -> Map<String, Value> {
    match value {
        Value::Object(fields) => fields,
        _ => Map::new(),
    }
}

/// Snapshot number `n`: 40 hex digits.
fn snapshot(n: u32) -> SnapshotId {
    SnapshotId::parse(&format!("{n:040x}")).expect("a 40-digit hex number is a snapshot id")
}

fn new_session(ids: &Ids, directory: &str) -> Session {
    let id = ids.session();
    let now = ids.tick();
    Session {
        title: format!("session {id}"),
        id,
        slug: "quiet-river".to_owned(),
        project_id: "project-1".to_owned(),
        directory: directory.to_owned(),
        parent_id: None,
        version: "0.1.0".to_owned(),
        metadata: None,
        time: SessionTime {
            created: now,
            updated: now,
            archived: None,
        },
        summary: None,
        cost: 0.0,
        tokens: Tokens::default(),
        revert: None,
        store: format!("{directory}/.rewind-store"),
        applied: None,
        reverted_at: None,
        step: None,
        skipped: Vec::new(),
    }
}

fn new_message(ids: &Ids, session: &Session, role: Role) -> Message {
    let id = ids.message();
    Message {
        id,
        session_id: session.id.clone(),
        role,
        time: MessageTime {
            created: ids.tick(),
            completed: None,
        },
        parent_id: None,
        extra: Map::new(),
    }
}

fn new_part(ids: &Ids, message: &Message, body: PartBody) -> Part {
    Part {
        id: ids.part(),
        session_id: message.session_id.clone(),
        message_id: message.id.clone(),
        body,
    }
}

fn text(ids: &Ids, message: &Message, text: &str) -> Part {
    new_part(ids, message, PartBody::text(text))
}

fn patch(ids: &Ids, message: &Message, hash: SnapshotId, files: &[&str]) -> Part {
    let body = PartBody::Patch(PatchPart {
        hash,
        files: files.iter().map(|f| (*f).to_owned()).collect(),
        extra: Map::new(),
    });
    new_part(ids, message, body)
}

fn heartbeat(ids: &Ids) -> Event {
    Event {
        id: ids.event(),
        payload: EventPayload::ServerHeartbeat {},
    }
}

fn updated(ids: &Ids, session: &Session) -> Event {
    Event {
        id: ids.event(),
        payload: EventPayload::SessionUpdated {
            session_id: session.id.clone(),
            info: Box::new(session.clone()),
        },
    }
}

fn put_session(session: &Session) -> Change {
    Change::PutSession(Box::new(session.clone()))
}

fn put_message(message: &Message) -> Change {
    Change::PutMessage(Box::new(message.clone()))
}

fn put_part(part: &Part) -> Change {
    Change::PutPart(Box::new(part.clone()))
}

fn with_parts(info: &Message, parts: &[&Part]) -> MessageWithParts {
    MessageWithParts {
        info: info.clone(),
        parts: parts.iter().map(|p| (*p).clone()).collect(),
    }
}

fn token(text: &str) -> LeaseToken {
    LeaseToken(text.to_owned())
}

fn holder(pid: u32) -> Holder {
    Holder {
        kind: HolderKind::Process,
        process: ProcessIdentity {
            host: "contract-host".to_owned(),
            pid,
            start_time: 77,
            boot: None,
            machine: None,
        },
    }
}

fn lease(key: &LeaseKey, token_text: &str, expires_at: u64) -> Lease {
    Lease {
        key: key.clone(),
        token: token(token_text),
        holder: holder(4242),
        expires_at,
    }
}

fn warning(ids: &Ids, snapshot: Option<SnapshotId>, file: &str) -> Warning {
    Warning {
        time: ids.tick(),
        message: format!("{file} was edited outside the session and has been overwritten"),
        snapshot,
        files: vec![file.to_owned()],
    }
}

fn intent(ids: &Ids, session: &Session, token_text: &str, before: SnapshotId) -> IntentRecord {
    IntentRecord {
        token: token(token_text),
        session_id: session.id.clone(),
        directory: session.directory.clone(),
        operation: IntentOperation::Revert,
        holder: holder(4242),
        before,
        files: vec![RelPath::new("src/lib.rs").expect("a valid relative path")],
        created: ids.tick(),
        unreadable: None,
    }
}

fn transaction(changes: Vec<Change>, events: Vec<Event>) -> Transaction {
    Transaction {
        guards: Vec::new(),
        changes,
        events,
    }
}

async fn commit(repo: &dyn MessageRepo, changes: Vec<Change>) {
    repo.commit(transaction(changes, Vec::new()))
        .await
        .expect("a valid transaction must commit");
}

/// The field the cases change to tell which write of a session was stored (the slug: a put keeps the
/// stored title).
async fn marker(repo: &dyn MessageRepo, session: &SessionId) -> Option<String> {
    repo.session(session)
        .await
        .expect("reading a session must succeed")
        .map(|s| s.slug)
}

async fn listed(repo: &dyn MessageRepo, directory: Option<&str>) -> Vec<Session> {
    repo.sessions(directory.map(str::to_owned))
        .await
        .expect("listing sessions must succeed")
}

async fn messages(repo: &dyn MessageRepo, session: &SessionId) -> Vec<MessageWithParts> {
    repo.messages(session)
        .await
        .expect("reading messages must succeed")
}

async fn all_events(repo: &dyn MessageRepo) -> Vec<StoredEvent> {
    let mut all: Vec<StoredEvent> = Vec::new();
    // A short answer is no sign of the end (large events): read on until an empty one.
    loop {
        let after = all.last().map_or(0, |last| last.seq);
        let batch = repo
            .events_after(after, 10_000)
            .await
            .expect("reading the outbox must succeed");
        if batch.is_empty() {
            return all;
        }
        all.extend(batch);
    }
}

/// Every part type (text, tool, step-start, step-finish, patch and a type rewind does not know, with nested
/// fields) reads back equal to what was stored; the unknown one serialises to the identical JSON text, key
/// order included, so a client reads back exactly what it sent.
pub async fn round_trip_of_every_part_type(repo: &dyn MessageRepo) {
    let ids = Ids::new();
    let session = new_session(&ids, "/work/round-trip");
    let mut user = new_message(&ids, &session, Role::User);
    user.extra = object(json!({
        "agent": "build",
        "model": {"providerID": "anthropic", "modelID": "claude-sonnet"},
        "summary": {"title": "Fix the parser", "diffs": []},
    }));
    let mut assistant = new_message(&ids, &session, Role::Assistant);
    assistant.parent_id = Some(user.id.clone());
    assistant.time.completed = Some(ids.tick());
    assistant.extra = object(json!({
        "cost": 0.25,
        "path": {"cwd": "/work/round-trip", "root": "/work/round-trip"},
        "tokens": {"input": 10, "output": 20, "reasoning": 0, "cache": {"read": 0, "write": 0}},
    }));

    let user_text = new_part(
        &ids,
        &user,
        PartBody::Text(TextPart {
            text: "Fix the parser\n– with \"quotes\", tabs\tand ✓ unicode".to_owned(),
            extra: object(json!({"synthetic": false, "time": {"start": 1, "end": 2}})),
        }),
    );
    let step_start = new_part(
        &ids,
        &assistant,
        PartBody::StepStart(StepStartPart {
            snapshot: Some(snapshot(1)),
            extra: Map::new(),
        }),
    );
    let tool = new_part(
        &ids,
        &assistant,
        PartBody::Tool(ToolPart {
            extra: object(json!({
                "callID": "call_01",
                "tool": "edit",
                "state": {
                    "status": "completed",
                    "input": {"filePath": "/work/round-trip/src/parser.rs"},
                    "output": "Edit applied",
                    "metadata": {"diff": "@@ -1 +1 @@\n-a\n+b\n"},
                    "time": {"start": 3, "end": 4},
                },
            })),
        }),
    );
    let step_finish = new_part(
        &ids,
        &assistant,
        PartBody::StepFinish(StepFinishPart {
            reason: "tool-calls".to_owned(),
            snapshot: Some(snapshot(2)),
            cost: 0.125,
            tokens: Tokens {
                total: Some(1515.0),
                input: 1000.0,
                output: 400.0,
                reasoning: 100.0,
                cache: TokenCache {
                    read: 10.0,
                    write: 5.0,
                },
            },
            extra: Map::new(),
        }),
    );
    let patch_part = patch(
        &ids,
        &assistant,
        snapshot(1),
        &[
            "/work/round-trip/src/parser.rs",
            "/work/round-trip/dir with space/ü.txt",
        ],
    );
    let unknown = new_part(
        &ids,
        &assistant,
        PartBody::Other {
            kind: "x-future-kind".to_owned(),
            // Keys deliberately out of alphabetical order: their order must survive storage.
            fields: object(json!({
                "zeta": 1,
                "alpha": {"nested": [1, 2.5, "three", null, {"deep": true}], "empty": {}},
                "mid": "ü ✓ \"quoted\"",
                "big": 9_007_199_254_740_993_u64,
                "negative": -3,
            })),
        },
    );

    let stored_parts = [
        &user_text,
        &step_start,
        &tool,
        &step_finish,
        &patch_part,
        &unknown,
    ];
    let mut changes = vec![
        put_session(&session),
        put_message(&user),
        put_message(&assistant),
    ];
    changes.extend(stored_parts.iter().copied().map(put_part));
    commit(repo, changes).await;

    let read_session = repo
        .session(&session.id)
        .await
        .expect("reading a session must succeed");
    assert_eq!(
        read_session.as_ref(),
        Some(&session),
        "a session must read back as stored"
    );
    let expected = vec![
        with_parts(&user, &[&user_text]),
        with_parts(
            &assistant,
            &[&step_start, &tool, &step_finish, &patch_part, &unknown],
        ),
    ];
    assert_eq!(
        messages(repo, &session.id).await,
        expected,
        "every message and part type must read back as stored"
    );
    let read_assistant = repo
        .message(&session.id, &assistant.id)
        .await
        .expect("reading a message must succeed");
    assert_eq!(
        read_assistant.as_ref(),
        Some(&expected[1]),
        "`message` must return the message with its parts as stored"
    );
    let read_unknown = read_assistant
        .iter()
        .flat_map(|m| m.parts.iter())
        .find(|p| p.id == unknown.id)
        .expect("the part of an unknown type must be stored");
    let json = |p: &Part| serde_json::to_string(p).expect("parts serialise");
    assert_eq!(
        json(read_unknown),
        json(&unknown),
        "a part of an unknown type must read back as the identical JSON, key order included"
    );
}

/// `Guard::PartIdFree` names the message of the session that has the part id, only in that session, and
/// the first one in id order when rows stored before part ids were checked per session hold an id twice.
pub async fn part_id_free_guard_names_the_message_that_has_the_part(repo: &dyn MessageRepo) {
    let ids = Ids::new();
    let session = new_session(&ids, "/work/part-ids");
    let other = new_session(&ids, "/work/part-ids-other");
    let m1 = new_message(&ids, &session, Role::User);
    let m2 = new_message(&ids, &session, Role::Assistant);
    let a1 = text(&ids, &m1, "a1");
    let b1 = text(&ids, &m2, "b1");
    let mut twice = text(&ids, &m2, "b2");
    twice.id = a1.id.clone();
    commit(repo, vec![put_session(&session), put_session(&other)]).await;
    commit(
        repo,
        vec![
            put_message(&m1),
            put_message(&m2),
            put_part(&a1),
            put_part(&b1),
        ],
    )
    .await;
    // What the guard says of `part` in `session`: the refusal's text, None when it passes.
    let found = |part: PartId, session: SessionId| async move {
        let guarded = Transaction {
            guards: vec![Guard::PartIdFree { session, part }],
            changes: Vec::new(),
            events: Vec::new(),
        };
        match repo.commit(guarded).await {
            Ok(()) => None,
            Err(Error::InvalidInput(message)) => Some(message),
            Err(other) => panic!("a taken id must fail with InvalidInput, got {other:?}"),
        }
    };
    let names = |refusal: Option<String>, holder: &Message| {
        refusal.is_some_and(|m| m.contains(holder.id.as_str()))
    };
    assert!(names(found(b1.id.clone(), session.id.clone()).await, &m2));
    assert!(names(found(a1.id.clone(), session.id.clone()).await, &m1));
    assert_eq!(
        found(ids.part(), session.id.clone()).await,
        None,
        "an unknown id"
    );
    assert_eq!(
        found(b1.id.clone(), other.id.clone()).await,
        None,
        "only in its session"
    );
    commit(repo, vec![put_part(&twice)]).await;
    assert!(
        names(found(a1.id.clone(), session.id.clone()).await, &m1),
        "the first message in id order"
    );
}

/// What a commit of `guard` alone says: `Ok` when it holds, else its error.
async fn guard_alone(repo: &dyn MessageRepo, guard: Guard) -> Result<(), Error> {
    repo.commit(Transaction {
        guards: vec![guard],
        changes: Vec::new(),
        events: Vec::new(),
    })
    .await
}

/// `Guard::LastMessageIs` holds while the session's last message in id order is the one named (none for a
/// session without messages), and fails with `Error::Stale` naming the session once a message is stored
/// after it or it is deleted; a message of another session does not count. A gone session is `NotFound`,
/// and the failed commit stores nothing.
pub async fn last_message_guard_fails_stale_once_a_message_is_stored_or_deleted(
    repo: &dyn MessageRepo,
) {
    let ids = Ids::new();
    let session = new_session(&ids, "/work/last-message");
    let other = new_session(&ids, "/work/last-message-other");
    commit(repo, vec![put_session(&session), put_session(&other)]).await;
    let last_is = |message: Option<&Message>| Guard::LastMessageIs {
        session: session.id.clone(),
        message: message.map(|m| m.id.clone()),
    };
    let is_stale = |result: Result<(), Error>| matches!(&result, Err(Error::Stale { session_id, .. }) if session_id == &session.id);
    guard_alone(repo, last_is(None))
        .await
        .expect("no message yet: holds for none");
    let m1 = new_message(&ids, &session, Role::User);
    let m2 = new_message(&ids, &session, Role::Assistant);
    commit(repo, vec![put_message(&m1)]).await;
    assert!(
        is_stale(guard_alone(repo, last_is(None)).await),
        "a message stored since"
    );
    guard_alone(repo, last_is(Some(&m1)))
        .await
        .expect("the last message");
    commit(repo, vec![put_message(&m2)]).await;
    assert!(
        is_stale(guard_alone(repo, last_is(Some(&m1))).await),
        "not the last any more"
    );
    let elsewhere = new_message(&ids, &other, Role::User);
    commit(repo, vec![put_message(&elsewhere)]).await;
    guard_alone(repo, last_is(Some(&m2)))
        .await
        .expect("another session's message does not count");
    commit(
        repo,
        vec![Change::DeleteHiddenRange {
            session: session.id.clone(),
            message: m2.id.clone(),
            part: None,
        }],
    )
    .await;
    assert!(
        is_stale(guard_alone(repo, last_is(Some(&m2))).await),
        "the last message deleted"
    );
    let m3 = new_message(&ids, &session, Role::User);
    let refused = repo
        .commit(Transaction {
            guards: vec![last_is(Some(&m2))],
            changes: vec![put_message(&m3)],
            events: Vec::new(),
        })
        .await;
    assert!(is_stale(refused), "a message after the deleted one");
    assert_eq!(
        messages(repo, &session.id)
            .await
            .iter()
            .map(|m| m.info.id.clone())
            .collect::<Vec<_>>(),
        vec![m1.id.clone()],
        "the refused commit stored nothing"
    );
    commit(repo, vec![Change::DeleteSession(session.id.clone())]).await;
    for seen in [None, Some(&m1)] {
        assert!(
            matches!(
                guard_alone(repo, last_is(seen)).await,
                Err(Error::NotFound(_))
            ),
            "a deleted session is not found"
        );
    }
}

/// `Guard::LastPartIs` is `LastMessageIs` for the parts of one message: it holds while the message's last
/// part is the one named (none for a message without parts), fails with `Error::Stale` once a part is
/// stored after it or it is deleted (a part of another message does not count), and is `NotFound` for a
/// message that is gone.
pub async fn last_part_guard_fails_stale_once_a_part_of_its_message_is_stored_or_deleted(
    repo: &dyn MessageRepo,
) {
    let ids = Ids::new();
    let session = new_session(&ids, "/work/last-part");
    let m1 = new_message(&ids, &session, Role::User);
    let m2 = new_message(&ids, &session, Role::Assistant);
    commit(
        repo,
        vec![put_session(&session), put_message(&m1), put_message(&m2)],
    )
    .await;
    let last_is = |message: &Message, part: Option<&Part>| Guard::LastPartIs {
        session: session.id.clone(),
        message: message.id.clone(),
        part: part.map(|p| p.id.clone()),
    };
    let is_stale = |result: Result<(), Error>| matches!(&result, Err(Error::Stale { session_id, .. }) if session_id == &session.id);
    guard_alone(repo, last_is(&m2, None))
        .await
        .expect("no part yet: holds for none");
    let a = text(&ids, &m2, "a");
    let b = text(&ids, &m2, "b");
    commit(repo, vec![put_part(&a)]).await;
    assert!(is_stale(guard_alone(repo, last_is(&m2, None)).await));
    guard_alone(repo, last_is(&m2, Some(&a)))
        .await
        .expect("the last part");
    commit(repo, vec![put_part(&text(&ids, &m1, "another message's"))]).await;
    guard_alone(repo, last_is(&m2, Some(&a)))
        .await
        .expect("another message's part does not count");
    commit(repo, vec![put_part(&b)]).await;
    assert!(is_stale(guard_alone(repo, last_is(&m2, Some(&a))).await));
    commit(
        repo,
        vec![Change::DeleteHiddenRange {
            session: session.id.clone(),
            message: m2.id.clone(),
            part: Some(b.id.clone()),
        }],
    )
    .await;
    assert!(
        is_stale(guard_alone(repo, last_is(&m2, Some(&b))).await),
        "the last part deleted"
    );
    guard_alone(repo, last_is(&m2, Some(&a)))
        .await
        .expect("the last part again");
    commit(
        repo,
        vec![Change::DeleteHiddenRange {
            session: session.id.clone(),
            message: m2.id.clone(),
            part: None,
        }],
    )
    .await;
    for seen in [None, Some(&a)] {
        assert!(
            matches!(
                guard_alone(repo, last_is(&m2, seen)).await,
                Err(Error::NotFound(_))
            ),
            "a deleted message is not found"
        );
    }
}

/// `Guard::PartIdFree` passes while no part of the session has the id (another session's may), and fails
/// with `InvalidInput` naming the message that has it once one does; the failed commit stores nothing.
pub async fn part_id_free_guard_refuses_an_id_a_part_of_the_session_has(repo: &dyn MessageRepo) {
    let ids = Ids::new();
    let session = new_session(&ids, "/work/part-id-guard");
    let other = new_session(&ids, "/work/part-id-guard-other");
    let m1 = new_message(&ids, &session, Role::User);
    let m2 = new_message(&ids, &session, Role::User);
    let elsewhere = new_message(&ids, &other, Role::User);
    let first = text(&ids, &m1, "first");
    let theirs = text(&ids, &elsewhere, "another session's");
    commit(repo, vec![put_session(&session), put_session(&other)]).await;
    commit(
        repo,
        vec![
            put_message(&m1),
            put_message(&m2),
            put_message(&elsewhere),
            put_part(&theirs),
        ],
    )
    .await;
    let guarded = |part: &Part| Transaction {
        guards: vec![Guard::PartIdFree {
            session: session.id.clone(),
            part: part.id.clone(),
        }],
        changes: vec![put_part(part)],
        events: Vec::new(),
    };
    repo.commit(guarded(&first))
        .await
        .expect("a free id passes");
    let mut same_as_theirs = text(&ids, &m1, "same id as another session's part");
    same_as_theirs.id = theirs.id.clone();
    repo.commit(guarded(&same_as_theirs))
        .await
        .expect("another session's part ids do not count");

    let mut again = text(&ids, &m2, "again");
    again.id = first.id.clone();
    let result = repo.commit(guarded(&again)).await;
    match &result {
        Err(Error::InvalidInput(message)) => assert!(
            message.contains(first.id.as_str()) && message.contains(m1.id.as_str()),
            "names the id and the message that has it: {message}"
        ),
        other => panic!("a taken id must fail with InvalidInput, got {other:?}"),
    }
    let stored = messages(repo, &session.id).await;
    let m2_parts = stored
        .iter()
        .find(|m| m.info.id == m2.id)
        .map(|m| m.parts.len());
    assert_eq!(m2_parts, Some(0), "the failed commit stored nothing");
}

/// Messages come back in id order, each with its parts in id order, whatever order they were written in;
/// replacing a message keeps its parts, and replacing a part does not duplicate it.
pub async fn messages_and_parts_come_back_in_id_order(repo: &dyn MessageRepo) {
    let ids = Ids::new();
    let session = new_session(&ids, "/work/order");
    let mut m1 = new_message(&ids, &session, Role::User);
    // A turn's diffs, which `message` and `messages` return and `message_infos` leaves out.
    m1.extra.insert(
        "summary".to_owned(),
        json!({"diffs": [{"file": "a.txt", "patch": "@@ -1 +1 @@\n-a\n+b\n", "additions": 1, "deletions": 1}]}),
    );
    m1.extra.insert("agent".to_owned(), json!("build"));
    let m2 = new_message(&ids, &session, Role::Assistant);
    let m3 = new_message(&ids, &session, Role::User);
    let a1 = text(&ids, &m1, "a1");
    let a2 = text(&ids, &m1, "a2");
    let b1 = text(&ids, &m2, "b1");
    let b2 = text(&ids, &m2, "b2");
    let b3 = text(&ids, &m2, "b3");

    commit(repo, vec![put_session(&session)]).await;
    commit(repo, vec![put_message(&m3), put_message(&m1)]).await;
    commit(
        repo,
        vec![
            put_message(&m2),
            put_part(&b3),
            put_part(&a2),
            put_part(&b1),
        ],
    )
    .await;
    commit(repo, vec![put_part(&a1), put_part(&b2)]).await;

    let expected = vec![
        with_parts(&m1, &[&a1, &a2]),
        with_parts(&m2, &[&b1, &b2, &b3]),
        with_parts(&m3, &[]),
    ];
    assert_eq!(
        messages(repo, &session.id).await,
        expected,
        "messages must come back in id order, each with its parts in id order"
    );
    let read_m2 = repo
        .message(&session.id, &m2.id)
        .await
        .expect("reading a message must succeed");
    assert_eq!(
        read_m2.as_ref(),
        Some(&expected[1]),
        "`message` must return its parts in id order"
    );
    let missing = ids.message();
    let read_missing = repo
        .message(&session.id, &missing)
        .await
        .expect("reading an unknown message must succeed");
    assert_eq!(read_missing, None, "an unknown message must read as None");
    // The head: the message and its last part in id order (b3 was stored first), without the parts.
    let head = |message: &MessageId| {
        let message = message.clone();
        let session = session.id.clone();
        async move {
            repo.message_head(&session, &message)
                .await
                .expect("reading a message's head must succeed")
        }
    };
    assert_eq!(
        head(&m2.id).await,
        Some(MessageHead {
            info: m2.clone(),
            last_part: Some(b3.id.clone()),
        }),
        "`message_head` must name the last part in id order"
    );
    assert_eq!(
        head(&m3.id).await,
        Some(MessageHead {
            info: m3.clone(),
            last_part: None,
        })
    );
    assert_eq!(head(&missing).await, None, "an unknown message has no head");
    let infos = repo
        .message_infos(&session.id)
        .await
        .expect("reading a session's messages must succeed");
    let mut m1_info = m1.clone();
    m1_info.extra.remove("summary");
    assert_eq!(
        infos,
        [m1_info, m2.clone(), m3.clone()],
        "`message_infos` must return each message's info in id order, without its summary"
    );
    let none = repo
        .message_infos(&ids.session())
        .await
        .expect("reading a session's messages must succeed");
    assert!(none.is_empty(), "an unknown session has no messages");
    let elsewhere = repo
        .message_head(&ids.session(), &m2.id)
        .await
        .expect("reading a message's head must succeed");
    assert_eq!(
        elsewhere, None,
        "a message is found only in its own session"
    );

    let mut m2_done = m2.clone();
    m2_done.time.completed = Some(ids.tick());
    let mut b2_edited = b2.clone();
    b2_edited.body = PartBody::text("b2, edited");
    commit(repo, vec![put_message(&m2_done), put_part(&b2_edited)]).await;
    let read_m2 = repo
        .message(&session.id, &m2.id)
        .await
        .expect("reading a message must succeed");
    assert_eq!(
        read_m2,
        Some(with_parts(&m2_done, &[&b1, &b2_edited, &b3])),
        "replacing a message must keep its parts, and replacing a part must change it in place"
    );
}

/// Shared set-up of the hidden-range cases: a session with messages m1..m3 and a second session in the same
/// directory whose message was created between m2 and m3, so its id sorts inside the range.
struct HiddenRangeFixture {
    ids: Ids,
    session: Session,
    m1: Message,
    m2: Message,
    m3: Message,
    m1_parts: Vec<Part>,
    m2_parts: Vec<Part>,
    other: Session,
    other_message: MessageWithParts,
}

impl HiddenRangeFixture {
    async fn store(repo: &dyn MessageRepo) -> Self {
        let ids = Ids::new();
        let session = new_session(&ids, "/work/hidden");
        let other = new_session(&ids, "/work/hidden");
        let m1 = new_message(&ids, &session, Role::User);
        let m1_parts = vec![text(&ids, &m1, "a1"), text(&ids, &m1, "a2")];
        let m2 = new_message(&ids, &session, Role::Assistant);
        let m2_parts = vec![
            text(&ids, &m2, "b1"),
            text(&ids, &m2, "b2"),
            patch(&ids, &m2, snapshot(3), &["/work/hidden/a.txt"]),
            text(&ids, &m2, "b4"),
        ];
        let other_info = new_message(&ids, &other, Role::User);
        let other_part = text(&ids, &other_info, "other");
        let m3 = new_message(&ids, &session, Role::User);
        let m3_part = text(&ids, &m3, "c1");

        let mut changes = vec![
            put_session(&session),
            put_session(&other),
            put_message(&m1),
            put_message(&m2),
            put_message(&m3),
            put_message(&other_info),
            put_part(&other_part),
            put_part(&m3_part),
        ];
        changes.extend(m1_parts.iter().chain(&m2_parts).map(put_part));
        commit(repo, changes).await;
        HiddenRangeFixture {
            ids,
            session,
            m1,
            m2,
            m3,
            m1_parts,
            m2_parts,
            other,
            other_message: with_parts(&other_info, &[&other_part]),
        }
    }

    async fn other_is_untouched(&self, repo: &dyn MessageRepo) {
        assert_eq!(
            messages(repo, &self.other.id).await,
            vec![self.other_message.clone()],
            "the hidden-range delete must not touch another session, even one whose ids sort inside the range"
        );
    }
}

/// `messages_from` is `messages` from an id on: from a message, it and the later ones with their parts;
/// from an id no message has, those after it; from an id after every message, none. Another session's
/// messages in the range are not among them. `messages_between` is the same, up to an id.
pub async fn messages_from_an_id_on_are_those_of_the_session_from_there(repo: &dyn MessageRepo) {
    let ids = Ids::new();
    let session = new_session(&ids, "/work/from");
    let other = new_session(&ids, "/work/from-other");
    let m1 = new_message(&ids, &session, Role::User);
    let a1 = text(&ids, &m1, "a1");
    let m2 = new_message(&ids, &session, Role::Assistant);
    let b1 = text(&ids, &m2, "b1");
    let between = ids.message();
    let elsewhere = new_message(&ids, &other, Role::User);
    let e1 = text(&ids, &elsewhere, "elsewhere");
    let m3 = new_message(&ids, &session, Role::User);
    let after = ids.message();
    commit(repo, vec![put_session(&session), put_session(&other)]).await;
    commit(
        repo,
        vec![
            put_message(&m3),
            put_message(&m1),
            put_message(&m2),
            put_message(&elsewhere),
            put_part(&e1),
            put_part(&b1),
            put_part(&a1),
        ],
    )
    .await;
    let all = vec![
        with_parts(&m1, &[&a1]),
        with_parts(&m2, &[&b1]),
        with_parts(&m3, &[]),
    ];
    assert_eq!(messages(repo, &session.id).await, all);
    for (from, expected) in [
        (&m1.id, &all[..]),
        (&m2.id, &all[1..]),
        (&between, &all[2..]),
        (&m3.id, &all[2..]),
        (&after, &all[3..]),
    ] {
        let read = repo
            .messages_from(&session.id, from)
            .await
            .expect("reading messages from one on must succeed");
        assert_eq!(read, expected, "`messages_from` {from}");
    }
    // `messages_between`: the same, without those from `before` on (an id no message has, a message's,
    // one before `from`: none); the other session's message in the range is not among them.
    for (from, before, expected) in [
        (&m1.id, None, &all[..]),
        (&m1.id, Some(&m3.id), &all[..2]),
        (&m1.id, Some(&between), &all[..2]),
        (&m1.id, Some(&m2.id), &all[..1]),
        (&m2.id, Some(&after), &all[1..]),
        (&between, Some(&m3.id), &all[2..2]),
        (&m3.id, Some(&m1.id), &all[3..]),
        (&m2.id, Some(&m2.id), &all[3..]),
    ] {
        let read = repo
            .messages_between(&session.id, from, before.cloned())
            .await
            .expect("reading a range of messages must succeed");
        assert_eq!(read, expected, "`messages_between` {from} {before:?}");
    }
}

/// `DeleteHiddenRange` without a part removes the descriptor's message and every later message of the
/// session, with their parts, and nothing else; it refers to a session and a message that must exist.
pub async fn hidden_range_delete_without_part(repo: &dyn MessageRepo) {
    let fixture = HiddenRangeFixture::store(repo).await;
    let f = &fixture;
    repo.commit(transaction(
        vec![Change::DeleteHiddenRange {
            session: f.session.id.clone(),
            message: f.m2.id.clone(),
            part: None,
        }],
        vec![updated(&f.ids, &f.session)],
    ))
    .await
    .expect("a hidden-range delete must commit");

    let m1_parts: Vec<&Part> = f.m1_parts.iter().collect();
    assert_eq!(
        messages(repo, &f.session.id).await,
        vec![with_parts(&f.m1, &m1_parts)],
        "the hidden range without a part is the message itself and every later one"
    );
    assert!(
        repo.message(&f.session.id, &f.m3.id)
            .await
            .expect("reading a message must succeed")
            .is_none(),
        "a message of the hidden range must be gone"
    );
    f.other_is_untouched(repo).await;
    let session = repo
        .session(&f.session.id)
        .await
        .expect("reading a session must succeed");
    assert_eq!(
        session.as_ref(),
        Some(&f.session),
        "the session itself stays"
    );

    let unknown_message = repo
        .commit(transaction(
            vec![Change::DeleteHiddenRange {
                session: f.session.id.clone(),
                message: f.m2.id.clone(),
                part: None,
            }],
            Vec::new(),
        ))
        .await;
    assert!(
        matches!(unknown_message, Err(Error::NotFound(_))),
        "a hidden-range delete from a message that does not exist must fail with NotFound, got {unknown_message:?}"
    );
    let unknown_session = repo
        .commit(transaction(
            vec![Change::DeleteHiddenRange {
                session: f.ids.session(),
                message: f.m1.id.clone(),
                part: None,
            }],
            Vec::new(),
        ))
        .await;
    assert!(
        matches!(unknown_session, Err(Error::NotFound(_))),
        "a hidden-range delete in a session that does not exist must fail with NotFound, got {unknown_session:?}"
    );
}

/// `DeleteHiddenRange` with a part keeps the descriptor's message and its parts before `part`, removes
/// `part` itself, the parts after it and every later message, and nothing else.
pub async fn hidden_range_delete_with_part(repo: &dyn MessageRepo) {
    let fixture = HiddenRangeFixture::store(repo).await;
    let f = &fixture;
    let cut = &f.m2_parts[2];
    commit(
        repo,
        vec![Change::DeleteHiddenRange {
            session: f.session.id.clone(),
            message: f.m2.id.clone(),
            part: Some(cut.id.clone()),
        }],
    )
    .await;

    let m1_parts: Vec<&Part> = f.m1_parts.iter().collect();
    let m2_kept: Vec<&Part> = f.m2_parts[..2].iter().collect();
    assert_eq!(
        messages(repo, &f.session.id).await,
        vec![with_parts(&f.m1, &m1_parts), with_parts(&f.m2, &m2_kept)],
        "the hidden range with a part is that part, the later parts of its message and every later message"
    );
    f.other_is_untouched(repo).await;

    // From the first part on: the message stays, without parts.
    commit(
        repo,
        vec![Change::DeleteHiddenRange {
            session: f.session.id.clone(),
            message: f.m2.id.clone(),
            part: Some(f.m2_parts[0].id.clone()),
        }],
    )
    .await;
    assert_eq!(
        messages(repo, &f.session.id).await,
        vec![with_parts(&f.m1, &m1_parts), with_parts(&f.m2, &[])],
        "a part-level hidden range keeps its message even when every part of it goes"
    );
}

/// A transaction's changes apply in their order: a `DeleteHiddenRange` first deletes the range, then the
/// same transaction's part put into the cut message (its id after the cut) and its message and part that
/// reuse deleted ids are stored as new (a step begun on a reverted session stores its cleanup so).
pub async fn hidden_range_delete_comes_first_in_its_transaction(repo: &dyn MessageRepo) {
    let fixture = HiddenRangeFixture::store(repo).await;
    let f = &fixture;
    let cut = &f.m2_parts[2];
    let step = text(&f.ids, &f.m2, "after the cut");
    let mut again = f.m3.clone();
    again.time.created = f.ids.tick();
    let mut reused = text(&f.ids, &again, "a deleted part's id");
    reused.id = f.m2_parts[3].id.clone();
    commit(
        repo,
        vec![
            Change::DeleteHiddenRange {
                session: f.session.id.clone(),
                message: f.m2.id.clone(),
                part: Some(cut.id.clone()),
            },
            put_part(&step),
            put_message(&again),
            put_part(&reused),
        ],
    )
    .await;
    let m1_parts: Vec<&Part> = f.m1_parts.iter().collect();
    assert_eq!(
        messages(repo, &f.session.id).await,
        vec![
            with_parts(&f.m1, &m1_parts),
            with_parts(&f.m2, &[&f.m2_parts[0], &f.m2_parts[1], &step]),
            with_parts(&again, &[&reused]),
        ],
        "the range is deleted first; what follows in the transaction is stored"
    );
    f.other_is_untouched(repo).await;
}

/// A lease held by one token cannot be taken by another unless it replaces that token; the holder may take
/// it again to refresh it; leases on different keys are independent.
pub async fn lease_cannot_be_taken_twice(repo: &dyn MessageRepo) {
    let ids = Ids::new();
    let key = LeaseKey::Session(ids.session());
    let first = lease(&key, "token-a", 1_000);
    let taken = repo
        .take_lease(&first, None)
        .await
        .expect("taking a free lease must succeed");
    assert_eq!(taken, LeaseTake::Taken, "a free lease must be taken");

    let second = lease(&key, "token-b", 5_000);
    let answer = repo
        .take_lease(&second, None)
        .await
        .expect("asking for a held lease must succeed");
    assert_eq!(
        answer,
        LeaseTake::Held(first.clone()),
        "a held lease must not be taken by another token, and the answer must name the holder"
    );
    let current = repo
        .lease(&key)
        .await
        .expect("reading a lease must succeed");
    assert_eq!(
        current.as_ref(),
        Some(&first),
        "a refused take must change nothing"
    );

    let refreshed = lease(&key, "token-a", 2_000);
    let again = repo
        .take_lease(&refreshed, None)
        .await
        .expect("re-taking one's own lease must succeed");
    assert_eq!(
        again,
        LeaseTake::Taken,
        "the holder may take its lease again"
    );
    let current = repo
        .lease(&key)
        .await
        .expect("reading a lease must succeed");
    assert_eq!(
        current,
        Some(refreshed),
        "taking one's own lease again refreshes it"
    );

    let worktree = LeaseKey::Worktree("/work/lease".to_owned());
    let other_key = lease(&worktree, "token-b", 5_000);
    let taken = repo
        .take_lease(&other_key, None)
        .await
        .expect("taking a free lease must succeed");
    assert_eq!(
        taken,
        LeaseTake::Taken,
        "a lease on another key is independent"
    );
    let unknown = repo
        .lease(&LeaseKey::Session(ids.session()))
        .await
        .expect("reading a lease must succeed");
    assert_eq!(unknown, None, "a key nobody took has no lease");
}

/// A worktree's lease is refused while another token holds the lease of a worktree inside it or around it
/// (the answer names that lease), by `take_lease` and `take_leases` alike; not for a sibling that merely
/// shares a string prefix (`/w/a` and `/w/ab`), another case, nor a backslash; not for the same token;
/// also when the take replaces that token on its own key. A refusal changes nothing.
pub async fn worktree_leases_keep_out_of_worktrees_inside_and_around(repo: &dyn MessageRepo) {
    let ids = Ids::new();
    let worktree = |path: &str| LeaseKey::Worktree(path.to_owned());
    let take = |key: LeaseKey, token_text: &str| {
        let wanted = lease(&key, token_text, 5_000);
        async move {
            repo.take_lease(&wanted, None)
                .await
                .expect("asking for a lease must succeed")
        }
    };
    let held = lease(&worktree("/w/a"), "token-a", 5_000);
    assert_eq!(
        repo.take_lease(&held, None).await.expect("takes"),
        LeaseTake::Taken
    );
    for path in ["/w/a/b", "/w/a/b/c", "/w", "/"] {
        assert_eq!(
            take(worktree(path), "token-b").await,
            LeaseTake::Held(held.clone()),
            "{path} lies inside or around /w/a: refused, naming the holder"
        );
        assert_eq!(
            repo.lease(&worktree(path)).await.expect("reads"),
            None,
            "a refused take of {path} writes nothing"
        );
    }
    for path in ["/w/ab", "/W/a/b", "/w/a\\b", "/w/b"] {
        assert_eq!(
            take(worktree(path), "token-b").await,
            LeaseTake::Taken,
            "{path} is neither inside nor around /w/a"
        );
        repo.release_lease(&worktree(path), &token("token-b"))
            .await
            .expect("releases");
    }
    assert_eq!(
        take(worktree("/w/a/b"), "token-a").await,
        LeaseTake::Taken,
        "the holder's own token is not kept out"
    );
    repo.release_lease(&worktree("/w/a/b"), &token("token-a"))
        .await
        .expect("releases");
    let replacing = lease(&worktree("/w/a/b"), "token-c", 5_000);
    assert_eq!(
        repo.take_lease(&replacing, Some(Replacing::token(token("token-a"))))
            .await
            .expect("asks"),
        LeaseTake::Held(held.clone()),
        "replacing a token on its own key does not let a take in beside that token's lease around it"
    );

    let session = LeaseKey::Session(ids.session());
    let both = [
        lease(&session, "token-d", 5_000),
        lease(&worktree("/w/a/d"), "token-d", 5_000),
    ];
    let takes = repo.take_leases(&both).await.expect("asks");
    assert_eq!(
        takes,
        vec![LeaseTake::Taken, LeaseTake::Held(held.clone())],
        "take_leases refuses a worktree inside a held one"
    );
    assert_eq!(
        repo.lease(&session).await.expect("reads"),
        None,
        "and takes none of the leases"
    );
    assert_eq!(
        repo.take_leases(&[lease(&worktree("/w/ab"), "token-d", 5_000)])
            .await
            .expect("asks"),
        vec![LeaseTake::Taken],
        "a sibling is free"
    );
}

/// `sessions_overlapping(d)` lists the sessions of `d`, of the worktrees around it and of those inside it,
/// newest first; not those of a sibling sharing a string prefix, of another case, of a path with a
/// backslash, `%` or `_` where `d` has none, nor of unrelated worktrees.
pub async fn sessions_overlapping_are_those_of_worktrees_inside_and_around(repo: &dyn MessageRepo) {
    let ids = Ids::new();
    let mut stored = Vec::new();
    for directory in [
        "/w",
        "/w/a",
        "/w/a/b",
        "/w/a/b/c",
        "/w/ab",
        "/W/a/b",
        "/w/a\\b",
        "/w/a\\b/x",
        "/w/a%/x",
        "/w/a_/x",
        "/w/b",
        "/v/a",
    ] {
        let session = new_session(&ids, directory);
        commit(repo, vec![put_session(&session)]).await;
        stored.push(session);
    }
    let listed = |directory: &'static str| async move {
        repo.sessions_overlapping(directory)
            .await
            .expect("listing sessions must succeed")
            .into_iter()
            .map(|s| s.directory)
            .collect::<Vec<_>>()
    };
    assert_eq!(
        listed("/w/a").await,
        ["/w/a/b/c", "/w/a/b", "/w/a", "/w"],
        "its own, those around and those inside, newest first"
    );
    assert_eq!(listed("/w/a%").await, ["/w/a%/x", "/w"]);
    assert_eq!(listed("/w/a_").await, ["/w/a_/x", "/w"]);
    assert_eq!(
        listed("/w/a\\b").await,
        ["/w/a\\b/x", "/w/a\\b", "/w"],
        "a backslash is a character of the name, found below as well"
    );
    assert_eq!(listed("/elsewhere").await, Vec::<String>::new());
    assert_eq!(
        listed("/").await.len(),
        stored.len(),
        "every worktree lies inside /"
    );
}

/// A takeover succeeds only when `replacing` names the current token; a stale token (of a lease already
/// taken over) is refused with the current lease.
pub async fn lease_can_be_taken_over_when_replacing_the_current_token(repo: &dyn MessageRepo) {
    let key = LeaseKey::Worktree("/work/takeover".to_owned());
    let first = lease(&key, "token-a", 1_000);
    let taken = repo
        .take_lease(&first, None)
        .await
        .expect("taking a free lease must succeed");
    assert_eq!(taken, LeaseTake::Taken, "a free lease must be taken");

    let second = lease(&key, "token-b", 9_000);
    let wrong = repo
        .take_lease(&second, Some(Replacing::token(token("token-x"))))
        .await
        .expect("asking for a held lease must succeed");
    assert_eq!(
        wrong,
        LeaseTake::Held(first.clone()),
        "replacing a token that does not hold the lease must be refused"
    );
    let takeover = repo
        .take_lease(&second, Some(Replacing::token(token("token-a"))))
        .await
        .expect("a takeover must succeed");
    assert_eq!(
        takeover,
        LeaseTake::Taken,
        "replacing the current token must take the lease over"
    );
    let current = repo
        .lease(&key)
        .await
        .expect("reading a lease must succeed");
    assert_eq!(
        current.as_ref(),
        Some(&second),
        "after a takeover the new lease is stored"
    );

    let third = lease(&key, "token-c", 9_500);
    let stale = repo
        .take_lease(&third, Some(Replacing::token(token("token-a"))))
        .await
        .expect("asking for a held lease must succeed");
    assert_eq!(
        stale,
        LeaseTake::Held(second.clone()),
        "replacing a stale token (the lease was already taken over) must be refused with the current lease"
    );
    let current = repo
        .lease(&key)
        .await
        .expect("reading a lease must succeed");
    assert_eq!(current, Some(second), "a refused takeover changes nothing");
}

/// A takeover names the lease as the taker judged it, expiry included (`Replacing::seen`): one its holder
/// renewed since (it stalled past its expiry, and is alive after all) is not replaced, and the answer is
/// the renewed lease; the lease as it stands now is. Once it is replaced, the old holder's renewal fails.
pub async fn a_takeover_of_a_lease_renewed_since_it_was_seen_is_refused(repo: &dyn MessageRepo) {
    let key = LeaseKey::Worktree("/work/renewed-takeover".to_owned());
    let seen = lease(&key, "token-a", 1_000);
    let taken = repo
        .take_lease(&seen, None)
        .await
        .expect("taking a free lease must succeed");
    assert_eq!(taken, LeaseTake::Taken, "a free lease must be taken");
    let renewed = repo
        .renew_lease(&key, &token("token-a"), 5_000)
        .await
        .expect("renewing must succeed");
    assert!(renewed, "its holder renews it");
    let now = repo
        .lease(&key)
        .await
        .expect("reading a lease must succeed")
        .expect("the lease is stored");
    assert_eq!(now.expires_at, 5_000);

    let taker = lease(&key, "token-b", 9_000);
    let refused = repo
        .take_lease(&taker, Some(Replacing::seen(&seen)))
        .await
        .expect("asking for a held lease must succeed");
    assert_eq!(
        refused,
        LeaseTake::Held(now.clone()),
        "a lease renewed since it was seen must not be taken over"
    );
    let taken = repo
        .take_lease(&taker, Some(Replacing::seen(&now)))
        .await
        .expect("a takeover must succeed");
    assert_eq!(
        taken,
        LeaseTake::Taken,
        "the lease as it stands is taken over"
    );
    let renewed = repo
        .renew_lease(&key, &token("token-a"), 9_500)
        .await
        .expect("renewing must succeed");
    assert!(
        !renewed,
        "the old holder's renewal fails once it is taken over"
    );
}

/// Renewing and releasing a lease work only with the token that holds it.
pub async fn lease_renew_and_release_need_the_token(repo: &dyn MessageRepo) {
    let key = LeaseKey::Session(Ids::new().session());
    let held = lease(&key, "token-a", 1_000);
    let taken = repo
        .take_lease(&held, None)
        .await
        .expect("taking a free lease must succeed");
    assert_eq!(taken, LeaseTake::Taken, "a free lease must be taken");

    let renewed = repo
        .renew_lease(&key, &token("token-b"), 7_000)
        .await
        .expect("renewing must succeed");
    assert!(!renewed, "renewing with another token must report false");
    let current = repo
        .lease(&key)
        .await
        .expect("reading a lease must succeed");
    assert_eq!(
        current.as_ref(),
        Some(&held),
        "renewing with another token must change nothing"
    );

    let renewed = repo
        .renew_lease(&key, &token("token-a"), 7_000)
        .await
        .expect("renewing must succeed");
    assert!(renewed, "renewing with the holding token must report true");
    let current = repo
        .lease(&key)
        .await
        .expect("reading a lease must succeed");
    assert_eq!(
        current.map(|l| (l.token, l.expires_at)),
        Some((token("token-a"), 7_000)),
        "renewing must move the expiry"
    );

    repo.release_lease(&key, &token("token-b"))
        .await
        .expect("releasing must succeed");
    let current = repo
        .lease(&key)
        .await
        .expect("reading a lease must succeed");
    assert!(
        current.is_some(),
        "releasing with another token must not remove the lease"
    );

    repo.release_lease(&key, &token("token-a"))
        .await
        .expect("releasing must succeed");
    let current = repo
        .lease(&key)
        .await
        .expect("reading a lease must succeed");
    assert_eq!(current, None, "releasing with the holding token removes it");

    let renewed = repo
        .renew_lease(&key, &token("token-a"), 9_000)
        .await
        .expect("renewing must succeed");
    assert!(!renewed, "a released lease cannot be renewed");
    let current = repo
        .lease(&key)
        .await
        .expect("reading a lease must succeed");
    assert_eq!(
        current, None,
        "renewing a released lease must not recreate it"
    );
}

/// `leases` lists every stored lease as `lease` reads it, expired ones included, and no released one.
pub async fn every_stored_lease_is_listed(repo: &dyn MessageRepo) {
    let ids = Ids::new();
    assert!(repo.leases().await.expect("lists").is_empty());
    let session = LeaseKey::Session(ids.session());
    let worktree = LeaseKey::Worktree("/work/listed".to_owned());
    let expired = LeaseKey::Session(ids.session());
    for (key, token_text, expires) in [
        (&session, "token-a", 9_000),
        (&worktree, "token-a", 9_000),
        (&expired, "token-b", 1),
    ] {
        let taken = repo
            .take_lease(&lease(key, token_text, expires), None)
            .await
            .expect("takes");
        assert_eq!(taken, LeaseTake::Taken);
    }
    repo.release_lease(&session, &token("token-a"))
        .await
        .expect("releases");
    let mut listed = repo.leases().await.expect("lists");
    listed.sort_by_key(|l| l.key.as_storage_key());
    let mut expected = Vec::new();
    for key in [&worktree, &expired] {
        expected.push(repo.lease(key).await.expect("reads").expect("stored"));
    }
    expected.sort_by_key(|l| l.key.as_storage_key());
    assert_eq!(listed, expected);
    assert_eq!(listed.len(), 2);
}

/// `take_leases` takes all of its leases or none: both free (or already held by their own token) are taken;
/// when one is held by another token, neither is changed and the refused one names its holder.
pub async fn leases_are_taken_together_or_not_at_all(repo: &dyn MessageRepo) {
    let ids = Ids::new();
    let first = LeaseKey::Session(new_session(&ids, "/work/together").id);
    let second = LeaseKey::Worktree("/work/together".to_owned());
    let both = |token_text: &str, expires_at: u64| {
        vec![
            lease(&first, token_text, expires_at),
            lease(&second, token_text, expires_at),
        ]
    };
    let taken = repo
        .take_leases(&both("token-a", 5_000))
        .await
        .expect("taking free leases must succeed");
    assert_eq!(taken, vec![LeaseTake::Taken, LeaseTake::Taken]);
    for key in [&first, &second] {
        assert_eq!(
            repo.lease(key).await.expect("read").map(|l| l.token),
            Some(token("token-a")),
            "both leases must be held"
        );
    }
    let again = repo
        .take_leases(&both("token-a", 6_000))
        .await
        .expect("re-taking with the same token must succeed");
    assert_eq!(again, vec![LeaseTake::Taken, LeaseTake::Taken], "re-entry");
    assert_eq!(
        repo.lease(&second)
            .await
            .expect("read")
            .map(|l| l.expires_at),
        Some(6_000),
        "re-entry moves the expiry"
    );

    repo.release_lease(&first, &token("token-a"))
        .await
        .expect("release");
    let refused = repo
        .take_leases(&both("token-b", 7_000))
        .await
        .expect("a refusal is an answer, not an error");
    assert_eq!(refused.len(), 2);
    assert_eq!(
        refused[0],
        LeaseTake::Taken,
        "the free one could have been taken"
    );
    assert!(
        matches!(&refused[1], LeaseTake::Held(current) if current.token == token("token-a")),
        "the held one names its holder: {refused:?}"
    );
    assert_eq!(
        repo.lease(&first).await.expect("read"),
        None,
        "nothing is taken when one lease is refused"
    );
    assert_eq!(
        repo.lease(&second)
            .await
            .expect("read")
            .map(|l| (l.token, l.expires_at)),
        Some((token("token-a"), 6_000)),
        "the held lease is unchanged"
    );
}

/// `Change::ReleaseLease` in a transaction removes the lease only while the given token holds it, only when
/// the transaction commits, and after the transaction's guards were checked (an operation's result
/// transaction is guarded by the very leases it releases).
pub async fn a_transaction_releases_a_lease_only_with_its_token(repo: &dyn MessageRepo) {
    let ids = Ids::new();
    let session = new_session(&ids, "/work/release-in-transaction");
    commit(repo, vec![put_session(&session)]).await;
    let key = LeaseKey::Session(session.id.clone());
    let other_key = LeaseKey::Worktree("/work/release-in-transaction".to_owned());
    for held in [
        lease(&key, "token-a", 5_000),
        lease(&other_key, "token-a", 5_000),
    ] {
        let taken = repo
            .take_lease(&held, None)
            .await
            .expect("taking a free lease must succeed");
        assert_eq!(taken, LeaseTake::Taken, "a free lease must be taken");
    }
    let release = |key: &LeaseKey, token_text: &str| Change::ReleaseLease {
        key: key.clone(),
        token: token(token_text),
    };
    let held_by = |token_text: &str| Guard::LeaseHeld {
        key: key.clone(),
        token: token(token_text),
    };

    commit(repo, vec![release(&key, "token-b")]).await;
    assert_eq!(
        repo.lease(&key)
            .await
            .expect("reading a lease must succeed")
            .map(|l| l.token),
        Some(token("token-a")),
        "releasing with another token must not remove the lease"
    );

    let mut renamed = session.clone();
    renamed.slug = "must not be stored".to_owned();
    let failed = repo
        .commit(Transaction {
            guards: vec![held_by("token-b")],
            changes: vec![put_session(&renamed), release(&key, "token-a")],
            events: Vec::new(),
        })
        .await;
    assert!(
        matches!(failed, Err(Error::LeaseLost(_))),
        "a guard on another token must fail the transaction, got {failed:?}"
    );
    assert!(
        repo.lease(&key)
            .await
            .expect("reading a lease must succeed")
            .is_some(),
        "a failed transaction must not release anything"
    );

    let mut finished = session.clone();
    finished.slug = "finished".to_owned();
    repo.commit(Transaction {
        guards: vec![held_by("token-a")],
        changes: vec![
            put_session(&finished),
            release(&key, "token-a"),
            release(&other_key, "token-a"),
        ],
        events: Vec::new(),
    })
    .await
    .expect("a transaction guarded by a lease it releases must commit");
    assert_eq!(marker(repo, &session.id).await.as_deref(), Some("finished"));
    for released in [&key, &other_key] {
        assert_eq!(
            repo.lease(released)
                .await
                .expect("reading a lease must succeed"),
            None,
            "both leases must be released by the committed transaction"
        );
    }
    let again = lease(&key, "token-c", 5_000);
    assert_eq!(
        repo.take_lease(&again, None)
            .await
            .expect("taking a released lease must succeed"),
        LeaseTake::Taken,
        "a released lease can be taken by anyone"
    );
}

/// Each change that belongs to a session (its diff, an intent record, a warning) fails with NotFound when
/// the session does not exist, alone or after other changes of the same transaction, and nothing of the
/// transaction is stored: no diff, no intent, no event. A session that exists takes them.
pub async fn changes_of_a_session_that_does_not_exist_fail_with_not_found(repo: &dyn MessageRepo) {
    let ids = Ids::new();
    let stored = new_session(&ids, "/work/missing-a");
    let missing = new_session(&ids, "/work/missing-b");
    commit(repo, vec![put_session(&stored)]).await;
    let before = all_events(repo).await;
    let diff = vec![FileDiff {
        file: "a.txt".to_owned(),
        patch: String::new(),
        additions: 1,
        deletions: 0,
        status: FileStatus::Added,
    }];
    let changes_of_missing = [
        Change::SetSessionDiff {
            session: missing.id.clone(),
            diff: diff.clone(),
        },
        Change::PutIntent(Box::new(intent(
            &ids,
            &missing,
            "intent-missing",
            snapshot(5),
        ))),
        Change::AddWarning {
            session: missing.id.clone(),
            warning: warning(&ids, None, "/work/missing-b/a.txt"),
        },
    ];
    for change in changes_of_missing {
        let result = repo
            .commit(transaction(
                vec![
                    Change::SetSessionDiff {
                        session: stored.id.clone(),
                        diff: diff.clone(),
                    },
                    change.clone(),
                ],
                vec![updated(&ids, &stored)],
            ))
            .await;
        assert!(
            matches!(result, Err(Error::NotFound(_))),
            "{change:?} for a session that does not exist must fail with NotFound, got {result:?}"
        );
    }
    assert!(
        repo.session_diff(&stored.id)
            .await
            .expect("reading a session diff must succeed")
            .is_empty(),
        "the failed transactions stored no diff of the session that exists"
    );
    assert!(
        repo.intents().await.expect("listing intents").is_empty(),
        "no intent record was stored"
    );
    assert_eq!(all_events(repo).await, before, "no event was appended");
    commit(
        repo,
        vec![
            Change::SetSessionDiff {
                session: stored.id.clone(),
                diff: diff.clone(),
            },
            Change::PutIntent(Box::new(intent(
                &ids,
                &stored,
                "intent-stored",
                snapshot(6),
            ))),
        ],
    )
    .await;
    assert_eq!(
        repo.session_diff(&stored.id).await.expect("read"),
        diff,
        "a session that exists takes its diff"
    );
    assert_eq!(repo.intents().await.expect("intents").len(), 1);
}

/// A transaction that fails, on a change that refers to a missing message or session or on a guard, stores
/// none of its changes and none of its events, and leaves no gap in the outbox positions.
pub async fn failed_transaction_leaves_nothing_and_writes_no_event(repo: &dyn MessageRepo) {
    let ids = Ids::new();
    let before = all_events(repo).await;
    let session = new_session(&ids, "/work/failed");
    let user = new_message(&ids, &session, Role::User);
    let never_stored = new_message(&ids, &session, Role::Assistant);
    let stray = text(&ids, &never_stored, "stray");

    let result = repo
        .commit(transaction(
            vec![put_session(&session), put_message(&user), put_part(&stray)],
            vec![updated(&ids, &session)],
        ))
        .await;
    assert!(
        matches!(result, Err(Error::NotFound(_))),
        "a part of a message that does not exist must fail the transaction with NotFound, got {result:?}"
    );
    let nothing_stored = |what: &str| format!("a failed transaction must store nothing: {what}");
    assert_eq!(
        repo.session(&session.id)
            .await
            .expect("reading a session must succeed"),
        None,
        "{}",
        nothing_stored("its session was stored")
    );
    assert!(
        messages(repo, &session.id).await.is_empty(),
        "{}",
        nothing_stored("its message was stored")
    );
    assert_eq!(
        all_events(repo).await,
        before,
        "a failed transaction must append no event"
    );

    let orphan = repo
        .commit(transaction(
            vec![put_message(&user)],
            vec![updated(&ids, &session)],
        ))
        .await;
    assert!(
        matches!(orphan, Err(Error::NotFound(_))),
        "a message of a session that does not exist must fail with NotFound, got {orphan:?}"
    );

    let guarded = Transaction {
        guards: vec![Guard::LeaseHeld {
            key: LeaseKey::Session(session.id.clone()),
            token: token("nobody"),
        }],
        changes: vec![put_session(&session), put_message(&user)],
        events: vec![updated(&ids, &session)],
    };
    let result = repo.commit(guarded).await;
    assert!(
        matches!(result, Err(Error::LeaseLost(_))),
        "a guard that does not hold must fail the transaction with LeaseLost, got {result:?}"
    );
    assert_eq!(
        repo.session(&session.id)
            .await
            .expect("reading a session must succeed"),
        None,
        "{}",
        nothing_stored("a guarded-out session was stored")
    );
    assert_eq!(
        all_events(repo).await,
        before,
        "a transaction failed by a guard must append no event"
    );

    let event = updated(&ids, &session);
    repo.commit(transaction(
        vec![put_session(&session)],
        vec![event.clone()],
    ))
    .await
    .expect("a valid transaction must commit after failed ones");
    let after = all_events(repo).await;
    assert_eq!(
        after.len(),
        before.len() + 1,
        "one committed event must be appended"
    );
    let last = after.last().expect("one event was appended");
    assert_eq!(last.event, event, "the committed event must be stored");
    let expected_seq = before.last().map_or(1, |e| e.seq + 1);
    assert_eq!(
        last.seq, expected_seq,
        "failed transactions must leave no gap in the outbox positions"
    );
}

/// `LeaseHeld` holds exactly while the lease is held with that token (expiry alone does not lose it: only a
/// takeover does), and `IntentExists` exactly while the intent record exists.
pub async fn guards_check_lease_and_intent(repo: &dyn MessageRepo) {
    let ids = Ids::new();
    let session = new_session(&ids, "/work/guards");
    commit(repo, vec![put_session(&session)]).await;
    let key = LeaseKey::Session(session.id.clone());
    // Long expired: whether it may be taken over is the services' judgement, not the repo's.
    let held = lease(&key, "token-a", 1);
    let taken = repo
        .take_lease(&held, None)
        .await
        .expect("taking a free lease must succeed");
    assert_eq!(taken, LeaseTake::Taken, "a free lease must be taken");

    let lease_guard = |token_text: &str| Guard::LeaseHeld {
        key: key.clone(),
        token: token(token_text),
    };
    let guarded = |guard: Guard, title: &str| {
        let mut changed = session.clone();
        changed.slug = title.to_owned();
        Transaction {
            guards: vec![guard],
            changes: vec![put_session(&changed)],
            events: Vec::new(),
        }
    };

    repo.commit(guarded(lease_guard("token-a"), "held"))
        .await
        .expect("a transaction guarded by a held lease (expired, not taken over) must commit");
    assert_eq!(marker(repo, &session.id).await.as_deref(), Some("held"));

    let result = repo.commit(guarded(lease_guard("token-b"), "other")).await;
    assert!(
        matches!(result, Err(Error::LeaseLost(_))),
        "a lease guard with a token that does not hold the lease must fail with LeaseLost, got {result:?}"
    );
    let takeover = repo
        .take_lease(
            &lease(&key, "token-b", 10_000),
            Some(Replacing::token(token("token-a"))),
        )
        .await
        .expect("a takeover must succeed");
    assert_eq!(takeover, LeaseTake::Taken, "the takeover must succeed");
    let result = repo.commit(guarded(lease_guard("token-a"), "stale")).await;
    assert!(
        matches!(result, Err(Error::LeaseLost(_))),
        "a lease guard whose lease was taken over must fail with LeaseLost, got {result:?}"
    );
    let released = LeaseKey::Worktree("/work/guards".to_owned());
    let result = repo
        .commit(guarded(
            Guard::LeaseHeld {
                key: released,
                token: token("token-a"),
            },
            "free",
        ))
        .await;
    assert!(
        matches!(result, Err(Error::LeaseLost(_))),
        "a lease guard on a key nobody holds must fail with LeaseLost, got {result:?}"
    );
    assert_eq!(
        marker(repo, &session.id).await.as_deref(),
        Some("held"),
        "failed guards change nothing"
    );

    let intent_token = token("intent-1");
    let result = repo
        .commit(guarded(Guard::IntentExists(intent_token.clone()), "early"))
        .await;
    assert!(
        matches!(result, Err(Error::LeaseLost(_))),
        "an intent guard without the intent must fail with LeaseLost, got {result:?}"
    );
    let record = intent(&ids, &session, "intent-1", snapshot(5));
    commit(repo, vec![Change::PutIntent(Box::new(record.clone()))]).await;
    assert_eq!(
        repo.intents().await.expect("reading intents must succeed"),
        vec![record],
        "a stored intent must be listed"
    );
    let mut finish = guarded(Guard::IntentExists(intent_token.clone()), "finished");
    finish.guards.push(lease_guard("token-b"));
    finish
        .changes
        .push(Change::DeleteIntent(intent_token.clone()));
    repo.commit(finish)
        .await
        .expect("a transaction guarded by an existing intent and a held lease must commit");
    assert_eq!(marker(repo, &session.id).await.as_deref(), Some("finished"));
    assert!(
        repo.intents()
            .await
            .expect("reading intents must succeed")
            .is_empty(),
        "a deleted intent must be gone"
    );
    let result = repo
        .commit(guarded(Guard::IntentExists(intent_token), "twice"))
        .await;
    assert!(
        matches!(result, Err(Error::LeaseLost(_))),
        "an intent guard after the intent was deleted must fail with LeaseLost, got {result:?}"
    );
    assert_eq!(marker(repo, &session.id).await.as_deref(), Some("finished"));
}

/// `LeaseNotTaken` passes while the lease is free or held by the token the caller saw (an expired
/// holder too: expiry is the services' judgement), and fails with `Busy` once another token holds it.
/// `RevertIs` passes while the session's revert point is the one the caller saw (none, or the
/// descriptor's message and part), fails with `Busy` once it differs, and with `NotFound` for a session
/// that does not exist. A failed guard changes nothing.
pub async fn guards_check_that_no_one_took_the_lease_nor_changed_the_revert(
    repo: &dyn MessageRepo,
) {
    let ids = Ids::new();
    let session = new_session(&ids, "/work/not-taken");
    commit(repo, vec![put_session(&session)]).await;
    let key = LeaseKey::Session(session.id.clone());
    let guarded = |guard: Guard, title: &str| {
        let mut changed = session.clone();
        changed.slug = title.to_owned();
        Transaction {
            guards: vec![guard],
            changes: vec![put_session(&changed)],
            events: Vec::new(),
        }
    };
    let not_taken = |seen: Option<&str>| Guard::LeaseNotTaken {
        key: key.clone(),
        seen: seen.map(token),
    };

    repo.commit(guarded(not_taken(None), "free"))
        .await
        .expect("a free lease is not taken");
    assert_eq!(marker(repo, &session.id).await.as_deref(), Some("free"));
    repo.commit(guarded(not_taken(Some("token-a")), "free, a seen"))
        .await
        .expect("a lease released since it was seen is not taken either");

    let taken = repo
        .take_lease(&lease(&key, "token-a", 1), None)
        .await
        .expect("taking a free lease must succeed");
    assert_eq!(taken, LeaseTake::Taken, "a free lease must be taken");
    repo.commit(guarded(not_taken(Some("token-a")), "seen"))
        .await
        .expect("the holder seen (expired, not taken over) still holds it");
    assert_eq!(marker(repo, &session.id).await.as_deref(), Some("seen"));
    for seen in [None, Some("token-b")] {
        let result = repo.commit(guarded(not_taken(seen), "taken")).await;
        assert!(
            matches!(&result, Err(Error::Busy { session_id, .. }) if session_id.as_ref() == Some(&session.id)),
            "a lease taken by another than {seen:?} must fail with Busy about the session, got {result:?}"
        );
    }
    assert_eq!(
        marker(repo, &session.id).await.as_deref(),
        Some("seen"),
        "failed guards change nothing"
    );

    let revert_is = |point: Option<(MessageId, Option<PartId>)>| Guard::RevertIs {
        session: session.id.clone(),
        point,
    };
    let message = ids.message();
    let part = ids.part();
    repo.commit(guarded(revert_is(None), "not reverted"))
        .await
        .expect("a session that is not reverted passes a guard that saw none");
    let mut reverted = session.clone();
    reverted.slug = "reverted".to_owned();
    reverted.revert = Some(RevertDescriptor {
        message_id: message.clone(),
        part_id: Some(part.clone()),
        snapshot: Some(snapshot(1)),
        diff: Some("diff --git a/x b/x\n".to_owned()),
    });
    commit(repo, vec![put_session(&reverted)]).await;
    for seen in [
        None,
        Some((message.clone(), None)),
        Some((ids.message(), Some(part.clone()))),
    ] {
        let result = repo.commit(guarded(revert_is(seen.clone()), "stale")).await;
        assert!(
            matches!(&result, Err(Error::Busy { session_id, .. }) if session_id.as_ref() == Some(&session.id)),
            "a revert point other than {seen:?} must fail with Busy, got {result:?}"
        );
    }
    assert_eq!(
        marker(repo, &session.id).await.as_deref(),
        Some("reverted"),
        "failed guards change nothing"
    );
    repo.commit(guarded(
        revert_is(Some((message.clone(), Some(part.clone())))),
        "as seen",
    ))
    .await
    .expect("the revert point seen passes");
    assert_eq!(marker(repo, &session.id).await.as_deref(), Some("as seen"));

    let missing = Guard::RevertIs {
        session: ids.session(),
        point: None,
    };
    let result = repo.commit(guarded(missing, "missing")).await;
    assert!(
        matches!(result, Err(Error::NotFound(_))),
        "a revert guard on a session that does not exist must fail with NotFound, got {result:?}"
    );
}

/// `MessageExists` passes while the message is stored in that session, and fails with `Busy` for a message
/// of another session, an unknown one, and one a hidden-range delete (cleanup) removed. A failed guard
/// changes nothing.
pub async fn message_exists_guard_checks_the_message_in_its_session(repo: &dyn MessageRepo) {
    let ids = Ids::new();
    let session = new_session(&ids, "/work/message-exists");
    let other = new_session(&ids, "/work/message-exists-other");
    let message = new_message(&ids, &session, Role::User);
    let elsewhere = new_message(&ids, &other, Role::User);
    commit(
        repo,
        vec![
            put_session(&session),
            put_session(&other),
            Change::PutMessage(Box::new(message.clone())),
            Change::PutMessage(Box::new(elsewhere.clone())),
        ],
    )
    .await;
    let guarded = |id: &MessageId, title: &str| {
        let mut changed = session.clone();
        changed.slug = title.to_owned();
        Transaction {
            guards: vec![Guard::MessageExists {
                session: session.id.clone(),
                message: id.clone(),
            }],
            changes: vec![put_session(&changed)],
            events: Vec::new(),
        }
    };
    repo.commit(guarded(&message.id, "present"))
        .await
        .expect("a stored message passes");
    assert_eq!(marker(repo, &session.id).await.as_deref(), Some("present"));
    for (id, what) in [
        (&elsewhere.id, "a message of another session"),
        (&ids.message(), "an unknown message"),
    ] {
        let result = repo.commit(guarded(id, "wrong")).await;
        assert!(
            matches!(&result, Err(Error::Busy { session_id, .. }) if session_id.as_ref() == Some(&session.id)),
            "{what} must fail with Busy, got {result:?}"
        );
    }
    commit(
        repo,
        vec![Change::DeleteHiddenRange {
            session: session.id.clone(),
            message: message.id.clone(),
            part: None,
        }],
    )
    .await;
    let result = repo.commit(guarded(&message.id, "deleted")).await;
    assert!(
        matches!(result, Err(Error::Busy { .. })),
        "a message cleanup deleted must fail with Busy, got {result:?}"
    );
    assert_eq!(
        marker(repo, &session.id).await.as_deref(),
        Some("present"),
        "failed guards change nothing"
    );
}

/// The outbox returns committed events in commit order (not id order), at strictly ascending positions with
/// no gaps, and pages through `events_after(cursor, limit)` without losing or repeating one.
pub async fn events_come_back_in_commit_order(repo: &dyn MessageRepo) {
    assert_eq!(
        repo.last_event_seq()
            .await
            .expect("reading the outbox end must succeed"),
        0,
        "an empty outbox ends at position 0"
    );
    let ids = Ids::new();
    let session = new_session(&ids, "/work/events");
    let message = new_message(&ids, &session, Role::User);
    let part = text(&ids, &message, "hello");
    // The last transaction's events get the smallest ids, so an outbox ordered by event id would fail.
    let late: Vec<Event> = (0..3).map(|_| heartbeat(&ids)).collect();
    let early = vec![updated(&ids, &session), heartbeat(&ids)];

    repo.commit(transaction(vec![put_session(&session)], early.clone()))
        .await
        .expect("a valid transaction must commit");
    commit(repo, vec![put_message(&message)]).await;
    repo.commit(transaction(vec![put_part(&part)], late.clone()))
        .await
        .expect("a valid transaction must commit");

    let all = all_events(repo).await;
    let expected: Vec<Event> = early.into_iter().chain(late).collect();
    let events: Vec<Event> = all.iter().map(|e| e.event.clone()).collect();
    assert_eq!(
        events, expected,
        "events must come back in commit order, each transaction's in its own order"
    );
    let first = all.first().map_or(0, |e| e.seq);
    assert!(
        first >= 1,
        "outbox positions must start after 0, got {first}"
    );
    for pair in all.windows(2) {
        assert_eq!(
            pair[1].seq,
            pair[0].seq + 1,
            "outbox positions must ascend without gaps"
        );
    }

    let mut paged = Vec::new();
    let mut cursor = 0;
    loop {
        let page = repo
            .events_after(cursor, 2)
            .await
            .expect("reading the outbox must succeed");
        assert!(page.len() <= 2, "a page must hold at most `limit` events");
        assert!(
            page.iter().all(|e| e.seq > cursor),
            "events_after({cursor}) must return only events after position {cursor}, got {:?}",
            page.iter().map(|e| e.seq).collect::<Vec<_>>()
        );
        let Some(last) = page.last() else { break };
        cursor = last.seq;
        paged.extend(page);
    }
    assert_eq!(
        paged, all,
        "paging with events_after must return every event once, in order"
    );
    for stored in &all {
        assert_eq!(
            repo.event_id_at(stored.seq)
                .await
                .expect("reading an event's id must succeed"),
            Some(stored.event.id.clone()),
            "event_id_at({}) must name the event at that position",
            stored.seq
        );
    }
    let end = all.last().map_or(0, |e| e.seq);
    for outside in [0, end + 1, u64::MAX] {
        assert_eq!(
            repo.event_id_at(outside)
                .await
                .expect("reading an event's id must succeed"),
            None,
            "event_id_at({outside}): the outbox holds no event there"
        );
    }
    let tail = repo
        .events_after(all[2].seq, 100)
        .await
        .expect("reading the outbox must succeed");
    assert_eq!(
        tail,
        all[3..].to_vec(),
        "events_after must return exactly the events after the cursor"
    );
    assert_eq!(
        repo.last_event_seq()
            .await
            .expect("reading the outbox end must succeed"),
        all.last().map_or(0, |e| e.seq),
        "the outbox ends at the last committed event"
    );
    let failed = repo
        .commit(Transaction {
            guards: vec![Guard::IntentExists(LeaseToken("tok_none".to_owned()))],
            changes: Vec::new(),
            events: vec![heartbeat(&ids)],
        })
        .await;
    assert!(
        failed.is_err(),
        "a transaction whose guard fails must not commit"
    );
    assert_eq!(
        repo.last_event_seq()
            .await
            .expect("reading the outbox end must succeed"),
        all.last().map_or(0, |e| e.seq),
        "a rolled-back transaction's events never move the outbox end"
    );
}

/// `referenced_snapshots` includes every snapshot the stored rows refer to: the descriptor, `applied`, the
/// open step, step-start, step-finish and patch parts, intents, warnings and the revert history (descriptor,
/// `applied`, warnings); with a directory, exactly that directory's sessions count.
pub async fn referenced_snapshots_cover_every_reference(repo: &dyn MessageRepo) {
    let ids = Ids::new();
    let dir_a = "/work/refs-a";
    let dir_b = "/work/refs-b";
    let mut a = new_session(&ids, dir_a);
    let user = new_message(&ids, &a, Role::User);
    let assistant = new_message(&ids, &a, Role::Assistant);
    a.revert = Some(RevertDescriptor {
        message_id: assistant.id.clone(),
        part_id: None,
        snapshot: Some(snapshot(1)),
        diff: Some("diff --git a/x b/x\n".to_owned()),
    });
    a.applied = Some(snapshot(2));
    a.step = Some(OpenStep {
        message_id: assistant.id.clone(),
        snapshot: snapshot(3),
        token: token("step-1"),
        holder: holder(4242),
        started: ids.tick(),
    });
    let start = new_part(
        &ids,
        &assistant,
        PartBody::StepStart(StepStartPart {
            snapshot: Some(snapshot(4)),
            extra: Map::new(),
        }),
    );
    let finish = new_part(
        &ids,
        &assistant,
        PartBody::StepFinish(StepFinishPart {
            reason: "stop".to_owned(),
            snapshot: Some(snapshot(5)),
            cost: 0.0,
            tokens: Tokens::default(),
            extra: Map::new(),
        }),
    );
    let patch_part = patch(&ids, &assistant, snapshot(6), &["/work/refs-a/a.txt"]);
    let history = RevertHistoryEntry {
        time: ids.tick(),
        descriptor: RevertDescriptor {
            message_id: user.id.clone(),
            part_id: None,
            snapshot: Some(snapshot(9)),
            diff: None,
        },
        applied: Some(snapshot(10)),
        summary: None,
        warnings: vec![warning(&ids, Some(snapshot(11)), "/work/refs-a/b.txt")],
    };
    let mut b = new_session(&ids, dir_b);
    b.applied = Some(snapshot(13));
    let b_message = new_message(&ids, &b, Role::Assistant);
    let b_patch = patch(&ids, &b_message, snapshot(12), &["/work/refs-b/a.txt"]);
    let c = new_session(&ids, dir_a);

    commit(
        repo,
        vec![
            put_session(&a),
            put_message(&user),
            put_message(&assistant),
            put_part(&start),
            put_part(&finish),
            put_part(&patch_part),
            Change::PutIntent(Box::new(intent(&ids, &a, "intent-a", snapshot(7)))),
            Change::AddWarning {
                session: a.id.clone(),
                warning: warning(&ids, Some(snapshot(8)), "/work/refs-a/c.txt"),
            },
            Change::AddWarning {
                session: a.id.clone(),
                warning: warning(&ids, None, "/work/refs-a/kept.bin"),
            },
            Change::AddRevertHistory {
                session: a.id.clone(),
                entry: Box::new(history),
            },
            put_session(&b),
            put_message(&b_message),
            put_part(&b_patch),
            Change::PutIntent(Box::new(intent(&ids, &b, "intent-b", snapshot(14)))),
            put_session(&c),
            Change::AddWarning {
                session: c.id.clone(),
                warning: warning(&ids, Some(snapshot(15)), "/work/refs-a/d.txt"),
            },
        ],
    )
    .await;

    let of_a: BTreeSet<SnapshotId> = (1..=11).chain([15]).map(snapshot).collect();
    let of_b: BTreeSet<SnapshotId> = (12..=14).map(snapshot).collect();
    let everything = repo
        .referenced_snapshots(None)
        .await
        .expect("listing referenced snapshots must succeed");
    let missing: Vec<&SnapshotId> = of_a
        .union(&of_b)
        .filter(|s| !everything.contains(s))
        .collect();
    assert!(
        missing.is_empty(),
        "referenced_snapshots(None) must include every referenced snapshot; missing {missing:?} \
         (1 descriptor, 2 applied, 3 open step, 4 step-start, 5 step-finish, 6 patch, 7 intent, \
         8 warning, 9-11 revert history, 12-15 other rows)"
    );
    let in_a = repo
        .referenced_snapshots(Some(dir_a.to_owned()))
        .await
        .expect("listing referenced snapshots must succeed");
    let missing: Vec<&SnapshotId> = of_a.iter().filter(|s| !in_a.contains(s)).collect();
    assert!(
        missing.is_empty(),
        "referenced_snapshots(directory) must include every snapshot of that directory's sessions; missing {missing:?}"
    );
    let foreign: Vec<&SnapshotId> = of_b.iter().filter(|s| in_a.contains(s)).collect();
    assert!(
        foreign.is_empty(),
        "referenced_snapshots(directory) must leave out other directories' snapshots; found {foreign:?}"
    );
}

/// Deleting a session removes its messages, parts, diff, warnings, revert history and intents, and nothing of
/// another session; deleting a session that does not exist fails with NotFound.
pub async fn delete_session_cascades(repo: &dyn MessageRepo) {
    let ids = Ids::new();
    let doomed = new_session(&ids, "/work/cascade");
    let kept = new_session(&ids, "/work/cascade");
    let doomed_message = new_message(&ids, &doomed, Role::User);
    let doomed_part = patch(
        &ids,
        &doomed_message,
        snapshot(21),
        &["/work/cascade/a.txt"],
    );
    let kept_message = new_message(&ids, &kept, Role::User);
    let kept_part = patch(&ids, &kept_message, snapshot(31), &["/work/cascade/b.txt"]);
    let diff = |file: &str| FileDiff {
        file: file.to_owned(),
        patch: String::new(),
        additions: 1,
        deletions: 2,
        status: FileStatus::Modified,
    };
    let first_warning = warning(&ids, Some(snapshot(22)), "/work/cascade/a.txt");
    let second_warning = warning(&ids, None, "/work/cascade/z.txt");
    let history = RevertHistoryEntry {
        time: ids.tick(),
        descriptor: RevertDescriptor {
            message_id: doomed_message.id.clone(),
            part_id: None,
            snapshot: Some(snapshot(23)),
            diff: None,
        },
        applied: Some(snapshot(24)),
        summary: None,
        warnings: Vec::new(),
    };
    let kept_intent = intent(&ids, &kept, "intent-kept", snapshot(32));
    let kept_warning = warning(&ids, Some(snapshot(33)), "/work/cascade/b.txt");

    commit(
        repo,
        vec![
            put_session(&doomed),
            put_session(&kept),
            put_message(&doomed_message),
            put_part(&doomed_part),
            put_message(&kept_message),
            put_part(&kept_part),
            Change::SetSessionDiff {
                session: doomed.id.clone(),
                diff: vec![diff("old.txt")],
            },
            Change::SetSessionDiff {
                session: doomed.id.clone(),
                diff: vec![diff("a.txt")],
            },
            Change::AddWarning {
                session: doomed.id.clone(),
                warning: first_warning.clone(),
            },
            Change::AddWarning {
                session: doomed.id.clone(),
                warning: second_warning.clone(),
            },
            Change::AddRevertHistory {
                session: doomed.id.clone(),
                entry: Box::new(history.clone()),
            },
            Change::PutIntent(Box::new(intent(
                &ids,
                &doomed,
                "intent-doomed",
                snapshot(25),
            ))),
            Change::PutIntent(Box::new(kept_intent.clone())),
            Change::SetSessionDiff {
                session: kept.id.clone(),
                diff: vec![diff("b.txt")],
            },
            Change::AddWarning {
                session: kept.id.clone(),
                warning: kept_warning.clone(),
            },
        ],
    )
    .await;
    // The rows read back before the delete, so the checks after it test the delete, not the writes.
    assert_eq!(
        repo.session_diff(&doomed.id)
            .await
            .expect("reading a session diff must succeed"),
        vec![diff("a.txt")],
        "a session diff must read back, the last one set replacing the earlier"
    );
    assert_eq!(
        repo.warnings(&doomed.id)
            .await
            .expect("reading warnings must succeed"),
        vec![first_warning, second_warning],
        "warnings must read back oldest first"
    );
    assert_eq!(
        repo.revert_history(&doomed.id)
            .await
            .expect("reading the revert history must succeed"),
        vec![history],
        "the revert history must read back"
    );

    let before = all_events(repo).await;
    let gone = Event {
        id: ids.event(),
        payload: EventPayload::SessionDeleted {
            session_id: doomed.id.clone(),
            info: Box::new(doomed.clone()),
        },
    };
    repo.commit(transaction(
        vec![Change::DeleteSession(doomed.id.clone())],
        vec![gone.clone()],
    ))
    .await
    .expect("deleting a session must commit");

    let session_read = repo
        .session(&doomed.id)
        .await
        .expect("reading a session must succeed");
    assert_eq!(session_read, None, "a deleted session must be gone");
    assert!(
        messages(repo, &doomed.id).await.is_empty(),
        "a deleted session's messages must be gone"
    );
    assert!(
        repo.session_diff(&doomed.id)
            .await
            .expect("reading a session diff must succeed")
            .is_empty(),
        "a deleted session's diff must be gone"
    );
    assert!(
        repo.warnings(&doomed.id)
            .await
            .expect("reading warnings must succeed")
            .is_empty(),
        "a deleted session's warnings must be gone"
    );
    assert!(
        repo.revert_history(&doomed.id)
            .await
            .expect("reading the revert history must succeed")
            .is_empty(),
        "a deleted session's revert history must be gone"
    );
    assert_eq!(
        repo.intents().await.expect("reading intents must succeed"),
        vec![kept_intent],
        "a deleted session's intents must be gone, and only those"
    );
    let referenced = repo
        .referenced_snapshots(None)
        .await
        .expect("listing referenced snapshots must succeed");
    let lingering: Vec<SnapshotId> = (21..=25)
        .map(snapshot)
        .filter(|s| referenced.contains(s))
        .collect();
    assert!(
        lingering.is_empty(),
        "a deleted session's rows must no longer reference snapshots; still referenced: {lingering:?}"
    );
    let after = all_events(repo).await;
    assert_eq!(
        after.last().map(|e| &e.event),
        Some(&gone),
        "the delete's event must be stored"
    );
    assert_eq!(after.len(), before.len() + 1, "exactly one event appended");

    assert_eq!(
        messages(repo, &kept.id).await,
        vec![with_parts(&kept_message, &[&kept_part])],
        "another session's messages must stay"
    );
    assert_eq!(
        repo.warnings(&kept.id)
            .await
            .expect("reading warnings must succeed"),
        vec![kept_warning],
        "another session's warnings must stay"
    );
    assert_eq!(
        repo.session_diff(&kept.id)
            .await
            .expect("reading a session diff must succeed"),
        vec![diff("b.txt")],
        "another session's diff must stay"
    );

    let again = repo
        .commit(transaction(
            vec![Change::DeleteSession(doomed.id.clone())],
            Vec::new(),
        ))
        .await;
    assert!(
        matches!(again, Err(Error::NotFound(_))),
        "deleting a session that does not exist must fail with NotFound, got {again:?}"
    );
    let late_part = text(&ids, &doomed_message, "too late");
    let orphan = repo
        .commit(transaction(vec![put_part(&late_part)], Vec::new()))
        .await;
    assert!(
        matches!(orphan, Err(Error::NotFound(_))),
        "a part of a deleted session's message must fail with NotFound, got {orphan:?}"
    );
}

/// `sessions` lists newest first (ascending session id), whatever order they were stored in, and with a
/// directory exactly that directory's sessions (not its subdirectories'); replacing a session keeps its
/// messages.
pub async fn sessions_are_listed_newest_first_and_by_directory(repo: &dyn MessageRepo) {
    let ids = Ids::new();
    let s1 = new_session(&ids, "/work/a");
    let s2 = new_session(&ids, "/work/b");
    let s3 = new_session(&ids, "/work/a");
    let s4 = new_session(&ids, "/work/a/sub");
    for s in [&s2, &s4, &s1, &s3] {
        commit(repo, vec![put_session(s)]).await;
    }
    assert_eq!(
        listed(repo, None).await,
        vec![s4.clone(), s3.clone(), s2.clone(), s1.clone()],
        "sessions must be listed newest first"
    );
    assert_eq!(
        listed(repo, Some("/work/a")).await,
        vec![s3.clone(), s1.clone()],
        "sessions of a directory must be exactly those whose directory is equal, newest first"
    );
    assert_eq!(
        listed(repo, Some("/work/b")).await,
        vec![s2.clone()],
        "sessions of a directory must be exactly its own"
    );
    assert!(
        listed(repo, Some("/work/elsewhere")).await.is_empty(),
        "a directory without sessions lists none"
    );

    let kept = new_message(&ids, &s1, Role::User);
    let kept_part = text(&ids, &kept, "still here");
    commit(repo, vec![put_message(&kept), put_part(&kept_part)]).await;
    let mut renamed = s1.clone();
    renamed.slug = "renamed".to_owned();
    renamed.time.updated = ids.tick();
    commit(repo, vec![put_session(&renamed)]).await;
    assert_eq!(
        listed(repo, None).await,
        vec![s4, s3, s2, renamed],
        "replacing a session must change it in place"
    );
    assert_eq!(
        messages(repo, &s1.id).await,
        vec![with_parts(&kept, &[&kept_part])],
        "replacing a session must keep its messages and parts"
    );
}

fn capture(directory: &str, n: u32, time: u64) -> Capture {
    Capture {
        directory: directory.to_owned(),
        snapshot: snapshot(n),
        time,
        message: format!("captured before restore {n}"),
        paths: vec![format!("file-{n}.txt")],
        intent: None,
    }
}

/// Captures need no session, come back oldest first (all, or one worktree's), count for
/// `referenced_snapshots` of their worktree only, and `DeleteCapturesBefore` removes exactly those taken
/// before the cut-off.
pub async fn captures_are_listed_referenced_and_deleted_by_age(repo: &dyn MessageRepo) {
    let dir_a = "/work/captures-a";
    let dir_b = "/work/captures-b";
    let (a1, b1, a2) = (
        capture(dir_a, 31, 1_000),
        capture(dir_b, 32, 1_500),
        capture(dir_a, 33, 2_000),
    );
    commit(
        repo,
        vec![
            Change::AddCapture(Box::new(a1.clone())),
            Change::AddCapture(Box::new(b1.clone())),
            Change::AddCapture(Box::new(a2.clone())),
        ],
    )
    .await;
    let all = repo
        .captures(None)
        .await
        .expect("listing captures must succeed");
    assert_eq!(
        all,
        vec![a1.clone(), b1.clone(), a2.clone()],
        "captures(None) must return every capture, oldest first, as stored"
    );
    let of_a = repo
        .captures(Some(dir_a.to_owned()))
        .await
        .expect("listing captures must succeed");
    assert_eq!(
        of_a,
        vec![a1.clone(), a2.clone()],
        "captures(directory) must return only that worktree's captures, oldest first"
    );
    let referenced = repo
        .referenced_snapshots(Some(dir_a.to_owned()))
        .await
        .expect("listing referenced snapshots must succeed");
    assert!(
        referenced.contains(&snapshot(31)) && referenced.contains(&snapshot(33)),
        "referenced_snapshots(directory) must include the worktree's captures; got {referenced:?}"
    );
    assert!(
        !referenced.contains(&snapshot(32)),
        "referenced_snapshots(directory) must leave out other worktrees' captures; got {referenced:?}"
    );

    commit(repo, vec![Change::DeleteCapturesBefore { before: 1_500 }]).await;
    let left = repo
        .captures(None)
        .await
        .expect("listing captures must succeed");
    assert_eq!(
        left,
        vec![b1, a2],
        "DeleteCapturesBefore must delete exactly the captures taken before the cut-off"
    );
    let referenced = repo
        .referenced_snapshots(None)
        .await
        .expect("listing referenced snapshots must succeed");
    assert!(
        !referenced.contains(&snapshot(31)),
        "a deleted capture must no longer be referenced; got {referenced:?}"
    );
}

/// `DeleteEventsThrough` removes the outbox's oldest events up to a position, never the newest one: the
/// end stays, and the next event takes the position after it, also when every older event is gone (a
/// relay that has passed a position never sees it again). The events left come back in order.
pub async fn old_outbox_events_are_deleted_and_positions_never_repeat(repo: &dyn MessageRepo) {
    let ids = Ids::new();
    for _ in 0..5 {
        repo.commit(transaction(Vec::new(), vec![heartbeat(&ids)]))
            .await
            .expect("a transaction with an event must commit");
    }
    let before = all_events(repo).await;
    assert_eq!(before.len(), 5);
    let first = before[0].seq;
    let seqs = |events: &[StoredEvent]| events.iter().map(|e| e.seq).collect::<Vec<_>>();

    commit(repo, vec![Change::DeleteEventsThrough { seq: first + 2 }]).await;
    let after = all_events(repo).await;
    assert_eq!(
        seqs(&after),
        [first + 3, first + 4],
        "the events through the position are deleted, the later ones stay in order"
    );
    assert_eq!(after[0].event, before[3].event);
    assert_eq!(
        repo.event_id_at(first + 2).await.expect("read"),
        None,
        "a deleted event's position has no id"
    );
    assert_eq!(
        repo.event_id_at(first + 3).await.expect("read"),
        Some(before[3].event.id.clone()),
        "the events left keep their ids"
    );
    assert_eq!(
        repo.events_after(first + 1, 10).await.expect("read"),
        after,
        "reading from a deleted position starts at the first event left"
    );
    assert_eq!(
        repo.last_event_seq().await.expect("the outbox end"),
        first + 4
    );

    commit(repo, vec![Change::DeleteEventsThrough { seq: u64::MAX }]).await;
    assert_eq!(
        seqs(&all_events(repo).await),
        [first + 4],
        "the newest event is never deleted"
    );
    repo.commit(transaction(Vec::new(), vec![heartbeat(&ids)]))
        .await
        .expect("commit");
    assert_eq!(
        seqs(&all_events(repo).await),
        [first + 4, first + 5],
        "the next event follows the newest, not a deleted position"
    );
}

/// `outbox_over` counts the outbox's text from the newest event back and names the newest event that
/// passes the budget: none when all fit (also when the outbox is empty), the newest itself when it alone is
/// larger. Each event here carries its own text of about 100 KB (an adapter's encoding adds a little), so
/// two fit in 250,000 bytes and three do not. Deleting through the position named leaves what fits.
pub async fn the_outbox_is_measured_from_its_newest_event_back(repo: &dyn MessageRepo) {
    let ids = Ids::new();
    assert_eq!(
        repo.outbox_over(0)
            .await
            .expect("measuring an empty outbox"),
        None,
        "an empty outbox fits any budget"
    );
    let session = ids.session();
    for turn in 1..=5 {
        let (_, diff) = large_revert(30, turn);
        let text: usize = diff.iter().map(|d| d.patch.len()).sum();
        assert!((95_000..105_000).contains(&text), "{text} bytes of text");
        let event = Event {
            id: ids.event(),
            payload: EventPayload::SessionDiff {
                session_id: session.clone(),
                diff,
            },
        };
        repo.commit(transaction(Vec::new(), vec![event]))
            .await
            .expect("a transaction with an event must commit");
    }
    let seqs: Vec<u64> = all_events(repo).await.iter().map(|e| e.seq).collect();
    let [.., third, second, newest] = seqs[..] else {
        panic!("five events are stored: {seqs:?}");
    };
    let over = |bytes: u64| async move { repo.outbox_over(bytes).await.expect("measuring") };
    assert_eq!(over(u64::MAX).await, None, "everything fits");
    assert_eq!(over(10_000_000).await, None, "everything fits");
    assert_eq!(
        over(250_000).await,
        Some(third),
        "the two newest fit, the third passes the budget"
    );
    assert_eq!(over(150_000).await, Some(second));
    assert_eq!(
        over(0).await,
        Some(newest),
        "the newest alone passes a budget smaller than itself"
    );

    commit(repo, vec![Change::DeleteEventsThrough { seq: third }]).await;
    let left: Vec<u64> = all_events(repo).await.iter().map(|e| e.seq).collect();
    assert_eq!(left, [second, newest], "what fits is what stays");
    assert_eq!(over(250_000).await, None, "what is left fits");
}

/// `assert_eq!` without the values in the message: these texts are tens of kilobytes.
macro_rules! same {
    ($left:expr, $right:expr $(,)?) => {
        same!($left, $right, "the values differ")
    };
    ($left:expr, $right:expr, $($message:tt)+) => {
        assert!($left == $right, $($message)+)
    };
}

/// A revert of `files` files whose every line changed: the text diff (the descriptor's `diff`) and the
/// session diff, each tens of kilobytes, as a revert's result carries them.
fn large_revert(files: usize, turn: u32) -> (String, Vec<FileDiff>) {
    let patch = |file: usize| -> String {
        (0..60)
            .map(|line| format!("-turn {turn} file {file} old line {line}\n+turn {turn} file {file} new line {line}\n"))
            .collect()
    };
    let text: String = (0..files)
        .map(|file| format!("diff --git a/f{file} b/f{file}\n{}", patch(file)))
        .collect();
    let diff = (0..files)
        .map(|file| FileDiff {
            file: format!("src/f{file}.rs"),
            patch: patch(file),
            additions: 60,
            deletions: 60,
            status: FileStatus::Modified,
        })
        .collect();
    (text, diff)
}

/// The transaction a revert's result commits for `reverted` (its revert descriptor set) with session diff
/// `diff`: the session diff, the session, and their `session.diff` and `session.updated` events.
fn revert_result(ids: &Ids, reverted: &Session, diff: &[FileDiff]) -> Transaction {
    let diff_event = Event {
        id: ids.event(),
        payload: EventPayload::SessionDiff {
            session_id: reverted.id.clone(),
            diff: diff.to_vec(),
        },
    };
    transaction(
        vec![
            Change::SetSessionDiff {
                session: reverted.id.clone(),
                diff: diff.to_vec(),
            },
            put_session(reverted),
        ],
        vec![diff_event, updated(ids, reverted)],
    )
}

/// Every text a client or a snapshot gives may hold a NUL byte (a file git's 8000-byte look calls text, a
/// tool's output, a part of a type rewind does not know): a session, its revert's large text diff, its
/// session diff, a message, its parts and the events read back as they were (kill fuzz: PostgreSQL, whose
/// text columns refuse the byte, failed every revert of such a file).
pub async fn texts_with_nul_bytes_read_back_as_they_were(repo: &dyn MessageRepo) {
    let ids = Ids::new();
    let mut session = new_session(&ids, "/work/nul-bytes");
    session.title = "a title\0with a NUL".to_owned();
    commit(repo, vec![put_session(&session)]).await;
    let mut message = new_message(&ids, &session, Role::Assistant);
    message.extra = object(json!({"agent": "build\u{0}", "mode": "x"}));
    let text = new_part(&ids, &message, PartBody::text("before\0after"));
    let unknown = new_part(
        &ids,
        &message,
        PartBody::Other {
            kind: "x-\0-kind".to_owned(),
            fields: object(json!({"output": "\u{0}"})),
        },
    );
    commit(
        repo,
        vec![put_message(&message), put_part(&text), put_part(&unknown)],
    )
    .await;
    same!(
        messages(repo, &session.id).await,
        vec![with_parts(&message, &[&text, &unknown])],
        "the message and its parts read back with their NUL bytes"
    );

    let (text_diff, mut diff) = large_revert(10, 1);
    let text_diff = format!("{text_diff}+a line\0of a file git calls text\n");
    diff[0]
        .patch
        .push_str("+a line\0of a file git calls text\n");
    let mut reverted = session.clone();
    reverted.revert = Some(RevertDescriptor {
        message_id: message.id.clone(),
        part_id: None,
        snapshot: Some(snapshot(1)),
        diff: Some(text_diff),
    });
    let result = revert_result(&ids, &reverted, &diff);
    let events = result.events.clone();
    repo.commit(result)
        .await
        .expect("a revert's result with NUL bytes in its texts commits");
    same!(
        repo.session(&session.id)
            .await
            .expect("reading the session"),
        Some(reverted.clone()),
        "the session reads back with its revert's text diff"
    );
    same!(
        repo.session_diff(&session.id)
            .await
            .expect("reading the session diff"),
        diff,
        "the session diff reads back whole"
    );
    let stored = all_events(repo).await;
    same!(
        stored[stored.len() - 2..]
            .iter()
            .map(|stored| stored.event.clone())
            .collect::<Vec<_>>(),
        events,
        "its events read back whole"
    );
}

/// A revert's result transaction carries its text diff twice (the session and its `session.updated` event)
/// and its session diff twice (the session diff and its `session.diff` event); an adapter may store each
/// once. Every read gives them back whole and as they were when each event was committed: the session, the
/// listing, the session diff and the events, also after the session changes again (unrevert, a second
/// revert), after old events are deleted, and after the session is deleted.
pub async fn large_revert_texts_read_back_whole_from_every_row(repo: &dyn MessageRepo) {
    let ids = Ids::new();
    let directory = "/work/large-diffs";
    let plain = new_session(&ids, directory);
    commit(repo, vec![put_session(&plain)]).await;
    let revert_with = |turn: u32, files: usize| {
        let (text, diff) = large_revert(files, turn);
        let mut session = plain.clone();
        session.revert = Some(RevertDescriptor {
            message_id: ids.message(),
            part_id: None,
            snapshot: Some(snapshot(turn)),
            diff: Some(text),
        });
        let transaction = revert_result(&ids, &session, &diff);
        (session, diff, transaction)
    };
    let reads = |session: Session, diff: Vec<FileDiff>| async move {
        same!(
            repo.session(&session.id)
                .await
                .expect("reading the session"),
            Some(session.clone()),
            "the session reads back with its whole revert diff"
        );
        same!(listed(repo, Some(directory)).await, vec![session.clone()]);
        same!(
            repo.session_diff(&session.id)
                .await
                .expect("reading the session diff"),
            diff,
            "the session diff reads back whole"
        );
    };
    let events_of = |transaction: &Transaction| transaction.events.clone();
    let last_events = |n: usize| async move {
        let events = all_events(repo).await;
        events[events.len() - n..]
            .iter()
            .map(|stored| stored.event.clone())
            .collect::<Vec<_>>()
    };

    let (first, first_diff, first_tx) = revert_with(1, 40);
    let first_events = events_of(&first_tx);
    repo.commit(first_tx)
        .await
        .expect("a revert's result commits");
    reads(first.clone(), first_diff.clone()).await;
    same!(
        last_events(2).await,
        first_events,
        "its events read back whole"
    );

    // Unrevert: the session loses its revert, the session diff stays; the first events are unchanged.
    let mut unreverted = first.clone();
    unreverted.revert = None;
    repo.commit(transaction(
        vec![put_session(&unreverted)],
        vec![updated(&ids, &unreverted)],
    ))
    .await
    .expect("an unrevert's result commits");
    reads(unreverted.clone(), first_diff.clone()).await;
    same!(last_events(3).await[..2], first_events[..]);

    // A second revert with other texts: the first revert's events still read as they were.
    let (second, second_diff, second_tx) = revert_with(2, 25);
    let second_events = events_of(&second_tx);
    repo.commit(second_tx)
        .await
        .expect("a second revert's result commits");
    reads(second.clone(), second_diff.clone()).await;
    let events = last_events(5).await;
    same!(events[..2], first_events[..]);
    same!(events[3..], second_events[..]);

    // A transaction that fails stores nothing of its texts.
    let (_, _, mut failing) = revert_with(3, 30);
    failing
        .guards
        .push(Guard::IntentExists(token("no-such-intent")));
    assert!(repo.commit(failing).await.is_err(), "its guard fails");
    reads(second.clone(), second_diff.clone()).await;
    same!(
        last_events(5).await,
        events,
        "no event of the failed transaction"
    );

    // Old events deleted: what is left, the session and its diff still read whole.
    let through = all_events(repo).await[1].seq;
    commit(repo, vec![Change::DeleteEventsThrough { seq: through }]).await;
    same!(
        all_events(repo)
            .await
            .into_iter()
            .map(|stored| stored.event)
            .collect::<Vec<_>>(),
        events[2..].to_vec()
    );
    reads(second.clone(), second_diff.clone()).await;

    // The session deleted: the events before its deletion still read whole.
    repo.commit(transaction(
        vec![Change::DeleteSession(second.id.clone())],
        vec![heartbeat(&ids)],
    ))
    .await
    .expect("deleting the session commits");
    same!(repo.session(&second.id).await.expect("reading"), None);
    same!(
        repo.session_diff(&second.id).await.expect("reading"),
        Vec::<FileDiff>::new()
    );
    let left = all_events(repo).await;
    same!(
        left[..3]
            .iter()
            .map(|stored| stored.event.clone())
            .collect::<Vec<_>>(),
        events[2..].to_vec()
    );
}

/// Contract: a `PutSession` of a stored session keeps its title (and a later update time), and only
/// `UpdateSession` changes it (with the update time, nothing else it is not given); the `session.updated` events of a
/// put carry the stored title and update time, and
/// those of a rename the whole session as stored, its large revert text included; a rename of a session
/// that does not exist fails with `NotFound` and stores nothing.
pub async fn a_put_keeps_the_stored_title_and_a_rename_changes_only_it(repo: &dyn MessageRepo) {
    let ids = Ids::new();
    let session = new_session(&ids, "/work/titles");
    commit(repo, vec![put_session(&session)]).await;
    let stored = |id: SessionId| async move {
        repo.session(&id)
            .await
            .expect("reading a session must succeed")
            .expect("the session exists")
    };
    let last_event = || last_event(repo);

    // A step's write of the session, from a copy read before a rename: the stored title stays.
    let mut stale = session.clone();
    stale.title = "an old title".to_owned();
    stale.slug = "after the step".to_owned();
    stale.time.updated = ids.tick();
    put_announced(repo, &ids, &stale).await;
    let mut expected = stale.clone();
    expected.title.clone_from(&session.title);
    same!(
        stored(session.id.clone()).await,
        expected.clone(),
        "a put changes everything but the title"
    );
    same!(
        last_event().await,
        EventPayload::SessionUpdated {
            session_id: session.id.clone(),
            info: Box::new(expected.clone()),
        },
        "a put's session.updated carries the stored title"
    );

    // A rename, announced from a copy read before the put: the event carries the session as stored.
    let when = ids.tick();
    let mut announced = session.clone();
    announced.title = "fix the build".to_owned();
    repo.commit(transaction(
        vec![Change::UpdateSession {
            session: session.id.clone(),
            fields: SessionFields::title("fix the build".to_owned()),
            updated: when,
        }],
        vec![updated(&ids, &announced)],
    ))
    .await
    .expect("a rename commits");
    expected.title = "fix the build".to_owned();
    expected.time.updated = when;
    same!(
        stored(session.id.clone()).await,
        expected.clone(),
        "a rename changes the title and the update time, nothing else"
    );
    same!(
        last_event().await,
        EventPayload::SessionUpdated {
            session_id: session.id.clone(),
            info: Box::new(expected.clone()),
        },
        "a rename's session.updated carries the session as stored"
    );

    // A reverted session with a large revert text: a put keeps the renamed title, in the row and in the
    // event, and a rename's event carries the whole text.
    let (text, _) = large_revert(40, 1);
    let mut reverted = stale.clone();
    reverted.revert = Some(RevertDescriptor {
        message_id: ids.message(),
        part_id: None,
        snapshot: Some(snapshot(1)),
        diff: Some(text),
    });
    repo.commit(transaction(
        vec![put_session(&reverted)],
        vec![updated(&ids, &reverted)],
    ))
    .await
    .expect("a revert's put commits");
    // The put read the session before the rename: its update time is earlier, and the rename's stays.
    assert!(reverted.time.updated < when);
    expected = reverted.clone();
    expected.title = "fix the build".to_owned();
    expected.time.updated = when;
    same!(
        stored(session.id.clone()).await,
        expected.clone(),
        "a put keeps the title and a later update time"
    );
    same!(
        last_event().await,
        EventPayload::SessionUpdated {
            session_id: session.id.clone(),
            info: Box::new(expected.clone()),
        },
        "a put's event keeps the stored title beside a large revert text"
    );
    let when = ids.tick();
    repo.commit(transaction(
        vec![Change::UpdateSession {
            session: session.id.clone(),
            fields: SessionFields::title("renamed while reverted".to_owned()),
            updated: when,
        }],
        vec![updated(&ids, &announced)],
    ))
    .await
    .expect("a rename commits");
    expected.title = "renamed while reverted".to_owned();
    expected.time.updated = when;
    same!(stored(session.id.clone()).await, expected.clone());
    same!(
        last_event().await,
        EventPayload::SessionUpdated {
            session_id: session.id.clone(),
            info: Box::new(expected.clone()),
        },
        "a rename's event carries the whole revert text"
    );

    // A rename of a session that does not exist: NotFound, nothing stored.
    let before = all_events(repo).await;
    let missing = ids.session();
    let result = repo
        .commit(transaction(
            vec![Change::UpdateSession {
                session: missing.clone(),
                fields: SessionFields::title("nobody".to_owned()),
                updated: ids.tick(),
            }],
            vec![heartbeat(&ids)],
        ))
        .await;
    assert!(
        matches!(result, Err(Error::NotFound(_))),
        "renaming a missing session fails with NotFound: {result:?}"
    );
    same!(all_events(repo).await, before, "and stores no event");
    same!(
        repo.session(&missing).await.expect("reading"),
        None,
        "nor a session"
    );
    same!(stored(session.id.clone()).await, expected);
}

/// Contract: `UpdateSession` sets metadata and the archive time (`Some(None)` clears it), leaving what it
/// does not name; a later `PutSession` from a copy read before keeps both, in the row and in its
/// `session.updated` event (OpenCode's client archives a session while a step may run).
pub async fn a_put_keeps_the_metadata_and_archive_time_an_update_set(repo: &dyn MessageRepo) {
    let ids = Ids::new();
    let session = new_session(&ids, "/work/archived");
    commit(repo, vec![put_session(&session)]).await;
    let stored = || async {
        repo.session(&session.id)
            .await
            .expect("reading a session must succeed")
            .expect("the session exists")
    };
    let mut metadata = serde_json::Map::new();
    metadata.insert(
        "ticket".to_owned(),
        serde_json::json!({"id": 42, "tags": ["a", "b"]}),
    );
    let when = ids.tick();
    let fields = SessionFields {
        title: None,
        metadata: Some(Some(metadata.clone())),
        archived: Some(Some(when)),
    };
    update_session(repo, &ids, &session, fields, when).await;
    let mut expected = session.clone();
    expected.metadata = Some(metadata.clone());
    expected.time.archived = Some(when);
    expected.time.updated = when;
    same!(
        stored().await,
        expected.clone(),
        "metadata and time.archived set, the title kept"
    );
    same!(
        last_event(repo).await,
        EventPayload::SessionUpdated {
            session_id: session.id.clone(),
            info: Box::new(expected.clone()),
        },
        "the update's event carries the session as stored"
    );

    // A step's write from a copy read before the update.
    let mut stale = session.clone();
    stale.slug = "after the step".to_owned();
    stale.time.updated = ids.tick();
    put_announced(repo, &ids, &stale).await;
    expected.slug = "after the step".to_owned();
    expected.time.updated = stale.time.updated;
    same!(stored().await, expected.clone(), "a put keeps them");
    same!(
        last_event(repo).await,
        EventPayload::SessionUpdated {
            session_id: session.id.clone(),
            info: Box::new(expected.clone()),
        },
        "and its event carries them as stored"
    );

    // Cleared: the archive time goes, the metadata stays.
    let when = ids.tick();
    let fields = SessionFields {
        archived: Some(None),
        ..SessionFields::default()
    };
    update_session(repo, &ids, &session, fields, when).await;
    expected.time.archived = None;
    expected.time.updated = when;
    same!(
        stored().await,
        expected,
        "time.archived cleared, the rest kept"
    );
}

/// A delete's `session.deleted` event carries the client's fields (title, metadata, archive time) and
/// update time as stored when it commits, not as the deleting caller read them: an update takes no lease,
/// and may land between that read and the delete (diff review: the event missed such a rename).
pub async fn a_deleted_sessions_event_carries_what_an_update_set_since_it_was_read(
    repo: &dyn MessageRepo,
) {
    let ids = Ids::new();
    let session = new_session(&ids, "/work/deleted");
    commit(repo, vec![put_session(&session)]).await;
    let read_before = session.clone();
    let when = ids.tick();
    let mut metadata = serde_json::Map::new();
    metadata.insert("k".to_owned(), serde_json::json!("v"));
    let fields = SessionFields {
        title: Some("renamed meanwhile".to_owned()),
        metadata: Some(Some(metadata.clone())),
        archived: Some(Some(when)),
    };
    update_session(repo, &ids, &session, fields, when).await;
    repo.commit(transaction(
        vec![Change::DeleteSession(session.id.clone())],
        vec![Event {
            id: ids.event(),
            payload: EventPayload::SessionDeleted {
                session_id: session.id.clone(),
                info: Box::new(read_before),
            },
        }],
    ))
    .await
    .expect("a delete commits");
    let mut expected = session.clone();
    expected.title = "renamed meanwhile".to_owned();
    expected.metadata = Some(metadata);
    expected.time.archived = Some(when);
    expected.time.updated = when;
    same!(
        last_event(repo).await,
        EventPayload::SessionDeleted {
            session_id: session.id.clone(),
            info: Box::new(expected),
        },
        "the delete's event carries the session's fields as they were when it was deleted"
    );
}

/// Commits a put of `session` (a step's write of it, say), with its `session.updated` event.
async fn put_announced(repo: &dyn MessageRepo, ids: &Ids, session: &Session) {
    repo.commit(transaction(
        vec![put_session(session)],
        vec![updated(ids, session)],
    ))
    .await
    .expect("a put commits");
}

/// Commits an update of `session`'s client fields at `when`, with its `session.updated` event.
async fn update_session(
    repo: &dyn MessageRepo,
    ids: &Ids,
    session: &Session,
    fields: SessionFields,
    when: u64,
) {
    repo.commit(transaction(
        vec![Change::UpdateSession {
            session: session.id.clone(),
            fields,
            updated: when,
        }],
        vec![updated(ids, session)],
    ))
    .await
    .expect("an update commits");
}

/// The payload of the last event in the outbox (one must be there).
async fn last_event(repo: &dyn MessageRepo) -> EventPayload {
    all_events(repo)
        .await
        .pop()
        .map(|stored| stored.event.payload)
        .expect("an event was stored")
}
