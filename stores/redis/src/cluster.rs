//! The cluster store on Redis, under the backend's prefix:
//! * `<prefix>:nodes`: hash, node id → its [`NodeRecord`] as JSON;
//!   `<prefix>:nodes:beats`: sorted set, node id by heartbeat (ms), for
//!   forgetting silent nodes.
//! * `<prefix>:module:<digest>`: a module's bytes; `<prefix>:modules`:
//!   sorted set, digest by when it was stored (ms), for forgetting.
//! * `<prefix>:handlers`: hash, handler name → `{"revision": n, "doc": …}`.
//!
//! A handler write is one Lua script that reads the record's revision,
//! compares it with the one the writer read, writes (or deletes) and
//! `PUBLISH`es [`HANDLERS_CHANGED`] on the backend's wake-up channel, all
//! atomically; every node's listener turns that message into a bump of its
//! store's [`Changes`].

use std::collections::BTreeMap;
use std::time::Duration;

use async_trait::async_trait;
use redis::aio::ConnectionManager;
use serde::{Deserialize, Serialize};
use tokio::sync::watch;

use super::{Keys, Phase, corrupt, map_error};
use rheo_core::backend::Result;
use rheo_core::cluster::{Changes, ClusterStore, HandlerRecord, NodeRecord};
use rheo_core::model::Timestamp;

/// The wake-up message of a handler write: never a stream name (those
/// have no `:`).
pub(super) const HANDLERS_CHANGED: &str = ":handlers";

