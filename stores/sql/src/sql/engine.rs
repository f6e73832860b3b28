//! [`SqlBackend`]: the state every SQL backend keeps (what it read of
//! streams and groups, the claim rotation, the wake-up notifier), the
//! statement runner, row decoding, and the [`Backend`] implementation that
//! routes each call to its transaction in the sibling modules.

use std::collections::HashMap;
use std::sync::Arc;

use async_trait::async_trait;
use parking_lot::Mutex;

use super::{
    Access, Arg, Conn, DbRow, Dialect, Execute, Phase, Statement, has_sql, is_conflict, map_error,
};
use rheo_core::backend::catalog::Catalog;
use rheo_core::backend::policy::GroupConfig;
use rheo_core::backend::{
    Backend, Capabilities, CreateStream, DeadLettersRequest, DeleteGroup, DeleteStream, Error,
    FetchRequest, LeasesRequest, Notifier, Partitions, ReadRequest, Redrive, RenewRequest, Replay,
    ResetRequest, Result, TrimRequest, Trimmed,
};
use rheo_core::clock::SharedClock;
use rheo_core::model::{
    Appended, DeadLetterPage, Event, EventId, EventInput, Group, GroupInfo, GroupName, GroupSpec,
    JsonObject, Lag, Lease, LeasePage, Page, Query, Retention, SettleTarget, Settlement, Stream,
    StreamName, Timestamp,
};

/// Streams and groups in a SQL database of dialect `D`. Public as the
/// stores' type (`SqliteBackend`, `PostgresBackend`); what a dialect is
/// stays this crate's own.
#[derive(Debug)]
pub struct SqlBackend<D: Dialect> {
    pub(crate) dialect: D,
    clock: SharedClock,
    notifier: Arc<Notifier>,
    /// What was read of streams (partition count, creation time) and
    /// groups (settings), kept instead of read on every call (never a
    /// negative answer). Only a delete changes a stream, and a delete or a
    /// reset of every partition (its ordering and flow) a group, so what
    /// is kept is dropped when this node deletes, when the store's catalog
    /// generation says another node did
    /// (`docs/operations.md#deleting-streams-and-groups`),
    /// and when a call finds the rows of what it kept gone (it then
    /// answers `stream_not_found` or `group_not_found`, or runs again on
    /// what it reads afresh: see [`SqlBackend::stale`]). A node whose kept
    /// ordering or flow is stale finds out where it matters
    /// (`docs/groups.md#ordering`, `docs/groups.md#flow`): a fetch reads
    /// both with the cursor rows it locks, an ack that settles a gated
    /// delivery names its gate, and a release of gates reads how many
    /// heads they have room for with the cursor rows it locks.
    pub(super) catalog: Catalog<StreamMeta, GroupConfig>,
    /// Where each group's next fetch starts its round-robin.
    rotation: Mutex<HashMap<(StreamName, GroupName), usize>>,
    /// Tests: drops the test's schema when the last node on it is dropped.
    #[cfg(test)]
    pub(crate) janitor: Option<Arc<rheo_core::backend::conformance::Janitor>>,
}

/// A stream's facts, fixed until it is deleted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct StreamMeta {
    pub(crate) partition_count: u32,
    pub(crate) created_at: Timestamp,
}

impl<D: Dialect> SqlBackend<D> {
    /// A backend over `dialect`; `notifier` is shared with whatever turns
    /// the store's own notifications into wake-ups; `catalog` is local to
    /// a store this server owns, shared for one several servers use.
    pub(crate) fn new(
        dialect: D,
        clock: SharedClock,
        notifier: Arc<Notifier>,
        catalog: Catalog<StreamMeta, GroupConfig>,
    ) -> Self {
        Self {
            dialect,
            clock,
            notifier,
            catalog,
            rotation: Mutex::new(HashMap::new()),
            #[cfg(test)]
            janitor: None,
        }
    }

    pub(crate) fn now(&self) -> Timestamp {
        self.clock.now()
    }

