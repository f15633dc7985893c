//! The `warning` table: a session's warnings, oldest first by `seq`, each as JSON text.

use sea_orm::entity::prelude::*;

/// A row of `warning`.
#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "warning")]
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
