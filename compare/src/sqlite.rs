//! The raw SQLite queue: one table in a fresh WAL file with Rheo's
//! durability settings (`synchronous = FULL`: every commit fsyncs), claims
//! that push a visibility timeout forward on the oldest visible rows, and
//! acks by one batched `DELETE`. Each statement is its own transaction.
//! Concurrent clients share the one connection, as SQLite has one writer.

use std::str::FromStr;
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::Context;
use rheo::bench::WorkloadResult;
use sqlx::Row;
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous,
};

use crate::clients;

/// Loads `payloads` (not timed), then claims and deletes them `batch` at a
/// time until the table is empty (timed).
pub(crate) async fn claim_delete(
    payloads: &[String],
    batch: usize,
    clients: usize,
) -> anyhow::Result<WorkloadResult> {
    let dir = tempfile::tempdir().context("cannot create a temporary directory")?;
    let url = format!("sqlite://{}", dir.path().join("raw.db").display());
    let options = SqliteConnectOptions::from_str(&url)?
        .create_if_missing(true)
        .journal_mode(SqliteJournalMode::Wal)
        .synchronous(SqliteSynchronous::Full);
    let pool = SqlitePoolOptions::new()
        .max_connections(1)
        .connect_with(options)
        .await
        .with_context(|| format!("cannot open {url}"))?;
    sqlx::raw_sql(
        "CREATE TABLE queue (
           id      INTEGER PRIMARY KEY,
           read_ct INTEGER NOT NULL DEFAULT 0,
           vt      INTEGER NOT NULL DEFAULT 0,
           message TEXT    NOT NULL);
         CREATE INDEX queue_vt ON queue (vt, id);",
    )
    .execute(&pool)
    .await?;
    for chunk in payloads.chunks(batch) {
        let json = serde_json::to_string(chunk)?;
        sqlx::query("INSERT INTO queue (message) SELECT value FROM json_each(?1)")
            .bind(json)
            .execute(&pool)
            .await?;
    }

    let limit = i64::try_from(batch)?;
    let result = clients::timed("claim + delete", payloads.len(), clients, |tally| {
        let pool = pool.clone();
        async move { clients::rounds(tally, || round(&pool, limit)).await }
    })
    .await;
    pool.close().await;
    result
}

/// Claims up to `limit` rows and deletes them; how many.
async fn round(pool: &SqlitePool, limit: i64) -> anyhow::Result<usize> {
    let now = i64::try_from(SystemTime::now().duration_since(UNIX_EPOCH)?.as_millis())?;
    let rows = sqlx::query(
        "UPDATE queue SET vt = ?1 + 30000, read_ct = read_ct + 1
         WHERE id IN (SELECT id FROM queue WHERE vt <= ?1 ORDER BY id LIMIT ?2)
         RETURNING id, read_ct, message",
    )
    .bind(now)
    .bind(limit)
    .fetch_all(pool)
    .await?;
    let mut ids = Vec::with_capacity(rows.len());
    for row in &rows {
        ids.push(row.try_get::<i64, _>(0)?);
        let _attempt: i64 = row.try_get(1)?;
        let message: &str = row.try_get(2)?;
        let _message: serde_json::Value = serde_json::from_str(message)?;
    }
    if !ids.is_empty() {
        sqlx::query("DELETE FROM queue WHERE id IN (SELECT value FROM json_each(?1))")
            .bind(serde_json::to_string(&ids)?)
            .execute(pool)
            .await?;
    }
    Ok(ids.len())
}
