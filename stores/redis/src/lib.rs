//! The Redis backend (`redis://host:port/db?prefix=name`): the whole
//! `Backend` trait on Redis ≥ 6.2, passing the conformance suite, the
//! two-node suite and the lost-connection check. The layout and how each
//! operation is made atomic: `docs/backends.md#redis`.
//!
//! Every operation reads what it needs, decides with the shared policy
//! module (`backend::policy`), and writes through one generic
//! compare-and-set script (`cas.lua`) guarded by what it read: the writes
//! land together only if nothing it read has changed, else the operation
//! reads again. No rule of Rheo's is written in Lua.
//!
//! Servers sharing a prefix form a cluster (`docs/cluster.md`): its nodes,
//! modules and handler records live under `<prefix>:nodes`,
//! `<prefix>:module:<digest>` and `<prefix>:handlers` (`cluster.rs`); a
//! handler record is written by a small compare-and-set script on its
//! revision, which also publishes `:handlers` on the wake-up channel so
//! every node's watchers wake.
//!
//! A node keeps what it read of streams and groups in the core's
//! [`Catalog`]; a delete (`lifecycle.rs`,
//! `docs/operations.md#deleting-streams-and-groups`) counts up the
//! *catalog generation* (`<prefix>:generation`) in the script that removes
//! the keys, and the other nodes read it at most every
//! [`CHECK_EVERY`](rheo_core::backend::catalog::CHECK_EVERY). Until then a
//! node may still keep a deleted stream or group: every write is guarded
//! on the stream's identity (its stored value but its retention, which
//! `set_retention` may change: `retention.rs`) and the group's settings as
//! kept (`Cas::catalog_is`), and the calls that only read check them in a
//! round trip they make anyway, so a call on what another node deleted
//! answers `stream_not_found` or `group_not_found` and forgets it.

mod claims;
mod cluster;
mod gates;
mod groups;
mod impl_backend;
mod inspect;
mod lifecycle;
mod migrate;
mod planned;
mod rates;
mod retention;
mod rewind;
mod settle;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use redis::aio::ConnectionManager;
use serde_json::{Value, json};

use rheo_core::backend::catalog::Catalog;
use rheo_core::backend::policy::{GroupConfig, plan_append, route_batch};
use rheo_core::backend::turns::Turns;
use rheo_core::backend::{CreateStream, Error, Notifier, ReadRequest, Result};
use rheo_core::clock::SharedClock;
use rheo_core::model::{
    Appended, Event, EventId, EventInput, GroupName, Retention, Stream, StreamName, Timestamp,
};
use tokio::sync::OwnedMutexGuard;

/// Key prefix when the URL names none.
pub(crate) const DEFAULT_PREFIX: &str = "rheo";

/// How many times an operation reads again after its guards failed
/// (another node wrote in between) before giving up.
const MAX_ATTEMPTS: usize = 64;

/// Where a backend keeps its keys (`docs/backends.md#redis`). Stream names
/// hold only `A-Z a-z 0-9 . _ -`, so `:` separates parts unambiguously and
/// a stream's keys share the hash tag `{stream}`.
#[derive(Debug, Clone)]
pub(crate) struct Keys {
    prefix: String,
}

impl Keys {
    pub(crate) fn new(prefix: &str) -> Self {
        Self {
            prefix: prefix.to_owned(),
        }
    }

    /// Hash: migration step → when it was applied (`migrate.rs`).
    pub(crate) fn migrations(&self) -> String {
        format!("{}:migrations", self.prefix)
    }

    /// Hash: stream name → `{"partitions": n, "created_at": ms,
    /// "incarnation": hex}` (streams created before deletes existed have
    /// no incarnation), with `,"retention": {…}` ([`Retention::to_text`])
    /// before the closing brace when the stream has a retention: the
    /// stream's [`StreamFacts`]. Everything before the retention is the
    /// stream's identity ([`stream_identity`]), which guards compare.
    pub(crate) fn streams(&self) -> String {
        format!("{}:streams", self.prefix)
    }

    /// String: the catalog generation, counted up by every delete of a
    /// stream or group in the script that deletes it (absent: 0); a node
    /// that finds it moved forgets what it keeps of streams and groups
    /// (`rheo_core::backend::catalog`).
    pub(crate) fn generation(&self) -> String {
        format!("{}:generation", self.prefix)
    }

    /// The Redis stream of one partition; entry ids are `<sequence>-0`.
    pub(crate) fn log(&self, stream: &StreamName, partition: u32) -> String {
        format!("{}:{{{stream}}}:log:{partition}", self.prefix)
    }

    /// Hash: event id → `<partition>:<sequence>` (idempotent appends).
    pub(crate) fn ids(&self, stream: &StreamName) -> String {
        format!("{}:{{{stream}}}:ids", self.prefix)
    }

    /// Hash: partition → its high watermark (absent: 0, empty), and
    /// [`first_field`] of a partition → its first sequence, the lowest one
    /// retention left (absent: 1): every read of the watermarks reads the
    /// log starts with them ([`Bounds`]).
    pub(crate) fn high_watermarks(&self, stream: &StreamName) -> String {
        format!("{}:{{{stream}}}:hw", self.prefix)
    }

    /// Sorted set: sequence by event timestamp, per partition (`start_at`).
    pub(crate) fn times(&self, stream: &StreamName, partition: u32) -> String {
        format!("{}:{{{stream}}}:ts:{partition}", self.prefix)
    }

    /// Hash: group name → its settings (`max_attempts`, backoff, ordering,
    /// `on_exhausted`, `flow` — absent in groups stored before it, which
    /// have none —, creation, incarnation).
    pub(crate) fn groups(&self, stream: &StreamName) -> String {
        format!("{}:{{{stream}}}:groups", self.prefix)
    }

    /// Hash: partition → the group's cursor (the next sequence it delivers
    /// for the first time).
    pub(crate) fn cursors(&self, stream: &StreamName, group: &GroupName) -> String {
        format!("{}:{{{stream}}}:g:{group}:cursor", self.prefix)
    }

    /// Hash: partition → the group's floor, where its cursor was put by the
    /// group's creation or its last reset: below the cursor, a sequence
    /// without a delivery record was acked on its first attempt if it is at
    /// or above the floor, and never delivered if below.
    pub(crate) fn floors(&self, stream: &StreamName, group: &GroupName) -> String {
        self.group_key(stream, group, "floor")
    }

    fn group_key(&self, stream: &StreamName, group: &GroupName, what: &str) -> String {
        format!("{}:{{{stream}}}:g:{group}:{what}", self.prefix)
    }

    /// Hash: sequence → the delivery's record (JSON), per partition.
    pub(crate) fn deliveries(&self, s: &StreamName, g: &GroupName, p: u32) -> String {
        self.group_key(s, g, &format!("d:{p}"))
    }

    /// Sorted set: available deliveries claimable now, by sequence.
    pub(crate) fn ready(&self, s: &StreamName, g: &GroupName, p: u32) -> String {
        self.group_key(s, g, &format!("ready:{p}"))
    }

    /// Sorted set: available deliveries waiting for a due time, by it.
    pub(crate) fn delayed(&self, s: &StreamName, g: &GroupName, p: u32) -> String {
        self.group_key(s, g, &format!("delayed:{p}"))
    }

    /// Sorted set: leased deliveries, by lease expiry.
    pub(crate) fn leased(&self, s: &StreamName, g: &GroupName, p: u32) -> String {
        self.group_key(s, g, &format!("leased:{p}"))
    }

    /// Sorted set: open (available or leased) deliveries, by sequence.
    pub(crate) fn open(&self, s: &StreamName, g: &GroupName, p: u32) -> String {
        self.group_key(s, g, &format!("open:{p}"))
    }

    /// Sorted set: available deliveries never handed out (attempt 0), by
    /// sequence (the lag's pending count).
    pub(crate) fn fresh(&self, s: &StreamName, g: &GroupName, p: u32) -> String {
        self.group_key(s, g, &format!("fresh:{p}"))
    }

    /// Sorted set: available deliveries never handed out (attempt 0) that
    /// wait for a due time, by it: those paced by `flow.key_rate`
    /// (`docs/groups.md#flow`). Once due, one counts as pending in the lag
    /// until a fetch claims it; none of a group without a key rate.
    pub(crate) fn paced(&self, s: &StreamName, g: &GroupName, p: u32) -> String {
        self.group_key(s, g, &format!("paced:{p}"))
    }

    /// Sorted set: the group's dead letters, by sequence then partition.
    pub(crate) fn dead(&self, s: &StreamName, g: &GroupName) -> String {
        self.group_key(s, g, "dead")
    }

