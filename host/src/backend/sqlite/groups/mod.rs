//! Consumer groups, leases and settles on SQLite.
//!
//! Every write runs in one `BEGIN IMMEDIATE` transaction on the single
//! writer connection, so a fetch's reads and claims cannot interleave with
//! another fetch or settle. The statements still carry their fencing
//! conditions (`status = 'leased' AND lease_id = ?`), as the PostgreSQL
//! backend's must, so the two read the same. Batches (claims, acks, loads)
//! are one multi-row statement each: SQLite statements are cheap, but each
//! one is a round trip to the connection's worker thread.

mod claim;
mod inspect;
mod rewind;
mod settle;

pub(super) use claim::{fetch, renew};
pub(super) use inspect::{dead_letters, group_info, lag, next_due};
pub(super) use rewind::{redrive, replay, reset};
pub(super) use settle::settle;

use std::collections::HashMap;

use sqlx::{Row, SqliteConnection};

use super::{
    SqliteBackend, StreamMeta, event_at, int, json_rows, read_err, ts_col, ts_text, u32_col,
    u64_col, write_err,
};
use crate::backend::sql::{GroupConfig, is_unique_violation};
use crate::backend::{Error, Result};
use crate::model::{
    Event, EventId, Group, GroupName, GroupSpec, StartAfter, StartPosition, StreamName,
};

impl SqliteBackend {
    /// The group's settings, or `group_not_found` (streams checked first by
    /// the caller).
    async fn group_config(
        &self,
        conn: &mut SqliteConnection,
        s: &StreamName,
        g: &GroupName,
    ) -> Result<GroupConfig> {
        let key = (s.clone(), g.clone());
        if let Some(config) = self.groups.read().get(&key) {
            return Ok(config.clone());
        }
        let row = sqlx::query(include_str!("../sql/group_config.sql"))
            .bind(s.as_str())
            .bind(g.as_str())
            .fetch_optional(conn)
            .await
            .map_err(read_err)?
            .ok_or_else(|| Error::GroupNotFound {
                stream: s.clone(),
                group: g.clone(),
            })?;
        let backoff: String = row.try_get(1).map_err(read_err)?;
        let config = GroupConfig {
            max_attempts: u32_col(&row, 0)?,
            retry_backoff_ms: serde_json::from_str(&backoff)
                .map_err(|e| Error::Failed(format!("unreadable retry_backoff_ms: {e}")))?,
        };
        self.groups.write().insert(key, config.clone());
        Ok(config)
    }
}

/// Per partition: (cursor, high watermark).
async fn positions(
    conn: &mut SqliteConnection,
    s: &StreamName,
    g: &GroupName,
) -> Result<HashMap<u32, (u64, u64)>> {
    let rows = sqlx::query(include_str!("../sql/group_positions.sql"))
        .bind(s.as_str())
        .bind(g.as_str())
        .fetch_all(conn)
        .await
        .map_err(read_err)?;
    rows.iter()
        .map(|r| Ok((u32_col(r, 0)?, (u64_col(r, 1)?, u64_col(r, 2)?))))
        .collect()
}

/// The first sequence of partition `p` at or after `t`.
async fn first_at_or_after(
    conn: &mut SqliteConnection,
    s: &StreamName,
    p: u32,
    t: crate::model::Timestamp,
) -> Result<Option<u64>> {
    let row = sqlx::query(include_str!("../sql/first_at_or_after.sql"))
        .bind(s.as_str())
        .bind(i64::from(p))
        .bind(ts_text(t))
        .fetch_one(conn)
        .await
        .map_err(read_err)?;
    let first: Option<i64> = row.try_get(0).map_err(read_err)?;
    Ok(first.map(|seq| seq.max(1) as u64))
}

/// The exclusive start sequence of every partition for `start`.
async fn start_points(
    conn: &mut SqliteConnection,
    stream: &StreamName,
    meta: StreamMeta,
    start: &StartPosition,
) -> Result<Vec<u64>> {
    if let StartPosition::After(StartAfter::PerPartition(map)) = start
        && let Some(p) = map.keys().find(|p| **p >= meta.partition_count)
    {
        return Err(Error::InvalidPartition {
            partition: *p,
            partition_count: meta.partition_count,
        });
    }
    let hws = match start {
        StartPosition::At(_) => Some(high_watermarks(conn, stream).await?),
        _ => None,
    };
    let mut out = Vec::with_capacity(meta.partition_count as usize);
    for p in 0..meta.partition_count {
        out.push(match start {
            StartPosition::Beginning => 0,
            StartPosition::After(after) => after.for_partition(p),
            StartPosition::At(t) => match first_at_or_after(conn, stream, p, *t).await? {
                Some(seq) => seq - 1,
                None => hws.as_ref().and_then(|h| h.get(&p)).copied().unwrap_or(0),
            },
        });
    }
    Ok(out)
}

async fn high_watermarks(
    conn: &mut SqliteConnection,
    stream: &StreamName,
) -> Result<HashMap<u32, u64>> {
    let rows = sqlx::query(include_str!("../sql/high_watermarks.sql"))
        .bind(stream.as_str())
        .fetch_all(conn)
        .await
        .map_err(read_err)?;
    rows.iter()
        .map(|r| Ok((u32_col(r, 0)?, u64_col(r, 1)?)))
        .collect()
}

