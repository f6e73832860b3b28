//! What a node keeps of a store's streams and groups, and how it learns
//! that another node deleted one (`docs/operations.md#deleting-streams-and-groups`).
//!
//! A stream's partition count and a group's settings are read on nearly
//! every call, so the stores keep them in a [`Catalog`] instead of reading
//! them each time. A delete on one node makes what the others keep wrong,
//! so every delete bumps the store's *catalog generation*, a counter the
//! store keeps beside its streams. A node sharing the store reads the
//! counter at most every [`CHECK_EVERY`] before it trusts what it keeps,
//! and forgets everything when the counter moved. In between, a call that
//! finds the rows of a stream or group it kept gone answers
//! `stream_not_found` or `group_not_found` and forgets it.
//!
//! Entries are filled under the generation they were read at: one read
//! before a delete and kept after the node saw the delete's generation
//! would otherwise stay wrong until the next delete.

use std::collections::HashMap;
use std::future::Future;
use std::time::{Duration, Instant};

use parking_lot::{Mutex, RwLock};

use super::Result;
use crate::model::{GroupName, StreamName};

/// How stale a node of a shared store may be about streams and groups
/// another node deleted: it reads the catalog generation at most this
/// often, when it next uses what it keeps.
pub const CHECK_EVERY: Duration = Duration::from_secs(1);

/// A node's cache of stream facts `S` and group settings `G`.
#[derive(Debug)]
pub struct Catalog<S, G> {
    streams: RwLock<HashMap<StreamName, S>>,
    groups: RwLock<HashMap<(StreamName, GroupName), G>>,
    seen: Mutex<Seen>,
    /// `None`: the store has one owner, so nothing changes behind it.
    check_every: Option<Duration>,
}

#[derive(Debug, Default)]
struct Seen {
    /// The generation the entries were filled under.
    generation: u64,
    /// When the generation was last read (`None`: never).
    checked: Option<Instant>,
}

/// The generation a read started under; what it found is kept only if
/// the node has not seen a newer one by the time it is put in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Generation(u64);

impl<S: Clone, G: Clone> Catalog<S, G> {
    /// For a store one server owns: only its own deletes change it.
    pub fn local() -> Self {
        Self::checked(None)
    }

    /// For a store several servers share: the generation is read at most
    /// every [`CHECK_EVERY`].
    pub fn shared() -> Self {
        Self::checked(Some(CHECK_EVERY))
    }

    /// For a shared store, reading the generation at most every `every`
    /// (zero: before every use).
    pub fn shared_every(every: Duration) -> Self {
        Self::checked(Some(every))
    }

    fn checked(check_every: Option<Duration>) -> Self {
        Self {
            streams: RwLock::default(),
            groups: RwLock::default(),
            seen: Mutex::default(),
            check_every,
        }
    }

    /// Reads the store's generation with `read` when it is due, and
    /// forgets everything when it moved; true when it did (the caller then
    /// drops what else it derived from streams and groups).
    pub async fn refresh<F, Fut>(&self, read: F) -> Result<bool>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<u64>>,
    {
        let Some(every) = self.check_every else {
            return Ok(false);
        };
        {
            let mut seen = self.seen.lock();
            let now = Instant::now();
            if seen
                .checked
                .is_some_and(|at| now.duration_since(at) < every)
            {
                return Ok(false);
            }
            // Calls arriving meanwhile trust what is kept: one read at a time.
            seen.checked = Some(now);
        }
        let generation = read().await?;
        Ok(self.observe(generation))
    }

    /// Takes `generation` as the store's: forgets everything when it is
    /// not the one the entries were filled under. True when it forgot.
    pub fn observe(&self, generation: u64) -> bool {
        let mut seen = self.seen.lock();
        if seen.generation == generation {
            return false;
        }
        seen.generation = generation;
        self.streams.write().clear();
        self.groups.write().clear();
        true
    }

    /// The generation a read that may fill the catalog starts under.
    pub fn generation(&self) -> Generation {
        Generation(self.seen.lock().generation)
    }

    /// What is kept of `stream`.
    pub fn stream(&self, stream: &StreamName) -> Option<S> {
        self.streams.read().get(stream).cloned()
    }

