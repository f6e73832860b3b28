//! Deleting streams and groups (`docs/operations.md#deleting-streams-and-groups`):
//! every row of the stream or group, in one transaction that also bumps
//! the store's catalog generation, so that nodes sharing the store forget
//! what they kept of it.
//!
//! Where the dialect locks rows, a delete first takes the rows every
//! writer of what it deletes holds while it writes: the stream's row
//! (creating a group, `lock_stream.sql`), the groups' rows (replay,
//! redrive, reset, `lock_group.sql`), the partitions' allocator rows
//! (append) and the groups' cursor rows (fetch). A writer under way then
//! commits before the rows it wrote are deleted, and one that comes later
//! finds its rows gone and answers `stream_not_found` or `group_not_found`
//! (or runs again on what it reads afresh, [`SqlBackend::stale`]): nothing
//! is left behind under a deleted name.

use super::engine::{exec, one};
use super::{Access, Conn, Dialect, SqlBackend, Statement, args};
use rheo_core::backend::{Error, Result};
use rheo_core::model::{GroupName, StreamName};

impl<D: Dialect> SqlBackend<D> {
    /// Deletes the stream and everything under it.
    pub(super) async fn delete_stream_tx(&self, s: &StreamName) -> Result<()> {
        let mut tx = self.begin(Access::Write).await?;
        if one::<D>(&mut tx, Statement::delete_lock_stream, args![s])
            .await?
            .is_none()
        {
            self.forget_stream(s);
            return Err(Error::StreamNotFound(s.clone()));
        }
        exec::<D>(&mut tx, Statement::delete_lock_groups, args![s]).await?;
        // The allocator rows first: appends under way commit before their
        // events are deleted, and later ones find no partition.
        exec::<D>(&mut tx, Statement::delete_stream_partitions, args![s]).await?;
        exec::<D>(&mut tx, Statement::delete_stream_events, args![s]).await?;
        // Deliveries, cursor rows, deliveries again: see
        // `delete_group_deliveries.sql`.
        exec::<D>(&mut tx, Statement::delete_stream_deliveries, args![s]).await?;
        exec::<D>(&mut tx, Statement::delete_stream_cursors, args![s]).await?;
        // Its groups' key_rate buckets (docs/groups.md#flow), which fetches
        // write holding the cursor rows just deleted.
        exec::<D>(&mut tx, Statement::delete_stream_rates, args![s]).await?;
        exec::<D>(&mut tx, Statement::delete_stream_deliveries, args![s]).await?;
        exec::<D>(&mut tx, Statement::delete_stream_groups, args![s]).await?;
        exec::<D>(&mut tx, Statement::delete_stream_row, args![s]).await?;
        let generation = Self::bump_generation(&mut tx).await?;
        self.notify_in(&mut tx, s).await?;
        if let Err(e) = Self::commit(tx).await {
            // It may have been deleted all the same.
            self.forget_stream(s);
            return Err(e);
        }
        self.deleted(generation, s, None);
        Ok(())
    }

    /// Deletes the group and its delivery state; the stream is untouched.
    pub(super) async fn delete_group_tx(&self, s: &StreamName, g: &GroupName) -> Result<()> {
        let mut tx = self.begin(Access::Write).await?;
        // The stream's row, as creating a group holds it: the stream is
        // checked first, and not deleted meanwhile.
        if one::<D>(&mut tx, Statement::lock_stream, args![s])
            .await?
            .is_none()
        {
            self.forget_stream(s);
            return Err(Error::StreamNotFound(s.clone()));
        }
        if one::<D>(&mut tx, Statement::delete_lock_group, args![s, g])
            .await?
            .is_none()
        {
            self.forget_group(s, g);
            return Err(Error::GroupNotFound {
                stream: s.clone(),
                group: g.clone(),
            });
        }
        exec::<D>(&mut tx, Statement::delete_group_deliveries, args![s, g]).await?;
        exec::<D>(&mut tx, Statement::delete_group_cursors, args![s, g]).await?;
        // Its key_rate buckets (docs/groups.md#flow), which fetches write
        // holding the cursor rows just deleted: a group created again under
        // the name starts with full ones.
        exec::<D>(&mut tx, Statement::delete_group_rates, args![s, g]).await?;
        exec::<D>(&mut tx, Statement::delete_group_deliveries, args![s, g]).await?;
        exec::<D>(&mut tx, Statement::delete_group_row, args![s, g]).await?;
        let generation = Self::bump_generation(&mut tx).await?;
        self.notify_in(&mut tx, s).await?;
        if let Err(e) = Self::commit(tx).await {
            // It may have been deleted all the same.
            self.forget_group(s, g);
            return Err(e);
        }
        self.deleted(generation, s, Some(g));
        Ok(())
    }

    /// Moves the store's catalog generation on; returns the new one.
    async fn bump_generation(conn: &mut Conn<D>) -> Result<u64> {
        match one::<D>(conn, Statement::bump_generation, Vec::new()).await? {
            Some(row) => row.u64(0),
            None => Err(super::corrupt("catalog generation", "no row")),
        }
    }
}
