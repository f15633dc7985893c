//! A model-based property test: random sequences of session, message and part creates, appends,
//! revert-like session updates, cleanups (hidden-range deletes, some failing half-way), intents, lease
//! operations (take, renew, release, replace), guarded commits and event reads, applied both to this adapter
//! and to `rewind_core::testkit::MemRepo`, the reference implementation. After every step both must have
//! answered alike and must read back the same state.

use std::collections::BTreeMap;

use proptest::prelude::*;
use proptest::test_runner::{TestCaseError, TestRunner};
use rewind_core::Error;
use rewind_core::model::{
    DiffSummary, Event, EventPayload, FileDiff, FileStatus, LeaseKey, LeaseTake, LeaseToken,
    Message, MessageId, OpenStep, Part, PartBody, PatchPart, RevertDescriptor, RevertHistoryEntry,
    Role, Session, SessionFields, SessionId, StepFinishPart, StepStartPart, TokenCache, Tokens,
    ToolPart,
};
use rewind_core::ports::{Change, Guard, MessageRepo, Transaction};
use rewind_core::testkit::MemRepo;
use serde_json::{Map, Value, json};

use crate::support::{
    Dump, Ids, POSTGRES_ENV, PgSchema, Shared, dump, holder, intent, lease, memory_repo, message,
    part, postgres_url, runtime, session, snapshot, warning,
};

const DIRECTORIES: [&str; 2] = ["/work/model-a", "/work/model-b"];
const BASE_TIME: u64 = 1_700_000_000_000;

/// Which existing row a step means: an index into the rows created so far (modulo their number), or, from
/// `UNKNOWN` on, a row that was never created.
type Pick = u8;
const UNKNOWN: Pick = 240;

#[derive(Clone, Debug)]
enum PartKind {
    Text(String),
    Tool,
    StepStart(u8),
    StepFinish {
        snapshot: u8,
        cost_eighths: u8,
    },
    Patch(u8),
    /// A type rewind does not know, with keys in a random order.
    Unknown(Vec<(String, i64)>),
}

#[derive(Clone, Debug)]
enum Step {
    CreateSession {
        directory: u8,
    },
    PutMessage {
        session: Pick,
        user: bool,
        replace: Option<Pick>,
    },
    PutPart {
        session: Pick,
        message: Pick,
        kind: PartKind,
        replace: Option<Pick>,
    },
    Revert {
        session: Pick,
        message: Pick,
        part: Option<Pick>,
        warn: bool,
        step: bool,
    },
    Unrevert {
        session: Pick,
    },
    Cleanup {
        session: Pick,
        message: Pick,
        part: Option<Pick>,
        poison: bool,
    },
    DeleteSession {
        session: Pick,
    },
    PutIntent {
        session: Pick,
        token: u8,
    },
    DeleteIntent {
        token: u8,
    },
    TakeLease {
        key: u8,
        token: u8,
        replacing: Option<u8>,
        expires: u16,
    },
    RenewLease {
        key: u8,
        token: u8,
        expires: u16,
    },
    ReleaseLease {
        key: u8,
        token: u8,
    },
    /// A guarded write of the session: a put (which keeps the stored title), or a rename of its title
    /// announced from a stale copy (the event carries the session as stored).
    GuardedRename {
        session: Pick,
        key: u8,
        token: u8,
        intent: Option<u8>,
        title: bool,
    },
    ReadEvents {
        after: u8,
        limit: u8,
    },
}

fn pick() -> impl Strategy<Value = Pick> {
    prop_oneof![9 => 0u8..16, 1 => Just(UNKNOWN)]
}

