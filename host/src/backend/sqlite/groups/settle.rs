//! Acks, nacks and rejects: each one conditional update, fenced on
//! (status = 'leased', lease_id).

use std::collections::HashSet;

use sqlx::{Row, SqliteConnection};

use super::claim::fence;
use crate::backend::sql::{Write, plain_acks, settle_write};
use crate::backend::sqlite::{SqliteBackend, json_rows, read_err, ts_text, write_err};
use crate::backend::{Error, Result, validate_settlements};
use crate::model::{GroupName, SettleTarget, Settlement, StreamName, clip_reason};

/// Applies a batch; returns the per-item results and whether any nack made
/// a delivery claimable at once.
pub(in crate::backend::sqlite) async fn settle(
    b: &SqliteBackend,
    s: &StreamName,
    g: &GroupName,
    items: Vec<Settlement>,
) -> Result<(Vec<Result<()>>, bool)> {
    validate_settlements(&items)?;
    b.meta(s).await?;
    let now = b.now();
    if plain_acks(&items) {
        // One statement is atomic on its own: no transaction round trips.
        let mut conn = b.writer.acquire().await.map_err(read_err)?;
        b.group_config(&mut conn, s, g).await?;
        let targets: Vec<&SettleTarget> = items.iter().map(|i| &i.target).collect();
        let acked = ack_many(&mut conn, s, g, &targets).await?;
        let results = targets
            .iter()
            .map(|t| {
                if acked.contains(t.event_id.as_str()) {
                    Ok(())
                } else {
                    Err(Error::StaleLease)
                }
            })
            .collect();
        return Ok((results, false));
    }
    let mut tx = b
        .writer
        .begin_with("BEGIN IMMEDIATE")
        .await
        .map_err(read_err)?;
    let config = b.group_config(&mut tx, s, g).await?;
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
        let t = &item.target;
        let write = settle_write(item.op, held.attempt, &config, now);
        let changed = match write {
            Write::Ack => u64::from(
                ack_many(&mut tx, s, g, &[t])
                    .await?
                    .contains(t.event_id.as_str()),
            ),
            Write::Retry { due, reason } => {
                requeued |= due.is_none();
                sqlx::query(include_str!("../sql/settle_retry.sql"))
                    .bind(s.as_str())
                    .bind(g.as_str())
                    .bind(t.event_id.as_str())
                    .bind(t.lease_id.as_str())
                    .bind(due.map(ts_text))
                    .bind(clip_reason(&reason))
                    .execute(&mut *tx)
                    .await
                    .map_err(write_err)?
                    .rows_affected()
            }
            Write::Dead(reason) => sqlx::query(include_str!("../sql/settle_dead.sql"))
                .bind(s.as_str())
                .bind(g.as_str())
                .bind(t.event_id.as_str())
                .bind(t.lease_id.as_str())
                .bind(clip_reason(&reason))
                .bind(ts_text(now))
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
    tx.commit().await.map_err(write_err)?;
    Ok((results, requeued))
}

/// Acks the given leases (fenced); returns the event ids that were acked.
async fn ack_many(
    conn: &mut SqliteConnection,
    s: &StreamName,
    g: &GroupName,
    targets: &[&SettleTarget],
) -> Result<HashSet<String>> {
    let pairs: Vec<(&str, &str)> = targets
        .iter()
        .map(|t| (t.event_id.as_str(), t.lease_id.as_str()))
        .collect();
    let rows = sqlx::query(include_str!("../sql/settle_acks.sql"))
        .bind(s.as_str())
        .bind(g.as_str())
        .bind(json_rows(&pairs))
        .fetch_all(&mut *conn)
        .await
        .map_err(write_err)?;
    let mut acked = HashSet::with_capacity(rows.len());
    for row in rows {
        acked.insert(row.try_get::<String, _>(0).map_err(read_err)?);
    }
    Ok(acked)
}
