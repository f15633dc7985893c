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
    use rewind_core::model::{Event, EventPayload};

    #[test]
    fn a_subscription_drains_then_ends_when_the_bus_is_dropped() {
        futures::executor::block_on(async {
            let bus = BroadcastBus::new(8);
            let mut subscription = bus.subscribe();
            let ids = IdGenerator::new();
            let event = Event {
                id: ids.ascending(1, None),
                payload: EventPayload::ServerHeartbeat {},
            };
            bus.publish(event.clone());
            drop(bus);
            assert_eq!(subscription.next().await, Some(Delivery::Event(event)));
            assert_eq!(subscription.next().await, None);
        });
    }
}
