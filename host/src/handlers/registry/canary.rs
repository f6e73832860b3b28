//! Canaries (`docs/handlers.md#canaries`): a new version on a share of the
//! first attempts, judged against the current one, then promoted or
//! rolled back — by hand, or by the judge ([`watch_canaries`]).
//!
//! Standalone, this server's counts decide. In cluster mode the canary is
//! part of the handler's record, every node runs it, each node reports
//! its counts in its heartbeat, and whichever node judges first writes the
//! verdict with compare-and-set: one decision for all nodes
//! (`cluster.rs`).

use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::{HandlerRegistry, Prepared, Step, found};
use crate::handlers::deploys::{self, By, CanaryPlan, StepAction, Verdict};
use crate::handlers::versions::{Canary, Entry, Loaded};
use crate::handlers::{HandlerView, Manifest, RegistryError};
use crate::model::{HandlerName, Timestamp};
use crate::runtime::{CanaryCounts, CanaryTally, CanaryVersion, Version};

/// How often the judge looks at the running canaries.
const JUDGE_EVERY: Duration = Duration::from_millis(250);

impl HandlerRegistry {
    /// Starts `module` as a canary of `name` under `plan`, beside the
    /// current version (`docs/handlers.md#canaries`). Refused, with
    /// nothing changed, when the module does not compile or start, when
    /// the handler has no running version or a canary already, when the
    /// module is the current version, or when the handler's group would
    /// dead-letter a canary's failure at once (`max_attempts` 1).
    pub async fn canary(
        &self,
        name: &HandlerName,
        module: Vec<u8>,
        plan: CanaryPlan,
        by: By,
    ) -> Result<HandlerView, RegistryError> {
        plan.validate().map_err(RegistryError::InvalidCanary)?;
        let _op = self.ops.lock(name).await;
        if let Some(cluster) = &self.cluster {
            // Checked against the record there.
            self.cluster_canary(cluster, name, module.into(), plan, by)
                .await?;
            return self.view_of(name);
        }
        let manifest = {
            let entries = self.entries.lock();
            let entry = found(&entries, name)?;
            can_start_canary(name, entry)?;
            entry.manifest.clone()
        };
        self.check_retries(&manifest).await?;
        let prepared = self.prepare(name, manifest, module.into()).await?;
        let current = self.current_digest(name);
        refuse_same(&prepared, current.as_deref())?;
        let number = self.entries.lock().get(name).map_or(1, Entry::next_number);
        let now = self.backend.clock().now();
        let id = super::cluster::write_id();
        let step = Step::new(StepAction::Canary, by).because(plan.describe());
        self.run_canary(name, prepared, number, plan, now, id, Some(step))?;
        self.persist_record(name).await?;
        self.view_of(name)
    }

    /// Makes the canary of `name` the current version now, whatever its
    /// counts say.
    pub async fn promote(&self, name: &HandlerName, by: By) -> Result<HandlerView, RegistryError> {
        let _op = self.ops.lock(name).await;
        self.decide(name, None, Verdict::Promote("promoted by hand".into()), by)
            .await?;
        self.view_of(name)
    }

    /// The id of the canary of `name` running here, if one does.
    pub(super) fn canary_id(&self, name: &HandlerName) -> Option<String> {
        let entries = self.entries.lock();
        entries.get(name)?.canary.as_ref().map(|c| c.id.clone())
    }

    fn current_digest(&self, name: &HandlerName) -> Option<String> {
        let entries = self.entries.lock();
        let current = entries.get(name)?.current.as_ref()?;
        Some(current.digest.to_hex())
    }

    /// A canary's failure is a nack: the group must leave a retry for the
    /// current version.
    pub(super) async fn check_retries(&self, manifest: &Manifest) -> Result<(), RegistryError> {
        let info = self
            .backend
            .group_info(&manifest.stream, &manifest.group)
            .await?;
        if info.max_attempts == 1 {
            return Err(RegistryError::InvalidCanary(format!(
                "group {:?} has max_attempts 1: a delivery the canary failed would be dead-lettered without a retry on the current version; raise max_attempts (a reset of the group can) or swap without a canary",
                manifest.group.as_str()
            )));
        }
        Ok(())
    }

