//! The cluster store on PostgreSQL (`migrations/postgres/0004_cluster.sql`):
//! nodes, modules and handler records in three tables. A handler write is
//! one transaction that also `NOTIFY`s the backend's channel with
//! [`HANDLERS_CHANGED`], so every node's watchers wake at its commit.

use std::time::Duration;

use async_trait::async_trait;
use sqlx::Row as _;
use sqlx::postgres::PgPool;
use sqlx::types::Json;
use tokio::sync::watch;

use super::{pg_ts, read_err};
use crate::sql::{Phase, begin_whole, map_error};
use rheo_core::backend::Result;
use rheo_core::cluster::{Changes, ClusterStore, HandlerRecord, NodeHandler, NodeRecord};
use rheo_core::model::Timestamp;

/// The NOTIFY payload of a handler write: never a stream name (those have
/// no `:`).
pub(super) const HANDLERS_CHANGED: &str = ":handlers";

/// The cluster tables of one database (and schema).
#[derive(Debug)]
pub(crate) struct PgCluster {
    pool: PgPool,
    channel: String,
    changes: Changes,
}

impl PgCluster {
    pub(super) fn new(pool: PgPool, channel: String) -> Self {
        Self {
            pool,
            channel,
            changes: Changes::default(),
        }
    }

    /// A handler write here or elsewhere was announced (or may have been
    /// missed).
    pub(super) fn changed(&self) {
        self.changes.bump();
    }

    /// Runs `statement` (with `name`, `expected`, and maybe a document) and
    /// the NOTIFY in one transaction; whether it changed a row.
    async fn write_handler(
        &self,
        statement: &'static str,
        name: &str,
        expected: u64,
        doc: Option<&serde_json::Value>,
    ) -> Result<bool> {
        let expected = i64::try_from(expected).unwrap_or(i64::MAX);
        let conn = self
            .pool
            .acquire()
            .await
            .map_err(|e| map_error(e, Phase::Connect))?;
        let mut tx = begin_whole(conn, "BEGIN").await.map_err(read_err)?;
        let mut query = sqlx::query(statement).bind(name).bind(expected);
        if let Some(doc) = doc {
            query = query.bind(Json(doc));
        }
        let done = query.execute(&mut *tx).await.map_err(read_err)?;
        if done.rows_affected() == 0 {
            tx.rollback().await.map_err(read_err)?;
            return Ok(false);
        }
        sqlx::query(include_str!("notify.sql"))
            .bind(&self.channel)
            .bind(HANDLERS_CHANGED)
            .execute(&mut *tx)
            .await
            .map_err(read_err)?;
        tx.commit().await.map_err(|e| map_error(e, Phase::Write))?;
        // This node's own watchers need no round trip through the server.
        self.changes.bump();
        Ok(true)
    }
}

fn write_err(e: sqlx::Error) -> rheo_core::backend::Error {
    map_error(e, Phase::Write)
}

fn node_of(row: &sqlx::postgres::PgRow) -> Result<NodeRecord> {
    let time = |i: usize| -> Result<Timestamp> {
        let t: chrono::DateTime<chrono::Utc> = row.try_get(i).map_err(read_err)?;
        Ok(Timestamp::from_millis(t.timestamp_millis()))
    };
    let handlers: Json<Vec<NodeHandler>> = row.try_get(5).map_err(read_err)?;
    Ok(NodeRecord {
        id: row.try_get(0).map_err(read_err)?,
        address: row.try_get(1).map_err(read_err)?,
        version: row.try_get(2).map_err(read_err)?,
        started_at: time(3)?,
        heartbeat_at: time(4)?,
        handlers: handlers.0,
    })
}

fn handler_of(row: &sqlx::postgres::PgRow) -> Result<HandlerRecord> {
    let revision: i64 = row.try_get(1).map_err(read_err)?;
    let doc: Json<serde_json::Value> = row.try_get(2).map_err(read_err)?;
    Ok(HandlerRecord {
        name: row.try_get(0).map_err(read_err)?,
        revision: u64::try_from(revision).unwrap_or_default(),
        doc: doc.0,
    })
}

