//! The MongoDB backend (`mongodb://host:port/database?…`): the whole
//! `Backend` trait on MongoDB ≥ 4.2 through the official driver, passing
//! the conformance suite and the two-node suite. The collections, their
//! indexes and how each operation is made atomic: `docs/backends.md#mongodb`.
//!
//! In short: an append is one multi-document transaction (the stream's
//! document holds the high watermarks, so concurrent appenders conflict
//! there and one of them runs again); everything a group does is a
//! conditional single-document write, which MongoDB makes atomic without a
//! transaction — a claim inserts a delivery document under a unique
//! (stream, group, partition, sequence) key or updates one whose status and
//! lease id are still what it read, a settle updates only a delivery still
//! leased under the caller's lease id. Every rule is the shared policy
//! module's (`backend::policy`); nothing here decides on its own.
//!
//! The backend is shared, so it offers a cluster store (`cluster.rs`):
//! nodes, modules (in parts, past the 16 MiB document limit) and handler
//! records in `rheo_nodes`, `rheo_modules`, `rheo_module_parts` and
//! `rheo_handlers`, a handler write being one conditional single-document
//! write on its revision; each write then raises a count in `rheo_cluster`
//! that every node polls every second to wake its watchers.
//!
//! A stream's retention removes its oldest events in trims, each one
//! transaction (`retention.rs`, `docs/log.md#retention`).
//!
//! Streams and groups can be deleted (`lifecycle.rs`,
//! `docs/operations.md#deleting-streams-and-groups`), so what a node keeps
//! of them (partition counts, group settings) is a [`Catalog`] checked
//! against the catalog generation in `rheo_catalog`, which every delete
//! raises.

mod claims;
mod cluster;
mod gates;
mod groups;
mod impl_backend;
mod inspect;
mod json;
mod lifecycle;
mod log;
mod migrate;
mod query;
mod retention;
mod rewind;
#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use futures::TryStreamExt as _;
use mongodb::bson::{Bson, Document, doc};
use mongodb::error::{
    ErrorKind, TRANSIENT_TRANSACTION_ERROR, UNKNOWN_TRANSACTION_COMMIT_RESULT, WriteFailure,
};
use mongodb::options::ClientOptions;
use mongodb::{Client, ClientSession, Collection, Database};

use rheo_core::backend::catalog::Catalog;
use rheo_core::backend::policy::GroupConfig;
use rheo_core::backend::turns::Turns;
use rheo_core::backend::{Error, Notifier, Result};
use rheo_core::clock::SharedClock;
use rheo_core::model::{GroupName, StreamName, Timestamp};

/// The database when the URL names none.
pub(crate) const DEFAULT_DATABASE: &str = "rheo";

/// How many times a transaction runs again after a conflict with another
/// writer before the call gives up.
const MAX_ATTEMPTS: u32 = 64;

/// Collection names (`docs/backends.md#mongodb`).
pub(crate) const STREAMS: &str = "rheo_streams";
pub(crate) const EVENTS: &str = "rheo_events";
pub(crate) const GROUPS: &str = "rheo_groups";
pub(crate) const DELIVERIES: &str = "rheo_deliveries";
/// One document per gate of a gated group (an ordering, or a flow's
/// `key_concurrency`) that has open deliveries (`gates.rs`).
pub(crate) const GATES: &str = "rheo_gates";
/// One document per (group, partition, event key) of a group with a
/// `flow.key_rate`: the key's token bucket, as its TAT (`gates.rs`,
/// `docs/groups.md#flow`).
pub(crate) const RATES: &str = "rheo_rates";
pub(crate) const MIGRATIONS: &str = "rheo_migrations";
/// The catalog generation and the tombstones of deletes still removing
/// documents (`lifecycle.rs`).
pub(crate) const CATALOG: &str = "rheo_catalog";

/// What a node keeps of streams (partition count, creation time) and of
/// groups (their settings).
pub(crate) type Kept = Catalog<(u32, Timestamp), GroupConfig>;

