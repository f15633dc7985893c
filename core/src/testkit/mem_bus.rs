//! An in-memory `EventBus`: a fixed-capacity ring buffer with tokio broadcast's lossy semantics, but no
//! runtime.
//!
//! The bus keeps the last `capacity` events. Each subscriber has a cursor (the position of the next event it
//! reads); publishing never waits for anyone. A subscriber whose cursor fell out of the buffer is told how
//! many events it missed (`Delivery::Lagged`) and continues from the oldest event still held.

use std::collections::{BTreeMap, VecDeque};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};

use futures_core::Stream;

use crate::model::StoredEvent;
use crate::ports::{Delivery, EventBus, Subscription};

/// The capacity of `MemBus::default()`.
pub const DEFAULT_CAPACITY: usize = 256;

#[derive(Debug, Default)]
struct Ring {
    /// The held events: positions `published - events.len() .. published`.
    events: VecDeque<StoredEvent>,
    /// How many events were ever published: the position the next one gets.
    published: u64,
    /// The wakers of subscribers waiting for the next event, by subscriber number.
    waiting: BTreeMap<u64, Waker>,
    /// Set when the bus is dropped: subscribers end once they have drained what is held.
    closed: bool,
}

impl Ring {
    fn oldest(&self) -> u64 {
        self.published - self.events.len() as u64
    }
}

#[derive(Debug)]
struct Shared {
    capacity: usize,
    ring: Mutex<Ring>,
    next_subscriber: AtomicU64,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Ring> {
        // Every update of the ring is completed before the lock is released, so a poisoned lock still guards a
        // consistent ring.
        self.ring
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// An in-memory `EventBus` (see the module doc). Share it behind an `Arc`; dropping it ends every
/// subscription once the subscriber has read what is still held.
#[derive(Debug)]
pub struct MemBus {
    shared: Arc<Shared>,
}

impl MemBus {
    /// A bus holding the last `capacity` events for slow subscribers (at least one).
    pub fn new(capacity: usize) -> Self {
        MemBus {
            shared: Arc::new(Shared {
                capacity: capacity.max(1),
                ring: Mutex::new(Ring::default()),
                next_subscriber: AtomicU64::new(0),
            }),
        }
    }

    /// How many events the bus holds for slow subscribers.
    pub fn capacity(&self) -> usize {
        self.shared.capacity
    }
}

impl Default for MemBus {
    /// A bus of `DEFAULT_CAPACITY`.
    fn default() -> Self {
        MemBus::new(DEFAULT_CAPACITY)
    }
}

fn wake_all(wakers: BTreeMap<u64, Waker>) {
    for waker in wakers.into_values() {
        waker.wake();
    }
}

impl Drop for MemBus {
    fn drop(&mut self) {
        let wakers = {
            let mut ring = self.shared.lock();
            ring.closed = true;
            std::mem::take(&mut ring.waiting)
        };
        wake_all(wakers);
    }
}

impl EventBus for MemBus {
    fn publish(&self, event: StoredEvent) {
        let wakers = {
            let mut ring = self.shared.lock();
            ring.events.push_back(event);
            if ring.events.len() > self.shared.capacity {
                ring.events.pop_front();
            }
            ring.published += 1;
            std::mem::take(&mut ring.waiting)
        };
        // Woken outside the lock, so a waker that polls at once does not find the ring locked.
        wake_all(wakers);
    }

    fn subscribe(&self) -> Subscription {
        let number = self.shared.next_subscriber.fetch_add(1, Ordering::Relaxed);
        let cursor = self.shared.lock().published;
        Box::pin(MemSubscription {
            shared: Arc::clone(&self.shared),
            number,
            cursor,
        })
    }
}

/// One subscriber's stream over a `MemBus`.
struct MemSubscription {
    shared: Arc<Shared>,
    number: u64,
    /// The position of the next event this subscriber reads.
    cursor: u64,
}

impl Stream for MemSubscription {
    type Item = Delivery;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Delivery>> {
        let this = self.get_mut();
        let mut ring = this.shared.lock();
        let oldest = ring.oldest();
        if this.cursor < oldest {
            let missed = oldest - this.cursor;
            this.cursor = oldest;
            return Poll::Ready(Some(Delivery::Lagged { missed }));
        }
        if this.cursor < ring.published {
            // `cursor - oldest` is below `events.len()`, which fits a usize.
            let index = usize::try_from(this.cursor - oldest).unwrap_or(usize::MAX);
            if let Some(event) = ring.events.get(index) {
                let event = event.clone();
                this.cursor += 1;
                return Poll::Ready(Some(Delivery::Event(event)));
            }
        }
        if ring.closed {
            return Poll::Ready(None);
        }
        ring.waiting.insert(this.number, cx.waker().clone());
        Poll::Pending
    }
}

impl Drop for MemSubscription {
    fn drop(&mut self) {
        // Forget the waker, so a long-lived bus does not keep the wakers of subscribers long gone.
        self.shared.lock().waiting.remove(&self.number);
    }
}
