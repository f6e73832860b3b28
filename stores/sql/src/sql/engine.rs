//! [`SqlBackend`]: the state every SQL backend keeps (caches of the facts
//! that never change, the claim rotation, the wake-up notifier), the
//! statement runner, row decoding, and the [`Backend`] implementation that
//! routes each call to its transaction in the sibling modules.

use std::collections::HashMap;
use std::sync::Arc;

use async_trait::async_trait;
use parking_lot::{Mutex, RwLock};

use super::{
    Access, Arg, Conn, DbRow, Dialect, Execute, Phase, Statement, has_sql, is_conflict, map_error,
};
use rheo_core::backend::policy::GroupConfig;
use rheo_core::backend::{
    Backend, Capabilities, CreateStream, DeadLettersRequest, Error, FetchRequest, Notifier,
    Partitions, ReadRequest, Redrive, RenewRequest, Replay, ResetRequest, Result,
};
use rheo_core::clock::SharedClock;
use rheo_core::model::{
    Appended, DeadLetterPage, Event, EventId, EventInput, Group, GroupInfo, GroupName, GroupSpec,
    JsonObject, Lag, Lease, Page, Query, SettleTarget, Settlement, Stream, StreamName, Timestamp,
};

/// Streams and groups in a SQL database of dialect `D`. Public as the
/// stores' type (`SqliteBackend`, `PostgresBackend`); what a dialect is
/// stays this crate's own.
#[derive(Debug)]
pub struct SqlBackend<D: Dialect> {
    pub(crate) dialect: D,
    clock: SharedClock,
    notifier: Arc<Notifier>,
    /// Streams never change or disappear once created, so what was read
    /// once is cached (never a negative answer).
    streams: RwLock<HashMap<StreamName, StreamMeta>>,
    /// Groups are never deleted and only a reset of every partition
    /// changes one (its ordering), so their settings are cached like
    /// streams (never a negative answer). A node whose cached ordering is
    /// stale finds out where it matters (`docs/groups.md#ordering`): a
    /// fetch reads the ordering with the cursor rows it locks, and an ack
    /// that settles a gated delivery names its gate.
    groups: RwLock<HashMap<(StreamName, GroupName), GroupConfig>>,
    /// Where each group's next fetch starts its round-robin.
    rotation: Mutex<HashMap<(StreamName, GroupName), usize>>,
    /// Tests: drops the test's schema when the last node on it is dropped.
    #[cfg(test)]
    pub(crate) janitor: Option<Arc<rheo_core::backend::conformance::Janitor>>,
}

/// A stream's fixed facts.
#[derive(Debug, Clone, Copy)]
pub(crate) struct StreamMeta {
    pub(crate) partition_count: u32,
    pub(crate) created_at: Timestamp,
}

