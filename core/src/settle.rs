//! The settle policy: what the runtime does with a handler's result, and
//! with a settle call that failed (`docs/handlers.md#outcomes`).
//!
//! Both are pure functions over values, so the whole table is tested here
//! without a backend, a runtime or a WebAssembly engine.

use std::time::Duration;

use crate::backend::Error;
use crate::model::MAX_DELAY_MS;

/// What a handler invocation produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HandlerOutcome {
    /// The handler returned `ack`.
    Ack,
    /// The handler returned `retry`.
    Retry {
        /// Why.
        reason: String,
        /// Requested delay; `None` uses the group's backoff.
        delay_ms: Option<u64>,
    },
    /// The handler returned `reject`.
    Reject {
        /// Why.
        reason: String,
    },
    /// The handler did not return: it trapped, ran out of time or memory.
    Failed(HandlerFailure),
}

/// How a handler invocation failed to return an outcome.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HandlerFailure {
    /// A trap or panic, with the engine's message.
    Trap(String),
    /// Interrupted at its deadline.
    Timeout {
        /// The deadline it exceeded.
        timeout_ms: u64,
    },
    /// Stopped at its memory cap.
    MemoryLimit {
        /// The cap.
        memory_mb: u64,
    },
    /// Ran out of fuel.
    OutOfFuel,
    /// `handle-batch` returned a list of outcomes whose length is not the
    /// number of deliveries it was given (`docs/handlers.md#batches`).
    BatchMismatch {
        /// Deliveries in the call.
        deliveries: usize,
        /// Outcomes it returned.
        outcomes: usize,
    },
}

impl HandlerFailure {
    /// The reason stored with the nack: `handler_error: …`.
    pub fn reason(&self) -> String {
        match self {
            HandlerFailure::Trap(message) => format!("handler_error: trap: {message}"),
            HandlerFailure::Timeout { timeout_ms } => {
                format!("handler_error: timed out after {timeout_ms} ms")
            }
            HandlerFailure::MemoryLimit { memory_mb } => {
                format!("handler_error: memory limit of {memory_mb} MiB exceeded")
            }
            HandlerFailure::OutOfFuel => "handler_error: out of fuel".to_owned(),
            HandlerFailure::BatchMismatch {
                deliveries,
                outcomes,
            } => format!(
                "handler_error: handle-batch returned {outcomes} outcomes for {deliveries} deliveries"
            ),
        }
    }
}

/// The settle call the runtime makes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Ack the lease.
    Ack,
    /// Nack it; `delay_ms: None` means the group's backoff.
    Nack {
        /// Stored reason.
        reason: String,
        /// Explicit delay.
        delay_ms: Option<u64>,
    },
    /// Reject it (dead letter).
    Reject {
        /// Stored reason.
        reason: String,
    },
}

/// The policy's answer for one handler outcome.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    /// What to settle.
    pub action: Action,
    /// The instance that ran the handler must not be used again.
    pub discard_instance: bool,
}

/// Maps a handler outcome to a settle action. A guest's retry delay is
/// clamped to `max_retry_delay_ms` (and never beyond [`MAX_DELAY_MS`]).
pub fn decide(outcome: &HandlerOutcome, max_retry_delay_ms: u64) -> Decision {
    let cap = max_retry_delay_ms.min(MAX_DELAY_MS);
    match outcome {
        HandlerOutcome::Ack => Decision {
            action: Action::Ack,
            discard_instance: false,
        },
        HandlerOutcome::Retry { reason, delay_ms } => Decision {
            action: Action::Nack {
                reason: reason.clone(),
                delay_ms: delay_ms.map(|d| d.min(cap)),
            },
            discard_instance: false,
        },
        HandlerOutcome::Reject { reason } => Decision {
            action: Action::Reject {
                reason: reason.clone(),
            },
            discard_instance: false,
        },
        HandlerOutcome::Failed(failure) => Decision {
            action: Action::Nack {
                reason: failure.reason(),
                delay_ms: None,
            },
            discard_instance: true,
        },
    }
}

/// What to do when a settle call itself failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SettleFailure {
    /// The lease was lost (superseded, its group is gone, or retention
    /// removed its event): forget it, no nack.
    LeaseLost,
    /// The outcome is unknown or the store is down: leave the lease to
    /// expire. If the write did commit, fencing keeps it safe; if it did
    /// not, the delivery comes back after expiry.
    LeaveToExpire,
    /// A definite failure: nack for immediate redelivery.
    NackNow {
        /// Stored reason.
        reason: String,
    },
}

/// Classifies a failed settle call.
pub fn on_settle_error(error: &Error) -> SettleFailure {
    match error {
        Error::StaleLease
        | Error::ReceiptMismatch
        | Error::EventRemoved(_)
        | Error::StreamNotFound(_)
        | Error::GroupNotFound { .. } => SettleFailure::LeaseLost,
        // A full store refuses the nack as well: the lease expires instead.
        Error::BackendUnavailable(_) | Error::Ambiguous(_) | Error::StorageFull(_) => {
            SettleFailure::LeaveToExpire
        }
        other => SettleFailure::NackNow {
            reason: format!("settle_failed: {}: {other}", other.code()),
        },
    }
}

