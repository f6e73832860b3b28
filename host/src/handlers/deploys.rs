//! Safe deploys (`docs/handlers.md#canaries`, `#deploy-history`): what a
//! canary is asked to prove and how it is judged, and the record of every
//! step a handler's versions took.

use serde::{Deserialize, Serialize};

use crate::model::Timestamp;
use crate::runtime::{CanaryCounts, SHARE_SCALE};

/// How many steps a handler's history keeps (the oldest go first).
pub const HISTORY_STEPS: usize = 100;

/// Who made a change, as its history shows it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct By(Option<String>);

impl By {
    /// A request authenticated with the token named `name`.
    pub fn token(name: impl Into<String>) -> Self {
        Self(Some(name.into()))
    }

    /// Nobody known: a server without tokens, or a test.
    pub fn unknown() -> Self {
        Self(None)
    }

    /// The server itself: a canary judged, a file in the handlers
    /// directory loaded.
    pub(super) fn server(what: &str) -> Self {
        Self(Some(what.to_owned()))
    }

    pub(super) fn name(&self) -> Option<String> {
        self.0.clone()
    }
}

/// What a step did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StepAction {
    /// A manifest and module deployed (a new handler, or a redeploy).
    Deploy,
    /// A new module under the same manifest.
    Swap,
    /// The previous version made current again, or a canary stopped.
    Rollback,
    /// A canary started on a share of the deliveries.
    Canary,
    /// A canary made the current version.
    Promote,
}

impl StepAction {
    /// The name the API and the CLI show.
    pub fn as_str(self) -> &'static str {
        match self {
            StepAction::Deploy => "deploy",
            StepAction::Swap => "swap",
            StepAction::Rollback => "rollback",
            StepAction::Canary => "canary",
            StepAction::Promote => "promote",
        }
    }
}

/// One step of a handler's deploy history.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeployStep {
    /// When it happened.
    pub at: Timestamp,
    /// What it did.
    pub action: StepAction,
    /// The version it put in (deploy, swap, rollback to the previous
    /// version, canary, promote) or took out (a canary rolled back).
    pub version: u64,
    /// That version's content digest (sha256 hex).
    pub digest: String,
    /// Who: the token's name, `rheo` for a canary's automatic verdict,
    /// `directory` for a file loaded from the handlers directory; none
    /// when the request carried no named token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub by: Option<String>,
    /// The node it went through.
    pub node: String,
    /// Why: a canary's verdict with its numbers, a note.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// Adds `step` to `history`, dropping the oldest beyond [`HISTORY_STEPS`].
pub(super) fn push(history: &mut Vec<DeployStep>, step: DeployStep) {
    history.push(step);
    if history.len() > HISTORY_STEPS {
        let extra = history.len() - HISTORY_STEPS;
        history.drain(..extra);
    }
}

/// What a canary must show before it is promoted.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct CanaryPlan {
    /// Share of first attempts it takes, in percent (0.01 to 100).
    pub share_percent: f64,
    /// How long it runs before it is promoted, in milliseconds.
    pub window_ms: u64,
    /// How many percentage points its failure rate may exceed the current
    /// version's before it is rolled back.
    pub margin_percent: f64,
    /// First attempts it must have handled before it is judged either
    /// way (across every node).
    pub min_deliveries: u64,
}

/// The smallest share: one event in ten thousand.
pub const MIN_SHARE_PERCENT: f64 = 0.01;
/// The default share: 10%.
pub const DEFAULT_SHARE_PERCENT: f64 = 10.0;
/// The default window: 10 minutes.
pub const DEFAULT_WINDOW_MS: u64 = 10 * 60 * 1000;
/// The default margin: 5 percentage points.
pub const DEFAULT_MARGIN_PERCENT: f64 = 5.0;
/// The default evidence: 50 first attempts.
pub const DEFAULT_MIN_DELIVERIES: u64 = 50;
/// The longest window: 30 days.
pub const MAX_WINDOW_MS: u64 = 30 * 24 * 60 * 60 * 1000;
/// The most evidence a canary may be asked for.
pub const MAX_MIN_DELIVERIES: u64 = 1_000_000_000;

impl Default for CanaryPlan {
    fn default() -> Self {
        Self {
            share_percent: DEFAULT_SHARE_PERCENT,
            window_ms: DEFAULT_WINDOW_MS,
            margin_percent: DEFAULT_MARGIN_PERCENT,
            min_deliveries: DEFAULT_MIN_DELIVERIES,
        }
    }
}

impl CanaryPlan {
    /// Refuses a plan that cannot be judged.
    pub fn validate(&self) -> Result<(), String> {
        if !(MIN_SHARE_PERCENT..=100.0).contains(&self.share_percent) {
            return Err(format!(
                "the canary's share must be {MIN_SHARE_PERCENT}% to 100%, not {}%",
                self.share_percent
            ));
        }
        if !(1..=MAX_WINDOW_MS).contains(&self.window_ms) {
            return Err(format!(
                "the canary's window must be 1 ms to 30 days ({MAX_WINDOW_MS} ms), not {} ms",
                self.window_ms
            ));
        }
        if !(0.0..=100.0).contains(&self.margin_percent) {
            return Err(format!(
                "the canary's margin must be between 0 and 100 percentage points, not {}",
                self.margin_percent
            ));
        }
        if !(1..=MAX_MIN_DELIVERIES).contains(&self.min_deliveries) {
            return Err(format!(
                "the canary's evidence must be 1 to {MAX_MIN_DELIVERIES} deliveries, not {}",
                self.min_deliveries
            ));
        }
        Ok(())
    }

