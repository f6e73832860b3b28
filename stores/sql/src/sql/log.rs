//! Streams and the event log: create, list, append, read, query
//! (`docs/log.md`).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use super::engine::{StreamMeta, exec, insert_new, one, rows};
use super::{
    Access, Arg, Column, Dialect, SqlBackend, Statement, Table, args, big, int, map_error, small,
};
use rheo_core::backend::policy::{plan_append, route_batch};
use rheo_core::backend::{CreateStream, Error, ReadRequest, Result};
use rheo_core::model::{Appended, Event, EventId, EventInput, Query, Stream, StreamName};

impl<D: Dialect> SqlBackend<D> {
    pub(super) async fn create_stream_tx(&self, req: CreateStream) -> Result<Stream> {
        req.validate()?;
        let now = self.now();
        let mut tx = self.begin(Access::Write).await?;
        let name = req.name.as_str();
        let retention = req.retention.map(|r| r.to_text());
        let args = args![
            name,
            small(req.partition_count),
            now,
            Arg::OptText(retention.map(Into::into))
        ];
        if insert_new::<D>(&mut tx, Statement::create_stream, args)
            .await?
            .is_none()
        {
            return Err(Error::AlreadyExists(format!("stream {name:?}")));
        }
        let args = args![name, small(req.partition_count)];
        exec::<D>(&mut tx, Statement::create_stream_partitions, args).await?;
        Self::commit(tx).await?;
        Ok(Stream {
            name: req.name,
            partition_count: req.partition_count,
            created_at: now,
            high_watermarks: vec![0; req.partition_count as usize],
            first_sequences: vec![1; req.partition_count as usize],
            retention: req.retention,
        })
    }

    pub(super) async fn get_stream_tx(&self, stream: &StreamName) -> Result<Stream> {
        let meta = self.meta(stream).await?;
        let mut conn = self.conn(Access::Read).await?;
        self.describe(&mut conn, stream, meta).await
    }

    /// The stream `meta` describes as stored: its partitions' extents and
    /// its retention, read on `conn`; [`Self::stale`] when its partitions
    /// are not `meta`'s (deleted, and perhaps created again, since).
    pub(super) async fn describe(
        &self,
        conn: &mut super::Conn<D>,
        stream: &StreamName,
        meta: StreamMeta,
    ) -> Result<Stream> {
        let (found, retention) = Self::partitions_of(conn, stream).await?;
        if found.len() != meta.partition_count as usize {
            return Err(self.stale(stream));
        }
        let state = |p| found.get(&p).copied().unwrap_or_default();
        Ok(Stream {
            name: stream.clone(),
            partition_count: meta.partition_count,
            created_at: meta.created_at,
            high_watermarks: (0..meta.partition_count)
                .map(|p| state(p).high_watermark)
                .collect(),
            first_sequences: (0..meta.partition_count).map(|p| state(p).first).collect(),
            retention,
        })
    }

    pub(super) async fn list_streams_tx(&self) -> Result<Vec<Stream>> {
        let mut tx = self.begin(Access::Read).await?;
        let streams = rows::<D>(&mut tx, Statement::list_streams, Vec::new()).await?;
        let marks = rows::<D>(&mut tx, Statement::all_high_watermarks, Vec::new()).await?;
        let mut extents: HashMap<String, (Vec<u64>, Vec<u64>)> = HashMap::new();
        for row in marks {
            let (hws, firsts) = extents.entry(row.text(0)?).or_default();
            hws.push(row.u64(2)?);
            firsts.push(row.u64(3)?);
        }
        streams
            .iter()
            .map(|row| {
                let name = row.text(0)?;
                let (high_watermarks, first_sequences) = extents.remove(&name).unwrap_or_default();
                Ok(Stream {
                    high_watermarks,
                    first_sequences,
                    name: StreamName::parse(&name).map_err(|e| super::corrupt("stream name", e))?,
                    partition_count: row.u32(1)?,
                    created_at: row.ts(2)?,
                    retention: super::groups::stored_retention(row.opt_text(3)?)?,
                })
            })
            .collect()
    }

