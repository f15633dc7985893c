//! Trying a write again while it is refused as busy: a write that is refused changes nothing, so one that
//! meets an operation holding its session or worktree for a moment is done after it, as if it had come a
//! moment later, instead of an error the caller must retry. The server's message, part and step routes
//! use it (2 s), and so does `exec` for its step's end (10 s).

use std::future::Future;
use std::time::{Duration, Instant};

/// Runs `write`, and again every `pause` while it is refused as busy (`Error::Busy`), until `wait` has
/// passed: then its refusal is the answer. Each try makes the write's own checks and guards again.
pub async fn while_busy<T, F, Fut>(
    wait: Duration,
    pause: Duration,
    mut write: F,
) -> Result<T, rewind_core::Error>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, rewind_core::Error>>,
{
    let deadline = Instant::now() + wait;
    loop {
        match write().await {
            Err(rewind_core::Error::Busy { .. }) if Instant::now() < deadline => {
                tokio::time::sleep(pause).await;
            }
            done => return done,
        }
    }
}
