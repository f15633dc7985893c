//! The `capture` table: worktree states saved before `snapshot restore` overwrote them, oldest first by
//! `seq`, each as JSON text. Captures belong to a worktree, not to a session, so no foreign key.

use sea_orm::entity::prelude::*;

/// A row of `capture`.
#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "capture")]
pub struct Model {
    #[sea_orm(primary_key)]
    pub seq: i64,
    #[sea_orm(column_type = "Text")]
    pub directory: String,
    pub time: i64,
    #[sea_orm(column_type = "Text")]
    pub body: String,
}

/// Captures stand alone; queries filter by directory.
#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