    /// A transaction for `access`.
    pub(crate) async fn begin(&self, access: Access) -> Result<super::Tx<D>> {
        let begin = match access {
            Access::Read => D::BEGIN_READ,
            Access::Write => D::BEGIN_WRITE,
        };
        // What `Pool::begin_with` does, with the connection got first so
        // that failing to get one is told apart from a failing BEGIN.
        let conn = self.conn(access).await?;
        (begin_whole(conn, begin).await).map_err(|e| map_error(e, Phase::Read))
    }

    /// A pooled connection for `access`; failing to get one is
    /// `backend_unavailable` ([`Phase::Connect`]).
    pub(crate) async fn conn(&self, access: Access) -> Result<sqlx::pool::PoolConnection<D::Db>> {
        // Every call starts here: from now on it says when a write goes
        // out (docs/cluster.md#a-node-cut-off-from-the-store).
        rheo_core::backend::sending_read();
        let pool = self.dialect.pool(access);
        // The pool has pinged each connection, which runs any rollback still
        // queued, so one still inside a transaction is stuck there: SQLite
        // rolls a transaction back by itself on some errors (SQLITE_FULL),
        // and the driver's own ROLLBACK then fails, leaving its count of
        // open transactions at 1 and every later BEGIN refused. Close it and
        // take another; when the disk filled under several transactions at
        // once, several are stuck, and the pool opens a fresh one once every
        // stuck one is closed (docs/operations.md#chaos-tests: the disk-full
        // test).
        let mut closed = 0;
        loop {
            let conn = (pool.acquire().await).map_err(|e| map_error(e, Phase::Connect))?;
            if !sqlx::Connection::is_in_transaction(&*conn) {
                if closed > 0 {
                    tracing::warn!(
                        closed,
                        "closed pooled connections left inside a transaction"
                    );
                }
                return Ok(conn);
            }
            closed += 1;
            let _ = conn.close().await;
        }
    }

    /// Commits; a lost connection here leaves the outcome unknown.
    pub(crate) async fn commit(tx: super::Tx<D>) -> Result<()> {
        rheo_core::backend::sending_write();
        tx.commit().await.map_err(|e| map_error(e, Phase::Write))
    }

    /// Wakes handlers of `stream` on every node once `conn`'s transaction commits.
    pub(crate) async fn notify_in(&self, conn: &mut Conn<D>, stream: &StreamName) -> Result<()> {
        self.dialect
            .notify_in(conn, stream)
            .await
            .map_err(|e| map_error(e, Phase::Read))
    }

    /// The stream's facts, or `stream_not_found`. Every call that uses
    /// what is kept starts here, so this is where a node sharing its store
    /// reads the catalog generation when it is due.
    pub(crate) async fn meta(&self, stream: &StreamName) -> Result<StreamMeta> {
        self.refresh().await?;
        if let Some(meta) = self.catalog.stream(stream) {
            return Ok(meta);
        }
        let at = self.catalog.generation();
        let mut conn = self.conn(Access::Read).await?;
        let meta = Self::read_meta(&mut conn, stream)
            .await?
            .ok_or_else(|| Error::StreamNotFound(stream.clone()))?;
        self.catalog.keep_stream(stream, meta, at);
        Ok(meta)
    }

    /// The stream's facts as stored, read on `conn`.
    async fn read_meta(conn: &mut Conn<D>, stream: &StreamName) -> Result<Option<StreamMeta>> {
        let row = one::<D>(conn, Statement::stream_meta, super::args![stream]).await?;
        row.map(|row| {
            Ok(StreamMeta {
                partition_count: row.u32(0)?,
                created_at: row.ts(1)?,
            })
        })
        .transpose()
    }

    /// Forgets everything kept when the store's catalog generation moved
    /// (a node sharing the store reads it at most every
    /// [`CHECK_EVERY`](rheo_core::backend::catalog::CHECK_EVERY)).
    async fn refresh(&self) -> Result<()> {
        let moved = self
            .catalog
            .refresh(|| async {
                let mut conn = self.conn(Access::Read).await?;
                let row = one::<D>(&mut conn, Statement::catalog_generation, Vec::new()).await?;
                match row {
                    Some(row) => row.u64(0),
                    None => Err(super::corrupt("catalog generation", "no row")),
                }
            })
            .await?;
        if moved {
            // Which streams and groups went is not known: their rotations
            // start again, like every other one.
            self.rotation.lock().clear();
        }
        Ok(())
    }

