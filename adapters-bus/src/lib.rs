//! rewind-bus: live event delivery (`EventBus`) on a tokio broadcast channel.
//!
//! Publishing never blocks and never fails (with no subscriber the event is simply not delivered: durable
//! state is in the database's outbox). A subscriber that falls behind receives `Delivery::Lagged { missed }`
//! and continues with the oldest event still held; it should then re-read state. A subscription ends when
//! the bus is dropped and the subscriber has drained what was held.
//!
//! What the bus holds is bounded twice: by count (the channel's capacity, tokio's broadcast ring) and by
//! bytes. The ring lets go of an event once every subscriber has received it, but a subscriber that stops
//! reading (an event stream whose client stalled) keeps the last `capacity` events in memory, and one
//! event can be as large as a request body (a part of megabytes): 1,024 of them would be gigabytes. Each
//! slot therefore holds its event behind a shared cell, and the bus, which knows the events not yet
//! received by all (it keeps a weak reference to each), lets go of the oldest ones' contents once they pass
//! its byte budget; a subscriber that reaches a slot whose event was let go counts it as missed, exactly as
//! if the ring had overwritten it.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};

use futures::stream::{self, StreamExt};
use rewind_core::model::{Event, StoredEvent};
use rewind_core::{Delivery, EventBus, Subscription};
use tokio::sync::broadcast::{self, error::RecvError};

/// How many events a subscriber may fall behind before it is told it lagged.
pub const DEFAULT_CAPACITY: usize = 1024;

/// How many bytes of events (as JSON) the bus holds at most for subscribers that fall behind (the latest
/// event is always held, whatever its size).
pub const DEFAULT_BYTE_BUDGET: usize = 64 * 1024 * 1024;

/// One published event, as a slot of the ring holds it: emptied when the bus lets it go.
#[derive(Debug)]
struct Held {
    /// Shared, so a subscriber copies the event after letting go of the lock.
    event: Mutex<Option<Arc<StoredEvent>>>,
    bytes: usize,
}

impl Held {
    fn event(&self) -> MutexGuard<'_, Option<Arc<StoredEvent>>> {
        // A panic while the lock was held cannot leave an `Option` half-written.
        self.event.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The events the ring may still hold, oldest first, with their bytes, and the sum of those bytes. An
/// event every subscriber has received is gone from the ring (its weak reference is dead).
#[derive(Debug, Default)]
struct Budget {
    held: VecDeque<(Weak<Held>, usize)>,
    bytes: usize,
}

impl Budget {
    /// Forgets the oldest event.
    fn pop(&mut self) -> Option<Weak<Held>> {
        let (held, bytes) = self.held.pop_front()?;
        self.bytes -= bytes;
        Some(held)
    }

    /// Forgets the events every subscriber has received: subscribers read in order, so they are the oldest.
    fn prune(&mut self) {
        while self
            .held
            .front()
            .is_some_and(|(held, _)| held.strong_count() == 0)
        {
            self.pop();
        }
    }
}

/// The `EventBus` on a tokio broadcast channel.
#[derive(Debug, Clone)]
pub struct BroadcastBus {
    sender: broadcast::Sender<Arc<Held>>,
    capacity: usize,
    byte_budget: usize,
    budget: Arc<Mutex<Budget>>,
}

impl BroadcastBus {
    /// A bus holding at most `capacity` undelivered events per subscriber (at least 1), and at most
    /// [`DEFAULT_BYTE_BUDGET`] bytes of them.
    pub fn new(capacity: usize) -> Self {
        BroadcastBus::with_byte_budget(capacity, DEFAULT_BYTE_BUDGET)
    }

    /// A bus holding at most `capacity` undelivered events (at least 1), and at most `byte_budget` bytes of
    /// them, the latest event excepted.
    pub fn with_byte_budget(capacity: usize, byte_budget: usize) -> Self {
        // tokio rounds the ring's size up to a power of two: the budget counts what the ring really holds.
        let capacity = capacity.max(1).next_power_of_two();
        let (sender, _) = broadcast::channel(capacity);
        BroadcastBus {
            sender,
            capacity,
            byte_budget,
            budget: Arc::default(),
        }
    }

    /// How many subscriptions are open now.
    pub fn subscribers(&self) -> usize {
        self.sender.receiver_count()
    }

    /// How many bytes of events the bus holds now (events some subscriber has not received).
    pub fn held_bytes(&self) -> usize {
        let mut budget = self.budget();
        budget.prune();
        budget.bytes
    }

    fn budget(&self) -> MutexGuard<'_, Budget> {
        self.budget.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Default for BroadcastBus {
    fn default() -> Self {
        BroadcastBus::new(DEFAULT_CAPACITY)
    }
}

impl EventBus for BroadcastBus {
    fn publish(&self, event: StoredEvent) {
        let held = Arc::new(Held {
            bytes: json_bytes(&event.event),
            event: Mutex::new(Some(Arc::new(event))),
        });
        let mut budget = self.budget();
        budget.prune();
        budget.bytes += held.bytes;
        budget.held.push_back((Arc::downgrade(&held), held.bytes));
        // The ring overwrites its oldest slot when full: that event is no longer held.
        while budget.held.len() > self.capacity {
            budget.pop();
        }
        // Over the budget, the oldest events' contents go; their slots stay, empty.
        while budget.bytes > self.byte_budget && budget.held.len() > 1 {
            if let Some(gone) = budget.pop().and_then(|held| held.upgrade()) {
                gone.event().take();
            }
        }
        // Sent under the budget's lock, so slots enter the ring in the order they entered the budget.
        // An error only means nobody is subscribed right now.
        let _ = self.sender.send(held);
    }

    fn subscribe(&self) -> Subscription {
        let receiver = self.sender.subscribe();
        // The state: the receiver, and an event read after a run of missed ones, delivered after the
        // `Lagged` that reports them.
        stream::unfold(
            (receiver, None::<StoredEvent>),
            |(mut receiver, pending)| async move {
                if let Some(event) = pending {
                    return Some((Delivery::Event(event), (receiver, None)));
                }
                let mut missed = 0_u64;
                loop {
                    let delivery = match receiver.recv().await {
                        Ok(held) => {
                            // The lock is let go before the event is copied.
                            let event = held.event().clone();
                            match event {
                                Some(event) => Delivery::Event(StoredEvent::clone(&event)),
                                None => {
                                    missed += 1;
                                    continue;
                                }
                            }
                        }
                        Err(RecvError::Lagged(lagged)) => {
                            missed += lagged;
                            continue;
                        }
                        Err(RecvError::Closed) if missed > 0 => {
                            return Some((Delivery::Lagged { missed }, (receiver, None)));
                        }
                        Err(RecvError::Closed) => return None,
                    };
                    return Some(match delivery {
                        Delivery::Event(event) if missed > 0 => {
                            (Delivery::Lagged { missed }, (receiver, Some(event)))
                        }
                        delivery => (delivery, (receiver, None)),
                    });
                }
            },
        )
        .boxed()
    }
}

/// The length of `event` as JSON, counted without building it.
fn json_bytes(event: &Event) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0 += bytes.len();
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    // The payload alone (the id adds a few dozen bytes); a payload that cannot be written counts as empty.
    let _ = serde_json::to_writer(&mut count, &event.payload);
    count.0
}
