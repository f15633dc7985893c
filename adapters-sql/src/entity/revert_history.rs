//! The `revert_history` table: a session's reverts made permanent, oldest first by `seq`, each as JSON text.

use sea_orm::entity::prelude::*;

/// A row of `revert_history`.
#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "revert_history")]
pub struct Model {
    #[sea_orm(primary_key)]
    pub seq: i64,
    pub session_id: String,
    #[sea_orm(column_type = "Text")]
    pub body: String,
}

/// The foreign keys are declared in the migration; queries join by hand.
#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