    /// The group's settings, or `group_not_found` (the caller checked the
    /// stream first; if the group is not found, the stream is read again
    /// on `conn`, so that one deleted since answers `stream_not_found`).
    ///
    /// The first statement of its transaction wherever the transaction is
    /// a snapshot, so that what it reads is never older than the
    /// generation it is kept under.
    pub(crate) async fn group_config(
        &self,
        conn: &mut Conn<D>,
        s: &StreamName,
        g: &GroupName,
    ) -> Result<GroupConfig> {
        if let Some(config) = self.catalog.group(s, g) {
            return Ok(config);
        }
        let at = self.catalog.generation();
        let Some(row) = one::<D>(conn, Statement::group_config, super::args![s, g]).await? else {
            return Err(self.group_missing(conn, s, g).await);
        };
        let config = GroupConfig {
            max_attempts: row.u32(0)?,
            retry_backoff_ms: row.backoff(1)?,
            ordering: super::ordering(row.text(2)?)?,
            on_exhausted: super::on_exhausted(row.text(3)?)?,
            flow: super::flow(row.text(4)?)?,
        };
        self.catalog.keep_group(s, g, config.clone(), at);
        Ok(config)
    }

    /// The error for a group that is not in the store: `stream_not_found`
    /// when its stream is gone too (read on `conn`), else
    /// `group_not_found`; either way what was kept of it is forgotten.
    pub(crate) async fn group_missing(
        &self,
        conn: &mut Conn<D>,
        s: &StreamName,
        g: &GroupName,
    ) -> Error {
        self.catalog.forget_group(s, g);
        match Self::read_meta(conn, s).await {
            Ok(Some(_)) => Error::GroupNotFound {
                stream: s.clone(),
                group: g.clone(),
            },
            Ok(None) => {
                self.forget_stream(s);
                Error::StreamNotFound(s.clone())
            }
            Err(e) => e,
        }
    }

    /// Checks, on `conn`, that the group is still in the store: a call
    /// that found none of what it looked for (a lease, a dead letter) may
    /// have used settings kept of a group deleted since.
    pub(crate) async fn confirm_group(
        &self,
        conn: &mut Conn<D>,
        s: &StreamName,
        g: &GroupName,
    ) -> Result<()> {
        match one::<D>(conn, Statement::group_config, super::args![s, g]).await? {
            Some(_) => Ok(()),
            None => Err(self.group_missing(conn, s, g).await),
        }
    }

    /// Checks, on `conn`, that the stream is still the one `kept`
    /// describes: a call that found nothing (no event, no group) may have
    /// used facts kept of a stream deleted since. `stream_not_found` when
    /// it is gone, [`Self::stale`] when it was created again.
    pub(crate) async fn confirm_stream(
        &self,
        conn: &mut Conn<D>,
        s: &StreamName,
        kept: StreamMeta,
    ) -> Result<()> {
        match Self::read_meta(conn, s).await? {
            Some(stored) if stored == kept => Ok(()),
            Some(_) => Err(self.stale(s)),
            None => {
                self.forget_stream(s);
                Err(Error::StreamNotFound(s.clone()))
            }
        }
    }

    /// What a transaction answers when it finds that the rows of the
    /// stream it kept facts of are not what those facts say (deleted, or
    /// deleted and created again with another partition count, through
    /// another node): the stream and its groups are forgotten, and the
    /// transaction is given up as a conflict, to run again
    /// ([`again_on_conflict`]) on what it reads afresh, which answers
    /// `stream_not_found` or `group_not_found` when they are gone.
    pub(crate) fn stale(&self, s: &StreamName) -> Error {
        self.forget_stream(s);
        super::conflict(format!(
            "stream {:?} or one of its groups was deleted (and perhaps created again) \
             since this node read it",
            s.as_str()
        ))
    }