/// The MongoDB backend.
#[derive(Clone)]
pub struct MongoBackend {
    client: Client,
    db: Database,
    /// `maxTimeMS` of each commit.
    commit_time: Duration,
    clock: SharedClock,
    notifier: Arc<Notifier>,
    /// Stops the wake-up listener with the last clone of the backend.
    _listener: Arc<Listener>,
    /// The cluster collections (`cluster.rs`).
    cluster: Arc<cluster::MongoCluster>,
    /// One transaction at a time per stream (appends, trims) and per group
    /// (claims and settles of a gated group, resets, creates) in this
    /// process: its own transactions on one record never conflict with
    /// each other, only with other processes', and different streams and
    /// groups go on side by side ([`Turn`]).
    turns: Arc<Turns<Turn>>,
    /// Where each group's next fetch starts its round-robin.
    rotation: Arc<parking_lot::Mutex<HashMap<(StreamName, GroupName), usize>>>,
    /// What was read of streams and groups (never a negative answer),
    /// kept until a delete — this node's, or another's, which moves the
    /// catalog generation (`lifecycle.rs`,
    /// `docs/operations.md#deleting-streams-and-groups`) — or, for a
    /// group's settings, a reset that changes its ordering or flow
    /// (`groups::GroupState::gates_as`). A call that finds what it kept
    /// gone answers `stream_not_found` or `group_not_found`.
    catalog: Arc<Kept>,
    /// Tests: drops the database when the last clone is dropped.
    #[cfg(test)]
    janitor: Option<Arc<tests::Janitor>>,
}

impl std::fmt::Debug for MongoBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MongoBackend")
            .field("database", &self.db.name())
            .finish_non_exhaustive()
    }
}

/// Whether a failed operation may have been applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Phase {
    Read,
    Write,
}

/// Maps a driver error to a portable one: no server is
/// `backend_unavailable`; a write whose answer was lost is `ambiguous`.
pub(crate) fn map_error(e: mongodb::error::Error, phase: Phase) -> Error {
    if e.contains_label(UNKNOWN_TRANSACTION_COMMIT_RESULT) {
        return Error::Ambiguous(format!("mongodb: {e}"));
    }
    match &*e.kind {
        ErrorKind::ServerSelection { .. } | ErrorKind::ConnectionPoolCleared { .. } => {
            Error::BackendUnavailable(format!("mongodb: {e}"))
        }
        ErrorKind::Io(_) if phase == Phase::Write => Error::Ambiguous(format!("mongodb: {e}")),
        ErrorKind::Io(_) => Error::BackendUnavailable(format!("mongodb: {e}")),
        // Shutting down, or not (yet) able to serve.
        ErrorKind::Command(c) if [91, 11600, 11602, 189, 13436].contains(&c.code) => {
            Error::BackendUnavailable(format!("mongodb: {e}"))
        }
        _ => Error::Failed(format!("mongodb: {e}")),
    }
}

/// Whether `e` is a unique-index violation.
pub(crate) fn is_duplicate_key(e: &mongodb::error::Error) -> bool {
    match &*e.kind {
        ErrorKind::Write(WriteFailure::WriteError(w)) => w.code == 11000,
        ErrorKind::Command(c) => c.code == 11000,
        ErrorKind::InsertMany(m) => m
            .write_errors
            .as_ref()
            .is_some_and(|errors| errors.iter().any(|w| w.code == 11000)),
        _ => false,
    }
}

/// Whether a transaction that failed with `e` should simply run again: a
/// write conflict with another transaction, or a transient failure the
/// server labelled as such.
fn is_conflict(e: &mongodb::error::Error) -> bool {
    match &*e.kind {
        // The label is also given to a lost server: that is an outage to
        // report, not a race to run again.
        ErrorKind::Io(_)
        | ErrorKind::ServerSelection { .. }
        | ErrorKind::ConnectionPoolCleared { .. } => return false,
        _ if e.contains_label(TRANSIENT_TRANSACTION_ERROR) => return true,
        _ => {}
    }
    match &*e.kind {
        ErrorKind::Command(c) => c.code == 112 || c.code == 251,
        ErrorKind::Write(WriteFailure::WriteError(w)) => w.code == 112,
        _ => false,
    }
}

/// A transaction that kept conflicting until it gave up: another writer
/// holds what it needs — one racing it, or one of a node cut off inside
/// its transaction, which the server aborts after its
/// `transactionLifetimeLimitSeconds` (`docs/cluster.md#a-node-cut-off-from-the-store`).
/// Nothing was written; the same call may succeed later.
fn outraced(e: &mongodb::error::Error) -> Error {
    Error::BackendUnavailable(format!(
        "mongodb: still conflicting after {MAX_ATTEMPTS} attempts; nothing was written: {e}"
    ))
}

