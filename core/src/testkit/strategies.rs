//! proptest strategies for sessions: many turns, several assistant messages per turn, steps with text and
//! tool parts, patches, and revert targets with and without a part, known and unknown.

use proptest::prelude::*;
use serde_json::Map;

use crate::id::IdGenerator;
use crate::model::{
    Message, MessageId, MessageTime, MessageWithParts, Part, PartBody, PartId, PatchPart, Role,
    SessionId, SnapshotId, StepFinishPart, StepStartPart, ToolPart,
};
use crate::revert::RevertTarget;

/// The shape of one part, before ids are given.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PartShape {
    /// `text`
    Text,
    /// `tool`
    Tool,
    /// `step-start`
    StepStart,
    /// `step-finish`
    StepFinish,
    /// `patch` naming these files (relative names under the worktree `/wt`)
    Patch(Vec<String>),
    /// `reasoning` (a type the revert rules do not look at)
    Reasoning,
}

/// The shape of one message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MessageShape {
    /// User or assistant.
    pub role: Role,
    /// Its parts.
    pub parts: Vec<PartShape>,
}

/// The worktree the generated patches name files under.
pub const WORKTREE: &str = "/wt";

fn snapshot(n: u64) -> SnapshotId {
    SnapshotId::parse(&format!("{n:040x}")).expect("40 hex digits")
}

/// Builds a session from shapes, with ascending ids and a distinct snapshot per step.
pub fn build_session(shapes: &[MessageShape]) -> Vec<MessageWithParts> {
    let ids = IdGenerator::new();
    let session_id: SessionId = ids.descending(1_700_000_000_000);
    let mut clock = 1_700_000_000_000u64;
    let mut next_snapshot = 1u64;
    let mut last_user: Option<MessageId> = None;
    let mut messages = Vec::new();
    for shape in shapes {
        clock += 1;
        let id: MessageId = ids.ascending(clock, None);
        if shape.role == Role::User {
            last_user = Some(id.clone());
        }
        let info = Message {
            id: id.clone(),
            session_id: session_id.clone(),
            role: shape.role,
            time: MessageTime {
                created: clock,
                completed: None,
            },
            parent_id: if shape.role == Role::Assistant {
                last_user.clone()
            } else {
                None
            },
            extra: Map::new(),
        };
        let mut parts = Vec::new();
        let mut step_snapshot = snapshot(next_snapshot);
        for part in &shape.parts {
            clock += 1;
            let body = match part {
                PartShape::Text => PartBody::text("words"),
                PartShape::Tool => PartBody::Tool(ToolPart { extra: Map::new() }),
                PartShape::Reasoning => PartBody::Other {
                    kind: "reasoning".to_owned(),
                    fields: Map::new(),
                },
                PartShape::StepStart => {
                    step_snapshot = snapshot(next_snapshot);
                    next_snapshot += 1;
                    PartBody::StepStart(StepStartPart {
                        snapshot: Some(step_snapshot.clone()),
                        extra: Map::new(),
                    })
                }
                PartShape::StepFinish => {
                    let finish = snapshot(next_snapshot);
                    PartBody::StepFinish(StepFinishPart {
                        reason: "stop".to_owned(),
                        snapshot: Some(finish),
                        cost: 0.5,
                        tokens: Default::default(),
                        extra: Map::new(),
                    })
                }
                PartShape::Patch(files) => PartBody::Patch(PatchPart {
                    hash: step_snapshot.clone(),
                    files: files.iter().map(|f| format!("{WORKTREE}/{f}")).collect(),
                    extra: Map::new(),
                }),
            };
            let part_id: PartId = ids.ascending(clock, None);
            parts.push(Part {
                id: part_id,
                session_id: session_id.clone(),
                message_id: id.clone(),
                body,
            });
        }
        messages.push(MessageWithParts { info, parts });
    }
    messages
}

fn file_name() -> impl Strategy<Value = String> {
    prop::sample::select(vec!["a.txt", "b.txt", "src/c.rs", "src/d.rs", "e"])
        .prop_map(str::to_owned)
}

