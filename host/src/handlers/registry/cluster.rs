//! Cluster mode (`docs/cluster.md`): every handler change is written to the
//! cluster store's record of the handler first, and every node — the one
//! that took the change included — brings itself in line with the records.
//!
//! * **A change** (deploy, swap, rollback, pause, resume, removal) through
//!   this node, under the handler's operation lock: compile and start the
//!   new version here first (a module that fails is refused before any
//!   node sees it), store the module by digest, then write the record with
//!   compare-and-set on its revision. A lost race re-reads the record and
//!   tries again, so concurrent changes through two nodes both land, one
//!   after the other, with consecutive version numbers. Then this node
//!   runs what it wrote.
//! * **Following** ([`watch_cluster`]): on every notification (and every
//!   poll) each node reads the records' revisions; a handler whose
//!   revision moved is brought in line under its operation lock — the
//!   module fetched by digest (or taken from what the node holds), compiled
//!   (or mapped from the node's cache) off the hot path, and swapped in
//!   the way a local swap is. A record gone drains the handler.
//!
//! A node that cannot run a record (its compile fails there) keeps running
//! what it ran, shows why in `last_error`, and does not retry that revision;
//! a store that cannot be read is retried at the next poll.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::canary::refuse_same;
use super::{HandlerRegistry, Prepared, Step, note_failure};
use crate::backend::Error as BackendError;
use crate::cluster::{ClusterStore, NodeCanary, NodeHandler};
use crate::handlers::deploys::{self, By, CanaryPlan, DeployStep, StepAction, Verdict};
use crate::handlers::store::Store;
use crate::handlers::versions::Loaded;
use crate::handlers::{Manifest, RegistryError};
use crate::model::{HandlerName, Timestamp};
use crate::wasm::Digest;

/// How many times a change re-reads the record after losing a race to
/// another node before it gives up (and the client retries).
const MAX_RACES: usize = 16;

/// A module no record names is kept this long (a deploy stores its module
/// before it writes the record that names it).
const UNUSED_MODULE_GRACE_MS: u64 = 60 * 60 * 1000;

/// What [`HandlerRegistry::edit_record`]'s edit made of the record it read.
enum Edit<T> {
    /// Nothing to write or apply: answer this.
    Answer(T),
    /// The record is already as wanted: bring this node in line with it,
    /// then answer this.
    Unchanged(T),
    /// Write the changed record, then answer this.
    Write(T),
}

/// What a handler record holds: what every node runs for the handler.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Desired {
    manifest: Manifest,
    current: VersionRef,
    previous: Option<VersionRef>,
    paused: bool,
    /// When `current` became current.
    deployed_at: Timestamp,
    /// The node the last change went through (for operators).
    changed_by: String,
    /// Random, new with every write: with the revision, it names one
    /// write even across a removal (revisions start again at 1).
    write: String,
    /// A canary every node runs beside `current`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    canary: Option<CanaryRecord>,
    /// The deploy history, oldest first (`docs/handlers.md#deploy-history`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    history: Vec<DeployStep>,
}

/// A canary in a handler record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct CanaryRecord {
    version: VersionRef,
    plan: CanaryPlan,
    started_at: Timestamp,
    /// Names this canary: nodes report their counts under it.
    id: String,
}

/// A fresh write id.
pub(super) fn write_id() -> String {
    format!("{:016x}", rand::random::<u64>())
}

/// A version by number and module digest (sha256 hex).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct VersionRef {
    number: u64,
    digest: String,
}

impl Desired {
    /// Above every number in use or recorded (as [`Entry::next_number`](crate::handlers::versions::Entry::next_number)).
    fn next_number(&self) -> u64 {
        let canary = self.canary.as_ref().map(|c| &c.version);
        [Some(&self.current), self.previous.as_ref(), canary]
            .into_iter()
            .flatten()
            .map(|v| v.number)
            .chain(self.history.iter().map(|s| s.version))
            .max()
            .unwrap_or(0)
            + 1
    }

    fn digests(&self) -> impl Iterator<Item = &str> {
        std::iter::once(self.current.digest.as_str())
            .chain(self.previous.as_ref().map(|p| p.digest.as_str()))
            .chain(self.canary.as_ref().map(|c| c.version.digest.as_str()))
    }

