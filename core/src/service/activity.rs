//! Noting a client's request on a session: an HTTP client's open step lives as long as the client keeps
//! talking about its session (SPEC section 4, the step timeout), whatever the request.

use crate::error::Result;
use crate::model::{LeaseKey, Session, SessionId};

use super::Rewind;

impl Rewind {
    /// Renews the session's open step when this process owns it, so the step timeout counts from the
    /// client's latest request on the session. Does nothing when no step is open or another process owns
    /// it; an unknown session is not an error here (the request itself will say so).
    pub async fn note_activity(&self, session_id: &SessionId) -> Result<()> {
        let Some(session) = self.repo.session(session_id).await? else {
            return Ok(());
        };
        self.renew_own_step(&session).await
    }

    /// Renews the session's open step for the step timeout when this process owns it and its timeout has
    /// not passed; nothing otherwise. A step whose client was silent for the timeout is abandoned (SPEC
    /// section 4): the next operation aborts it, and a later request, a read included, does not bring it
    /// back (black-box: a UI polling the messages kept a dead agent's step open for ever).
    pub(super) async fn renew_own_step(&self, session: &Session) -> Result<()> {
        if let Some(step) = &session.step
            && step.holder == self.holder()
        {
            let key = LeaseKey::Session(session.id.clone());
            let now = self.now();
            let live = self
                .repo
                .lease(&key)
                .await?
                .is_some_and(|lease| lease.token == step.token && lease.expires_at > now);
            if live {
                let expires = now.saturating_add(self.config.step_timeout_ms);
                self.repo.renew_lease(&key, &step.token, expires).await?;
            }
        }
        Ok(())
    }
}
