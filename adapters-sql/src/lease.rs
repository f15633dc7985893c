//! Leases: taken with one conditional write (insert when absent; update only when the stored token is our own
//! or the one we replace, with the expiry we judged it by when we give one), renewed and released only with
//! the holding token. The same statements run on SQLite and PostgreSQL, so leases hold across processes and
//! machines sharing the store.

use rewind_core::Result;
use rewind_core::model::{Lease, LeaseKey, LeaseTake, LeaseToken, Replacing};
use sea_orm::sea_query::{Expr, ExprTrait, OnConflict};
use sea_orm::{
    ColumnTrait, ConnectionTrait, DatabaseTransaction, EntityTrait, QueryFilter, QueryOrder,
};

use crate::SqlRepo;
use crate::entity::lease;

/// A refused take reads the current lease in the same transaction, which still holds the row (SQLite's
/// write lock; PostgreSQL locks the conflicting row even when the update's condition fails), so it is
/// always found. The bound only guards against a driver behaving otherwise.
const TAKE_ATTEMPTS: u32 = 3;

impl SqlRepo {
    pub(crate) async fn take(
        &self,
        lease: &Lease,
        replacing: Option<Replacing>,
    ) -> Result<LeaseTake> {
        let fault = self.fault("taking a lease");
        let stored_token = || Expr::col((lease::Entity, lease::Column::Token));
        let seen_expiry = match replacing.as_ref().and_then(|r| r.expires_at) {
            Some(at) => Some(self.u64_to_bigint(at, "a lease's expiry")?),
            None => None,
        };
        for _ in 0..TAKE_ATTEMPTS {
            let mut allowed = stored_token().eq(lease.token.0.as_str());
            if let Some(replaced) = &replacing {
                let mut same = stored_token().eq(replaced.token.0.as_str());
                // As the caller judged it: one renewed since is not replaced.
                if let Some(at) = seen_expiry {
                    same = same.and(Expr::col((lease::Entity, lease::Column::ExpiresAt)).eq(at));
                }
                allowed = allowed.or(same);
            }
            let txn = self.begin_lease_write().await?;
            if let Some(nested) = self.nested_holder(&txn, lease).await? {
                txn.commit().await.map_err(&fault)?;
                return Ok(LeaseTake::Held(nested));
            }
            if self.write_lease_where(&txn, lease, allowed).await? > 0 {
                txn.commit().await.map_err(&fault)?;
                return Ok(LeaseTake::Taken);
            }
            let current = self.lease_in(&txn, &lease.key).await?;
            txn.commit().await.map_err(&fault)?;
            if let Some(current) = current {
                return Ok(LeaseTake::Held(current));
            }
        }
        Err(rewind_core::Error::backend(format!(
            "the lease on {:?} in the database {} kept changing while it was taken",
            lease.key, self.target
        )))
    }

    /// Every lease of `leases` in one transaction, or none: each is written only where it is free or
    /// already held by its own token; when one is refused the transaction is rolled back, and the current
    /// holder (read inside it) is named for each refused lease.
    pub(crate) async fn take_all(&self, leases: &[Lease]) -> Result<Vec<LeaseTake>> {
        let fault = self.fault("taking leases");
        let txn = self.begin_lease_write().await?;
        let mut takes = Vec::with_capacity(leases.len());
        for lease in leases {
            if let Some(nested) = self.nested_holder(&txn, lease).await? {
                takes.push(LeaseTake::Held(nested));
                continue;
            }
            let own = Expr::col((lease::Entity, lease::Column::Token)).eq(lease.token.0.as_str());
            if self.write_lease_where(&txn, lease, own).await? > 0 {
                takes.push(LeaseTake::Taken);
                continue;
            }
            match self.lease_in(&txn, &lease.key).await? {
                Some(current) => takes.push(LeaseTake::Held(current)),
                None => {
                    let _ = txn.rollback().await;
                    return Err(rewind_core::Error::backend(format!(
                        "the lease on {:?} in the database {} was neither written nor found",
                        lease.key, self.target
                    )));
                }
            }
        }
        if takes.iter().all(|take| *take == LeaseTake::Taken) {
            txn.commit().await.map_err(&fault)?;
        } else {
            txn.rollback().await.map_err(&fault)?;
        }
        Ok(takes)
    }