    /// Records `step`, taken now through `node` on `version`.
    fn record(&mut self, step: Step, at: Timestamp, node: &str, version: &VersionRef) {
        let step = step.taken(at, node, version.number, version.digest.clone());
        deploys::push(&mut self.history, step);
    }
}

/// What a change through this node does to the current version.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Install {
    /// A new manifest and module (creates the handler if needed).
    Deploy,
    /// A new module under the recorded manifest.
    Swap,
    /// From this node's handlers directory: only a handler the cluster
    /// does not have yet.
    Import,
}

/// The record of `name` and its revision (0: none).
async fn read(
    cluster: &Arc<dyn ClusterStore>,
    name: &HandlerName,
) -> Result<(u64, Option<Desired>), RegistryError> {
    let Some(record) = cluster.handler(name.as_str()).await? else {
        return Ok((0, None));
    };
    let desired = serde_json::from_value(record.doc).map_err(|e| {
        RegistryError::Storage(format!(
            "the cluster's record of handler {name:?} (revision {}) is unreadable: {e}",
            record.revision
        ))
    })?;
    Ok((record.revision, Some(desired)))
}

fn doc(desired: &Desired) -> serde_json::Value {
    serde_json::to_value(desired).expect("a handler record serializes")
}

fn contended(name: &HandlerName) -> RegistryError {
    RegistryError::Backend(BackendError::BackendUnavailable(format!(
        "handler {name:?} changed on other nodes {MAX_RACES} times while this change was being made; nothing was done"
    )))
}

impl HandlerRegistry {
    fn node(&self) -> String {
        self.server_id.clone()
    }

    fn now(&self) -> Timestamp {
        self.backend.clock().now()
    }

    /// Deploys, swaps or imports `bytes` through the cluster; whether the
    /// handler is new. The caller holds the handler's operation lock.
    pub(super) async fn cluster_install(
        &self,
        cluster: &Arc<dyn ClusterStore>,
        name: &HandlerName,
        manifest: Option<Manifest>,
        bytes: Arc<[u8]>,
        how: Install,
        step: Step,
    ) -> Result<bool, RegistryError> {
        let mut prepared: Option<Prepared> = None;
        let mut stored = false;
        for _ in 0..MAX_RACES {
            let (revision, old) = read(cluster, name).await?;
            if how == Install::Import && old.is_some() {
                return Ok(false);
            }
            let manifest = match (&manifest, &old) {
                (Some(m), _) => m.clone(),
                (None, Some(old)) => old.manifest.clone(),
                (None, None) => return Err(RegistryError::NotFound(name.clone())),
            };
            // Prepared again only if a race changed the manifest it runs under.
            let ready = match prepared.take() {
                Some(p) if p.manifest == manifest => p,
                _ => {
                    self.prepare(name, manifest.clone(), Arc::clone(&bytes))
                        .await?
                }
            };
            let digest = ready.digest.to_hex();
            if !stored {
                cluster.put_module(&digest, &bytes, self.now()).await?;
                stored = true;
            }
            let mut desired = Desired {
                manifest,
                current: VersionRef {
                    number: old.as_ref().map_or(1, Desired::next_number),
                    digest,
                },
                previous: old.as_ref().map(|o| o.current.clone()),
                paused: old.as_ref().is_some_and(|o| o.paused),
                deployed_at: self.now(),
                changed_by: self.node(),
                write: write_id(),
                // A new version ends a canary.
                canary: None,
                history: old.as_ref().map(|o| o.history.clone()).unwrap_or_default(),
            };
            let step = match old.as_ref().and_then(|o| o.canary.as_ref()) {
                Some(c) => step
                    .clone()
                    .because(format!("ends the canary of version {}", c.version.number)),
                None => step.clone(),
            };
            let current = desired.current.clone();
            desired.record(step, self.now(), &self.node(), &current);
            if cluster
                .put_handler(name.as_str(), revision, &doc(&desired))
                .await?
            {
                self.apply(cluster, name, revision + 1, &desired, Some(ready), None)
                    .await?;
                self.forget_unused_modules(cluster).await;
                return Ok(old.is_none());
            }
            prepared = Some(ready);
        }
        Err(contended(name))
    }

