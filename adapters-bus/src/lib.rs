//! rewind-bus: live event delivery (`EventBus`) on a tokio broadcast channel.
//!
//! Publishing never blocks and never fails (with no subscriber the event is simply not delivered: durable
//! state is in the database's outbox). A subscriber that falls more than the channel's capacity behind
//! receives `Delivery::Lagged { missed }` and continues with the oldest event still held, as tokio's
//! broadcast reports it; it should then re-read state. A subscription ends when the bus is dropped and
//! the subscriber has drained what was held.

use futures::stream::{self, StreamExt};
use rewind_core::model::Event;
use rewind_core::{Delivery, EventBus, Subscription};
use tokio::sync::broadcast::{self, error::RecvError};

/// How many events a subscriber may fall behind before it is told it lagged.
pub const DEFAULT_CAPACITY: usize = 1024;

/// The `EventBus` on a tokio broadcast channel.
#[derive(Debug, Clone)]
pub struct BroadcastBus {
    sender: broadcast::Sender<Event>,
}

impl BroadcastBus {
    /// A bus holding at most `capacity` undelivered events per subscriber (at least 1).
    pub fn new(capacity: usize) -> Self {
        let (sender, _) = broadcast::channel(capacity.max(1));
        BroadcastBus { sender }
    }

    /// How many subscriptions are open now.
    pub fn subscribers(&self) -> usize {
        self.sender.receiver_count()
    }
}

impl Default for BroadcastBus {
    fn default() -> Self {
        BroadcastBus::new(DEFAULT_CAPACITY)
    }
}

impl EventBus for BroadcastBus {
    fn publish(&self, event: Event) {
        // An error only means nobody is subscribed right now.
        let _ = self.sender.send(event);
    }

    fn subscribe(&self) -> Subscription {
        let receiver = self.sender.subscribe();
        stream::unfold(receiver, |mut receiver| async move {
            match receiver.recv().await {
                Ok(event) => Some((Delivery::Event(event), receiver)),
                Err(RecvError::Lagged(missed)) => Some((Delivery::Lagged { missed }, receiver)),
                Err(RecvError::Closed) => None,
            }
        })
        .boxed()
    }
}
