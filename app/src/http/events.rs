//! The event stream (SPEC section 10): `GET /event` sends `server.connected`, then every event the relay
//! publishes, `server.heartbeat` every 10 s and `server.lagged {missed}` when the subscriber fell behind;
//! it ends when the server stops. The relay follows the database's outbox and publishes new rows in
//! order, so changes made by the command line or another server reach every stream.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use axum::Extension;
use axum::extract::State;
use axum::http::HeaderValue;
use axum::response::IntoResponse;
use axum::response::sse::{Event as SseEvent, Sse};
use futures::stream::{self, Stream, StreamExt};
use rewind_bus::BroadcastBus;
use rewind_core::id::IdGenerator;
use rewind_core::model::{Event, EventPayload, SessionId};
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

/// `GET /event`: every event, or with a worktree named (`?directory=` or `x-opencode-directory`, as
/// OpenCode's client sends its instance's), the server's own events and those of that worktree's sessions.
#[utoipa::path(get, path = "/event", params(DirectoryParam),
    responses((status = 200, description = "text/event-stream of {id, type, properties}", content_type = "text/event-stream", body = String)))]
pub async fn stream(
    State(state): State<AppState>,
    Extension(RequestDirectory(directory)): Extension<RequestDirectory>,
) -> Result<impl IntoResponse, ApiError> {
    let filter = match directory {
        Some(directory) => Some(Arc::new(WorktreeFilter {
            directory: normalise_directory(&directory)?,
            rewind: Arc::clone(&state.services.rewind),
            known: Mutex::default(),
        })),
        None => None,
    };
    // Subscribe before `server.connected` is sent, so nothing published after it is missed.
    let subscription = state.bus.subscribe();
    let ids = Arc::new(IdGenerator::new());
    let host = Arc::clone(&state.services.host);
    let server_event = {
        let ids = Arc::clone(&ids);
        move |payload: EventPayload| Event {
            id: ids.ascending(host.now_ms(), None),
            payload,
        }
    };
    let connected = stream::iter([server_event(EventPayload::ServerConnected {})]);
    let live = subscription
        .map({
            let server_event = server_event.clone();
            move |delivery| match delivery {
                Delivery::Event(event) => event,
                Delivery::Lagged { missed } => server_event(EventPayload::ServerLagged { missed }),
            }
        })
        .filter_map(move |event| {
            let filter = filter.clone();
            async move {
                match filter {
                    Some(filter) if !filter.keeps(&event).await => None,
                    _ => Some(event),
                }
            }
        });
    let heartbeat =
        heartbeats(state.heartbeat).map(move |()| server_event(EventPayload::ServerHeartbeat {}));
    let events = connected
        .chain(stream::select(live, heartbeat))
        .map(|event| Ok::<_, Infallible>(to_sse(&event)))
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

fn to_sse(event: &Event) -> SseEvent {
    match serde_json::to_string(event) {
        Ok(json) => SseEvent::default().data(json),
        Err(error) => {
            tracing::error!(%error, "cannot serialise an event");
            SseEvent::default().comment("an event could not be serialised")
        }
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
                    bus.publish(stored.event);
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
        let expected: Vec<Event> = rows[2..].iter().map(|r| r.event.clone()).collect();
        assert_eq!(received, expected, "events 3 and 4, once each, in order");
    }
}