    /// Forgets what is kept of a stream and its groups.
    pub(crate) fn forget_stream(&self, s: &StreamName) {
        self.catalog.forget_stream(s);
    }

    /// Drops the kept settings of a group, so that the next use reads
    /// them again.
    pub(crate) fn forget_group(&self, s: &StreamName, g: &GroupName) {
        self.catalog.forget_group(s, g);
    }

    /// After this node deleted a stream (`group: None`) or a group in a
    /// transaction that bumped the catalog generation to `generation`:
    /// everything kept is forgotten (a read that started before the
    /// delete is not kept when it ends), and so are the rotations of what
    /// was deleted.
    pub(crate) fn deleted(&self, generation: u64, s: &StreamName, group: Option<&GroupName>) {
        self.catalog.observe(generation);
        let mut rotation = self.rotation.lock();
        match group {
            None => {
                self.forget_stream(s);
                rotation.retain(|(stream, _), _| stream != s);
            }
            Some(g) => {
                self.forget_group(s, g);
                rotation.remove(&(s.clone(), g.clone()));
            }
        }
    }

    /// The next round-robin start for a group.
    pub(crate) fn rotate(&self, stream: &StreamName, group: &GroupName) -> usize {
        let mut rotation = self.rotation.lock();
        let next = rotation.entry((stream.clone(), group.clone())).or_insert(0);
        let current = *next;
        *next = next.wrapping_add(1);
        current
    }
}

/// Runs a statement and returns its rows.
pub(crate) async fn rows<D: Dialect>(
    conn: &mut Conn<D>,
    statement: Statement,
    args: Vec<Arg<'_>>,
) -> Result<Vec<Row<D>>> {
    rows_in::<D>(conn, statement, args, Phase::Read).await
}

/// [`rows`], for a statement whose failure means what `phase` says.
pub(crate) async fn rows_in<D: Dialect>(
    conn: &mut Conn<D>,
    statement: Statement,
    args: Vec<Arg<'_>>,
    phase: Phase,
) -> Result<Vec<Row<D>>> {
    let sql = D::statement(statement);
    if !has_sql(sql) {
        return Ok(Vec::new());
    }
    if phase == Phase::Write {
        // A statement that commits on its own.
        rheo_core::backend::sending_write();
    }
    let rows = conn
        .rows(D::bind(sql, args))
        .await
        .map_err(|e| map_error(e, phase))?;
    Ok(rows.into_iter().map(Row).collect())
}

/// Runs a statement that returns at most one row.
pub(crate) async fn one<D: Dialect>(
    conn: &mut Conn<D>,
    statement: Statement,
    args: Vec<Arg<'_>>,
) -> Result<Option<Row<D>>> {
    Ok(rows::<D>(conn, statement, args).await?.into_iter().next())
}

/// Runs a statement; returns how many rows it changed (0 for a statement
/// this dialect does not need).
pub(crate) async fn exec<D: Dialect>(
    conn: &mut Conn<D>,
    statement: Statement,
    args: Vec<Arg<'_>>,
) -> Result<u64> {
    try_exec::<D>(conn, statement, args)
        .await
        .map_err(|e| map_error(e, Phase::Read))
}

/// [`exec`] for an insert that may hit a unique key: `None` when it did.
pub(crate) async fn insert_new<D: Dialect>(
    conn: &mut Conn<D>,
    statement: Statement,
    args: Vec<Arg<'_>>,
) -> Result<Option<u64>> {
    match try_exec::<D>(conn, statement, args).await {
        Err(e) if super::is_unique_violation(&e) => Ok(None),
        other => other.map(Some).map_err(|e| map_error(e, Phase::Read)),
    }
}

async fn try_exec<D: Dialect>(
    conn: &mut Conn<D>,
    statement: Statement,
    args: Vec<Arg<'_>>,
) -> std::result::Result<u64, sqlx::Error> {
    let sql = D::statement(statement);
    if !has_sql(sql) {
        return Ok(0);
    }
    Ok(D::rows_affected(&conn.execute(D::bind(sql, args)).await?))
}