pub(crate) fn corrupt(what: &str, detail: impl std::fmt::Display) -> Error {
    Error::Failed(format!("corrupt {what} in mongodb: {detail}"))
}

/// Why the body of a transaction stopped.
#[derive(Debug)]
pub(crate) enum Fail {
    /// The driver failed; a conflict runs the transaction again.
    Mongo(mongodb::error::Error),
    /// A Rheo error: the call fails with it.
    Rheo(Error),
    /// What the body read is out of date (another writer won a race the
    /// body detected itself): run again.
    Retry,
}

impl From<mongodb::error::Error> for Fail {
    fn from(e: mongodb::error::Error) -> Self {
        Fail::Mongo(e)
    }
}

impl From<Error> for Fail {
    fn from(e: Error) -> Self {
        Fail::Rheo(e)
    }
}

/// What a transaction waits its turn on in this process (`transaction!`).
/// Transactions under different turns may conflict (a trim and a settle
/// both write a delivery): the loser runs again, as with another
/// process's transaction.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum Turn {
    /// Appends, trims, and a stream's create and delete: its document and
    /// its events.
    Stream(StreamName),
    /// A gated group's claims, settles, replays and redrives; a group's
    /// create, delete and reset: its document, deliveries and gates.
    Group(StreamName, GroupName),
    /// A delete's rounds of removal, by tombstone.
    Purge(String),
}

impl Turn {
    pub(crate) fn of_group(s: &StreamName, g: &GroupName) -> Self {
        Turn::Group(s.clone(), g.clone())
    }
}

/// Runs `$body` (an expression of type `Result<T, Fail>` that uses the
/// session `$s`) in a transaction, after its `$turn` among this process's
/// transactions, again after a conflict, and evaluates to the `Result<T>`
/// of the call.
macro_rules! transaction {
    ($self:ident, $turn:expr, $s:ident => $body:expr) => {{
        let _turn = $self.turns.take(&$turn).await;
        let mut attempt = 0u32;
        loop {
            attempt += 1;
            let mut $s = $self.begin().await?;
            let outcome = async { $body }.await;
            if let Some(value) = $self.finish(&mut $s, outcome, attempt).await? {
                break Ok::<_, ::rheo_core::backend::Error>(value);
            }
        }
    }};
}
pub(crate) use transaction;

/// A random pause before a transaction runs again, growing with attempts
/// (at most 64 ms), so that two nodes that conflicted do not meet again.
async fn backoff(attempt: u32) {
    let cap = 1u64 << attempt.min(6);
    let ms = rand::random_range(0..=cap);
    tokio::time::sleep(Duration::from_millis(ms)).await;
}

impl MongoBackend {
    /// Connects to the MongoDB a URL names (its path names the database,
    /// `rheo` when empty), with the driver's timeouts derived from store
    /// timeout `t`, and, with `migrate`, brings the collections and
    /// indexes up to date.
    pub async fn connect(
        url: &str,
        clock: SharedClock,
        migrate: bool,
        t: Duration,
    ) -> Result<Self> {
        let mut options = ClientOptions::parse(url).await.map_err(|e| {
            Error::invalid(
                "backend",
                format!("{:?}: {e}", rheo_core::backend::redact_url(url)),
            )
        })?;
        // Fail fast when the server is gone (the caller backs off and
        // retries); the URL's own settings win. The driver has no socket
        // timeout: a call to a server that went silent ends at the store
        // timeout (`backend::bounded`), and the driver closes the
        // connection it abandoned.
        options.server_selection_timeout.get_or_insert(t * 3 / 10);
        options.connect_timeout.get_or_insert(t / 2);
        options.app_name.get_or_insert_with(|| "rheo".to_owned());
        let database = options
            .default_database
            .clone()
            .unwrap_or_else(|| DEFAULT_DATABASE.to_owned());
        let client = Client::with_options(options).map_err(|e| {
            Error::invalid(
                "backend",
                format!("{:?}: {e}", rheo_core::backend::redact_url(url)),
            )
        })?;
        let db = client.database(&database);
        let cluster = Arc::new(cluster::MongoCluster::new(db.clone()));
        let notifier = Arc::new(Notifier::default());
        let listener = Listener::start(db.collection(STREAMS), Arc::downgrade(&notifier));
        let backend = Self {
            client,
            db,
            // The server gives up a commit it cannot finish in half the
            // store timeout (`maxTimeMS` of `commitTransaction`).
            commit_time: t / 2,
            clock,
            notifier,
            _listener: Arc::new(listener),
            cluster,
            turns: Arc::default(),
            rotation: Arc::default(),
            catalog: Arc::new(Catalog::shared()),
            #[cfg(test)]
            janitor: None,
        };
        backend.ping().await?;
        if migrate {
            backend.migrate().await?;
        }
        Ok(backend)
    }

