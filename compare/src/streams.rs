//! The raw Redis loop: one Redis stream, one consumer group, `XREADGROUP
//! COUNT n` for new entries and one `XACK` of the batch — the plain use of
//! Redis Streams, on the same server as Rheo's Redis backend, with whatever
//! persistence the server has.

use std::sync::Arc;
use std::sync::atomic::AtomicUsize;

use anyhow::Context;
use redis::aio::MultiplexedConnection;
use rheo::bench::WorkloadResult;

use crate::clients::{self, Tally};

/// Connects to `url`.
pub(crate) async fn connect(url: &str) -> anyhow::Result<MultiplexedConnection> {
    let client = redis::Client::open(url).with_context(|| format!("bad Redis URL {url}"))?;
    client
        .get_multiplexed_async_connection()
        .await
        .with_context(|| format!("cannot connect to Redis at {url}"))
}

/// Deletes every key under `prefix`.
pub(crate) async fn delete_prefix(url: &str, prefix: &str) -> anyhow::Result<()> {
    let mut conn = connect(url).await?;
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("{prefix}:*"))
        .query_async(&mut conn)
        .await?;
    for chunk in keys.chunks(500) {
        let _: () = redis::cmd("DEL").arg(chunk).query_async(&mut conn).await?;
    }
    Ok(())
}

/// One `XADD` of each payload to `key`, as a pipeline.
fn xadds(key: &str, payloads: &[String]) -> redis::Pipeline {
    let mut pipe = redis::pipe();
    for payload in payloads {
        pipe.cmd("XADD")
            .arg(key)
            .arg("*")
            .arg("payload")
            .arg(payload);
    }
    pipe
}

/// Adds `payloads` to a fresh stream, `batch` `XADD`s per pipeline (timed),
/// each client taking the next batch. The stream is deleted afterwards.
pub(crate) async fn add(
    url: &str,
    payloads: &[String],
    batch: usize,
    clients: usize,
) -> anyhow::Result<WorkloadResult> {
    let mut conn = connect(url).await?;
    let key = format!("rheo_compare_raw_{:08x}", rand::random::<u32>());
    let chunks: Arc<Vec<Vec<String>>> =
        Arc::new(payloads.chunks(batch).map(<[_]>::to_vec).collect());
    let next = Arc::new(AtomicUsize::new(0));
    let result = clients::timed("xadd", payloads.len(), clients, |tally| {
        let (conn, key, chunks, next) = (conn.clone(), key.clone(), chunks.clone(), next.clone());
        async move { clients::rounds(tally, || add_round(&conn, &key, &chunks, &next)).await }
    })
    .await;
    let _: () = redis::cmd("DEL").arg(&key).query_async(&mut conn).await?;
    result
}

/// The next batch not taken yet, as one pipeline of `XADD`s; how many.
async fn add_round(
    conn: &MultiplexedConnection,
    key: &str,
    chunks: &[Vec<String>],
    next: &AtomicUsize,
) -> anyhow::Result<usize> {
    let Some(i) = Tally::take(next, chunks.len()) else {
        return Ok(0);
    };
    let ids: Vec<String> = xadds(key, &chunks[i])
        .query_async(&mut conn.clone())
        .await?;
    Ok(ids.len())
}

/// Adds `payloads` to a fresh stream (not timed), then reads and acks them
/// `batch` at a time through a consumer group, a consumer per client
/// (timed). The stream is deleted afterwards.
pub(crate) async fn read_ack(
    url: &str,
    payloads: &[String],
    batch: usize,
    clients: usize,
) -> anyhow::Result<WorkloadResult> {
    let mut conn = connect(url).await?;
    let key = format!("rheo_compare_raw_{:08x}", rand::random::<u32>());
    for chunk in payloads.chunks(500) {
        let _: () = xadds(&key, chunk).query_async(&mut conn).await?;
    }
    let _: () = redis::cmd("XGROUP")
        .arg("CREATE")
        .arg(&key)
        .arg("g")
        .arg("0")
        .query_async(&mut conn)
        .await?;
    let result = clients::timed("xreadgroup + xack", payloads.len(), clients, |tally| {
        let (conn, key) = (conn.clone(), key.clone());
        let consumer = format!("c{}", tally.client);
        async move { clients::rounds(tally, || read_ack_round(&conn, &key, &consumer, batch)).await }
    })
    .await;
    let _: () = redis::cmd("DEL").arg(&key).query_async(&mut conn).await?;
    result
}

/// `XREADGROUP COUNT batch` as `consumer`, then one `XACK` of what came.
async fn read_ack_round(
    conn: &MultiplexedConnection,
    key: &str,
    consumer: &str,
    batch: usize,
) -> anyhow::Result<usize> {
    type Reply = Option<Vec<(String, Vec<(String, Vec<String>)>)>>;
    let reply: Reply = redis::cmd("XREADGROUP")
        .arg("GROUP")
        .arg("g")
        .arg(consumer)
        .arg("COUNT")
        .arg(batch)
        .arg("STREAMS")
        .arg(key)
        .arg(">")
        .query_async(&mut conn.clone())
        .await?;
    let entries = reply
        .and_then(|streams| streams.into_iter().next())
        .map(|(_, entries)| entries)
        .unwrap_or_default();
    let mut ids = Vec::with_capacity(entries.len());
    for (id, fields) in entries {
        let payload = fields.get(1).context("an entry without its payload")?;
        let _payload: serde_json::Value = serde_json::from_str(payload)?;
        ids.push(id);
    }
    if !ids.is_empty() {
        let _: i64 = redis::cmd("XACK")
            .arg(key)
            .arg("g")
            .arg(&ids)
            .query_async(&mut conn.clone())
            .await?;
    }
    Ok(ids.len())
}