/// A result row, decoded through the dialect.
pub(crate) struct Row<D: Dialect>(pub(crate) DbRow<D>);

impl<D: Dialect> std::fmt::Debug for Row<D> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Row").finish_non_exhaustive()
    }
}

impl<D: Dialect> Row<D> {
    pub(crate) fn opt_u64(&self, i: usize) -> Result<Option<u64>> {
        D::int(&self.0, i)?
            .map(|n| u64::try_from(n).map_err(|e| super::corrupt("number", e)))
            .transpose()
    }

    /// A signed integer that is never NULL (a key_rate bucket's TAT).
    pub(crate) fn i64(&self, i: usize) -> Result<i64> {
        D::int(&self.0, i)?.ok_or_else(|| super::corrupt("number", "NULL"))
    }

    pub(crate) fn u64(&self, i: usize) -> Result<u64> {
        self.opt_u64(i)?
            .ok_or_else(|| super::corrupt("number", "NULL"))
    }

    pub(crate) fn u32(&self, i: usize) -> Result<u32> {
        u32::try_from(self.u64(i)?).map_err(|e| super::corrupt("number", e))
    }

    pub(crate) fn opt_text(&self, i: usize) -> Result<Option<String>> {
        D::text(&self.0, i)
    }

    pub(crate) fn text(&self, i: usize) -> Result<String> {
        self.opt_text(i)?
            .ok_or_else(|| super::corrupt("text", "NULL"))
    }

    pub(crate) fn opt_ts(&self, i: usize) -> Result<Option<Timestamp>> {
        D::time(&self.0, i)
    }

    pub(crate) fn ts(&self, i: usize) -> Result<Timestamp> {
        self.opt_ts(i)?
            .ok_or_else(|| super::corrupt("timestamp", "NULL"))
    }

    pub(crate) fn json(&self, i: usize) -> Result<JsonObject> {
        D::json(&self.0, i)
    }

    /// A retry backoff schedule.
    pub(crate) fn backoff(&self, i: usize) -> Result<Vec<u64>> {
        Ok(D::int_list(&self.0, i)?
            .into_iter()
            .map(|d| d.max(0) as u64)
            .collect())
    }

    /// An event from the columns `partition, sequence, id, key, type, ts,
    /// payload, metadata` starting at `at`.
    pub(crate) fn event(&self, stream: &StreamName, at: usize) -> Result<Event> {
        Ok(Event {
            id: EventId::parse(self.text(at + 2)?).map_err(|e| super::corrupt("event id", e))?,
            stream: stream.clone(),
            partition: self.u32(at)?,
            sequence: self.u64(at + 1)?,
            key: self.opt_text(at + 3)?,
            event_type: self.opt_text(at + 4)?,
            timestamp: self.ts(at + 5)?,
            payload: self.json(at + 6)?,
            metadata: self.json(at + 7)?,
        })
    }
}