#[async_trait]
impl ClusterStore for PgCluster {
    async fn heartbeat(&self, node: &NodeRecord, forget: Timestamp) -> Result<()> {
        sqlx::query(
            "INSERT INTO rheo_nodes (id, address, version, started_at, heartbeat_at, handlers) \
             VALUES ($1, $2, $3, $4, $5, $6) \
             ON CONFLICT (id) DO UPDATE SET address = EXCLUDED.address, \
               version = EXCLUDED.version, heartbeat_at = EXCLUDED.heartbeat_at, \
               handlers = EXCLUDED.handlers",
        )
        .bind(&node.id)
        .bind(&node.address)
        .bind(&node.version)
        .bind(pg_ts(node.started_at))
        .bind(pg_ts(node.heartbeat_at))
        .bind(Json(&node.handlers))
        .execute(&self.pool)
        .await
        .map_err(write_err)?;
        sqlx::query("DELETE FROM rheo_nodes WHERE heartbeat_at < $1")
            .bind(pg_ts(forget))
            .execute(&self.pool)
            .await
            .map_err(write_err)?;
        Ok(())
    }

    async fn leave(&self, id: &str) -> Result<()> {
        sqlx::query("DELETE FROM rheo_nodes WHERE id = $1")
            .bind(id)
            .execute(&self.pool)
            .await
            .map_err(write_err)?;
        Ok(())
    }

    async fn nodes(&self, since: Timestamp) -> Result<Vec<NodeRecord>> {
        let rows = sqlx::query(
            "SELECT id, address, version, started_at, heartbeat_at, handlers \
             FROM rheo_nodes WHERE heartbeat_at >= $1 ORDER BY id COLLATE \"C\"",
        )
        .bind(pg_ts(since))
        .fetch_all(&self.pool)
        .await
        .map_err(read_err)?;
        rows.iter().map(node_of).collect()
    }

    async fn put_module(&self, digest: &str, bytes: &[u8], at: Timestamp) -> Result<()> {
        sqlx::query(
            "INSERT INTO rheo_modules (digest, bytes, stored_at) VALUES ($1, $2, $3) \
             ON CONFLICT (digest) DO NOTHING",
        )
        .bind(digest)
        .bind(bytes)
        .bind(pg_ts(at))
        .execute(&self.pool)
        .await
        .map_err(write_err)?;
        Ok(())
    }

    async fn module(&self, digest: &str) -> Result<Option<Vec<u8>>> {
        let row = sqlx::query("SELECT bytes FROM rheo_modules WHERE digest = $1")
            .bind(digest)
            .fetch_optional(&self.pool)
            .await
            .map_err(read_err)?;
        row.map(|r| r.try_get(0).map_err(read_err)).transpose()
    }

    async fn handlers(&self) -> Result<Vec<HandlerRecord>> {
        let rows = sqlx::query(
            "SELECT name, revision, doc FROM rheo_handlers ORDER BY name COLLATE \"C\"",
        )
        .fetch_all(&self.pool)
        .await
        .map_err(read_err)?;
        rows.iter().map(handler_of).collect()
    }

    async fn handler(&self, name: &str) -> Result<Option<HandlerRecord>> {
        let row = sqlx::query("SELECT name, revision, doc FROM rheo_handlers WHERE name = $1")
            .bind(name)
            .fetch_optional(&self.pool)
            .await
            .map_err(read_err)?;
        row.as_ref().map(handler_of).transpose()
    }

    async fn put_handler(
        &self,
        name: &str,
        expected: u64,
        doc: &serde_json::Value,
    ) -> Result<bool> {
        let statement = if expected == 0 {
            "INSERT INTO rheo_handlers (name, revision, doc) \
             SELECT $1, $2 + 1, $3 ON CONFLICT (name) DO NOTHING"
        } else {
            "UPDATE rheo_handlers SET revision = $2 + 1, doc = $3 \
             WHERE name = $1 AND revision = $2"
        };
        self.write_handler(statement, name, expected, Some(doc))
            .await
    }

    async fn delete_handler(&self, name: &str, expected: u64) -> Result<bool> {
        self.write_handler(
            "DELETE FROM rheo_handlers WHERE name = $1 AND revision = $2",
            name,
            expected,
            None,
        )
        .await
    }

    async fn forget_modules(&self, keep: &[String], before: Timestamp) -> Result<u64> {
        let done =
            sqlx::query("DELETE FROM rheo_modules WHERE stored_at < $1 AND NOT (digest = ANY($2))")
                .bind(pg_ts(before))
                .bind(keep)
                .execute(&self.pool)
                .await
                .map_err(write_err)?;
        Ok(done.rows_affected())
    }

    fn changes(&self) -> watch::Receiver<u64> {
        self.changes.subscribe()
    }

    fn poll_interval(&self) -> Duration {
        // LISTEN/NOTIFY carries every write; a lost connection wakes the
        // watchers too. The poll only bounds what a bug could lose.
        Duration::from_secs(5)
    }
}
