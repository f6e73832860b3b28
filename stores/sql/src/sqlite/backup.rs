//! Backing up a live SQLite store, and restoring it
//! (`docs/operations.md#backup-and-restore`).
//!
//! A backup is one SQLite file: a consistent copy of the store, made by
//! `VACUUM INTO` inside one read transaction (so a running server goes on
//! appending and settling meanwhile, and the copy is the store as of one
//! instant), plus two tables of its own: `rheo_backup` (what made it, and
//! when) and `rheo_backup_files` (the handler state the caller hands over,
//! by relative path). Restoring copies the file into place, takes those
//! two tables out and gives the files back.

use std::path::Path;
use std::str::FromStr;

use sqlx::sqlite::SqliteConnectOptions;
use sqlx::{Connection as _, Row as _, SqliteConnection};

use rheo_core::backend::{Error, Result};

/// What a backup holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackupSummary {
    /// Streams in the store.
    pub streams: u64,
    /// Events in the store.
    pub events: u64,
    /// Files stored beside it (the handler state).
    pub files: u64,
    /// The backup's size, in bytes.
    pub bytes: u64,
}

fn failed(what: &str, e: impl std::fmt::Display) -> Error {
    Error::Failed(format!("{what}: {e}"))
}

async fn open(path: &Path, read_only: bool, create: bool) -> Result<SqliteConnection> {
    let options = SqliteConnectOptions::new()
        .filename(path)
        .read_only(read_only)
        .create_if_missing(create);
    SqliteConnection::connect_with(&options)
        .await
        .map_err(|e| failed(&format!("cannot open {}", path.display()), e))
}

/// Counts what a store file holds.
async fn summary(conn: &mut SqliteConnection, files: u64, path: &Path) -> Result<BackupSummary> {
    let count = |table: &'static str| format!("SELECT count(*) FROM {table}");
    let mut counts = [0_u64; 2];
    for (slot, table) in counts.iter_mut().zip(["rheo_streams", "rheo_events"]) {
        let n: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(count(table)))
            .fetch_one(&mut *conn)
            .await
            .map_err(|e| failed("counting the backup", e))?;
        *slot = u64::try_from(n).unwrap_or(0);
    }
    let bytes = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
    Ok(BackupSummary {
        streams: counts[0],
        events: counts[1],
        files,
        bytes,
    })
}

/// Writes a consistent copy of the SQLite store at `url` to the new file
/// `to`, with `files` (relative path → bytes) stored beside it.
pub async fn backup(url: &str, to: &Path, files: &[(String, Vec<u8>)]) -> Result<BackupSummary> {
    if to.exists() {
        return Err(Error::invalid(
            "to",
            format!("{} exists: a backup never overwrites a file", to.display()),
        ));
    }
    let source = SqliteConnectOptions::from_str(url)
        .map_err(|e| Error::invalid("backend", format!("not a SQLite URL: {e}")))?;
    let database = source.get_filename().to_path_buf();
    if !database.is_file() {
        return Err(Error::invalid(
            "backend",
            format!("{} does not exist: nothing to back up", database.display()),
        ));
    }
    let mut conn = open(&database, true, false).await?;
    let target = to
        .to_str()
        .ok_or_else(|| Error::invalid("to", "the backup's path must be UTF-8"))?;
    sqlx::query("VACUUM INTO ?")
        .bind(target)
        .execute(&mut conn)
        .await
        .map_err(|e| failed(&format!("copying {}", database.display()), e))?;
    conn.close().await.ok();

    let mut copy = open(to, false, false).await?;
    // The copy is a plain file: no WAL beside it to lose.
    sqlx::query("PRAGMA journal_mode = DELETE")
        .execute(&mut copy)
        .await
        .map_err(|e| failed("preparing the backup", e))?;
    let mut tx = copy
        .begin()
        .await
        .map_err(|e| failed("writing the backup", e))?;
    for statement in [
        "CREATE TABLE rheo_backup (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
        "CREATE TABLE rheo_backup_files (path TEXT PRIMARY KEY, body BLOB NOT NULL)",
    ] {
        sqlx::query(statement)
            .execute(&mut *tx)
            .await
            .map_err(|e| failed("writing the backup", e))?;
    }
    let made_at = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
    for (key, value) in [
        ("made_by", format!("rheo {}", env!("CARGO_PKG_VERSION"))),
        ("made_at", made_at),
        ("source", database.display().to_string()),
    ] {
        sqlx::query("INSERT INTO rheo_backup (key, value) VALUES (?, ?)")
            .bind(key)
            .bind(value)
            .execute(&mut *tx)
            .await
            .map_err(|e| failed("writing the backup", e))?;
    }
    for (path, body) in files {
        sqlx::query("INSERT INTO rheo_backup_files (path, body) VALUES (?, ?)")
            .bind(path)
            .bind(body)
            .execute(&mut *tx)
            .await
            .map_err(|e| failed("writing the backup", e))?;
    }
    tx.commit()
        .await
        .map_err(|e| failed("writing the backup", e))?;
    let summary = summary(&mut copy, files.len() as u64, to).await;
    copy.close().await.ok();
    summary
}

/// Restores the backup `from` as the SQLite store at `url`, which must not
/// exist yet; returns the files stored beside it (relative path → bytes).
pub async fn restore(from: &Path, url: &str) -> Result<(BackupSummary, Vec<(String, Vec<u8>)>)> {
    let target = SqliteConnectOptions::from_str(url)
        .map_err(|e| Error::invalid("backend", format!("not a SQLite URL: {e}")))?;
    let database = target.get_filename().to_path_buf();
    if database.exists() {
        return Err(Error::invalid(
            "backend",
            format!(
                "{} exists: restore into a new place (or move that store away first)",
                database.display()
            ),
        ));
    }
    let mut backup = open(from, true, false).await?;
    let made_by: Option<String> =
        sqlx::query_scalar("SELECT value FROM rheo_backup WHERE key = 'made_by'")
            .fetch_optional(&mut backup)
            .await
            .map_err(|_| {
                Error::invalid(
                    "from",
                    format!(
                        "{} is not a rheo backup (rheo backup --to makes one)",
                        from.display()
                    ),
                )
            })?;
    if made_by.is_none() {
        return Err(Error::invalid(
            "from",
            format!("{} is not a rheo backup", from.display()),
        ));
    }
    let files: Vec<(String, Vec<u8>)> =
        sqlx::query("SELECT path, body FROM rheo_backup_files ORDER BY path")
            .fetch_all(&mut backup)
            .await
            .map_err(|e| failed("reading the backup", e))?
            .into_iter()
            .map(|row| (row.get::<String, _>(0), row.get::<Vec<u8>, _>(1)))
            .collect();
    backup.close().await.ok();

    if let Some(folder) = database.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(folder)
            .map_err(|e| failed(&format!("cannot create {}", folder.display()), e))?;
    }
    std::fs::copy(from, &database)
        .map_err(|e| failed(&format!("copying the backup to {}", database.display()), e))?;
    let mut store = open(&database, false, false).await?;
    for statement in [
        "DROP TABLE rheo_backup",
        "DROP TABLE rheo_backup_files",
        "VACUUM",
    ] {
        sqlx::query(statement)
            .execute(&mut store)
            .await
            .map_err(|e| failed("restoring the backup", e))?;
    }
    // As the server runs it (`SqliteBackend::open`).
    sqlx::query("PRAGMA journal_mode = WAL")
        .execute(&mut store)
        .await
        .map_err(|e| failed("restoring the backup", e))?;
    let summary = summary(&mut store, files.len() as u64, &database).await;
    store.close().await.ok();
    Ok((summary?, files))
}