    /// Hash: the ids of the events of dead letters that retention removed
    /// (`docs/log.md#retention`): `<partition>:<sequence>` → event id, and
    /// `id:<event id>` → `<partition>:<sequence>` (a page cursor).
    pub(crate) fn gone(&self, s: &StreamName, g: &GroupName) -> String {
        self.group_key(s, g, "gone")
    }

    /// Hash: partition → how many events retention removed before the
    /// group settled them (`skipped_by_retention`; absent: 0).
    pub(crate) fn skipped(&self, s: &StreamName, g: &GroupName) -> String {
        self.group_key(s, g, "skipped")
    }

    /// Sorted set, every score 0: a gated group's open deliveries (under
    /// an ordering or a `flow.key_concurrency`) that have a gate, as
    /// members `gate` then sequence, so that a gate's are one range of
    /// members in sequence order (`gates::member`, `docs/backends.md#redis`).
    pub(crate) fn gates(&self, s: &StreamName, g: &GroupName, p: u32) -> String {
        self.group_key(s, g, &format!("gates:{p}"))
    }

    /// Hash: a gated group's gates that have open deliveries, each with
    /// how many (its members in [`Keys::gates`]): how many heads a gate
    /// has and whether it parks deliveries (`GateState::of_open`), or
    /// whether it holds only the heads a batch acks, is one field of one
    /// `HMGET` for a whole batch (`docs/backends.md#redis`).
    pub(crate) fn counts(&self, s: &StreamName, g: &GroupName, p: u32) -> String {
        self.group_key(s, g, &format!("gatecounts:{p}"))
    }

    /// Sorted set: a key-rate group's token buckets (`flow.key_rate`,
    /// `docs/groups.md#flow`), one member per event key scored by its TAT
    /// (microseconds since the epoch, `rheo_core::backend::policy::pace`).
    /// A TAT that has passed is a full bucket, like none: a fetch that
    /// writes TATs removes those passed more than [`TAT_GRACE_MS`] ago, and
    /// gives the set a time to live that reaches the last TAT it holds
    /// (plus that grace), so the set expires by itself once every TAT has
    /// passed (`docs/backends.md#redis`).
    pub(crate) fn tats(&self, s: &StreamName, g: &GroupName, p: u32) -> String {
        self.group_key(s, g, &format!("tats:{p}"))
    }

    /// The keys of one partition's deliveries, built once for a batch.
    pub(crate) fn partition(&self, s: &StreamName, g: &GroupName, p: u32) -> PartitionKeys {
        PartitionKeys {
            records: self.deliveries(s, g, p),
            ready: self.ready(s, g, p),
            delayed: self.delayed(s, g, p),
            leased: self.leased(s, g, p),
            open: self.open(s, g, p),
            fresh: self.fresh(s, g, p),
            paced: self.paced(s, g, p),
            dead: self.dead(s, g),
            gates: self.gates(s, g, p),
            counts: self.counts(s, g, p),
            tats: self.tats(s, g, p),
            partition: p,
        }
    }

    /// Every key of a stream of `partitions` partitions but its groups'
    /// ([`Keys::of_group`]): what deleting it removes, and what creating
    /// one of its name clears. A new key of a stream belongs here.
    pub(crate) fn of_stream(&self, s: &StreamName, partitions: u32) -> Vec<String> {
        let mut keys = vec![self.ids(s), self.high_watermarks(s), self.groups(s)];
        for p in 0..partitions {
            keys.push(self.log(s, p));
            keys.push(self.times(s, p));
        }
        keys
    }

    /// Every key of a group of a stream of `partitions` partitions (its
    /// settings are a field of [`Keys::groups`]): what deleting it
    /// removes, and what creating one of its name clears. A new key of a
    /// group belongs here.
    pub(crate) fn of_group(&self, s: &StreamName, g: &GroupName, partitions: u32) -> Vec<String> {
        let mut keys = vec![
            self.cursors(s, g),
            self.floors(s, g),
            self.dead(s, g),
            self.gone(s, g),
            self.skipped(s, g),
        ];
        for p in 0..partitions {
            let k = self.partition(s, g, p);
            keys.extend([
                k.records, k.ready, k.delayed, k.leased, k.open, k.fresh, k.paced, k.gates,
                k.counts, k.tats,
            ]);
        }
        keys
    }

    /// The pub/sub channel of wake-ups: a message is a stream name.
    pub(crate) fn wakeups(&self) -> String {
        format!("{}:wakeups", self.prefix)
    }

    /// The pattern of every key under this prefix.
    #[cfg(test)]
    pub(crate) fn all(&self) -> String {
        format!("{}:*", self.prefix)
    }
}

/// [`Keys::partition`].
#[derive(Debug, Clone)]
pub(crate) struct PartitionKeys {
    pub(crate) records: String,
    pub(crate) ready: String,
    pub(crate) delayed: String,
    pub(crate) leased: String,
    pub(crate) open: String,
    pub(crate) fresh: String,
    pub(crate) paced: String,
    pub(crate) dead: String,
    pub(crate) gates: String,
    pub(crate) counts: String,
    pub(crate) tats: String,
    pub(crate) partition: u32,
}

/// How long a TAT is kept after it passed (`Keys::tats`): a passed TAT is
/// a full bucket, like none, so this is only slack for nodes whose clocks
/// lag the one that wrote it.
pub(crate) const TAT_GRACE_MS: i64 = 10_000;

/// A Redis URL split into what the driver takes and Rheo's own `prefix`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RedisUrl {
    /// The URL without `prefix=…`.
    pub(crate) connect: String,
    /// Every key starts with `<prefix>:`.
    pub(crate) prefix: String,
}

impl RedisUrl {
    /// Parses `redis://host:port[/db][?prefix=name]`; a prefix holds 1–64
    /// of `A-Z a-z 0-9 . _ -`.
    pub(crate) fn parse(url: &str) -> Result<Self> {
        let invalid = |why: String| {
            Error::invalid(
                "backend",
                format!("{:?}: {why}", rheo_core::backend::redact_url(url)),
            )
        };
        if !url.starts_with("redis://") {
            return Err(invalid("a Redis URL starts with redis://".into()));
        }
        let (base, query) = url.split_once('?').unwrap_or((url, ""));
        let mut prefix = None;
        let mut rest = Vec::new();
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            match pair.split_once('=') {
                Some(("prefix", value)) => prefix = Some(value.to_owned()),
                _ => rest.push(pair),
            }
        }
        let prefix = prefix.unwrap_or_else(|| DEFAULT_PREFIX.to_owned());
        let fine = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-');
        if prefix.is_empty() || prefix.len() > 64 || !prefix.chars().all(fine) {
            return Err(invalid(format!(
                "prefix {prefix:?} must be 1-64 of A-Z, a-z, 0-9, '.', '_' and '-'"
            )));
        }
        let connect = if rest.is_empty() {
            base.to_owned()
        } else {
            format!("{base}?{}", rest.join("&"))
        };
        Ok(Self { connect, prefix })
    }
}

/// What an operation sends to `cas.lua`: guards on what it read, and the
/// writes it decided, as the script's flat argument list.
///
/// Writes of a variadic command to the same key are sent as one command
/// (an `HSET` of every record a fetch writes, one `ZADD` per index), which
/// is what keeps a batch's script short: Redis pays its per-call cost once
/// per key, not once per delivery. A write joins the previous one only if
/// nothing in between touched its key, so the order of writes to each key
/// is kept. Guards on one hash are likewise read with one `HMGET`.
#[derive(Debug, Default)]
struct Cas {
    guards: Vec<Guard>,
    /// The commands, each its name, key and arguments.
    writes: Vec<Vec<String>>,
    /// Per key, the index of the last write that touched it.
    touched: HashMap<String, usize, foldhash::fast::RandomState>,
    /// The guard groups on what this process keeps of a stream or a group
    /// ([`Cas::catalog_is`]), by their 1-based index: when one fails, what
    /// is kept is stale ([`RedisBackend::outcome`]).
    catalog: Vec<(usize, Kept)>,
    /// Per kind of guard group that takes many guards (`h`, `e`, `s`) and
    /// key, the group's index: guards of one key join one group, in
    /// whatever order they come (all are checked before any write), so a
    /// batch of 50 settles of one partition checks its records with one
    /// `HMGET` and its gates with one group.
    joinable: HashMap<(char, String), usize, foldhash::fast::RandomState>,
}

