//! The event stream (SPEC section 10): `GET /event` sends `server.connected`, then every event the relay
//! publishes, `server.heartbeat` every 10 s and `server.lagged {missed}` when the subscriber fell behind;
//! it ends when the server stops. The relay follows the database's outbox and publishes new rows in
//! order, so changes made by the command line or another server reach every stream.
//!
//! Each outbox event's SSE frame carries its outbox position as `id:`. A client that reconnects with
//! `Last-Event-ID` (as OpenCode's client does after a broken connection) first receives the events
//! committed after that position, read from the outbox, then the live ones, none twice and none lost:
//! the stream subscribes before it reads the outbox, and passes over the live events the outbox gave it.
//! When the outbox no longer holds them all (`rewind gc` cut it) the replay starts with
//! `server.lagged {missed}`; a position past the outbox's end (another database) gives
//! `server.lagged {missed: 0}`, the count being unknown. Either way the client must re-read state.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
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
use rewind_core::model::{Event, EventPayload, SessionId, StoredEvent};
use rewind_core::service::{Rewind, normalise_directory};
use rewind_core::{Delivery, EventBus, HostPort, MessageRepo};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use super::AppState;
use super::dto::DirectoryParam;
use super::error::ApiError;
use super::security::RequestDirectory;

/// How many outbox rows the relay reads at once.
const RELAY_BATCH: u32 = 512;

/// How many outbox rows a resuming stream reads at once (a revert's events carry its diff: a stream holds
/// one batch at a time).
const REPLAY_BATCH: u32 = 64;

/// The header a reconnecting SSE client sends with the last `id:` it received.
const LAST_EVENT_ID: &str = "last-event-id";

/// `GET /event`: every event, or with a worktree named (`?directory=` or `x-opencode-directory`, as
/// OpenCode's client sends its instance's), the server's own events and those of that worktree's sessions.
/// With `Last-Event-ID`, first the events after that outbox position (see the module doc).
#[utoipa::path(get, path = "/event",
    params(DirectoryParam,
        ("Last-Event-ID" = Option<String>, Header, description = "the `id:` of the last event received: the stream first sends the events committed after it")),
    responses(
        (status = 200, description = "text/event-stream of {id, type, properties}; an outbox event's frame carries its outbox position as `id:`", content_type = "text/event-stream", body = String),
        (status = 400, description = "`Last-Event-ID` is not an outbox position")))]
