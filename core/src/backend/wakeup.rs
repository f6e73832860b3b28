//! Wake-up hints: how the runtime and long-polling fetches learn that
//! something may have become claimable without polling in a loop.
//!
//! Each stream has a version counter in a `tokio::sync::watch` channel.
//! Anything that can make a delivery claimable bumps it. A waiter marks the
//! current version seen *before* it fetches, so a bump that lands between
//! its empty fetch and its wait is never lost. Hints are only hints: a wake
//! means "fetch again", not "there is work".

use std::collections::HashMap;

use parking_lot::Mutex;
use tokio::sync::watch;

use crate::model::StreamName;

/// Per-stream wake-up channels.
#[derive(Debug, Default)]
pub struct Notifier {
    channels: Mutex<HashMap<StreamName, watch::Sender<u64>>>,
}

impl Notifier {
    /// Wakes everyone waiting on `stream`.
    pub fn notify(&self, stream: &StreamName) {
        if let Some(tx) = self.channels.lock().get(stream) {
            tx.send_modify(|v| *v = v.wrapping_add(1));
        }
    }

    /// Wakes everyone, on every stream (after a lost connection to a
    /// notification source may have dropped some).
    pub fn notify_all(&self) {
        for tx in self.channels.lock().values() {
            tx.send_modify(|v| *v = v.wrapping_add(1));
        }
    }

    /// A handle that wakes on the next [`Notifier::notify`] for `stream`.
    pub fn subscribe(&self, stream: &StreamName) -> Wakeup {
        let mut channels = self.channels.lock();
        let tx = channels
            .entry(stream.clone())
            .or_insert_with(|| watch::Sender::new(0));
        Wakeup(tx.subscribe())
    }
}

/// Waits for changes on one stream.
#[derive(Debug)]
pub struct Wakeup(watch::Receiver<u64>);

impl Wakeup {
    /// Marks everything so far as seen; call before fetching.
    pub fn mark_seen(&mut self) {
        self.0.borrow_and_update();
    }

    /// Completes when something changed since the last [`Wakeup::mark_seen`]
    /// (at once if it already has). Never completes if the backend is gone.
    pub async fn changed(&mut self) {
        if self.0.changed().await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test]
    async fn a_bump_between_mark_and_wait_is_not_lost() {
        let notifier = Notifier::default();
        let s = StreamName::parse("s").unwrap();
        let mut w = notifier.subscribe(&s);
        w.mark_seen();
        notifier.notify(&s);
        tokio::time::timeout(Duration::from_secs(5), w.changed())
            .await
            .expect("woken");
        w.mark_seen();
        let other = StreamName::parse("other").unwrap();
        notifier.notify(&other);
        assert!(
            !w.0.has_changed().unwrap(),
            "another stream's append must not wake us"
        );
    }
}
