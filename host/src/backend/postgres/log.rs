//! Streams and the event log on PostgreSQL.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use sqlx::{AssertSqlSafe, Row};

use super::{
    PostgresBackend, StreamMeta, bind_all, event_at, int, pg_ts, read_err, ts_col, u32_col,
    u64_col, write_err,
};
use crate::backend::sql::{Dialect, events_query, is_unique_violation, plan_append};
use crate::backend::{CreateStream, Error, ReadRequest, Result};
use crate::model::{Appended, Event, EventId, EventInput, Page, Query, Stream, StreamName, route};

pub(super) async fn create_stream(b: &PostgresBackend, req: CreateStream) -> Result<Stream> {
    req.validate()?;
    let now = b.now();
    let mut tx = b.pool.begin().await.map_err(read_err)?;
    let inserted = sqlx::query(include_str!("sql/create_stream.sql"))
        .bind(req.name.as_str())
        .bind(req.partition_count as i32)
        .bind(pg_ts(now))
        .execute(&mut *tx)
        .await;
    match inserted {
        Err(e) if is_unique_violation(&e) => {
            return Err(Error::AlreadyExists(format!(
                "stream {:?}",
                req.name.as_str()
            )));
        }
        other => other.map_err(write_err)?,
    };
    sqlx::query(include_str!("sql/create_stream_partitions.sql"))
        .bind(req.name.as_str())
        .bind(req.partition_count as i32)
        .execute(&mut *tx)
        .await
        .map_err(write_err)?;
    tx.commit().await.map_err(write_err)?;
    Ok(Stream {
        name: req.name,
        partition_count: req.partition_count,
        created_at: now,
        high_watermarks: vec![0; req.partition_count as usize],
    })
}

pub(super) async fn get_stream(b: &PostgresBackend, stream: &StreamName) -> Result<Stream> {
    let meta = b.meta(stream).await?;
    let rows = sqlx::query(include_str!("sql/high_watermarks.sql"))
        .bind(stream.as_str())
        .fetch_all(&b.pool)
        .await
        .map_err(read_err)?;
    let mut high_watermarks = vec![0; meta.partition_count as usize];
    for row in rows {
        if let Some(slot) = high_watermarks.get_mut(u32_col(&row, 0)? as usize) {
            *slot = u64_col(&row, 1)?;
        }
    }
    Ok(Stream {
        name: stream.clone(),
        partition_count: meta.partition_count,
        created_at: meta.created_at,
        high_watermarks,
    })
}

pub(super) async fn list_streams(b: &PostgresBackend) -> Result<Vec<Stream>> {
    let rows = sqlx::query(include_str!("sql/list_streams.sql"))
        .fetch_all(&b.pool)
        .await
        .map_err(read_err)?;
    rows.iter()
        .map(|row| {
            let name: String = row.try_get(0).map_err(read_err)?;
            let hws: Vec<i64> = row.try_get(3).map_err(read_err)?;
            Ok(Stream {
                name: StreamName::parse(&name).map_err(|e| Error::Failed(e.to_string()))?,
                partition_count: u32_col(row, 1)?,
                created_at: ts_col(row, 2)?,
                high_watermarks: hws.into_iter().map(|h| h.max(0) as u64).collect(),
            })
        })
        .collect()
}

pub(super) async fn append(
    b: &PostgresBackend,
    stream: &StreamName,
    events: Vec<EventInput>,
) -> Result<Vec<Appended>> {
    let meta = b.meta(stream).await?;
    if events.is_empty() {
        return Ok(Vec::new());
    }
    let mut routed = Vec::with_capacity(events.len());
    for input in events {
        input.validate()?;
        let partition = route(&input, meta.partition_count)?;
        routed.push((input, partition));
    }
    b.wrote(super::Table::Events, routed.len() as u64);
    match append_once(b, stream, routed.clone()).await {
        // Another node stored one of these ids between our lookup and our
        // insert: run again, and it comes back as a duplicate.
        Err(AppendError::IdRace) => match append_once(b, stream, routed).await {
            Err(AppendError::IdRace) => Err(Error::Failed(
                "an event id was written concurrently twice; retry the append".into(),
            )),
            Err(AppendError::Other(e)) => Err(e),
            Ok(out) => Ok(out),
        },
        Err(AppendError::Other(e)) => Err(e),
        Ok(out) => Ok(out),
    }
}

enum AppendError {
    IdRace,
    Other(Error),
}

impl From<Error> for AppendError {
    fn from(e: Error) -> Self {
        AppendError::Other(e)
    }
}

