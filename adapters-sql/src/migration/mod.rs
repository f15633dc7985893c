//! The schema migrations, run at start-up: one file per migration, named `mYYYYMMDD_HHMMSS_name.rs`
//! (SeaORM takes each migration's name from its file name). A migration, once released, never changes.

use sea_orm_migration::prelude::*;

mod m20261201_000001_initial_schema;
mod m20261202_000001_captures;
mod m20261203_000001_shared_text;
mod m20261204_000001_identity;

/// Every migration this binary knows, oldest first.
pub(crate) struct Migrator;

#[async_trait::async_trait]
impl MigratorTrait for Migrator {
    fn migrations() -> Vec<Box<dyn MigrationTrait>> {
        vec![
            Box::new(m20261201_000001_initial_schema::Migration),
            Box::new(m20261202_000001_captures::Migration),
            Box::new(m20261203_000001_shared_text::Migration),
            Box::new(m20261204_000001_identity::Migration),
        ]
    }
}