    pub(super) async fn append_tx(
        &self,
        stream: &StreamName,
        events: Vec<EventInput>,
    ) -> Result<Vec<Appended>> {
        let mut meta = self.meta(stream).await?;
        if events.is_empty() {
            return Ok(Vec::new());
        }
        let mut routed = route_batch(events, meta.partition_count)?;
        self.dialect.wrote(Table::Events, routed.len() as u64);
        let (mut raced, mut stale) = (false, false);
        loop {
            match self.append_once(stream, meta, routed.clone()).await? {
                Once::Appended(appended) => return Ok(appended),
                // Another node stored one of these ids between our lookup
                // and our insert: run again, and it comes back as a
                // duplicate.
                Once::Raced if !raced => raced = true,
                Once::Raced => {
                    return Err(Error::Failed(
                        "an event id was written concurrently twice; retry the append".into(),
                    ));
                }
                // The stream was deleted since its partition count was read
                // (and perhaps created again with another): read it afresh
                // (`stream_not_found` if it is gone) and route again.
                Once::Stale if !stale => {
                    stale = true;
                    self.forget_stream(stream);
                    meta = self.meta(stream).await?;
                    let inputs = routed.into_iter().map(|(input, _)| input).collect();
                    routed = route_batch(inputs, meta.partition_count)?;
                }
                Once::Stale => return Err(self.stale(stream)),
            }
        }
    }

    /// One append transaction: known ids are looked up, sequences allocated
    /// per partition (the allocator rows locked in partition order, so
    /// concurrent appends neither deadlock nor commit out of order), and the
    /// new events inserted in one statement. [`Once::Raced`] when an id was
    /// inserted by someone else since it was looked up, [`Once::Stale`]
    /// when the stream does not have the partitions `meta` says (nothing
    /// is written then).
    async fn append_once(
        &self,
        stream: &StreamName,
        meta: StreamMeta,
        routed: Vec<(EventInput, u32)>,
    ) -> Result<Once> {
        let now = self.now();
        let s = stream.as_str();
        let mut tx = self.begin(Access::Write).await?;

        let ids: Vec<String> = routed
            .iter()
            .filter_map(|(input, _)| input.id.as_ref().map(|id| id.as_str().to_owned()))
            .collect();
        let mut known: HashMap<EventId, Arc<Event>> = HashMap::new();
        if !ids.is_empty() {
            let args = args![s, Arg::List(Column::Text(ids))];
            for row in rows::<D>(&mut tx, Statement::append_find_ids, args).await? {
                let event = row.event(stream, 0)?;
                known.insert(event.id.clone(), Arc::new(event));
            }
        }
        let plan = plan_append(&routed, &known.keys().cloned().collect::<HashSet<_>>());

        let mut next_seq: HashMap<u32, u64> = HashMap::new();
        if !plan.per_partition.is_empty() {
            let (partitions, counts): (Vec<i32>, Vec<i64>) = plan
                .per_partition
                .iter()
                .map(|(p, n)| (*p as i32, int(*n)))
                .unzip();
            let lock = args![s, Arg::List(Column::I32(partitions.clone()))];
            exec::<D>(&mut tx, Statement::append_lock_partitions, lock).await?;
            let args = args![
                s,
                Arg::Rows(vec![Column::I32(partitions), Column::I64(counts)])
            ];
            for row in rows::<D>(&mut tx, Statement::append_allocate, args).await? {
                let p = row.u32(0)?;
                if row.opt_u64(2)? != Some(u64::from(meta.partition_count)) {
                    return Ok(Once::Stale);
                }
                next_seq.insert(p, row.u64(1)? + 1 - plan.per_partition[&p]);
            }
            if next_seq.len() != plan.per_partition.len() {
                // A partition's allocator row is gone: so is the stream.
                return Ok(Once::Stale);
            }
        }

        let mut columns = EventColumns::default();
        let mut out = Vec::with_capacity(routed.len());
        for ((mut input, partition), fresh) in routed.into_iter().zip(&plan.fresh) {
            let id = input.id.take();
            if !fresh {
                let id = id.expect("only an input with an id is a duplicate");
                out.push(Err(id));
                continue;
            }
            let seq = next_seq.get_mut(&partition).expect("allocated");
            let sequence = *seq;
            *seq += 1;
            let id = id.unwrap_or_else(EventId::generate);
            let event = input.into_event(id.clone(), stream.clone(), partition, sequence, now);
            let event = Arc::new(event);
            columns.push(&event)?;
            known.insert(id, Arc::clone(&event));
            out.push(Ok(event));
        }
        if !columns.is_empty() {
            let args = args![s, Arg::Rows(columns.into_columns())];
            if insert_new::<D>(&mut tx, Statement::append_insert, args)
                .await?
                .is_none()
            {
                return Ok(Once::Raced);
            }
            self.notify_in(&mut tx, stream).await?;
        }
        Self::commit(tx).await?;
        Ok(Once::Appended(rheo_core::backend::policy::appended(
            out, &known,
        )))
    }