    /// The share in hundredths of a percent, as the runtime routes it.
    pub fn share(&self) -> u32 {
        (self.share_percent * f64::from(SHARE_SCALE) / 100.0).round() as u32
    }
}

/// What a judge decided.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    /// Make the canary the current version.
    Promote(String),
    /// Stop the canary; the current version takes every delivery.
    Rollback(String),
}

/// Judges a canary started at `started` by what both versions did with
/// their first attempts, at `now`:
///
/// * as soon as it has handled `min_deliveries` and fails more than
///   `margin_percent` points more often than the current version, it is
///   rolled back — before its window ends if need be;
/// * at the end of its window, if it has handled `min_deliveries`, it is
///   promoted;
/// * otherwise it runs on (until it has the evidence, or someone promotes
///   or rolls it back).
pub fn judge(
    plan: &CanaryPlan,
    started: Timestamp,
    now: Timestamp,
    counts: CanaryCounts,
) -> Option<Verdict> {
    if counts.canary_handled < plan.min_deliveries {
        return None;
    }
    let (canary, current) = (counts.canary_rate() * 100.0, counts.current_rate() * 100.0);
    let numbers = format!(
        "the canary failed {canary:.1}% of {} first deliveries, the current version {current:.1}% of {}",
        counts.canary_handled, counts.current_handled
    );
    if canary > current + plan.margin_percent {
        return Some(Verdict::Rollback(format!(
            "{numbers}: more than {} points worse",
            plan.margin_percent
        )));
    }
    (now >= started.add_ms(plan.window_ms)).then(|| {
        Verdict::Promote(format!(
            "{numbers}: within {} points at the end of its window",
            plan.margin_percent
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counts(current: (u64, u64), canary: (u64, u64)) -> CanaryCounts {
        CanaryCounts {
            current_handled: current.0,
            current_failed: current.1,
            canary_handled: canary.0,
            canary_failed: canary.1,
        }
    }

    fn plan() -> CanaryPlan {
        CanaryPlan {
            share_percent: 10.0,
            window_ms: 60_000,
            margin_percent: 5.0,
            min_deliveries: 20,
        }
    }

    const T0: Timestamp = Timestamp::EPOCH;

    #[test]
    fn a_canary_worse_by_more_than_the_margin_is_rolled_back_before_its_window_ends() {
        let verdict = judge(&plan(), T0, T0.add_ms(1_000), counts((180, 0), (20, 4)));
        let Some(Verdict::Rollback(reason)) = verdict else {
            panic!("expected a rollback, got {verdict:?}");
        };
        assert_eq!(
            reason,
            "the canary failed 20.0% of 20 first deliveries, the current version 0.0% of 180: more than 5 points worse"
        );
    }

    #[test]
    fn a_canary_within_the_margin_is_promoted_at_the_end_of_its_window_only() {
        let within = counts((100, 2), (25, 1)); // 4% vs 2%
        assert_eq!(judge(&plan(), T0, T0.add_ms(59_999), within), None);
        let verdict = judge(&plan(), T0, T0.add_ms(60_000), within);
        assert!(
            matches!(&verdict, Some(Verdict::Promote(r)) if r.ends_with("within 5 points at the end of its window")),
            "{verdict:?}"
        );
        // Exactly at the margin is within it.
        let at_margin = counts((100, 0), (20, 1)); // 5% vs 0%
        assert!(matches!(
            judge(&plan(), T0, T0.add_ms(60_000), at_margin),
            Some(Verdict::Promote(_))
        ));
    }

    #[test]
    fn without_enough_deliveries_a_canary_is_not_judged_either_way() {
        let few_failing = counts((100, 0), (19, 19));
        assert_eq!(judge(&plan(), T0, T0.add_ms(1_000_000), few_failing), None);
        let none = counts((0, 0), (0, 0));
        assert_eq!(judge(&plan(), T0, T0.add_ms(1_000_000), none), None);
    }

    #[test]
    fn plans_are_checked_and_shares_are_routed_in_hundredths_of_a_percent() {
        assert_eq!(plan().share(), 1_000);
        assert!(plan().validate().is_ok());
        let bad = [
            CanaryPlan {
                share_percent: 0.0,
                ..plan()
            },
            CanaryPlan {
                share_percent: 100.5,
                ..plan()
            },
            CanaryPlan {
                share_percent: 0.001,
                ..plan()
            },
            CanaryPlan {
                window_ms: 0,
                ..plan()
            },
            CanaryPlan {
                margin_percent: -1.0,
                ..plan()
            },
            CanaryPlan {
                min_deliveries: 0,
                ..plan()
            },
        ];
        for p in bad {
            assert!(p.validate().is_err(), "{p:?} should be refused");
        }
    }

    #[test]
    fn history_keeps_the_last_steps() {
        let mut history = Vec::new();
        for version in 0..(HISTORY_STEPS as u64 + 5) {
            push(
                &mut history,
                DeployStep {
                    at: T0,
                    action: StepAction::Swap,
                    version,
                    digest: String::new(),
                    by: None,
                    node: "n".into(),
                    reason: None,
                },
            );
        }
        assert_eq!(history.len(), HISTORY_STEPS);
        assert_eq!(history[0].version, 5);
        assert_eq!(
            serde_json::to_value(StepAction::Promote).unwrap(),
            "promote"
        );
    }
}
