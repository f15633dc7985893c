//! rewind-core's integration tests: the revert point, the contract suites on the in-memory adapters, and
//! the services on the in-memory adapters and on mocks.

mod contract_bus;
mod contract_repo;
mod contract_snapshot;
mod ids_and_shapes;
mod leases;
mod maintenance;
mod recovery;
mod revert_point;
mod scenarios;
mod service_props;
mod service_rules;
mod support;
