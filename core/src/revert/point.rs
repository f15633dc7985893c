//! Choosing the revert point (SPEC section 5) and what it hides.

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::model::{
    MessageId, MessageWithParts, Part, PartBody, PartId, PatchPart, Role, SnapshotId,
};

/// What a client asks to revert to.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RevertTarget {
    /// The message.
    #[serde(rename = "messageID")]
    pub message_id: MessageId,
    /// A part of it, for a part-level revert.
    #[serde(rename = "partID", default, skip_serializing_if = "Option::is_none")]
    pub part_id: Option<PartId>,
}

/// Where the hidden range starts: the descriptor's `{messageID, partID?}`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct RevertPoint {
    /// The first hidden message, or the message whose parts from `part_id` on are hidden.
    #[serde(rename = "messageID")]
    pub message_id: MessageId,
    /// The first hidden part of `message_id`.
    #[cfg_attr(feature = "openapi", schema(nullable = false))]
    #[serde(rename = "partID", default, skip_serializing_if = "Option::is_none")]
    pub part_id: Option<PartId>,
}

impl RevertPoint {
    /// The point a revert descriptor names.
    pub fn of(descriptor: &crate::model::RevertDescriptor) -> RevertPoint {
        RevertPoint {
            message_id: descriptor.message_id.clone(),
            part_id: descriptor.part_id.clone(),
        }
    }
}

/// What a caller saw of a session's history when it chose, from it, what to revert to or whether to
/// unrevert: the command line's `undo` and `redo`, whose target is the user message before or after the
/// revert point (reference §3.6). An operation given it goes on only while the session, read under the
/// operation's leases, still shows the same revert point and the same user messages; otherwise it is
/// refused (`Error::Stale`) before any file is touched, and the caller chooses again. So two `undo`s that
/// ran at once undo two turns, as one after the other would, not the same turn twice.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HistorySeen {
    revert: Option<RevertPoint>,
    users: Vec<MessageId>,
}

impl HistorySeen {
    /// The history of `session`, whose messages are `messages`.
    pub fn of(session: &crate::model::Session, messages: &[MessageWithParts]) -> HistorySeen {
        HistorySeen {
            revert: session.revert.as_ref().map(RevertPoint::of),
            users: messages
                .iter()
                .filter(|m| m.info.role == Role::User)
                .map(|m| m.info.id.clone())
                .collect(),
        }
    }

    /// `Ok` when `session` and `messages` (read under the operation's leases) show this history, the
    /// `Stale` error naming what changed when not.
    pub fn check(
        &self,
        session: &crate::model::Session,
        messages: &[MessageWithParts],
    ) -> Result<()> {
        let now = HistorySeen::of(session, messages);
        if now.revert != self.revert {
            return Err(Error::stale(&session.id, "the session's revert point"));
        }
        if now.users != self.users {
            return Err(Error::stale(&session.id, "the session's user messages"));
        }
        Ok(())
    }
}

/// OpenCode's rule (reference §3.2), with an unknown target a `NotFound` error: a target inside a turn moves
/// back to the turn's user message unless text or tool output precedes it in its own message.
///
/// `messages` must be in id order, each with its parts in id order.
pub fn select_revert_point(
    messages: &[MessageWithParts],
    target: &RevertTarget,
) -> Result<RevertPoint> {
    if !messages.iter().any(|m| m.info.id == target.message_id) {
        return Err(Error::NotFound(format!(
            "Message not found: {}",
            target.message_id
        )));
    }
    let mut last_user: Option<&MessageId> = None;
    for message in messages {
        if message.info.role == Role::User {
            last_user = Some(&message.info.id);
        }
        let fallback = last_user.unwrap_or(&message.info.id).clone();
        let Some(part_id) = &target.part_id else {
            if message.info.id == target.message_id {
                return Ok(RevertPoint {
                    message_id: fallback,
                    part_id: None,
                });
            }
            continue;
        };
        // As in OpenCode, the part id alone decides the match.
        for (index, part) in message.parts.iter().enumerate() {
            if &part.id == part_id {
                let keep = message.parts[..index].iter().any(Part::is_text_or_tool);
                return Ok(if keep {
                    RevertPoint {
                        message_id: message.info.id.clone(),
                        part_id: Some(part_id.clone()),
                    }
                } else {
                    RevertPoint {
                        message_id: fallback,
                        part_id: None,
                    }
                });
            }
        }
    }
    match &target.part_id {
        Some(part_id) => Err(Error::NotFound(format!("Part not found: {part_id}"))),
        None => Err(Error::NotFound(format!(
            "Message not found: {}",
            target.message_id
        ))),
    }
}

