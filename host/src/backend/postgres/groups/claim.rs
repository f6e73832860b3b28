//! Claims and lease renewal.

use std::collections::HashMap;
use std::sync::Arc;

use sqlx::{PgConnection, Row};

use super::events_at;
use crate::backend::postgres::{
    PostgresBackend, event_at, int, opt_ts_col, parts, pg_ts, read_err, u32_col, u64_col, write_err,
};
use crate::backend::sql::round_robin;
use crate::backend::{Error, FetchRequest, RenewRequest, Result};
use crate::model::{ConsumerId, Event, GroupName, Lease, LeaseId, SettleTarget, StreamName};

pub(in crate::backend::postgres) async fn fetch(
    b: &PostgresBackend,
    req: FetchRequest,
) -> Result<Vec<Lease>> {
    req.validate()?;
    let meta = b.meta(&req.stream).await?;
    let now = b.now();
    let expires_at = now.add_ms(req.lease_ms);
    let (s, g) = (&req.stream, &req.group);
    let mut tx = b.pool.begin().await.map_err(read_err)?;
    let config = b.group_config(&mut tx, s, g).await?;
    let selected = req.partitions.resolve(meta.partition_count)?;
    if selected.is_empty() {
        return Ok(Vec::new());
    }

    sqlx::query(include_str!("../sql/fetch_poison.sql"))
        .bind(s.as_str())
        .bind(g.as_str())
        .bind(pg_ts(now))
        .bind(config.max_attempts as i32)
        .bind(parts(&selected))
        .execute(&mut *tx)
        .await
        .map_err(write_err)?;
    // Claimable deliveries, locked (rows other fetchers hold are skipped).
    let rows = sqlx::query(include_str!("../sql/fetch_candidates.sql"))
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
    // Cursor rows, locked in partition order: one fetcher at a time creates
    // deliveries in a partition, on any node.
    let rows = sqlx::query(include_str!("../sql/fetch_lock_cursors.sql"))
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
    let quotas = round_robin(&capacity, req.limit as usize, first);

    let mut reclaim = Positions::default();
    let mut fresh = Positions::default();
    let mut new_cursors: (Vec<i32>, Vec<i64>) = Default::default();
    for (i, &p) in selected.iter().enumerate() {
        let held = existing.get(&p).map_or(&[][..], Vec::as_slice);
        let take = quotas[i].min(held.len());
        for &seq in &held[..take] {
            reclaim.push(p, seq);
        }
        let new = (quotas[i] - take) as u64;
        let (cursor, _) = cursors.get(&p).copied().unwrap_or((1, 0));
        for seq in cursor..cursor + new {
            fresh.push(p, seq);
        }
        new_cursors.0.push(p as i32);
        new_cursors.1.push(int(cursor + new));
    }

    let mut leases = Vec::with_capacity(req.limit as usize);
    let lease = |event: Event, lease_id: String, attempt: u32| -> Result<Lease> {
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
    // Claim and load in one statement each: re-claims, then new deliveries.
    for (statement, positions, fresh_ones) in [
        (include_str!("../sql/fetch_claim.sql"), &reclaim, false),
        (include_str!("../sql/fetch_materialize.sql"), &fresh, true),
    ] {
        if positions.partition.is_empty() {
            continue;
        }
        if fresh_ones {
            b.wrote(
                crate::backend::postgres::Table::Deliveries,
                positions.partition.len() as u64,
            );
        }
        let lease_ids: Vec<String> = positions
            .partition
            .iter()
            .map(|_| LeaseId::generate().as_str().to_owned())
            .collect();
        let rows = sqlx::query(statement)
            .bind(s.as_str())
            .bind(g.as_str())
            .bind(req.consumer_id.as_str())
            .bind(pg_ts(now))
            .bind(pg_ts(expires_at))
            .bind(&positions.partition)
            .bind(&positions.sequence)
            .bind(lease_ids)
            .fetch_all(&mut *tx)
            .await
            .map_err(write_err)?;
        for row in &rows {
            let event = event_at(s, row, 0)?;
            let (attempt, lease_id) = if fresh_ones {
                (1, row.try_get(8).map_err(read_err)?)
            } else {
                (u32_col(row, 8)?, row.try_get(9).map_err(read_err)?)
            };
            leases.push(lease(event, lease_id, attempt)?);
        }
    }
    // Every selected partition: cursors past the new deliveries, floors up
    // to the lowest open delivery.
    sqlx::query(include_str!("../sql/advance_cursors.sql"))
        .bind(s.as_str())
        .bind(g.as_str())
        .bind(&new_cursors.0)
        .bind(&new_cursors.1)
        .execute(&mut *tx)
        .await
        .map_err(write_err)?;
    tx.commit().await.map_err(write_err)?;
    leases.sort_unstable_by_key(|l| (l.event.partition, l.event.sequence));
    Ok(leases)
}

/// (partition, sequence) pairs as the column arrays `unnest` takes.
#[derive(Debug, Default)]
struct Positions {
    partition: Vec<i32>,
    sequence: Vec<i64>,
}

impl Positions {
    fn push(&mut self, partition: u32, sequence: u64) {
        self.partition.push(partition as i32);
        self.sequence.push(int(sequence));
    }
}

/// A leased delivery as the fencing check sees it.
pub(super) struct Held {
    pub(super) partition: u32,
    pub(super) sequence: u64,
    pub(super) attempt: u32,
}

/// The fencing check: the delivery must be leased under `target`.
pub(super) async fn fence(
    conn: &mut PgConnection,
    s: &StreamName,
    g: &GroupName,
    target: &SettleTarget,
) -> Result<Result<Held>> {
    let row = sqlx::query(include_str!("../sql/delivery_by_event.sql"))
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

pub(in crate::backend::postgres) async fn renew(
    b: &PostgresBackend,
    req: RenewRequest,
) -> Result<Lease> {
    req.validate()?;
    b.meta(&req.stream).await?;
    let now = b.now();
    let (s, g) = (&req.stream, &req.group);
    let mut tx = b.pool.begin().await.map_err(read_err)?;
    b.group_config(&mut tx, s, g).await?;
    let held = fence(&mut tx, s, g, &req.target).await??;
    let expires_at = now.add_ms(req.lease_ms);
    let row = sqlx::query(include_str!("../sql/renew.sql"))
        .bind(s.as_str())
        .bind(g.as_str())
        .bind(req.target.event_id.as_str())
        .bind(req.target.lease_id.as_str())
        .bind(pg_ts(expires_at))
        .bind(held.partition as i32)
        .bind(int(held.sequence))
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