/// One step: `step-start`, text and tool parts, `step-finish`, then a patch when it changed files.
fn step() -> impl Strategy<Value = Vec<PartShape>> {
    (
        prop::collection::vec(
            prop_oneof![
                Just(PartShape::Text),
                Just(PartShape::Tool),
                Just(PartShape::Reasoning)
            ],
            0..3,
        ),
        prop::collection::btree_set(file_name(), 0..3),
    )
        .prop_map(|(middle, files)| {
            let mut parts = vec![PartShape::StepStart];
            parts.extend(middle);
            parts.push(PartShape::StepFinish);
            if !files.is_empty() {
                parts.push(PartShape::Patch(files.into_iter().collect()));
            }
            parts
        })
}

fn assistant_message() -> impl Strategy<Value = MessageShape> {
    prop::collection::vec(step(), 0..3).prop_map(|steps| MessageShape {
        role: Role::Assistant,
        parts: steps.into_iter().flatten().collect(),
    })
}

fn turn() -> impl Strategy<Value = Vec<MessageShape>> {
    (
        prop::collection::vec(
            prop_oneof![3 => Just(PartShape::Text), 1 => Just(PartShape::Reasoning)],
            0..3,
        ),
        prop::collection::vec(assistant_message(), 0..4),
    )
        .prop_map(|(user_parts, assistants)| {
            let mut turn = vec![MessageShape {
                role: Role::User,
                parts: user_parts,
            }];
            turn.extend(assistants);
            turn
        })
}

/// Session shapes: 1 to 6 turns, sometimes opened by assistant messages with no user message before them.
pub fn session_shapes() -> impl Strategy<Value = Vec<MessageShape>> {
    (
        prop::collection::vec(assistant_message(), 0..2),
        prop::collection::vec(turn(), 1..6),
    )
        .prop_map(|(orphans, turns)| {
            let mut shapes = orphans;
            shapes.extend(turns.into_iter().flatten());
            shapes
        })
}

/// A generated session.
pub fn session() -> impl Strategy<Value = Vec<MessageWithParts>> {
    session_shapes().prop_map(|shapes| build_session(&shapes))
}

/// How a target was chosen, so a property can say what to expect of it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TargetKind {
    /// An existing message, no part.
    Message,
    /// An existing message and a part of the same message.
    OwnPart,
    /// An existing message and a part of another message (OpenCode matches the part alone).
    ForeignPart,
    /// A message id that is not in the session.
    UnknownMessage,
    /// An existing message and a part id that is not in the session.
    UnknownPart,
}

/// A session and a target in it.
pub fn session_and_target()
-> impl Strategy<Value = (Vec<MessageWithParts>, RevertTarget, TargetKind)> {
    session().prop_flat_map(|messages| {
        let count = messages.len();
        let all_parts: Vec<(usize, PartId)> = messages
            .iter()
            .enumerate()
            .flat_map(|(i, m)| m.parts.iter().map(move |p| (i, p.id.clone())))
            .collect();
        (
            Just(messages),
            0..count,
            any::<prop::sample::Index>(),
            0..5u8,
        )
            .prop_map(move |(messages, m, pick, kind)| {
                let ids = IdGenerator::new();
                let message_id = messages[m].info.id.clone();
                let unknown_message: MessageId = ids.ascending(1, None);
                let unknown_part: PartId = ids.ascending(1, None);
                let own = &messages[m].parts;
                match kind {
                    1 if !own.is_empty() => (
                        messages.clone(),
                        RevertTarget {
                            message_id,
                            part_id: Some(own[pick.index(own.len())].id.clone()),
                        },
                        TargetKind::OwnPart,
                    ),
                    2 if !all_parts.is_empty() => {
                        let (owner, part) = all_parts[pick.index(all_parts.len())].clone();
                        let kind = if owner == m {
                            TargetKind::OwnPart
                        } else {
                            TargetKind::ForeignPart
                        };
                        (
                            messages.clone(),
                            RevertTarget {
                                message_id,
                                part_id: Some(part),
                            },
                            kind,
                        )
                    }
                    3 => (
                        messages.clone(),
                        RevertTarget {
                            message_id: unknown_message,
                            part_id: None,
                        },
                        TargetKind::UnknownMessage,
                    ),
                    4 => (
                        messages.clone(),
                        RevertTarget {
                            message_id,
                            part_id: Some(unknown_part),
                        },
                        TargetKind::UnknownPart,
                    ),
                    _ => (
                        messages.clone(),
                        RevertTarget {
                            message_id,
                            part_id: None,
                        },
                        TargetKind::Message,
                    ),
                }
            })
    })
}