/// True when `part` of `message` lies in the hidden range of `point`.
pub fn is_hidden(point: &RevertPoint, message: &MessageId, part: Option<&PartId>) -> bool {
    if message > &point.message_id {
        return true;
    }
    if message < &point.message_id {
        return false;
    }
    match (&point.part_id, part) {
        (None, _) => true,
        (Some(first), Some(part)) => part >= first,
        (Some(_), None) => false,
    }
}

/// The patch parts in the hidden range, in order: exactly the patches a revert to `point` undoes.
pub fn hidden_patches<'a>(
    messages: &'a [MessageWithParts],
    point: &RevertPoint,
) -> Vec<&'a PatchPart> {
    messages
        .iter()
        .flat_map(|m| m.parts.iter().map(move |p| (m, p)))
        .filter(|(m, p)| is_hidden(point, &m.info.id, Some(&p.id)))
        .filter_map(|(_, p)| p.as_patch())
        .collect()
}

/// The steps in the hidden range of `point` whose end snapshot failed (SPEC 4: closed without a snapshot,
/// so with no patch): what they changed is not known, and a revert does not take it back. Each step's
/// start snapshot (`None` when that failed too), in order.
pub fn unrecorded_steps(
    messages: &[MessageWithParts],
    point: &RevertPoint,
) -> Vec<Option<SnapshotId>> {
    let mut started = None;
    let mut steps = Vec::new();
    for message in messages {
        for part in &message.parts {
            match &part.body {
                PartBody::StepStart(start) => started = Some(start.snapshot.clone()),
                PartBody::StepFinish(finish)
                    if finish.snapshot.is_none()
                        && is_hidden(point, &message.info.id, Some(&part.id)) =>
                {
                    steps.push(started.take().flatten());
                }
                PartBody::StepFinish(_) => started = None,
                _ => {}
            }
        }
    }
    steps
}

/// The steps in the hidden range of `point` closed with an end snapshot, reason `error` and no patch: what
/// a step whose start snapshot was lost from the store is closed with (SPEC 4: it could never be closed
/// otherwise). Their start and end snapshots, in order; whether the start is really lost is the store's to
/// say (an agent's step that ended in an error and changed nothing looks the same here).
pub fn steps_closed_without_a_patch(
    messages: &[MessageWithParts],
    point: &RevertPoint,
) -> Vec<(SnapshotId, SnapshotId)> {
    let mut steps = Vec::new();
    for message in messages {
        let mut started: Option<SnapshotId> = None;
        // The step closed last in this message, until a patch shows it recorded its changes.
        let mut closed: Option<(SnapshotId, SnapshotId)> = None;
        for part in &message.parts {
            match &part.body {
                PartBody::StepStart(start) => {
                    steps.extend(closed.take());
                    started = start.snapshot.clone();
                }
                PartBody::StepFinish(finish) => {
                    let start = started.take();
                    closed = match (start, &finish.snapshot) {
                        (Some(start), Some(end))
                            if finish.reason == "error"
                                && is_hidden(point, &message.info.id, Some(&part.id)) =>
                        {
                            Some((start, end.clone()))
                        }
                        _ => None,
                    };
                }
                PartBody::Patch(_) => closed = None,
                _ => {}
            }
        }
        steps.extend(closed);
    }
    steps
}

/// What cleanup removes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CleanupPlan {
    /// Whole messages, ascending.
    pub removed_messages: Vec<MessageId>,
    /// Parts cut from the kept message of a part-level point, ascending.
    pub removed_parts: Vec<(MessageId, PartId)>,
}

/// The hidden range of `point` as cleanup removes it.
pub fn cleanup_plan(messages: &[MessageWithParts], point: &RevertPoint) -> CleanupPlan {
    let mut plan = CleanupPlan::default();
    for message in messages {
        let id = &message.info.id;
        if id < &point.message_id {
            continue;
        }
        if id > &point.message_id || point.part_id.is_none() {
            plan.removed_messages.push(id.clone());
            continue;
        }
        for part in &message.parts {
            if is_hidden(point, id, Some(&part.id)) {
                plan.removed_parts.push((id.clone(), part.id.clone()));
            }
        }
    }
    plan
}
