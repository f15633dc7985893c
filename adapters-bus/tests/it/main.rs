//! rewind-bus's integration tests: the `EventBus` contract suite on the broadcast bus.

mod contract {
    //! The contract suite of `rewind-core` on `BroadcastBus` (capacity 16, so the 1,000-event lag case
    //! really lags).

    use rewind_bus::BroadcastBus;

    rewind_core::bus_contract_tests!(
        make = || BroadcastBus::new(16),
        block_on = futures::executor::block_on
    );
}

mod ending {
    //! A subscription ends once the bus is dropped and what it held is drained.

    use futures::StreamExt;
    use rewind_bus::BroadcastBus;
    use rewind_core::Delivery;
    use rewind_core::EventBus;
    use rewind_core::id::IdGenerator;
    use rewind_core::model::{Event, EventPayload, StoredEvent};

    #[test]
    fn a_subscription_drains_then_ends_when_the_bus_is_dropped() {
        futures::executor::block_on(async {
            let bus = BroadcastBus::new(8);
            let mut subscription = bus.subscribe();
            let ids = IdGenerator::new();
            let event = StoredEvent {
                seq: 1,
                event: Event {
                    id: ids.ascending(1, None),
                    payload: EventPayload::ServerHeartbeat {},
                },
            };
            bus.publish(event.clone());
            drop(bus);
            assert_eq!(subscription.next().await, Some(Delivery::Event(event)));
            assert_eq!(subscription.next().await, None);
        });
    }
}

mod budget {
    //! What the bus holds is bounded by bytes too: large events past the budget are let go, and a
    //! subscriber that had not read them is told how many it missed, then gets the ones still held.

    use futures::StreamExt;
    use rewind_bus::BroadcastBus;
    use rewind_core::Delivery;
    use rewind_core::EventBus;
    use rewind_core::id::IdGenerator;
    use rewind_core::model::{Event, EventPayload, StoredEvent};

    /// A warning event whose message is `size` bytes, numbered `n` at its start.
    fn large(ids: &IdGenerator, n: usize, size: usize) -> StoredEvent {
        let mut message = format!("{n:08}");
        message.push_str(&"x".repeat(size - message.len()));
        StoredEvent {
            seq: n as u64 + 1,
            event: Event {
                id: ids.ascending(1, None),
                payload: EventPayload::SessionWarning {
                    session_id: ids.descending(1),
                    message,
                    snapshot: None,
                    files: Vec::new(),
                },
            },
        }
    }

    fn number(delivery: &Delivery) -> usize {
        match delivery {
            Delivery::Event(StoredEvent {
                event:
                    Event {
                        payload: EventPayload::SessionWarning { message, .. },
                        ..
                    },
                ..
            }) => message[..8].parse().expect("numbered"),
            other => panic!("expected an event, got {other:?}"),
        }
    }

    #[test]
    fn large_events_past_the_byte_budget_are_let_go_and_reported_as_missed() {
        futures::executor::block_on(async {
            const SIZE: usize = 100_000;
            // Room for 10 of them (each is a little over SIZE as JSON); the ring would hold 1,024.
            let bus = BroadcastBus::with_byte_budget(1024, 10 * SIZE + 5_000);
            let mut slow = bus.subscribe();
            let ids = IdGenerator::new();
            for n in 0..100 {
                bus.publish(large(&ids, n, SIZE));
                assert!(
                    bus.held_bytes() <= 10 * SIZE + 5_000,
                    "held {} bytes after {n}",
                    bus.held_bytes()
                );
            }
            // The slow subscriber missed what was let go, then reads the last ones in order.
            let first = slow.next().await.expect("a delivery");
            let Delivery::Lagged { missed } = first else {
                panic!("expected Lagged first, got {first:?}");
            };
            let mut numbers = Vec::new();
            for _ in 0..(100 - missed) {
                numbers.push(number(&slow.next().await.expect("a delivery")));
            }
            assert!((1..=10).contains(&numbers.len()), "{missed} missed");
            let expected: Vec<usize> = (missed as usize..100).collect();
            assert_eq!(
                numbers, expected,
                "the held events, in order, after the missed ones"
            );

            // A subscriber that keeps up misses nothing, however large the events.
            let mut fast = bus.subscribe();
            for n in 100..130 {
                bus.publish(large(&ids, n, SIZE));
                assert_eq!(number(&fast.next().await.expect("a delivery")), n);
            }
            // One event over the whole budget is still delivered: the latest is always held.
            bus.publish(large(&ids, 130, 20 * SIZE));
            assert_eq!(number(&fast.next().await.expect("a delivery")), 130);
        });
    }

    /// Events every subscriber has received are not held: a flood leaves nothing behind.
    #[test]
    fn events_every_subscriber_received_are_not_held() {
        futures::executor::block_on(async {
            let bus = BroadcastBus::with_byte_budget(1024, 10_000_000);
            let ids = IdGenerator::new();
            // With no subscriber, nothing is held at all.
            bus.publish(large(&ids, 0, 100_000));
            assert_eq!(bus.held_bytes(), 0);
            let mut first = bus.subscribe();
            let mut second = bus.subscribe();
            for n in 1..50 {
                bus.publish(large(&ids, n, 100_000));
                assert_eq!(number(&first.next().await.expect("a delivery")), n);
            }
            assert!(
                bus.held_bytes() > 4_000_000,
                "the second has read nothing yet"
            );
            for n in 1..50 {
                assert_eq!(number(&second.next().await.expect("a delivery")), n);
            }
            assert_eq!(bus.held_bytes(), 0, "both have received every event");
        });
    }

    #[test]
    fn small_events_are_bounded_by_count_as_before() {
        futures::executor::block_on(async {
            let bus = BroadcastBus::new(8);
            let mut slow = bus.subscribe();
            let ids = IdGenerator::new();
            for n in 0..20 {
                bus.publish(large(&ids, n, 100));
            }
            assert_eq!(slow.next().await, Some(Delivery::Lagged { missed: 12 }));
            for n in 12..20 {
                assert_eq!(number(&slow.next().await.expect("a delivery")), n);
            }
        });
    }
}
