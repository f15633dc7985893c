//! The event stream (SPEC section 10): `GET /event` sends `server.connected`, then every event the relay
//! publishes, `server.heartbeat` every 10 s and `server.lagged {missed}` when events were lost for the
//! stream; it ends when the server stops, broken off rather than closed, so that a client reconnects (as
//! OpenCode's does after an error, and not after a clean end) and resumes from the server that comes
//! back. The relay follows the database's outbox and publishes new rows in order, so changes made by the
//! command line or another server reach every stream. `GET /global/event` is the same stream for every
//! worktree under the project roots, each frame wrapped as OpenCode's global stream wraps it.
//!
//! A stream knows its outbox position: the last event it sent or passed over (another worktree's). Each
//! outbox event's SSE frame carries its position as `id:`, and so do `server.connected` (where the stream
//! starts) and `server.heartbeat` (where it is), as `SEQ:EVENT_ID` (the position, and the id of the event
//! there: a position alone does not say which outbox it is in), as `0:ID` before the first event (ID an
//! event id made from the database's own identity, `origin`; `0` alone for a database without one), or as
//! the bare number a client resumed with (an earlier version's id) until the next event. A client that
//! reconnects with `Last-Event-ID` (as OpenCode's client does after a broken connection) first receives
//! the events committed after that position, read from the outbox, then the live ones, none twice and none
//! lost: the stream subscribes before it reads the outbox, and passes over the live events at or below its
//! position. A stream that falls behind the bus (the bus let events go, or a live event is not the next
//! position) catches up from the outbox the same way.
//!
//! `server.lagged {missed}` is sent only for events the outbox no longer holds (`rewind gc` cut them), and
//! then `missed` is how many were cut after the stream's position; also when the event at the client's own
//! position was cut, since its id can then not be checked (`missed` may then be 0). And it is sent as
//! `server.lagged {missed: 0}` for a position that is not this outbox's: a number past its end, another
//! event at that position than the id names (another database, or this one restored from a backup),
//! position 0 of another database, or not a position at all. Such a stream starts at the outbox's end,
//! and its `server.connected` carries no `id:` (a connection lost before the lag report must not resume
//! without it). Either way the client must re-read state. A bare number past 0 (an earlier version's id)
//! is taken as a position whose outbox cannot be checked: the events after it are sent after a
//! `server.lagged {missed: 0}`, or that alone at the outbox's end; a bare `0` is the start of this
//! outbox, as an earlier version sent it.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use axum::Extension;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue};
use axum::response::IntoResponse;
use axum::response::sse::{Event as SseEvent, Sse};
use futures::stream::{self, Stream, StreamExt};
use rewind_bus::BroadcastBus;
use rewind_core::id::IdGenerator;
use rewind_core::model::{Event, EventId, EventPayload, SessionId, StoredEvent};
use rewind_core::service::{Rewind, normalise_directory};
use rewind_core::{Delivery, EventBus, HostPort, MessageRepo, Subscription};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use super::AppState;
use super::dto::DirectoryParam;
use super::error::ApiError;
use super::security::RequestDirectory;

/// How many outbox rows the relay reads at once.
const RELAY_BATCH: u32 = 512;

/// How many outbox rows a stream that catches up reads at once (a revert's events carry its diff: a
/// stream holds one batch at a time).
const CATCH_UP_BATCH: u32 = 16;

/// How many times a starting stream reads the outbox's end and the id of its event before it takes the end
/// without the id (each retry means gc cut that event meanwhile).
const END_READS: u32 = 3;

/// The header a reconnecting SSE client sends with the last `id:` it received.
const LAST_EVENT_ID: &str = "last-event-id";

/// `GET /event`: the server's own events and those of the sessions under the project roots, or with a
/// worktree named (`?directory=` or `x-opencode-directory`, as OpenCode's client sends its instance's),
/// those of that worktree's sessions.
/// With `Last-Event-ID`, first the events after that outbox position (see the module doc).
#[utoipa::path(get, path = "/event",
    params(DirectoryParam,
        ("Last-Event-ID" = Option<String>, Header, description = "the `id:` of the last event received: the stream first sends the events committed after it")),
    responses(
        (status = 200, description = "text/event-stream of {id, type, properties} (the schema is that of each frame's `data`); each frame but `server.lagged`'s carries the stream's outbox position as `id:` (`SEQ:EVENT_ID`, the position and the id of the event there; before the first event, `0:` and an id that stands for the database)", content_type = "text/event-stream", body = Event)))]
pub async fn stream(
    State(state): State<AppState>,
    Extension(RequestDirectory(directory)): Extension<RequestDirectory>,
    headers: HeaderMap,
) -> Result<impl IntoResponse, ApiError> {
    let scope = match directory {
        Some(directory) => Scope::Worktree(normalise_directory(&directory)?),
        None => Scope::Roots(Arc::clone(&state.roots)),
    };
    open(state, scope, &headers, Envelope::Bare).await
}

/// `GET /global/event`: OpenCode's stream of every worktree's events, which its client reads through
/// `client.global.event()` (an OpenCode route that SPEC 9 does not list). The events of `GET /event` with
/// no worktree named (those of the sessions under the project roots; a worktree named is checked by the
/// guard as on any route, then not used), each wrapped as OpenCode wraps it, `{directory, payload}`:
/// `directory` is the worktree of the event's session, `"global"` for the stream's own events. Positions,
/// resuming and lag as `GET /event`'s.
#[utoipa::path(get, path = "/global/event",
    params(
        ("Last-Event-ID" = Option<String>, Header, description = "the `id:` of the last event received: the stream first sends the events committed after it")),
    responses(
        (status = 200, description = "text/event-stream of {directory, payload: {id, type, properties}} (the schema is that of each frame's `data`); `id:` as on `GET /event`", content_type = "text/event-stream", body = GlobalFrame)))]
pub async fn global_stream(
    State(state): State<AppState>,
    headers: HeaderMap,
) -> Result<impl IntoResponse, ApiError> {
    let scope = Scope::Roots(Arc::clone(&state.roots));
    open(state, scope, &headers, Envelope::Global).await
}

/// How a stream's frames carry their events.
#[derive(Clone, Copy)]
enum Envelope {
    /// The event itself (`GET /event`).
    Bare,
    /// `{directory, payload}` (`GET /global/event`).
    Global,
}

/// The directory `GET /global/event` gives the stream's own events, as OpenCode's does.
const GLOBAL_DIRECTORY: &str = "global";

