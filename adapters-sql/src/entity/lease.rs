//! The `lease` table: who holds a session or a worktree until when, keyed by `LeaseKey::as_storage_key`.

use sea_orm::entity::prelude::*;

/// A row of `lease`.
#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "lease")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub key: String,
    pub token: String,
    /// The `Holder` as JSON text.
    #[sea_orm(column_type = "Text")]
    pub holder: String,
    /// Epoch milliseconds.
    pub expires_at: i64,
}

/// The foreign keys are declared in the migration; queries join by hand.
#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
