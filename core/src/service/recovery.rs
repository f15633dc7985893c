//! Recovery (SPEC section 8): an intent record whose owner is gone is finished by putting its files back
//! to their pre-operation content, so after a crash at any instant the worktree and the session are wholly
//! before or wholly after the operation.

use crate::error::Result;
use crate::model::{LeaseKey, LeaseTake};

use super::{RecoveryReport, Rewind, new_token};

impl Rewind {
    /// Finishes every intent record whose owner is gone (every worktree). Every command-line invocation and
    /// every server start runs this.
    pub async fn recover(&self) -> Result<RecoveryReport> {
        self.recover_worktree(None).await
    }

    /// Finishes the intent records of one worktree (or of all when `directory` is none).
    pub(super) async fn recover_worktree(&self, directory: Option<&str>) -> Result<RecoveryReport> {
        let mut report = RecoveryReport::default();
        for intent in self.repo.intents().await? {
            if directory.is_some_and(|d| d != intent.directory) {
                continue;
            }
            let session_key = LeaseKey::Session(intent.session_id.clone());
            // The owner is gone when the session's lease is absent, or held by a process that is gone or
            // whose lease may be taken over. A live holder (the owner or an operation already recovering it)
            // is left alone.
            let current = self.repo.lease(&session_key).await?;
            if let Some(lease) = &current
                && !self.is_abandoned(lease)
            {
                report.in_progress.push(intent.token.clone());
                continue;
            }
            let Some(session) = self.repo.session(&intent.session_id).await? else {
                // The session is gone (deleted by a later command); nothing refers to the files any more
                // except the intent itself, which recovery still honours: put the files back.
                continue;
            };
            let token = new_token();
            let lease = crate::model::Lease {
                key: session_key.clone(),
                token: token.clone(),
                holder: self.holder(),
                expires_at: self.now().saturating_add(self.config.operation_lease_ms),
            };
            if let LeaseTake::Held(_) = self
                .repo
                .take_lease(&lease, current.map(|c| c.token))
                .await?
            {
                report.in_progress.push(intent.token.clone());
                continue;
            }
            let session_lease = super::HeldLease {
                key: session_key,
                token: token.clone(),
            };
            let worktree_lease = match self
                .acquire(
                    LeaseKey::Worktree(intent.directory.clone()),
                    &token,
                    self.config.operation_lease_ms,
                    Some(&intent.session_id),
                )
                .await
            {
                Ok(lease) => lease,
                Err(error) => {
                    self.release(&session_lease).await;
                    return Err(error);
                }
            };
            let why = format!(
                "a {:?} by {} was interrupted",
                intent.operation, intent.holder
            );
            let result = self.finish_intent(&session, &intent, &why).await;
            self.release(&worktree_lease).await;
            self.release(&session_lease).await;
            result?;
            report.recovered.push(intent.token.clone());
        }
        Ok(report)
    }
}