/// A guard group of `cas.lua`.
#[derive(Debug)]
enum Guard {
    /// Fields of one hash: field, kind (`0` absent, `1` equal, `2` prefix)
    /// and the value.
    Hash(String, Vec<[String; 3]>),
    /// No member of a sorted set scored at most this.
    ZsetNoneUntil(String, String),
    /// The first members (at most a count) of a sorted set in a lex range
    /// (min, max) are exactly these.
    LexFirst(String, [String; 2], usize, Vec<String>),
    /// Each of these lex ranges of a sorted set has no member (a gate with
    /// nothing open): one guard for many, cheaper to send and to check.
    LexEmpty(String, Vec<[String; 2]>),
    /// Each of these lex ranges of a sorted set holds one member, the
    /// given one (a gate whose head is its only open delivery). Only the
    /// count is checked: every use guards the member's record too (an
    /// open delivery's record and its gate membership change together).
    LexAlone(String, Vec<[String; 3]>),
    /// A hash has exactly this many fields.
    HashLen(String, usize),
    /// Members of a sorted set and the score each must have (`""`: none),
    /// compared as numbers (a key-rate group's TATs, [`Keys::tats`]).
    Scores(String, Vec<[String; 2]>),
}

/// What a catalog guard ([`Cas::catalog_is`]) guards.
#[derive(Debug)]
enum Kept {
    /// A stream's stored value, as [`StreamFacts`] hold it.
    Stream(StreamName),
    /// A group's settings, as [`Settings`] hold them.
    Group(StreamName, GroupName, Settings),
}