    /// Makes the previous version current again, on every node (or, while
    /// a canary runs, stops the canary). The caller holds the handler's
    /// operation lock.
    pub(super) async fn cluster_rollback(
        &self,
        cluster: &Arc<dyn ClusterStore>,
        name: &HandlerName,
        step: Step,
    ) -> Result<(), RegistryError> {
        for _ in 0..MAX_RACES {
            let (revision, old) = read(cluster, name).await?;
            let old = old.ok_or_else(|| RegistryError::NotFound(name.clone()))?;
            if old.canary.is_some() {
                // While a canary runs, a rollback stops it.
                let verdict = Verdict::Rollback(super::BY_HAND.to_owned());
                return self
                    .cluster_decide(cluster, name, None, verdict, step.by)
                    .await
                    .map(drop);
            }
            let back = old
                .previous
                .clone()
                .ok_or_else(|| RegistryError::NoPrevious(name.clone()))?;
            let bytes = self.version_bytes(cluster, name, &back).await?;
            let ready = self.prepare(name, old.manifest.clone(), bytes).await?;
            let mut desired = Desired {
                manifest: old.manifest.clone(),
                current: back.clone(),
                previous: Some(old.current.clone()),
                paused: old.paused,
                deployed_at: self.now(),
                changed_by: self.node(),
                write: write_id(),
                canary: None,
                history: old.history.clone(),
            };
            desired.record(step.clone(), self.now(), &self.node(), &back);
            if cluster
                .put_handler(name.as_str(), revision, &doc(&desired))
                .await?
            {
                return self
                    .apply(cluster, name, revision + 1, &desired, Some(ready), None)
                    .await;
            }
        }
        Err(contended(name))
    }

    /// The deploy history in the handler's record.
    pub(super) async fn cluster_history(
        &self,
        cluster: &Arc<dyn ClusterStore>,
        name: &HandlerName,
    ) -> Result<Vec<DeployStep>, RegistryError> {
        let (_, desired) = read(cluster, name).await?;
        let desired = desired.ok_or_else(|| RegistryError::NotFound(name.clone()))?;
        Ok(desired.history)
    }

    /// Starts a canary of `bytes` on every node. The caller holds the
    /// handler's operation lock.
    pub(super) async fn cluster_canary(
        &self,
        cluster: &Arc<dyn ClusterStore>,
        name: &HandlerName,
        bytes: Arc<[u8]>,
        plan: CanaryPlan,
        by: By,
    ) -> Result<(), RegistryError> {
        let mut prepared: Option<Prepared> = None;
        let mut stored = false;
        for _ in 0..MAX_RACES {
            let (revision, old) = read(cluster, name).await?;
            let mut desired = old.ok_or_else(|| RegistryError::NotFound(name.clone()))?;
            if let Some(c) = &desired.canary {
                return Err(RegistryError::CanaryRunning {
                    name: name.clone(),
                    version: c.version.number,
                });
            }
            self.check_retries(&desired.manifest).await?;
            let ready = match prepared.take() {
                Some(p) if p.manifest == desired.manifest => p,
                _ => {
                    self.prepare(name, desired.manifest.clone(), Arc::clone(&bytes))
                        .await?
                }
            };
            refuse_same(&ready, Some(&desired.current.digest))?;
            let digest = ready.digest.to_hex();
            if !stored {
                cluster.put_module(&digest, &bytes, self.now()).await?;
                stored = true;
            }
            let canary = CanaryRecord {
                version: VersionRef {
                    number: desired.next_number(),
                    digest,
                },
                plan,
                started_at: self.now(),
                id: write_id(),
            };
            let step = Step::new(StepAction::Canary, by.clone()).because(plan.describe());
            desired.record(step, self.now(), &self.node(), &canary.version);
            desired.canary = Some(canary);
            desired.changed_by = self.node();
            desired.write = write_id();
            if cluster
                .put_handler(name.as_str(), revision, &doc(&desired))
                .await?
            {
                return self
                    .apply(cluster, name, revision + 1, &desired, None, Some(ready))
                    .await;
            }
            prepared = Some(ready);
        }
        Err(contended(name))
    }

