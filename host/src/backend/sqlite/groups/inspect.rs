//! Read-only views: lag, group info, dead letters, the next due time.

use std::collections::HashMap;

use sqlx::{Row, SqliteConnection};

use super::{events_at, locate, positions};
use crate::backend::sql::{LagBuilder, OpenCounts};
use crate::backend::sqlite::{
    SqliteBackend, int, json_col, opt_ts_col, read_err, ts_col, ts_text, u32_col, u64_col,
};
use crate::backend::{DeadLettersRequest, Error, Partitions, Result};
use crate::model::{
    DeadLetter, DeadLetterPage, Event, EventId, GroupInfo, GroupName, Lag, StreamName, Timestamp,
};

/// Lag over `parts`, read inside one transaction for a consistent view.
async fn compute_lag(
    conn: &mut SqliteConnection,
    s: &StreamName,
    g: &GroupName,
    parts: &[u32],
    now: Timestamp,
) -> Result<(Lag, HashMap<u32, (u64, u64)>)> {
    let positions = positions(conn, s, g).await?;
    let rows = sqlx::query(include_str!("../sql/lag_open.sql"))
        .bind(s.as_str())
        .bind(g.as_str())
        .bind(ts_text(now))
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
    for &p in parts {
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

pub(in crate::backend::sqlite) async fn lag(
    b: &SqliteBackend,
    s: &StreamName,
    g: &GroupName,
    partitions: &Partitions,
) -> Result<Lag> {
    let meta = b.meta(s).await?;
    let now = b.now();
    let mut tx = b.reader.begin().await.map_err(read_err)?;
    b.group_config(&mut tx, s, g).await?;
    let parts = partitions.resolve(meta.partition_count)?;
    Ok(compute_lag(&mut tx, s, g, &parts, now).await?.0)
}

pub(in crate::backend::sqlite) async fn group_info(
    b: &SqliteBackend,
    s: &StreamName,
    g: &GroupName,
) -> Result<GroupInfo> {
    let meta = b.meta(s).await?;
    let now = b.now();
    let mut tx = b.reader.begin().await.map_err(read_err)?;
    let config = b.group_config(&mut tx, s, g).await?;
    let parts: Vec<u32> = (0..meta.partition_count).collect();
    let (lag, positions) = compute_lag(&mut tx, s, g, &parts, now).await?;
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
        cursors: parts
            .iter()
            .map(|p| (*p, positions.get(p).map_or(1, |(c, _)| *c)))
            .collect(),
        lag,
    })
}

pub(in crate::backend::sqlite) async fn dead_letters(
    b: &SqliteBackend,
    req: DeadLettersRequest,
) -> Result<DeadLetterPage> {
    req.validate()?;
    b.meta(&req.stream).await?;
    let (s, g) = (&req.stream, &req.group);
    let mut tx = b.reader.begin().await.map_err(read_err)?;
    b.group_config(&mut tx, s, g).await?;
    let (after_seq, after_p) = match &req.after {
        None => (0, -1),
        Some(id) => {
            let (p, seq) = locate(&mut tx, s, id)
                .await?
                .ok_or_else(|| Error::CursorNotFound(id.as_str().to_owned()))?;
            (int(seq), i64::from(p))
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
        let event = Event {
            id: EventId::parse(&id).map_err(|e| Error::Failed(e.to_string()))?,
            stream: s.clone(),
            partition,
            sequence,
            key: row.try_get(6).map_err(read_err)?,
            event_type: row.try_get(7).map_err(read_err)?,
            timestamp: ts_col(row, 8)?,
            payload: json_col(row, 9)?,
            metadata: json_col(row, 10)?,
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

pub(in crate::backend::sqlite) async fn next_due(
    b: &SqliteBackend,
    s: &StreamName,
    g: &GroupName,
    partitions: &Partitions,
) -> Result<Option<Timestamp>> {
    let meta = b.meta(s).await?;
    let now = b.now();
    let mut tx = b.reader.begin().await.map_err(read_err)?;
    b.group_config(&mut tx, s, g).await?;
    let parts = partitions.resolve(meta.partition_count)?;
    let positions = positions(&mut tx, s, g).await?;
    let mut next: Option<Timestamp> = None;
    for p in parts {
        let (cursor, hw) = positions.get(&p).copied().unwrap_or((1, 0));
        let claimable = cursor <= hw
            || sqlx::query(include_str!("../sql/claimable_now.sql"))
                .bind(s.as_str())
                .bind(g.as_str())
                .bind(i64::from(p))
                .bind(ts_text(now))
                .fetch_optional(&mut *tx)
                .await
                .map_err(read_err)?
                .is_some();
        if claimable {
            return Ok(Some(now));
        }
        for statement in [
            include_str!("../sql/next_expiry.sql"),
            include_str!("../sql/next_retry.sql"),
        ] {
            let row = sqlx::query(statement)
                .bind(s.as_str())
                .bind(g.as_str())
                .bind(i64::from(p))
                .fetch_one(&mut *tx)
                .await
                .map_err(read_err)?;
            if let Some(t) = opt_ts_col(&row, 0)? {
                next = Some(next.map_or(t, |n| n.min(t)));
            }
        }
    }
    Ok(next.map(|t| t.max(now)))
}