fn part_kind() -> impl Strategy<Value = PartKind> {
    prop_oneof![
        "[a-z ü✓\"]{0,12}".prop_map(PartKind::Text),
        Just(PartKind::Tool),
        (0u8..8).prop_map(PartKind::StepStart),
        (0u8..8, 0u8..16).prop_map(|(snapshot, cost_eighths)| PartKind::StepFinish {
            snapshot,
            cost_eighths
        }),
        (0u8..8).prop_map(PartKind::Patch),
        // Never a name of the part's own fields (`id`, `type`): a part read from JSON keeps those out of
        // its other fields, so no such part exists (one did, generated, and could not be read back).
        prop::collection::vec(
            (
                "[a-z]{1,6}".prop_filter("a part's own field", |k| k != "id" && k != "type"),
                any::<i64>()
            ),
            0..5
        )
        .prop_map(PartKind::Unknown),
    ]
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        2 => (0u8..2).prop_map(|directory| Step::CreateSession { directory }),
        3 => (pick(), any::<bool>(), prop::option::weighted(0.2, pick()))
            .prop_map(|(session, user, replace)| Step::PutMessage { session, user, replace }),
        5 => (pick(), pick(), part_kind(), prop::option::weighted(0.2, pick())).prop_map(
            |(session, message, kind, replace)| Step::PutPart { session, message, kind, replace }
        ),
        2 => (pick(), pick(), prop::option::of(pick()), any::<bool>(), any::<bool>()).prop_map(
            |(session, message, part, warn, step)| Step::Revert { session, message, part, warn, step }
        ),
        1 => pick().prop_map(|session| Step::Unrevert { session }),
        2 => (pick(), pick(), prop::option::of(pick()), prop::bool::weighted(0.3)).prop_map(
            |(session, message, part, poison)| Step::Cleanup { session, message, part, poison }
        ),
        1 => pick().prop_map(|session| Step::DeleteSession { session }),
        1 => (pick(), 0u8..3).prop_map(|(session, token)| Step::PutIntent { session, token }),
        1 => (0u8..3).prop_map(|token| Step::DeleteIntent { token }),
        3 => (0u8..3, 0u8..4, prop::option::of(0u8..4), any::<u16>()).prop_map(
            |(key, token, replacing, expires)| Step::TakeLease { key, token, replacing, expires }
        ),
        1 => (0u8..3, 0u8..4, any::<u16>())
            .prop_map(|(key, token, expires)| Step::RenewLease { key, token, expires }),
        1 => (0u8..3, 0u8..4).prop_map(|(key, token)| Step::ReleaseLease { key, token }),
        2 => (pick(), 0u8..3, 0u8..4, prop::option::of(0u8..3), any::<bool>()).prop_map(
            |(session, key, token, intent, title)| Step::GuardedRename { session, key, token, intent, title }
        ),
        1 => (0u8..12, 0u8..6).prop_map(|(after, limit)| Step::ReadEvents { after, limit }),
    ]
}

fn steps() -> impl Strategy<Value = Vec<Step>> {
    prop::collection::vec(step(), 1..30)
}

/// What one step does to both repos.
enum Action {
    Commit(Transaction),
    Take(rewind_core::model::Lease, Option<LeaseToken>),
    Renew(LeaseKey, LeaseToken, u64),
    Release(LeaseKey, LeaseToken),
    Read(u64, u32),
}

/// An answer, compared between the two repos (error messages may differ; their kinds may not).
#[derive(Debug, PartialEq)]
enum Answer {
    Done,
    NotFound,
    LeaseLost,
    Take(LeaseTake),
    Renewed(bool),
    Events(Vec<rewind_core::model::StoredEvent>),
}

fn answer<T>(
    result: Result<T, Error>,
    ok: impl FnOnce(T) -> Answer,
) -> Result<Answer, TestCaseError> {
    match result {
        Ok(value) => Ok(ok(value)),
        Err(Error::NotFound(_)) => Ok(Answer::NotFound),
        Err(Error::LeaseLost(_)) => Ok(Answer::LeaseLost),
        Err(other) => Err(TestCaseError::fail(format!("unexpected failure: {other}"))),
    }
}

async fn run_action(repo: &dyn MessageRepo, action: &Action) -> Result<Answer, TestCaseError> {
    match action {
        Action::Commit(tx) => answer(repo.commit(tx.clone()).await, |()| Answer::Done),
        Action::Take(lease, replacing) => answer(
            repo.take_lease(
                lease,
                replacing.clone().map(rewind_core::model::Replacing::token),
            )
            .await,
            Answer::Take,
        ),
        Action::Renew(key, token, expires) => answer(
            repo.renew_lease(key, token, *expires).await,
            Answer::Renewed,
        ),
        Action::Release(key, token) => {
            answer(repo.release_lease(key, token).await, |()| Answer::Done)
        }
        Action::Read(after, limit) => {
            answer(repo.events_after(*after, *limit).await, Answer::Events)
        }
    }
}

