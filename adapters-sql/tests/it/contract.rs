//! The `MessageRepo` contract suite of `rewind-core`, on every store this adapter supports.

/// In-memory SQLite: one private database per test.
mod sqlite_memory {
    rewind_core::repo_contract_tests!(
        make = crate::support::memory_repo(),
        block_on = crate::support::run,
    );
}

/// A SQLite file, through one handle.
mod sqlite_file {
    rewind_core::repo_contract_tests!(
        make = crate::support::file_repo(),
        block_on = crate::support::run,
    );
}

/// A SQLite file opened afresh for every call and closed after it: nothing may be lost when every handle
/// is dropped.
mod sqlite_file_reopened {
    rewind_core::repo_contract_tests!(
        make = crate::support::reopening_repo(),
        block_on = crate::support::run,
    );
}

/// PostgreSQL, one fresh schema per test (skipped without `REWIND_TEST_POSTGRES_URL`).
mod postgres {
    rewind_core::repo_contract_tests!(
        make = crate::support::pg_repo(),
        block_on = crate::support::run_pg,
    );
}
