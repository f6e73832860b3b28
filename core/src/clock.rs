//! Where "now" comes from.
//!
//! Every lease expiry, retry due time and default event timestamp is read
//! from a [`Clock`] handed to the backend, never from the system directly.
//! Production uses [`SystemClock`]; tests (and `rheo serve --test-clock`)
//! use a [`FrozenClock`] that only moves when told to, so expiry behaviour is
//! tested by advancing time, never by sleeping.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use crate::model::Timestamp;

/// A future that completes at a clock's deadline.
pub type Sleep = Pin<Box<dyn Future<Output = ()> + Send + 'static>>;

/// A source of the current time.
pub trait Clock: Send + Sync + fmt::Debug + 'static {
    /// The current instant.
    fn now(&self) -> Timestamp;

    /// Completes once [`Clock::now`] has reached `deadline`.
    fn sleep_until(&self, deadline: Timestamp) -> Sleep;
}

/// A clock shared by a backend, the runtime and the API.
pub type SharedClock = Arc<dyn Clock>;

/// The wall clock, truncated to milliseconds.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl SystemClock {
    /// A shared system clock.
    pub fn shared() -> SharedClock {
        Arc::new(SystemClock)
    }
}

impl Clock for SystemClock {
    fn now(&self) -> Timestamp {
        Timestamp::from_millis(chrono::Utc::now().timestamp_millis())
    }

    fn sleep_until(&self, deadline: Timestamp) -> Sleep {
        let wait = deadline.ms_since(self.now());
        Box::pin(tokio::time::sleep(Duration::from_millis(wait)))
    }
}

/// A clock that stands still until [`FrozenClock::set`] or
/// [`FrozenClock::advance`] moves it. Sleepers wake when it passes their
/// deadline.
#[derive(Debug)]
pub struct FrozenClock {
    now: watch::Sender<Timestamp>,
}

impl FrozenClock {
    /// A clock frozen at `start`.
    pub fn new(start: Timestamp) -> Arc<Self> {
        Arc::new(Self {
            now: watch::Sender::new(start),
        })
    }

    /// A clock frozen at the current wall-clock time.
    pub fn at_system_time() -> Arc<Self> {
        Self::new(SystemClock.now())
    }

    /// Moves the clock to `t` (backwards too, which wakes nobody).
    pub fn set(&self, t: Timestamp) {
        self.now.send_replace(t);
    }

    /// Moves the clock forward by `ms`, waking sleepers whose deadline
    /// passed; it stops at [`Timestamp::MAX`] (see [`Timestamp::add_ms`]).
    pub fn advance(&self, ms: u64) -> Timestamp {
        let mut after = Timestamp::EPOCH;
        self.now.send_modify(|t| {
            *t = t.add_ms(ms);
            after = *t;
        });
        after
    }
}

impl Clock for FrozenClock {
    fn now(&self) -> Timestamp {
        *self.now.borrow()
    }

    fn sleep_until(&self, deadline: Timestamp) -> Sleep {
        let mut rx = self.now.subscribe();
        Box::pin(async move {
            // An error means the clock was dropped: nothing will ever move
            // it again, so waking is as good an answer as any.
            let _ = rx.wait_for(|t| *t >= deadline).await;
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn frozen_clock_wakes_sleepers_only_when_advanced_past_them() {
        let clock = FrozenClock::new(Timestamp::from_millis(1_000));
        let sleep = clock.sleep_until(Timestamp::from_millis(1_500));
        let waiter = tokio::spawn(sleep);
        clock.advance(499);
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished());
        assert_eq!(clock.advance(1), Timestamp::from_millis(1_500));
        waiter.await.unwrap();
        assert_eq!(clock.now(), Timestamp::from_millis(1_500));
    }

    #[tokio::test]
    async fn past_deadlines_complete_at_once() {
        let clock = FrozenClock::new(Timestamp::from_millis(10));
        clock.sleep_until(Timestamp::from_millis(5)).await;
        SystemClock.sleep_until(Timestamp::EPOCH).await;
    }
}