/// The event stream of the sessions `scope` covers, its frames as `envelope` says.
async fn open(
    state: AppState,
    scope: Scope,
    headers: &HeaderMap,
    envelope: Envelope,
) -> Result<impl IntoResponse + use<>, ApiError> {
    let filter = Some(Arc::new(SessionFilter {
        scope,
        rewind: Arc::clone(&state.services.rewind),
        repo: state.services.repo.clone(),
        known: Mutex::default(),
        ahead: tokio::sync::Mutex::default(),
    }));
    // Subscribe before `server.connected` is sent and before the outbox is read, so nothing published after
    // it is missed.
    let live = state.bus.subscribe();
    let origin = state.services.repo.database_identity().and_then(origin);
    let repo: Arc<dyn MessageRepo> = state.services.repo.clone();
    let start = Start::find(repo.as_ref(), resume_position(headers), origin.as_ref())
        .await
        .map_err(|error| ApiError::from_core(error, None))?;
    let ids = Arc::new(IdGenerator::new());
    let host = Arc::clone(&state.services.host);
    let server_event = move |payload: EventPayload| Event {
        id: ids.ascending(host.now_ms(), None),
        payload,
    };
    let mut heads = vec![Ok(Frame::Connected)];
    if start.foreign {
        heads.push(Ok(Frame::Lagged(0)));
    }
    let follower = Follower {
        repo,
        live,
        position: start.mark.seq,
        catching_up: start.catch_up,
        unchecked: start.unchecked,
        filter,
    }
    .into_stream();
    let heartbeat = heartbeats(state.heartbeat).map(|()| Ok(Frame::Heartbeat));
    // Where the client is: the position of the last frame it was sent, or passed over.
    let mut mark = start.mark;
    let events = stream::iter(heads)
        .chain(stream::select(follower, heartbeat))
        .filter_map(move |frame| {
            let sse = frame
                .map(|frame| {
                    let (payload, id) = match frame {
                        Frame::Outbox(stored, directory) => {
                            mark = Mark::of(&stored);
                            let directory = directory.as_deref().unwrap_or(GLOBAL_DIRECTORY);
                            return Some(to_sse(
                                &stored.event,
                                (envelope, directory),
                                Some(mark.to_id()),
                            ));
                        }
                        Frame::Passed(passed) => {
                            mark = passed;
                            return None;
                        }
                        // With a position not of this outbox, none: a connection lost before the
                        // `server.lagged` that follows must not resume without it.
                        Frame::Connected => (
                            EventPayload::ServerConnected {},
                            (!start.foreign).then(|| mark.to_id()),
                        ),
                        Frame::Heartbeat => (EventPayload::ServerHeartbeat {}, Some(mark.to_id())),
                        Frame::Lagged(missed) => (EventPayload::ServerLagged { missed }, None),
                    };
                    Some(to_sse(
                        &server_event(payload),
                        (envelope, GLOBAL_DIRECTORY),
                        id,
                    ))
                })
                .transpose();
            futures::future::ready(sse.map(|frame| frame.map_err(Broken::from)))
        })
        .take_until(state.shutdown.clone().cancelled_owned())
        // Only the shutdown ends the frames without an error (the heartbeats never end).
        .chain(stream::once(futures::future::ready(Err(Broken::Stopping))));
    Ok((
        [
            (
                "cache-control",
                HeaderValue::from_static("no-cache, no-transform"),
            ),
            ("x-accel-buffering", HeaderValue::from_static("no")),
        ],
        Sse::new(events),
    ))
}

/// A place in the outbox: a position, and the id of the event there when it is known. Sent as a frame's
/// `id:`, `SEQ:EVENT_ID`. Position 0, before the outbox's first event, has no event: its id there is the
/// database's own (`origin`), so a client that saw only an empty outbox is not fed another database's
/// events from the start either; `0` alone where the database has none.
#[derive(Clone, Debug, PartialEq)]
struct Mark {
    seq: u64,
    event: Option<EventId>,
}

impl Mark {
    fn of(stored: &StoredEvent) -> Mark {
        Mark {
            seq: stored.seq,
            event: Some(stored.event.id.clone()),
        }
    }

    /// The mark in a `Last-Event-ID`; `None` when it is no mark of this server's format.
    fn parse(text: &str) -> Option<Mark> {
        let (seq, event) = match text.split_once(':') {
            Some((seq, event)) => (seq, Some(EventId::parse(event).ok()?)),
            None => (text, None),
        };
        if seq.is_empty() || !seq.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        Some(Mark {
            seq: seq.parse().ok()?,
            event,
        })
    }

    fn to_id(&self) -> String {
        match &self.event {
            Some(event) => format!("{}:{}", self.seq, event.as_str()),
            None => self.seq.to_string(),
        }
    }
}

