//! Read-only views: lag, group info, dead letters, the next due time.

use std::collections::HashMap;

use sqlx::{PgConnection, Row};

use super::{READ_SNAPSHOT, events_at, positions};
use crate::backend::postgres::{
    PostgresBackend, int, opt_ts_col, parts, pg_ts, read_err, ts_col, u32_col, u64_col,
};
use crate::backend::sql::{LagBuilder, OpenCounts};
use crate::backend::{DeadLettersRequest, Error, Partitions, Result};
use crate::model::{
    DeadLetter, DeadLetterPage, Event, EventId, GroupInfo, GroupName, Lag, StreamName, Timestamp,
};

/// Lag over `selected`, inside one snapshot.
async fn compute_lag(
    conn: &mut PgConnection,
    s: &StreamName,
    g: &GroupName,
    selected: &[u32],
    now: Timestamp,
) -> Result<(Lag, HashMap<u32, (u64, u64)>)> {
    let positions = positions(conn, s, g).await?;
    let rows = sqlx::query(include_str!("../sql/lag_open.sql"))
        .bind(s.as_str())
        .bind(g.as_str())
        .bind(pg_ts(now))
        .fetch_all(&mut *conn)
        .await
        .map_err(read_err)?;
    let mut open: HashMap<u32, OpenCounts> = HashMap::new();
    for r in &rows {
        open.insert(
            u32_col(r, 0)?,
            OpenCounts {
                first_open: Some(u64_col(r, 1)?),
                leased: u64_col(r, 2)?,
                fresh: u64_col(r, 3)?,
                waiting: u64_col(r, 4)?,
            },
        );
    }
    let mut lag = LagBuilder::new(s, g);
    let mut unsettled = Vec::new();
    for &p in selected {
        let (cursor, hw) = positions.get(&p).copied().unwrap_or((1, 0));
        let frontier = lag.add(p, cursor, hw, open.get(&p).copied().unwrap_or_default());
        if frontier < hw {
            unsettled.push((p, frontier + 1));
        }
    }
    for event in events_at(conn, s, &unsettled).await?.values() {
        lag.unsettled_since(event.timestamp, now);
    }
    Ok((lag.lag, positions))
}

pub(in crate::backend::postgres) async fn lag(
    b: &PostgresBackend,
    s: &StreamName,
    g: &GroupName,
    partitions: &Partitions,
) -> Result<Lag> {
    let meta = b.meta(s).await?;
    let now = b.now();
    let mut tx = b.pool.begin_with(READ_SNAPSHOT).await.map_err(read_err)?;
    b.group_config(&mut tx, s, g).await?;
    let selected = partitions.resolve(meta.partition_count)?;
    Ok(compute_lag(&mut tx, s, g, &selected, now).await?.0)
}

pub(in crate::backend::postgres) async fn group_info(
    b: &PostgresBackend,
    s: &StreamName,
    g: &GroupName,
) -> Result<GroupInfo> {
    let meta = b.meta(s).await?;
    let now = b.now();
    let mut tx = b.pool.begin_with(READ_SNAPSHOT).await.map_err(read_err)?;
    let config = b.group_config(&mut tx, s, g).await?;
    let all: Vec<u32> = (0..meta.partition_count).collect();
    let (lag, positions) = compute_lag(&mut tx, s, g, &all, now).await?;
    let row = sqlx::query(include_str!("../sql/dead_count.sql"))
        .bind(s.as_str())
        .bind(g.as_str())
        .fetch_one(&mut *tx)
        .await
        .map_err(read_err)?;
    Ok(GroupInfo {
        stream: s.clone(),
        group: g.clone(),
        max_attempts: config.max_attempts,
        retry_backoff_ms: config.retry_backoff_ms,
        inflight: lag.inflight,
        dead_letters: u64_col(&row, 0)?,
        cursors: all
            .iter()
            .map(|p| (*p, positions.get(p).map_or(1, |(c, _)| *c)))
            .collect(),
        lag,
    })
}

