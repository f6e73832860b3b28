//! Streams and the event log on SQLite.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use sqlx::{AssertSqlSafe, Row};

use super::{
    SqliteBackend, StreamMeta, bind_all, event_at, int, read_err, ts_col, ts_text, u32_col,
    u64_col, write_err,
};
use crate::backend::sql::{Dialect, events_query, is_unique_violation, plan_append};
use crate::backend::{CreateStream, Error, ReadRequest, Result};
use crate::model::{Appended, Event, EventId, EventInput, Page, Query, Stream, StreamName, route};

pub(super) async fn create_stream(b: &SqliteBackend, req: CreateStream) -> Result<Stream> {
    req.validate()?;
    let now = b.now();
    let mut tx = b
        .writer
        .begin_with("BEGIN IMMEDIATE")
        .await
        .map_err(read_err)?;
    let inserted = sqlx::query(include_str!("sql/create_stream.sql"))
        .bind(req.name.as_str())
        .bind(i64::from(req.partition_count))
        .bind(ts_text(now))
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
        .bind(i64::from(req.partition_count))
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

pub(super) async fn get_stream(b: &SqliteBackend, stream: &StreamName) -> Result<Stream> {
    let meta = b.meta(stream).await?;
    let rows = sqlx::query(include_str!("sql/high_watermarks.sql"))
        .bind(stream.as_str())
        .fetch_all(&b.reader)
        .await
        .map_err(read_err)?;
    let mut high_watermarks = vec![0; meta.partition_count as usize];
    for row in rows {
        let p = u32_col(&row, 0)? as usize;
        if let Some(slot) = high_watermarks.get_mut(p) {
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

pub(super) async fn list_streams(b: &SqliteBackend) -> Result<Vec<Stream>> {
    let mut tx = b.reader.begin().await.map_err(read_err)?;
    let rows = sqlx::query(include_str!("sql/list_streams.sql"))
        .fetch_all(&mut *tx)
        .await
        .map_err(read_err)?;
    let hw_rows = sqlx::query(include_str!("sql/all_high_watermarks.sql"))
        .fetch_all(&mut *tx)
        .await
        .map_err(read_err)?;
    let mut hws: HashMap<String, Vec<u64>> = HashMap::new();
    for row in hw_rows {
        let name: String = row.try_get(0).map_err(read_err)?;
        hws.entry(name).or_default().push(u64_col(&row, 2)?);
    }
    rows.iter()
        .map(|row| {
            let name: String = row.try_get(0).map_err(read_err)?;
            Ok(Stream {
                high_watermarks: hws.remove(&name).unwrap_or_default(),
                name: StreamName::parse(&name).map_err(|e| Error::Failed(e.to_string()))?,
                partition_count: u32_col(row, 1)?,
                created_at: ts_col(row, 2)?,
            })
        })
        .collect()
}

pub(super) async fn append(
    b: &SqliteBackend,
    stream: &StreamName,
    events: Vec<EventInput>,
) -> Result<Vec<Appended>> {
    let meta: StreamMeta = b.meta(stream).await?;
    if events.is_empty() {
        return Ok(Vec::new());
    }
    let mut routed = Vec::with_capacity(events.len());
    for input in events {
        input.validate()?;
        let partition = route(&input, meta.partition_count)?;
        routed.push((input, partition));
    }
    let now = b.now();
    let mut tx = b
        .writer
        .begin_with("BEGIN IMMEDIATE")
        .await
        .map_err(read_err)?;

    // Known ids come back as duplicates; so does a repeat within the batch.
    let mut known: HashMap<EventId, Arc<Event>> = HashMap::new();
    for (input, _) in &routed {
        if let Some(id) = &input.id {
            if known.contains_key(id) {
                continue;
            }
            let row = sqlx::query(include_str!("sql/append_find_id.sql"))
                .bind(stream.as_str())
                .bind(id.as_str())
                .fetch_optional(&mut *tx)
                .await
                .map_err(write_err)?;
            if let Some(row) = row {
                known.insert(id.clone(), Arc::new(event_at(stream, &row, 0)?));
            }
        }
    }

    let known_ids: HashSet<EventId> = known.keys().cloned().collect();
    let plan = plan_append(&routed, &known_ids);
    let mut next_seq: HashMap<u32, u64> = HashMap::new();
    for (partition, count) in &plan.per_partition {
        let row = sqlx::query(include_str!("sql/append_allocate.sql"))
            .bind(stream.as_str())
            .bind(i64::from(*partition))
            .bind(int(*count))
            .fetch_one(&mut *tx)
            .await
            .map_err(write_err)?;
        let last = u64_col(&row, 0)?;
        next_seq.insert(*partition, last - count + 1);
    }

    let mut out: Vec<Option<Appended>> = Vec::with_capacity(routed.len());
    let mut duplicates: Vec<Option<EventId>> = Vec::with_capacity(routed.len());
    let mut new_events = Vec::new();
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
        known.insert(id, Arc::clone(&event));
        new_events.push(Arc::clone(&event));
        duplicates.push(None);
        out.push(Some(Appended {
            event,
            duplicate: false,
        }));
    }
    // One statement for the whole batch: the rows travel as one JSON
    // array (see sql/append_insert.sql).
    if !new_events.is_empty() {
        let rows: Vec<serde_json::Value> = new_events
            .iter()
            .map(|e| {
                serde_json::json!([
                    e.partition,
                    e.sequence,
                    e.id.as_str(),
                    e.key,
                    e.event_type,
                    ts_text(e.timestamp),
                    e.payload,
                    e.metadata
                ])
            })
            .collect();
        sqlx::query(include_str!("sql/append_insert.sql"))
            .bind(stream.as_str())
            .bind(serde_json::Value::Array(rows).to_string())
            .execute(&mut *tx)
            .await
            .map_err(write_err)?;
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

pub(super) async fn read(b: &SqliteBackend, req: ReadRequest) -> Result<Vec<Event>> {
    req.validate()?;
    let meta = b.meta(&req.stream).await?;
    if req.partition >= meta.partition_count {
        return Err(Error::InvalidPartition {
            partition: req.partition,
            partition_count: meta.partition_count,
        });
    }
    let rows = sqlx::query(include_str!("sql/read.sql"))
        .bind(req.stream.as_str())
        .bind(i64::from(req.partition))
        .bind(int(req.after))
        .bind(i64::from(req.limit))
        .fetch_all(&b.reader)
        .await
        .map_err(read_err)?;
    rows.iter().map(|r| event_at(&req.stream, r, 0)).collect()
}

pub(super) async fn query(b: &SqliteBackend, stream: &StreamName, query: &Query) -> Result<Page> {
    query.validate()?;
    b.meta(stream).await?;
    let events = run_query(b, stream, query, true).await?;
    Ok(query.page(events))
}

/// Runs a query's statement (paged, or every match).
pub(super) async fn run_query(
    b: &SqliteBackend,
    stream: &StreamName,
    query: &Query,
    paged: bool,
) -> Result<Vec<Event>> {
    let built = events_query(Dialect::Sqlite, stream, query, paged);
    let rows = bind_all(sqlx::query(AssertSqlSafe(built.sql)), built.binds)
        .fetch_all(&b.reader)
        .await
        .map_err(read_err)?;
    rows.iter().map(|r| event_at(stream, r, 0)).collect()
}
