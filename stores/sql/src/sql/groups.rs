//! Creating and listing groups (`docs/groups.md#groups-and-start-positions`).

use std::collections::BTreeMap;

use super::engine::{insert_new, one, rows};
use super::{Access, Arg, Column, Conn, Dialect, SqlBackend, Statement, int};
use super::{args, small};
use rheo_core::backend::policy::{Marks, clamp_starts, start_lookup, start_points};
use rheo_core::backend::{Error, Result};
use rheo_core::model::{Group, GroupName, GroupSpec, Retention, StartPosition, StreamName};

/// A partition's extent: its high watermark and first stored sequence.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct PartitionState {
    pub(super) high_watermark: u64,
    /// The lowest sequence still stored (`docs/log.md#retention`).
    pub(super) first: u64,
}

impl Default for PartitionState {
    /// A partition never appended to.
    fn default() -> Self {
        Self {
            high_watermark: 0,
            first: 1,
        }
    }
}

/// A stream's retention as stored (`Retention::to_text`; NULL: none).
pub(super) fn stored_retention(text: Option<String>) -> Result<Option<Retention>> {
    text.map(|t| Retention::from_text(&t).map_err(|e| super::corrupt("retention", e)))
        .transpose()
}

impl<D: Dialect> SqlBackend<D> {
    pub(super) async fn create_group_tx(&self, s: &StreamName, spec: GroupSpec) -> Result<Group> {
        spec.validate()?;
        let kept = self.meta(s).await?;
        let now = self.now();
        let mut tx = self.begin(Access::Write).await?;
        // The stream as stored, its row held against a delete until the
        // group's rows are in: its cursor rows follow the partitions it
        // has, whatever this node kept of it.
        let Some(row) = one::<D>(&mut tx, Statement::lock_stream, args![s]).await? else {
            self.forget_stream(s);
            return Err(Error::StreamNotFound(s.clone()));
        };
        let partition_count = row.u32(0)?;
        if partition_count != kept.partition_count || row.ts(1)? != kept.created_at {
            self.forget_stream(s);
        }
        let starts = Self::start_points_in(&mut tx, s, partition_count, &spec.start).await?;
        let backoff = spec.retry_backoff_ms.iter().map(|d| int(*d)).collect();
        let max = small(spec.max_attempts);
        let backoff = Arg::List(Column::I64(backoff));
        let args = args![
            s,
            &spec.name,
            max,
            backoff,
            now,
            spec.ordering.as_str(),
            spec.on_exhausted.as_str(),
            spec.flow.to_json()
        ];
        if insert_new::<D>(&mut tx, Statement::create_group, args)
            .await?
            .is_none()
        {
            let (g, s) = (spec.name.as_str(), s.as_str());
            return Err(Error::AlreadyExists(format!("group {g:?} on stream {s:?}")));
        }
        let all = (0..partition_count as i32).collect();
        let cursors = starts.iter().map(|start| int(start + 1)).collect();
        let rows = Arg::Rows(vec![Column::I32(all), Column::I64(cursors)]);
        let args = args![s, &spec.name, rows];
        super::engine::exec::<D>(&mut tx, Statement::create_group_partitions, args).await?;
        Self::commit(tx).await?;
        Ok(Group {
            stream: s.clone(),
            name: spec.name,
            max_attempts: spec.max_attempts,
            retry_backoff_ms: spec.retry_backoff_ms,
            ordering: spec.ordering,
            on_exhausted: spec.on_exhausted,
            flow: spec.flow,
            created_at: now,
        })
    }

    pub(super) async fn list_groups_tx(&self, s: &StreamName) -> Result<Vec<Group>> {
        let meta = self.meta(s).await?;
        let mut conn = self.conn(Access::Read).await?;
        let found = rows::<D>(&mut conn, Statement::list_groups, args![s]).await?;
        if found.is_empty() {
            // No group yet, or a stream deleted since it was read.
            self.confirm_stream(&mut conn, s, meta).await?;
        }
        found
            .iter()
            .map(|row| {
                Ok(Group {
                    stream: s.clone(),
                    name: GroupName::parse(row.text(0)?)
                        .map_err(|e| super::corrupt("group name", e))?,
                    max_attempts: row.u32(1)?,
                    retry_backoff_ms: row.backoff(2)?,
                    ordering: super::ordering(row.text(4)?)?,
                    on_exhausted: super::on_exhausted(row.text(5)?)?,
                    flow: super::flow(row.text(6)?)?,
                    created_at: row.ts(3)?,
                })
            })
            .collect()
    }

    /// The exclusive start sequence of every partition for `start`, none
    /// below its log start ([`clamp_starts`]).
    pub(super) async fn start_points_in(
        conn: &mut Conn<D>,
        s: &StreamName,
        partition_count: u32,
        start: &StartPosition,
    ) -> Result<Vec<u64>> {
        let mut marks = Vec::new();
        let lookup = start_lookup(start, partition_count)?;
        let all: Vec<u32> = (0..partition_count).collect();
        let (partitions, _) = Self::partitions_of(conn, s).await?;
        let state = |p: &u32| partitions.get(p).copied().unwrap_or_default();
        if let Some(t) = lookup {
            let firsts = Self::first_at_or_after(conn, s, &all, t).await?;
            marks = all
                .iter()
                .map(|p| Marks {
                    first_at_or_after: firsts.get(p).copied(),
                    high_watermark: state(p).high_watermark,
                })
                .collect();
        }
        let starts = start_points(start, partition_count, &marks);
        let firsts: Vec<u64> = all.iter().map(|p| state(p).first).collect();
        Ok(clamp_starts(starts, &firsts))
    }

    /// Every partition's high watermark and first stored sequence, and the
    /// stream's retention (`None` too for a stream without partitions,
    /// which is one deleted since it was read).
    pub(super) async fn partitions_of(
        conn: &mut Conn<D>,
        s: &StreamName,
    ) -> Result<(BTreeMap<u32, PartitionState>, Option<Retention>)> {
        let mut partitions = BTreeMap::new();
        let mut retention = None;
        for row in rows::<D>(conn, Statement::high_watermarks, args![s]).await? {
            let state = PartitionState {
                high_watermark: row.u64(1)?,
                first: row.u64(2)?,
            };
            partitions.insert(row.u32(0)?, state);
            retention = stored_retention(row.opt_text(3)?)?;
        }
        Ok((partitions, retention))
    }
}
