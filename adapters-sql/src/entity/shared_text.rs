//! The `shared_text` table: a large text stored once for several rows (see the migration
//! `m20261203_000001_shared_text`). Immutable; deleted once no row references it.

use sea_orm::entity::prelude::*;

/// A row of `shared_text`.
#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "shared_text")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: String,
    #[sea_orm(column_type = "Text")]
    pub body: String,
}

/// No relations: the referencing columns are plain text, joined by hand.
#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
