//! Consumer groups, leases and settles on PostgreSQL.
//!
//! Lock order, to keep concurrent transactions deadlock-free: delivery rows
//! first (claims skip locked ones and never wait for them), then cursor rows
//! in partition order. Settles only ever lock the delivery rows they change.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use sqlx::{PgConnection, Row};

use super::{
    PostgresBackend, StreamMeta, event_at, int, log, opt_ts_col, parts, pg_ts, read_err, ts_col,
    u32_col, u64_col, write_err,
};
use crate::backend::sql::{
    GroupConfig, LagBuilder, OpenCounts, Write, is_unique_violation, round_robin, settle_write,
};
use crate::backend::{
    DeadLettersRequest, Error, FetchRequest, Partitions, Redrive, RenewRequest, Replay,
    ResetRequest, Result, validate_settlements,
};
use crate::model::{
    ConsumerId, DeadLetter, DeadLetterPage, Event, EventId, Group, GroupInfo, GroupName, GroupSpec,
    Lag, Lease, LeaseId, SettleOp, SettleTarget, Settlement, StartAfter, StartPosition, StreamName,
    Timestamp, clip_reason,
};

/// A consistent read-only snapshot for multi-statement reads.
const READ_SNAPSHOT: &str = "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY";

fn backoff_from_db(v: Vec<i64>) -> Vec<u64> {
    v.into_iter().map(|d| d.max(0) as u64).collect()
}

async fn group_config(
    conn: &mut PgConnection,
    s: &StreamName,
    g: &GroupName,
) -> Result<GroupConfig> {
    let row = sqlx::query(include_str!("sql/group_config.sql"))
        .bind(s.as_str())
        .bind(g.as_str())
        .fetch_optional(conn)
        .await
        .map_err(read_err)?
        .ok_or_else(|| Error::GroupNotFound {
            stream: s.clone(),
            group: g.clone(),
        })?;
    Ok(GroupConfig {
        max_attempts: u32_col(&row, 0)?,
        retry_backoff_ms: backoff_from_db(row.try_get(1).map_err(read_err)?),
    })
}