impl Cas {
    /// Commands whose arguments after the key may repeat (`HSET` and `ZADD`
    /// in pairs; Rheo never gives `ZADD` options).
    const VARIADIC: [&'static str; 4] = ["HSET", "HDEL", "ZADD", "ZREM"];
    /// Commands whose every argument is a key.
    const KEYS_ONLY: [&'static str; 2] = ["DEL", "UNLINK"];
    /// Arguments per joined command, and guards per group, at most (Lua's
    /// `unpack` has a limit).
    const MAX_ARGS: usize = 1000;

    /// The group of kind `kind` on `key` that can take one more guard of
    /// `width` arguments, if there is one.
    fn joinable(&mut self, kind: char, key: &str, width: usize) -> Option<&mut Guard> {
        let at = *self.joinable.get(&(kind, key.to_owned()))?;
        let guard = &mut self.guards[at];
        let len = match guard {
            Guard::Hash(_, fields) => fields.len(),
            Guard::LexEmpty(_, ranges) => ranges.len(),
            Guard::LexAlone(_, alone) => alone.len(),
            Guard::Scores(_, scores) => scores.len(),
            Guard::ZsetNoneUntil(..) | Guard::LexFirst(..) | Guard::HashLen(..) => return None,
        };
        ((len + 1) * width <= Self::MAX_ARGS).then_some(guard)
    }

    /// Adds a new group that later guards of its kind and key may join.
    fn push_joinable(&mut self, kind: char, key: &str, guard: Guard) {
        self.joinable
            .insert((kind, key.to_owned()), self.guards.len());
        self.guards.push(guard);
    }

    fn hash_guard(&mut self, key: &str, field: &str, kind: &str, value: &str) {
        let guard = [field, kind, value].map(str::to_owned);
        if let Some(Guard::Hash(_, fields)) = self.joinable('h', key, 3) {
            fields.push(guard);
            return;
        }
        self.push_joinable('h', key, Guard::Hash(key.to_owned(), vec![guard]));
    }

    /// Holds only if `HGET key field` is still `expected` (`None`: absent).
    fn hget_is(&mut self, key: &str, field: &str, expected: Option<&str>) {
        match expected {
            Some(v) => self.hash_guard(key, field, "1", v),
            None => self.hash_guard(key, field, "0", ""),
        }
    }

    /// Holds only if `HGET key field` still starts with `prefix`.
    fn hget_starts(&mut self, key: &str, field: &str, prefix: &str) {
        self.hash_guard(key, field, "2", prefix);
    }

    /// Holds only if `member` of the sorted set `key` still has the score
    /// `expected` (`None`: it is no member).
    fn zscore_is(&mut self, key: &str, member: &str, expected: Option<i64>) {
        let guard = [
            member.to_owned(),
            expected.map(|v| v.to_string()).unwrap_or_default(),
        ];
        if let Some(Guard::Scores(_, scores)) = self.joinable('c', key, 2) {
            scores.push(guard);
            return;
        }
        self.push_joinable('c', key, Guard::Scores(key.to_owned(), vec![guard]));
    }

    /// Holds only if the hash `key` has exactly `n` fields.
    fn hash_len_is(&mut self, key: &str, n: usize) {
        self.guards.push(Guard::HashLen(key.to_owned(), n));
    }

    /// Holds only if the sorted set `key` has no member scored at most
    /// `max` (`+inf`: no member at all).
    fn zset_none_until(&mut self, key: &str, max: &str) {
        self.guards
            .push(Guard::ZsetNoneUntil(key.to_owned(), max.to_owned()));
    }

    /// Holds only if `ZRANGEBYLEX key min max LIMIT 0 count` still gives
    /// exactly `members`.
    fn lex_first_are(&mut self, key: &str, range: [String; 2], count: usize, members: Vec<String>) {
        match (count, <[String; 1]>::try_from(members)) {
            (_, Err(members)) if members.is_empty() => {
                if let Some(Guard::LexEmpty(_, ranges)) = self.joinable('e', key, 2) {
                    ranges.push(range);
                } else {
                    let guard = Guard::LexEmpty(key.to_owned(), vec![range]);
                    self.push_joinable('e', key, guard);
                }
            }
            (2, Ok([member])) => {
                let [min, max] = range;
                if let Some(Guard::LexAlone(_, alone)) = self.joinable('s', key, 3) {
                    alone.push([min, max, member]);
                } else {
                    let guard = Guard::LexAlone(key.to_owned(), vec![[min, max, member]]);
                    self.push_joinable('s', key, guard);
                }
            }
            (_, Ok(member)) => {
                let guard = Guard::LexFirst(key.to_owned(), range, count, member.into());
                self.guards.push(guard);
            }
            (_, Err(members)) => {
                let guard = Guard::LexFirst(key.to_owned(), range, count, members);
                self.guards.push(guard);
            }
        }
    }

    /// Holds only if field `field` of hash `key` is still `raw`, what this
    /// process keeps of a stream (its identity: its stored value must
    /// start with it, whatever its retention, [`stream_identity`]) or a
    /// group (its settings, whose ordering and flow decide what a claim, a
    /// settle or a re-open writes): a stream or group deleted since, perhaps
    /// created again, fails it. Comes first, before any guard but another
    /// of its kind, so that its failure is the one `cas.lua` reports.
    fn catalog_is(&mut self, key: &str, field: &str, raw: &str, kept: Kept) {
        debug_assert_eq!(
            self.guards.len(),
            self.catalog.len(),
            "catalog guards come first"
        );
        let kind = match kept {
            Kept::Stream(_) => "2",
            Kept::Group(..) => "1",
        };
        // A group of its own, which no other guard joins: its failure alone
        // says what is kept is stale.
        let guard = [field, kind, raw].map(str::to_owned);
        self.guards.push(Guard::Hash(key.to_owned(), vec![guard]));
        self.catalog.push((self.guards.len(), kept));
    }

    fn write(&mut self, command: &[&str]) {
        let (name, key) = (command[0], command.get(1).copied().unwrap_or_default());
        if Self::VARIADIC.contains(&name)
            && let Some(&last) = self.touched.get(key)
            && self.writes[last][0] == name
            && self.writes[last].len() + command.len() <= Self::MAX_ARGS
        {
            self.writes[last].extend(command[2..].iter().map(|a| (*a).to_owned()));
            return;
        }
        self.writes
            .push(command.iter().map(|a| (*a).to_owned()).collect());
        let at = self.writes.len() - 1;
        if Self::KEYS_ONLY.contains(&name) {
            for key in &command[1..] {
                self.touched.insert((*key).to_owned(), at);
            }
        } else {
            self.touched.insert(key.to_owned(), at);
        }
    }

    /// Removes `keys` (`UNLINK`: a big one is freed in the background), in
    /// commands of at most [`Cas::MAX_ARGS`] arguments.
    fn unlink(&mut self, keys: &[String]) {
        for chunk in keys.chunks(Self::MAX_ARGS - 1) {
            let mut command = vec!["UNLINK"];
            command.extend(chunk.iter().map(String::as_str));
            self.write(&command);
        }
    }

    fn is_empty(&self) -> bool {
        self.writes.is_empty()
    }

    /// Adds the script's arguments to `to`: the guard groups, then each
    /// write (a `ZADD` whose members share one score, or are their own
    /// scores, in its short form).
    fn push_args(&self, to: &mut redis::Cmd) {
        to.arg(self.guards.len());
        for guard in &self.guards {
            match guard {
                Guard::Hash(key, fields) => {
                    to.arg("h").arg(key).arg(fields.len());
                    for field in fields {
                        to.arg(field);
                    }
                }
                Guard::ZsetNoneUntil(key, max) => {
                    to.arg("z").arg(key).arg(max);
                }
                Guard::LexFirst(key, [min, max], count, members) => {
                    to.arg("l").arg(key).arg(min).arg(max).arg(*count);
                    to.arg(members.len()).arg(members);
                }
                Guard::LexEmpty(key, ranges) => {
                    to.arg("e").arg(key).arg(ranges.len());
                    for range in ranges {
                        to.arg(range);
                    }
                }
                Guard::LexAlone(key, alone) => {
                    to.arg("s").arg(key).arg(alone.len());
                    for triple in alone {
                        to.arg(triple);
                    }
                }
                Guard::HashLen(key, n) => {
                    to.arg("n").arg(key).arg(*n);
                }
                Guard::Scores(key, scores) => {
                    to.arg("c").arg(key).arg(scores.len());
                    for pair in scores {
                        to.arg(pair);
                    }
                }
            }
        }
        for write in &self.writes {
            let pairs = || write[2..].chunks_exact(2);
            if write[0] == "ZADD" && write.len() > 4 {
                let score = &write[2];
                if pairs().all(|p| &p[0] == score) {
                    to.arg(write.len() / 2 + 2)
                        .arg("ZADD*")
                        .arg(&write[1])
                        .arg(score);
                    for p in pairs() {
                        to.arg(&p[1]);
                    }
                    continue;
                }
                if pairs().all(|p| p[0] == p[1]) {
                    to.arg(write.len() / 2 + 1).arg("ZADD=").arg(&write[1]);
                    for p in pairs() {
                        to.arg(&p[1]);
                    }
                    continue;
                }
            }
            to.arg(write.len()).arg(write);
        }
    }
}

/// Whether a write made it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Applied {
    Yes,
    /// A guard failed: something read has changed; read again.
    Conflict,
}

/// The Redis backend.
#[derive(Clone)]
pub struct RedisBackend {
    conn: ConnectionManager,
    keys: Keys,
    clock: SharedClock,
    cas: Arc<redis::Script>,
    /// `gate_view.lua`: what a settle of a gate's head reads of its gate.
    gate_view: Arc<redis::Script>,
    /// `gate_members.lua`: what a re-open reads of the gates it touches.
    gate_members: Arc<redis::Script>,
    /// `count_gates.lua`: the migration that counts each gate's members.
    count_gates: Arc<redis::Script>,
    /// Wake-ups of this process; fed by the pub/sub listener, so an append
    /// on any node wakes waiters on every node.
    notifier: Arc<Notifier>,
    /// Stops the pub/sub listener with the last clone of the backend.
    _listener: Arc<Listener>,
    /// The cluster keys ([`Backend::cluster`](rheo_core::backend::Backend::cluster)),
    /// woken by the same listener.
    cluster: Arc<cluster::RedisCluster>,
    /// Where each group's next fetch starts its round-robin.
    rotation: Arc<parking_lot::Mutex<HashMap<(StreamName, GroupName), usize>>>,
    /// Fetch and append attempts that found what they read changed and
    /// read again.
    lost_races: Arc<std::sync::atomic::AtomicU64>,
    /// One fetch of a group at a time in this process ([`Self::fetch_turn`]).
    fetch_turns: Arc<Turns<(StreamName, GroupName)>>,
    /// One append to a stream at a time in this process ([`Self::append`]).
    append_turns: Arc<Turns<StreamName>>,
    /// The high watermarks this process's last append to each stream wrote,
    /// with the stream's identity: the next append plans from them and
    /// guards its write on them, one round trip instead of two; when
    /// another node appended in between, the guard fails and the append
    /// reads them ([`Self::append_once`]).
    marks: Arc<parking_lot::Mutex<HashMap<StreamName, Marks>>>,
    /// What this process keeps of streams and groups (never a negative
    /// answer). A stream changes only by its deletion, a group's settings
    /// by a reset that changes its ordering or flow, or by its deletion:
    /// the kept entries are trusted after the store's catalog generation
    /// was read ([`Catalog::refresh`]), every write is guarded on them
    /// ([`Cas::catalog_is`]), and what finds them stale drops them. The
    /// caches below are derived from them and dropped with them.
    catalog: Arc<Catalog<StreamFacts, Settings>>,
    /// Where the events this process fetched are: a settle of them need
    /// not read the id index.
    positions: Arc<parking_lot::Mutex<Positions>>,
    /// Gated groups whose gates were lately found crowded: a fetch that
    /// found a gate with deliveries open, or failed on one taken to be
    /// free, or a batch of plain acks that found other open deliveries in
    /// a gate it acked heads of. Their fetches and acks read the gates
    /// before deciding; the others take each gate to be free (or each
    /// gate's acked heads to be alone in it) and guard the write on it
    /// (`gates.rs`, `settle.rs`).
    crowded: Arc<parking_lot::Mutex<HashSet<(StreamName, GroupName)>>>,
    /// Each group partition as this process last read or wrote it: a fetch
    /// reads the log ahead from that cursor, or claims in one round trip
    /// when the view allows it (`claims`).
    views: Arc<parking_lot::Mutex<Views>>,
    /// Tests: deletes the prefix's keys when the last clone is dropped.
    #[cfg(test)]
    janitor: Option<Arc<tests::Janitor>>,
}

/// A stream's high watermarks as this process last wrote them.
#[derive(Debug, Clone)]
struct Marks {
    /// [`StreamFacts::identity`] when they were written.
    identity: Arc<str>,
    /// Partition to its last sequence.
    last: HashMap<u32, u64>,
}

/// How one append attempt ended ([`RedisBackend::append_once`]).
enum Attempt {
    Appended(Vec<Appended>),
    /// Another append got in between what it read and its write.
    Lost,
    /// It planned from the watermarks this process kept, and another
    /// node's append had moved them.
    Stale,
}

/// [`claims::View`]s by stream, group and partition.
type Views = HashMap<(StreamName, GroupName, u32), planned::View>;

/// Where an event is, and the attempt of this process's latest lease of it.
#[derive(Debug, Clone)]
struct Located {
    partition: u32,
    sequence: u64,
    attempt: u32,
    /// The event's key, when the lease was of a gated group (`None`:
    /// not kept).
    key: Option<Option<Arc<str>>>,
    /// The stream's identity when the event was fetched: a stream
    /// created again under the name may have an event of the id elsewhere.
    stream: Arc<str>,
}

/// A stream as stored: what a node keeps of it in its [`Catalog`].
#[derive(Debug, Clone)]
pub(crate) struct StreamFacts {
    pub(crate) partitions: u32,
    pub(crate) created_at: Timestamp,
    /// Its stored value without its retention ([`stream_identity`]), which
    /// guards compare (a prefix of the value): its incarnation (a random
    /// token given at creation) tells a stream created again under a
    /// deleted one's name from the deleted one, and a change of retention
    /// leaves it as it is.
    pub(crate) identity: Arc<str>,
    /// Its retention as read (what is kept may be stale: a call that
    /// answers with it reads the stream afresh).
    pub(crate) retention: Option<Retention>,
}

impl StreamFacts {
    fn decode(raw: String) -> Result<Self> {
        let (partitions, created_at) = decode_meta(&raw)?;
        let retention = decode_retention(&raw)?;
        Ok(Self {
            partitions,
            created_at,
            identity: stream_identity(&raw).into(),
            retention,
        })
    }
}

/// What precedes a stream's retention in its stored value.
const RETENTION_FIELD: &str = ",\"retention\":";

/// The identity of a stream's stored value: all of it but its retention,
/// written last (`,"retention":{…}}`), and its closing brace. A stream's
/// stored value starts with its identity whatever its retention.
pub(crate) fn stream_identity(raw: &str) -> &str {
    match raw.find(RETENTION_FIELD) {
        Some(at) => &raw[..at],
        None => raw.strip_suffix('}').unwrap_or(raw),
    }
}

/// A stream's stored value: its `identity` and its retention.
pub(crate) fn stream_value(identity: &str, retention: Option<&Retention>) -> String {
    match retention {
        Some(r) => format!("{identity}{RETENTION_FIELD}{}}}", r.to_text()),
        None => format!("{identity}}}"),
    }
}

/// The retention a stream's stored value carries.
fn decode_retention(raw: &str) -> Result<Option<Retention>> {
    let Some(at) = raw.find(RETENTION_FIELD) else {
        return Ok(None);
    };
    let text = raw[at + RETENTION_FIELD.len()..]
        .strip_suffix('}')
        .ok_or_else(|| corrupt("stream", raw))?;
    Retention::from_text(text)
        .map(Some)
        .map_err(|e| corrupt("stream", e))
}

/// A stream's partitions' high watermarks and first sequences, from one
/// `HGETALL` of [`Keys::high_watermarks`].
#[derive(Debug, Clone, Default)]
pub(crate) struct Bounds {
    /// Last sequence per partition (0: empty).
    pub(crate) high_watermarks: Vec<u64>,
    /// The lowest sequence still stored per partition (1 until retention
    /// removed events; the high watermark + 1 once it removed them all).
    pub(crate) first_sequences: Vec<u64>,
}

impl Bounds {
    fn of(raw: &HashMap<String, u64>, partitions: u32) -> Self {
        Self {
            high_watermarks: watermarks(raw, partitions),
            first_sequences: (0..partitions)
                .map(|p| raw.get(&first_field(p)).copied().unwrap_or(1))
                .collect(),
        }
    }
}

/// The field of a partition's first sequence in [`Keys::high_watermarks`].
pub(crate) fn first_field(partition: u32) -> String {
    format!("first:{partition}")
}

/// A group's settings as stored, and the policy's view of them.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    pub(crate) config: GroupConfig,
    /// The stored value, which guards compare. Its incarnation tells a
    /// group created again under a deleted one's name from the deleted one
    /// (`groups::same_group`).
    pub(crate) raw: Arc<str>,
    /// The group's stream, read with the settings: a call on the group
    /// takes the partition count from here, and its writes are guarded on
    /// it ([`RedisBackend::guard_settings`]).
    pub(crate) stream: StreamFacts,
}