    /// Writes `lease` where its key has none, or where the stored lease meets `allowed`; the rows written
    /// (none when refused).
    async fn write_lease_where(
        &self,
        txn: &DatabaseTransaction,
        lease: &Lease,
        allowed: Expr,
    ) -> Result<u64> {
        lease::Entity::insert(self.lease_row(lease)?)
            .on_conflict(
                OnConflict::column(lease::Column::Key)
                    .update_columns([
                        lease::Column::Token,
                        lease::Column::Holder,
                        lease::Column::ExpiresAt,
                    ])
                    .action_and_where(allowed)
                    .to_owned(),
            )
            .exec_without_returning(txn)
            .await
            .map_err(self.fault("taking a lease"))
    }

    /// For a worktree's lease: a lease of a worktree inside or around it (`LeaseKey::overlaps`) held by
    /// another token than `lease`'s, as `txn` sees it (the first by key). Worktree leases
    /// are few (one per operation or step being snapshotted, and those of dead holders not yet taken
    /// over), so they are all read and compared here, whatever the database's collation and `LIKE`.
    async fn nested_holder(
        &self,
        txn: &DatabaseTransaction,
        lease: &Lease,
    ) -> Result<Option<Lease>> {
        if !matches!(lease.key, LeaseKey::Worktree(_)) {
            return Ok(None);
        }
        let rows = lease::Entity::find()
            .filter(lease::Column::Key.starts_with("worktree:"))
            .filter(lease::Column::Key.ne(lease.key.as_storage_key()))
            .filter(lease::Column::Token.ne(lease.token.0.as_str()))
            .order_by_asc(lease::Column::Key)
            .all(txn)
            .await
            .map_err(self.fault("reading the leases of nested worktrees"))?;
        for row in &rows {
            let other = self.lease_from_row(row)?;
            if other.key.overlaps(&lease.key) {
                return Ok(Some(other));
            }
        }
        Ok(None)
    }

    /// The lease on `key` as `txn` sees it.
    async fn lease_in(&self, txn: &DatabaseTransaction, key: &LeaseKey) -> Result<Option<Lease>> {
        lease::Entity::find_by_id(key.as_storage_key())
            .one(txn)
            .await
            .map_err(self.fault("reading a lease"))?
            .map(|row| self.lease_from_row(&row))
            .transpose()
    }

    /// Where a lease is written outside a transaction (`SqlRepo::lease_db`).
    fn lease_conn(&self) -> &sea_orm::DatabaseConnection {
        self.lease_db.as_ref().unwrap_or(&self.db)
    }

    pub(crate) async fn renew(
        &self,
        key: &LeaseKey,
        token: &LeaseToken,
        expires_at: u64,
    ) -> Result<bool> {
        self.check_file()?;
        let expires_at = self.u64_to_bigint(expires_at, "a lease's expiry")?;
        let result = lease::Entity::update_many()
            .col_expr(lease::Column::ExpiresAt, Expr::value(expires_at))
            .filter(lease::Column::Key.eq(key.as_storage_key()))
            .filter(lease::Column::Token.eq(token.0.as_str()))
            .exec(self.lease_conn())
            .await
            .map_err(self.fault("renewing a lease"))?;
        Ok(result.rows_affected > 0)
    }

    pub(crate) async fn release(&self, key: &LeaseKey, token: &LeaseToken) -> Result<()> {
        self.check_file()?;
        self.release_on(self.lease_conn(), key, token).await
    }

    /// Deletes the lease on `key` where `token` holds it, on `conn` (the database, or a transaction that
    /// releases it as it commits).
    pub(crate) async fn release_on(
        &self,
        conn: &impl ConnectionTrait,
        key: &LeaseKey,
        token: &LeaseToken,
    ) -> Result<()> {
        lease::Entity::delete_many()
            .filter(lease::Column::Key.eq(key.as_storage_key()))
            .filter(lease::Column::Token.eq(token.0.as_str()))
            .exec(conn)
            .await
            .map_err(self.fault("releasing a lease"))?;
        Ok(())
    }
}
