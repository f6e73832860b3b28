//! Consumer groups, leases and settles on PostgreSQL.
//!
//! Lock order, to keep concurrent transactions deadlock-free: delivery rows
//! first (claims skip locked ones and never wait for them), then cursor rows
//! in partition order. Settles only ever lock the delivery rows they change.

mod claim;
mod inspect;
mod rewind;
mod settle;

pub(super) use claim::{fetch, renew};
pub(super) use inspect::{dead_letters, group_info, lag, next_due};
pub(super) use rewind::{redrive, replay, reset};
pub(super) use settle::settle;

use std::collections::HashMap;

use sqlx::{PgConnection, Row};

use super::{
    PostgresBackend, StreamMeta, event_at, int, parts, pg_ts, read_err, ts_col, u32_col, u64_col,
    write_err,
};
use crate::backend::sql::{GroupConfig, is_unique_violation};
use crate::backend::{Error, Result};
use crate::model::{
    Event, EventId, Group, GroupName, GroupSpec, StartAfter, StartPosition, StreamName, Timestamp,
};

impl PostgresBackend {
    /// The group's settings, or `group_not_found` (streams checked first by
    /// the caller). Groups cannot change or disappear, so this is cached.
    async fn group_config(
        &self,
        conn: &mut PgConnection,
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
        let config = GroupConfig {
            max_attempts: u32_col(&row, 0)?,
            retry_backoff_ms: backoff_from_db(row.try_get(1).map_err(read_err)?),
        };
        self.groups.write().insert(key, config.clone());
        Ok(config)
    }
}

/// A consistent read-only snapshot for multi-statement reads.
pub(super) const READ_SNAPSHOT: &str = "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY";

fn backoff_from_db(v: Vec<i64>) -> Vec<u64> {
    v.into_iter().map(|d| d.max(0) as u64).collect()
}

