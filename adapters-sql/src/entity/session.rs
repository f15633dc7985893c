//! The `session` table: one row per session, the whole `Session` as JSON text, its worktree beside it for listing by directory.
//! When `diff_ref` is set, the revert descriptor's `diff` is left out of the body and is the `shared_text`
//! row it names.

use sea_orm::entity::prelude::*;

/// A row of `session`.
#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "session")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: String,
    pub directory: String,
    #[sea_orm(column_type = "Text")]
    pub body: String,
    pub diff_ref: Option<String>,
}

/// The foreign keys are declared in the migration; queries join by hand.
#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
