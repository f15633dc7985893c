//! The `event_outbox` table: every committed event at its position `seq` (1, 2, 3, … in commit order, no
//! gaps), as JSON text. When `body_ref` is set, the event's large text (a session's revert diff, or a
//! session diff) is left out of `body` and is the `shared_text` row it names.

use sea_orm::entity::prelude::*;

/// A row of `event_outbox`.
#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "event_outbox")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub seq: i64,
    pub event_id: String,
    #[sea_orm(column_type = "Text")]
    pub body: String,
    pub body_ref: Option<String>,
}

/// The foreign keys are declared in the migration; queries join by hand.
#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
