//! Conformance checks: Concurrent callers and wake-ups.

#![allow(clippy::todo)]

use super::Harness;

pub async fn concurrent_fetchers_never_share_an_event(h: &Harness) {
    let _ = h;
    todo!()
}

pub async fn concurrent_fetch_rounds_never_duplicate(h: &Harness) {
    let _ = h;
    todo!()
}

pub async fn parallel_acks_never_lose_a_frontier_step(h: &Harness) {
    let _ = h;
    todo!()
}

pub async fn competing_consumers_ack_every_event_exactly_once(h: &Harness) {
    let _ = h;
    todo!()
}

pub async fn concurrent_appends_keep_sequences_contiguous(h: &Harness) {
    let _ = h;
    todo!()
}

pub async fn append_wakes_subscribers(h: &Harness) {
    let _ = h;
    todo!()
}

pub async fn immediate_nack_wakes_subscribers(h: &Harness) {
    let _ = h;
    todo!()
}

pub async fn next_due_reports_expiry_and_retry_times(h: &Harness) {
    let _ = h;
    todo!()
}