/// Per partition: (cursor, high watermark).
async fn positions(
    conn: &mut PgConnection,
    s: &StreamName,
    g: &GroupName,
) -> Result<HashMap<u32, (u64, u64)>> {
    let rows = sqlx::query(include_str!("sql/group_positions.sql"))
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
async fn start_points(
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
            let hws = sqlx::query(include_str!("sql/high_watermarks.sql"))
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
async fn first_at_or_after(
    conn: &mut PgConnection,
    s: &StreamName,
    partitions: &[u32],
    t: Timestamp,
) -> Result<HashMap<u32, u64>> {
    let rows = sqlx::query(include_str!("sql/first_at_or_after.sql"))
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

pub(super) async fn create_group(
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
    let inserted = sqlx::query(include_str!("sql/create_group.sql"))
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
    sqlx::query(include_str!("sql/create_group_partitions.sql"))
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

pub(super) async fn list_groups(b: &PostgresBackend, s: &StreamName) -> Result<Vec<Group>> {
    b.meta(s).await?;
    let rows = sqlx::query(include_str!("sql/list_groups.sql"))
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
async fn events_at(
    conn: &mut PgConnection,
    s: &StreamName,
    positions: &[(u32, u64)],
) -> Result<HashMap<(u32, u64), Event>> {
    if positions.is_empty() {
        return Ok(HashMap::new());
    }
    let (ps, seqs): (Vec<i32>, Vec<i64>) =
        positions.iter().map(|(p, q)| (*p as i32, int(*q))).unzip();
    let rows = sqlx::query(include_str!("sql/events_at.sql"))
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

pub(super) async fn fetch(b: &PostgresBackend, req: FetchRequest) -> Result<Vec<Lease>> {
    req.validate()?;
    let meta = b.meta(&req.stream).await?;
    let now = b.now();
    let expires_at = now.add_ms(req.lease_ms);
    let (s, g) = (&req.stream, &req.group);
    let mut tx = b.pool.begin().await.map_err(read_err)?;
    let config = group_config(&mut tx, s, g).await?;
    let selected = req.partitions.resolve(meta.partition_count)?;
    if selected.is_empty() {
        return Ok(Vec::new());
    }
    let limit = req.limit as usize;

    sqlx::query(include_str!("sql/fetch_poison.sql"))
        .bind(s.as_str())
        .bind(g.as_str())
        .bind(pg_ts(now))
        .bind(config.max_attempts as i32)
        .bind(parts(&selected))
        .execute(&mut *tx)
        .await
        .map_err(write_err)?;

    // Claimable deliveries, locked (rows other fetchers hold are skipped).
    let rows = sqlx::query(include_str!("sql/fetch_candidates.sql"))
        .bind(s.as_str())
        .bind(g.as_str())
        .bind(parts(&selected))
        .bind(pg_ts(now))
        .bind(i64::from(req.limit))
        .fetch_all(&mut *tx)
        .await
        .map_err(write_err)?;
    let mut existing: HashMap<u32, Vec<u64>> = HashMap::new();
    for row in &rows {
        existing
            .entry(u32_col(row, 0)?)
            .or_default()
            .push(u64_col(row, 1)?);
    }
    // Cursor rows, locked in partition order: only one fetcher at a time
    // creates deliveries in a partition.
    let rows = sqlx::query(include_str!("sql/fetch_lock_cursors.sql"))
        .bind(s.as_str())
        .bind(g.as_str())
        .bind(parts(&selected))
        .fetch_all(&mut *tx)
        .await
        .map_err(write_err)?;
    let mut cursors: HashMap<u32, (u64, u64)> = HashMap::new();
    for row in &rows {
        cursors.insert(u32_col(row, 0)?, (u64_col(row, 1)?, u64_col(row, 2)?));
    }

    let capacity: Vec<usize> = selected
        .iter()
        .map(|p| {
            let (cursor, hw) = cursors.get(p).copied().unwrap_or((1, 0));
            let unseen = hw.saturating_sub(cursor.saturating_sub(1));
            existing.get(p).map_or(0, Vec::len) + usize::try_from(unseen).unwrap_or(usize::MAX)
        })
        .collect();
    let first = b.rotate(s, g) % selected.len();
    let quotas = round_robin(&capacity, limit, first);

    let mut reclaim: (Vec<i32>, Vec<i64>, Vec<String>) = Default::default();
    let mut fresh: (Vec<i32>, Vec<i64>, Vec<String>, Vec<String>) = Default::default();
    let mut fresh_positions = Vec::new();
    let mut new_cursors: (Vec<i32>, Vec<i64>) = Default::default();
    for (i, &p) in selected.iter().enumerate() {
        let held = existing.get(&p).map_or(&[][..], Vec::as_slice);
        let take = quotas[i].min(held.len());
        for &seq in &held[..take] {
            reclaim.0.push(p as i32);
            reclaim.1.push(int(seq));
            reclaim.2.push(LeaseId::generate().as_str().to_owned());
        }
        let new = (quotas[i] - take) as u64;
        if new > 0 {
            let (cursor, _) = cursors.get(&p).copied().unwrap_or((1, 0));
            for seq in cursor..cursor + new {
                fresh_positions.push((p, seq));
            }
            new_cursors.0.push(p as i32);
            new_cursors.1.push(int(cursor + new));
        }
    }

    let mut leases = Vec::with_capacity(limit);
    let make_lease = |event: Event, lease_id: String, attempt: u32| -> Result<Lease> {
        let lease_id = LeaseId::parse(lease_id).map_err(|e| Error::Failed(e.to_string()))?;
        Ok(Lease {
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
        })
    };

    if !reclaim.0.is_empty() {
        let rows = sqlx::query(include_str!("sql/fetch_claim.sql"))
            .bind(s.as_str())
            .bind(g.as_str())
            .bind(req.consumer_id.as_str())
            .bind(pg_ts(now))
            .bind(pg_ts(expires_at))
            .bind(&reclaim.0)
            .bind(&reclaim.1)
            .bind(&reclaim.2)
            .fetch_all(&mut *tx)
            .await
            .map_err(write_err)?;
        let mut claimed = Vec::with_capacity(rows.len());
        for row in &rows {
            let lease_id: String = row.try_get(3).map_err(read_err)?;
            claimed.push((
                u32_col(row, 0)?,
                u64_col(row, 1)?,
                u32_col(row, 2)?,
                lease_id,
            ));
        }
        let positions: Vec<(u32, u64)> = claimed.iter().map(|c| (c.0, c.1)).collect();
        let mut events = events_at(&mut tx, s, &positions).await?;
        for (p, seq, attempt, lease_id) in claimed {
            let event = events
                .remove(&(p, seq))
                .ok_or_else(|| Error::Failed(format!("event {p}/{seq} is missing")))?;
            leases.push(make_lease(event, lease_id, attempt)?);
        }
    }

    if !fresh_positions.is_empty() {
        let mut events = events_at(&mut tx, s, &fresh_positions).await?;
        let mut lease_ids = Vec::with_capacity(fresh_positions.len());
        for (p, seq) in &fresh_positions {
            let event = events
                .get(&(*p, *seq))
                .ok_or_else(|| Error::Failed(format!("event {p}/{seq} is missing")))?;
            let lease_id = LeaseId::generate().as_str().to_owned();
            fresh.0.push(*p as i32);
            fresh.1.push(int(*seq));
            fresh.2.push(event.id.as_str().to_owned());
            fresh.3.push(lease_id.clone());
            lease_ids.push(lease_id);
        }
        sqlx::query(include_str!("sql/fetch_materialize.sql"))
            .bind(s.as_str())
            .bind(g.as_str())
            .bind(req.consumer_id.as_str())
            .bind(pg_ts(now))
            .bind(pg_ts(expires_at))
            .bind(&fresh.0)
            .bind(&fresh.1)
            .bind(&fresh.2)
            .bind(&fresh.3)
            .execute(&mut *tx)
            .await
            .map_err(write_err)?;
        sqlx::query(include_str!("sql/set_cursors.sql"))
            .bind(s.as_str())
            .bind(g.as_str())
            .bind(&new_cursors.0)
            .bind(&new_cursors.1)
            .execute(&mut *tx)
            .await
            .map_err(write_err)?;
        for ((p, seq), lease_id) in fresh_positions.iter().zip(lease_ids) {
            let event = events.remove(&(*p, *seq)).expect("loaded above");
            leases.push(make_lease(event, lease_id, 1)?);
        }
    }
    tx.commit().await.map_err(write_err)?;
    leases.sort_unstable_by_key(|l| (l.event.partition, l.event.sequence));
    Ok(leases)
}

/// A leased delivery as the fencing check sees it.
struct Held {
    partition: u32,
    sequence: u64,
    attempt: u32,
}

/// The fencing check: the delivery must be leased under `target`.
async fn fence(
    conn: &mut PgConnection,
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
    }))
}

pub(super) async fn renew(b: &PostgresBackend, req: RenewRequest) -> Result<Lease> {
    req.validate()?;
    b.meta(&req.stream).await?;
    let now = b.now();
    let (s, g) = (&req.stream, &req.group);
    let mut tx = b.pool.begin().await.map_err(read_err)?;
    group_config(&mut tx, s, g).await?;
    fence(&mut tx, s, g, &req.target).await??;
    let expires_at = now.add_ms(req.lease_ms);
    let row = sqlx::query(include_str!("sql/renew.sql"))
        .bind(s.as_str())
        .bind(g.as_str())
        .bind(req.target.event_id.as_str())
        .bind(req.target.lease_id.as_str())
        .bind(pg_ts(expires_at))
        .fetch_optional(&mut *tx)
        .await
        .map_err(write_err)?
        .ok_or(Error::StaleLease)?;
    let (p, seq) = (u32_col(&row, 0)?, u64_col(&row, 1)?);
    let attempt = u32_col(&row, 2)?;
    let consumer: Option<String> = row.try_get(3).map_err(read_err)?;
    let leased_at = opt_ts_col(&row, 4)?.unwrap_or(now);
    let event = events_at(&mut tx, s, &[(p, seq)])
        .await?
        .remove(&(p, seq))
        .ok_or_else(|| Error::Failed(format!("event {p}/{seq} is missing")))?;
    tx.commit().await.map_err(write_err)?;
    Ok(Lease {
        receipt: Some(req.target.lease_id.as_str().to_owned()),
        lease_id: req.target.lease_id,
        stream: req.stream,
        group: req.group,
        event_id: event.id.clone(),
        consumer_id: ConsumerId::parse(consumer.unwrap_or_default())
            .map_err(|e| Error::Failed(e.to_string()))?,
        attempt,
        leased_at,
        expires_at,
        event: Arc::new(event),
    })
}

/// Applies a batch; returns the per-item results and whether any nack made
/// a delivery claimable at once.
pub(super) async fn settle(
    b: &PostgresBackend,
    s: &StreamName,
    g: &GroupName,
    items: Vec<Settlement>,
) -> Result<(Vec<Result<()>>, bool)> {
    validate_settlements(&items)?;
    b.meta(s).await?;
    let now = b.now();
    let mut tx = b.pool.begin().await.map_err(read_err)?;
    let config = group_config(&mut tx, s, g).await?;
    if let Some(results) = settle_plain_acks(&mut tx, s, g, &items).await? {
        tx.commit().await.map_err(write_err)?;
        return Ok((results, false));
    }
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
        let _ = (held.partition, held.sequence);
        let t = &item.target;
        let write = settle_write(item.op, held.attempt, &config, now);
        let changed = match write {
            Write::Ack => {
                let acked = ack_many(&mut tx, s, g, &[t]).await?;
                u64::from(acked.contains(t.event_id.as_str()))
            }
            Write::Retry { due, reason } => {
                requeued |= due.is_none();
                sqlx::query(include_str!("sql/settle_retry.sql"))
                    .bind(s.as_str())
                    .bind(g.as_str())
                    .bind(t.event_id.as_str())
                    .bind(t.lease_id.as_str())
                    .bind(due.map(pg_ts))
                    .bind(clip_reason(&reason))
                    .execute(&mut *tx)
                    .await
                    .map_err(write_err)?
                    .rows_affected()
            }
            Write::Dead(reason) => sqlx::query(include_str!("sql/settle_dead.sql"))
                .bind(s.as_str())
                .bind(g.as_str())
                .bind(t.event_id.as_str())
                .bind(t.lease_id.as_str())
                .bind(clip_reason(&reason))
                .bind(pg_ts(now))
                .execute(&mut *tx)
                .await
                .map_err(write_err)?
                .rows_affected(),
        };
        results.push(if changed == 1 {
            Ok(())
        } else {
            Err(Error::StaleLease)
        });
    }
    if requeued {
        b.notify_in(&mut tx, s).await?;
    }
    tx.commit().await.map_err(write_err)?;
    Ok((results, requeued))
}

/// The common case — a batch of acks of distinct events with no receipt
/// to check — as one statement. `None` when the batch is anything else.
async fn settle_plain_acks(
    conn: &mut PgConnection,
    s: &StreamName,
    g: &GroupName,
    items: &[Settlement],
) -> Result<Option<Vec<Result<()>>>> {
    let mut seen = HashSet::new();
    let plain = items.iter().all(|i| {
        i.op == SettleOp::Ack
            && i.target
                .receipt
                .as_deref()
                .is_none_or(|r| r == i.target.lease_id.as_str())
            && seen.insert(i.target.event_id.as_str())
    });
    if !plain || items.is_empty() {
        return Ok(None);
    }
    let targets: Vec<&SettleTarget> = items.iter().map(|i| &i.target).collect();
    let acked = ack_many(conn, s, g, &targets).await?;
    Ok(Some(
        targets
            .iter()
            .map(|t| {
                if acked.contains(t.event_id.as_str()) {
                    Ok(())
                } else {
                    Err(Error::StaleLease)
                }
            })
            .collect(),
    ))
}

/// Acks the given leases (fenced); returns the event ids that were acked.
async fn ack_many(
    conn: &mut PgConnection,
    s: &StreamName,
    g: &GroupName,
    targets: &[&SettleTarget],
) -> Result<HashSet<String>> {
    let (events, leases): (Vec<String>, Vec<String>) = targets
        .iter()
        .map(|t| {
            (
                t.event_id.as_str().to_owned(),
                t.lease_id.as_str().to_owned(),
            )
        })
        .unzip();
    let rows = sqlx::query(include_str!("sql/settle_acks.sql"))
        .bind(s.as_str())
        .bind(g.as_str())
        .bind(events)
        .bind(leases)
        .fetch_all(conn)
        .await
        .map_err(write_err)?;
    rows.iter()
        .map(|r| r.try_get::<String, _>(0).map_err(read_err))
        .collect()
}

/// Lag over `selected`, inside one snapshot.
async fn compute_lag(
    conn: &mut PgConnection,
    s: &StreamName,
    g: &GroupName,
    selected: &[u32],
    now: Timestamp,
) -> Result<(Lag, HashMap<u32, (u64, u64)>)> {
    let positions = positions(conn, s, g).await?;
    let rows = sqlx::query(include_str!("sql/lag_open.sql"))
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

pub(super) async fn lag(
    b: &PostgresBackend,
    s: &StreamName,
    g: &GroupName,
    partitions: &Partitions,
) -> Result<Lag> {
    let meta = b.meta(s).await?;
    let now = b.now();
    let mut tx = b.pool.begin_with(READ_SNAPSHOT).await.map_err(read_err)?;
    group_config(&mut tx, s, g).await?;
    let selected = partitions.resolve(meta.partition_count)?;
    Ok(compute_lag(&mut tx, s, g, &selected, now).await?.0)
}

pub(super) async fn group_info(
    b: &PostgresBackend,
    s: &StreamName,
    g: &GroupName,
) -> Result<GroupInfo> {
    let meta = b.meta(s).await?;
    let now = b.now();
    let mut tx = b.pool.begin_with(READ_SNAPSHOT).await.map_err(read_err)?;
    let config = group_config(&mut tx, s, g).await?;
    let all: Vec<u32> = (0..meta.partition_count).collect();
    let (lag, positions) = compute_lag(&mut tx, s, g, &all, now).await?;
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
        cursors: all
            .iter()
            .map(|p| (*p, positions.get(p).map_or(1, |(c, _)| *c)))
            .collect(),
        lag,
    })
}

/// Resolves ids to positions; an id the stream does not have is `invalid`.
async fn locate_all(
    conn: &mut PgConnection,
    s: &StreamName,
    ids: &[EventId],
) -> Result<Vec<(EventId, u32, u64)>> {
    let names: Vec<String> = ids.iter().map(|i| i.as_str().to_owned()).collect();
    let rows = sqlx::query(include_str!("sql/locate_events.sql"))
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

pub(super) async fn dead_letters(
    b: &PostgresBackend,
    req: DeadLettersRequest,
) -> Result<DeadLetterPage> {
    req.validate()?;
    b.meta(&req.stream).await?;
    let (s, g) = (&req.stream, &req.group);
    let mut tx = b.pool.begin_with(READ_SNAPSHOT).await.map_err(read_err)?;
    group_config(&mut tx, s, g).await?;
    let (after_seq, after_p) = match &req.after {
        None => (0, -1),
        Some(id) => {
            let rows = sqlx::query(include_str!("sql/locate_events.sql"))
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

pub(super) async fn redrive(
    b: &PostgresBackend,
    s: &StreamName,
    g: &GroupName,
    which: Redrive,
) -> Result<u64> {
    b.meta(s).await?;
    let mut tx = b.pool.begin().await.map_err(read_err)?;
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
            let found = locate_all(&mut tx, s, &ids).await?;
            let names: Vec<String> = found
                .iter()
                .map(|(id, _, _)| id.as_str().to_owned())
                .collect();
            sqlx::query(include_str!("sql/redrive_events.sql"))
                .bind(s.as_str())
                .bind(g.as_str())
                .bind(names)
                .execute(&mut *tx)
                .await
                .map_err(write_err)?
                .rows_affected()
        }
    };
    if count > 0 {
        b.notify_in(&mut tx, s).await?;
    }
    tx.commit().await.map_err(write_err)?;
    Ok(count)
}

/// Re-opens the sequences strictly between `after` and `before` in one
/// partition: creates deliveries the group never had (below its start) and
/// makes every other one available now. Returns how many were not open.
async fn reopen(
    conn: &mut PgConnection,
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
            .bind(p as i32)
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
    b: &PostgresBackend,
    s: &StreamName,
    g: &GroupName,
    how: Replay,
) -> Result<u64> {
    let meta = b.meta(s).await?;
    // A query replay reads the (immutable) log before the transaction.
    let matched = match &how {
        Replay::Query(q) => Some(log::run_query(b, s, q, false).await?),
        _ => None,
    };
    let mut tx = b.pool.begin().await.map_err(read_err)?;
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
            let selected = partitions.resolve(meta.partition_count)?;
            let firsts = first_at_or_after(&mut tx, s, &selected, from).await?;
            for p in selected {
                if let Some(first) = firsts.get(&p) {
                    count += reopen(&mut tx, s, g, p, first - 1, cursor(p)).await?;
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
    b.notify_in(&mut tx, s).await?;
    tx.commit().await.map_err(write_err)?;
    Ok(count)
}

pub(super) async fn reset(b: &PostgresBackend, req: ResetRequest) -> Result<()> {
    if !req.confirm {
        return Err(Error::ConfirmRequired);
    }
    let meta = b.meta(&req.stream).await?;
    let (s, g) = (&req.stream, &req.group);
    let mut tx = b.pool.begin().await.map_err(read_err)?;
    group_config(&mut tx, s, g).await?;
    let selected = req.partitions.resolve(meta.partition_count)?;
    let starts = start_points(&mut tx, s, meta, &req.start).await?;
    // Deliveries first, cursor rows second: the order fetches lock them in.
    sqlx::query(include_str!("sql/reset_partitions.sql"))
        .bind(s.as_str())
        .bind(g.as_str())
        .bind(parts(&selected))
        .execute(&mut *tx)
        .await
        .map_err(write_err)?;
    let cursors: Vec<i64> = selected
        .iter()
        .map(|p| int(starts[*p as usize] + 1))
        .collect();
    sqlx::query(include_str!("sql/set_cursors.sql"))
        .bind(s.as_str())
        .bind(g.as_str())
        .bind(parts(&selected))
        .bind(cursors)
        .execute(&mut *tx)
        .await
        .map_err(write_err)?;
    b.notify_in(&mut tx, s).await?;
    tx.commit().await.map_err(write_err)
}

pub(super) async fn next_due(
    b: &PostgresBackend,
    s: &StreamName,
    g: &GroupName,
    partitions: &Partitions,
) -> Result<Option<Timestamp>> {
    let meta = b.meta(s).await?;
    let now = b.now();
    let mut tx = b.pool.begin_with(READ_SNAPSHOT).await.map_err(read_err)?;
    group_config(&mut tx, s, g).await?;
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
        || sqlx::query(include_str!("sql/claimable_now.sql"))
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
    let row = sqlx::query(include_str!("sql/next_due.sql"))
        .bind(s.as_str())
        .bind(g.as_str())
        .bind(parts(&selected))
        .fetch_one(&mut *tx)
        .await
        .map_err(read_err)?;
    Ok(opt_ts_col(&row, 0)?.map(|t| t.max(now)))
}
