//! Time as an input for the runtime shell.
//!
//! The core never reads the clock; the shell reads it here and passes `now` in. Waiting
//! goes through the clock too — a handler's time limit, the poller's interval — so a test
//! on a [`ManualClock`] moves time by calling [`ManualClock::advance_ms`] and nothing in
//! the runtime sleeps on the wall clock behind its back.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures::future::BoxFuture;
use futures::FutureExt;

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
/// instant, earliest instant first and, at one instant, in the order they started
/// sleeping — so on a current-thread scheduler a run replays exactly. (A `watch` channel
/// wakes its receivers in an order tokio draws at random; the fault simulation found
/// that.)
#[derive(Debug)]
pub struct ManualClock {
    inner: Arc<Mutex<Sleepers>>,
}

#[derive(Debug, Default)]
struct Sleepers {
    now_ms: i64,
    /// Next registration number: the tie-break between sleepers of one instant.
    next_seq: u64,
    waiting: BTreeMap<(i64, u64), Waker>,
}

impl Sleepers {
    /// Moves to `to_ms` and takes the wakers now due, in wake order.
    fn move_to(&mut self, to_ms: i64) -> Vec<Waker> {
        self.now_ms = to_ms;
        let later = self.waiting.split_off(&(to_ms.saturating_add(1), 0));
        let due = std::mem::replace(&mut self.waiting, later);
        due.into_values().collect()
    }
}

impl ManualClock {
    pub fn new(start_ms: i64) -> ManualClock {
        ManualClock {
            inner: Arc::new(Mutex::new(Sleepers {
                now_ms: start_ms,
                ..Sleepers::default()
            })),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Sleepers> {
        lock(&self.inner)
    }

    pub fn advance_ms(&self, by_ms: i64) {
        let woken = {
            let mut s = self.lock();
            let to = s.now_ms.saturating_add(by_ms);
            s.move_to(to)
        };
        woken.into_iter().for_each(Waker::wake);
    }

    /// Moves the clock to `to_ms`; it never runs backwards, so an earlier instant is
    /// ignored.
    pub fn set_ms(&self, to_ms: i64) {
        let woken = {
            let mut s = self.lock();
            let to = s.now_ms.max(to_ms);
            s.move_to(to)
        };
        woken.into_iter().for_each(Waker::wake);
    }
}

/// The sleepers' lock; a panic while holding it leaves the map valid, so keep going.
fn lock(m: &Mutex<Sleepers>) -> MutexGuard<'_, Sleepers> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Default for ManualClock {
    fn default() -> Self {
        ManualClock::new(0)
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> i64 {
        self.lock().now_ms
    }

    fn sleep_until(&self, at_ms: i64) -> BoxFuture<'static, ()> {
        ManualSleep {
            clock: self.inner.clone(),
            at_ms,
            key: None,
        }
        .boxed()
    }
}

/// A sleeper on a [`ManualClock`]: registered under `(at_ms, seq)` while it waits,
/// removed when it completes or is dropped.
struct ManualSleep {
    clock: Arc<Mutex<Sleepers>>,
    at_ms: i64,
    key: Option<(i64, u64)>,
}

impl Future for ManualSleep {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = &mut *self;
        let mut s = lock(&this.clock);
        if s.now_ms >= this.at_ms {
            if let Some(key) = this.key.take() {
                s.waiting.remove(&key);
            }
            return Poll::Ready(());
        }
        let key = *this.key.get_or_insert_with(|| {
            let seq = s.next_seq;
            s.next_seq += 1;
            (this.at_ms, seq)
        });
        s.waiting.insert(key, cx.waker().clone());
        Poll::Pending
    }
}

impl Drop for ManualSleep {
    fn drop(&mut self) {
        if let Some(key) = self.key.take() {
            lock(&self.clock).waiting.remove(&key);
        }
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

    #[test]
    fn manual_sleepers_wake_earliest_first_then_in_the_order_they_slept() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        use std::task::Wake;

        struct Record(usize, Arc<Mutex<Vec<usize>>>);
        impl Wake for Record {
            fn wake(self: Arc<Self>) {
                self.1.lock().unwrap().push(self.0);
            }
        }
        let clock = ManualClock::new(0);
        let order = Arc::new(Mutex::new(Vec::new()));
        let polled = AtomicUsize::new(0);
        // Registered in the order 0..4 with instants 20, 10, 20, 10.
        let mut sleepers: Vec<_> = [20, 10, 20, 10]
            .into_iter()
            .enumerate()
            .map(|(i, at)| {
                let mut s = clock.sleep_until(at);
                let waker = Waker::from(Arc::new(Record(i, order.clone())));
                assert!(s
                    .as_mut()
                    .poll(&mut Context::from_waker(&waker))
                    .is_pending());
                polled.fetch_add(1, Ordering::SeqCst);
                s
            })
            .collect();
        clock.advance_ms(30);
        assert_eq!(*order.lock().unwrap(), vec![1, 3, 0, 2]);
        // A dropped sleeper leaves nothing behind.
        sleepers.clear();
        assert!(clock.lock().waiting.is_empty());
        assert_eq!(polled.load(Ordering::SeqCst), 4);
    }
}