/// Event positions by id, bounded: an event never moves, so an entry
/// stays true as long as its stream (an entry names the stream's
/// incarnation, and a delete drops the stream's entries); the older half
/// is dropped when the newer fills up.
#[derive(Debug, Default)]
struct Positions {
    current: HashMap<(StreamName, EventId), Located, foldhash::fast::RandomState>,
    previous: HashMap<(StreamName, EventId), Located, foldhash::fast::RandomState>,
}

impl Positions {
    /// Entries per half.
    const HALF: usize = 1 << 16;

    /// Where the event is in the stream whose identity is `stream`.
    fn get(&self, key: &(StreamName, EventId), stream: &str) -> Option<Located> {
        self.current
            .get(key)
            .or_else(|| self.previous.get(key))
            .filter(|at| *at.stream == *stream)
            .cloned()
    }

    /// Forgets the events of `stream`.
    fn forget(&mut self, stream: &StreamName) {
        self.current.retain(|(s, _), _| s != stream);
        self.previous.retain(|(s, _), _| s != stream);
    }

    fn insert(&mut self, key: (StreamName, EventId), at: Located) {
        if self.current.len() >= Self::HALF {
            self.previous = std::mem::take(&mut self.current);
        }
        self.current.insert(key, at);
    }
}

impl std::fmt::Debug for RedisBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisBackend")
            .field("prefix", &self.keys.prefix)
            .finish_non_exhaustive()
    }
}

/// The task that turns wake-up messages into local notifications,
/// resubscribing after a lost connection.
#[derive(Debug)]
struct Listener {
    task: tokio::task::JoinHandle<()>,
}

impl Listener {
    fn start(
        client: redis::Client,
        channel: String,
        notifier: std::sync::Weak<Notifier>,
        cluster: std::sync::Weak<cluster::RedisCluster>,
    ) -> Self {
        let task = tokio::spawn(async move {
            use futures::StreamExt as _;
            let mut delay = std::time::Duration::from_millis(100);
            loop {
                if notifier.strong_count() == 0 {
                    return;
                }
                if let Ok(mut pubsub) = client.get_async_pubsub().await
                    && pubsub.subscribe(&channel).await.is_ok()
                {
                    delay = std::time::Duration::from_millis(100);
                    // Whatever happened while unsubscribed: wake everyone.
                    if let Some(n) = notifier.upgrade() {
                        n.notify_all();
                    }
                    if let Some(c) = cluster.upgrade() {
                        c.changed();
                    }
                    let mut messages = pubsub.on_message();
                    while let Some(message) = messages.next().await {
                        let Some(n) = notifier.upgrade() else { return };
                        let Ok(payload) = message.get_payload::<String>() else {
                            continue;
                        };
                        if payload == cluster::HANDLERS_CHANGED {
                            if let Some(c) = cluster.upgrade() {
                                c.changed();
                            }
                        } else if let Ok(stream) = StreamName::parse(payload) {
                            n.notify(&stream);
                        }
                    }
                }
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(std::time::Duration::from_secs(5));
            }
        });
        Self { task }
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Whether a failed command may have been applied.
#[derive(Debug, Clone, Copy)]
enum Phase {
    Read,
    Write,
}

/// Tells a bounded call what is about to go out
/// (`docs/cluster.md#a-node-cut-off-from-the-store`).
fn mark(phase: Phase) {
    match phase {
        Phase::Read => rheo_core::backend::sending_read(),
        Phase::Write => rheo_core::backend::sending_write(),
    }
}

/// The connection of `url` and the connection manager's settings, from
/// store timeout `t` (`docs/cluster.md#a-node-cut-off-from-the-store`):
/// a command answers within half of it (a script's answer that does not
/// come is `ambiguous`), connecting takes at most a fifth, and the socket
/// gives up on a server that stopped acknowledging (TCP keepalive after
/// half of it, probing every tenth, three times, in whole seconds;
/// `TCP_USER_TIMEOUT` of `t`), so a connection a cut network left open is
/// replaced rather than waited on.
fn driver_config(
    url: &str,
    t: Duration,
) -> redis::RedisResult<(redis::ConnectionInfo, redis::aio::ConnectionManagerConfig)> {
    use redis::IntoConnectionInfo as _;
    use redis::io::tcp::{TcpSettings, socket2::TcpKeepalive};
    // The kernel counts keepalive times in whole seconds.
    let whole_seconds = |d: Duration| Duration::from_secs(d.as_secs().max(1));
    let keepalive = TcpKeepalive::new()
        .with_time(whole_seconds(t / 2))
        .with_interval(whole_seconds(t / 10))
        .with_retries(3);
    let tcp = TcpSettings::default()
        .set_keepalive(keepalive)
        .set_user_timeout(t);
    let info = url.into_connection_info()?.set_tcp_settings(tcp);
    let config = redis::aio::ConnectionManagerConfig::new()
        .set_connection_timeout(Some(t / 5))
        .set_response_timeout(Some(t / 2))
        .set_number_of_retries(2);
    Ok((info, config))
}

/// Maps a driver error to a portable one: no connection is
/// `backend_unavailable`; a write whose answer was lost is `ambiguous`.
fn map_error(e: redis::RedisError, phase: Phase) -> Error {
    let lost = e.is_timeout() || e.is_connection_dropped();
    if e.is_connection_refusal() || (e.is_io_error() && !lost) {
        return Error::BackendUnavailable(format!("redis: {e}"));
    }
    match (lost, phase) {
        (true, Phase::Write) => Error::Ambiguous(format!("redis: {e}")),
        (true, Phase::Read) => Error::BackendUnavailable(format!("redis: {e}")),
        (false, _) => Error::Failed(format!("redis: {e}")),
    }
}

/// Redis does not have the script (it was restarted or flushed).
fn is_noscript(e: &redis::RedisError) -> bool {
    e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript)
}

fn corrupt(what: &str, detail: impl std::fmt::Display) -> Error {
    Error::Failed(format!("corrupt {what} in redis: {detail}"))
}

impl RedisBackend {
    /// Connects to the Redis a URL names, keys under its prefix, with the
    /// driver's timeouts derived from store timeout `t` ([`driver_config`]).
    pub async fn connect(url: &str, clock: SharedClock, t: Duration) -> Result<Self> {
        let parsed = RedisUrl::parse(url)?;
        let invalid = |e: redis::RedisError| {
            Error::invalid(
                "backend",
                format!("{:?}: {e}", rheo_core::backend::redact_url(url)),
            )
        };
        let (info, config) = driver_config(&parsed.connect, t).map_err(invalid)?;
        let client = redis::Client::open(info).map_err(invalid)?;
        let conn = ConnectionManager::new_with_config(client.clone(), config)
            .await
            .map_err(|e| map_error(e, Phase::Read))?;
        let keys = Keys::new(&parsed.prefix);
        let notifier = Arc::new(Notifier::default());
        let cluster = Arc::new(cluster::RedisCluster::new(conn.clone(), &keys));
        let listener = Listener::start(
            client,
            keys.wakeups(),
            Arc::downgrade(&notifier),
            Arc::downgrade(&cluster),
        );
        Ok(Self {
            conn,
            keys,
            clock,
            cas: Arc::new(redis::Script::new(include_str!("cas.lua"))),
            gate_view: Arc::new(redis::Script::new(include_str!("gate_view.lua"))),
            gate_members: Arc::new(redis::Script::new(include_str!("gate_members.lua"))),
            count_gates: Arc::new(redis::Script::new(include_str!("count_gates.lua"))),
            notifier,
            _listener: Arc::new(listener),
            cluster,
            rotation: Arc::default(),
            fetch_turns: Arc::default(),
            append_turns: Arc::default(),
            marks: Arc::default(),
            lost_races: Arc::default(),
            catalog: Arc::new(Catalog::shared()),
            positions: Arc::default(),
            crowded: Arc::default(),
            views: Arc::default(),
            #[cfg(test)]
            janitor: None,
        })
    }

