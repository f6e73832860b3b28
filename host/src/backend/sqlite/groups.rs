//! Consumer groups, leases and settles on SQLite.
//!
//! Every write runs in one `BEGIN IMMEDIATE` transaction on the single
//! writer connection, so a fetch's reads and claims cannot interleave with
//! another fetch or settle. The statements still carry their fencing
//! conditions (`status = 'leased' AND lease_id = ?`), as the PostgreSQL
//! backend's must, so the two read the same.

use std::collections::HashMap;
use std::sync::Arc;

use sqlx::{Row, SqliteConnection};

use super::{
    SqliteBackend, StreamMeta, event_at, int, log, opt_ts_col, read_err, ts_col, ts_text, u32_col,
    u64_col, write_err,
};
use crate::backend::sql::{is_unique_violation, round_robin};
use crate::backend::{
    DeadLettersRequest, Error, FetchRequest, Partitions, Redrive, RenewRequest, Replay,
    ResetRequest, Result, validate_settlements,
};
use crate::model::{
    ConsumerId, DeadLetter, DeadLetterPage, Event, EventId, Group, GroupInfo, GroupName, GroupSpec,
    Lag, Lease, LeaseId, PartitionLag, SettleOp, SettleTarget, Settlement, StartAfter,
    StartPosition, StreamName, Timestamp, backoff_ms, clip_reason,
};

/// What settles and claims need to know about a group.
struct GroupConfig {
    max_attempts: u32,
    retry_backoff_ms: Vec<u64>,
}

async fn group_config(
    conn: &mut SqliteConnection,
    stream: &StreamName,
    group: &GroupName,
) -> Result<GroupConfig> {
    let row = sqlx::query(include_str!("sql/group_config.sql"))
        .bind(stream.as_str())
        .bind(group.as_str())
        .fetch_optional(conn)
        .await
        .map_err(read_err)?
        .ok_or_else(|| Error::GroupNotFound {
            stream: stream.clone(),
            group: group.clone(),
        })?;
    let backoff: String = row.try_get(1).map_err(read_err)?;
    Ok(GroupConfig {
        max_attempts: u32_col(&row, 0)?,
        retry_backoff_ms: serde_json::from_str(&backoff)
            .map_err(|e| Error::Failed(format!("unreadable retry_backoff_ms: {e}")))?,
    })
}

/// Per partition: (cursor, high watermark).
async fn positions(
    conn: &mut SqliteConnection,
    stream: &StreamName,
    group: &GroupName,
) -> Result<HashMap<u32, (u64, u64)>> {
    let rows = sqlx::query(include_str!("sql/group_positions.sql"))
        .bind(stream.as_str())
        .bind(group.as_str())
        .fetch_all(conn)
        .await
        .map_err(read_err)?;
    rows.iter()
        .map(|r| Ok((u32_col(r, 0)?, (u64_col(r, 1)?, u64_col(r, 2)?))))
        .collect()
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
    let mut out = Vec::with_capacity(meta.partition_count as usize);
    for p in 0..meta.partition_count {
        out.push(match start {
            StartPosition::Beginning => 0,
            StartPosition::After(after) => after.for_partition(p),
            StartPosition::At(t) => {
                let row = sqlx::query(include_str!("sql/first_at_or_after.sql"))
                    .bind(stream.as_str())
                    .bind(i64::from(p))
                    .bind(ts_text(*t))
                    .fetch_one(&mut *conn)
                    .await
                    .map_err(read_err)?;
                let first: Option<i64> = row.try_get(0).map_err(read_err)?;
                match first {
                    Some(seq) => u64::try_from(seq - 1).unwrap_or(0),
                    None => high_watermark(conn, stream, p).await?,
                }
            }
        });
    }
    Ok(out)
}

