//! The `session_diff` table: the stored diff of a session's last revert, as JSON text; when `body_ref` is
//! set, the text is the `shared_text` row it names and `body` is empty.

use sea_orm::entity::prelude::*;

/// A row of `session_diff`.
#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "session_diff")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub session_id: String,
    #[sea_orm(column_type = "Text")]
    pub body: String,
    pub body_ref: Option<String>,
}

/// The foreign keys are declared in the migration; queries join by hand.
#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
