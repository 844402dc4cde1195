//! Time as an input for the runtime shell.
//!
//! The core never reads the clock; the shell reads it exactly here, once per step, and
//! passes `now` in. Tests and benchmarks that need control use [`ManualClock`].

use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// A source of "now" in milliseconds since the Unix epoch.
pub trait Clock: Send + Sync + 'static {
    fn now_ms(&self) -> i64;
}

/// The host's wall clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> i64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as i64)
            // A clock before 1970 is a broken host; time zero keeps the engine running.
            .unwrap_or(0)
    }
}

/// A clock that moves only when told to.
#[derive(Debug, Default)]
pub struct ManualClock {
    now_ms: AtomicI64,
}

impl ManualClock {
    pub fn new(start_ms: i64) -> ManualClock {
        ManualClock {
            now_ms: AtomicI64::new(start_ms),
        }
    }

    pub fn advance_ms(&self, by_ms: i64) {
        self.now_ms.fetch_add(by_ms, Ordering::SeqCst);
    }

    pub fn set_ms(&self, to_ms: i64) {
        self.now_ms.store(to_ms, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> i64 {
        self.now_ms.load(Ordering::SeqCst)
    }
}
