//! A host whose clock and process table the test controls.

use std::collections::HashSet;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::model::ProcessIdentity;
use crate::ports::HostPort;

/// A fake `HostPort`: the clock moves only when told (or, once `ticking`, by a step at every reading), and
/// a process is alive until marked dead.
#[derive(Debug)]
pub struct FakeHost {
    now: AtomicU64,
    tick: AtomicU64,
    me: Mutex<ProcessIdentity>,
    dead: Mutex<HashSet<ProcessIdentity>>,
}

impl FakeHost {
    /// A host named `test-host`, clock at `now_ms`, this process pid 1000.
    pub fn new(now_ms: u64) -> Self {
        FakeHost {
            now: AtomicU64::new(now_ms),
            tick: AtomicU64::new(0),
            me: Mutex::new(ProcessIdentity {
                host: "test-host".to_owned(),
                pid: 1000,
                start_time: 1,
                boot: None,
                machine: None,
            }),
            dead: Mutex::new(HashSet::new()),
        }
    }

    /// Moves the clock forward.
    pub fn advance(&self, ms: u64) {
        self.now.fetch_add(ms, Ordering::SeqCst);
    }

    /// Makes every reading of the clock move it forward by `ms` afterwards (0: only when told), as a real
    /// clock moves between the steps of an operation.
    pub fn ticking(&self, ms: u64) {
        self.tick.store(ms, Ordering::SeqCst);
    }

    /// Sets the clock.
    pub fn set_now(&self, ms: u64) {
        self.now.store(ms, Ordering::SeqCst);
    }

    /// Marks a process as gone.
    pub fn kill(&self, process: &ProcessIdentity) {
        lock(&self.dead).insert(process.clone());
    }

    /// Makes this host act as another process (a second command-line invocation, a restarted server).
    pub fn become_process(&self, process: ProcessIdentity) {
        *lock(&self.me) = process;
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl HostPort for FakeHost {
    fn now_ms(&self) -> u64 {
        self.now
            .fetch_add(self.tick.load(Ordering::SeqCst), Ordering::SeqCst)
    }

    fn this_process(&self) -> ProcessIdentity {
        lock(&self.me).clone()
    }

    fn is_alive(&self, process: &ProcessIdentity) -> bool {
        if !process.same_host(&lock(&self.me)) {
            return true;
        }
        !lock(&self.dead).contains(process)
    }
}