    /// Carries out `verdict` on the handler's canary (the one named `id`,
    /// or whichever runs when `None`) for every node; whether it did: a
    /// canary another node decided, or that a deploy replaced, is left
    /// alone. The caller holds the handler's operation lock.
    pub(super) async fn cluster_decide(
        &self,
        cluster: &Arc<dyn ClusterStore>,
        name: &HandlerName,
        id: Option<&str>,
        verdict: Verdict,
        by: By,
    ) -> Result<bool, RegistryError> {
        let decided = self
            .edit_record(cluster, name, |desired| {
                let Some(canary) = desired.canary.take() else {
                    return match id {
                        Some(_) => Ok(Edit::Answer(false)),
                        None => Err(RegistryError::NoCanary(name.clone())),
                    };
                };
                if id.is_some_and(|id| id != canary.id) {
                    return Ok(Edit::Answer(false));
                }
                let now = self.now();
                let (action, reason) = match &verdict {
                    Verdict::Rollback(reason) => (StepAction::Rollback, reason),
                    Verdict::Promote(reason) => (StepAction::Promote, reason),
                };
                let step = Step::new(action, by.clone()).because(reason);
                desired.record(step, now, &self.node(), &canary.version);
                if let Verdict::Promote(_) = verdict {
                    desired.previous =
                        Some(std::mem::replace(&mut desired.current, canary.version));
                    desired.deployed_at = now;
                }
                Ok(Edit::Write(true))
            })
            .await?;
        if decided {
            self.forget_unused_modules(cluster).await;
        }
        Ok(decided)
    }

    /// Pauses or resumes the handler on every node. The caller holds the
    /// handler's operation lock.
    pub(super) async fn cluster_set_paused(
        &self,
        cluster: &Arc<dyn ClusterStore>,
        name: &HandlerName,
        paused: bool,
    ) -> Result<(), RegistryError> {
        self.edit_record(cluster, name, |desired| {
            if desired.paused == paused {
                return Ok(Edit::Unchanged(()));
            }
            desired.paused = paused;
            Ok(Edit::Write(()))
        })
        .await
    }

    /// Reads `name`'s record and lets `edit` change it; a changed record is
    /// written back by compare-and-set on the revision read (as changed by
    /// this node), and this node brought in line with the record. When
    /// another node wrote first, all of it again from the read, at most
    /// [`MAX_RACES`] times. A missing record is `NotFound`.
    async fn edit_record<T>(
        &self,
        cluster: &Arc<dyn ClusterStore>,
        name: &HandlerName,
        mut edit: impl FnMut(&mut Desired) -> Result<Edit<T>, RegistryError>,
    ) -> Result<T, RegistryError> {
        for _ in 0..MAX_RACES {
            let (revision, old) = read(cluster, name).await?;
            let mut desired = old.ok_or_else(|| RegistryError::NotFound(name.clone()))?;
            let answer = match edit(&mut desired)? {
                Edit::Answer(answer) => return Ok(answer),
                Edit::Unchanged(answer) => {
                    self.apply(cluster, name, revision, &desired, None, None)
                        .await?;
                    return Ok(answer);
                }
                Edit::Write(answer) => answer,
            };
            desired.changed_by = self.node();
            desired.write = write_id();
            if cluster
                .put_handler(name.as_str(), revision, &doc(&desired))
                .await?
            {
                self.apply(cluster, name, revision + 1, &desired, None, None)
                    .await?;
                return Ok(answer);
            }
        }
        Err(contended(name))
    }

    /// Removes the handler from the cluster; every node drains it. The
    /// caller holds the handler's operation lock.
    pub(super) async fn cluster_remove(
        &self,
        cluster: &Arc<dyn ClusterStore>,
        name: &HandlerName,
    ) -> Result<(), RegistryError> {
        for _ in 0..MAX_RACES {
            let (revision, old) = read(cluster, name).await?;
            if old.is_none() {
                self.forget_locally(name).await;
                return Err(RegistryError::NotFound(name.clone()));
            }
            if cluster.delete_handler(name.as_str(), revision).await? {
                self.forget_locally(name).await;
                self.forget_unused_modules(cluster).await;
                return Ok(());
            }
        }
        Err(contended(name))
    }