/// The rows created so far, so that steps can refer to them (deleted ones included).
struct World {
    ids: Ids,
    sessions: Vec<Session>,
    messages: BTreeMap<SessionId, Vec<Message>>,
    parts: BTreeMap<MessageId, Vec<Part>>,
    keys: Vec<LeaseKey>,
}

fn chosen<T: Clone>(rows: &[T], pick: Pick) -> Option<T> {
    if pick >= UNKNOWN || rows.is_empty() {
        None
    } else {
        Some(rows[usize::from(pick) % rows.len()].clone())
    }
}

fn object(value: Value) -> Map<String, Value> {
    match value {
        Value::Object(fields) => fields,
        _ => Map::new(),
    }
}

fn token(n: u8) -> LeaseToken {
    LeaseToken(format!("token-{n}"))
}

fn intent_token(n: u8) -> String {
    format!("intent-{n}")
}

impl World {
    fn new() -> Self {
        let ids = Ids::default();
        let fixed = ids.session();
        World {
            ids,
            sessions: Vec::new(),
            messages: BTreeMap::new(),
            parts: BTreeMap::new(),
            keys: vec![
                LeaseKey::Worktree(DIRECTORIES[0].to_owned()),
                LeaseKey::Worktree(DIRECTORIES[1].to_owned()),
                LeaseKey::Session(fixed),
            ],
        }
    }

    fn event(&self, payload: EventPayload) -> Event {
        Event {
            id: self.ids.event(),
            payload,
        }
    }

    /// An existing session, or one that was never stored.
    fn session(&self, pick: Pick) -> Session {
        chosen(&self.sessions, pick).unwrap_or_else(|| session(&self.ids, DIRECTORIES[0]))
    }

    fn message_of(&self, session: &Session, pick: Pick) -> Message {
        let rows = self.messages.get(&session.id).cloned().unwrap_or_default();
        chosen(&rows, pick).unwrap_or_else(|| message(&self.ids, session, Role::Assistant))
    }

    fn part_of(&self, message: &Message, pick: Pick) -> Option<Part> {
        let rows = self.parts.get(&message.id).cloned().unwrap_or_default();
        chosen(&rows, pick)
    }

    fn remember_session(&mut self, session: &Session) {
        match self.sessions.iter_mut().find(|s| s.id == session.id) {
            Some(known) => *known = session.clone(),
            None => self.sessions.push(session.clone()),
        }
    }

    fn body(&self, kind: &PartKind) -> PartBody {
        match kind {
            PartKind::Text(text) => PartBody::text(text.clone()),
            PartKind::Tool => PartBody::Tool(ToolPart {
                extra: object(
                    json!({"callID": "call_1", "tool": "edit", "state": {"status": "completed"}}),
                ),
            }),
            PartKind::StepStart(n) => PartBody::StepStart(StepStartPart {
                snapshot: Some(snapshot(u64::from(*n))),
                extra: Map::new(),
            }),
            PartKind::StepFinish {
                snapshot: n,
                cost_eighths,
            } => PartBody::StepFinish(StepFinishPart {
                reason: "stop".to_owned(),
                snapshot: Some(snapshot(u64::from(*n) + 100)),
                cost: f64::from(*cost_eighths) / 8.0,
                tokens: Tokens {
                    total: None,
                    input: f64::from(*cost_eighths),
                    output: 1.5,
                    reasoning: 0.0,
                    cache: TokenCache {
                        read: 0.25,
                        write: 0.0,
                    },
                },
                extra: Map::new(),
            }),
            PartKind::Patch(n) => PartBody::Patch(PatchPart {
                hash: snapshot(u64::from(*n) + 200),
                files: vec![format!("{}/file-{n}.txt", DIRECTORIES[0])],
                extra: Map::new(),
            }),
            PartKind::Unknown(fields) => PartBody::Other {
                kind: "x-model-kind".to_owned(),
                fields: fields.iter().map(|(k, v)| (k.clone(), json!(v))).collect(),
            },
        }
    }