pub(in crate::backend::postgres) async fn dead_letters(
    b: &PostgresBackend,
    req: DeadLettersRequest,
) -> Result<DeadLetterPage> {
    req.validate()?;
    b.meta(&req.stream).await?;
    let (s, g) = (&req.stream, &req.group);
    let mut tx = b.pool.begin_with(READ_SNAPSHOT).await.map_err(read_err)?;
    b.group_config(&mut tx, s, g).await?;
    let (after_seq, after_p) = match &req.after {
        None => (0, -1),
        Some(id) => {
            let rows = sqlx::query(include_str!("../sql/locate_events.sql"))
                .bind(s.as_str())
                .bind(vec![id.as_str().to_owned()])
                .fetch_all(&mut *tx)
                .await
                .map_err(read_err)?;
            let row = rows
                .first()
                .ok_or_else(|| Error::CursorNotFound(id.as_str().to_owned()))?;
            (int(u64_col(row, 2)?), u32_col(row, 1)? as i32)
        }
    };
    let rows = sqlx::query(include_str!("../sql/dead_letters.sql"))
        .bind(s.as_str())
        .bind(g.as_str())
        .bind(after_seq)
        .bind(after_p)
        .bind(i64::from(req.limit))
        .fetch_all(&mut *tx)
        .await
        .map_err(read_err)?;
    let mut dead_letters = Vec::with_capacity(rows.len());
    for row in &rows {
        // Columns: partition, sequence, attempt, reason, dead_lettered_at,
        // then the event's id, key, type, ts, payload, metadata.
        let partition = u32_col(row, 0)?;
        let sequence = u64_col(row, 1)?;
        let id: String = row.try_get(5).map_err(read_err)?;
        let payload: sqlx::types::Json<crate::model::JsonObject> =
            row.try_get(9).map_err(read_err)?;
        let metadata: sqlx::types::Json<crate::model::JsonObject> =
            row.try_get(10).map_err(read_err)?;
        let event = Event {
            id: EventId::parse(&id).map_err(|e| Error::Failed(e.to_string()))?,
            stream: s.clone(),
            partition,
            sequence,
            key: row.try_get(6).map_err(read_err)?,
            event_type: row.try_get(7).map_err(read_err)?,
            timestamp: ts_col(row, 8)?,
            payload: payload.0,
            metadata: metadata.0,
        };
        let reason: Option<String> = row.try_get(3).map_err(read_err)?;
        dead_letters.push(DeadLetter {
            event_id: event.id.clone(),
            partition,
            sequence,
            attempt: u32_col(row, 2)?,
            reason: reason.unwrap_or_default(),
            dead_lettered_at: opt_ts_col(row, 4)?.unwrap_or(Timestamp::EPOCH),
            event,
        });
    }
    let next = (dead_letters.len() == req.limit as usize)
        .then(|| dead_letters.last().map(|d| d.event_id.clone()))
        .flatten();
    Ok(DeadLetterPage { dead_letters, next })
}

pub(in crate::backend::postgres) async fn next_due(
    b: &PostgresBackend,
    s: &StreamName,
    g: &GroupName,
    partitions: &Partitions,
) -> Result<Option<Timestamp>> {
    let meta = b.meta(s).await?;
    let now = b.now();
    let mut tx = b.pool.begin_with(READ_SNAPSHOT).await.map_err(read_err)?;
    b.group_config(&mut tx, s, g).await?;
    let selected = partitions.resolve(meta.partition_count)?;
    if selected.is_empty() {
        return Ok(None);
    }
    let positions = positions(&mut tx, s, g).await?;
    let unseen = selected.iter().any(|p| {
        let (cursor, hw) = positions.get(p).copied().unwrap_or((1, 0));
        cursor <= hw
    });
    let claimable = unseen
        || sqlx::query(include_str!("../sql/claimable_now.sql"))
            .bind(s.as_str())
            .bind(g.as_str())
            .bind(parts(&selected))
            .bind(pg_ts(now))
            .fetch_optional(&mut *tx)
            .await
            .map_err(read_err)?
            .is_some();
    if claimable {
        return Ok(Some(now));
    }
    let row = sqlx::query(include_str!("../sql/next_due.sql"))
        .bind(s.as_str())
        .bind(g.as_str())
        .bind(parts(&selected))
        .fetch_one(&mut *tx)
        .await
        .map_err(read_err)?;
    Ok(opt_ts_col(&row, 0)?.map(|t| t.max(now)))
}