/// The id that stands for the database `identity` (`SqlRepo::database_identity`, drawn when it was first
/// migrated) at position 0 of its outbox, where no event is: an event id made from it, the same in every
/// process and version (FNV-1a, not the standard library's hasher, whose output may change).
fn origin(identity: &str) -> Option<EventId> {
    const DIGITS: &[u8] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
    let hash = |salt: u8| {
        identity
            .bytes()
            .chain([salt])
            .fold(0xcbf2_9ce4_8422_2325_u64, |hash, byte| {
                (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
            })
    };
    let mut text = format!("evt_{:012x}", hash(0) & 0xffff_ffff_ffff);
    let (mut high, mut low) = (hash(1), hash(2));
    for round in 0..14 {
        let word = if round < 7 { &mut high } else { &mut low };
        text.push(char::from(DIGITS[(*word % 62) as usize]));
        *word /= 62;
    }
    EventId::parse(&text).ok()
}

/// What a reconnecting client asks for.
#[derive(Clone, Debug, PartialEq)]
enum Resume {
    /// The events after this place in the outbox.
    After(Mark),
    /// A `Last-Event-ID` that is no outbox place (not of this server's format): some other server's.
    Foreign,
}

/// The place in `Last-Event-ID`, if the header is there and not empty. A value that is not one is not
/// refused: OpenCode's client would send it again on every retry, for good, and never receive an event;
/// it is told it lagged instead.
fn resume_position(headers: &HeaderMap) -> Option<Resume> {
    let value = headers.get(LAST_EVENT_ID)?;
    let text = value.to_str().map(str::trim).unwrap_or("?");
    if text.is_empty() {
        return None;
    }
    Some(Mark::parse(text).map_or(Resume::Foreign, Resume::After))
}

/// Where a stream starts in the outbox.
#[derive(Debug, PartialEq)]
struct Start {
    /// The place it starts after.
    mark: Mark,
    /// Whether the outbox holds events after it that the live stream will not bring.
    catch_up: bool,
    /// Whether the client's position was not this outbox's: it is told it lagged.
    foreign: bool,
    /// Whether the event at the client's position was cut, so the position could not be checked: the
    /// catch-up reports a lag even where no event after it is gone (it may be another outbox's).
    unchecked: bool,
}

impl Start {
    /// Reads the outbox's end, which must come after subscribing to the bus: every event past it is
    /// delivered live.
    /// `origin`: the id that stands for this database at position 0 (`origin`).
    async fn find(
        repo: &dyn MessageRepo,
        resume: Option<Resume>,
        origin: Option<&EventId>,
    ) -> rewind_core::Result<Start> {
        let mut attempts = 0;
        let end = loop {
            let seq = repo.last_event_seq().await?;
            if seq == 0 {
                break Mark {
                    seq,
                    event: origin.cloned(),
                };
            }
            let event = repo.event_id_at(seq).await?;
            attempts += 1;
            // Cut between the two reads: a later event was committed (the newest is never cut). Read again;
            // past a few tries, the end is a bare position (sent unchecked, as an earlier version's).
            if event.is_some() || attempts == END_READS {
                break Mark { seq, event };
            }
        };
        let from = match resume {
            None => {
                return Ok(Start {
                    mark: end,
                    catch_up: false,
                    foreign: false,
                    unchecked: false,
                });
            }
            Some(Resume::After(after)) => after,
            Some(Resume::Foreign) => return Ok(Start::foreign(end)),
        };
        // Past the end: the outbox never reached it (it keeps its newest event, so it was not emptied).
        if from.seq > end.seq {
            return Ok(Start::foreign(end));
        }
        let mut unchecked = false;
        // A bare position past 0 (an earlier version's id, or a number sent by hand): which outbox it is in
        // cannot be checked, so the client is told to re-read state, with the events after it (event stream
        // review: another database's number replayed this one's events without a word). At the end there
        // is nothing to send after it: a lag alone.
        if from.event.is_none() && from.seq > 0 {
            if from.seq == end.seq {
                return Ok(Start::foreign(end));
            }
            unchecked = true;
        }
        if let Some(event) = &from.event {
            // At the end, its id was read just now; at 0 it is the database's own.
            let held = if from.seq == 0 {
                origin.cloned()
            } else if from.seq == end.seq {
                end.event.clone()
            } else {
                repo.event_id_at(from.seq).await?
            };
            match held {
                // Another event there: another database's outbox, or this one restored from a backup.
                Some(held) if held != *event => return Ok(Start::foreign(end)),
                Some(_) => {}
                // Cut (it is not the end, which is never cut), or no id for this database: nothing to
                // check against, which the catch-up says (there is none at the end).
                None => unchecked = from.seq < end.seq,
            }
        }
        // A bare 0 (an earlier version's) is sent on as this database's own.
        let mark = match from.seq {
            0 => Mark {
                seq: 0,
                event: origin.cloned(),
            },
            _ => from,
        };
        Ok(Start {
            catch_up: mark.seq < end.seq,
            mark,
            foreign: false,
            unchecked,
        })
    }

    /// The start for a client whose place is not in this outbox: the end, with a lag report.
    fn foreign(end: Mark) -> Start {
        Start {
            mark: end,
            catch_up: false,
            foreign: true,
            unchecked: false,
        }
    }
}

/// One frame of a stream, before it is sent.
#[derive(Debug, PartialEq)]
enum Frame {
    /// An outbox event, sent with its position as `id:`, and the worktree of its session when the stream's
    /// filter learned it.
    Outbox(StoredEvent, Option<Arc<str>>),
    /// An outbox event the session filter passed over: not sent, but the position moves past it.
    Passed(Mark),
    Connected,
    Heartbeat,
    /// `missed` events are gone from the outbox, or the client's position was not this outbox's (0).
    Lagged(u64),
}

/// The SSE frame of `event`, wrapped as `envelope` says (`directory` is its session's worktree there).
fn to_sse(event: &Event, (envelope, directory): (Envelope, &str), id: Option<String>) -> SseEvent {
    let json = match envelope {
        Envelope::Bare => serde_json::to_string(event),
        Envelope::Global => serde_json::to_string(&GlobalFrame {
            directory,
            payload: event,
        }),
    };
    match json {
        Ok(json) => {
            let frame = SseEvent::default().data(json);
            match id {
                Some(id) => frame.id(id),
                None => frame,
            }
        }
        Err(error) => {
            tracing::error!(%error, "cannot serialise an event");
            SseEvent::default().comment("an event could not be serialised")
        }
    }
}

/// An event as `GET /global/event` sends it.
#[derive(serde::Serialize, utoipa::ToSchema)]
pub struct GlobalFrame<'a> {
    /// The worktree of the event's session; `global` for the stream's own events.
    directory: &'a str,
    /// The event.
    payload: &'a Event,
}

/// Why a stream broke off: the outbox could not be read while it caught up. The response ends with an
/// error, so the client reconnects with the last position it received and the stream goes on from there.
#[derive(Debug, thiserror::Error)]
#[error("the event stream cannot read the outbox: {0}")]
struct CatchUpFailed(String);

/// Why a stream's response ends with an error: its connection breaks off, and a client that sees that
/// reconnects with the last position it received.
#[derive(Debug, thiserror::Error)]
enum Broken {
    #[error(transparent)]
    CatchUp(#[from] CatchUpFailed),
    /// The server stops: the client reconnects to the one that comes back and resumes there.
    #[error("the server is stopping")]
    Stopping,
}

/// Follows the outbox for one stream: the live events from the bus, in position order, and the outbox's
/// rows whenever the live events alone would leave a gap.
struct Follower {
    repo: Arc<dyn MessageRepo>,
    live: Subscription,
    /// The last position dealt with (sent or passed over).
    position: u64,
    /// Whether the next frames come from the outbox rather than the bus.
    catching_up: bool,
    /// Whether the next outbox read reports a lag even without a gap (`Start::unchecked`).
    unchecked: bool,
    filter: Option<Arc<SessionFilter>>,
}

impl Follower {
    /// The frames, until the bus ends or the outbox cannot be read (then the last item is the error).
    fn into_stream(self) -> impl Stream<Item = Result<Frame, CatchUpFailed>> + Send {
        stream::unfold(Some(self), |follower| async move {
            let mut follower = follower?;
            let frames = follower.next().await?;
            let failed = frames.iter().any(Result::is_err);
            Some((stream::iter(frames), (!failed).then_some(follower)))
        })
        .flatten()
    }