    /// Reads the catalog generation at most every `every` (zero: before
    /// every use of what the node keeps) instead of every
    /// [`catalog::CHECK_EVERY`](rheo_core::backend::catalog::CHECK_EVERY);
    /// forgets what was kept.
    pub fn check_catalog_every(mut self, every: Duration) -> Self {
        self.catalog = Arc::new(Catalog::shared_every(every));
        self
    }

    fn coll(&self, name: &str) -> Collection<Document> {
        self.db.collection(name)
    }

    /// Inserts `docs` into `name` inside `session`'s transaction; a
    /// duplicate key (another writer stored one of them first) runs the
    /// transaction again, which reads what that writer stored.
    async fn insert_all(
        &self,
        session: &mut ClientSession,
        name: &str,
        docs: Vec<Document>,
    ) -> std::result::Result<(), Fail> {
        match self.coll(name).insert_many(docs).session(session).await {
            Ok(_) => Ok(()),
            Err(e) if is_duplicate_key(&e) => Err(Fail::Retry),
            Err(e) => Err(e.into()),
        }
    }

    /// Runs the update statements `updates` (`{q, u, upsert?}`) on `name`
    /// as one ordered `update` command inside `session`'s transaction: one
    /// round trip for writes that each need their own filter. How many
    /// documents they matched or created; a duplicate key (another writer
    /// created one first) runs the transaction again.
    pub(crate) async fn update_each(
        &self,
        session: &mut ClientSession,
        name: &str,
        updates: Vec<Document>,
    ) -> std::result::Result<u64, Fail> {
        if updates.is_empty() {
            return Ok(0);
        }
        let command = doc! {"update": name, "updates": updates, "ordered": true};
        let reply = self.db.run_command(command).session(session).await?;
        if let Ok(errors) = reply.get_array("writeErrors") {
            let code = |e: &Bson| e.as_document().and_then(|d| d.get("code")).cloned();
            if errors.iter().any(|e| code(e) == Some(Bson::Int32(11000))) {
                return Err(Fail::Retry);
            }
            return Err(Fail::Rheo(corrupt("update", format!("{errors:?}"))));
        }
        let n = reply.get("n").cloned().unwrap_or(Bson::Int32(0));
        match n {
            Bson::Int32(n) => Ok(n as u64),
            Bson::Int64(n) => Ok(n as u64),
            other => Err(Fail::Rheo(corrupt("update reply", other))),
        }
    }

    pub(crate) fn now(&self) -> Timestamp {
        self.clock.now()
    }

    pub(crate) async fn ping(&self) -> Result<()> {
        self.db
            .run_command(doc! {"ping": 1})
            .await
            .map_err(|e| map_error(e, Phase::Read))?;
        Ok(())
    }

    /// A session with a transaction started.
    async fn begin(&self) -> Result<ClientSession> {
        let mut session = self
            .client
            .start_session()
            .await
            .map_err(|e| map_error(e, Phase::Read))?;
        let options = mongodb::options::TransactionOptions::builder()
            .max_commit_time(self.commit_time)
            .build();
        session
            .start_transaction()
            .with_options(options)
            .await
            .map_err(|e| map_error(e, Phase::Read))?;
        Ok(session)
    }