/// Per partition: (cursor, high watermark).
pub(super) async fn positions(
    conn: &mut PgConnection,
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

/// The exclusive start sequence of every partition for `start`.
pub(super) async fn start_points(
    conn: &mut PgConnection,
    s: &StreamName,
    meta: StreamMeta,
    start: &StartPosition,
) -> Result<Vec<u64>> {
    let all: Vec<u32> = (0..meta.partition_count).collect();
    match start {
        StartPosition::Beginning => Ok(vec![0; all.len()]),
        StartPosition::After(after) => {
            if let StartAfter::PerPartition(map) = after
                && let Some(p) = map.keys().find(|p| **p >= meta.partition_count)
            {
                return Err(Error::InvalidPartition {
                    partition: *p,
                    partition_count: meta.partition_count,
                });
            }
            Ok(all.iter().map(|p| after.for_partition(*p)).collect())
        }
        StartPosition::At(t) => {
            let firsts = first_at_or_after(conn, s, &all, *t).await?;
            let hws = sqlx::query(include_str!("../sql/high_watermarks.sql"))
                .bind(s.as_str())
                .fetch_all(&mut *conn)
                .await
                .map_err(read_err)?;
            let mut out = vec![0; all.len()];
            for row in &hws {
                let p = u32_col(row, 0)?;
                out[p as usize] = match firsts.get(&p) {
                    Some(first) => first - 1,
                    None => u64_col(row, 1)?,
                };
            }
            Ok(out)
        }
    }
}

/// Per partition, the first sequence whose timestamp is at or after `t`.
pub(super) async fn first_at_or_after(
    conn: &mut PgConnection,
    s: &StreamName,
    partitions: &[u32],
    t: Timestamp,
) -> Result<HashMap<u32, u64>> {
    let rows = sqlx::query(include_str!("../sql/first_at_or_after.sql"))
        .bind(s.as_str())
        .bind(parts(partitions))
        .bind(pg_ts(t))
        .fetch_all(conn)
        .await
        .map_err(read_err)?;
    let mut out = HashMap::new();
    for row in &rows {
        let first: Option<i64> = row.try_get(1).map_err(read_err)?;
        if let Some(seq) = first {
            out.insert(u32_col(row, 0)?, seq.max(1) as u64);
        }
    }
    Ok(out)
}

pub(in crate::backend::postgres) async fn create_group(
    b: &PostgresBackend,
    s: &StreamName,
    spec: GroupSpec,
) -> Result<Group> {
    spec.validate()?;
    let meta = b.meta(s).await?;
    let now = b.now();
    let mut tx = b.pool.begin().await.map_err(read_err)?;
    let starts = start_points(&mut tx, s, meta, &spec.start).await?;
    let backoff: Vec<i64> = spec.retry_backoff_ms.iter().map(|d| int(*d)).collect();
    let inserted = sqlx::query(include_str!("../sql/create_group.sql"))
        .bind(s.as_str())
        .bind(spec.name.as_str())
        .bind(spec.max_attempts as i32)
        .bind(backoff)
        .bind(pg_ts(now))
        .execute(&mut *tx)
        .await;
    match inserted {
        Err(e) if is_unique_violation(&e) => {
            return Err(Error::AlreadyExists(format!(
                "group {:?} on stream {:?}",
                spec.name.as_str(),
                s.as_str()
            )));
        }
        other => other.map_err(write_err)?,
    };
    let all: Vec<i32> = (0..meta.partition_count as i32).collect();
    let cursors: Vec<i64> = starts.iter().map(|start| int(start + 1)).collect();
    sqlx::query(include_str!("../sql/create_group_partitions.sql"))
        .bind(s.as_str())
        .bind(spec.name.as_str())
        .bind(all)
        .bind(cursors)
        .execute(&mut *tx)
        .await
        .map_err(write_err)?;
    tx.commit().await.map_err(write_err)?;
    Ok(Group {
        stream: s.clone(),
        name: spec.name,
        max_attempts: spec.max_attempts,
        retry_backoff_ms: spec.retry_backoff_ms,
        created_at: now,
    })
}

pub(in crate::backend::postgres) async fn list_groups(
    b: &PostgresBackend,
    s: &StreamName,
) -> Result<Vec<Group>> {
    b.meta(s).await?;
    let rows = sqlx::query(include_str!("../sql/list_groups.sql"))
        .bind(s.as_str())
        .fetch_all(&b.pool)
        .await
        .map_err(read_err)?;
    rows.iter()
        .map(|row| {
            let name: String = row.try_get(0).map_err(read_err)?;
            Ok(Group {
                stream: s.clone(),
                name: GroupName::parse(&name).map_err(|e| Error::Failed(e.to_string()))?,
                max_attempts: u32_col(row, 1)?,
                retry_backoff_ms: backoff_from_db(row.try_get(2).map_err(read_err)?),
                created_at: ts_col(row, 3)?,
            })
        })
        .collect()
}

/// Loads events by position, keyed by (partition, sequence).
pub(super) async fn events_at(
    conn: &mut PgConnection,
    s: &StreamName,
    positions: &[(u32, u64)],
) -> Result<HashMap<(u32, u64), Event>> {
    if positions.is_empty() {
        return Ok(HashMap::new());
    }
    let (ps, seqs): (Vec<i32>, Vec<i64>) =
        positions.iter().map(|(p, q)| (*p as i32, int(*q))).unzip();
    let rows = sqlx::query(include_str!("../sql/events_at.sql"))
        .bind(s.as_str())
        .bind(ps)
        .bind(seqs)
        .fetch_all(conn)
        .await
        .map_err(read_err)?;
    rows.iter()
        .map(|r| {
            let e = event_at(s, r, 0)?;
            Ok(((e.partition, e.sequence), e))
        })
        .collect()
}

/// Resolves ids to positions; an id the stream does not have is `invalid`.
pub(super) async fn locate_all(
    conn: &mut PgConnection,
    s: &StreamName,
    ids: &[EventId],
) -> Result<Vec<(EventId, u32, u64)>> {
    let names: Vec<String> = ids.iter().map(|i| i.as_str().to_owned()).collect();
    let rows = sqlx::query(include_str!("../sql/locate_events.sql"))
        .bind(s.as_str())
        .bind(&names)
        .fetch_all(conn)
        .await
        .map_err(read_err)?;
    let mut found: HashMap<String, (u32, u64)> = HashMap::new();
    for r in &rows {
        found.insert(
            r.try_get(0).map_err(read_err)?,
            (u32_col(r, 1)?, u64_col(r, 2)?),
        );
    }
    let unknown: Vec<&str> = ids
        .iter()
        .map(EventId::as_str)
        .filter(|i| !found.contains_key(*i))
        .collect();
    if !unknown.is_empty() {
        return Err(Error::invalid(
            "event_ids",
            format!("not in this stream: {}", unknown.join(", ")),
        ));
    }
    Ok(ids
        .iter()
        .map(|id| {
            let (p, seq) = found[id.as_str()];
            (id.clone(), p, seq)
        })
        .collect())
}