#[async_trait]
impl<D: Dialect> Backend for SqlBackend<D> {
    fn kind(&self) -> &'static str {
        D::KIND
    }

    fn capabilities(&self) -> Capabilities {
        D::CAPABILITIES
    }

    fn cluster(&self) -> Option<std::sync::Arc<dyn rheo_core::cluster::ClusterStore>> {
        self.dialect.cluster()
    }

    fn clock(&self) -> &SharedClock {
        &self.clock
    }

    fn notifier(&self) -> &Notifier {
        &self.notifier
    }

    async fn ping(&self) -> Result<()> {
        let mut conn = self.conn(Access::Read).await?;
        conn.execute(D::bind("SELECT 1", Vec::new()))
            .await
            .map(|_| ())
            .map_err(|e| map_error(e, Phase::Read))
    }

    async fn migrate(&self) -> Result<Vec<String>> {
        self.dialect.migrate().await
    }

    async fn migration_status(&self) -> Result<rheo_core::backend::MigrationStatus> {
        self.dialect.migration_status().await
    }

    async fn create_stream(&self, req: CreateStream) -> Result<Stream> {
        self.create_stream_tx(req).await
    }

    async fn list_streams(&self) -> Result<Vec<Stream>> {
        self.list_streams_tx().await
    }

    async fn get_stream(&self, stream: &StreamName) -> Result<Stream> {
        again_on_conflict(|| self.get_stream_tx(stream)).await
    }

    async fn append(&self, stream: &StreamName, events: Vec<EventInput>) -> Result<Vec<Appended>> {
        let appended = self.append_tx(stream, events).await?;
        if appended.iter().any(|a| !a.duplicate) {
            self.notifier.notify(stream);
        }
        Ok(appended)
    }

    async fn read(&self, req: ReadRequest) -> Result<Vec<Event>> {
        again_on_conflict(|| self.read_tx(req.clone())).await
    }

    async fn query(&self, stream: &StreamName, query: &Query) -> Result<Page> {
        query.validate()?;
        let events = again_on_conflict(|| async {
            let meta = self.meta(stream).await?;
            let events = self.run_query(stream, query, true).await?;
            if events.is_empty() {
                let mut conn = self.conn(Access::Read).await?;
                self.confirm_stream(&mut conn, stream, meta).await?;
            }
            Ok(events)
        })
        .await?;
        Ok(query.page(events))
    }

    async fn create_group(&self, stream: &StreamName, spec: GroupSpec) -> Result<Group> {
        self.create_group_tx(stream, spec).await
    }

    async fn list_groups(&self, stream: &StreamName) -> Result<Vec<Group>> {
        again_on_conflict(|| self.list_groups_tx(stream)).await
    }

    async fn fetch(&self, req: FetchRequest) -> Result<Vec<Lease>> {
        again_on_conflict(|| self.fetch_tx(req.clone())).await
    }

    async fn renew(&self, req: RenewRequest) -> Result<Lease> {
        again_on_conflict(|| self.renew_tx(req.clone())).await
    }

    async fn renew_many(
        &self,
        stream: &StreamName,
        group: &GroupName,
        targets: Vec<SettleTarget>,
        lease_ms: u64,
    ) -> Result<Vec<Result<Timestamp>>> {
        again_on_conflict(|| self.renew_many_tx(stream, group, targets.clone(), lease_ms)).await
    }

    async fn settle(
        &self,
        stream: &StreamName,
        group: &GroupName,
        items: Vec<Settlement>,
    ) -> Result<Vec<Result<()>>> {
        let (results, requeued) =
            again_on_conflict(|| self.settle_tx(stream, group, items.clone())).await?;
        if requeued {
            self.notifier.notify(stream);
        }
        Ok(results)
    }

    async fn lag(
        &self,
        stream: &StreamName,
        group: &GroupName,
        partitions: &Partitions,
    ) -> Result<Lag> {
        again_on_conflict(|| self.lag_tx(stream, group, partitions)).await
    }

    async fn group_info(&self, stream: &StreamName, group: &GroupName) -> Result<GroupInfo> {
        again_on_conflict(|| self.group_info_tx(stream, group)).await
    }

    async fn dead_letters(&self, req: DeadLettersRequest) -> Result<DeadLetterPage> {
        self.dead_letters_tx(req).await
    }

    async fn leases(&self, req: LeasesRequest) -> Result<LeasePage> {
        again_on_conflict(|| self.leases_tx(&req)).await
    }

    async fn redrive(&self, stream: &StreamName, group: &GroupName, which: Redrive) -> Result<u64> {
        let n = again_on_conflict(|| self.redrive_tx(stream, group, which.clone())).await?;
        if n > 0 {
            self.notifier.notify(stream);
        }
        Ok(n)
    }

    async fn replay(&self, stream: &StreamName, group: &GroupName, how: Replay) -> Result<u64> {
        let n = again_on_conflict(|| self.replay_tx(stream, group, how.clone())).await?;
        self.notifier.notify(stream);
        Ok(n)
    }

    async fn reset(&self, req: ResetRequest) -> Result<()> {
        let stream = req.stream.clone();
        again_on_conflict(|| self.reset_tx(req.clone())).await?;
        self.notifier.notify(&stream);
        Ok(())
    }

    async fn set_retention(
        &self,
        stream: &StreamName,
        retention: Option<Retention>,
    ) -> Result<Stream> {
        again_on_conflict(|| self.set_retention_tx(stream, retention)).await
    }

    async fn trim(&self, req: TrimRequest) -> Result<Trimmed> {
        let trimmed = again_on_conflict(|| self.trim_tx(&req)).await?;
        if !trimmed.skipped.is_empty() {
            // Gates may have let deliveries out.
            self.notifier.notify(&req.stream);
        }
        Ok(trimmed)
    }

    async fn reclaim(&self) -> Result<()> {
        self.dialect.reclaim().await
    }

    async fn size(&self) -> Result<Option<u64>> {
        let mut conn = self.conn(Access::Read).await?;
        match one::<D>(&mut conn, Statement::store_size, Vec::new()).await? {
            Some(row) => Ok(Some(row.u64(0)?)),
            None => Ok(None),
        }
    }

    async fn delete_stream(&self, req: DeleteStream) -> Result<()> {
        req.validate()?;
        again_on_conflict(|| self.delete_stream_tx(&req.stream)).await?;
        // Waiters find the stream gone.
        self.notifier.notify(&req.stream);
        Ok(())
    }

    async fn delete_group(&self, req: DeleteGroup) -> Result<()> {
        req.validate()?;
        again_on_conflict(|| self.delete_group_tx(&req.stream, &req.group)).await?;
        self.notifier.notify(&req.stream);
        Ok(())
    }

    async fn next_due(
        &self,
        stream: &StreamName,
        group: &GroupName,
        partitions: &Partitions,
    ) -> Result<Option<Timestamp>> {
        again_on_conflict(|| self.next_due_tx(stream, group, partitions)).await
    }
}

