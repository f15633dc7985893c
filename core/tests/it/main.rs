//! rewind-core's integration tests: the revert point, the contract suites on the in-memory adapters, the
//! services on the in-memory adapters and on mocks.

mod revert_point;