    fn action(&mut self, step: &Step) -> Action {
        let time = self.ids.tick();
        match step {
            Step::CreateSession { directory } => {
                let created = session(&self.ids, DIRECTORIES[usize::from(*directory) % 2]);
                self.remember_session(&created);
                let event = self.event(EventPayload::SessionCreated {
                    session_id: created.id.clone(),
                    info: Box::new(created.clone()),
                });
                Action::Commit(tx(vec![Change::PutSession(Box::new(created))], vec![event]))
            }
            Step::PutMessage {
                session,
                user,
                replace,
            } => {
                let owner = self.session(*session);
                let info = match replace.and_then(|r| {
                    chosen(
                        &self.messages.get(&owner.id).cloned().unwrap_or_default(),
                        r,
                    )
                }) {
                    Some(mut existing) => {
                        existing.time.completed = Some(time);
                        existing
                    }
                    None => {
                        let role = if *user { Role::User } else { Role::Assistant };
                        let created = message(&self.ids, &owner, role);
                        self.messages
                            .entry(owner.id.clone())
                            .or_default()
                            .push(created.clone());
                        created
                    }
                };
                let event = self.event(EventPayload::MessageUpdated {
                    session_id: owner.id.clone(),
                    info: Box::new(info.clone()),
                });
                Action::Commit(tx(vec![Change::PutMessage(Box::new(info))], vec![event]))
            }
            Step::PutPart {
                session,
                message,
                kind,
                replace,
            } => {
                let owner = self.session(*session);
                let into = self.message_of(&owner, *message);
                let body = self.body(kind);
                let stored = match replace.and_then(|r| self.part_of(&into, r)) {
                    Some(mut existing) => {
                        existing.body = body;
                        existing
                    }
                    None => {
                        let created = part(&self.ids, &into, body);
                        self.parts
                            .entry(into.id.clone())
                            .or_default()
                            .push(created.clone());
                        created
                    }
                };
                let event = self.event(EventPayload::PartUpdated {
                    session_id: owner.id.clone(),
                    part: Box::new(stored.clone()),
                    time,
                });
                Action::Commit(tx(vec![Change::PutPart(Box::new(stored))], vec![event]))
            }
            Step::Revert {
                session,
                message,
                part,
                warn,
                step,
            } => {
                let mut reverted = self.session(*session);
                let target = self.message_of(&reverted, *message);
                let part_id = part.and_then(|p| self.part_of(&target, p)).map(|p| p.id);
                reverted.revert = Some(RevertDescriptor {
                    message_id: target.id.clone(),
                    part_id,
                    snapshot: Some(snapshot(300 + time % 7)),
                    diff: Some(format!("diff {time}")),
                });
                reverted.applied = Some(snapshot(400 + time % 5));
                reverted.reverted_at = Some(time);
                reverted.summary = Some(DiffSummary {
                    additions: 1,
                    deletions: 2,
                    files: 1,
                });
                reverted.step = step.then(|| OpenStep {
                    message_id: target.id.clone(),
                    snapshot: snapshot(500 + time % 3),
                    token: token(0),
                    holder: holder(9),
                    started: time,
                });
                reverted.skipped = if *step {
                    vec![format!("big {time}.bin")]
                } else {
                    Vec::new()
                };
                reverted.time.updated = time;
                self.remember_session(&reverted);
                let diff = vec![FileDiff {
                    file: "a.txt".to_owned(),
                    patch: format!("@@ -1 +1 @@\n-{time}\n+x\n"),
                    additions: 1,
                    deletions: 1,
                    status: FileStatus::Modified,
                }];
                let mut changes = Vec::new();
                let mut events = Vec::new();
                if *warn {
                    let raised = warning(&self.ids, Some(snapshot(600 + time % 4)), "/work/a.txt");
                    events.push(self.event(EventPayload::SessionWarning {
                        session_id: reverted.id.clone(),
                        message: raised.message.clone(),
                        snapshot: raised.snapshot.clone(),
                        files: raised.files.clone(),
                    }));
                    changes.push(Change::AddWarning {
                        session: reverted.id.clone(),
                        warning: raised,
                    });
                }
                changes.push(Change::SetSessionDiff {
                    session: reverted.id.clone(),
                    diff: diff.clone(),
                });
                changes.push(Change::PutSession(Box::new(reverted.clone())));
                events.push(self.event(EventPayload::SessionDiff {
                    session_id: reverted.id.clone(),
                    diff,
                }));
                events.push(self.event(EventPayload::SessionUpdated {
                    session_id: reverted.id.clone(),
                    info: Box::new(reverted),
                }));
                Action::Commit(tx(changes, events))
            }
            Step::Unrevert { session } => {
                let mut back = self.session(*session);
                back.revert = None;
                back.applied = None;
                back.reverted_at = None;
                back.time.updated = time;
                self.remember_session(&back);
                let event = self.event(EventPayload::SessionUpdated {
                    session_id: back.id.clone(),
                    info: Box::new(back.clone()),
                });
                Action::Commit(tx(vec![Change::PutSession(Box::new(back))], vec![event]))
            }
            Step::Cleanup {
                session,
                message,
                part,
                poison,
            } => {
                let mut cleaned = self.session(*session);
                let target = self.message_of(&cleaned, *message);
                let part_id = part.and_then(|p| self.part_of(&target, p)).map(|p| p.id);
                let descriptor = cleaned.revert.clone().unwrap_or(RevertDescriptor {
                    message_id: target.id.clone(),
                    part_id: part_id.clone(),
                    snapshot: None,
                    diff: None,
                });
                let entry = RevertHistoryEntry {
                    time,
                    descriptor,
                    applied: cleaned.applied.clone(),
                    summary: cleaned.summary,
                    warnings: vec![warning(
                        &self.ids,
                        Some(snapshot(700 + time % 3)),
                        "/work/b.txt",
                    )],
                };
                cleaned.revert = None;
                cleaned.applied = None;
                cleaned.reverted_at = None;
                let mut changes = vec![
                    Change::DeleteHiddenRange {
                        session: cleaned.id.clone(),
                        message: target.id.clone(),
                        part: part_id,
                    },
                    Change::AddRevertHistory {
                        session: cleaned.id.clone(),
                        entry: Box::new(entry),
                    },
                    Change::PutSession(Box::new(cleaned.clone())),
                ];
                if *poison {
                    // A change that fails after the delete: the whole cleanup must leave nothing.
                    let stray = crate::support::message(&self.ids, &cleaned, Role::User);
                    changes.push(Change::PutPart(Box::new(crate::support::part(
                        &self.ids,
                        &stray,
                        PartBody::text("stray"),
                    ))));
                } else {
                    self.remember_session(&cleaned);
                }
                let events = vec![
                    self.event(EventPayload::MessageRemoved {
                        session_id: cleaned.id.clone(),
                        message_id: target.id.clone(),
                    }),
                    self.event(EventPayload::SessionUpdated {
                        session_id: cleaned.id.clone(),
                        info: Box::new(cleaned),
                    }),
                ];
                Action::Commit(tx(changes, events))
            }
            Step::DeleteSession { session } => {
                let doomed = self.session(*session);
                let event = self.event(EventPayload::SessionDeleted {
                    session_id: doomed.id.clone(),
                    info: Box::new(doomed.clone()),
                });
                Action::Commit(tx(vec![Change::DeleteSession(doomed.id)], vec![event]))
            }
            Step::PutIntent { session, token } => {
                let owner = self.session(*session);
                let record = intent(
                    &self.ids,
                    &owner,
                    &intent_token(*token),
                    snapshot(800 + u64::from(*token)),
                );
                Action::Commit(tx(vec![Change::PutIntent(Box::new(record))], Vec::new()))
            }
            Step::DeleteIntent { token } => Action::Commit(tx(
                vec![Change::DeleteIntent(LeaseToken(intent_token(*token)))],
                Vec::new(),
            )),
            Step::TakeLease {
                key,
                token: t,
                replacing,
                expires,
            } => {
                let key = &self.keys[usize::from(*key) % self.keys.len()];
                let taken = lease(
                    key,
                    &token(*t).0,
                    u32::from(*t),
                    BASE_TIME + u64::from(*expires),
                );
                Action::Take(taken, replacing.map(token))
            }
            Step::RenewLease {
                key,
                token: t,
                expires,
            } => Action::Renew(
                self.keys[usize::from(*key) % self.keys.len()].clone(),
                token(*t),
                BASE_TIME + u64::from(*expires),
            ),
            Step::ReleaseLease { key, token: t } => Action::Release(
                self.keys[usize::from(*key) % self.keys.len()].clone(),
                token(*t),
            ),
            Step::GuardedRename {
                session,
                key,
                token: t,
                intent,
                title,
            } => {
                let mut renamed = self.session(*session);
                renamed.slug = format!("renamed at {time}");
                renamed.title = format!("titled at {time}");
                let mut guards = vec![Guard::LeaseHeld {
                    key: self.keys[usize::from(*key) % self.keys.len()].clone(),
                    token: token(*t),
                }];
                if let Some(i) = intent {
                    guards.push(Guard::IntentExists(LeaseToken(intent_token(*i))));
                }
                let event = self.event(EventPayload::SessionUpdated {
                    session_id: renamed.id.clone(),
                    info: Box::new(renamed.clone()),
                });
                let change = if *title {
                    Change::UpdateSession {
                        session: renamed.id.clone(),
                        fields: SessionFields::title(renamed.title.clone()),
                        updated: time,
                    }
                } else {
                    Change::PutSession(Box::new(renamed))
                };
                Action::Commit(Transaction {
                    guards,
                    changes: vec![change],
                    events: vec![event],
                })
            }
            Step::ReadEvents { after, limit } => Action::Read(u64::from(*after), u32::from(*limit)),
        }
    }

