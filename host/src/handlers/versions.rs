//! A handler's versions: which one runs, which one a rollback restores,
//! whether the handler is paused, and why the last change was refused.
//!
//! This is the only record of them. The runtime runs the one version it is
//! told to run and keeps no history; the API's view and the handlers
//! directory's `state.json` are both read from here, so they cannot
//! disagree about which version is current or what a rollback restores.

use std::fmt;
use std::sync::Arc;

use serde::Serialize;
use utoipa::ToSchema;

use super::Manifest;
use super::deploys::{CanaryPlan, DeployStep};
use crate::model::Timestamp;
use crate::runtime::CanaryTally;
use crate::wasm::{Digest, HandlerRunner};

/// What a handler is doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum HandlerStatus {
    /// Its current version consumes its group.
    Running,
    /// It has a current version, but fetches nothing until resumed.
    Paused,
    /// No version of it runs: its first deploy or load was refused (see
    /// `last_error`).
    Failed,
}

impl HandlerStatus {
    /// The name the API shows.
    pub fn as_str(self) -> &'static str {
        match self {
            HandlerStatus::Running => "running",
            HandlerStatus::Paused => "paused",
            HandlerStatus::Failed => "failed",
        }
    }
}

impl fmt::Display for HandlerStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One version of a handler's module.
#[derive(Debug, Clone)]
pub(super) struct Loaded {
    /// Its number: 1 for the first version, then one above any in use.
    pub(super) number: u64,
    pub(super) digest: Digest,
    /// Kept so a rollback (and the handlers directory) can use it again.
    pub(super) bytes: Arc<[u8]>,
}

/// A canary running beside the current version
/// (`docs/handlers.md#canaries`).
#[derive(Debug, Clone)]
pub(super) struct Canary {
    pub(super) version: Loaded,
    pub(super) plan: CanaryPlan,
    pub(super) started_at: Timestamp,
    /// Names this canary (a canary of the same module started again is
    /// another one): the counts nodes report are matched by it.
    pub(super) id: String,
    /// Its code, as the runtime runs it (a promotion keeps running it).
    pub(super) runner: Arc<HandlerRunner>,
    /// What both versions did with their first attempts here.
    pub(super) tally: Arc<CanaryTally>,
}

/// Everything known about one handler.
#[derive(Debug, Clone)]
pub(super) struct Entry {
    pub(super) manifest: Manifest,
    pub(super) current: Option<Loaded>,
    /// When the current version became current.
    pub(super) deployed_at: Option<Timestamp>,
    pub(super) previous: Option<Loaded>,
    /// Kept across swaps and worker restarts: a paused handler stays paused
    /// until resumed, whatever is deployed meanwhile.
    pub(super) paused: bool,
    pub(super) last_error: Option<String>,
    /// In cluster mode, the record this node last brought itself in line
    /// with: its revision and write id (a name removed and deployed again
    /// starts at revision 1 again; the write id tells the records apart).
    pub(super) followed: Option<(u64, String)>,
    /// Times another version took over while one ran (hot swaps and
    /// rollbacks), on this server.
    pub(super) swaps: u64,
    /// The canary beside the current version, if one runs.
    pub(super) canary: Option<Canary>,
    /// Every deploy, swap, canary, promotion and rollback, oldest first
    /// (the last [`HISTORY_STEPS`](super::deploys::HISTORY_STEPS)).
    pub(super) history: Vec<DeployStep>,
}

impl Entry {
    /// A handler no version of which runs yet.
    pub(super) fn new(manifest: Manifest) -> Self {
        Self {
            manifest,
            current: None,
            deployed_at: None,
            previous: None,
            paused: false,
            last_error: None,
            swaps: 0,
            followed: None,
            canary: None,
            history: Vec::new(),
        }
    }

    /// Its status, derived from what runs and the pause flag.
    pub(super) fn status(&self) -> HandlerStatus {
        match (&self.current, self.paused) {
            (None, _) => HandlerStatus::Failed,
            (Some(_), true) => HandlerStatus::Paused,
            (Some(_), false) => HandlerStatus::Running,
        }
    }

    /// The number of the next new version: above every number in use or
    /// ever recorded, so a deploy after a rollback does not reuse the
    /// number (and the per-version counters) of the version rolled away
    /// from, nor a canary's.
    pub(super) fn next_number(&self) -> u64 {
        let canary = self.canary.as_ref().map(|c| &c.version);
        [self.current.as_ref(), self.previous.as_ref(), canary]
            .into_iter()
            .flatten()
            .map(|v| v.number)
            .chain(self.history.iter().map(|s| s.version))
            .max()
            .map_or(1, |n| n + 1)
    }

    /// `version` runs since `at`, under `manifest`. The version it replaced
    /// becomes the previous one (so after a rollback the two have swapped
    /// places, and a second rollback undoes the first); the last error is
    /// cleared, and a canary, if one ran, is over.
    pub(super) fn installed(&mut self, manifest: Manifest, version: Loaded, at: Timestamp) {
        self.canary = None;
        let number = version.number;
        if let Some(old) = self.current.replace(version)
            && old.number != number
        {
            self.previous = Some(old);
            self.swaps += 1;
        }
        self.deployed_at = Some(at);
        self.manifest = manifest;
        self.last_error = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn version(number: u64) -> Loaded {
        let bytes: Arc<[u8]> = number.to_le_bytes().into();
        Loaded {
            number,
            digest: Digest::of(&bytes),
            bytes,
        }
    }

    fn numbers(e: &Entry) -> (Option<u64>, Option<u64>, HandlerStatus) {
        let number = |v: &Option<Loaded>| v.as_ref().map(|v| v.number);
        (number(&e.current), number(&e.previous), e.status())
    }

    #[test]
    fn the_status_is_shown_by_its_lowercase_name() {
        for (status, name) in [
            (HandlerStatus::Running, "running"),
            (HandlerStatus::Paused, "paused"),
            (HandlerStatus::Failed, "failed"),
        ] {
            assert_eq!(serde_json::to_value(status).unwrap(), name);
            assert_eq!(status.to_string(), name);
        }
    }

    #[test]
    fn versions_advance_swap_places_on_rollback_and_are_never_reused() {
        let manifest = || {
            Manifest::new(
                crate::model::StreamName::parse("in").unwrap(),
                crate::model::GroupName::parse("g").unwrap(),
            )
        };
        let mut e = Entry::new(manifest());
        assert_eq!(numbers(&e), (None, None, HandlerStatus::Failed));
        assert_eq!(e.next_number(), 1);
        e.installed(manifest(), version(1), Timestamp::EPOCH);
        e.installed(manifest(), version(e.next_number()), Timestamp::EPOCH);
        assert_eq!(numbers(&e), (Some(2), Some(1), HandlerStatus::Running));
        // A rollback installs the previous version under its own number.
        e.installed(manifest(), version(1), Timestamp::EPOCH);
        assert_eq!(numbers(&e), (Some(1), Some(2), HandlerStatus::Running));
        assert_eq!(e.next_number(), 3, "2 is taken by the previous version");
        e.paused = true;
        e.installed(manifest(), version(e.next_number()), Timestamp::EPOCH);
        assert_eq!(numbers(&e), (Some(3), Some(1), HandlerStatus::Paused));
    }
}