/// First delay after a failed fetch.
pub const FETCH_BACKOFF_START: Duration = Duration::from_millis(100);
/// Longest delay between failed fetches.
pub const FETCH_BACKOFF_MAX: Duration = Duration::from_secs(5);

/// Delay before the next fetch after `consecutive_failures` failed fetches
/// in a row: none, then 100 ms doubling up to 5 s.
pub fn fetch_backoff(consecutive_failures: u32) -> Duration {
    if consecutive_failures == 0 {
        return Duration::ZERO;
    }
    let factor = 1u32
        .checked_shl(consecutive_failures - 1)
        .unwrap_or(u32::MAX);
    FETCH_BACKOFF_START
        .checked_mul(factor)
        .map_or(FETCH_BACKOFF_MAX, |d| d.min(FETCH_BACKOFF_MAX))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{GroupName, StreamName, ValidationError};

    fn nack(reason: &str, delay_ms: Option<u64>) -> Action {
        Action::Nack {
            reason: reason.into(),
            delay_ms,
        }
    }

    #[test]
    fn every_outcome_maps_to_its_row() {
        let rows: Vec<(HandlerOutcome, Action, bool)> = vec![
            (HandlerOutcome::Ack, Action::Ack, false),
            (
                HandlerOutcome::Retry {
                    reason: "busy".into(),
                    delay_ms: Some(250),
                },
                nack("busy", Some(250)),
                false,
            ),
            (
                HandlerOutcome::Retry {
                    reason: "busy".into(),
                    delay_ms: None,
                },
                nack("busy", None),
                false,
            ),
            (
                HandlerOutcome::Retry {
                    reason: "later".into(),
                    delay_ms: Some(u64::MAX),
                },
                nack("later", Some(60_000)),
                false,
            ),
            (
                HandlerOutcome::Reject {
                    reason: "poison".into(),
                },
                Action::Reject {
                    reason: "poison".into(),
                },
                false,
            ),
            (
                HandlerOutcome::Failed(HandlerFailure::Trap("unreachable".into())),
                nack("handler_error: trap: unreachable", None),
                true,
            ),
            (
                HandlerOutcome::Failed(HandlerFailure::Timeout { timeout_ms: 50 }),
                nack("handler_error: timed out after 50 ms", None),
                true,
            ),
            (
                HandlerOutcome::Failed(HandlerFailure::MemoryLimit { memory_mb: 16 }),
                nack("handler_error: memory limit of 16 MiB exceeded", None),
                true,
            ),
            (
                HandlerOutcome::Failed(HandlerFailure::OutOfFuel),
                nack("handler_error: out of fuel", None),
                true,
            ),
        ];
        for (outcome, action, discard) in rows {
            let decision = decide(&outcome, 60_000);
            assert_eq!(decision.action, action, "{outcome:?}");
            assert_eq!(decision.discard_instance, discard, "{outcome:?}");
        }
    }

    #[test]
    fn retry_delays_never_exceed_the_global_maximum() {
        let d = decide(
            &HandlerOutcome::Retry {
                reason: "x".into(),
                delay_ms: Some(MAX_DELAY_MS * 2),
            },
            u64::MAX,
        );
        assert_eq!(d.action, nack("x", Some(MAX_DELAY_MS)));
    }

    #[test]
    fn every_settle_error_maps_to_its_row() {
        let s = StreamName::parse("s").unwrap();
        let g = GroupName::parse("g").unwrap();
        let lost = [
            Error::StaleLease,
            Error::ReceiptMismatch,
            Error::EventRemoved("e1".into()),
            Error::StreamNotFound(s.clone()),
            Error::GroupNotFound {
                stream: s,
                group: g,
            },
        ];
        for e in &lost {
            assert_eq!(on_settle_error(e), SettleFailure::LeaseLost, "{e:?}");
        }
        for e in [
            Error::BackendUnavailable("down".into()),
            Error::Ambiguous("timeout".into()),
            Error::StorageFull("database or disk is full".into()),
        ] {
            assert_eq!(on_settle_error(&e), SettleFailure::LeaveToExpire, "{e:?}");
        }
        let failed = on_settle_error(&Error::Failed("disk full".into()));
        assert_eq!(
            failed,
            SettleFailure::NackNow {
                reason: "settle_failed: failed: backend failed: disk full".into()
            }
        );
        let invalid = on_settle_error(&Error::Invalid(ValidationError::new("delay_ms", "too big")));
        assert!(matches!(invalid, SettleFailure::NackNow { .. }));
    }

    #[test]
    fn fetch_backoff_doubles_from_100ms_and_caps_at_5s() {
        let ms: Vec<u128> = (0..10).map(|n| fetch_backoff(n).as_millis()).collect();
        assert_eq!(ms, [0, 100, 200, 400, 800, 1600, 3200, 5000, 5000, 5000]);
        assert_eq!(fetch_backoff(u32::MAX), FETCH_BACKOFF_MAX);
    }
}
