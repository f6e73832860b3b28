//! Creating and listing groups (`docs/groups.md#groups-and-start-positions`).

use std::collections::HashMap;

use super::engine::{insert_new, one, rows};
use super::{Access, Arg, Column, Conn, Dialect, SqlBackend, Statement, int};
use super::{args, small};
use rheo_core::backend::policy::{Marks, start_lookup, start_points};
use rheo_core::backend::{Error, Result};
use rheo_core::model::{Group, GroupName, GroupSpec, StartPosition, StreamName};

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
        let args = args![s, &spec.name, max, backoff, now, spec.ordering.as_str()];
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
                    created_at: row.ts(3)?,
                })
            })
            .collect()
    }

    /// The exclusive start sequence of every partition for `start`.
    pub(super) async fn start_points_in(
        conn: &mut Conn<D>,
        s: &StreamName,
        partition_count: u32,
        start: &StartPosition,
    ) -> Result<Vec<u64>> {
        let mut marks = Vec::new();
        if let Some(t) = start_lookup(start, partition_count)? {
            let all: Vec<u32> = (0..partition_count).collect();
            let firsts = Self::first_at_or_after(conn, s, &all, t).await?;
            let hws = Self::high_watermarks(conn, s).await?;
            marks = all
                .iter()
                .map(|p| Marks {
                    first_at_or_after: firsts.get(p).copied(),
                    high_watermark: hws.get(p).copied().unwrap_or(0),
                })
                .collect();
        }
        Ok(start_points(start, partition_count, &marks))
    }

    /// Every partition's high watermark.
    pub(super) async fn high_watermarks(
        conn: &mut Conn<D>,
        s: &StreamName,
    ) -> Result<HashMap<u32, u64>> {
        rows::<D>(conn, Statement::high_watermarks, args![s])
            .await?
            .iter()
            .map(|r| Ok((r.u32(0)?, r.u64(1)?)))
            .collect()
    }
}