    /// Keeps `facts` of `stream`, read under `at`.
    pub fn keep_stream(&self, stream: &StreamName, facts: S, at: Generation) {
        let seen = self.seen.lock();
        if seen.generation == at.0 {
            self.streams.write().insert(stream.clone(), facts);
        }
    }

    /// What is kept of a group.
    pub fn group(&self, stream: &StreamName, group: &GroupName) -> Option<G> {
        (self.groups.read())
            .get(&(stream.clone(), group.clone()))
            .cloned()
    }

    /// Keeps a group's `settings`, read under `at`.
    pub fn keep_group(&self, stream: &StreamName, group: &GroupName, settings: G, at: Generation) {
        let seen = self.seen.lock();
        if seen.generation == at.0 {
            (self.groups.write()).insert((stream.clone(), group.clone()), settings);
        }
    }

    /// Forgets a stream and every group of it.
    pub fn forget_stream(&self, stream: &StreamName) {
        self.streams.write().remove(stream);
        self.groups.write().retain(|(s, _), _| s != stream);
    }

    /// Forgets one group.
    pub fn forget_group(&self, stream: &StreamName, group: &GroupName) {
        (self.groups.write()).remove(&(stream.clone(), group.clone()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};

    fn s(name: &str) -> StreamName {
        StreamName::parse(name).unwrap()
    }

    fn g(name: &str) -> GroupName {
        GroupName::parse(name).unwrap()
    }

    #[tokio::test]
    async fn a_moved_generation_forgets_everything() {
        let catalog: Catalog<u32, u32> = Catalog::shared_every(Duration::ZERO);
        let at = catalog.generation();
        catalog.keep_stream(&s("a"), 4, at);
        catalog.keep_group(&s("a"), &g("x"), 7, at);
        assert!(!catalog.refresh(|| async { Ok(0) }).await.unwrap());
        assert_eq!(catalog.stream(&s("a")), Some(4));
        assert!(catalog.refresh(|| async { Ok(1) }).await.unwrap());
        assert_eq!(catalog.stream(&s("a")), None);
        assert_eq!(catalog.group(&s("a"), &g("x")), None);
    }

    #[tokio::test]
    async fn a_read_from_before_the_move_is_not_kept() {
        let catalog: Catalog<u32, u32> = Catalog::shared_every(Duration::ZERO);
        let before = catalog.generation();
        catalog.observe(3);
        catalog.keep_stream(&s("a"), 4, before);
        catalog.keep_group(&s("a"), &g("x"), 7, before);
        assert_eq!(catalog.stream(&s("a")), None);
        assert_eq!(catalog.group(&s("a"), &g("x")), None);
        catalog.keep_stream(&s("a"), 2, catalog.generation());
        assert_eq!(catalog.stream(&s("a")), Some(2));
    }

    #[tokio::test]
    async fn the_generation_is_read_at_most_once_per_interval() {
        let reads = AtomicU32::new(0);
        let read = || async {
            reads.fetch_add(1, Ordering::SeqCst);
            Ok(0)
        };
        let shared: Catalog<u32, u32> = Catalog::shared_every(Duration::from_secs(3600));
        shared.refresh(read).await.unwrap();
        shared.refresh(read).await.unwrap();
        assert_eq!(reads.load(Ordering::SeqCst), 1);
        let local: Catalog<u32, u32> = Catalog::local();
        local.refresh(read).await.unwrap();
        assert_eq!(reads.load(Ordering::SeqCst), 1, "a local store never reads");
    }

    #[test]
    fn forgetting_a_stream_forgets_its_groups_only() {
        let catalog: Catalog<u32, u32> = Catalog::local();
        let at = catalog.generation();
        catalog.keep_stream(&s("a"), 1, at);
        catalog.keep_group(&s("a"), &g("x"), 1, at);
        catalog.keep_group(&s("b"), &g("x"), 2, at);
        catalog.forget_stream(&s("a"));
        assert_eq!(catalog.group(&s("a"), &g("x")), None);
        assert_eq!(catalog.group(&s("b"), &g("x")), Some(2));
        catalog.forget_group(&s("b"), &g("x"));
        assert_eq!(catalog.group(&s("b"), &g("x")), None);
    }
}
