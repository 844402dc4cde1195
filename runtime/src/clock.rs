//! Time as an input for the runtime shell.
//!
//! The core never reads the clock; the shell reads it here and passes `now` in. Waiting
//! goes through the clock too — a handler's time limit, the poller's interval — so a test
//! on a [`ManualClock`] moves time by calling [`ManualClock::advance_ms`] and nothing in
//! the runtime sleeps on the wall clock behind its back.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures::future::BoxFuture;
use futures::FutureExt;
use tokio::sync::watch;

/// A source of "now" in milliseconds since the Unix epoch, and of waiting for an instant.
pub trait Clock: Send + Sync + 'static {
    fn now_ms(&self) -> i64;

    /// Completes once [`Clock::now_ms`] has reached `at_ms` (at once if it has).
    fn sleep_until(&self, at_ms: i64) -> BoxFuture<'static, ()>;
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

    fn sleep_until(&self, at_ms: i64) -> BoxFuture<'static, ()> {
        let wait = u64::try_from(at_ms.saturating_sub(self.now_ms())).unwrap_or(0);
        tokio::time::sleep(Duration::from_millis(wait)).boxed()
    }
}

/// A clock that moves only when told to. Sleepers wake when it is moved past their
/// instant.
#[derive(Debug)]
pub struct ManualClock {
    now_ms: watch::Sender<i64>,
}

impl ManualClock {
    pub fn new(start_ms: i64) -> ManualClock {
        ManualClock {
            now_ms: watch::channel(start_ms).0,
        }
    }

    pub fn advance_ms(&self, by_ms: i64) {
        self.now_ms
            .send_modify(|now| *now = now.saturating_add(by_ms));
    }

    /// Moves the clock to `to_ms`; it never runs backwards, so an earlier instant is
    /// ignored.
    pub fn set_ms(&self, to_ms: i64) {
        self.now_ms.send_modify(|now| *now = (*now).max(to_ms));
    }
}

impl Default for ManualClock {
    fn default() -> Self {
        ManualClock::new(0)
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> i64 {
        *self.now_ms.borrow()
    }

    fn sleep_until(&self, at_ms: i64) -> BoxFuture<'static, ()> {
        let mut now = self.now_ms.subscribe();
        async move {
            // The sender lives as long as the clock; if it is gone, so is all waiting.
            let _ = now.wait_for(|now| *now >= at_ms).await;
        }
        .boxed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_manual_sleeper_wakes_only_when_the_clock_passes_its_instant() {
        let clock = ManualClock::new(1_000);
        let mut sleeper = clock.sleep_until(1_050);
        assert!(futures::poll!(&mut sleeper).is_pending());
        clock.advance_ms(49);
        assert!(futures::poll!(&mut sleeper).is_pending());
        clock.advance_ms(1);
        assert!(futures::poll!(&mut sleeper).is_ready());
        // Due already: ready at once. Backwards: ignored.
        assert!(futures::poll!(clock.sleep_until(900)).is_ready());
        clock.set_ms(10);
        assert_eq!(clock.now_ms(), 1_050);
    }
}
