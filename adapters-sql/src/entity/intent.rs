//! The `intent` table: the intent records of reverts and unreverts in progress, as JSON text.

use sea_orm::entity::prelude::*;

/// A row of `intent`.
#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "intent")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub token: String,
    pub session_id: String,
    pub directory: String,
    #[sea_orm(column_type = "Text")]
    pub body: String,
}

/// The foreign keys are declared in the migration; queries join by hand.
#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