    /// Brings this node in line with one handler's record (the caller
    /// holds its operation lock); whether anything changed here.
    pub(super) async fn follow(&self, cluster: &Arc<dyn ClusterStore>, name: &HandlerName) -> bool {
        let (revision, desired) = match read(cluster, name).await {
            Ok(found) => found,
            Err(e) => {
                tracing::warn!(handler = %name, error = %e, "cannot read the handler's cluster record; retrying at the next poll");
                return false;
            }
        };
        let Some(desired) = desired else {
            return self.forget_locally(name).await;
        };
        if self
            .entries
            .lock()
            .get(name)
            .is_some_and(|e| e.followed == Some((revision, desired.write.clone())))
        {
            return false;
        }
        match self
            .apply(cluster, name, revision, &desired, None, None)
            .await
        {
            Ok(()) => {
                tracing::info!(
                    handler = %name,
                    version = desired.current.number,
                    paused = desired.paused,
                    changed_by = %desired.changed_by,
                    "handler in line with the cluster (revision {revision})"
                );
                true
            }
            Err(e) => {
                // A store that did not answer is retried at the next poll;
                // a module that does not run here is not, until the record
                // changes again.
                let retry = matches!(e, RegistryError::Backend(_));
                let mut entries = self.entries.lock();
                note_failure(
                    &mut entries,
                    name,
                    Some(desired.manifest.clone()),
                    e.to_string(),
                );
                if !retry && let Some(entry) = entries.get_mut(name) {
                    entry.followed = Some((revision, desired.write.clone()));
                }
                false
            }
        }
    }