/// Begins a transaction on `conn` with `statement`, in a task of its own
/// so that the BEGIN, once sent, always runs to its end: a call dropped
/// while it waits (a store deadline, a client gone, a handler worker woken
/// from its rest) then leaves a transaction the driver knows about, rolled
/// back before the connection is used again. Dropped halfway through its
/// own BEGIN, the driver (sqlx 0.9 on PostgreSQL) counts no transaction,
/// and the connection went back to its pool inside one the server had
/// started: the next call's BEGIN ran in that old transaction — read-only,
/// or with an old snapshot.
pub(crate) async fn begin_whole<DB: sqlx::Database>(
    conn: sqlx::pool::PoolConnection<DB>,
    statement: &'static str,
) -> std::result::Result<sqlx::Transaction<'static, DB>, sqlx::Error> {
    let statement = sqlx::SqlSafeStr::into_sql_str(statement);
    let begun = tokio::spawn(sqlx::Transaction::begin(conn, Some(statement)));
    match begun.await {
        Ok(result) => result,
        Err(e) => Err(sqlx::Error::Io(std::io::Error::other(format!(
            "the task beginning a transaction ended: {e}"
        )))),
    }
}

/// How many times a transaction that hit a conflict (or found what this
/// node kept of a stream stale, [`SqlBackend::stale`]) is run again
/// before the error is returned.
const CONFLICT_RETRIES: u32 = 3;

/// Runs `tx` again when the database aborted it for a deadlock or a
/// serialization failure, or it gave up on a stale read or on facts kept
/// of a stream deleted since ([`is_conflict`]).
/// Two transactions that lock the same delivery rows in a different order
/// (a batch ack and a batch renewal, say) can deadlock on PostgreSQL,
/// which then rolls one of them back whole: running it again is safe, and
/// the other has gone ahead.
async fn again_on_conflict<T, F, Fut>(mut tx: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T>>,
{
    let mut retries = 0;
    loop {
        match tx().await {
            Err(e) if is_conflict(&e) && retries < CONFLICT_RETRIES => {
                retries += 1;
                tracing::debug!(error = %e, retries, "transaction rolled back; running it again");
            }
            other => return other,
        }
    }
}