    /// Ends a transaction's attempt: commits what succeeded; `None` when it
    /// should run again (a conflict), else the call's result.
    async fn finish<T>(
        &self,
        session: &mut ClientSession,
        outcome: std::result::Result<T, Fail>,
        attempt: u32,
    ) -> Result<Option<T>> {
        let retry = |attempt| attempt < MAX_ATTEMPTS;
        match outcome {
            Ok(value) => {
                let mut tries = 0;
                loop {
                    match session.commit_transaction().await {
                        Ok(()) => return Ok(Some(value)),
                        // The commit itself may be retried as is.
                        Err(e) if e.contains_label(UNKNOWN_TRANSACTION_COMMIT_RESULT) => {
                            tries += 1;
                            if tries >= 3 {
                                return Err(map_error(e, Phase::Write));
                            }
                        }
                        Err(e) if is_conflict(&e) && retry(attempt) => {
                            backoff(attempt).await;
                            return Ok(None);
                        }
                        Err(e) if is_conflict(&e) => return Err(outraced(&e)),
                        Err(e) => return Err(map_error(e, Phase::Write)),
                    }
                }
            }
            Err(fail) => {
                // Nothing was committed; a failed abort changes nothing.
                let _ = session.abort_transaction().await;
                match fail {
                    Fail::Rheo(e) => Err(e),
                    Fail::Retry if retry(attempt) => {
                        backoff(attempt).await;
                        Ok(None)
                    }
                    Fail::Mongo(e) if is_conflict(&e) && retry(attempt) => {
                        backoff(attempt).await;
                        Ok(None)
                    }
                    Fail::Retry => Err(Error::BackendUnavailable(format!(
                        "lost {MAX_ATTEMPTS} races with other writers in a row; nothing was written, retry the call"
                    ))),
                    Fail::Mongo(e) if is_conflict(&e) => Err(outraced(&e)),
                    Fail::Mongo(e) => Err(map_error(e, Phase::Read)),
                }
            }
        }
    }

    /// Every document `filter` selects in `coll`, sorted by `sort`, at most
    /// `limit` (0: all).
    pub(crate) async fn find_all(
        &self,
        coll: &str,
        filter: Document,
        sort: Option<Document>,
        limit: i64,
    ) -> Result<Vec<Document>> {
        let coll = self.coll(coll);
        let mut find = coll.find(filter);
        if let Some(sort) = sort {
            find = find.sort(sort);
        }
        if limit > 0 {
            find = find.limit(limit);
        }
        let cursor = find.await.map_err(|e| map_error(e, Phase::Read))?;
        cursor
            .try_collect()
            .await
            .map_err(|e| map_error(e, Phase::Read))
    }

    /// [`find_all`](Self::find_all) inside a transaction.
    pub(crate) async fn find_in(
        &self,
        session: &mut ClientSession,
        coll: &str,
        filter: Document,
        sort: Option<Document>,
        limit: i64,
    ) -> std::result::Result<Vec<Document>, Fail> {
        let coll = self.coll(coll);
        let mut find = coll.find(filter);
        if let Some(sort) = sort {
            find = find.sort(sort);
        }
        if limit > 0 {
            find = find.limit(limit);
        }
        let mut cursor = find.session(&mut *session).await?;
        let mut out = Vec::new();
        while let Some(doc) = cursor.next(&mut *session).await {
            out.push(doc?);
        }
        Ok(out)
    }

    /// The documents aggregation `pipeline` on `coll` gives, inside a
    /// transaction.
    pub(crate) async fn aggregate_in(
        &self,
        session: &mut ClientSession,
        coll: &str,
        pipeline: Vec<Document>,
    ) -> std::result::Result<Vec<Document>, Fail> {
        let mut cursor = self
            .coll(coll)
            .aggregate(pipeline)
            .session(&mut *session)
            .await?;
        let mut out = Vec::new();
        while let Some(doc) = cursor.next(&mut *session).await {
            out.push(doc?);
        }
        Ok(out)
    }

    /// Tells every node (this one at once, the others through their
    /// listeners) that something may have become claimable on `stream`.
    /// Waiters also poll, so a lost wake-up only delays them.
    pub(crate) async fn wake(&self, stream: &StreamName) {
        self.notifier.notify(stream);
        let bump = self
            .coll(STREAMS)
            .update_one(
                doc! {"_id": stream.as_str()},
                doc! {"$inc": {"wake": 1_i64}},
            )
            .await;
        if let Err(e) = bump {
            tracing::debug!(error = %e, "mongodb: wake-up not written");
        }
    }

    /// The rotating start of a group's next fetch.
    fn rotate(&self, s: &StreamName, g: &GroupName) -> usize {
        let mut rotation = self.rotation.lock();
        let next = rotation.entry((s.clone(), g.clone())).or_insert(0);
        let current = *next;
        *next = next.wrapping_add(1);
        current
    }
}

