//! Where a store's schema stands against this build: what `rheo migrate
//! --status` prints, and what stops a server older than its store
//! (`docs/operations.md#upgrades`).

use super::{Error, Result};

/// A store's migrations against the ones this build carries, each named
/// as `rheo migrate` prints it ("0005 ordering").
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MigrationStatus {
    /// Known to this build and applied to the store, in order.
    pub applied: Vec<String>,
    /// Known to this build and not applied yet, in order.
    pub pending: Vec<String>,
    /// Applied to the store but unknown to this build: a newer `rheo`
    /// migrated it.
    pub unknown: Vec<String>,
}

impl MigrationStatus {
    /// The status of a store that recorded `done` (any order), against
    /// the `known` migrations of this build (in order, each with its
    /// name); a recorded one this build lacks is named by `unknown_name`.
    pub fn split<K: PartialEq + Ord>(
        known: impl IntoIterator<Item = (K, String)>,
        mut done: Vec<K>,
        unknown_name: impl Fn(&K) -> String,
    ) -> Self {
        let known: Vec<(K, String)> = known.into_iter().collect();
        let (applied, pending) = known
            .iter()
            .partition::<Vec<_>, _>(|(k, _)| done.contains(k));
        done.sort();
        MigrationStatus {
            applied: applied.into_iter().map(|(_, name)| name.clone()).collect(),
            pending: pending.into_iter().map(|(_, name)| name.clone()).collect(),
            unknown: done
                .iter()
                .filter(|k| !known.iter().any(|(known, _)| known == *k))
                .map(unknown_name)
                .collect(),
        }
    }

    /// [`split`](Self::split) for stores whose records are the names
    /// themselves (Redis, MongoDB).
    pub fn of_names<'a>(known: impl IntoIterator<Item = &'a str>, done: &[String]) -> Self {
        let known = known
            .into_iter()
            .map(|name| (name.to_owned(), name.to_owned()));
        Self::split(known, done.to_vec(), String::clone)
    }

    /// Refuses a store a newer `rheo` migrated: this build does not know
    /// what those migrations changed, so it must not read or write it. The
    /// message names the store's schema and the newest this build knows.
    pub fn check_not_newer(&self) -> Result<()> {
        let Some(store) = self.unknown.last() else {
            return Ok(());
        };
        let ours = self
            .applied
            .iter()
            .chain(&self.pending)
            .next_back()
            .map_or("none", String::as_str);
        Err(Error::Failed(format!(
            "the store's schema is at migration {store}, newer than this rheo {} knows \
             (its newest is {ours}): a newer rheo migrated it; run that version or a \
             later one (docs/operations.md#upgrades)",
            env!("CARGO_PKG_VERSION"),
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::MigrationStatus;

    #[test]
    fn a_store_with_migrations_this_build_lacks_is_refused_naming_both() {
        let status = MigrationStatus {
            applied: vec!["0001 streams".into(), "0002 groups".into()],
            pending: vec![],
            unknown: vec!["0003".into()],
        };
        let e = status.check_not_newer().unwrap_err().to_string();
        assert!(e.contains("at migration 0003"), "{e}");
        assert!(e.contains("its newest is 0002 groups"), "{e}");
        let behind = MigrationStatus {
            applied: vec!["0001 streams".into()],
            pending: vec!["0002 groups".into()],
            unknown: vec![],
        };
        behind.check_not_newer().expect("an older store is fine");
    }

    #[test]
    fn recorded_names_split_into_applied_pending_and_unknown() {
        let done = vec!["0003_x".to_owned(), "0001_a".to_owned()];
        let status = MigrationStatus::of_names(["0001_a", "0002_b"], &done);
        assert_eq!(status.applied, ["0001_a"]);
        assert_eq!(status.pending, ["0002_b"]);
        assert_eq!(status.unknown, ["0003_x"]);
    }
}
