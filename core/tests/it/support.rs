//! A world for service tests: the services over the in-memory snapshot store, repository and host, with a
//! worktree whose files the test edits as an agent or a user would.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rewind_core::model::{
    MessageId, MessageWithParts, Part, PartBody, Session, SessionId, StoredEvent, Warning,
};
use rewind_core::service::{NewMessage, StepEnd};
use rewind_core::testkit::FakeHost;
use rewind_core::testkit::mem_repo::MemRepo;
use rewind_core::testkit::mem_snapshot::{MemFs, MemSnapshotStore, Node};
use rewind_core::{MessageRepo, RevertTarget, Rewind, ServiceConfig};

pub use futures::executor::block_on;

pub const ROOT: &str = "/work/project";

pub struct World {
    pub fs: Arc<MemFs>,
    pub snapshots: Arc<MemSnapshotStore>,
    pub repo: Arc<MemRepo>,
    pub host: Arc<FakeHost>,
    pub rewind: Rewind,
    pub root: PathBuf,
}

impl World {
    pub fn new() -> Self {
        let fs = Arc::new(MemFs::new());
        let root = PathBuf::from(ROOT);
        fs.create_worktree(&root);
        let snapshots = Arc::new(MemSnapshotStore::new(fs.clone()));
        let repo = Arc::new(MemRepo::new());
        let host = Arc::new(FakeHost::new(1_800_000_000_000));
        let rewind = Rewind::new(
            snapshots.clone(),
            repo.clone(),
            host.clone(),
            ServiceConfig::default(),
        );
        World {
            fs,
            snapshots,
            repo,
            host,
            rewind,
            root,
        }
    }

    pub fn write(&self, path: &str, content: &str) {
        self.fs
            .write(&self.root, path, content.as_bytes())
            .expect("write");
    }

    pub fn remove(&self, path: &str) {
        self.fs.remove(&self.root, path).expect("remove");
    }

    pub fn chmod_x(&self, path: &str, executable: bool) {
        self.fs
            .set_executable(&self.root, path, executable)
            .expect("chmod");
    }

    pub fn read(&self, path: &str) -> Option<String> {
        self.fs
            .read(&self.root, path)
            .map(|node| String::from_utf8_lossy(node.content()).into_owned())
    }

    pub fn files(&self) -> BTreeMap<String, Node> {
        self.fs.list(&self.root)
    }

    pub fn abs(&self, path: &str) -> String {
        format!("{ROOT}/{path}")
    }

    pub fn path(&self) -> &Path {
        &self.root
    }

    pub async fn session(&self) -> Session {
        self.rewind
            .create_session(ROOT, None)
            .await
            .expect("create session")
    }

    /// One turn: a user message, an assistant message with one step during which `edit` changes files.
    pub async fn turn(&self, session: &SessionId, prompt: &str, edit: impl FnOnce(&World)) -> Turn {
        let (user, assistant) = self.exchange(session, prompt).await;
        self.step(session, &assistant.info.id, edit).await;
        Turn {
            user: user.info.id,
            assistant: assistant.info.id,
        }
    }

    /// A user message and its assistant message, with no step yet: the assistant message's id.
    pub async fn prompt(&self, session: &SessionId, prompt: &str) -> MessageId {
        self.exchange(session, prompt).await.1.info.id
    }

    /// A user message with one text part (`prompt`) and the assistant message answering it, no step yet.
    pub async fn exchange(
        &self,
        session: &SessionId,
        prompt: &str,
    ) -> (MessageWithParts, MessageWithParts) {
        let user = self
            .rewind
            .create_message(session, NewMessage::user_text(prompt))
            .await
            .expect("user message");
        let assistant = self
            .rewind
            .create_message(session, NewMessage::assistant())
            .await
            .expect("assistant message");
        (user, assistant)
    }

    /// Whether the session is reverted, as stored now.
    pub async fn is_reverted(&self, session: &SessionId) -> bool {
        self.rewind
            .session(session)
            .await
            .expect("session")
            .revert
            .is_some()
    }

    /// One step of an existing assistant message.
    pub async fn step(
        &self,
        session: &SessionId,
        message: &MessageId,
        edit: impl FnOnce(&World),
    ) -> Vec<Part> {
        self.rewind
            .begin_step(session, message)
            .await
            .expect("begin step");
        edit(self);
        self.rewind
            .finish_step(session, message, StepEnd::default())
            .await
            .expect("finish step")
    }

    pub async fn revert_to(&self, session: &SessionId, message: &MessageId) -> Session {
        self.try_revert_to(session, message).await.expect("revert")
    }

    pub async fn messages(&self, session: &SessionId) -> Vec<MessageWithParts> {
        self.rewind.messages(session).await.expect("messages")
    }

    /// The ids of the session's messages, in order.
    pub async fn message_ids(&self, session: &SessionId) -> Vec<rewind_core::model::MessageId> {
        self.messages(session)
            .await
            .into_iter()
            .map(|m| m.info.id)
            .collect()
    }

    pub async fn events(&self) -> Vec<StoredEvent> {
        self.repo.events_after(0, 100_000).await.expect("events")
    }

    pub async fn event_types_after(&self, seq: u64) -> Vec<String> {
        self.repo
            .events_after(seq, 100_000)
            .await
            .expect("events")
            .into_iter()
            .map(|e| e.event.payload.kind().to_owned())
            .collect()
    }

    /// The session's newest warning (which must exist; `what` names it in the panic).
    pub async fn last_warning(&self, session: &SessionId, what: &str) -> Warning {
        self.rewind
            .warnings(session)
            .await
            .expect("warnings")
            .pop()
            .unwrap_or_else(|| panic!("{what}"))
    }

    pub async fn last_seq(&self) -> u64 {
        self.events().await.last().map_or(0, |e| e.seq)
    }

    /// a → content, for the given paths ("-" when absent).
    pub fn state(&self, paths: &[&str]) -> Vec<String> {
        paths
            .iter()
            .map(|p| self.read(p).unwrap_or_else(|| "-".to_owned()))
            .collect()
    }
}

pub struct Turn {
    pub user: MessageId,
    pub assistant: MessageId,
}

pub fn patch_files(parts: &[Part]) -> Vec<String> {
    parts
        .iter()
        .filter_map(|p| match &p.body {
            PartBody::Patch(patch) => Some(patch.files.clone()),
            _ => None,
        })
        .flatten()
        .collect()
}

impl World {
    /// The payloads of the events after outbox position `seq`.
    pub async fn repo_events_after(&self, seq: u64) -> Vec<rewind_core::model::EventPayload> {
        self.repo
            .events_after(seq, 100_000)
            .await
            .expect("events")
            .into_iter()
            .map(|e| e.event.payload)
            .collect()
    }
}

impl World {
    /// A revert to `message`, returning the result.
    pub async fn try_revert_to(
        &self,
        session: &SessionId,
        message: &MessageId,
    ) -> rewind_core::Result<Session> {
        self.rewind
            .revert(
                session,
                RevertTarget {
                    message_id: message.clone(),
                    part_id: None,
                },
            )
            .await
    }

    /// A revert to the session's first message, returning the result.
    pub async fn revert_to_result(&self, session: &SessionId) -> rewind_core::Result<Session> {
        let first = self
            .messages(session)
            .await
            .first()
            .map(|m| m.info.id.clone())
            .expect("a message");
        self.rewind
            .revert(
                session,
                RevertTarget {
                    message_id: first,
                    part_id: None,
                },
            )
            .await
    }
}
