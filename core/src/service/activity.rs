//! Noting a client's request on a session: an HTTP client's open step lives as long as the client keeps
//! talking about its session (SPEC section 4, the step timeout), whatever the request.

use crate::error::Result;
use crate::model::{LeaseKey, Session, SessionId};

use super::Rewind;

impl Rewind {
    /// Renews the session's open step when this process owns it, so the step timeout counts from now
    /// (`rewind exec`'s own ticks while its command runs). Does nothing when no step is open or another
    /// process owns it; an unknown session is not an error here (the request itself will say so).
    pub async fn note_activity(&self, session_id: &SessionId) -> Result<()> {
        let Some(session) = self.repo.session(session_id).await? else {
            return Ok(());
        };
        self.renew_own_step(&session, None).await
    }

    /// `note_activity` for a client's request on the session that arrived at `arrived_ms` (the server
    /// notes it after the request ran): the step is renewed only when its timeout had not passed when the
    /// request came. A step whose client was silent for the timeout is abandoned (SPEC section 4): the next
    /// operation aborts it, and a later request, a read included, does not bring it back (black-box: a UI
    /// polling the messages kept a dead agent's step open for ever).
    pub async fn note_request(&self, session_id: &SessionId, arrived_ms: u64) -> Result<()> {
        let Some(session) = self.repo.session(session_id).await? else {
            return Ok(());
        };
        self.renew_own_step(&session, Some(arrived_ms)).await
    }

    /// Renews the session's open step for the step timeout when this process owns it; with `arrived`
    /// (a client's request), only when the step's lease was still live then.
    pub(super) async fn renew_own_step(
        &self,
        session: &Session,
        arrived: Option<u64>,
    ) -> Result<()> {
        let Some(step) = &session.step else {
            return Ok(());
        };
        if !self.speaks_for(&step.holder) {
            return Ok(());
        }
        let key = LeaseKey::Session(session.id.clone());
        if let Some(arrived) = arrived {
            let live = self
                .repo
                .lease(&key)
                .await?
                .is_some_and(|lease| lease.token == step.token && lease.expires_at > arrived);
            if !live {
                return Ok(());
            }
        }
        let expires = self.now().saturating_add(self.config.step_timeout_ms);
        self.repo.renew_lease(&key, &step.token, expires).await?;
        Ok(())
    }
}