    /// Brings every handler in line with the cluster's records; how many
    /// changed here.
    pub async fn reconcile(&self) -> usize {
        let Some(cluster) = &self.cluster else {
            return 0;
        };
        let records = match cluster.handlers().await {
            Ok(records) => records,
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the cluster's handlers; retrying at the next poll");
                return 0;
            }
        };
        let wanted: BTreeMap<String, (u64, String)> = records
            .into_iter()
            .map(|r| {
                let write = r.doc["write"].as_str().unwrap_or_default().to_owned();
                (r.name, (r.revision, write))
            })
            .collect();
        let mut todo = BTreeSet::new();
        {
            let entries = self.entries.lock();
            for (name, stamp) in &wanted {
                let Ok(name) = HandlerName::parse(name) else {
                    continue;
                };
                if entries.get(&name).and_then(|e| e.followed.as_ref()) != Some(stamp) {
                    todo.insert(name);
                }
            }
            for name in entries.keys() {
                if !wanted.contains_key(name.as_str()) {
                    todo.insert(name.clone());
                }
            }
        }
        let mut changed = 0;
        for name in todo {
            let _op = self.ops.lock(&name).await;
            if self.follow(cluster, &name).await {
                changed += 1;
            }
        }
        changed
    }

    /// Makes this node run what `desired` (the record at `revision`) says:
    /// a new version or manifest is prepared (unless the caller did, as
    /// `current`) and swapped in; otherwise only the pause flag is set.
    /// Then the canary: started (prepared unless the caller did, as
    /// `canary`) when the record has one this node does not run, stopped
    /// when the record has none. The caller holds the handler's operation
    /// lock.
    async fn apply(
        &self,
        cluster: &Arc<dyn ClusterStore>,
        name: &HandlerName,
        revision: u64,
        desired: &Desired,
        current: Option<Prepared>,
        canary: Option<Prepared>,
    ) -> Result<(), RegistryError> {
        let runs_it = self.entries.lock().get(name).is_some_and(|e| {
            e.manifest.same_settings(&desired.manifest)
                && e.current.as_ref().is_some_and(|c| {
                    c.number == desired.current.number
                        && c.digest.to_hex() == desired.current.digest
                })
        });
        if runs_it {
            self.runtime.set_paused(name, desired.paused)?;
        } else {
            let ready = match current {
                Some(ready) => ready,
                None => {
                    let bytes = self.version_bytes(cluster, name, &desired.current).await?;
                    self.prepare(name, desired.manifest.clone(), bytes).await?
                }
            };
            self.activate(
                name,
                ready,
                Some(desired.current.number),
                Some(desired.paused),
                None,
            )
            .await?;
        }
        self.apply_canary(cluster, name, desired, canary).await?;
        // What a rollback restores: usually what ran until now.
        let previous = match &desired.previous {
            Some(v) => match self.version_bytes(cluster, name, v).await {
                Ok(bytes) => Some(Loaded {
                    number: v.number,
                    digest: Digest::of(&bytes),
                    bytes,
                }),
                Err(e) => {
                    tracing::warn!(handler = %name, version = v.number, error = %e, "the previous version's module is not available here");
                    None
                }
            },
            None => None,
        };
        if let Some(entry) = self.entries.lock().get_mut(name) {
            entry.manifest = desired.manifest.clone();
            entry.previous = previous;
            entry.paused = desired.paused;
            entry.deployed_at = Some(desired.deployed_at);
            entry.followed = Some((revision, desired.write.clone()));
            entry.last_error = None;
            entry.history = desired.history.clone();
        }
        Ok(())
    }

    /// Runs the record's canary here, or none if it has none.
    async fn apply_canary(
        &self,
        cluster: &Arc<dyn ClusterStore>,
        name: &HandlerName,
        desired: &Desired,
        prepared: Option<Prepared>,
    ) -> Result<(), RegistryError> {
        let running = self.canary_id(name);
        let Some(wanted) = &desired.canary else {
            return self.stop_canary(name, None);
        };
        if running.as_deref() == Some(wanted.id.as_str()) {
            return Ok(());
        }
        self.stop_canary(name, None)?;
        let ready = match prepared {
            Some(ready) => ready,
            None => {
                let bytes = self.version_bytes(cluster, name, &wanted.version).await?;
                self.prepare(name, desired.manifest.clone(), bytes).await?
            }
        };
        self.run_canary(
            name,
            ready,
            wanted.version.number,
            wanted.plan,
            wanted.started_at,
            wanted.id.clone(),
            None,
        )
    }

    /// The module of version `v`: from what this node holds, else from
    /// the cluster store (checked against its digest).
    async fn version_bytes(
        &self,
        cluster: &Arc<dyn ClusterStore>,
        name: &HandlerName,
        v: &VersionRef,
    ) -> Result<Arc<[u8]>, RegistryError> {
        let held = self.entries.lock().get(name).and_then(|e| {
            let canary = e.canary.as_ref().map(|c| &c.version);
            [e.current.as_ref(), e.previous.as_ref(), canary]
                .into_iter()
                .flatten()
                .find(|l| l.digest.to_hex() == v.digest)
                .map(|l| Arc::clone(&l.bytes))
        });
        if let Some(bytes) = held {
            return Ok(bytes);
        }
        let bytes: Arc<[u8]> = cluster
            .module(&v.digest)
            .await?
            .ok_or_else(|| {
                RegistryError::Module(format!(
                    "module {} (version {}) is not in the cluster store",
                    v.digest, v.number
                ))
            })?
            .into();
        // Hashing a large module takes a while: off the async workers.
        let check = Arc::clone(&bytes);
        let digest = tokio::task::spawn_blocking(move || Digest::of(&check).to_hex())
            .await
            .map_err(|e| RegistryError::Module(format!("the hash task failed: {e}")))?;
        if digest != v.digest {
            return Err(RegistryError::Module(format!(
                "the cluster store's module {} has digest {digest}",
                v.digest
            )));
        }
        Ok(bytes)
    }

    /// Drains and forgets a handler here (and its files, so a restart does
    /// not import it again); whether there was one.
    async fn forget_locally(&self, name: &HandlerName) -> bool {
        let Some(entry) = self.entries.lock().remove(name) else {
            return false;
        };
        tracing::info!(handler = %name, "handler removed from the cluster: draining it");
        if entry.current.is_some() {
            let _ = self.runtime.stop(name).await;
        }
        self.logs.remove(name);
        if let Some(store) = self.store.clone() {
            let file_name = name.clone();
            let removed = tokio::task::spawn_blocking(move || store.remove(&file_name)).await;
            if let Ok(Err(e)) = removed {
                tracing::warn!(handler = %name, error = %e, "cannot remove the handler's files");
            }
        }
        true
    }

    /// Drops stored modules no record names (best effort: a failure is
    /// logged and tried again after the next change).
    async fn forget_unused_modules(&self, cluster: &Arc<dyn ClusterStore>) {
        let before = self.now().sub_ms(UNUSED_MODULE_GRACE_MS);
        let forgotten = match named_modules(cluster).await {
            Ok(Some(keep)) => cluster.forget_modules(&keep, before).await,
            // An unreadable record may name any module: keep them all.
            Ok(None) => Ok(0),
            Err(e) => Err(e),
        };
        match forgotten {
            Ok(0) => {}
            Ok(n) => tracing::info!(modules = n, "unused modules removed from the cluster store"),
            Err(e) => tracing::debug!(error = %e, "unused modules not removed"),
        }
    }

    /// Deploys the handlers of this node's directory that the cluster does
    /// not have yet; how many. One the cluster has is left as the cluster
    /// has it (change it with a deploy).
    pub(super) async fn import_directory(
        &self,
        cluster: &Arc<dyn ClusterStore>,
        store: &Store,
    ) -> usize {
        let files = match store.manifests() {
            Ok(files) => files,
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the handlers directory");
                return 0;
            }
        };
        let known: BTreeSet<String> = match cluster.handlers().await {
            Ok(records) => records.into_iter().map(|r| r.name).collect(),
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the cluster's handlers; the directory is imported at the next change");
                return 0;
            }
        };
        let mut imported = 0;
        for name in files.into_keys() {
            if known.contains(name.as_str()) {
                continue;
            }
            let _op = self.ops.lock(&name).await;
            let read = {
                let (store, name) = (store.clone(), name.clone());
                tokio::task::spawn_blocking(move || store.read(&store.manifest_path(&name)))
                    .await
                    .unwrap_or_else(|e| Err(format!("the read task failed: {e}")))
            };
            let result = match read {
                Ok((manifest, bytes)) => self
                    .cluster_install(
                        cluster,
                        &name,
                        Some(manifest.clone()),
                        bytes.into(),
                        Install::Import,
                        Step::new(StepAction::Deploy, By::server("directory")),
                    )
                    .await
                    .map_err(|e| (Some(manifest), e.to_string())),
                Err(e) => Err((None, e)),
            };
            match result {
                Ok(true) => {
                    tracing::info!(handler = %name, dir = %store.dir().display(), "handler imported into the cluster from the handlers directory");
                    imported += 1;
                }
                Ok(false) => {}
                Err((manifest, e)) => note_failure(&mut self.entries.lock(), &name, manifest, e),
            }
        }
        imported
    }

    /// What this node runs, as its heartbeat reports it.
    pub fn running(&self) -> Vec<NodeHandler> {
        let entries = self.entries.lock();
        entries
            .iter()
            .map(|(name, e)| NodeHandler {
                name: name.to_string(),
                version: e.current.as_ref().map(|c| c.number),
                digest: e.current.as_ref().map(|c| c.digest.to_hex()),
                status: e.status().as_str().to_owned(),
                canary: e.canary.as_ref().map(|c| NodeCanary {
                    id: c.id.clone(),
                    version: c.version.number,
                    counts: c.tally.counts(),
                }),
            })
            .collect()
    }
}

