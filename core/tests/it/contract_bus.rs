//! The `EventBus` contract suite on `MemBus`, and what only `MemBus` can show: waking a waiting subscriber
//! and ending subscriptions when the bus is dropped.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll, Wake, Waker};

use futures::StreamExt;
use futures::executor::block_on;
use rewind_core::id::IdGenerator;
use rewind_core::model::{Event, EventId, EventPayload, StoredEvent};
use rewind_core::ports::{Delivery, EventBus};
use rewind_core::testkit::mem_bus::MemBus;

rewind_core::bus_contract_tests!(
    make = || MemBus::new(16),
    block_on = futures::executor::block_on
);

/// An outbox row at position `seq`.
fn heartbeat(ids: &IdGenerator, seq: u64) -> StoredEvent {
    StoredEvent {
        seq,
        event: Event {
            id: ids.ascending::<EventId>(seq, None),
            payload: EventPayload::ServerHeartbeat {},
        },
    }
}

#[test]
fn lag_report_counts_exactly_the_events_beyond_capacity() {
    block_on(async {
        let ids = IdGenerator::new();
        let bus = MemBus::new(4);
        let mut subscription = bus.subscribe();
        let events: Vec<StoredEvent> = (0..7).map(|n| heartbeat(&ids, n)).collect();
        for event in &events {
            bus.publish(event.clone());
        }
        assert_eq!(
            subscription.next().await,
            Some(Delivery::Lagged { missed: 3 })
        );
        for event in &events[3..] {
            assert_eq!(
                subscription.next().await,
                Some(Delivery::Event(event.clone()))
            );
        }
    });
}

/// A waker that records that it was woken.
#[derive(Default)]
struct Flag(AtomicBool);

impl Wake for Flag {
    fn wake(self: Arc<Self>) {
        self.0.store(true, Ordering::SeqCst);
    }
}

fn flag_waker() -> (Arc<Flag>, Waker) {
    let flag = Arc::new(Flag::default());
    let waker = Waker::from(Arc::clone(&flag));
    (flag, waker)
}

fn woken(flag: &Flag) -> bool {
    flag.0.load(Ordering::SeqCst)
}

#[test]
fn a_waiting_subscriber_is_woken_by_publish() {
    let ids = IdGenerator::new();
    let bus = MemBus::new(4);
    let mut subscription = bus.subscribe();
    let (flag, waker) = flag_waker();
    let mut cx = Context::from_waker(&waker);
    assert_eq!(subscription.poll_next_unpin(&mut cx), Poll::Pending);
    assert!(!woken(&flag));

    let event = heartbeat(&ids, 1);
    bus.publish(event.clone());
    assert!(woken(&flag), "publish must wake a waiting subscriber");
    assert_eq!(
        subscription.poll_next_unpin(&mut cx),
        Poll::Ready(Some(Delivery::Event(event)))
    );
}

#[test]
fn dropping_the_bus_ends_subscriptions_after_they_drain() {
    let ids = IdGenerator::new();
    let bus = MemBus::new(4);
    let mut holding = bus.subscribe();
    let mut waiting = bus.subscribe();
    let event = heartbeat(&ids, 1);
    bus.publish(event.clone());
    let (flag, waker) = flag_waker();
    let mut cx = Context::from_waker(&waker);
    assert_eq!(
        waiting.poll_next_unpin(&mut cx),
        Poll::Ready(Some(Delivery::Event(event.clone())))
    );
    assert_eq!(waiting.poll_next_unpin(&mut cx), Poll::Pending);

    drop(bus);
    assert!(
        woken(&flag),
        "dropping the bus must wake a waiting subscriber"
    );
    assert_eq!(
        waiting.poll_next_unpin(&mut cx),
        Poll::Ready(None),
        "a drained subscription ends when the bus is dropped"
    );
    block_on(async {
        assert_eq!(
            holding.next().await,
            Some(Delivery::Event(event)),
            "events still held are delivered after the bus is dropped"
        );
        assert_eq!(holding.next().await, None);
    });
}
