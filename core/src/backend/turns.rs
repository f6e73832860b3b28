//! Turns per key: calls of one process that would write the same store
//! records wait for one another instead of racing, while calls on other
//! keys go on (`docs/backends.md#turns-within-a-process`). A turn is an
//! optimisation, never a guard: another process still races, and each
//! store's own guards (scripts, transactions, row locks) still decide.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::Arc;

use tokio::sync::{Mutex, OwnedMutexGuard};

/// One async mutex per key, made on first use.
#[derive(Debug)]
pub struct Turns<K>(parking_lot::Mutex<HashMap<K, Arc<Mutex<()>>>>);

impl<K> Default for Turns<K> {
    fn default() -> Self {
        Self(parking_lot::Mutex::new(HashMap::new()))
    }
}

impl<K: Hash + Eq + Clone> Turns<K> {
    /// Waits for `key`'s turn; it lasts as long as the guard.
    pub async fn take(&self, key: &K) -> OwnedMutexGuard<()> {
        let turn = Arc::clone(self.0.lock().entry(key.clone()).or_default());
        turn.lock_owned().await
    }

    /// Forgets the keys `keep` refuses (a deleted stream's), so that the
    /// map does not grow with names no longer used. A call holding one of
    /// them keeps its turn; a later call makes a new one.
    pub fn retain(&self, mut keep: impl FnMut(&K) -> bool) {
        self.0.lock().retain(|k, _| keep(k));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn one_key_waits_and_another_goes_on() {
        let turns = Turns::<&str>::default();
        let a = turns.take(&"a").await;
        // Another key is not held up by `a`'s turn.
        let b = turns.take(&"b").await;
        drop(b);
        // `a` again waits until the first turn ends.
        let mut again = Box::pin(turns.take(&"a"));
        assert!(futures::poll!(&mut again).is_pending());
        drop(a);
        let _ = again.await;
    }

    #[tokio::test]
    async fn retain_forgets_keys_without_ending_a_held_turn() {
        let turns = Turns::<&str>::default();
        let held = turns.take(&"gone").await;
        turns.retain(|k| *k != "gone");
        assert!(turns.0.lock().is_empty());
        // A new call makes a new turn; the held one still ends cleanly.
        let _fresh = turns.take(&"gone").await;
        drop(held);
    }
}
