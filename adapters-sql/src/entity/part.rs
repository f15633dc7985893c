//! The `part` table: one row per part, keyed by session, message and id; the body (`PartBody`) as JSON text,
//! so a part type rewind does not know keeps its fields, values and key order.

use sea_orm::entity::prelude::*;

/// A row of `part`.
#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "part")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub session_id: String,
    #[sea_orm(primary_key, auto_increment = false)]
    pub message_id: String,
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: String,
    /// The part's `type`, so snapshot references are found without reading every body.
    pub kind: String,
    #[sea_orm(column_type = "Text")]
    pub body: String,
}

/// The foreign keys are declared in the migration; queries join by hand.
#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
