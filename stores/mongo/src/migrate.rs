//! The collections' indexes, created in numbered steps like the SQL
//! migrations (`docs/backends.md#mongodb`): a step that has run is recorded
//! in `rheo_migrations` and never runs again, so a later change is a new
//! step. Creating an index that exists is a no-op, so two servers starting
//! at once on an empty database both succeed.

use mongodb::IndexModel;
use mongodb::bson::{Document, doc};
use mongodb::options::IndexOptions;

use super::{
    DELIVERIES, EVENTS, GATES, GROUPS, MIGRATIONS, MongoBackend, Phase, RATES, is_duplicate_key,
    map_error,
};
use rheo_core::backend::Result;

/// Every filter on deliveries names only fields of one of these indexes
/// (or of the position key): MongoDB then never scans, and the SecantusDB
/// stand-in, whose planner uses an index only when it holds every field
/// of the filter, does not either (`docs/backends.md#mongodb`).
fn fence() -> Document {
    doc! {"s": 1, "g": 1, "e": 1, "st": 1, "lid": 1, "due": 1, "exp": 1, "a": 1}
}

fn work() -> Document {
    doc! {"s": 1, "g": 1, "st": 1, "p": 1, "q": 1, "due": 1, "exp": 1, "a": 1}
}

/// One step: its name and the indexes it creates, per collection.
struct Step {
    name: &'static str,
    indexes: fn() -> Vec<(&'static str, Document, bool)>,
}

/// Every step, in order. The third field of an index says unique.
const STEPS: &[Step] = &[
    Step {
        name: "0001_log",
        indexes: || {
            vec![
                // Gap-free, duplicate-free sequences; reads by position.
                (EVENTS, doc! {"s": 1, "p": 1, "q": 1}, true),
                // Idempotent appends by event id.
                (EVENTS, doc! {"s": 1, "id": 1}, true),
                // Queries: by sequence across partitions, by time, by type
                // and key, by lineage.
                (EVENTS, doc! {"s": 1, "q": 1, "p": 1}, false),
                (EVENTS, doc! {"s": 1, "ts": 1, "p": 1, "q": 1}, false),
                (EVENTS, doc! {"s": 1, "type": 1, "q": 1}, false),
                (EVENTS, doc! {"s": 1, "key": 1, "q": 1}, false),
                (EVENTS, doc! {"s": 1, "metadata.correlation_id": 1}, false),
                (EVENTS, doc! {"s": 1, "metadata.causation_id": 1}, false),
            ]
        },
    },
    Step {
        name: "0002_groups",
        indexes: || {
            vec![
                (GROUPS, doc! {"s": 1, "g": 1}, true),
                // One delivery per event and group: claims of new events
                // race on this key; replays and resets read ranges by it.
                (DELIVERIES, doc! {"s": 1, "g": 1, "p": 1, "q": 1}, true),
                // A delivery by event: the lease fence (status, lease id)
                // and what a re-claim checks (due time, expiry, attempts).
                (DELIVERIES, fence(), false),
                // Claims, the poison guard, the frontier, lag and dead
                // letters: by status, then position, with the due time,
                // expiry and attempts a claim filters on.
                (DELIVERIES, work(), false),
            ]
        },
    },
    Step {
        name: "0003_gates",
        indexes: || {
            vec![
                // An ordered group's deliveries by gate: a gate's lowest
                // open or parked one (docs/groups.md#ordering).
                (
                    DELIVERIES,
                    doc! {"s": 1, "g": 1, "p": 1, "k": 1, "st": 1, "q": 1},
                    false,
                ),
                // A reset forgets a group's gates per partition.
                (GATES, doc! {"s": 1, "g": 1, "p": 1}, false),
            ]
        },
    },
    Step {
        name: "0004_rates",
        indexes: || {
            vec![
                // `flow.key_rate`'s buckets (docs/groups.md#flow): read by
                // `_id`; deletes and resets remove them per stream, group
                // or partition, a fetch those whose TAT passed.
                (RATES, doc! {"s": 1, "g": 1, "p": 1, "t": 1}, false),
            ]
        },
    },
];

impl MongoBackend {
    /// The steps recorded in the store against this build's.
    pub(crate) async fn migration_status(&self) -> Result<rheo_core::backend::MigrationStatus> {
        let done: Vec<String> = self
            .coll(MIGRATIONS)
            .distinct("_id", doc! {})
            .await
            .map_err(|e| map_error(e, Phase::Read))?
            .into_iter()
            .filter_map(|id| id.as_str().map(str::to_owned))
            .collect();
        Ok(rheo_core::backend::MigrationStatus::of_names(
            STEPS.iter().map(|s| s.name),
            &done,
        ))
    }

    /// Runs the steps not recorded yet; returns their names.
    pub(crate) async fn migrate(&self) -> Result<Vec<String>> {
        let records = self.coll(MIGRATIONS);
        let mut applied = Vec::new();
        for step in STEPS {
            let done = records
                .find_one(doc! {"_id": step.name})
                .await
                .map_err(|e| map_error(e, Phase::Read))?;
            if done.is_some() {
                continue;
            }
            for (coll, keys, unique) in (step.indexes)() {
                let options = IndexOptions::builder().unique(unique).build();
                let index = IndexModel::builder().keys(keys).options(options).build();
                self.coll(coll)
                    .create_index(index)
                    .await
                    .map_err(|e| map_error(e, Phase::Write))?;
            }
            let record = doc! {"_id": step.name, "applied_at": self.now().as_millis()};
            match records.insert_one(record).await {
                Ok(_) => applied.push(step.name.to_owned()),
                // Another server ran the same step at the same time.
                Err(e) if is_duplicate_key(&e) => {}
                Err(e) => return Err(map_error(e, Phase::Write)),
            }
        }
        Ok(applied)
    }
}