    async fn state(&self, repo: &dyn MessageRepo) -> (Dump, Vec<Vec<Session>>, Vec<Vec<String>>) {
        let ids: Vec<SessionId> = self.sessions.iter().map(|s| s.id.clone()).collect();
        let everything = dump(repo, &ids, &self.keys).await;
        let mut by_directory = Vec::new();
        let mut referenced = Vec::new();
        for directory in DIRECTORIES {
            by_directory.push(
                repo.sessions(Some(directory.to_owned()))
                    .await
                    .expect("lists"),
            );
            referenced.push(
                repo.referenced_snapshots(Some(directory.to_owned()))
                    .await
                    .expect("lists")
                    .into_iter()
                    .map(String::from)
                    .collect(),
            );
        }
        (everything, by_directory, referenced)
    }
}

fn tx(changes: Vec<Change>, events: Vec<Event>) -> Transaction {
    Transaction {
        guards: Vec::new(),
        changes,
        events,
    }
}

/// Applies the steps to the model and to `repo`, comparing answers and state after every step.
async fn same_as_the_model(repo: &dyn MessageRepo, steps: &[Step]) -> Result<(), TestCaseError> {
    let model = MemRepo::new();
    let mut world = World::new();
    for (n, step) in steps.iter().enumerate() {
        let action = world.action(step);
        let expected = run_action(&model, &action).await?;
        let actual = run_action(repo, &action).await?;
        prop_assert_eq!(
            &actual,
            &expected,
            "step {} answered differently: {:?}",
            n,
            step
        );
        let expected = world.state(&model).await;
        let actual = world.state(repo).await;
        prop_assert_eq!(
            actual,
            expected,
            "step {} left a different state: {:?}",
            n,
            step
        );
    }
    Ok(())
}