/// Refreshes a node and forgets the silent ones.
/// KEYS: nodes, beats. ARGV: id, record, heartbeat ms, forget ms.
const HEARTBEAT: &str = r"
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
redis.call('ZADD', KEYS[2], ARGV[3], ARGV[1])
local gone = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', '(' .. ARGV[4])
for _, id in ipairs(gone) do
  redis.call('HDEL', KEYS[1], id)
  redis.call('ZREM', KEYS[2], id)
end
return #gone
";

/// Drops modules stored before a time and not kept.
/// KEYS: modules. ARGV: the module keys' prefix, before ms, kept digests.
const FORGET_MODULES: &str = r"
local keep = {}
for i = 3, #ARGV do
  keep[ARGV[i]] = true
end
local old = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', '(' .. ARGV[2])
local n = 0
for _, digest in ipairs(old) do
  if not keep[digest] then
    redis.call('DEL', ARGV[1] .. digest)
    redis.call('ZREM', KEYS[1], digest)
    n = n + 1
  end
end
return n
";

/// Compare-and-set of one handler record: writes (`put`, the new record
/// in ARGV[4]) or deletes (`delete`) it only if its revision is still the
/// expected one (0: no record), then publishes the change.
/// KEYS: handlers. ARGV: name, expected, `put` or `delete`, record,
/// channel, message. Returns 1 if written, 0 if another write came first.
const WRITE_HANDLER: &str = r"
local current = redis.call('HGET', KEYS[1], ARGV[1])
local revision = 0
if current then
  revision = tonumber(cjson.decode(current)['revision'])
end
if revision ~= tonumber(ARGV[2]) then
  return 0
end
if ARGV[3] == 'put' then
  redis.call('HSET', KEYS[1], ARGV[1], ARGV[4])
else
  if not current then
    return 0
  end
  redis.call('HDEL', KEYS[1], ARGV[1])
end
redis.call('PUBLISH', ARGV[5], ARGV[6])
return 1
";

/// A handler record as stored.
#[derive(Debug, Deserialize)]
struct Stored {
    revision: u64,
    doc: serde_json::Value,
}

/// [`Stored`], to write.
#[derive(Debug, Serialize)]
struct StoredRef<'a> {
    revision: u64,
    doc: &'a serde_json::Value,
}

/// The cluster keys of one Redis and prefix.
#[derive(Debug)]
pub(crate) struct RedisCluster {
    conn: ConnectionManager,
    prefix: String,
    channel: String,
    heartbeat: redis::Script,
    forget_modules: redis::Script,
    write_handler: redis::Script,
    changes: Changes,
}

impl RedisCluster {
    pub(super) fn new(conn: ConnectionManager, keys: &Keys) -> Self {
        Self {
            conn,
            prefix: keys.prefix.clone(),
            channel: keys.wakeups(),
            heartbeat: redis::Script::new(HEARTBEAT),
            forget_modules: redis::Script::new(FORGET_MODULES),
            write_handler: redis::Script::new(WRITE_HANDLER),
            changes: Changes::default(),
        }
    }

    /// A handler write here or elsewhere was announced (or may have been
    /// missed while the listener was not subscribed).
    pub(super) fn changed(&self) {
        self.changes.bump();
    }

    fn nodes_key(&self) -> String {
        format!("{}:nodes", self.prefix)
    }

    fn beats_key(&self) -> String {
        format!("{}:nodes:beats", self.prefix)
    }

    /// Every module key is this followed by its digest.
    fn module_prefix(&self) -> String {
        format!("{}:module:", self.prefix)
    }

    fn modules_key(&self) -> String {
        format!("{}:modules", self.prefix)
    }

    fn handlers_key(&self) -> String {
        format!("{}:handlers", self.prefix)
    }

    async fn query<T: redis::FromRedisValue>(&self, cmd: &redis::Cmd, phase: Phase) -> Result<T> {
        cmd.query_async(&mut self.conn.clone())
            .await
            .map_err(|e| map_error(e, phase))
    }

    /// Runs [`WRITE_HANDLER`]; whether it wrote.
    async fn write_handler(&self, name: &str, expected: u64, record: Option<&str>) -> Result<bool> {
        let written: i64 = self
            .write_handler
            .key(self.handlers_key())
            .arg(name)
            .arg(expected)
            .arg(if record.is_some() { "put" } else { "delete" })
            .arg(record.unwrap_or_default())
            .arg(&self.channel)
            .arg(HANDLERS_CHANGED)
            .invoke_async(&mut self.conn.clone())
            .await
            .map_err(|e| map_error(e, Phase::Write))?;
        if written == 0 {
            return Ok(false);
        }
        // This node's own watchers need not wait for the message.
        self.changes.bump();
        Ok(true)
    }
}

fn handler_of(name: String, raw: &str) -> Result<HandlerRecord> {
    let stored: Stored = serde_json::from_str(raw).map_err(|e| corrupt("handler record", e))?;
    Ok(HandlerRecord {
        name,
        revision: stored.revision,
        doc: stored.doc,
    })
}

#[async_trait]
impl ClusterStore for RedisCluster {
    async fn heartbeat(&self, node: &NodeRecord, forget: Timestamp) -> Result<()> {
        let record = serde_json::to_string(node).map_err(|e| corrupt("node record", e))?;
        let _: i64 = self
            .heartbeat
            .key(self.nodes_key())
            .key(self.beats_key())
            .arg(&node.id)
            .arg(record)
            .arg(node.heartbeat_at.as_millis())
            .arg(forget.as_millis())
            .invoke_async(&mut self.conn.clone())
            .await
            .map_err(|e| map_error(e, Phase::Write))?;
        Ok(())
    }

    async fn leave(&self, id: &str) -> Result<()> {
        let _: () = redis::pipe()
            .atomic()
            .hdel(self.nodes_key(), id)
            .ignore()
            .zrem(self.beats_key(), id)
            .ignore()
            .query_async(&mut self.conn.clone())
            .await
            .map_err(|e| map_error(e, Phase::Write))?;
        Ok(())
    }

    async fn nodes(&self, since: Timestamp) -> Result<Vec<NodeRecord>> {
        // By id: the map's order is the bytes' order.
        let all: BTreeMap<String, String> = self
            .query(redis::cmd("HGETALL").arg(self.nodes_key()), Phase::Read)
            .await?;
        let mut out = Vec::with_capacity(all.len());
        for raw in all.values() {
            let node: NodeRecord =
                serde_json::from_str(raw).map_err(|e| corrupt("node record", e))?;
            if node.heartbeat_at >= since {
                out.push(node);
            }
        }
        Ok(out)
    }

    async fn put_module(&self, digest: &str, bytes: &[u8], at: Timestamp) -> Result<()> {
        // Both only if absent, in one transaction: the first write stays.
        let _: () = redis::pipe()
            .atomic()
            .cmd("SET")
            .arg(format!("{}{digest}", self.module_prefix()))
            .arg(bytes)
            .arg("NX")
            .ignore()
            .cmd("ZADD")
            .arg(self.modules_key())
            .arg("NX")
            .arg(at.as_millis())
            .arg(digest)
            .ignore()
            .query_async(&mut self.conn.clone())
            .await
            .map_err(|e| map_error(e, Phase::Write))?;
        Ok(())
    }

    async fn module(&self, digest: &str) -> Result<Option<Vec<u8>>> {
        self.query(
            redis::cmd("GET").arg(format!("{}{digest}", self.module_prefix())),
            Phase::Read,
        )
        .await
    }

    async fn handlers(&self) -> Result<Vec<HandlerRecord>> {
        let all: BTreeMap<String, String> = self
            .query(redis::cmd("HGETALL").arg(self.handlers_key()), Phase::Read)
            .await?;
        all.into_iter()
            .map(|(name, raw)| handler_of(name, &raw))
            .collect()
    }

    async fn handler(&self, name: &str) -> Result<Option<HandlerRecord>> {
        let raw: Option<String> = self
            .query(
                redis::cmd("HGET").arg(self.handlers_key()).arg(name),
                Phase::Read,
            )
            .await?;
        raw.map(|raw| handler_of(name.to_owned(), &raw)).transpose()
    }

    async fn put_handler(
        &self,
        name: &str,
        expected: u64,
        doc: &serde_json::Value,
    ) -> Result<bool> {
        let record = StoredRef {
            revision: expected + 1,
            doc,
        };
        let record = serde_json::to_string(&record).map_err(|e| corrupt("handler record", e))?;
        self.write_handler(name, expected, Some(&record)).await
    }

    async fn delete_handler(&self, name: &str, expected: u64) -> Result<bool> {
        self.write_handler(name, expected, None).await
    }

    async fn forget_modules(&self, keep: &[String], before: Timestamp) -> Result<u64> {
        let mut invocation = self.forget_modules.key(self.modules_key());
        invocation.arg(self.module_prefix()).arg(before.as_millis());
        for digest in keep {
            invocation.arg(digest);
        }
        let forgotten: u64 = invocation
            .invoke_async(&mut self.conn.clone())
            .await
            .map_err(|e| map_error(e, Phase::Write))?;
        Ok(forgotten)
    }

    fn changes(&self) -> watch::Receiver<u64> {
        self.changes.subscribe()
    }

    fn poll_interval(&self) -> Duration {
        // Every handler write is published on the wake-up channel, and a
        // resubscription wakes the watchers too: the poll only bounds what
        // a lost message could delay.
        Duration::from_secs(5)
    }
}
