//! Test hooks: hold a commit open after it appended its events, watch a commit start, or fail the next one
//! after everything was written, so tests can interleave writers deterministically and check rollbacks.
//! Hidden from the documentation; production code never sets them.

use tokio::sync::oneshot;

/// The hooks set for the next commit of one handle.
#[derive(Debug, Default)]
pub(crate) struct Hooks {
    pub(crate) started: Option<oneshot::Sender<()>>,
    pub(crate) pause: Option<PauseSide>,
    pub(crate) fail: bool,
}

/// The commit's side of a pause.
#[derive(Debug)]
pub(crate) struct PauseSide {
    reached: oneshot::Sender<()>,
    resume: oneshot::Receiver<()>,
}

impl PauseSide {
    /// Tells the test the commit got here, then waits until it is resumed (or the test dropped its side).
    pub(crate) async fn hold(self) {
        let _ = self.reached.send(());
        let _ = self.resume.await;
    }
}

/// The test's side of a pause set with `SqlRepo::pause_next_commit`.
#[doc(hidden)]
#[derive(Debug)]
pub struct CommitPause {
    reached: Option<oneshot::Receiver<()>>,
    resume: Option<oneshot::Sender<()>>,
}

impl CommitPause {
    pub(crate) fn new() -> (CommitPause, PauseSide) {
        let (reached_tx, reached_rx) = oneshot::channel();
        let (resume_tx, resume_rx) = oneshot::channel();
        (
            CommitPause {
                reached: Some(reached_rx),
                resume: Some(resume_tx),
            },
            PauseSide {
                reached: reached_tx,
                resume: resume_rx,
            },
        )
    }

    /// Waits until the paused commit has applied its changes and appended its events, its transaction still
    /// open. False when the commit ended before it got there (it failed earlier).
    pub async fn reached(&mut self) -> bool {
        match self.reached.take() {
            Some(reached) => reached.await.is_ok(),
            None => true,
        }
    }

    /// Lets the paused commit go on to COMMIT (or to an injected failure). Dropping the pause does the same.
    pub fn resume(&mut self) {
        if let Some(resume) = self.resume.take() {
            let _ = resume.send(());
        }
    }
}

impl Drop for CommitPause {
    fn drop(&mut self) {
        self.resume();
    }
}

/// The test's side of `SqlRepo::watch_next_commit_start`.
#[doc(hidden)]
#[derive(Debug)]
pub struct CommitStart {
    pub(crate) started: oneshot::Receiver<()>,
}

impl CommitStart {
    /// Waits until the next commit is about to open its write transaction (and so to wait for the write
    /// lock if another writer holds it). False when the handle was dropped first.
    pub async fn started(self) -> bool {
        self.started.await.is_ok()
    }
}
