//! One server per SQLite store (`docs/backends.md#one-server-per-sqlite-store`):
//! `rheo serve` holds an exclusive lock on `<database>.lock` for as long as
//! it runs, with its process id in the file, so a second server on the same
//! file refuses to start and names the first. The operating system drops
//! the lock when the process ends, however it ends: a server that was
//! killed leaves no lock behind, only the file.

use std::fs::{File, OpenOptions, TryLockError};
use std::io::{Read as _, Seek as _, SeekFrom, Write as _};
use std::path::{Path, PathBuf};
use std::str::FromStr;

use sqlx::sqlite::SqliteConnectOptions;

/// A server's hold on a SQLite store; released when dropped.
#[derive(Debug)]
pub struct StoreLock {
    _file: File,
    path: PathBuf,
}

impl StoreLock {
    /// The lock file (`<database>.lock`).
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// Why a store could not be locked.
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    /// Another process holds it.
    #[error(
        "the SQLite store {database} is in use by another rheo serve ({holder}; lock file {lock}): \
         one server owns a SQLite store — stop that one first, or use PostgreSQL, Redis or MongoDB to share a store"
    )]
    Held {
        /// The database file.
        database: String,
        /// Who holds it, as its lock file says (`pid 1234`).
        holder: String,
        /// The lock file.
        lock: String,
    },
    /// The lock file could not be opened, read or written.
    #[error("cannot lock the SQLite store through {lock}: {source}")]
    Io {
        /// The lock file.
        lock: String,
        /// What failed.
        #[source]
        source: std::io::Error,
    },
}

/// Locks the SQLite store `url` names for this process, or returns `None`
/// for an in-memory database (nothing to share) or a URL that is not
/// SQLite's (opening it reports that).
pub fn lock_store(url: &str) -> Result<Option<StoreLock>, LockError> {
    if !super::is_file_store(url) {
        return Ok(None);
    }
    let Ok(options) = SqliteConnectOptions::from_str(url) else {
        return Ok(None);
    };
    let database = options.get_filename().to_path_buf();
    let path = PathBuf::from(format!("{}.lock", database.display()));
    let io = |source| LockError::Io {
        lock: path.display().to_string(),
        source,
    };
    if let Some(folder) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        // As opening the store creates the database, so the lock's folder.
        std::fs::create_dir_all(folder).map_err(io)?;
    }
    let mut file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .map_err(io)?;
    match file.try_lock() {
        Ok(()) => {
            file.set_len(0).map_err(io)?;
            file.seek(SeekFrom::Start(0)).map_err(io)?;
            writeln!(file, "{}", std::process::id()).map_err(io)?;
            file.flush().map_err(io)?;
            Ok(Some(StoreLock { _file: file, path }))
        }
        Err(TryLockError::WouldBlock) => {
            let mut text = String::new();
            let _ = file.read_to_string(&mut text);
            let holder = match text.trim().parse::<u32>() {
                Ok(pid) => format!("pid {pid}"),
                Err(_) => "a process that has not written its pid yet".to_owned(),
            };
            Err(LockError::Held {
                database: database.display().to_string(),
                holder,
                lock: path.display().to_string(),
            })
        }
        Err(TryLockError::Error(source)) => Err(io(source)),
    }
}

#[cfg(test)]
mod tests {
    use super::{LockError, lock_store};

    #[test]
    fn a_second_lock_on_one_store_is_refused_and_names_the_holder() {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}", dir.path().join("rheo.db").display());
        let first = lock_store(&url).unwrap().expect("a file store is locked");
        assert_eq!(
            std::fs::read_to_string(first.path()).unwrap().trim(),
            std::process::id().to_string()
        );
        // The lock is per open file: a second open, even in this process, is refused.
        match lock_store(&url) {
            Err(LockError::Held { holder, .. }) => {
                assert_eq!(holder, format!("pid {}", std::process::id()));
            }
            other => panic!("expected a refusal, got {other:?}"),
        }
        drop(first);
        let again = lock_store(&url).unwrap().expect("free once dropped");
        drop(again);
    }

    #[test]
    fn an_in_memory_store_or_another_kind_needs_no_lock() {
        assert!(lock_store("sqlite::memory:").unwrap().is_none());
        assert!(lock_store("postgres://db/x").unwrap().is_none());
        assert!(
            lock_store("sqlite://x.db?mode=memory&cache=shared")
                .unwrap()
                .is_none()
        );
    }
}