async fn high_watermark(conn: &mut SqliteConnection, stream: &StreamName, p: u32) -> Result<u64> {
    let rows = sqlx::query(include_str!("sql/high_watermarks.sql"))
        .bind(stream.as_str())
        .fetch_all(conn)
        .await
        .map_err(read_err)?;
    for row in rows {
        if u32_col(&row, 0)? == p {
            return u64_col(&row, 1);
        }
    }
    Ok(0)
}

pub(super) async fn create_group(
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
    let inserted = sqlx::query(include_str!("sql/create_group.sql"))
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
        sqlx::query(include_str!("sql/create_group_partition.sql"))
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

pub(super) async fn list_groups(b: &SqliteBackend, stream: &StreamName) -> Result<Vec<Group>> {
    b.meta(stream).await?;
    let rows = sqlx::query(include_str!("sql/list_groups.sql"))
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

/// Loads one event by position.
async fn event(
    conn: &mut SqliteConnection,
    stream: &StreamName,
    p: u32,
    seq: u64,
) -> Result<Event> {
    let row = sqlx::query(include_str!("sql/event_at.sql"))
        .bind(stream.as_str())
        .bind(i64::from(p))
        .bind(int(seq))
        .fetch_one(conn)
        .await
        .map_err(read_err)?;
    event_at(stream, &row, 0)
}

pub(super) async fn fetch(b: &SqliteBackend, req: FetchRequest) -> Result<Vec<Lease>> {
    req.validate()?;
    let meta = b.meta(&req.stream).await?;
    let now = b.now();
    let expires_at = now.add_ms(req.lease_ms);
    let (s, g) = (&req.stream, &req.group);
    let mut tx = b
        .writer
        .begin_with("BEGIN IMMEDIATE")
        .await
        .map_err(read_err)?;
    let config = group_config(&mut tx, s, g).await?;
    let parts = req.partitions.resolve(meta.partition_count)?;
    if parts.is_empty() {
        return Ok(Vec::new());
    }
    let positions = positions(&mut tx, s, g).await?;

    // The poison guard, then what each partition could give.
    let mut existing: Vec<Vec<u64>> = Vec::with_capacity(parts.len());
    let mut capacity = Vec::with_capacity(parts.len());
    for &p in &parts {
        sqlx::query(include_str!("sql/fetch_poison.sql"))
            .bind(s.as_str())
            .bind(g.as_str())
            .bind(ts_text(now))
            .bind(i64::from(config.max_attempts))
            .bind(i64::from(p))
            .execute(&mut *tx)
            .await
            .map_err(write_err)?;
        let rows = sqlx::query(include_str!("sql/fetch_candidates.sql"))
            .bind(s.as_str())
            .bind(g.as_str())
            .bind(i64::from(p))
            .bind(ts_text(now))
            .bind(i64::from(req.limit))
            .fetch_all(&mut *tx)
            .await
            .map_err(read_err)?;
        let seqs = rows
            .iter()
            .map(|r| u64_col(r, 0))
            .collect::<Result<Vec<_>>>()?;
        let (cursor, hw) = positions.get(&p).copied().unwrap_or((1, 0));
        let unseen = hw.saturating_sub(cursor.saturating_sub(1));
        capacity.push(seqs.len() + usize::try_from(unseen).unwrap_or(usize::MAX));
        existing.push(seqs);
    }
    let first = b.rotate(s, g) % parts.len();
    let quotas = round_robin(&capacity, req.limit as usize, first);

    let mut leases = Vec::with_capacity(req.limit as usize);
    let lease = |event: Event, lease_id: LeaseId, attempt: u32| Lease {
        receipt: Some(lease_id.as_str().to_owned()),
        lease_id,
        stream: s.clone(),
        group: g.clone(),
        event_id: event.id.clone(),
        consumer_id: req.consumer_id.clone(),
        attempt,
        leased_at: now,
        expires_at,
        event: Arc::new(event),
    };
    for (i, &p) in parts.iter().enumerate() {
        let quota = quotas[i];
        let reclaim = quota.min(existing[i].len());
        for &seq in &existing[i][..reclaim] {
            let lease_id = LeaseId::generate();
            let row = sqlx::query(include_str!("sql/fetch_claim.sql"))
                .bind(s.as_str())
                .bind(g.as_str())
                .bind(i64::from(p))
                .bind(int(seq))
                .bind(lease_id.as_str())
                .bind(req.consumer_id.as_str())
                .bind(ts_text(now))
                .bind(ts_text(expires_at))
                .fetch_one(&mut *tx)
                .await
                .map_err(write_err)?;
            let attempt = u32_col(&row, 0)?;
            let event = event(&mut tx, s, p, seq).await?;
            leases.push(lease(event, lease_id, attempt));
        }
        let fresh = quota - reclaim;
        if fresh > 0 {
            let (cursor, _) = positions.get(&p).copied().unwrap_or((1, 0));
            let end = cursor + fresh as u64;
            let rows = sqlx::query(include_str!("sql/events_between.sql"))
                .bind(s.as_str())
                .bind(i64::from(p))
                .bind(int(cursor))
                .bind(int(end))
                .fetch_all(&mut *tx)
                .await
                .map_err(read_err)?;
            for row in &rows {
                let event = event_at(s, row, 0)?;
                let lease_id = LeaseId::generate();
                sqlx::query(include_str!("sql/fetch_materialize.sql"))
                    .bind(s.as_str())
                    .bind(g.as_str())
                    .bind(i64::from(p))
                    .bind(int(event.sequence))
                    .bind(event.id.as_str())
                    .bind(lease_id.as_str())
                    .bind(req.consumer_id.as_str())
                    .bind(ts_text(now))
                    .bind(ts_text(expires_at))
                    .execute(&mut *tx)
                    .await
                    .map_err(write_err)?;
                leases.push(lease(event, lease_id, 1));
            }
            set_cursor(&mut tx, s, g, p, cursor + rows.len() as u64).await?;
        }
    }
    tx.commit().await.map_err(write_err)?;
    leases.sort_unstable_by_key(|l| (l.event.partition, l.event.sequence));
    Ok(leases)
}

async fn set_cursor(
    conn: &mut SqliteConnection,
    s: &StreamName,
    g: &GroupName,
    p: u32,
    cursor: u64,
) -> Result<()> {
    sqlx::query(include_str!("sql/set_cursor.sql"))
        .bind(s.as_str())
        .bind(g.as_str())
        .bind(i64::from(p))
        .bind(int(cursor))
        .execute(conn)
        .await
        .map(|_| ())
        .map_err(write_err)
}

/// The write a settle operation turns into.
enum Write {
    Ack,
    Retry {
        due: Option<Timestamp>,
        reason: String,
    },
    Dead(String),
}

/// A delivery as the fencing check sees it.
struct Held {
    partition: u32,
    sequence: u64,
    attempt: u32,
    consumer_id: Option<String>,
    leased_at: Option<Timestamp>,
}

/// The fencing check: the delivery must be leased under `target`.
async fn fence(
    conn: &mut SqliteConnection,
    s: &StreamName,
    g: &GroupName,
    target: &SettleTarget,
) -> Result<Result<Held>> {
    let row = sqlx::query(include_str!("sql/delivery_by_event.sql"))
        .bind(s.as_str())
        .bind(g.as_str())
        .bind(target.event_id.as_str())
        .fetch_optional(conn)
        .await
        .map_err(read_err)?;
    let Some(row) = row else {
        return Ok(Err(Error::StaleLease));
    };
    let status: String = row.try_get(2).map_err(read_err)?;
    let lease_id: Option<String> = row.try_get(4).map_err(read_err)?;
    if status != "leased" || lease_id.as_deref() != Some(target.lease_id.as_str()) {
        return Ok(Err(Error::StaleLease));
    }
    if let Some(receipt) = &target.receipt
        && receipt != target.lease_id.as_str()
    {
        return Ok(Err(Error::ReceiptMismatch));
    }
    Ok(Ok(Held {
        partition: u32_col(&row, 0)?,
        sequence: u64_col(&row, 1)?,
        attempt: u32_col(&row, 3)?,
        consumer_id: row.try_get(5).map_err(read_err)?,
        leased_at: opt_ts_col(&row, 6)?,
    }))
}

pub(super) async fn renew(b: &SqliteBackend, req: RenewRequest) -> Result<Lease> {
    req.validate()?;
    b.meta(&req.stream).await?;
    let now = b.now();
    let (s, g) = (&req.stream, &req.group);
    let mut tx = b
        .writer
        .begin_with("BEGIN IMMEDIATE")
        .await
        .map_err(read_err)?;
    group_config(&mut tx, s, g).await?;
    let held = fence(&mut tx, s, g, &req.target).await??;
    let expires_at = now.add_ms(req.lease_ms);
    let changed = sqlx::query(include_str!("sql/renew.sql"))
        .bind(s.as_str())
        .bind(g.as_str())
        .bind(req.target.event_id.as_str())
        .bind(req.target.lease_id.as_str())
        .bind(ts_text(expires_at))
        .execute(&mut *tx)
        .await
        .map_err(write_err)?
        .rows_affected();
    if changed != 1 {
        return Err(Error::StaleLease);
    }
    let event = event(&mut tx, s, held.partition, held.sequence).await?;
    tx.commit().await.map_err(write_err)?;
    let consumer = held.consumer_id.unwrap_or_default();
    Ok(Lease {
        receipt: Some(req.target.lease_id.as_str().to_owned()),
        lease_id: req.target.lease_id,
        stream: req.stream,
        group: req.group,
        event_id: event.id.clone(),
        consumer_id: ConsumerId::parse(&consumer).map_err(|e| Error::Failed(e.to_string()))?,
        attempt: held.attempt,
        leased_at: held.leased_at.unwrap_or(now),
        expires_at,
        event: Arc::new(event),
    })
}

/// Applies a batch; returns the per-item results and whether any nack made
/// a delivery claimable at once.
pub(super) async fn settle(
    b: &SqliteBackend,
    s: &StreamName,
    g: &GroupName,
    items: Vec<Settlement>,
) -> Result<(Vec<Result<()>>, bool)> {
    validate_settlements(&items)?;
    b.meta(s).await?;
    let now = b.now();
    let mut tx = b
        .writer
        .begin_with("BEGIN IMMEDIATE")
        .await
        .map_err(read_err)?;
    let config = group_config(&mut tx, s, g).await?;
    let mut results = Vec::with_capacity(items.len());
    let mut requeued = false;
    for item in items {
        if let Err(e) = item.validate() {
            results.push(Err(e.into()));
            continue;
        }
        let held = match fence(&mut tx, s, g, &item.target).await? {
            Ok(held) => held,
            Err(e) => {
                results.push(Err(e));
                continue;
            }
        };
        let target = &item.target;
        let write = match item.op {
            SettleOp::Ack => Write::Ack,
            SettleOp::Reject { reason } => Write::Dead(reason.unwrap_or_else(|| "rejected".into())),
            SettleOp::Nack { reason, delay_ms } => {
                let reason = reason.unwrap_or_else(|| "retry".into());
                if held.attempt >= config.max_attempts {
                    Write::Dead(format!("max_attempts: {reason}"))
                } else {
                    let delay = delay_ms
                        .unwrap_or_else(|| backoff_ms(&config.retry_backoff_ms, held.attempt));
                    requeued |= delay == 0;
                    Write::Retry {
                        due: (delay > 0).then(|| now.add_ms(delay)),
                        reason,
                    }
                }
            }
        };
        let statement = match write {
            Write::Ack => include_str!("sql/settle_ack.sql"),
            Write::Retry { .. } => include_str!("sql/settle_retry.sql"),
            Write::Dead(_) => include_str!("sql/settle_dead.sql"),
        };
        let q = sqlx::query(statement)
            .bind(s.as_str())
            .bind(g.as_str())
            .bind(target.event_id.as_str())
            .bind(target.lease_id.as_str());
        let q = match write {
            Write::Ack => q,
            Write::Retry { due, reason } => q.bind(due.map(ts_text)).bind(clip_reason(&reason)),
            Write::Dead(reason) => q.bind(clip_reason(&reason)).bind(ts_text(now)),
        };
        let changed = q
            .execute(&mut *tx)
            .await
            .map_err(write_err)?
            .rows_affected();
        results.push(if changed == 1 {
            Ok(())
        } else {
            Err(Error::StaleLease)
        });
    }
    tx.commit().await.map_err(write_err)?;
    Ok((results, requeued))
}

/// Lag over `parts`, read inside one transaction for a consistent view.
async fn compute_lag(
    conn: &mut SqliteConnection,
    s: &StreamName,
    g: &GroupName,
    parts: &[u32],
    now: Timestamp,
) -> Result<(Lag, HashMap<u32, (u64, u64)>)> {
    let positions = positions(conn, s, g).await?;
    let rows = sqlx::query(include_str!("sql/lag_open.sql"))
        .bind(s.as_str())
        .bind(g.as_str())
        .bind(ts_text(now))
        .fetch_all(&mut *conn)
        .await
        .map_err(read_err)?;
    let mut open: HashMap<u32, (u64, u64, u64, u64)> = HashMap::new();
    for r in &rows {
        open.insert(
            u32_col(r, 0)?,
            (
                u64_col(r, 1)?,
                u64_col(r, 2)?,
                u64_col(r, 3)?,
                u64_col(r, 4)?,
            ),
        );
    }
    let mut lag = Lag {
        stream: s.clone(),
        group: g.clone(),
        lag: 0,
        partitions: Default::default(),
        pending: 0,
        inflight: 0,
        waiting_retry: 0,
        oldest_unacked_age_ms: None,
    };
    for &p in parts {
        let (cursor, hw) = positions.get(&p).copied().unwrap_or((1, 0));
        let (first_open, leased, fresh, waiting) =
            open.get(&p).copied().unwrap_or((cursor, 0, 0, 0));
        let frontier = first_open.min(cursor).saturating_sub(1);
        let entry = PartitionLag::new(frontier, hw);
        lag.lag += entry.lag;
        lag.partitions.insert(p, entry);
        lag.pending += hw.saturating_sub(cursor.saturating_sub(1)) + fresh;
        lag.inflight += leased;
        lag.waiting_retry += waiting;
        if frontier < hw {
            let e = event(&mut *conn, s, p, frontier + 1).await?;
            let age = now.ms_since(e.timestamp);
            lag.oldest_unacked_age_ms = Some(lag.oldest_unacked_age_ms.map_or(age, |a| a.max(age)));
        }
    }
    Ok((lag, positions))
}

pub(super) async fn lag(
    b: &SqliteBackend,
    s: &StreamName,
    g: &GroupName,
    partitions: &Partitions,
) -> Result<Lag> {
    let meta = b.meta(s).await?;
    let now = b.now();
    let mut tx = b.reader.begin().await.map_err(read_err)?;
    group_config(&mut tx, s, g).await?;
    let parts = partitions.resolve(meta.partition_count)?;
    Ok(compute_lag(&mut tx, s, g, &parts, now).await?.0)
}

pub(super) async fn group_info(
    b: &SqliteBackend,
    s: &StreamName,
    g: &GroupName,
) -> Result<GroupInfo> {
    let meta = b.meta(s).await?;
    let now = b.now();
    let mut tx = b.reader.begin().await.map_err(read_err)?;
    let config = group_config(&mut tx, s, g).await?;
    let parts: Vec<u32> = (0..meta.partition_count).collect();
    let (lag, positions) = compute_lag(&mut tx, s, g, &parts, now).await?;
    let row = sqlx::query(include_str!("sql/dead_count.sql"))
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

async fn locate(
    conn: &mut SqliteConnection,
    s: &StreamName,
    id: &EventId,
) -> Result<Option<(u32, u64)>> {
    let row = sqlx::query(include_str!("sql/locate_event.sql"))
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

pub(super) async fn dead_letters(
    b: &SqliteBackend,
    req: DeadLettersRequest,
) -> Result<DeadLetterPage> {
    req.validate()?;
    b.meta(&req.stream).await?;
    let (s, g) = (&req.stream, &req.group);
    let mut tx = b.reader.begin().await.map_err(read_err)?;
    group_config(&mut tx, s, g).await?;
    let (after_seq, after_p) = match &req.after {
        None => (0, -1),
        Some(id) => {
            let (p, seq) = locate(&mut tx, s, id)
                .await?
                .ok_or_else(|| Error::CursorNotFound(id.as_str().to_owned()))?;
            (int(seq), i64::from(p))
        }
    };
    let rows = sqlx::query(include_str!("sql/dead_letters.sql"))
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
            payload: super::json_col(row, 9)?,
            metadata: super::json_col(row, 10)?,
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

pub(super) async fn redrive(
    b: &SqliteBackend,
    s: &StreamName,
    g: &GroupName,
    which: Redrive,
) -> Result<u64> {
    b.meta(s).await?;
    let mut tx = b
        .writer
        .begin_with("BEGIN IMMEDIATE")
        .await
        .map_err(read_err)?;
    group_config(&mut tx, s, g).await?;
    let count = match which {
        Redrive::All => sqlx::query(include_str!("sql/redrive_all.sql"))
            .bind(s.as_str())
            .bind(g.as_str())
            .execute(&mut *tx)
            .await
            .map_err(write_err)?
            .rows_affected(),
        Redrive::Events(ids) => {
            let mut n = 0;
            for (id, _, _) in locate_all(&mut tx, s, &ids).await? {
                n += sqlx::query(include_str!("sql/redrive_event.sql"))
                    .bind(s.as_str())
                    .bind(g.as_str())
                    .bind(id.as_str())
                    .execute(&mut *tx)
                    .await
                    .map_err(write_err)?
                    .rows_affected();
            }
            n
        }
    };
    tx.commit().await.map_err(write_err)?;
    Ok(count)
}

/// Re-opens the sequences strictly between `after` and `before` in one
/// partition: creates deliveries the group never had (below its start) and
/// makes every other one available now. Returns how many were not open.
async fn reopen(
    conn: &mut SqliteConnection,
    s: &StreamName,
    g: &GroupName,
    p: u32,
    after: u64,
    before: u64,
) -> Result<u64> {
    if after.saturating_add(1) >= before {
        return Ok(0);
    }
    let run = |statement: &'static str| {
        sqlx::query(statement)
            .bind(s.as_str())
            .bind(g.as_str())
            .bind(i64::from(p))
            .bind(int(after))
            .bind(int(before))
    };
    let created = run(include_str!("sql/reopen_insert.sql"))
        .execute(&mut *conn)
        .await
        .map_err(write_err)?
        .rows_affected();
    let reopened = run(include_str!("sql/reopen_update.sql"))
        .execute(&mut *conn)
        .await
        .map_err(write_err)?
        .rows_affected();
    // Deliveries already open but waiting on a retry delay become due now;
    // they were not closed, so they are not counted.
    run(include_str!("sql/reopen_undelay.sql"))
        .execute(&mut *conn)
        .await
        .map_err(write_err)?;
    Ok(created + reopened)
}

pub(super) async fn replay(
    b: &SqliteBackend,
    s: &StreamName,
    g: &GroupName,
    how: Replay,
) -> Result<u64> {
    let meta = b.meta(s).await?;
    // A query replay reads the (immutable) log before taking the writer.
    let matched = match &how {
        Replay::Query(q) => Some(log::run_query(b, s, q, false).await?),
        _ => None,
    };
    let mut tx = b
        .writer
        .begin_with("BEGIN IMMEDIATE")
        .await
        .map_err(read_err)?;
    group_config(&mut tx, s, g).await?;
    let positions = positions(&mut tx, s, g).await?;
    let cursor = |p: u32| positions.get(&p).map_or(1, |(c, _)| *c);
    let mut count = 0;
    match how {
        Replay::FromSequence { after, partitions } => {
            for p in partitions.resolve(meta.partition_count)? {
                count += reopen(&mut tx, s, g, p, after, cursor(p)).await?;
            }
        }
        Replay::FromTime { from, partitions } => {
            for p in partitions.resolve(meta.partition_count)? {
                let row = sqlx::query(include_str!("sql/first_at_or_after.sql"))
                    .bind(s.as_str())
                    .bind(i64::from(p))
                    .bind(ts_text(from))
                    .fetch_one(&mut *tx)
                    .await
                    .map_err(read_err)?;
                let first: Option<i64> = row.try_get(0).map_err(read_err)?;
                if let Some(seq) = first {
                    let after = u64::try_from(seq - 1).unwrap_or(0);
                    count += reopen(&mut tx, s, g, p, after, cursor(p)).await?;
                }
            }
        }
        Replay::Query(_) => {
            for e in matched.unwrap_or_default() {
                let before = (e.sequence + 1).min(cursor(e.partition));
                count += reopen(&mut tx, s, g, e.partition, e.sequence - 1, before).await?;
            }
        }
        Replay::EventIds(ids) => {
            for (_, p, seq) in locate_all(&mut tx, s, &ids).await? {
                let before = (seq + 1).min(cursor(p));
                count += reopen(&mut tx, s, g, p, seq - 1, before).await?;
            }
        }
    }
    tx.commit().await.map_err(write_err)?;
    Ok(count)
}

pub(super) async fn reset(b: &SqliteBackend, req: ResetRequest) -> Result<()> {
    if !req.confirm {
        return Err(Error::ConfirmRequired);
    }
    let meta = b.meta(&req.stream).await?;
    let (s, g) = (&req.stream, &req.group);
    let mut tx = b
        .writer
        .begin_with("BEGIN IMMEDIATE")
        .await
        .map_err(read_err)?;
    group_config(&mut tx, s, g).await?;
    let parts = req.partitions.resolve(meta.partition_count)?;
    let starts = start_points(&mut tx, s, meta, &req.start).await?;
    for p in parts {
        sqlx::query(include_str!("sql/reset_partition.sql"))
            .bind(s.as_str())
            .bind(g.as_str())
            .bind(i64::from(p))
            .execute(&mut *tx)
            .await
            .map_err(write_err)?;
        set_cursor(&mut tx, s, g, p, starts[p as usize] + 1).await?;
    }
    tx.commit().await.map_err(write_err)
}

pub(super) async fn next_due(
    b: &SqliteBackend,
    s: &StreamName,
    g: &GroupName,
    partitions: &Partitions,
) -> Result<Option<Timestamp>> {
    let meta = b.meta(s).await?;
    let now = b.now();
    let mut tx = b.reader.begin().await.map_err(read_err)?;
    group_config(&mut tx, s, g).await?;
    let parts = partitions.resolve(meta.partition_count)?;
    let positions = positions(&mut tx, s, g).await?;
    let mut next: Option<Timestamp> = None;
    for p in parts {
        let (cursor, hw) = positions.get(&p).copied().unwrap_or((1, 0));
        let claimable = cursor <= hw
            || sqlx::query(include_str!("sql/claimable_now.sql"))
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
            include_str!("sql/next_expiry.sql"),
            include_str!("sql/next_retry.sql"),
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