    /// Runs a prepared version as canary number `number` of `name`, beside
    /// its current version, and records it (with `step`, if given, in the
    /// history). The caller holds the handler's operation lock.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn run_canary(
        &self,
        name: &HandlerName,
        prepared: Prepared,
        number: u64,
        plan: CanaryPlan,
        started_at: Timestamp,
        id: String,
        step: Option<Step>,
    ) -> Result<(), RegistryError> {
        let Prepared {
            runner,
            digest,
            bytes,
            ..
        } = prepared;
        runner.env().set_version(number);
        let runner = Arc::new(runner);
        let tally = Arc::new(CanaryTally::default());
        self.runtime.set_canary(
            name,
            Some(CanaryVersion {
                number,
                handler: runner.clone(),
                share: plan.share(),
                tally: Arc::clone(&tally),
            }),
        )?;
        let version = Loaded {
            number,
            digest,
            bytes,
        };
        let mut entries = self.entries.lock();
        let entry = entries
            .get_mut(name)
            .ok_or_else(|| RegistryError::NotFound(name.clone()))?;
        if let Some(step) = step {
            step.record(&mut entry.history, started_at, &self.server_id, &version);
        }
        entry.canary = Some(Canary {
            version,
            plan,
            started_at,
            id,
            runner,
            tally,
        });
        Ok(())
    }

    /// Stops the canary of `name` here (the current version takes every
    /// delivery again); with `step`, records it. The caller holds the
    /// handler's operation lock.
    pub(super) fn stop_canary(
        &self,
        name: &HandlerName,
        step: Option<Step>,
    ) -> Result<(), RegistryError> {
        let now = self.backend.clock().now();
        let mut entries = self.entries.lock();
        let Some(entry) = entries.get_mut(name) else {
            return Ok(());
        };
        let Some(canary) = entry.canary.take() else {
            return Ok(());
        };
        self.runtime.set_canary(name, None)?;
        if let Some(step) = step {
            step.record(&mut entry.history, now, &self.server_id, &canary.version);
        }
        Ok(())
    }

    /// Carries out `verdict` on the canary of `name` — the one named `id`,
    /// or whichever runs when `None` — on every node; whether it did (a
    /// canary decided or replaced meanwhile is left alone). The caller
    /// holds the handler's operation lock.
    pub(super) async fn decide(
        &self,
        name: &HandlerName,
        id: Option<&str>,
        verdict: Verdict,
        by: By,
    ) -> Result<bool, RegistryError> {
        if let Some(cluster) = &self.cluster {
            return self.cluster_decide(cluster, name, id, verdict, by).await;
        }
        let (manifest, canary, paused) = {
            let entries = self.entries.lock();
            let entry = found(&entries, name)?;
            let Some(canary) = entry.canary.clone() else {
                return match id {
                    Some(_) => Ok(false),
                    None => Err(RegistryError::NoCanary(name.clone())),
                };
            };
            if id.is_some_and(|id| id != canary.id) {
                return Ok(false);
            }
            (entry.manifest.clone(), canary, entry.paused)
        };
        match verdict {
            Verdict::Rollback(reason) => {
                let step = Step::new(StepAction::Rollback, by).because(reason);
                self.stop_canary(name, Some(step))?;
            }
            Verdict::Promote(reason) => {
                // The canary's runner, already warm, becomes the version.
                let version = Version::new(canary.version.number, canary.runner.clone());
                let settings = manifest.settings(self.consumer_id(name));
                self.runtime.run(name, settings, version, paused).await?;
                let now = self.backend.clock().now();
                let step = Step::new(StepAction::Promote, by).because(reason);
                let mut entries = self.entries.lock();
                if let Some(entry) = entries.get_mut(name) {
                    step.record(&mut entry.history, now, &self.server_id, &canary.version);
                    entry.installed(manifest, canary.version, now);
                }
            }
        }
        self.persist_record(name).await?;
        Ok(true)
    }

    /// Writes the handler's files and record again (its history moved).
    async fn persist_record(&self, name: &HandlerName) -> Result<(), RegistryError> {
        let files = self.entries.lock().get(name).and_then(super::Files::of);
        self.persist(name, files).await
    }

    /// Judges every canary running here (`deploys::judge`) and carries out
    /// the verdicts; how many were decided. In cluster mode the counts of
    /// every node are summed.
    pub async fn judge_canaries(&self) -> usize {
        let running: Vec<(HandlerName, Canary)> = {
            let entries = self.entries.lock();
            entries
                .iter()
                .filter_map(|(n, e)| Some((n.clone(), e.canary.clone()?)))
                .collect()
        };
        let mut decided = 0;
        for (name, canary) in running {
            let counts = match self.canary_counts(&name, &canary).await {
                Ok(counts) => counts,
                Err(e) => {
                    tracing::warn!(handler = %name, error = %e, "cannot read the other nodes' canary counts; judging at the next look");
                    continue;
                }
            };
            let now = self.backend.clock().now();
            let Some(verdict) = deploys::judge(&canary.plan, canary.started_at, now, counts) else {
                continue;
            };
            let _op = self.ops.lock(&name).await;
            let what = match &verdict {
                Verdict::Promote(why) => ("promoted", why.clone()),
                Verdict::Rollback(why) => ("rolled back", why.clone()),
            };
            match self
                .decide(&name, Some(&canary.id), verdict, By::server("rheo"))
                .await
            {
                Ok(true) => {
                    tracing::info!(handler = %name, version = canary.version.number, reason = %what.1, "canary {}", what.0);
                    decided += 1;
                }
                Ok(false) => {}
                Err(e) => {
                    tracing::warn!(handler = %name, error = %e, "the canary's verdict could not be carried out; judging again at the next look")
                }
            }
        }
        decided
    }

    /// What both versions did with their first attempts since `canary`
    /// started: here, and in cluster mode on every node that reported it.
    async fn canary_counts(
        &self,
        name: &HandlerName,
        canary: &Canary,
    ) -> Result<CanaryCounts, RegistryError> {
        let mut counts = canary.tally.counts();
        if let Some(cluster) = &self.cluster {
            for node in cluster.nodes(Timestamp::EPOCH).await? {
                if node.id == self.server_id {
                    continue;
                }
                let reported = node
                    .handlers
                    .iter()
                    .filter(|h| h.name == name.as_str())
                    .filter_map(|h| h.canary.as_ref())
                    .filter(|c| c.id == canary.id);
                for c in reported {
                    counts = counts.plus(c.counts);
                }
            }
        }
        Ok(counts)
    }
}