/// A document's integer field (stored as Int32 or Int64).
pub(crate) fn int(d: &Document, field: &str) -> Result<i64> {
    match d.get(field) {
        Some(Bson::Int32(v)) => Ok(i64::from(*v)),
        Some(Bson::Int64(v)) => Ok(*v),
        Some(Bson::Double(v)) if v.fract() == 0.0 => Ok(*v as i64),
        other => Err(corrupt(field, format!("{other:?}"))),
    }
}

/// An optional integer field (absent or null: `None`).
pub(crate) fn opt_int(d: &Document, field: &str) -> Result<Option<i64>> {
    match d.get(field) {
        None | Some(Bson::Null) => Ok(None),
        Some(_) => int(d, field).map(Some),
    }
}

/// A non-negative integer field.
pub(crate) fn uint(d: &Document, field: &str) -> Result<u64> {
    let v = int(d, field)?;
    u64::try_from(v).map_err(|_| corrupt(field, v))
}

/// A string field.
pub(crate) fn text<'a>(d: &'a Document, field: &str) -> Result<&'a str> {
    d.get_str(field).map_err(|e| corrupt(field, e))
}

/// An optional string field.
pub(crate) fn opt_text(d: &Document, field: &str) -> Option<String> {
    d.get_str(field).ok().map(str::to_owned)
}

/// A stored sequence or count (BSON has no unsigned integers; every
/// sequence is at most `MAX_SEQUENCE` < 2^63).
pub(crate) fn big(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// The task that turns changes of stream documents (an append moves a high
/// watermark; a nack, replay, redrive or reset bumps `wake`) into local
/// notifications: a change stream where the server has them, else a poll
/// of the stream documents every 250 ms.
#[derive(Debug)]
struct Listener {
    task: tokio::task::JoinHandle<()>,
}

impl Listener {
    fn start(streams: Collection<Document>, notifier: std::sync::Weak<Notifier>) -> Self {
        let task = tokio::spawn(async move {
            let mut delay = Duration::from_millis(100);
            loop {
                if notifier.strong_count() == 0 {
                    return;
                }
                match streams.watch().await {
                    Ok(mut changes) => {
                        delay = Duration::from_millis(100);
                        if let Some(n) = notifier.upgrade() {
                            n.notify_all();
                        }
                        while let Ok(Some(change)) = changes.try_next().await {
                            let Some(n) = notifier.upgrade() else { return };
                            let name = change
                                .document_key
                                .as_ref()
                                .and_then(|k| k.get_str("_id").ok())
                                .and_then(|name| StreamName::parse(name).ok());
                            match name {
                                Some(stream) => n.notify(&stream),
                                None => n.notify_all(),
                            }
                        }
                    }
                    Err(e) if is_unsupported(&e) => {
                        tracing::info!(error = %e, "mongodb: no change streams; polling for wake-ups");
                        poll(&streams, &notifier).await;
                        return;
                    }
                    Err(_) => {}
                }
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(Duration::from_secs(5));
            }
        });
        Self { task }
    }
}

/// Whether the server refused a change stream for good (a standalone
/// server, or one that has none) rather than being unreachable.
fn is_unsupported(e: &mongodb::error::Error) -> bool {
    matches!(&*e.kind, ErrorKind::Command(c) if [40573, 115, 59].contains(&c.code))
}

/// Wake-ups without change streams: notices a stream document that
/// changed since the last look.
async fn poll(streams: &Collection<Document>, notifier: &std::sync::Weak<Notifier>) {
    let mut seen: HashMap<String, Document> = HashMap::new();
    loop {
        tokio::time::sleep(Duration::from_millis(250)).await;
        let Some(n) = notifier.upgrade() else { return };
        let Ok(cursor) = streams.find(doc! {}).await else {
            continue;
        };
        let Ok(docs) = cursor.try_collect::<Vec<_>>().await else {
            continue;
        };
        for d in docs {
            let Ok(name) = d.get_str("_id").map(str::to_owned) else {
                continue;
            };
            if seen.get(&name) != Some(&d) {
                if let Ok(stream) = StreamName::parse(&name) {
                    n.notify(&stream);
                }
                seen.insert(name, d);
            }
        }
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        self.task.abort();
    }
}
