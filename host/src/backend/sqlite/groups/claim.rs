//! Claims and lease renewal.

use std::sync::Arc;

use sqlx::{Row, SqliteConnection};

use super::{events_at, positions, set_cursor};
use crate::backend::sql::round_robin;
use crate::backend::sqlite::{
    SqliteBackend, int, json_rows, opt_ts_col, read_err, ts_text, u32_col, u64_col, write_err,
};
use crate::backend::{Error, FetchRequest, RenewRequest, Result};
use crate::model::{
    ConsumerId, Event, GroupName, Lease, LeaseId, SettleTarget, StreamName, Timestamp,
};

pub(in crate::backend::sqlite) async fn fetch(
    b: &SqliteBackend,
    req: FetchRequest,
) -> Result<Vec<Lease>> {
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
    let config = b.group_config(&mut tx, s, g).await?;
    let parts = req.partitions.resolve(meta.partition_count)?;
    if parts.is_empty() {
        return Ok(Vec::new());
    }
    let positions = positions(&mut tx, s, g).await?;

    // The poison guard, then what each partition could give: claimable
    // deliveries, and events past the cursor that have none yet.
    let mut existing: Vec<Vec<u64>> = Vec::with_capacity(parts.len());
    let mut capacity = Vec::with_capacity(parts.len());
    for &p in &parts {
        sqlx::query(include_str!("../sql/fetch_poison.sql"))
            .bind(s.as_str())
            .bind(g.as_str())
            .bind(ts_text(now))
            .bind(i64::from(config.max_attempts))
            .bind(i64::from(p))
            .execute(&mut *tx)
            .await
            .map_err(write_err)?;
        let rows = sqlx::query(include_str!("../sql/fetch_candidates.sql"))
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

    let mut reclaim: Vec<(u32, u64)> = Vec::new();
    let mut fresh: Vec<(u32, u64, u64)> = Vec::new(); // partition, from cursor, count
    for (i, &p) in parts.iter().enumerate() {
        let take = quotas[i].min(existing[i].len());
        reclaim.extend(existing[i][..take].iter().map(|seq| (p, *seq)));
        let new = (quotas[i] - take) as u64;
        if new > 0 {
            let (cursor, _) = positions.get(&p).copied().unwrap_or((1, 0));
            fresh.push((p, cursor, new));
        }
    }

    let lease = |event: Event, lease_id: &str, attempt: u32| -> Result<Lease> {
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
    let mut leases = Vec::with_capacity(req.limit as usize);

    if !reclaim.is_empty() {
        let claims: Vec<(u32, u64, String)> = reclaim
            .iter()
            .map(|(p, seq)| (*p, *seq, LeaseId::generate().as_str().to_owned()))
            .collect();
        let q = sqlx::query(include_str!("../sql/fetch_claim.sql"))
            .bind(s.as_str())
            .bind(g.as_str())
            .bind(req.consumer_id.as_str())
            .bind(ts_text(now))
            .bind(ts_text(expires_at))
            .bind(json_rows(&claims));
        let rows = q.fetch_all(&mut *tx).await.map_err(write_err)?;
        let mut events = events_at(&mut tx, s, &reclaim).await?;
        for row in &rows {
            let (p, seq) = (u32_col(row, 0)?, u64_col(row, 1)?);
            let lease_id: String = row.try_get(3).map_err(read_err)?;
            let event = events
                .remove(&(p, seq))
                .ok_or_else(|| Error::Failed(format!("event {p}/{seq} is missing")))?;
            leases.push(lease(event, &lease_id, u32_col(row, 2)?)?);
        }
    }

    for (p, cursor, count) in fresh {
        let rows = sqlx::query(include_str!("../sql/events_between.sql"))
            .bind(s.as_str())
            .bind(i64::from(p))
            .bind(int(cursor))
            .bind(int(cursor + count))
            .fetch_all(&mut *tx)
            .await
            .map_err(read_err)?;
        if rows.is_empty() {
            continue;
        }
        let events = rows
            .iter()
            .map(|r| crate::backend::sqlite::event_at(s, r, 0))
            .collect::<Result<Vec<_>>>()?;
        let lease_ids: Vec<LeaseId> = events.iter().map(|_| LeaseId::generate()).collect();
        let rows: Vec<(u32, u64, &str, &str)> = events
            .iter()
            .zip(&lease_ids)
            .map(|(e, id)| (e.partition, e.sequence, e.id.as_str(), id.as_str()))
            .collect();
        let q = sqlx::query(include_str!("../sql/fetch_materialize.sql"))
            .bind(s.as_str())
            .bind(g.as_str())
            .bind(req.consumer_id.as_str())
            .bind(ts_text(now))
            .bind(ts_text(expires_at))
            .bind(json_rows(&rows));
        q.execute(&mut *tx).await.map_err(write_err)?;
        set_cursor(&mut tx, s, g, p, cursor + events.len() as u64).await?;
        for (event, id) in events.into_iter().zip(lease_ids) {
            leases.push(lease(event, id.as_str(), 1)?);
        }
    }
    tx.commit().await.map_err(write_err)?;
    leases.sort_unstable_by_key(|l| (l.event.partition, l.event.sequence));
    Ok(leases)
}

/// A leased delivery as the fencing check sees it.
pub(super) struct Held {
    pub(super) partition: u32,
    pub(super) sequence: u64,
    pub(super) attempt: u32,
    pub(super) consumer_id: Option<String>,
    pub(super) leased_at: Option<Timestamp>,
}

/// The fencing check: the delivery must be leased under `target`.
pub(super) async fn fence(
    conn: &mut SqliteConnection,
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
        consumer_id: row.try_get(5).map_err(read_err)?,
        leased_at: opt_ts_col(&row, 6)?,
    }))
}

pub(in crate::backend::sqlite) async fn renew(
    b: &SqliteBackend,
    req: RenewRequest,
) -> Result<Lease> {
    req.validate()?;
    b.meta(&req.stream).await?;
    let now = b.now();
    let (s, g) = (&req.stream, &req.group);
    let mut tx = b
        .writer
        .begin_with("BEGIN IMMEDIATE")
        .await
        .map_err(read_err)?;
    b.group_config(&mut tx, s, g).await?;
    let held = fence(&mut tx, s, g, &req.target).await??;
    let expires_at = now.add_ms(req.lease_ms);
    let changed = sqlx::query(include_str!("../sql/renew.sql"))
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
    let position = (held.partition, held.sequence);
    let event = events_at(&mut tx, s, &[position])
        .await?
        .remove(&position)
        .ok_or_else(|| Error::Failed(format!("event {position:?} is missing")))?;
    tx.commit().await.map_err(write_err)?;
    Ok(Lease {
        receipt: Some(req.target.lease_id.as_str().to_owned()),
        lease_id: req.target.lease_id,
        stream: req.stream,
        group: req.group,
        event_id: event.id.clone(),
        consumer_id: ConsumerId::parse(held.consumer_id.unwrap_or_default())
            .map_err(|e| Error::Failed(e.to_string()))?,
        attempt: held.attempt,
        leased_at: held.leased_at.unwrap_or(now),
        expires_at,
        event: Arc::new(event),
    })
}