/// A canary needs a running version and no other canary.
pub(super) fn can_start_canary(name: &HandlerName, entry: &Entry) -> Result<(), RegistryError> {
    if entry.current.is_none() {
        return Err(RegistryError::NotFound(name.clone()));
    }
    if let Some(c) = &entry.canary {
        return Err(RegistryError::CanaryRunning {
            name: name.clone(),
            version: c.version.number,
        });
    }
    Ok(())
}

/// A canary of the current version would compare it with itself.
pub(super) fn refuse_same(prepared: &Prepared, current: Option<&str>) -> Result<(), RegistryError> {
    if current == Some(prepared.digest.to_hex().as_str()) {
        return Err(RegistryError::InvalidCanary(
            "this module is the current version (same digest): there is nothing to compare"
                .to_owned(),
        ));
    }
    Ok(())
}

impl CanaryPlan {
    /// The plan in words, for the history.
    pub(crate) fn describe(&self) -> String {
        format!(
            "{}% of first attempts for {}; rolled back if more than {} points worse than the current version after at least {} deliveries",
            self.share_percent,
            crate::model::human_ms(self.window_ms),
            self.margin_percent,
            self.min_deliveries
        )
    }
}

/// Judges `registry`'s canaries every [`JUDGE_EVERY`] until `stop`.
pub fn watch_canaries(registry: Arc<HandlerRegistry>, stop: CancellationToken) -> JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            tokio::select! {
                () = stop.cancelled() => break,
                () = tokio::time::sleep(JUDGE_EVERY) => {}
            }
            registry.judge_canaries().await;
        }
    })
}