pub(in crate::backend::sqlite) async fn create_group(
    b: &SqliteBackend,
    stream: &StreamName,
    spec: GroupSpec,
) -> Result<Group> {
    spec.validate()?;
    let meta = b.meta(stream).await?;
    let now = b.now();
    let mut tx = b
        .writer
        .begin_with("BEGIN IMMEDIATE")
        .await
        .map_err(read_err)?;
    let starts = start_points(&mut tx, stream, meta, &spec.start).await?;
    let backoff =
        serde_json::to_string(&spec.retry_backoff_ms).map_err(|e| Error::Failed(e.to_string()))?;
    let inserted = sqlx::query(include_str!("../sql/create_group.sql"))
        .bind(stream.as_str())
        .bind(spec.name.as_str())
        .bind(i64::from(spec.max_attempts))
        .bind(backoff)
        .bind(ts_text(now))
        .execute(&mut *tx)
        .await;
    match inserted {
        Err(e) if is_unique_violation(&e) => {
            return Err(Error::AlreadyExists(format!(
                "group {:?} on stream {:?}",
                spec.name.as_str(),
                stream.as_str()
            )));
        }
        other => other.map_err(write_err)?,
    };
    for (p, start) in starts.iter().enumerate() {
        sqlx::query(include_str!("../sql/create_group_partition.sql"))
            .bind(stream.as_str())
            .bind(spec.name.as_str())
            .bind(p as i64)
            .bind(int(start + 1))
            .execute(&mut *tx)
            .await
            .map_err(write_err)?;
    }
    tx.commit().await.map_err(write_err)?;
    Ok(Group {
        stream: stream.clone(),
        name: spec.name,
        max_attempts: spec.max_attempts,
        retry_backoff_ms: spec.retry_backoff_ms,
        created_at: now,
    })
}

pub(in crate::backend::sqlite) async fn list_groups(
    b: &SqliteBackend,
    stream: &StreamName,
) -> Result<Vec<Group>> {
    b.meta(stream).await?;
    let rows = sqlx::query(include_str!("../sql/list_groups.sql"))
        .bind(stream.as_str())
        .fetch_all(&b.reader)
        .await
        .map_err(read_err)?;
    rows.iter()
        .map(|row| {
            let name: String = row.try_get(0).map_err(read_err)?;
            let backoff: String = row.try_get(2).map_err(read_err)?;
            Ok(Group {
                stream: stream.clone(),
                name: GroupName::parse(&name).map_err(|e| Error::Failed(e.to_string()))?,
                max_attempts: u32_col(row, 1)?,
                retry_backoff_ms: serde_json::from_str(&backoff)
                    .map_err(|e| Error::Failed(e.to_string()))?,
                created_at: ts_col(row, 3)?,
            })
        })
        .collect()
}

/// Loads events by position, keyed by (partition, sequence).
async fn events_at(
    conn: &mut SqliteConnection,
    s: &StreamName,
    positions: &[(u32, u64)],
) -> Result<HashMap<(u32, u64), Event>> {
    let mut out = HashMap::with_capacity(positions.len());
    if positions.is_empty() {
        return Ok(out);
    }
    let rows = sqlx::query(include_str!("../sql/events_at.sql"))
        .bind(s.as_str())
        .bind(json_rows(positions))
        .fetch_all(&mut *conn)
        .await
        .map_err(read_err)?;
    for row in rows {
        let e = event_at(s, &row, 0)?;
        out.insert((e.partition, e.sequence), e);
    }
    Ok(out)
}

/// Sets a partition's cursor.
async fn set_cursor(
    conn: &mut SqliteConnection,
    s: &StreamName,
    g: &GroupName,
    p: u32,
    cursor: u64,
) -> Result<()> {
    sqlx::query(include_str!("../sql/set_cursor.sql"))
        .bind(s.as_str())
        .bind(g.as_str())
        .bind(i64::from(p))
        .bind(int(cursor))
        .execute(conn)
        .await
        .map(|_| ())
        .map_err(write_err)
}

async fn locate(
    conn: &mut SqliteConnection,
    s: &StreamName,
    id: &EventId,
) -> Result<Option<(u32, u64)>> {
    let row = sqlx::query(include_str!("../sql/locate_event.sql"))
        .bind(s.as_str())
        .bind(id.as_str())
        .fetch_optional(conn)
        .await
        .map_err(read_err)?;
    row.map(|r| Ok((u32_col(&r, 0)?, u64_col(&r, 1)?)))
        .transpose()
}

/// Resolves ids to positions; an id the stream does not have is `invalid`.
async fn locate_all(
    conn: &mut SqliteConnection,
    s: &StreamName,
    ids: &[EventId],
) -> Result<Vec<(EventId, u32, u64)>> {
    let mut out = Vec::with_capacity(ids.len());
    let mut unknown = Vec::new();
    for id in ids {
        match locate(conn, s, id).await? {
            Some((p, seq)) => out.push((id.clone(), p, seq)),
            None => unknown.push(id.as_str().to_owned()),
        }
    }
    if unknown.is_empty() {
        Ok(out)
    } else {
        Err(Error::invalid(
            "event_ids",
            format!("not in this stream: {}", unknown.join(", ")),
        ))
    }
}
