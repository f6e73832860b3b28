//! Acks, nacks and rejects: each one conditional update, fenced on
//! (status = 'leased', lease_id).

use std::collections::HashSet;

use sqlx::{PgConnection, Row};

use super::claim::fence;
use crate::backend::postgres::{PostgresBackend, int, pg_ts, read_err, write_err};
use crate::backend::sql::{Write, plain_acks, settle_write};
use crate::backend::{Error, Result, validate_settlements};
use crate::model::{GroupName, SettleTarget, Settlement, StreamName, clip_reason};

/// Applies a batch; returns the per-item results and whether any nack made
/// a delivery claimable at once.
pub(in crate::backend::postgres) async fn settle(
    b: &PostgresBackend,
    s: &StreamName,
    g: &GroupName,
    items: Vec<Settlement>,
) -> Result<(Vec<Result<()>>, bool)> {
    validate_settlements(&items)?;
    b.meta(s).await?;
    let now = b.now();
    if plain_acks(&items) {
        // One statement is atomic on its own: no transaction round trips.
        let mut conn = b.pool.acquire().await.map_err(read_err)?;
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
    let mut tx = b.pool.begin().await.map_err(read_err)?;
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
        let key = (held.partition as i32, int(held.sequence));
        let write = settle_write(item.op, held.attempt, &config, now);
        let changed = match write {
            Write::Ack => {
                let acked = ack_many(&mut tx, s, g, &[t]).await?;
                u64::from(acked.contains(t.event_id.as_str()))
            }
            Write::Retry { due, reason } => {
                requeued |= due.is_none();
                sqlx::query(include_str!("../sql/settle_retry.sql"))
                    .bind(s.as_str())
                    .bind(g.as_str())
                    .bind(t.event_id.as_str())
                    .bind(t.lease_id.as_str())
                    .bind(due.map(pg_ts))
                    .bind(clip_reason(&reason))
                    .bind(key.0)
                    .bind(key.1)
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
                .bind(pg_ts(now))
                .bind(key.0)
                .bind(key.1)
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
    let rows = sqlx::query(include_str!("../sql/settle_acks.sql"))
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