    pub(super) async fn read_tx(&self, req: ReadRequest) -> Result<Vec<Event>> {
        req.validate()?;
        let meta = self.meta(&req.stream).await?;
        if req.partition >= meta.partition_count {
            return Err(Error::InvalidPartition {
                partition: req.partition,
                partition_count: meta.partition_count,
            });
        }
        let mut conn = self.conn(Access::Read).await?;
        let args = args![
            &req.stream,
            small(req.partition),
            big(req.after),
            small(req.limit)
        ];
        let events: Vec<Event> = rows::<D>(&mut conn, Statement::read, args)
            .await?
            .iter()
            .map(|r| r.event(&req.stream, 0))
            .collect::<Result<_>>()?;
        if events.is_empty() {
            // Nothing new, or a stream deleted since it was read.
            self.confirm_stream(&mut conn, &req.stream, meta).await?;
        }
        Ok(events)
    }

    /// Runs a history query (paged, or every match for a replay).
    pub(super) async fn run_query(
        &self,
        stream: &StreamName,
        query: &Query,
        paged: bool,
    ) -> Result<Vec<Event>> {
        let built = super::query::events_query::<D>(stream, query, paged);
        let mut conn = self.conn(Access::Read).await?;
        let found = super::Execute::rows(
            &mut *conn,
            D::bind(sqlx::AssertSqlSafe(built.sql), built.binds),
        )
        .await
        .map_err(|e| map_error(e, super::Phase::Read))?;
        found
            .into_iter()
            .map(|r| super::Row::<D>(r).event(stream, 0))
            .collect()
    }

    /// Events by position, keyed by (partition, sequence).
    pub(super) async fn events_at(
        conn: &mut super::Conn<D>,
        stream: &StreamName,
        positions: &[(u32, u64)],
    ) -> Result<HashMap<(u32, u64), Event>> {
        if positions.is_empty() {
            return Ok(HashMap::new());
        }
        let (ps, seqs): (Vec<i32>, Vec<i64>) =
            positions.iter().map(|(p, q)| (*p as i32, int(*q))).unzip();
        let args = args![stream, Arg::Rows(vec![Column::I32(ps), Column::I64(seqs)])];
        rows::<D>(conn, Statement::events_at, args)
            .await?
            .iter()
            .map(|r| {
                let e = r.event(stream, 0)?;
                Ok(((e.partition, e.sequence), e))
            })
            .collect()
    }

    /// Resolves ids to positions; an id the stream does not have is `invalid`.
    pub(super) async fn locate_all(
        conn: &mut super::Conn<D>,
        stream: &StreamName,
        ids: &[EventId],
    ) -> Result<Vec<(EventId, u32, u64)>> {
        let found = Self::locate(conn, stream, ids).await?;
        let positions = rheo_core::backend::policy::all_located(
            ids.iter()
                .map(|id| (id.as_str(), found.get(id.as_str()).copied())),
        )?;
        Ok(ids
            .iter()
            .zip(positions)
            .map(|(id, (p, seq))| (id.clone(), p, seq))
            .collect())
    }

    /// The positions of the given ids that the stream has.
    pub(super) async fn locate(
        conn: &mut super::Conn<D>,
        stream: &StreamName,
        ids: &[EventId],
    ) -> Result<HashMap<String, (u32, u64)>> {
        let names = ids.iter().map(|i| i.as_str().to_owned()).collect();
        let args = args![stream, Arg::List(Column::Text(names))];
        rows::<D>(conn, Statement::locate_events, args)
            .await?
            .iter()
            .map(|r| Ok((r.text(0)?, (r.u32(1)?, r.u64(2)?))))
            .collect()
    }