    /// The connection, for a pipeline of reads.
    fn read_conn(&self) -> ConnectionManager {
        mark(Phase::Read);
        self.conn.clone()
    }

    async fn run<T: redis::FromRedisValue>(&self, cmd: &redis::Cmd, phase: Phase) -> Result<T> {
        mark(phase);
        cmd.query_async(&mut self.conn.clone())
            .await
            .map_err(|e| map_error(e, phase))
    }

    /// Tells every node (this one included, through its listener) that
    /// something may have become claimable on `stream`. Waiters also poll,
    /// so a lost message only delays them.
    pub(crate) async fn wake(&self, stream: &StreamName) {
        self.notifier.notify(stream);
        let publish = redis::cmd("PUBLISH")
            .arg(self.keys.wakeups())
            .arg(stream.as_str())
            .clone();
        if let Err(e) = self.run::<i64>(&publish, Phase::Write).await {
            tracing::debug!(error = %e, "redis: wake-up not published");
        }
    }

    /// [`wake`](Self::wake) as one of a batch's writes: other nodes hear
    /// of it only if the batch is written; the caller notifies this node's
    /// waiters after.
    fn publish_wake(&self, cas: &mut Cas, stream: &StreamName) {
        cas.write(&["PUBLISH", &self.keys.wakeups(), stream.as_str()]);
    }

    /// The rotating start of a group's next fetch.
    fn rotate(&self, s: &StreamName, g: &GroupName) -> usize {
        let mut rotation = self.rotation.lock();
        let next = rotation.entry((s.clone(), g.clone())).or_insert(0);
        let current = *next;
        *next = next.wrapping_add(1);
        current
    }

    /// The turn a fetch of group `g` waits for. A fetch reads what it
    /// claims and writes it guarded on what it read (`claims.rs`): fetches
    /// of one group from one process, taking turns, never make each other
    /// read again, where sixteen at once on one partition each lost the
    /// race to the others over and over (`rheo-compare --clients 16`
    /// failed with "lost 64 races in a row", docs/benchmarks.md). Other
    /// processes' fetches still race, and the guards still hold.
    async fn fetch_turn(&self, s: &StreamName, g: &GroupName) -> OwnedMutexGuard<()> {
        self.fetch_turns.take(&(s.clone(), g.clone())).await
    }

    /// `EVALSHA` of `cas.lua` with a batch's arguments, built in one
    /// buffer.
    fn cas_command(&self, cas: &Cas) -> redis::Cmd {
        let mut cmd = redis::cmd("EVALSHA");
        cmd.arg(self.cas.get_hash()).arg(0);
        cas.push_args(&mut cmd);
        cmd
    }

    /// Loads `cas.lua` into Redis (after a restart or `SCRIPT FLUSH`, its
    /// `EVALSHA` answers `NOSCRIPT`).
    async fn load_cas(&self) -> Result<()> {
        self.cas
            .load_async(&mut self.conn.clone())
            .await
            .map_err(|e| map_error(e, Phase::Read))?;
        Ok(())
    }

    /// Runs `cas.lua`.
    async fn apply(&self, cas: &Cas) -> Result<Applied> {
        let cmd = self.cas_command(cas);
        mark(Phase::Write);
        let failed: i64 = match cmd.query_async(&mut self.conn.clone()).await {
            Err(e) if is_noscript(&e) => {
                self.load_cas().await?;
                cmd.query_async(&mut self.conn.clone()).await
            }
            other => other,
        }
        .map_err(|e| map_error(e, Phase::Write))?;
        self.outcome(cas, failed).await
    }

    /// What `cas.lua` answered. When a guard on what this process keeps of
    /// a stream or group failed ([`Cas::catalog_is`]), what is kept is
    /// dropped, and: a stream's stored value changes only when it is
    /// deleted, so the call finds it not found (it was gone at some point
    /// since the call read it, even if one of its name was created again);
    /// a group is read again with its stream, and is not found if either is
    /// gone or is another of the name, else (a reset changed its ordering
    /// or flow) the call reads again.
    async fn outcome(&self, cas: &Cas, failed: i64) -> Result<Applied> {
        if failed == 0 {
            return Ok(Applied::Yes);
        }
        let kept = cas
            .catalog
            .iter()
            .find(|(at, _)| i64::try_from(*at).is_ok_and(|at| at == failed));
        match kept {
            None => Ok(Applied::Conflict),
            Some((_, Kept::Stream(s))) => {
                self.forget_stream(s);
                Err(Error::StreamNotFound(s.clone()))
            }
            Some((_, Kept::Group(s, g, settings))) => {
                self.forget_settings(s, g);
                self.recheck(s, g, settings).await?;
                Ok(Applied::Conflict)
            }
        }
    }

    /// Guards `cas` on stream `s` as `facts` hold it: the write lands only
    /// on the stream it was decided for, never on a deleted one.
    fn guard_stream(&self, cas: &mut Cas, s: &StreamName, facts: &StreamFacts) {
        let kept = Kept::Stream(s.clone());
        cas.catalog_is(&self.keys.streams(), s.as_str(), &facts.identity, kept);
    }

    /// Guards `cas` on group `g`'s stream and settings as `settings` hold
    /// them.
    fn guard_settings(&self, cas: &mut Cas, s: &StreamName, g: &GroupName, settings: &Settings) {
        self.guard_stream(cas, s, &settings.stream);
        let kept = Kept::Group(s.clone(), g.clone(), settings.clone());
        cas.catalog_is(&self.keys.groups(s), g.as_str(), &settings.raw, kept);
    }

    /// A stream's partition count, creation time and stored value, as kept
    /// here or read.
    async fn meta(&self, stream: &StreamName) -> Result<StreamFacts> {
        self.refresh_catalog().await?;
        if let Some(facts) = self.catalog.stream(stream) {
            return Ok(facts);
        }
        let at = self.catalog.generation();
        let raw: Option<String> = self
            .run(
                redis::cmd("HGET")
                    .arg(self.keys.streams())
                    .arg(stream.as_str()),
                Phase::Read,
            )
            .await?;
        let raw = raw.ok_or_else(|| Error::StreamNotFound(stream.clone()))?;
        let facts = StreamFacts::decode(raw)?;
        self.catalog.keep_stream(stream, facts.clone(), at);
        Ok(facts)
    }

    /// A stream as stored now (not as kept), with its high watermarks and
    /// first sequences, in one round trip; kept for the calls after.
    async fn stream_now(&self, stream: &StreamName) -> Result<(StreamFacts, Bounds)> {
        let at = self.catalog.generation();
        let mut pipe = redis::pipe();
        pipe.cmd("HGET")
            .arg(self.keys.streams())
            .arg(stream.as_str());
        pipe.cmd("HGETALL").arg(self.keys.high_watermarks(stream));
        let (raw, hws): (Option<String>, HashMap<String, u64>) = pipe
            .query_async(&mut self.read_conn())
            .await
            .map_err(|e| map_error(e, Phase::Read))?;
        let facts = self.found_stream(stream, raw, at)?;
        let bounds = Bounds::of(&hws, facts.partitions);
        Ok((facts, bounds))
    }

    /// The stream whose stored value was just read as `raw` (read under
    /// generation `at`): kept, in place of another of its name kept before
    /// (and its groups); not found, and forgotten, when there was none.
    fn found_stream(
        &self,
        stream: &StreamName,
        raw: Option<String>,
        at: rheo_core::backend::catalog::Generation,
    ) -> Result<StreamFacts> {
        let Some(raw) = raw else {
            self.forget_stream(stream);
            return Err(Error::StreamNotFound(stream.clone()));
        };
        let facts = StreamFacts::decode(raw)?;
        if (self.catalog.stream(stream)).is_some_and(|kept| kept.identity != facts.identity) {
            self.forget_stream(stream);
        }
        self.catalog.keep_stream(stream, facts.clone(), at);
        Ok(facts)
    }

    /// A partition's first sequence, the lowest retention left (1 before
    /// it removed any).
    async fn first_sequence(&self, stream: &StreamName, partition: u32) -> Result<u64> {
        let cmd = redis::cmd("HGET")
            .arg(self.keys.high_watermarks(stream))
            .arg(first_field(partition))
            .clone();
        let first: Option<u64> = self.run(&cmd, Phase::Read).await?;
        Ok(first.unwrap_or(1))
    }

    /// Last and first sequence per partition.
    async fn bounds(&self, stream: &StreamName, partitions: u32) -> Result<Bounds> {
        let key = self.keys.high_watermarks(stream);
        let raw: HashMap<String, u64> = self
            .run(redis::cmd("HGETALL").arg(key), Phase::Read)
            .await?;
        Ok(Bounds::of(&raw, partitions))
    }

