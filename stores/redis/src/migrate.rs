//! The Redis layout's migrations (`docs/backends.md#redis`): numbered
//! steps applied once, in order, recorded in one hash (step name → when it
//! was applied), like the SQL migrations and MongoDB's. `rheo serve` runs
//! them on start unless `--no-migrate`; `rheo migrate` runs them alone.
//!
//! A step must be safe to run again (a server that died in the middle
//! runs it again from the start) and is run with no older server writing
//! to the store: stop every node of the old version before starting the
//! new one.

use std::collections::BTreeMap;

use super::groups::decode_group;
use super::{Phase, RedisBackend, corrupt, decode_meta};
use rheo_core::backend::Result;
use rheo_core::backend::policy::GroupConfig;
use rheo_core::model::{GroupName, StreamName};

/// The steps, in order.
const STEPS: [&str; 1] = ["0001_gate_counts"];

impl RedisBackend {
    /// Applies the steps not recorded yet; returns their names.
    pub async fn migrate_layout(&self) -> Result<Vec<String>> {
        let record = self.keys.migrations();
        let done: Vec<String> = self
            .run(redis::cmd("HKEYS").arg(&record), Phase::Read)
            .await?;
        let mut applied = Vec::new();
        for step in STEPS {
            if done.iter().any(|d| d == step) {
                continue;
            }
            match step {
                "0001_gate_counts" => self.count_gates().await?,
                other => unreachable!("a step without code: {other}"),
            }
            let now = self.clock.now().as_millis();
            let cmd = redis::cmd("HSET").arg(&record).arg(step).arg(now).clone();
            self.run::<i64>(&cmd, Phase::Write).await?;
            applied.push(step.to_owned());
        }
        Ok(applied)
    }

    /// The steps recorded in the store against this build's.
    pub async fn layout_status(&self) -> Result<rheo_core::backend::MigrationStatus> {
        let done: Vec<String> = self
            .run(redis::cmd("HKEYS").arg(self.keys.migrations()), Phase::Read)
            .await?;
        Ok(rheo_core::backend::MigrationStatus::of_names(STEPS, &done))
    }

    /// `0001_gate_counts`: every partition of every gated group (an
    /// ordering, or a `flow.key_concurrency`) gets the count of each gate's
    /// open deliveries, from its gates sorted set; an ungated group has
    /// none.
    async fn count_gates(&self) -> Result<()> {
        let streams: BTreeMap<String, String> = self
            .run(redis::cmd("HGETALL").arg(self.keys.streams()), Phase::Read)
            .await?;
        for (name, raw) in streams {
            let s = StreamName::parse(name).map_err(|e| corrupt("stream name", e))?;
            let (partitions, _) = decode_meta(&raw)?;
            let groups: BTreeMap<String, String> = self
                .run(redis::cmd("HGETALL").arg(self.keys.groups(&s)), Phase::Read)
                .await?;
            for (name, raw) in groups {
                let g = GroupName::parse(name).map_err(|e| corrupt("group name", e))?;
                let group = decode_group(&s, g.clone(), &raw)?;
                if !GroupConfig::from(&group).gating().is_gated() {
                    continue;
                }
                for p in 0..partitions {
                    let mut invocation = self.count_gates.prepare_invoke();
                    invocation
                        .key(self.keys.gates(&s, &g, p))
                        .key(self.keys.counts(&s, &g, p));
                    super::mark(Phase::Write);
                    let _: i64 = invocation
                        .invoke_async(&mut self.conn.clone())
                        .await
                        .map_err(|e| super::map_error(e, Phase::Write))?;
                }
            }
        }
        Ok(())
    }
}