pub async fn stream(
    State(state): State<AppState>,
    Extension(RequestDirectory(directory)): Extension<RequestDirectory>,
    headers: HeaderMap,
) -> Result<impl IntoResponse, ApiError> {
    let resume_after = last_event_id(&headers)?;
    let filter = match directory {
        Some(directory) => Some(Arc::new(WorktreeFilter {
            directory: normalise_directory(&directory)?,
            rewind: Arc::clone(&state.services.rewind),
            known: Mutex::default(),
        })),
        None => None,
    };
    // Subscribe before `server.connected` is sent and before the outbox is read, so nothing published after
    // it is missed.
    let subscription = state.bus.subscribe();
    let repo: Arc<dyn MessageRepo> = state.services.repo.clone();
    // The last outbox position sent: live events up to it came from the replay and are passed over.
    let sent = Arc::new(AtomicU64::new(0));
    let replay = match resume_after {
        Some(after) => Replay::start(repo, after, Arc::clone(&sent)).await?,
        None => Replay::none(),
    };
    let ids = Arc::new(IdGenerator::new());
    let host = Arc::clone(&state.services.host);
    let server_event = {
        let ids = Arc::clone(&ids);
        move |payload: EventPayload| Event {
            id: ids.ascending(host.now_ms(), None),
            payload,
        }
    };
    let connected = stream::iter([Ok(Frame::Server(server_event(
        EventPayload::ServerConnected {},
    )))]);
    let live = subscription.filter_map({
        let server_event = server_event.clone();
        let sent = Arc::clone(&sent);
        move |delivery| {
            let frame = match delivery {
                Delivery::Event(event) if event.seq <= sent.load(Ordering::Acquire) => None,
                Delivery::Event(event) => Some(Frame::Outbox(event)),
                Delivery::Lagged { missed } => {
                    Some(Frame::Server(server_event(EventPayload::ServerLagged {
                        missed,
                    })))
                }
            };
            futures::future::ready(frame.map(Ok))
        }
    });
    let replay = replay.into_stream({
        let server_event = server_event.clone();
        move |missed| server_event(EventPayload::ServerLagged { missed })
    });
    let kept = replay.chain(live).filter_map(move |frame| {
        let filter = filter.clone();
        let sent = Arc::clone(&sent);
        async move {
            if let Ok(Frame::Outbox(stored)) = &frame {
                sent.fetch_max(stored.seq, Ordering::AcqRel);
                if let Some(filter) = filter
                    && !filter.keeps(&stored.event).await
                {
                    return None;
                }
            }
            Some(frame)
        }
    });
    let heartbeat = heartbeats(state.heartbeat).map(move |()| {
        Ok(Frame::Server(server_event(
            EventPayload::ServerHeartbeat {},
        )))
    });
    let events = connected
        .chain(stream::select(kept, heartbeat))
        .map(|frame| frame.map(|frame| frame.to_sse()))
        .take_until(state.shutdown.clone().cancelled_owned());
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

/// Which events a stream opened for one worktree sends: the server's own, and those of sessions whose
/// directory is the worktree. A session's directory is learned from the events that carry the session,
/// else read once.
struct WorktreeFilter {
    /// The worktree, as sessions record it.
    directory: String,
    rewind: Arc<Rewind>,
    /// Whether each session seen so far is of the worktree.
    known: Mutex<HashMap<SessionId, bool>>,
}

impl WorktreeFilter {
    async fn keeps(&self, event: &Event) -> bool {
        let Some((id, info)) = event.payload.session() else {
            return true;
        };
        if let Some(info) = info {
            let ours = info.directory == self.directory;
            if matches!(event.payload, EventPayload::SessionDeleted { .. }) {
                // Its last event: the stream forgets it (the map holds only live sessions).
                self.known().remove(id);
            } else {
                self.known().insert(id.clone(), ours);
            }
            return ours;
        }
        let seen = self.known().get(id).copied();
        if let Some(ours) = seen {
            return ours;
        }
        match self.rewind.session(id).await {
            Ok(session) => {
                let ours = session.directory == self.directory;
                self.known().insert(id.clone(), ours);
                ours
            }
            // Deleted since: not sent, as its deletion (which carries its directory) was or will be.
            Err(rewind_core::Error::NotFound(_)) => false,
            // Not known now (the database busy, say): sent rather than lost, and asked again next time
            // (review).
            Err(_) => true,
        }
    }

    fn known(&self) -> std::sync::MutexGuard<'_, HashMap<SessionId, bool>> {
        self.known.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The outbox position in `Last-Event-ID`, if the header is there and not empty.
fn last_event_id(headers: &HeaderMap) -> Result<Option<u64>, ApiError> {
    let Some(value) = headers.get(LAST_EVENT_ID) else {
        return Ok(None);
    };
    let text = value.to_str().unwrap_or("\u{fffd}").trim();
    if text.is_empty() {
        return Ok(None);
    }
    text.parse().map(Some).map_err(|_| {
        ApiError::BadRequest(format!(
            "Last-Event-ID {text:?} is not an event position: send the `id:` of the last event this \
             stream sent (a number), or no Last-Event-ID for the live events only"
        ))
    })
}

/// One SSE frame: an outbox event, sent with its position as `id:`, or one of the stream's own.
enum Frame {
    Outbox(StoredEvent),
    Server(Event),
}

impl Frame {
    fn to_sse(&self) -> SseEvent {
        let (event, id) = match self {
            Frame::Outbox(stored) => (&stored.event, Some(stored.seq)),
            Frame::Server(event) => (event, None),
        };
        match serde_json::to_string(event) {
            Ok(json) => {
                let frame = SseEvent::default().data(json);
                match id {
                    Some(seq) => frame.id(seq.to_string()),
                    None => frame,
                }
            }
            Err(error) => {
                tracing::error!(%error, "cannot serialise an event");
                SseEvent::default().comment("an event could not be serialised")
            }
        }
    }
}

/// Why a resuming stream broke off: the outbox could not be read. The connection ends with an error, so
/// the client reconnects with the last position it received and the replay goes on from there.
#[derive(Debug, thiserror::Error)]
#[error("the event stream cannot read the outbox: {0}")]
struct ReplayBroken(String);

/// The outbox events a resuming stream sends before the live ones.
struct Replay {
    repo: Option<Arc<dyn MessageRepo>>,
    /// The first batch, read before the stream starts (so a database fault is the request's error).
    first: Vec<StoredEvent>,
    /// Reported first: how many events the outbox no longer holds, or 0 for a position past its end.
    lagged: Option<u64>,
    sent: Arc<AtomicU64>,
}

impl Replay {
    fn none() -> Self {
        Replay {
            repo: None,
            first: Vec::new(),
            lagged: None,
            sent: Arc::default(),
        }
    }

    /// Reads the first batch after `after`, and whether events before it are gone.
    async fn start(
        repo: Arc<dyn MessageRepo>,
        after: u64,
        sent: Arc<AtomicU64>,
    ) -> Result<Self, ApiError> {
        // The end is read first: an event committed after this read is past it, so the live stream (already
        // subscribed) delivers it even when the replay has nothing to send.
        let end = repo
            .last_event_seq()
            .await
            .map_err(|error| ApiError::from_core(error, None))?;
        let first = repo
            .events_after(after.min(end), REPLAY_BATCH)
            .await
            .map_err(|error| ApiError::from_core(error, None))?;
        let lagged = if after > end {
            // A position this outbox never reached (it keeps its newest event, so it cannot have been
            // emptied): another database's. The stream goes on from this outbox's end.
            Some(0)
        } else {
            // Positions have no gaps: a first event past `after + 1` means those between were deleted.
            first
                .first()
                .filter(|oldest| oldest.seq > after + 1)
                .map(|oldest| oldest.seq - after - 1)
        };
        // The replay reads on from here, and the live events up to where it ends are passed over.
        sent.store(after.min(end), Ordering::Release);
        Ok(Replay {
            repo: Some(repo),
            first,
            lagged,
            sent,
        })
    }

    /// The frames: the lag report, if any, then the events batch by batch until the outbox's end. `lag`
    /// makes the report's event.
    fn into_stream(
        self,
        lag: impl Fn(u64) -> Event + Send + 'static,
    ) -> impl Stream<Item = Result<Frame, ReplayBroken>> + Send {
        let lagged = stream::iter(self.lagged.map(|missed| Ok(Frame::Server(lag(missed)))));
        let Replay {
            repo, first, sent, ..
        } = self;
        let full = first.len() == REPLAY_BATCH as usize;
        let batches = stream::unfold((repo, Some(first), full), move |(repo, batch, more)| {
            let sent = Arc::clone(&sent);
            async move {
                let repo = repo?;
                if let Some(batch) = batch {
                    return Some((Ok(batch), (Some(repo), None, more)));
                }
                if !more {
                    return None;
                }
                match repo
                    .events_after(sent.load(Ordering::Acquire), REPLAY_BATCH)
                    .await
                {
                    Ok(batch) => {
                        let more = batch.len() == REPLAY_BATCH as usize;
                        Some((Ok(batch), (Some(repo), None, more)))
                    }
                    Err(error) => {
                        tracing::warn!(%error, "a resuming event stream cannot read the outbox");
                        Some((Err(ReplayBroken(error.to_string())), (None, None, false)))
                    }
                }
            }
        });
        let events = batches.flat_map(|batch| match batch {
            Ok(batch) => stream::iter(
                batch
                    .into_iter()
                    .map(|e| Ok(Frame::Outbox(e)))
                    .collect::<Vec<_>>(),
            ),
            Err(error) => stream::iter(vec![Err(error)]),
        });
        lagged.chain(events)
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
                let full = events.len() == RELAY_BATCH as usize;
                for stored in events {
                    cursor = stored.seq;
                    bus.publish(stored);
                }
                if full {
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
        let stop = CancellationToken::new();
        let stopper = stop.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(60)).await;
            stopper.cancel();
        });
        relay(
            Arc::new(repo),
            bus,
            cursor,
            Duration::from_millis(5),
            Arc::new(Notify::new()),
            stop,
        )
        .await;
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
}
