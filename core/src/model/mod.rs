//! rewind's domain types. Their serde shapes are OpenCode's (camelCase, optional fields left out): they are
//! both what is stored and what the HTTP API sends.

mod capture;
mod event;
mod lease;
mod message;
mod session;
mod snapshot;

pub use crate::id::{EventId, MessageId, PartId, SessionId};
pub use capture::Capture;
pub use event::{Event, EventPayload, SessionStatus, StoredEvent};
pub use lease::{
    Holder, HolderKind, IntentOperation, IntentRecord, Lease, LeaseKey, LeaseTake, LeaseToken,
    ProcessIdentity, Replacing, may_take_over, worktrees_overlap,
};
pub use message::{
    Message, MessageHead, MessageTime, MessageWithParts, Part, PartBody, PatchPart, Role,
    StepFinishPart, StepStartPart, TextPart, ToolPart,
};
pub use session::{
    DiffSummary, OpenStep, RevertDescriptor, RevertHistoryEntry, Session, SessionFields,
    SessionTime, TokenCache, Tokens, Warning,
};
pub use snapshot::{
    FileAction, FileActionKind, FileDiff, FileStatus, GcReport, KeptPath, RelPath, RestoreOutcome,
    RevertDiffs, RevertOutcome, SkipReason, SkippedPath, SnapshotId, SnapshotPatch, TrackOutcome,
    diff_file_headers, diff_git_line, diff_side,
};