    /// The next frames; `None` when the bus ended.
    async fn next(&mut self) -> Option<Vec<Result<Frame, CatchUpFailed>>> {
        loop {
            if self.catching_up {
                return Some(self.read_outbox().await);
            }
            match self.live.next().await? {
                Delivery::Event(stored) if stored.seq <= self.position => {}
                Delivery::Event(stored) if stored.seq == self.position + 1 => {
                    return Some(vec![Ok(self.frame(stored).await)]);
                }
                // Events the bus let go, or a gap before this one: the outbox has them (or says they are
                // gone).
                Delivery::Event(_) | Delivery::Lagged { .. } => self.catching_up = true,
            }
        }
    }

    /// The next rows of the outbox after the position, with a lag report first when some are gone.
    async fn read_outbox(&mut self) -> Vec<Result<Frame, CatchUpFailed>> {
        let rows = match self.repo.events_after(self.position, CATCH_UP_BATCH).await {
            Ok(rows) => rows,
            Err(error) => {
                tracing::warn!(%error, "an event stream cannot read the outbox; it ends, to be resumed");
                return vec![Err(CatchUpFailed(error.to_string()))];
            }
        };
        // A short answer may stop before the end (large events): only an empty one ends the catch-up.
        self.catching_up = !rows.is_empty();
        let mut frames = Vec::with_capacity(rows.len() + 1);
        // Positions have no gaps: a first row past the next position means those between were cut.
        let gap = rows
            .first()
            .map_or(0, |first| first.seq.saturating_sub(self.position + 1));
        // Taken whatever the gap: a lag is reported once, not again by the read after.
        let unchecked = std::mem::take(&mut self.unchecked);
        if gap > 0 || unchecked {
            frames.push(Ok(Frame::Lagged(gap)));
        }
        for row in rows {
            frames.push(Ok(self.frame(row).await));
        }
        frames
    }

    /// The frame of the next event, which moves the position.
    async fn frame(&mut self, stored: StoredEvent) -> Frame {
        self.position = stored.seq;
        match &self.filter {
            Some(filter) => match filter.keeps(stored.seq, &stored.event).await {
                Kept::Sent(directory) => Frame::Outbox(stored, directory),
                Kept::Passed => Frame::Passed(Mark::of(&stored)),
            },
            None => Frame::Outbox(stored, None),
        }
    }
}

/// Which events a stream opened for one worktree sends: the server's own, and those of sessions whose
/// directory is the worktree. A session's directory is learned from the events that carry the session,
/// else read once, else (a session deleted since) from the outbox's later events.
struct SessionFilter {
    /// Whose sessions' events the stream carries.
    scope: Scope,
    rewind: Arc<Rewind>,
    repo: Arc<dyn MessageRepo>,
    /// The worktree of each session seen so far that is in the scope, `None` for one that is not.
    known: Mutex<HashMap<SessionId, Option<Arc<str>>>>,
    /// What the outbox's later events say of sessions' directories, read ahead for sessions deleted since.
    ahead: tokio::sync::Mutex<Ahead>,
}

/// What a stream's filter does with an event.
enum Kept {
    /// Sent, with its session's worktree (`None` for an event of no session).
    Sent(Option<Arc<str>>),
    /// Passed over: its session is not in the stream's scope.
    Passed,
}

/// The directories of the sessions the outbox's events up to a position carry, read ahead of a stream.
#[derive(Default)]
struct Ahead {
    /// The last position read.
    read_to: u64,
    directories: HashMap<SessionId, String>,
}

/// The sessions a stream carries the events of.
enum Scope {
    /// Those of one worktree, as sessions record it (a stream that named one).
    Worktree(String),
    /// Those whose worktree lies under a project root (a stream that named none): the command line
    /// records sessions of any directory in the same database, and the session routes refuse those
    /// outside the roots; their events, which carry their messages and diffs, are not streamed either.
    Roots(Arc<Vec<std::path::PathBuf>>),
}

impl Scope {
    /// `directory` as the stream names it when the scope covers it.
    fn covering(&self, directory: &str) -> Option<Arc<str>> {
        let covers = match self {
            Scope::Worktree(worktree) => directory == worktree,
            Scope::Roots(roots) => super::security::under_roots(Path::new(directory), roots),
        };
        covers.then(|| Arc::from(directory))
    }

    /// What an event of a session whose worktree is not known now gets: for a worktree's stream, sent
    /// (with that worktree) rather than lost; for the roots', passed over, as the session routes refuse a
    /// session they cannot read.
    fn unknown(&self) -> Kept {
        match self {
            Scope::Worktree(worktree) => Kept::Sent(Some(Arc::from(worktree.as_str()))),
            Scope::Roots(_) => Kept::Passed,
        }
    }
}

impl Kept {
    /// An event of a session whose worktree is `ours` when the stream covers it, `None` when not.
    fn of(ours: Option<Arc<str>>) -> Kept {
        ours.map_or(Kept::Passed, |directory| Kept::Sent(Some(directory)))
    }
}

impl SessionFilter {
    async fn keeps(&self, seq: u64, event: &Event) -> Kept {
        let Some((id, info)) = event.payload.session() else {
            return Kept::Sent(None);
        };
        let learned = |ours: Option<Arc<str>>| {
            self.known().insert(id.clone(), ours.clone());
            Kept::of(ours)
        };
        if let Some(info) = info {
            let ours = self.scope.covering(&info.directory);
            if matches!(event.payload, EventPayload::SessionDeleted { .. }) {
                // Its last event: the stream forgets it (the map holds only live sessions).
                self.known().remove(id);
                return Kept::of(ours);
            }
            return learned(ours);
        }
        let seen = self.known().get(id).cloned();
        if let Some(ours) = seen {
            return Kept::of(ours);
        }
        match self.rewind.session(id).await {
            Ok(session) => learned(self.scope.covering(&session.directory)),
            // Deleted since: its directory is that of its later events, its deletion's at the latest
            // (review: a stream resumed before a session's creation passed over its events until then).
            // When the outbox no longer holds any, the events are not sent.
            Err(rewind_core::Error::NotFound(_)) => match self.directory_ahead(id, seq).await {
                Ok(Some(directory)) => learned(self.scope.covering(&directory)),
                Ok(None) => Kept::Passed,
                // The outbox not read now: as below.
                Err(_) => self.scope.unknown(),
            },
            // Not known now (the database busy, say): as `Scope::unknown` says, and asked again next time
            // (review).
            Err(_) => self.scope.unknown(),
        }
    }

