//! Moving a group back: redrive dead letters, replay, reset.

use sqlx::PgConnection;

use super::{first_at_or_after, locate_all, positions, start_points};
use crate::backend::postgres::{PostgresBackend, int, log, parts, read_err, write_err};
use crate::backend::{Error, Redrive, Replay, ResetRequest, Result};
use crate::model::{GroupName, StreamName};

pub(in crate::backend::postgres) async fn redrive(
    b: &PostgresBackend,
    s: &StreamName,
    g: &GroupName,
    which: Redrive,
) -> Result<u64> {
    b.meta(s).await?;
    let mut tx = b.pool.begin().await.map_err(read_err)?;
    b.group_config(&mut tx, s, g).await?;
    let count = match which {
        Redrive::All => sqlx::query(include_str!("../sql/redrive_all.sql"))
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
            sqlx::query(include_str!("../sql/redrive_events.sql"))
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
    let created = run(include_str!("../sql/reopen_insert.sql"))
        .execute(&mut *conn)
        .await
        .map_err(write_err)?
        .rows_affected();
    let reopened = run(include_str!("../sql/reopen_update.sql"))
        .execute(&mut *conn)
        .await
        .map_err(write_err)?
        .rows_affected();
    // Deliveries already open but waiting on a retry delay become due now;
    // they were not closed, so they are not counted.
    run(include_str!("../sql/reopen_undelay.sql"))
        .execute(&mut *conn)
        .await
        .map_err(write_err)?;
    Ok(created + reopened)
}

pub(in crate::backend::postgres) async fn replay(
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
    b.group_config(&mut tx, s, g).await?;
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

pub(in crate::backend::postgres) async fn reset(
    b: &PostgresBackend,
    req: ResetRequest,
) -> Result<()> {
    if !req.confirm {
        return Err(Error::ConfirmRequired);
    }
    let meta = b.meta(&req.stream).await?;
    let (s, g) = (&req.stream, &req.group);
    let mut tx = b.pool.begin().await.map_err(read_err)?;
    b.group_config(&mut tx, s, g).await?;
    let selected = req.partitions.resolve(meta.partition_count)?;
    let starts = start_points(&mut tx, s, meta, &req.start).await?;
    // Deliveries first, cursor rows second: the order fetches lock them in.
    sqlx::query(include_str!("../sql/reset_partitions.sql"))
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
    sqlx::query(include_str!("../sql/set_cursors.sql"))
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