impl<D: Dialect> SqlBackend<D> {
    /// A backend over `dialect`; `notifier` is shared with whatever turns
    /// the store's own notifications into wake-ups.
    pub(crate) fn new(dialect: D, clock: SharedClock, notifier: Arc<Notifier>) -> Self {
        Self {
            dialect,
            clock,
            notifier,
            streams: RwLock::new(HashMap::new()),
            groups: RwLock::new(HashMap::new()),
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
        (sqlx::Transaction::begin(conn, Some(sqlx::SqlSafeStr::into_sql_str(begin))).await)
            .map_err(|e| map_error(e, Phase::Read))
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

    /// The stream's fixed facts, or `stream_not_found`.
    pub(crate) async fn meta(&self, stream: &StreamName) -> Result<StreamMeta> {
        if let Some(meta) = self.streams.read().get(stream) {
            return Ok(*meta);
        }
        let mut conn = self.conn(Access::Read).await?;
        let row = one::<D>(&mut conn, Statement::stream_meta, super::args![stream])
            .await?
            .ok_or_else(|| Error::StreamNotFound(stream.clone()))?;
        let meta = StreamMeta {
            partition_count: row.u32(0)?,
            created_at: row.ts(1)?,
        };
        self.streams.write().insert(stream.clone(), meta);
        Ok(meta)
    }

    /// The group's settings, or `group_not_found` (streams are checked
    /// first by the caller).
    pub(crate) async fn group_config(
        &self,
        conn: &mut Conn<D>,
        s: &StreamName,
        g: &GroupName,
    ) -> Result<GroupConfig> {
        let key = (s.clone(), g.clone());
        if let Some(config) = self.groups.read().get(&key) {
            return Ok(config.clone());
        }
        let row = one::<D>(conn, Statement::group_config, super::args![s, g])
            .await?
            .ok_or_else(|| Error::GroupNotFound {
                stream: s.clone(),
                group: g.clone(),
            })?;
        let config = GroupConfig {
            max_attempts: row.u32(0)?,
            retry_backoff_ms: row.backoff(1)?,
            ordering: super::ordering(row.text(2)?)?,
        };
        self.groups.write().insert(key, config.clone());
        Ok(config)
    }

    /// Drops the cached settings of a group, so that the next use reads
    /// them again.
    pub(crate) fn forget_group(&self, s: &StreamName, g: &GroupName) {
        self.groups.write().remove(&(s.clone(), g.clone()));
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
        self.get_stream_tx(stream).await
    }

    async fn append(&self, stream: &StreamName, events: Vec<EventInput>) -> Result<Vec<Appended>> {
        let appended = self.append_tx(stream, events).await?;
        if appended.iter().any(|a| !a.duplicate) {
            self.notifier.notify(stream);
        }
        Ok(appended)
    }

    async fn read(&self, req: ReadRequest) -> Result<Vec<Event>> {
        self.read_tx(req).await
    }

    async fn query(&self, stream: &StreamName, query: &Query) -> Result<Page> {
        query.validate()?;
        self.meta(stream).await?;
        let events = self.run_query(stream, query, true).await?;
        Ok(query.page(events))
    }

    async fn create_group(&self, stream: &StreamName, spec: GroupSpec) -> Result<Group> {
        self.create_group_tx(stream, spec).await
    }

    async fn list_groups(&self, stream: &StreamName) -> Result<Vec<Group>> {
        self.list_groups_tx(stream).await
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
        self.lag_tx(stream, group, partitions).await
    }

    async fn group_info(&self, stream: &StreamName, group: &GroupName) -> Result<GroupInfo> {
        self.group_info_tx(stream, group).await
    }

    async fn dead_letters(&self, req: DeadLettersRequest) -> Result<DeadLetterPage> {
        self.dead_letters_tx(req).await
    }

    async fn redrive(&self, stream: &StreamName, group: &GroupName, which: Redrive) -> Result<u64> {
        let n = self.redrive_tx(stream, group, which).await?;
        if n > 0 {
            self.notifier.notify(stream);
        }
        Ok(n)
    }

    async fn replay(&self, stream: &StreamName, group: &GroupName, how: Replay) -> Result<u64> {
        let n = self.replay_tx(stream, group, how).await?;
        self.notifier.notify(stream);
        Ok(n)
    }

    async fn reset(&self, req: ResetRequest) -> Result<()> {
        let stream = req.stream.clone();
        again_on_conflict(|| self.reset_tx(req.clone())).await?;
        self.notifier.notify(&stream);
        Ok(())
    }

    async fn next_due(
        &self,
        stream: &StreamName,
        group: &GroupName,
        partitions: &Partitions,
    ) -> Result<Option<Timestamp>> {
        self.next_due_tx(stream, group, partitions).await
    }
}

/// How many times a claim, renewal, settle or reset that hit a conflict
/// is run again before the error is returned.
const CONFLICT_RETRIES: u32 = 3;

/// Runs `tx` again when the database aborted it for a deadlock or a
/// serialization failure, or it gave up on a stale read ([`is_conflict`]).
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
