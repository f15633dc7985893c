//! The `EventBus` contract suite: ordered delivery per subscriber, honest lag reports, and subscriptions that
//! start at the present, run on `MemBus` here and on the broadcast adapter in its crate through
//! `bus_contract_tests!`.
//!
//! The cases need no runtime of their own: they publish, then read what a subscriber has, and check that
//! nothing more is ready by polling once.

use futures::{FutureExt, StreamExt};

use crate::id::{EventId, IdGenerator};
use crate::model::{Event, EventPayload, StoredEvent};
use crate::ports::{Delivery, EventBus, Subscription};

/// How many events `lagging_subscriber_is_told_how_many_it_missed` publishes without reading: the bus under
/// test must hold fewer than this many.
pub const LAG_TEST_EVENTS: usize = 1000;

/// Expands to one `#[test]` per case of the `EventBus` contract suite.
///
/// `make` builds a fresh bus for every test, inside `block_on`: either a closure with no arguments returning
/// the bus, or an expression (typically an `async` block) giving a future of it. The bus must implement
/// `EventBus` itself and hold fewer than `LAG_TEST_EVENTS` events. `block_on` is anything callable with a
/// future that runs it to completion.
///
/// ```
/// use rewind_core::testkit::mem_bus::MemBus;
///
/// rewind_core::bus_contract_tests!(make = || MemBus::new(16), block_on = futures::executor::block_on);
/// ```
#[macro_export]
macro_rules! bus_contract_tests {
    (@each ($make:expr) ($block_on:expr) $($case:ident)*) => {
        $(
            #[test]
            fn $case() {
                ($block_on)(async {
                    let bus = $make.await;
                    $crate::testkit::contract::bus::$case(&bus).await;
                });
            }
        )*
    };
    (@cases ($make:expr) ($block_on:expr)) => {
        $crate::bus_contract_tests!(@each ($make) ($block_on)
            events_arrive_in_order_per_subscriber
            lagging_subscriber_is_told_how_many_it_missed
            late_subscriber_sees_only_new_events
        );
    };
    (make = || $bus:expr, block_on = $block_on:expr $(,)?) => {
        $crate::bus_contract_tests!(@cases (async { $bus }) ($block_on));
    };
    (make = $make:expr, block_on = $block_on:expr $(,)?) => {
        $crate::bus_contract_tests!(@cases ($make) ($block_on));
    };
}

/// Distinct outbox rows, in position and id order.
struct Events {
    generator: IdGenerator,
    now: u64,
    seq: u64,
}

impl Events {
    fn new() -> Self {
        Events {
            generator: IdGenerator::new(),
            now: 1_700_000_000_000,
            seq: 0,
        }
    }

    fn next(&mut self) -> StoredEvent {
        self.now += 1;
        self.seq += 1;
        let id: EventId = self.generator.ascending(self.now, None);
        StoredEvent {
            seq: self.seq,
            event: Event {
                id,
                payload: EventPayload::ServerHeartbeat {},
            },
        }
    }

    fn take(&mut self, count: usize) -> Vec<StoredEvent> {
        (0..count).map(|_| self.next()).collect()
    }
}

/// The next delivery; the stream must not end while the bus lives.
async fn next(subscription: &mut Subscription) -> Delivery {
    subscription
        .next()
        .await
        .expect("a subscription must not end while its bus lives")
}

/// Reads `expected.len()` deliveries and checks they are exactly those events, in order.
async fn expect_events(subscription: &mut Subscription, expected: &[StoredEvent], who: &str) {
    for (index, event) in expected.iter().enumerate() {
        let delivery = next(subscription).await;
        assert_eq!(
            delivery,
            Delivery::Event(event.clone()),
            "{who}: delivery {index} must be the event published at that place"
        );
    }
}

/// Polls once: nothing must be ready.
fn expect_nothing_ready(subscription: &mut Subscription, who: &str) {
    if let Some(ready) = subscription.next().now_or_never() {
        panic!("{who}: nothing more was published, yet the subscription yielded {ready:?}");
    }
}

fn publish_all(bus: &dyn EventBus, events: &[StoredEvent]) {
    for event in events {
        bus.publish(event.clone());
    }
}

/// Every subscriber receives every event in publish order, each at its own pace.
pub async fn events_arrive_in_order_per_subscriber(bus: &dyn EventBus) {
    let mut events = Events::new();
    let mut fast = bus.subscribe();
    let mut slow = bus.subscribe();
    let first = events.take(3);
    publish_all(bus, &first);
    expect_events(&mut fast, &first, "the first subscriber").await;
    expect_nothing_ready(&mut fast, "the first subscriber");

    let second = events.take(4);
    publish_all(bus, &second);
    expect_events(&mut fast, &second, "the first subscriber").await;
    let all: Vec<StoredEvent> = first.into_iter().chain(second).collect();
    expect_events(&mut slow, &all, "the second subscriber").await;
    expect_nothing_ready(&mut fast, "the first subscriber");
    expect_nothing_ready(&mut slow, "the second subscriber");
}

/// Publishing never waits for a subscriber that does not read; that subscriber is then told how many events
/// it missed and continues, in order, with the oldest event still held, while a subscriber that kept up
/// misses nothing.
pub async fn lagging_subscriber_is_told_how_many_it_missed(bus: &dyn EventBus) {
    let mut events = Events::new();
    let mut lagging = bus.subscribe();
    let mut keeping_up = bus.subscribe();
    let flood = events.take(LAG_TEST_EVENTS);
    for event in &flood {
        // A publish that blocked on the subscriber that does not read would hang here.
        bus.publish(event.clone());
        expect_events(
            &mut keeping_up,
            std::slice::from_ref(event),
            "a subscriber that keeps up",
        )
        .await;
    }

    let first = next(&mut lagging).await;
    let Delivery::Lagged { missed } = first else {
        panic!(
            "a subscriber that fell {LAG_TEST_EVENTS} events behind must first be told how many it missed, \
             got {first:?} (the bus under test must hold fewer than {LAG_TEST_EVENTS} events)"
        );
    };
    let missed = usize::try_from(missed).unwrap_or(usize::MAX);
    assert!(
        (1..LAG_TEST_EVENTS).contains(&missed),
        "a lagging subscriber must miss some but not all of {LAG_TEST_EVENTS} events, was told {missed}"
    );
    expect_events(
        &mut lagging,
        &flood[missed..],
        "after its lag report, the lagging subscriber",
    )
    .await;
    expect_nothing_ready(&mut lagging, "the lagging subscriber, having caught up");

    let after = events.take(2);
    publish_all(bus, &after);
    expect_events(
        &mut lagging,
        &after,
        "the lagging subscriber, having caught up",
    )
    .await;
    expect_events(&mut keeping_up, &after, "a subscriber that keeps up").await;
}

/// A subscription receives only the events published after it was made.
pub async fn late_subscriber_sees_only_new_events(bus: &dyn EventBus) {
    let mut events = Events::new();
    let mut early = bus.subscribe();
    let before = events.take(2);
    publish_all(bus, &before);
    let mut late = bus.subscribe();
    expect_nothing_ready(&mut late, "a subscriber made after two events");

    let after = events.take(2);
    publish_all(bus, &after);
    expect_events(&mut late, &after, "a subscriber made after two events").await;
    expect_nothing_ready(&mut late, "a subscriber made after two events");
    let all: Vec<StoredEvent> = before.into_iter().chain(after).collect();
    expect_events(&mut early, &all, "a subscriber made before them").await;
}