    /// Per partition: the group's position in it.
    pub(super) async fn positions(
        conn: &mut super::Conn<D>,
        s: &StreamName,
        g: &rheo_core::model::GroupName,
    ) -> Result<HashMap<u32, Position>> {
        rows::<D>(conn, Statement::group_positions, args![s, g])
            .await?
            .iter()
            .map(|r| {
                let position = Position {
                    cursor: r.u64(1)?,
                    high_watermark: r.u64(2)?,
                    first: r.u64(3)?,
                    skipped: r.u64(4)?,
                };
                Ok((r.u32(0)?, position))
            })
            .collect()
    }

    /// Per selected partition, the first sequence at or after `t`.
    pub(super) async fn first_at_or_after(
        conn: &mut super::Conn<D>,
        s: &StreamName,
        selected: &[u32],
        t: rheo_core::model::Timestamp,
    ) -> Result<HashMap<u32, u64>> {
        let args = args![s, super::partitions(selected), t];
        let mut out = HashMap::new();
        for row in rows::<D>(conn, Statement::first_at_or_after, args).await? {
            if let Some(seq) = row.opt_u64(1)? {
                out.insert(row.u32(0)?, seq.max(1));
            }
        }
        Ok(out)
    }
}

/// A group's position in one partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Position {
    /// The next sequence the group has never handed out.
    pub(super) cursor: u64,
    pub(super) high_watermark: u64,
    /// The partition's first stored sequence (`docs/log.md#retention`).
    pub(super) first: u64,
    /// Events retention removed before the group settled them.
    pub(super) skipped: u64,
}

impl Default for Position {
    /// A partition the group has no row for: as a fresh one.
    fn default() -> Self {
        Self {
            cursor: 1,
            high_watermark: 0,
            first: 1,
            skipped: 0,
        }
    }
}

/// How one append transaction ended.
enum Once {
    Appended(Vec<Appended>),
    /// An id was inserted by someone else since it was looked up.
    Raced,
    /// The stream's partitions are not what the append was routed by.
    Stale,
}

/// Column arrays for one multi-row insert.
#[derive(Default)]
struct EventColumns {
    partition: Vec<i32>,
    sequence: Vec<i64>,
    id: Vec<String>,
    key: Vec<Option<String>>,
    event_type: Vec<Option<String>>,
    ts: Vec<rheo_core::model::Timestamp>,
    payload: Vec<String>,
    metadata: Vec<String>,
}

impl EventColumns {
    fn push(&mut self, e: &Event) -> Result<()> {
        let json = |v| {
            serde_json::to_string(v).map_err(|e| Error::Failed(format!("cannot encode JSON: {e}")))
        };
        self.partition.push(e.partition as i32);
        self.sequence.push(int(e.sequence));
        self.id.push(e.id.as_str().to_owned());
        self.key.push(e.key.clone());
        self.event_type.push(e.event_type.clone());
        self.ts.push(e.timestamp);
        self.payload.push(json(&e.payload)?);
        self.metadata.push(json(&e.metadata)?);
        Ok(())
    }

    fn is_empty(&self) -> bool {
        self.id.is_empty()
    }

    /// In the order `append_insert.sql` takes them.
    fn into_columns(self) -> Vec<Column> {
        vec![
            Column::I32(self.partition),
            Column::I64(self.sequence),
            Column::Text(self.id),
            Column::OptText(self.key),
            Column::OptText(self.event_type),
            Column::Time(self.ts),
            Column::Json(self.payload),
            Column::Json(self.metadata),
        ]
    }
}

/// Reads one row's `u64` (a helper for statements returning one number).
pub(super) async fn count<D: Dialect>(
    conn: &mut super::Conn<D>,
    statement: Statement,
    args: Vec<Arg<'_>>,
) -> Result<u64> {
    match one::<D>(conn, statement, args).await? {
        Some(row) => Ok(row.opt_u64(0)?.unwrap_or(0)),
        None => Ok(0),
    }
}