    /// Creates a stream. Its stored value gets an incarnation of its own,
    /// and whatever keys of its name exist are cleared in the same script
    /// (none do: a delete removes them all at once; this only makes sure a
    /// new stream never starts on a deleted one's leftovers).
    pub(crate) async fn create_stream(&self, req: CreateStream) -> Result<Stream> {
        req.validate()?;
        let created_at = self.clock.now();
        let identity = json!({
            "partitions": req.partition_count,
            "created_at": created_at.as_millis(),
            "incarnation": incarnation(),
        })
        .to_string();
        let identity = identity.strip_suffix('}').unwrap_or(&identity);
        let value = stream_value(identity, req.retention.as_ref());
        let mut cas = Cas::default();
        let (streams, name) = (self.keys.streams(), req.name.as_str());
        cas.hget_is(&streams, name, None);
        cas.unlink(&self.keys.of_stream(&req.name, req.partition_count));
        cas.write(&["HSET", &streams, name, &value]);
        if self.apply(&cas).await? == Applied::Conflict {
            return Err(Error::AlreadyExists(format!("stream {name:?}")));
        }
        let partitions = req.partition_count as usize;
        Ok(Stream {
            name: req.name,
            partition_count: req.partition_count,
            created_at,
            high_watermarks: vec![0; partitions],
            first_sequences: vec![1; partitions],
            retention: req.retention,
        })
    }

    /// The stream as stored now, whatever is kept.
    pub(crate) async fn get_stream(&self, stream: &StreamName) -> Result<Stream> {
        let (facts, bounds) = self.stream_now(stream).await?;
        Ok(describe(stream.clone(), &facts, bounds))
    }

    pub(crate) async fn list_streams(&self) -> Result<Vec<Stream>> {
        let all: BTreeMap<String, String> = self
            .run(redis::cmd("HGETALL").arg(self.keys.streams()), Phase::Read)
            .await?;
        let mut out = Vec::with_capacity(all.len());
        for (name, raw) in all {
            let name = StreamName::parse(name).map_err(|e| corrupt("stream name", e))?;
            let facts = StreamFacts::decode(raw)?;
            let bounds = self.bounds(&name, facts.partitions).await?;
            out.push(describe(name, &facts, bounds));
        }
        Ok(out)
    }

    /// Appends a batch atomically (`docs/log.md#appends`): read the known
    /// ids and the high watermarks, plan with the policy, write every new
    /// event, its id and the new watermarks in one script guarded on them
    /// and on the stream; another node's append in between sends it round
    /// again, a delete makes it not found.
    pub(crate) async fn append(
        &self,
        stream: &StreamName,
        events: Vec<EventInput>,
    ) -> Result<Vec<Appended>> {
        let facts = self.meta(stream).await?;
        if events.is_empty() {
            return Ok(Vec::new());
        }
        let routed = route_batch(events, facts.partitions)?;
        // Appends to one stream take turns in this process: each is guarded
        // on the high watermarks it read, so concurrent ones made each
        // other read again (as fetches did, `Self::fetch_turn`).
        let _turn = self.append_turns.take(stream).await;
        let mut trust_marks = true;
        for attempt in 0..MAX_ATTEMPTS {
            match self
                .append_once(stream, &facts, &routed, trust_marks)
                .await?
            {
                Attempt::Appended(appended) => return Ok(appended),
                // Read them and go again at once: nothing raced, the
                // watermarks kept were old.
                Attempt::Stale => trust_marks = false,
                Attempt::Lost => {
                    (self.lost_races).fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    back_off(attempt).await;
                }
            }
        }
        Err(Error::Failed(format!(
            "append to {stream:?} lost {MAX_ATTEMPTS} races in a row; retry it"
        )))
    }

    /// One attempt. With `trust_marks`, the high watermarks this process
    /// last wrote to the stream stand in for reading them when they cover
    /// every partition the batch writes; the write is guarded on them all
    /// the same.
    async fn append_once(
        &self,
        stream: &StreamName,
        facts: &StreamFacts,
        routed: &[(EventInput, u32)],
        trust_marks: bool,
    ) -> Result<Attempt> {
        let now = self.clock.now();
        let ids_key = self.keys.ids(stream);
        let hw_key = self.keys.high_watermarks(stream);
        let given: Vec<&str> = routed
            .iter()
            .filter_map(|(input, _)| input.id.as_ref().map(EventId::as_str))
            .collect();
        let mut known: HashMap<EventId, Arc<Event>> = HashMap::new();
        if !given.is_empty() {
            let found: Vec<Option<String>> = self
                .run(redis::cmd("HMGET").arg(&ids_key).arg(&given), Phase::Read)
                .await?;
            for (id, position) in given.iter().zip(found) {
                let Some(position) = position else { continue };
                let (p, seq) = decode_position(&position)?;
                let event = self.event_at(stream, p, seq).await?;
                known.insert(
                    EventId::parse(*id).map_err(|e| corrupt("event id", e))?,
                    event,
                );
            }
        }
        let plan = plan_append(routed, &known.keys().cloned().collect::<HashSet<_>>());

        let mut cas = Cas::default();
        self.guard_stream(&mut cas, stream, facts);
        let mut next: HashMap<u32, u64> = HashMap::new();
        let mut written: HashMap<u32, u64> = HashMap::new();
        let mut kept = false;
        if !plan.per_partition.is_empty() {
            let fields: Vec<String> = plan.per_partition.keys().map(u32::to_string).collect();
            let marks = trust_marks
                .then(|| self.marks.lock().get(stream).cloned())
                .flatten();
            let current: Vec<Option<u64>> = match marks {
                Some(m)
                    if m.identity == facts.identity
                        && plan.per_partition.keys().all(|p| m.last.contains_key(p)) =>
                {
                    kept = true;
                    plan.per_partition
                        .keys()
                        .map(|p| m.last.get(p).copied())
                        .collect()
                }
                _ => {
                    let cmd = redis::cmd("HMGET").arg(&hw_key).arg(&fields).clone();
                    self.run(&cmd, Phase::Read).await?
                }
            };
            for ((&p, &count), (field, current)) in
                plan.per_partition.iter().zip(fields.iter().zip(current))
            {
                let current_text = current.map(|c| c.to_string());
                cas.hget_is(&hw_key, field, current_text.as_deref());
                let last = current.unwrap_or(0) + count;
                rheo_core::model::validate_sequence("sequence", last)
                    .map_err(|_| Error::Failed(format!("partition {p} of {stream:?} is full")))?;
                cas.write(&["HSET", &hw_key, field, &last.to_string()]);
                next.insert(p, current.unwrap_or(0) + 1);
                written.insert(p, last);
            }
        }
        let mut out = Vec::with_capacity(routed.len());
        // Per partition, the timestamp of the event last written: the time
        // index keeps the first of each run of equal ones
        // ([`Self::write_event`]).
        let mut last_stamp: HashMap<u32, Timestamp> = HashMap::new();
        for ((input, partition), fresh) in routed.iter().zip(&plan.fresh) {
            if !fresh {
                let id = input
                    .id
                    .clone()
                    .expect("only an input with an id is a duplicate");
                out.push(Err(id));
                continue;
            }
            let seq = next.get_mut(partition).expect("planned partition");
            let sequence = *seq;
            *seq += 1;
            let mut input = input.clone();
            // A given id must not be taken meanwhile; a generated one (a
            // UUIDv7, 74 random bits) is new, so it needs no guard.
            let id = match input.id.take() {
                Some(id) => {
                    cas.hget_is(&ids_key, id.as_str(), None);
                    id
                }
                None => EventId::generate(),
            };
            let event =
                Arc::new(input.into_event(id.clone(), stream.clone(), *partition, sequence, now));
            let starts_run =
                last_stamp.insert(*partition, event.timestamp) != Some(event.timestamp);
            self.write_event(&mut cas, &event, starts_run)?;
            cas.write(&[
                "HSET",
                &ids_key,
                id.as_str(),
                &format!("{partition}:{sequence}"),
            ]);
            known.insert(id, Arc::clone(&event));
            out.push(Ok(event));
        }
        if cas.is_empty() {
            // Every input was a duplicate (of events read just now): nothing
            // to write.
        } else {
            self.publish_wake(&mut cas, stream);
            if self.apply(&cas).await? == Applied::Conflict {
                self.marks.lock().remove(stream);
                return Ok(if kept { Attempt::Stale } else { Attempt::Lost });
            }
            self.notifier.notify(stream);
            self.keep_marks(stream, facts, written);
        }
        Ok(Attempt::Appended(rheo_core::backend::policy::appended(
            out, &known,
        )))
    }