async fn append_once(
    b: &PostgresBackend,
    stream: &StreamName,
    routed: Vec<(EventInput, u32)>,
) -> std::result::Result<Vec<Appended>, AppendError> {
    let now = b.now();
    let mut tx = b.pool.begin().await.map_err(read_err)?;

    let ids: Vec<String> = routed
        .iter()
        .filter_map(|(input, _)| input.id.as_ref().map(|id| id.as_str().to_owned()))
        .collect();
    let mut known: HashMap<EventId, Arc<Event>> = HashMap::new();
    if !ids.is_empty() {
        let rows = sqlx::query(include_str!("sql/append_find_ids.sql"))
            .bind(stream.as_str())
            .bind(&ids)
            .fetch_all(&mut *tx)
            .await
            .map_err(write_err)?;
        for row in &rows {
            let event = event_at(stream, row, 0)?;
            known.insert(event.id.clone(), Arc::new(event));
        }
    }
    let known_ids: HashSet<EventId> = known.keys().cloned().collect();
    let plan = plan_append(&routed, &known_ids);

    let mut next_seq: HashMap<u32, u64> = HashMap::new();
    if !plan.per_partition.is_empty() {
        let (partitions, counts): (Vec<i32>, Vec<i64>) = plan
            .per_partition
            .iter()
            .map(|(p, n)| (*p as i32, int(*n)))
            .unzip();
        // Lock the allocator rows in partition order first, so concurrent
        // appends to several partitions cannot deadlock.
        sqlx::query(
            "SELECT 1 FROM rheo_partitions WHERE stream = $1 AND partition = ANY($2) \
             ORDER BY partition FOR UPDATE",
        )
        .bind(stream.as_str())
        .bind(&partitions)
        .execute(&mut *tx)
        .await
        .map_err(write_err)?;
        let rows = sqlx::query(include_str!("sql/append_allocate.sql"))
            .bind(stream.as_str())
            .bind(&partitions)
            .bind(&counts)
            .fetch_all(&mut *tx)
            .await
            .map_err(write_err)?;
        for row in &rows {
            let p = u32_col(row, 0)?;
            let last = u64_col(row, 1)?;
            next_seq.insert(p, last + 1 - plan.per_partition[&p]);
        }
    }

    let mut columns = InsertColumns::default();
    let mut out: Vec<Option<Appended>> = Vec::with_capacity(routed.len());
    let mut duplicates: Vec<Option<EventId>> = Vec::with_capacity(routed.len());
    for ((mut input, partition), fresh) in routed.into_iter().zip(&plan.fresh) {
        if !fresh {
            duplicates.push(input.id.take());
            out.push(None);
            continue;
        }
        let seq = next_seq.get_mut(&partition).expect("allocated");
        let sequence = *seq;
        *seq += 1;
        let id = input.id.take().unwrap_or_else(EventId::generate);
        let event =
            Arc::new(input.into_event(id.clone(), stream.clone(), partition, sequence, now));
        columns.push(&event)?;
        known.insert(id, Arc::clone(&event));
        duplicates.push(None);
        out.push(Some(Appended {
            event,
            duplicate: false,
        }));
    }
    if !columns.is_empty() {
        let inserted = sqlx::query(include_str!("sql/append_insert.sql"))
            .bind(stream.as_str())
            .bind(columns.partition)
            .bind(columns.sequence)
            .bind(columns.id)
            .bind(columns.key)
            .bind(columns.event_type)
            .bind(columns.ts)
            .bind(columns.payload)
            .bind(columns.metadata)
            .execute(&mut *tx)
            .await;
        match inserted {
            Err(e) if is_unique_violation(&e) => return Err(AppendError::IdRace),
            other => other.map_err(write_err)?,
        };
        b.notify_in(&mut tx, stream).await?;
    }
    tx.commit().await.map_err(write_err)?;
    Ok(out
        .into_iter()
        .zip(duplicates)
        .map(|(appended, dup)| {
            appended.unwrap_or_else(|| Appended {
                event: Arc::clone(&known[&dup.expect("a duplicate has an id")]),
                duplicate: true,
            })
        })
        .collect())
}

/// Column arrays for one multi-row insert (`unnest`).
#[derive(Default)]
struct InsertColumns {
    partition: Vec<i32>,
    sequence: Vec<i64>,
    id: Vec<String>,
    key: Vec<Option<String>>,
    event_type: Vec<Option<String>>,
    ts: Vec<chrono::DateTime<chrono::Utc>>,
    payload: Vec<String>,
    metadata: Vec<String>,
}

impl InsertColumns {
    fn push(&mut self, e: &Event) -> Result<()> {
        let json = |v| {
            serde_json::to_string(v).map_err(|e| Error::Failed(format!("cannot encode JSON: {e}")))
        };
        self.partition.push(e.partition as i32);
        self.sequence.push(int(e.sequence));
        self.id.push(e.id.as_str().to_owned());
        self.key.push(e.key.clone());
        self.event_type.push(e.event_type.clone());
        self.ts.push(pg_ts(e.timestamp));
        self.payload.push(json(&e.payload)?);
        self.metadata.push(json(&e.metadata)?);
        Ok(())
    }

    fn is_empty(&self) -> bool {
        self.id.is_empty()
    }
}

pub(super) async fn read(b: &PostgresBackend, req: ReadRequest) -> Result<Vec<Event>> {
    req.validate()?;
    let meta: StreamMeta = b.meta(&req.stream).await?;
    if req.partition >= meta.partition_count {
        return Err(Error::InvalidPartition {
            partition: req.partition,
            partition_count: meta.partition_count,
        });
    }
    let rows = sqlx::query(include_str!("sql/read.sql"))
        .bind(req.stream.as_str())
        .bind(req.partition as i32)
        .bind(int(req.after))
        .bind(i64::from(req.limit))
        .fetch_all(&b.pool)
        .await
        .map_err(read_err)?;
    rows.iter().map(|r| event_at(&req.stream, r, 0)).collect()
}

pub(super) async fn query(b: &PostgresBackend, stream: &StreamName, query: &Query) -> Result<Page> {
    query.validate()?;
    b.meta(stream).await?;
    let events = run_query(b, stream, query, true).await?;
    Ok(query.page(events))
}

/// Runs a query's statement (paged, or every match).
pub(super) async fn run_query(
    b: &PostgresBackend,
    stream: &StreamName,
    query: &Query,
    paged: bool,
) -> Result<Vec<Event>> {
    let built = events_query(Dialect::Postgres, stream, query, paged);
    let rows = bind_all(sqlx::query(AssertSqlSafe(built.sql)), built.binds)
        .fetch_all(&b.pool)
        .await
        .map_err(read_err)?;
    rows.iter().map(|r| event_at(stream, r, 0)).collect()
}
