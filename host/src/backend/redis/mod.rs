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

mod claims;
mod groups;
mod impl_backend;
mod inspect;
mod rewind;
mod settle;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use redis::aio::ConnectionManager;
use serde_json::{Value, json};

use crate::backend::policy::{GroupConfig, plan_append, route_batch};
use crate::backend::{CreateStream, Error, Notifier, ReadRequest, Result};
use crate::clock::SharedClock;
use crate::model::{
    Appended, Event, EventId, EventInput, GroupName, JsonObject, Stream, StreamName, Timestamp,
};

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

    /// Hash: stream name → `{"partitions": n, "created_at": ms}`.
    pub(crate) fn streams(&self) -> String {
        format!("{}:streams", self.prefix)
    }

    /// The Redis stream of one partition; entry ids are `<sequence>-0`.
    pub(crate) fn log(&self, stream: &StreamName, partition: u32) -> String {
        format!("{}:{{{stream}}}:log:{partition}", self.prefix)
    }

    /// Hash: event id → `<partition>:<sequence>` (idempotent appends).
    pub(crate) fn ids(&self, stream: &StreamName) -> String {
        format!("{}:{{{stream}}}:ids", self.prefix)
    }

    /// Hash: partition → its high watermark (absent: 0, empty).
    pub(crate) fn high_watermarks(&self, stream: &StreamName) -> String {
        format!("{}:{{{stream}}}:hw", self.prefix)
    }

    /// Sorted set: sequence by event timestamp, per partition (`start_at`).
    pub(crate) fn times(&self, stream: &StreamName, partition: u32) -> String {
        format!("{}:{{{stream}}}:ts:{partition}", self.prefix)
    }

    /// Hash: group name → its settings (`max_attempts`, backoff, creation).
    pub(crate) fn groups(&self, stream: &StreamName) -> String {
        format!("{}:{{{stream}}}:groups", self.prefix)
    }

    /// Hash: partition → the group's cursor (the next sequence it delivers
    /// for the first time).
    pub(crate) fn cursors(&self, stream: &StreamName, group: &GroupName) -> String {
        format!("{}:{{{stream}}}:g:{group}:cursor", self.prefix)
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

    /// Sorted set: the group's dead letters, by sequence then partition.
    pub(crate) fn dead(&self, s: &StreamName, g: &GroupName) -> String {
        self.group_key(s, g, "dead")
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
        let invalid = |why: String| Error::invalid("backend", format!("{url:?}: {why}"));
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
#[derive(Debug, Default)]
struct Cas {
    /// Per guard: key, field, `1` and the expected value, or `0` and `""`
    /// for "absent".
    guards: Vec<String>,
    /// Per write: its argument count, then the command and its arguments.
    writes: Vec<String>,
}

impl Cas {
    /// Holds only if `HGET key field` is still `expected` (`None`: absent).
    fn hget_is(&mut self, key: &str, field: &str, expected: Option<&str>) {
        let (present, value) = match expected {
            Some(v) => ("1", v),
            None => ("0", ""),
        };
        self.guards
            .extend([key, field, present, value].map(str::to_owned));
    }

    fn write(&mut self, command: &[&str]) {
        self.writes.push(command.len().to_string());
        self.writes.extend(command.iter().map(|a| (*a).to_owned()));
    }

    fn is_empty(&self) -> bool {
        self.writes.is_empty()
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
pub(crate) struct RedisBackend {
    conn: ConnectionManager,
    keys: Keys,
    clock: SharedClock,
    cas: Arc<redis::Script>,
    /// Wake-ups of this process; fed by the pub/sub listener, so an append
    /// on any node wakes waiters on every node.
    notifier: Arc<Notifier>,
    /// Stops the pub/sub listener with the last clone of the backend.
    _listener: Arc<Listener>,
    /// Where each group's next fetch starts its round-robin.
    rotation: Arc<parking_lot::Mutex<HashMap<(StreamName, GroupName), usize>>>,
    /// Streams and group settings never change once created: what was read
    /// once is kept (never a negative answer).
    streams: Arc<parking_lot::RwLock<HashMap<StreamName, (u32, Timestamp)>>>,
    groups: Arc<parking_lot::RwLock<HashMap<(StreamName, GroupName), GroupConfig>>>,
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
    fn start(client: redis::Client, channel: String, notifier: std::sync::Weak<Notifier>) -> Self {
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
                    let mut messages = pubsub.on_message();
                    while let Some(message) = messages.next().await {
                        let Some(n) = notifier.upgrade() else { return };
                        if let Ok(name) = message.get_payload::<String>()
                            && let Ok(stream) = StreamName::parse(name)
                        {
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

fn corrupt(what: &str, detail: impl std::fmt::Display) -> Error {
    Error::Failed(format!("corrupt {what} in redis: {detail}"))
}

impl RedisBackend {
    /// Connects to the Redis a URL names, keys under its prefix.
    pub(crate) async fn connect(url: &str, clock: SharedClock) -> Result<Self> {
        let parsed = RedisUrl::parse(url)?;
        let client = redis::Client::open(parsed.connect.as_str())
            .map_err(|e| Error::invalid("backend", format!("{url:?}: {e}")))?;
        // Fail fast when Redis is gone (the caller backs off and retries);
        // the manager reconnects on its own once it is back.
        let config = redis::aio::ConnectionManagerConfig::new()
            .set_connection_timeout(Some(std::time::Duration::from_secs(2)))
            .set_response_timeout(Some(std::time::Duration::from_secs(5)))
            .set_number_of_retries(2);
        let conn = ConnectionManager::new_with_config(client.clone(), config)
            .await
            .map_err(|e| map_error(e, Phase::Read))?;
        let keys = Keys::new(&parsed.prefix);
        let notifier = Arc::new(Notifier::default());
        let listener = Listener::start(client, keys.wakeups(), Arc::downgrade(&notifier));
        Ok(Self {
            conn,
            keys,
            clock,
            cas: Arc::new(redis::Script::new(include_str!("cas.lua"))),
            notifier,
            _listener: Arc::new(listener),
            rotation: Arc::default(),
            streams: Arc::default(),
            groups: Arc::default(),
        })
    }

    async fn run<T: redis::FromRedisValue>(&self, cmd: &redis::Cmd, phase: Phase) -> Result<T> {
        cmd.query_async(&mut self.conn.clone())
            .await
            .map_err(|e| map_error(e, phase))
    }

    /// Tells every node (this one included, through its listener) that
    /// something may have become claimable on `stream`. Waiters also poll,
    /// so a lost message only delays them.
    pub(super) async fn wake(&self, stream: &StreamName) {
        self.notifier.notify(stream);
        let publish = redis::cmd("PUBLISH")
            .arg(self.keys.wakeups())
            .arg(stream.as_str())
            .clone();
        if let Err(e) = self.run::<i64>(&publish, Phase::Write).await {
            tracing::debug!(error = %e, "redis: wake-up not published");
        }
    }

    /// The rotating start of a group's next fetch.
    fn rotate(&self, s: &StreamName, g: &GroupName) -> usize {
        let mut rotation = self.rotation.lock();
        let next = rotation.entry((s.clone(), g.clone())).or_insert(0);
        let current = *next;
        *next = next.wrapping_add(1);
        current
    }

    /// Runs `cas.lua`.
    async fn apply(&self, cas: &Cas) -> Result<Applied> {
        let failed: i64 = self
            .cas
            .arg(cas.guards.len() / 4)
            .arg(&cas.guards)
            .arg(&cas.writes)
            .invoke_async(&mut self.conn.clone())
            .await
            .map_err(|e| map_error(e, Phase::Write))?;
        Ok(if failed == 0 {
            Applied::Yes
        } else {
            Applied::Conflict
        })
    }

    /// Partition count and creation time of a stream.
    async fn meta(&self, stream: &StreamName) -> Result<(u32, Timestamp)> {
        if let Some(meta) = self.streams.read().get(stream) {
            return Ok(*meta);
        }
        let raw: Option<String> = self
            .run(
                redis::cmd("HGET")
                    .arg(self.keys.streams())
                    .arg(stream.as_str()),
                Phase::Read,
            )
            .await?;
        let raw = raw.ok_or_else(|| Error::StreamNotFound(stream.clone()))?;
        let meta = decode_meta(&raw)?;
        self.streams.write().insert(stream.clone(), meta);
        Ok(meta)
    }

    /// Last sequence per partition.
    async fn high_watermarks(&self, stream: &StreamName, partitions: u32) -> Result<Vec<u64>> {
        let key = self.keys.high_watermarks(stream);
        let raw: HashMap<String, u64> = self
            .run(redis::cmd("HGETALL").arg(key), Phase::Read)
            .await?;
        Ok((0..partitions)
            .map(|p| raw.get(&p.to_string()).copied().unwrap_or(0))
            .collect())
    }

    pub(crate) async fn create_stream(&self, req: CreateStream) -> Result<Stream> {
        req.validate()?;
        let created_at = self.clock.now();
        let meta = json!({"partitions": req.partition_count, "created_at": created_at.as_millis()});
        let mut cas = Cas::default();
        let (streams, name) = (self.keys.streams(), req.name.as_str());
        cas.hget_is(&streams, name, None);
        cas.write(&["HSET", &streams, name, &meta.to_string()]);
        if self.apply(&cas).await? == Applied::Conflict {
            return Err(Error::AlreadyExists(format!("stream {name:?}")));
        }
        Ok(Stream {
            name: req.name,
            partition_count: req.partition_count,
            created_at,
            high_watermarks: vec![0; req.partition_count as usize],
        })
    }

    pub(crate) async fn get_stream(&self, stream: &StreamName) -> Result<Stream> {
        let (partition_count, created_at) = self.meta(stream).await?;
        Ok(Stream {
            name: stream.clone(),
            partition_count,
            created_at,
            high_watermarks: self.high_watermarks(stream, partition_count).await?,
        })
    }

    pub(crate) async fn list_streams(&self) -> Result<Vec<Stream>> {
        let all: BTreeMap<String, String> = self
            .run(redis::cmd("HGETALL").arg(self.keys.streams()), Phase::Read)
            .await?;
        let mut out = Vec::with_capacity(all.len());
        for (name, raw) in all {
            let name = StreamName::parse(name).map_err(|e| corrupt("stream name", e))?;
            let (partition_count, created_at) = decode_meta(&raw)?;
            out.push(Stream {
                high_watermarks: self.high_watermarks(&name, partition_count).await?,
                name,
                partition_count,
                created_at,
            });
        }
        Ok(out)
    }

    /// Appends a batch atomically (`docs/log.md#appends`): read the known
    /// ids and the high watermarks, plan with the policy, write every new
    /// event, its id and the new watermarks in one guarded script; another
    /// node's append in between sends it round again.
    pub(crate) async fn append(
        &self,
        stream: &StreamName,
        events: Vec<EventInput>,
    ) -> Result<Vec<Appended>> {
        let (partition_count, _) = self.meta(stream).await?;
        if events.is_empty() {
            return Ok(Vec::new());
        }
        let routed = route_batch(events, partition_count)?;
        for _ in 0..MAX_ATTEMPTS {
            if let Some(appended) = self.append_once(stream, &routed).await? {
                return Ok(appended);
            }
            tokio::task::yield_now().await;
        }
        Err(Error::Failed(format!(
            "append to {stream:?} lost {MAX_ATTEMPTS} races in a row; retry it"
        )))
    }

    /// One attempt; `None` when another append got in between.
    async fn append_once(
        &self,
        stream: &StreamName,
        routed: &[(EventInput, u32)],
    ) -> Result<Option<Vec<Appended>>> {
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
        let mut next: HashMap<u32, u64> = HashMap::new();
        if !plan.per_partition.is_empty() {
            let fields: Vec<String> = plan.per_partition.keys().map(u32::to_string).collect();
            let current: Vec<Option<u64>> = self
                .run(redis::cmd("HMGET").arg(&hw_key).arg(&fields), Phase::Read)
                .await?;
            for ((&p, &count), (field, current)) in
                plan.per_partition.iter().zip(fields.iter().zip(current))
            {
                let current_text = current.map(|c| c.to_string());
                cas.hget_is(&hw_key, field, current_text.as_deref());
                let last = current.unwrap_or(0) + count;
                crate::model::validate_sequence("sequence", last)
                    .map_err(|_| Error::Failed(format!("partition {p} of {stream:?} is full")))?;
                cas.write(&["HSET", &hw_key, field, &last.to_string()]);
                next.insert(p, current.unwrap_or(0) + 1);
            }
        }
        let mut out = Vec::with_capacity(routed.len());
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
            let id = input.id.take().unwrap_or_else(EventId::generate);
            let event =
                Arc::new(input.into_event(id.clone(), stream.clone(), *partition, sequence, now));
            cas.hget_is(&ids_key, id.as_str(), None);
            self.write_event(&mut cas, &event)?;
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
            // Every input was a duplicate: nothing to write.
        } else if self.apply(&cas).await? == Applied::Conflict {
            return Ok(None);
        } else {
            self.wake(stream).await;
        }
        Ok(Some(crate::backend::policy::appended(out, &known)))
    }

    /// The `XADD` of one event: entry id `<sequence>-0`, one field per
    /// event attribute (type and key only when set).
    fn write_event(&self, cas: &mut Cas, event: &Event) -> Result<()> {
        let key = self.keys.log(&event.stream, event.partition);
        let entry = format!("{}-0", event.sequence);
        let ts = event.timestamp.as_millis().to_string();
        let payload = serde_json::to_string(&event.payload).map_err(|e| corrupt("payload", e))?;
        let metadata =
            serde_json::to_string(&event.metadata).map_err(|e| corrupt("metadata", e))?;
        let mut command = vec!["XADD", &key, &entry, "id", event.id.as_str(), "ts", &ts];
        if let Some(t) = &event.event_type {
            command.extend(["type", t]);
        }
        if let Some(k) = &event.key {
            command.extend(["key", k]);
        }
        command.extend(["payload", &payload, "metadata", &metadata]);
        cas.write(&command);
        let times = self.keys.times(&event.stream, event.partition);
        cas.write(&["ZADD", &times, &ts, &event.sequence.to_string()]);
        Ok(())
    }

    /// The event at one position.
    async fn event_at(&self, stream: &StreamName, partition: u32, seq: u64) -> Result<Arc<Event>> {
        let entry = format!("{seq}-0");
        let cmd = redis::cmd("XRANGE")
            .arg(self.keys.log(stream, partition))
            .arg(&entry)
            .arg(&entry)
            .clone();
        let entries: Vec<(String, Vec<String>)> = self.run(&cmd, Phase::Read).await?;
        let (id, fields) = entries
            .into_iter()
            .next()
            .ok_or_else(|| corrupt("id index", format!("{partition}:{seq} has no entry")))?;
        Ok(Arc::new(decode_event(stream, partition, &id, fields)?))
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

    /// Events of one partition after `after`, in sequence order.
    pub(crate) async fn read(&self, req: ReadRequest) -> Result<Vec<Event>> {
        req.validate()?;
        let (partition_count, _) = self.meta(&req.stream).await?;
        if req.partition >= partition_count {
            return Err(Error::InvalidPartition {
                partition: req.partition,
                partition_count,
            });
        }
        let cmd = redis::cmd("XRANGE")
            .arg(self.keys.log(&req.stream, req.partition))
            .arg(format!("{}-0", req.after + 1))
            .arg("+")
            .arg("COUNT")
            .arg(req.limit)
            .clone();
        let entries: Vec<(String, Vec<String>)> = self.run(&cmd, Phase::Read).await?;
        entries
            .into_iter()
            .map(|(id, fields)| decode_event(&req.stream, req.partition, &id, fields))
            .collect()
    }
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

/// An event from its entry id (`<sequence>-0`) and its fields.
fn decode_event(
    stream: &StreamName,
    partition: u32,
    entry: &str,
    fields: Vec<String>,
) -> Result<Event> {
    let sequence = entry
        .strip_suffix("-0")
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| corrupt("entry id", entry))?;
    let mut map: HashMap<String, String> = HashMap::new();
    let mut it = fields.into_iter();
    while let (Some(k), Some(v)) = (it.next(), it.next()) {
        map.insert(k, v);
    }
    let mut take = |f: &str| map.remove(f);
    let id = take("id").ok_or_else(|| corrupt("entry", format!("{entry} has no id")))?;
    let object = |raw: Option<String>, what: &str| -> Result<JsonObject> {
        serde_json::from_str(raw.as_deref().unwrap_or("{}")).map_err(|e| corrupt(what, e))
    };
    let ts: i64 = take("ts")
        .and_then(|t| t.parse().ok())
        .ok_or_else(|| corrupt("entry", format!("{entry} has no time")))?;
    Ok(Event {
        id: EventId::parse(id).map_err(|e| corrupt("event id", e))?,
        stream: stream.clone(),
        partition,
        sequence,
        event_type: take("type"),
        key: take("key"),
        timestamp: Timestamp::from_millis(ts),
        payload: object(take("payload"), "payload")?,
        metadata: object(take("metadata"), "metadata")?,
    })
}