/// The digests every handler record names (current and previous); `None`
/// when a record cannot be read.
async fn named_modules(
    cluster: &Arc<dyn ClusterStore>,
) -> crate::backend::Result<Option<Vec<String>>> {
    let mut keep = Vec::new();
    for record in cluster.handlers().await? {
        let Ok(desired) = serde_json::from_value::<Desired>(record.doc) else {
            return Ok(None);
        };
        keep.extend(desired.digests().map(str::to_owned));
    }
    Ok(Some(keep))
}

/// Keeps `registry` in line with its cluster until `stop`: at start, on
/// every change notification and at every poll. `None` when the registry
/// is not in cluster mode.
pub fn watch_cluster(
    registry: Arc<HandlerRegistry>,
    stop: CancellationToken,
) -> Option<JoinHandle<()>> {
    let cluster = registry.cluster.clone()?;
    let mut changes = cluster.changes();
    let poll = cluster.poll_interval();
    Some(tokio::spawn(async move {
        loop {
            // Seen before reading, so a change made while reading wakes
            // the next round.
            changes.borrow_and_update();
            registry.reconcile().await;
            tokio::select! {
                () = stop.cancelled() => break,
                changed = changes.changed() => if changed.is_err() { break },
                () = tokio::time::sleep(poll) => {}
            }
        }
    }))
}