/// Runs the property with the default configuration (so `PROPTEST_CASES` bounds it) on one runtime, giving
/// every case a fresh store from `fresh`.
fn check_against_the_model<F, Fut>(runtime: &tokio::runtime::Runtime, fresh: F)
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Box<dyn MessageRepo>>,
{
    let config = ProptestConfig {
        source_file: Some(file!()),
        ..ProptestConfig::default()
    };
    let mut runner = TestRunner::new(config);
    let result = runner.run(&steps(), |steps| {
        runtime.block_on(async {
            let repo = fresh().await;
            same_as_the_model(repo.as_ref(), &steps).await
        })
    });
    if let Err(failure) = result {
        panic!("{failure}");
    }
}

#[test]
fn sqlite_reads_back_what_the_model_does() {
    check_against_the_model(&runtime(), || async {
        Box::new(memory_repo().await) as Box<dyn MessageRepo>
    });
}

#[test]
fn postgres_reads_back_what_the_model_does() {
    if postgres_url().is_none() {
        assert!(
            std::env::var_os("CI").is_none(),
            "{POSTGRES_ENV} is not set under CI: .ci/run must start PostgreSQL and export it"
        );
        eprintln!("{POSTGRES_ENV} is not set: the PostgreSQL run of this test is skipped");
        return;
    }
    // One schema for the whole run, emptied before every case: creating a schema per case would spend the
    // time on DDL rather than on the property.
    let runtime = runtime();
    let schema = runtime.block_on(PgSchema::create());
    let repo = std::sync::Arc::new(runtime.block_on(schema.open()));
    check_against_the_model(&runtime, || {
        let repo = repo.clone();
        let schema = &schema;
        async move {
            schema.empty().await;
            Box::new(Shared(repo)) as Box<dyn MessageRepo>
        }
    });
}