    /// The directory the outbox's events after position `seq` give session `id`, reading ahead as far as
    /// needed, once per stream: what was read stays for the next session asked about.
    async fn directory_ahead(
        &self,
        id: &SessionId,
        seq: u64,
    ) -> rewind_core::Result<Option<String>> {
        let mut ahead = self.ahead.lock().await;
        ahead.read_to = ahead.read_to.max(seq);
        loop {
            if let Some(directory) = ahead.directories.get(id) {
                return Ok(Some(directory.clone()));
            }
            let rows = self
                .repo
                .events_after(ahead.read_to, CATCH_UP_BATCH)
                .await?;
            let Some(last) = rows.last().map(|row| row.seq) else {
                return Ok(None);
            };
            for row in rows {
                if let Some((session, Some(info))) = row.event.payload.session() {
                    ahead
                        .directories
                        .entry(session.clone())
                        .or_insert_with(|| info.directory.clone());
                }
            }
            ahead.read_to = last;
        }
    }

    fn known(&self) -> std::sync::MutexGuard<'_, HashMap<SessionId, Option<Arc<str>>>> {
        self.known.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Ticks every `period`, the first one after `period`.
fn heartbeats(period: Duration) -> impl Stream<Item = ()> + Send {
    stream::unfold((), move |()| async move {
        tokio::time::sleep(period).await;
        Some(((), ()))
    })
}

/// The outbox position after the last committed event: where a starting relay begins.
pub async fn outbox_end(repo: &dyn MessageRepo) -> rewind_core::Result<u64> {
    repo.last_event_seq().await
}

/// Follows the outbox from `cursor` and publishes each new event, in order, until `stop`; polls every
/// `interval`, or at once when woken. While nobody is subscribed, the events are passed over unread.
pub async fn relay(
    repo: Arc<dyn MessageRepo>,
    bus: Arc<BroadcastBus>,
    mut cursor: u64,
    interval: Duration,
    wake: Arc<Notify>,
    stop: CancellationToken,
) {
    loop {
        if bus.subscribers() == 0 {
            // Nobody to deliver to: the cursor moves to the end of the outbox without reading the events (a
            // revert's two events carry its whole diff, and decoding them would take a core from the next
            // request), and the relay waits again. The end is read before the subscribers are counted
            // again, so every event committed after someone subscribed is still read and published.
            match repo.last_event_seq().await {
                Ok(last) if bus.subscribers() == 0 => {
                    cursor = cursor.max(last);
                    if wait(&stop, &wake, interval).await {
                        return;
                    }
                    continue;
                }
                Ok(_) => {}
                Err(error) => {
                    tracing::warn!(%error, "the outbox relay cannot read the outbox's end; retrying")
                }
            }
        }
        match repo.events_after(cursor, RELAY_BATCH).await {
            Ok(events) => {
                // A short answer may stop before the end (large events): read on until an empty one.
                let any = !events.is_empty();
                for stored in events {
                    cursor = stored.seq;
                    bus.publish(stored);
                }
                if any {
                    continue;
                }
            }
            Err(error) => {
                tracing::warn!(%error, "the outbox relay cannot read new events; retrying")
            }
        }
        if wait(&stop, &wake, interval).await {
            return;
        }
    }
}

/// Waits until the relay is woken or `interval` has passed; true when it is to stop instead.
async fn wait(stop: &CancellationToken, wake: &Notify, interval: Duration) -> bool {
    tokio::select! {
        () = stop.cancelled() => true,
        () = wake.notified() => false,
        () = tokio::time::sleep(interval) => false,
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use rewind_core::id::IdGenerator;
    use rewind_core::model::{EventId, StoredEvent};
    use rewind_core::ports::MockMessageRepo;

    use super::*;

    /// Outbox rows 1 to `n`.
    fn outbox(n: u64) -> Vec<StoredEvent> {
        let ids = IdGenerator::new();
        (1..=n)
            .map(|seq| StoredEvent {
                seq,
                event: Event {
                    id: ids.ascending::<EventId>(seq, None),
                    payload: EventPayload::ServerHeartbeat {},
                },
            })
            .collect()
    }

    /// Runs the relay from `cursor` until it has polled a few times, then stops it.
    async fn relay_briefly(repo: MockMessageRepo, bus: Arc<BroadcastBus>, cursor: u64) {
        relay_for(
            repo,
            bus,
            cursor,
            Duration::from_millis(5),
            Duration::from_millis(60),
        )
        .await;
    }

    /// Runs the relay from `cursor`, polling every `interval`, for `run`, then stops it.
    async fn relay_for(
        repo: MockMessageRepo,
        bus: Arc<BroadcastBus>,
        cursor: u64,
        interval: Duration,
        run: Duration,
    ) {
        let stop = CancellationToken::new();
        let stopper = stop.clone();
        tokio::spawn(async move {
            tokio::time::sleep(run).await;
            stopper.cancel();
        });
        relay(
            Arc::new(repo),
            bus,
            cursor,
            interval,
            Arc::new(Notify::new()),
            stop,
        )
        .await;
    }

    /// The outbox's end whose event is cut again and again under a starting stream (or a database that
    /// answers so) is taken as a bare position after a few reads, rather than read for good.
    #[tokio::test]
    async fn a_stream_start_reads_the_end_a_bounded_number_of_times() {
        let mut repo = MockMessageRepo::new();
        repo.expect_last_event_seq()
            .times(END_READS as usize)
            .returning(|| Ok(5));
        repo.expect_event_id_at()
            .times(END_READS as usize)
            .returning(|_| Ok(None));
        let start = Start::find(&repo, None, None).await.expect("start");
        assert_eq!(
            start.mark,
            Mark {
                seq: 5,
                event: None
            }
        );
    }

    #[tokio::test]
    async fn with_nobody_subscribed_the_relay_passes_over_the_events_unread() {
        let mut repo = MockMessageRepo::new();
        let polls = Arc::new(Mutex::new(0));
        let counted = polls.clone();
        repo.expect_last_event_seq().returning(move || {
            *counted.lock().expect("lock") += 1;
            Ok(7)
        });
        // Never asked for events up to the outbox's end: they are not read (nor, while nobody listens,
        // anything after it: the next poll moves to the end again).
        let asked = Arc::new(Mutex::new(Vec::new()));
        let seen = asked.clone();
        repo.expect_events_after().returning(move |after, _| {
            seen.lock().expect("lock").push(after);
            Ok(Vec::new())
        });
        relay_briefly(repo, Arc::new(BroadcastBus::default()), 2).await;
        let asked = asked.lock().expect("lock").clone();
        assert!(*polls.lock().expect("lock") > 1, "the relay polled");
        assert!(asked.iter().all(|&after| after == 7), "{asked:?}");
        assert!(
            asked.is_empty(),
            "one query a poll while nobody listens: {asked:?}"
        );
    }

    #[tokio::test]
    async fn a_subscriber_receives_every_event_after_the_cursor_in_order() {
        let rows = outbox(4);
        let mut repo = MockMessageRepo::new();
        repo.expect_last_event_seq().times(0);
        let served = rows.clone();
        repo.expect_events_after().returning(move |after, _| {
            Ok(served.iter().filter(|r| r.seq > after).cloned().collect())
        });
        let bus = Arc::new(BroadcastBus::default());
        let mut subscription = bus.subscribe();
        relay_briefly(repo, bus.clone(), 2).await;
        drop(bus);
        let mut received = Vec::new();
        while let Some(Delivery::Event(event)) = subscription.next().await {
            received.push(event);
        }
        assert_eq!(
            received,
            rows[2..],
            "events 3 and 4, once each, in order, with their positions"
        );
    }

    /// An adapter may answer with fewer events than asked (large ones): the relay reads on at once until
    /// an answer is empty, rather than waiting its interval after each short one.
    #[tokio::test]
    async fn the_relay_reads_on_past_short_answers() {
        let rows = outbox(30);
        let mut repo = MockMessageRepo::new();
        let served = rows.clone();
        repo.expect_events_after().returning(move |after, _| {
            Ok(served
                .iter()
                .filter(|r| r.seq > after)
                .take(1)
                .cloned()
                .collect())
        });
        let bus = Arc::new(BroadcastBus::default());
        let mut subscription = bus.subscribe();
        // An interval far past the test: only reading on delivers more than the first answer.
        relay_for(
            repo,
            bus.clone(),
            0,
            Duration::from_secs(3600),
            Duration::from_millis(200),
        )
        .await;
        drop(bus);
        let mut received = Vec::new();
        while let Some(Delivery::Event(event)) = subscription.next().await {
            received.push(event);
        }
        assert_eq!(received, rows, "every event, once, in order");
    }

    mod follower {
        //! A stream's follower over a real in-memory outbox and the broadcast bus, driven step by step so
        //! each interleaving of commits, publications and reads is the one named.

        use rewind_core::ports::{Change, Transaction};
        use rewind_core::testkit::MemRepo;

        use super::*;

        /// Commits `n` events, one transaction each, and returns them as the outbox holds them.
        async fn commit(repo: &MemRepo, ids: &IdGenerator, n: usize) -> Vec<StoredEvent> {
            let before = repo.last_event_seq().await.expect("end");
            for _ in 0..n {
                repo.commit(Transaction {
                    guards: Vec::new(),
                    changes: Vec::new(),
                    events: vec![Event {
                        id: ids.ascending(1_700_000_000_000, None),
                        payload: EventPayload::ServerHeartbeat {},
                    }],
                })
                .await
                .expect("commit");
            }
            repo.events_after(before, u32::MAX).await.expect("rows")
        }

        /// Commits `n` events and publishes them on `bus`, as the relay does.
        async fn relay_new(repo: &MemRepo, ids: &IdGenerator, bus: &BroadcastBus, n: usize) {
            for row in commit(repo, ids, n).await {
                bus.publish(row);
            }
        }

        async fn cut_through(repo: &MemRepo, seq: u64) {
            repo.commit(Transaction {
                guards: Vec::new(),
                changes: vec![Change::DeleteEventsThrough { seq }],
                events: Vec::new(),
            })
            .await
            .expect("cut");
        }

        fn follow(repo: &Arc<MemRepo>, live: Subscription, start: Start) -> Follower {
            Follower {
                repo: Arc::clone(repo) as Arc<dyn MessageRepo>,
                live,
                position: start.mark.seq,
                catching_up: start.catch_up,
                unchecked: start.unchecked,
                filter: None,
            }
        }

        /// The positions of the frames, `Lagged(n)` as `-n`.
        fn positions(frames: Vec<Result<Frame, CatchUpFailed>>) -> Vec<i64> {
            frames
                .into_iter()
                .map(|frame| match frame.expect("no failure") {
                    Frame::Outbox(stored, _) => stored.seq as i64,
                    Frame::Lagged(missed) => -(missed as i64),
                    other => panic!("unexpected {other:?}"),
                })
                .collect()
        }

        /// The frames until the follower has nothing ready.
        async fn drain(follower: &mut Follower) -> Vec<i64> {
            let mut all = Vec::new();
            while let Some(Some(frames)) = follower.next().now_or_never() {
                all.extend(positions(frames));
            }
            all
        }

        use futures::FutureExt;

        /// A position alone, as an earlier version sent it.
        fn bare(seq: u64) -> Resume {
            Resume::After(Mark { seq, event: None })
        }

        #[tokio::test]
        async fn a_stream_starts_at_the_outbox_end_or_after_the_clients_position() {
            let repo = MemRepo::new();
            let ids = IdGenerator::new();
            let rows = commit(&repo, &ids, 6).await;
            cut_through(&repo, 1).await;
            let marked = |seq: usize| Mark::of(&rows[seq - 1]);
            let at = |mark: Mark, catch_up, foreign| Start {
                mark,
                catch_up,
                foreign,
                unchecked: false,
            };
            let end = marked(6);
            let another: EventId = ids.ascending(1_700_000_000_000, None);
            for (resume, expected) in [
                (None, at(end.clone(), false, false)),
                (
                    Some(bare(0)),
                    at(
                        Mark {
                            seq: 0,
                            event: None,
                        },
                        true,
                        false,
                    ),
                ),
                // A bare position: which outbox it is in cannot be checked, which the catch-up says.
                (
                    Some(bare(2)),
                    Start {
                        unchecked: true,
                        ..at(
                            Mark {
                                seq: 2,
                                event: None,
                            },
                            true,
                            false,
                        )
                    },
                ),
                (Some(Resume::After(marked(3))), at(marked(3), true, false)),
                (
                    Some(Resume::After(marked(6))),
                    at(end.clone(), false, false),
                ),
                (Some(bare(9)), at(end.clone(), false, true)),
                (Some(Resume::Foreign), at(end.clone(), false, true)),
                // Another event at that position: another outbox's.
                (
                    Some(Resume::After(Mark {
                        seq: 3,
                        event: Some(another),
                    })),
                    at(end.clone(), false, true),
                ),
                // Its event cut: nothing to check the id against, so the catch-up reports a lag.
                (
                    Some(Resume::After(marked(1))),
                    Start {
                        unchecked: true,
                        ..at(marked(1), true, false)
                    },
                ),
            ] {
                let start = Start::find(&repo, resume.clone(), None)
                    .await
                    .expect("start");
                assert_eq!(start, expected, "{resume:?}");
            }
            let empty = MemRepo::new();
            assert_eq!(
                Start::find(&empty, None, None).await.expect("start"),
                at(
                    Mark {
                        seq: 0,
                        event: None
                    },
                    false,
                    false
                ),
                "an empty outbox's end has no event"
            );
        }

        /// Position 0 names the database (`origin`): a client that saw only another database's empty
        /// outbox starts at this one's end with a lag report, not at its first event.
        #[tokio::test]
        async fn position_zero_is_checked_against_the_databases_own_id() {
            let (mine, theirs) = (origin("a database"), origin("another database"));
            let (mine, theirs) = (mine.expect("an event id"), theirs.expect("an event id"));
            assert_eq!(
                origin("a database"),
                Some(mine.clone()),
                "the same every time"
            );
            assert_ne!(mine, theirs);
            let zero = |event: Option<&EventId>| Mark {
                seq: 0,
                event: event.cloned(),
            };
            let empty = MemRepo::new();
            let start = Start::find(&empty, None, Some(&mine)).await.expect("start");
            assert_eq!(
                start.mark,
                zero(Some(&mine)),
                "an empty outbox's end is its origin"
            );

            let repo = MemRepo::new();
            let rows = commit(&repo, &IdGenerator::new(), 3).await;
            let end = Mark::of(&rows[2]);
            for (resume, (mark, catch_up, foreign)) in [
                (zero(Some(&mine)), (zero(Some(&mine)), true, false)),
                (zero(Some(&theirs)), (end.clone(), false, true)),
                // As an earlier version sent it: taken unchecked, and sent on as this database's.
                (zero(None), (zero(Some(&mine)), true, false)),
            ] {
                let start = Start::find(&repo, Some(Resume::After(resume.clone())), Some(&mine))
                    .await
                    .expect("start");
                assert_eq!(
                    start,
                    Start {
                        mark,
                        catch_up,
                        foreign,
                        unchecked: false
                    },
                    "{resume:?}"
                );
            }
            // A bare position past 0: the events after it, with a lag said first; at the end, a lag alone.
            let bare = |seq| Some(Resume::After(Mark { seq, event: None }));
            let start = Start::find(&repo, bare(1), Some(&mine))
                .await
                .expect("start");
            assert!(
                start.unchecked && start.catch_up && !start.foreign && start.mark.seq == 1,
                "{start:?}"
            );
            let start = Start::find(&repo, bare(3), Some(&mine))
                .await
                .expect("start");
            assert_eq!(start, Start::foreign(end.clone()));
            // A database without an id: a position 0 that names one cannot be checked, which the
            // catch-up says; with nothing to catch up, there is nothing to say.
            let start = Start::find(&repo, Some(Resume::After(zero(Some(&theirs)))), None)
                .await
                .expect("start");
            assert!(start.unchecked && !start.foreign, "{start:?}");
            let start = Start::find(&empty, Some(Resume::After(zero(Some(&theirs)))), None)
                .await
                .expect("start");
            assert!(!start.unchecked && !start.foreign, "{start:?}");
        }

        #[test]
        fn last_event_id_is_a_position_or_foreign() {
            let read = |value: Option<&str>| {
                let mut headers = HeaderMap::new();
                if let Some(value) = value {
                    headers.insert(LAST_EVENT_ID, HeaderValue::from_str(value).expect("header"));
                }
                resume_position(&headers)
            };
            assert_eq!(read(None), None);
            assert_eq!(read(Some("")), None);
            assert_eq!(read(Some(" 12 ")), Some(bare(12)));
            assert_eq!(read(Some("0")), Some(bare(0)));
            let event: EventId = IdGenerator::new().ascending(1_700_000_000_000, None);
            let mark = Mark {
                seq: 7,
                event: Some(event.clone()),
            };
            assert_eq!(mark.to_id(), format!("7:{}", event.as_str()));
            assert_eq!(read(Some(&mark.to_id())), Some(Resume::After(mark)));
            assert_eq!(
                Mark {
                    seq: 0,
                    event: None
                }
                .to_id(),
                "0"
            );
            // Position 0 with the id that stands for a database there (`origin`).
            let zero = Mark {
                seq: 0,
                event: Some(event.clone()),
            };
            assert_eq!(read(Some(&zero.to_id())), Some(Resume::After(zero)));
            for foreign in [
                "evt_0123",
                "+5",
                "-1",
                "1 2",
                "99999999999999999999999",
                "7:",
                ":7",
                "7:evt_0123",
                &format!("x:{}", event.as_str()),
                &format!("7:{}:", event.as_str()),
            ] {
                assert_eq!(read(Some(foreign)), Some(Resume::Foreign), "{foreign}");
            }
        }

        #[tokio::test]
        async fn a_resumed_stream_sends_the_rows_after_its_position_in_batches_then_the_live_ones()
        {
            let repo = Arc::new(MemRepo::new());
            let ids = IdGenerator::new();
            let bus = BroadcastBus::default();
            let rows = commit(&repo, &ids, 40).await;
            let start = Start::find(repo.as_ref(), Some(Resume::After(Mark::of(&rows[2]))), None)
                .await
                .expect("start");
            let mut follower = follow(&repo, bus.subscribe(), start);
            let first = positions(follower.next().await.expect("frames"));
            assert_eq!(first, (4..=19).collect::<Vec<_>>(), "one batch");
            // Committed and relayed while the stream is between batches: read from the outbox, and its
            // live copy passed over.
            relay_new(&repo, &ids, &bus, 2).await;
            let rest = drain(&mut follower).await;
            assert_eq!(rest, (20..=42).collect::<Vec<_>>());
            // Then live.
            relay_new(&repo, &ids, &bus, 1).await;
            assert_eq!(drain(&mut follower).await, [43]);
        }

        #[tokio::test]
        async fn an_event_committed_as_the_stream_starts_is_sent_once_whichever_side_of_the_read() {
            for published_before_the_read in [true, false] {
                let repo = Arc::new(MemRepo::new());
                let ids = IdGenerator::new();
                let bus = BroadcastBus::default();
                let rows = commit(&repo, &ids, 3).await;
                let live = bus.subscribe();
                let start =
                    Start::find(repo.as_ref(), Some(Resume::After(Mark::of(&rows[0]))), None)
                        .await
                        .expect("start");
                // Event 4 is committed after the outbox's end was read.
                let late = commit(&repo, &ids, 1).await;
                if published_before_the_read {
                    bus.publish(late[0].clone());
                }
                let mut follower = follow(&repo, live, start);
                let mut got = positions(follower.next().await.expect("frames"));
                if !published_before_the_read {
                    bus.publish(late[0].clone());
                }
                got.extend(drain(&mut follower).await);
                assert_eq!(
                    got,
                    [2, 3, 4],
                    "published before the read: {published_before_the_read}"
                );
            }
        }

        #[tokio::test]
        async fn a_stream_that_falls_behind_the_bus_catches_up_from_the_outbox() {
            let repo = Arc::new(MemRepo::new());
            let ids = IdGenerator::new();
            let bus = BroadcastBus::new(2);
            let start = Start::find(repo.as_ref(), None, None).await.expect("start");
            let mut follower = follow(&repo, bus.subscribe(), start);
            // 40 events relayed while the stream does not read: the bus holds 2.
            relay_new(&repo, &ids, &bus, 40).await;
            assert_eq!(drain(&mut follower).await, (1..=40).collect::<Vec<_>>());
            relay_new(&repo, &ids, &bus, 1).await;
            assert_eq!(
                drain(&mut follower).await,
                [41],
                "live again, nothing twice"
            );
        }

        #[tokio::test]
        async fn only_the_events_the_outbox_no_longer_holds_are_reported_missed() {
            // Cut before the stream reads: its first read finds the gap.
            let repo = Arc::new(MemRepo::new());
            let ids = IdGenerator::new();
            let bus = BroadcastBus::new(2);
            let start = Start::find(repo.as_ref(), None, None).await.expect("start");
            let mut follower = follow(&repo, bus.subscribe(), start);
            relay_new(&repo, &ids, &bus, 30).await;
            cut_through(&repo, 10).await;
            let mut expected = vec![-10];
            expected.extend(11..=30);
            assert_eq!(drain(&mut follower).await, expected);

            // Cut between two batches of a resumed stream: the second read finds the gap.
            let repo = Arc::new(MemRepo::new());
            commit(&repo, &ids, 40).await;
            let start = Start::find(repo.as_ref(), Some(bare(0)), None)
                .await
                .expect("start");
            let mut follower = follow(&repo, bus.subscribe(), start);
            let first = positions(follower.next().await.expect("frames"));
            assert_eq!(first, (1..=16).collect::<Vec<_>>());
            cut_through(&repo, 30).await;
            let mut expected = vec![-14];
            expected.extend(31..=40);
            assert_eq!(drain(&mut follower).await, expected);
        }

        /// An adapter may answer a catch-up read with fewer events than asked (large ones): the stream
        /// reads on until an answer is empty, and sends each event once, in order, with no lag.
        #[tokio::test]
        async fn a_catch_up_reads_on_past_short_answers() {
            let rows = super::outbox(40);
            let mut repo = rewind_core::ports::MockMessageRepo::new();
            repo.expect_events_after().returning(move |after, _| {
                Ok(rows
                    .iter()
                    .filter(|r| r.seq > after)
                    .take(3)
                    .cloned()
                    .collect())
            });
            let bus = BroadcastBus::default();
            let mut follower = Follower {
                repo: Arc::new(repo),
                live: bus.subscribe(),
                position: 0,
                catching_up: true,
                unchecked: false,
                filter: None,
            };
            assert_eq!(drain(&mut follower).await, (1..=40).collect::<Vec<_>>());
        }

        #[tokio::test]
        async fn a_client_whose_event_was_cut_is_told_it_lagged_though_none_after_it_is_gone() {
            let ids = IdGenerator::new();
            let bus = BroadcastBus::default();
            // (cut through, what the stream sends): `Lagged(n)` as `-n`, so `0` is a lag of none.
            for (cut, expected) in [(5, vec![0, 6, 7, 8]), (7, vec![-2, 8])] {
                let repo = Arc::new(MemRepo::new());
                let rows = commit(&repo, &ids, 8).await;
                cut_through(&repo, cut).await;
                let start =
                    Start::find(repo.as_ref(), Some(Resume::After(Mark::of(&rows[4]))), None)
                        .await
                        .expect("start");
                let mut follower = follow(&repo, bus.subscribe(), start);
                assert_eq!(drain(&mut follower).await, expected, "cut through {cut}");
            }
        }

        #[tokio::test]
        async fn a_gap_in_the_live_events_is_filled_from_the_outbox() {
            // The relay passes events to the bus in order, but a stream that sees a position skipped (a
            // relay that fell behind a cut, say) reads the outbox rather than trust it.
            let repo = Arc::new(MemRepo::new());
            let ids = IdGenerator::new();
            let bus = BroadcastBus::default();
            let start = Start::find(repo.as_ref(), None, None).await.expect("start");
            let mut follower = follow(&repo, bus.subscribe(), start);
            let rows = commit(&repo, &ids, 3).await;
            bus.publish(rows[0].clone());
            bus.publish(rows[2].clone());
            assert_eq!(drain(&mut follower).await, [1, 2, 3]);
        }

        #[tokio::test]
        async fn a_stream_whose_outbox_read_fails_ends_with_the_error() {
            let mut repo = MockMessageRepo::new();
            repo.expect_events_after()
                .returning(|_, _| Err(rewind_core::Error::backend("database is locked")));
            let bus = BroadcastBus::default();
            let follower = Follower {
                repo: Arc::new(repo),
                live: bus.subscribe(),
                position: 3,
                catching_up: true,
                unchecked: false,
                filter: None,
            };
            let frames: Vec<_> = follower.into_stream().collect().await;
            assert_eq!(frames.len(), 1, "{frames:?}");
            let error = frames
                .into_iter()
                .next()
                .and_then(Result::err)
                .expect("an error");
            assert!(error.to_string().contains("database is locked"), "{error}");
        }
    }
}
