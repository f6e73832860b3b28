//! The raw PostgreSQL queue: one plain table, claims by `SELECT … FOR
//! UPDATE SKIP LOCKED LIMIT n` that push a visibility timeout forward, and
//! acks by one batched `DELETE` — the pattern of pgmq and River. Every
//! statement commits on its own with the server's durable defaults
//! (`synchronous_commit = on`), as Rheo's transactions do.

use anyhow::Context;
use rheo::bench::WorkloadResult;
use sqlx::postgres::{PgPool, PgPoolOptions};
use sqlx::{AssertSqlSafe, Row};

use crate::clients;

/// A schema of its own for one side of one round, dropped afterwards.
pub(crate) struct Schema {
    pool: PgPool,
    name: String,
}

impl Schema {
    /// Connects (one connection) and creates `rheo_compare_<what>_<random>`.
    pub(crate) async fn create(url: &str, what: &str) -> anyhow::Result<Self> {
        let pool = PgPoolOptions::new()
            .max_connections(1)
            .connect(url)
            .await
            .with_context(|| format!("cannot connect to PostgreSQL at {url}"))?;
        let name = format!("rheo_compare_{what}_{:08x}", rand::random::<u32>());
        sqlx::raw_sql(AssertSqlSafe(format!("CREATE SCHEMA {name}")))
            .execute(&pool)
            .await
            .with_context(|| format!("cannot create schema {name}"))?;
        Ok(Self { pool, name })
    }

    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    /// Drops the schema and everything in it.
    pub(crate) async fn drop(self) -> anyhow::Result<()> {
        let sql = format!("DROP SCHEMA {} CASCADE", self.name);
        sqlx::raw_sql(AssertSqlSafe(sql))
            .execute(&self.pool)
            .await
            .with_context(|| format!("cannot drop schema {}", self.name))?;
        Ok(())
    }
}

/// `url` with `schema=<name>` added to its query string.
pub(crate) fn with_schema(url: &str, name: &str) -> anyhow::Result<String> {
    anyhow::ensure!(
        !url.contains("schema="),
        "--postgres must not name a schema: each side gets a fresh one"
    );
    let sep = if url.contains('?') { '&' } else { '?' };
    Ok(format!("{url}{sep}schema={name}"))
}

/// Loads `payloads` into a fresh queue table (not timed), then claims and
/// deletes them `batch` at a time until the queue is empty (timed).
pub(crate) async fn skip_locked(
    url: &str,
    payloads: &[String],
    batch: usize,
    clients: usize,
) -> anyhow::Result<WorkloadResult> {
    let schema = Schema::create(url, "raw").await?;
    let result = consume(&schema, url, payloads, batch, clients).await;
    schema.drop().await?;
    result
}

async fn consume(
    schema: &Schema,
    url: &str,
    payloads: &[String],
    batch: usize,
    clients: usize,
) -> anyhow::Result<WorkloadResult> {
    let (pool, s) = (&schema.pool, schema.name());
    let create = format!(
        "CREATE TABLE {s}.queue (
           msg_id      bigserial PRIMARY KEY,
           read_ct     integer     NOT NULL DEFAULT 0,
           enqueued_at timestamptz NOT NULL DEFAULT now(),
           vt          timestamptz NOT NULL DEFAULT now(),
           message     jsonb       NOT NULL);
         CREATE INDEX ON {s}.queue (vt);"
    );
    sqlx::raw_sql(AssertSqlSafe(create)).execute(pool).await?;
    let insert =
        format!("INSERT INTO {s}.queue (message) SELECT m::jsonb FROM unnest($1::text[]) AS m");
    for chunk in payloads.chunks(batch) {
        sqlx::query(AssertSqlSafe(insert.as_str()))
            .bind(chunk)
            .execute(pool)
            .await?;
    }
    sqlx::raw_sql(AssertSqlSafe(format!("ANALYZE {s}.queue")))
        .execute(pool)
        .await?;

    let claim = format!(
        "WITH ready AS (
           SELECT msg_id FROM {s}.queue
           WHERE vt <= clock_timestamp()
           ORDER BY msg_id LIMIT $1
           FOR UPDATE SKIP LOCKED)
         UPDATE {s}.queue q
         SET vt = clock_timestamp() + interval '30 seconds', read_ct = q.read_ct + 1
         FROM ready WHERE q.msg_id = ready.msg_id
         RETURNING q.msg_id, q.read_ct, q.message"
    );
    let ack = format!("DELETE FROM {s}.queue WHERE msg_id = ANY($1)");
    let limit = i64::try_from(batch)?;
    // A connection per client, as Rheo's pool gives each call its own.
    let clients_pool = PgPoolOptions::new()
        .max_connections(u32::try_from(clients)?)
        .connect(url)
        .await
        .with_context(|| format!("cannot connect to PostgreSQL at {url}"))?;
    let result = clients::timed(
        "skip locked claim + delete",
        payloads.len(),
        clients,
        |tally| {
            let (pool, claim, ack) = (clients_pool.clone(), claim.clone(), ack.clone());
            async move { clients::rounds(tally, || round(&pool, &claim, &ack, limit)).await }
        },
    )
    .await;
    clients_pool.close().await;
    result
}

/// Claims up to `limit` messages and deletes them; how many.
async fn round(pool: &PgPool, claim: &str, ack: &str, limit: i64) -> anyhow::Result<usize> {
    let rows = sqlx::query(AssertSqlSafe(claim))
        .bind(limit)
        .fetch_all(pool)
        .await?;
    let mut ids = Vec::with_capacity(rows.len());
    for row in &rows {
        ids.push(row.try_get::<i64, _>(0)?);
        let _attempt: i32 = row.try_get(1)?;
        let _message: serde_json::Value = row.try_get(2)?;
    }
    if !ids.is_empty() {
        sqlx::query(AssertSqlSafe(ack))
            .bind(&ids)
            .execute(pool)
            .await?;
    }
    Ok(ids.len())
}
