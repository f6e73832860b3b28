//! Moving a group back: redrive dead letters, replay, reset.

use sqlx::PgConnection;

use super::{first_at_or_after, locate_all, positions, start_points};
use crate::backend::postgres::{
    PostgresBackend, int, log, parts, read_err, u32_col, u64_col, write_err,
};
use crate::backend::{Redrive, Replay, ResetRequest, Result};
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
    let statement = match &which {
        Redrive::All => include_str!("../sql/redrive_all.sql"),
        Redrive::Events(_) => include_str!("../sql/redrive_events.sql"),
    };
    let mut query = sqlx::query(statement).bind(s.as_str()).bind(g.as_str());
    if let Redrive::Events(ids) = which {
        let found = locate_all(&mut tx, s, &ids).await?;
        let names: Vec<String> = found
            .iter()
            .map(|(id, _, _)| id.as_str().to_owned())
            .collect();
        query = query.bind(names);
    }
    // One row per partition: its lowest redriven sequence and how many.
    let rows = query.fetch_all(&mut *tx).await.map_err(write_err)?;
    let mut count = 0;
    let mut floors = Floors::default();
    for row in &rows {
        floors.lower(u32_col(row, 0)?, u64_col(row, 1)?);
        count += u64_col(row, 2)?;
    }
    floors.apply(&mut tx, s, g).await?;
    if count > 0 {
        b.notify_in(&mut tx, s).await?;
    }
    tx.commit().await.map_err(write_err)?;
    Ok(count)
}

/// The lowest re-opened sequence per partition, for `lower_floors.sql`.
#[derive(Debug, Default)]
struct Floors(std::collections::BTreeMap<u32, u64>);

impl Floors {
    fn lower(&mut self, partition: u32, sequence: u64) {
        let floor = self.0.entry(partition).or_insert(sequence);
        *floor = (*floor).min(sequence);
    }

    /// Lowers the stored floors; last in the transaction, after the
    /// deliveries, in the order fetches lock them.
    async fn apply(&self, conn: &mut PgConnection, s: &StreamName, g: &GroupName) -> Result<()> {
        if self.0.is_empty() {
            return Ok(());
        }
        let partitions: Vec<i32> = self.0.keys().map(|&p| p as i32).collect();
        let floors: Vec<i64> = self.0.values().map(|&f| int(f)).collect();
        sqlx::query(include_str!("../sql/lower_floors.sql"))
            .bind(s.as_str())
            .bind(g.as_str())
            .bind(partitions)
            .bind(floors)
            .execute(&mut *conn)
            .await
            .map_err(write_err)?;
        Ok(())
    }
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
    floors: &mut Floors,
) -> Result<u64> {
    if after.saturating_add(1) >= before {
        return Ok(0);
    }
    floors.lower(p, after + 1);
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
    how.validate()?;
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
    let mut floors = Floors::default();
    match how {
        Replay::FromSequence { after, partitions } => {
            for p in partitions.resolve(meta.partition_count)? {
                count += reopen(&mut tx, s, g, p, after, cursor(p), &mut floors).await?;
            }
        }
        Replay::FromTime { from, partitions } => {
            let selected = partitions.resolve(meta.partition_count)?;
            let firsts = first_at_or_after(&mut tx, s, &selected, from).await?;
            for p in selected {
                if let Some(first) = firsts.get(&p) {
                    count += reopen(&mut tx, s, g, p, first - 1, cursor(p), &mut floors).await?;
                }
            }
        }
        Replay::Query(_) => {
            for e in matched.unwrap_or_default() {
                let before = (e.sequence + 1).min(cursor(e.partition));
                count += reopen(
                    &mut tx,
                    s,
                    g,
                    e.partition,
                    e.sequence - 1,
                    before,
                    &mut floors,
                )
                .await?;
            }
        }
        Replay::EventIds(ids) => {
            for (_, p, seq) in locate_all(&mut tx, s, &ids).await? {
                let before = (seq + 1).min(cursor(p));
                count += reopen(&mut tx, s, g, p, seq - 1, before, &mut floors).await?;
            }
        }
    }
    floors.apply(&mut tx, s, g).await?;
    b.notify_in(&mut tx, s).await?;
    tx.commit().await.map_err(write_err)?;
    Ok(count)
}

pub(in crate::backend::postgres) async fn reset(
    b: &PostgresBackend,
    req: ResetRequest,
) -> Result<()> {
    req.validate()?;
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