    /// Keeps the watermarks an append wrote, beside those of the stream's
    /// other partitions kept before (none when those were of a stream since
    /// deleted and created again under the name).
    fn keep_marks(&self, stream: &StreamName, facts: &StreamFacts, written: HashMap<u32, u64>) {
        let mut marks = self.marks.lock();
        match marks.get_mut(stream) {
            Some(kept) if kept.identity == facts.identity => kept.last.extend(written),
            _ => {
                let identity = Arc::clone(&facts.identity);
                marks.insert(
                    stream.clone(),
                    Marks {
                        identity,
                        last: written,
                    },
                );
            }
        }
    }

    /// The `XADD` of one event: entry id `<sequence>-0` and one field,
    /// `event`, holding the event as JSON ([`LogEntry`]). With `starts_run`
    /// (its timestamp is not that of the event an append wrote just before
    /// it to its partition), its sequence goes into the time index too.
    ///
    /// The time index keeps one member per run of equal timestamps, its
    /// first sequence: the lowest sequence stamped at or after an instant
    /// is the first of some run, so [`Self::first_at_or_after`] finds it
    /// among them, and a batch of 50 events stamped alike adds one member,
    /// not 50. A trim that cuts a run adds its new first
    /// (`retention.rs`).
    fn write_event(&self, cas: &mut Cas, event: &Event, starts_run: bool) -> Result<()> {
        let key = self.keys.log(&event.stream, event.partition);
        let entry = claims::entry_id(event.sequence);
        let body = rheo_core::backend::entry::encode(event).map_err(|e| corrupt("event", e))?;
        cas.write(&["XADD", &key, &entry, "event", &body]);
        if starts_run {
            let times = self.keys.times(&event.stream, event.partition);
            let ts = event.timestamp.as_millis().to_string();
            cas.write(&["ZADD", &times, &ts, &event.sequence.to_string()]);
        }
        Ok(())
    }

    /// The event at one position.
    async fn event_at(&self, stream: &StreamName, partition: u32, seq: u64) -> Result<Arc<Event>> {
        (self.stored_event(stream, partition, seq).await?)
            .ok_or_else(|| corrupt("id index", format!("{partition}:{seq} has no entry")))
    }

    /// The event at one position, if the log still holds it (retention
    /// removes events from the front, `docs/log.md#retention`).
    async fn stored_event(
        &self,
        stream: &StreamName,
        partition: u32,
        seq: u64,
    ) -> Result<Option<Arc<Event>>> {
        let entry = format!("{seq}-0");
        let cmd = redis::cmd("XRANGE")
            .arg(self.keys.log(stream, partition))
            .arg(&entry)
            .arg(&entry)
            .clone();
        let entries: Vec<(String, Vec<String>)> = self.run(&cmd, Phase::Read).await?;
        let Some((id, fields)) = entries.into_iter().next() else {
            return Ok(None);
        };
        Ok(Some(Arc::new(decode_event(
            stream, partition, &id, fields,
        )?)))
    }

    /// The events at several positions, in one round trip: those the log
    /// still holds (retention may have removed some since their position
    /// was read).
    async fn events_at(
        &self,
        stream: &StreamName,
        positions: &[(u32, u64)],
    ) -> Result<HashMap<(u32, u64), Arc<Event>>> {
        if positions.is_empty() {
            return Ok(HashMap::new());
        }
        let mut pipe = redis::pipe();
        for &(p, seq) in positions {
            let entry = claims::entry_id(seq);
            pipe.cmd("XRANGE")
                .arg(self.keys.log(stream, p))
                .arg(&entry)
                .arg(&entry);
        }
        let replies: Vec<Vec<claims::Entry>> = pipe
            .query_async(&mut self.read_conn())
            .await
            .map_err(|e| map_error(e, Phase::Read))?;
        let mut out = HashMap::with_capacity(positions.len());
        for (&(p, seq), entries) in positions.iter().zip(replies) {
            if let Some((id, fields)) = entries.into_iter().next() {
                out.insert((p, seq), Arc::new(decode_event(stream, p, &id, fields)?));
            }
        }
        Ok(out)
    }

    /// Events of one partition from `first` to `last`, both included.
    async fn read_range(
        &self,
        s: &StreamName,
        p: u32,
        first: u64,
        last: u64,
    ) -> Result<Vec<Event>> {
        let cmd = redis::cmd("XRANGE")
            .arg(self.keys.log(s, p))
            .arg(format!("{first}-0"))
            .arg(format!("{last}-0"))
            .clone();
        let entries: Vec<(String, Vec<String>)> = self.run(&cmd, Phase::Read).await?;
        entries
            .into_iter()
            .map(|(id, fields)| decode_event(s, p, &id, fields))
            .collect()
    }

    /// Events of one partition after `after`, in sequence order, read with
    /// the stream as stored now (one round trip).
    pub(crate) async fn read(&self, req: ReadRequest) -> Result<Vec<Event>> {
        req.validate()?;
        let at = self.catalog.generation();
        let mut pipe = redis::pipe();
        pipe.cmd("HGET")
            .arg(self.keys.streams())
            .arg(req.stream.as_str());
        pipe.cmd("XRANGE")
            .arg(self.keys.log(&req.stream, req.partition))
            .arg(format!("{}-0", req.after + 1))
            .arg("+")
            .arg("COUNT")
            .arg(req.limit);
        let (raw, entries): (Option<String>, Vec<claims::Entry>) = pipe
            .query_async(&mut self.read_conn())
            .await
            .map_err(|e| map_error(e, Phase::Read))?;
        let partition_count = self.found_stream(&req.stream, raw, at)?.partitions;
        if req.partition >= partition_count {
            return Err(Error::InvalidPartition {
                partition: req.partition,
                partition_count,
            });
        }
        entries
            .into_iter()
            .map(|(id, fields)| decode_event(&req.stream, req.partition, &id, fields))
            .collect()
    }
}

/// Waits before another attempt of a write that lost a race: at once the
/// first times, then for a random moment of up to a few milliseconds, so
/// that writers of one key that keep colliding (and one that keeps being
/// overtaken) spread out.
async fn back_off(attempt: usize) {
    if attempt < 4 {
        tokio::task::yield_now().await;
        return;
    }
    let most_us = 1000u64 << attempt.min(8).saturating_sub(4);
    let pause = Duration::from_micros(rand::random_range(0..=most_us));
    tokio::time::sleep(pause).await;
}

/// A stream as the API shows it.
fn describe(name: StreamName, facts: &StreamFacts, bounds: Bounds) -> Stream {
    Stream {
        name,
        partition_count: facts.partitions,
        created_at: facts.created_at,
        high_watermarks: bounds.high_watermarks,
        first_sequences: bounds.first_sequences,
        retention: facts.retention,
    }
}

/// The high watermark of each of `partitions` partitions from a `HGETALL`
/// of [`Keys::high_watermarks`].
fn watermarks(raw: &HashMap<String, u64>, partitions: u32) -> Vec<u64> {
    (0..partitions)
        .map(|p| raw.get(&p.to_string()).copied().unwrap_or(0))
        .collect()
}

/// A new stream's or group's incarnation: what tells it from one of its
/// name deleted before.
fn incarnation() -> String {
    format!("{:016x}", rand::random::<u64>())
}

fn decode_meta(raw: &str) -> Result<(u32, Timestamp)> {
    let meta: Value = serde_json::from_str(raw).map_err(|e| corrupt("stream", e))?;
    let partitions = meta["partitions"]
        .as_u64()
        .and_then(|n| u32::try_from(n).ok())
        .ok_or_else(|| corrupt("stream", raw))?;
    let created_at = meta["created_at"]
        .as_i64()
        .ok_or_else(|| corrupt("stream", raw))?;
    Ok((partitions, Timestamp::from_millis(created_at)))
}

/// `<partition>:<sequence>`.
fn decode_position(raw: &str) -> Result<(u32, u64)> {
    raw.split_once(':')
        .and_then(|(p, s)| Some((p.parse().ok()?, s.parse().ok()?)))
        .ok_or_else(|| corrupt("id index", raw))
}

/// The sequence of an entry id (`<sequence>-0`).
fn entry_sequence(entry: &str) -> Result<u64> {
    entry
        .strip_suffix("-0")
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| corrupt("entry id", entry))
}

/// An event from its entry id (`<sequence>-0`) and its fields.
fn decode_event(
    stream: &StreamName,
    partition: u32,
    entry: &str,
    fields: Vec<String>,
) -> Result<Event> {
    let sequence = entry_sequence(entry)?;
    let body = match fields.as_slice() {
        [name, body] if name == "event" => body,
        _ => return Err(corrupt("entry", format!("{entry} has no event field"))),
    };
    rheo_core::backend::entry::decode(stream, partition, sequence, body)
        .map_err(|e| corrupt("event", e))
}
