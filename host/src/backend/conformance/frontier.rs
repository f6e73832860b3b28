//! Conformance checks: Frontier and lag, start points, replay and reset.

#![allow(clippy::todo)]

use super::Harness;

pub async fn hole_blocks_the_frontier_until_filled(h: &Harness) {
    let _ = h;
    todo!()
}

pub async fn frontier_stops_before_the_only_unsettled_event(h: &Harness) {
    let _ = h;
    todo!()
}

pub async fn reject_closes_a_hole(h: &Harness) {
    let _ = h;
    todo!()
}

pub async fn frontiers_are_per_partition(h: &Harness) {
    let _ = h;
    todo!()
}

pub async fn lag_with_no_partitions_is_zero(h: &Harness) {
    let _ = h;
    todo!()
}

pub async fn lag_counts_pending_inflight_waiting_retry_and_age(h: &Harness) {
    let _ = h;
    todo!()
}

pub async fn frontier_starts_at_start_after(h: &Harness) {
    let _ = h;
    todo!()
}

pub async fn frontier_starts_at_start_at(h: &Harness) {
    let _ = h;
    todo!()
}

pub async fn start_after_map_per_partition(h: &Harness) {
    let _ = h;
    todo!()
}

pub async fn start_positions_pick_the_first_event(h: &Harness) {
    let _ = h;
    todo!()
}

pub async fn start_at_after_the_last_event_sees_only_new_events(h: &Harness) {
    let _ = h;
    todo!()
}

pub async fn replay_from_sequence_redelivers_acked_events(h: &Harness) {
    let _ = h;
    todo!()
}

pub async fn replay_rewinds_the_frontier(h: &Harness) {
    let _ = h;
    todo!()
}

pub async fn replay_partition_scope(h: &Harness) {
    let _ = h;
    todo!()
}

pub async fn replay_event_ids(h: &Harness) {
    let _ = h;
    todo!()
}

pub async fn replay_unknown_event_id_is_refused(h: &Harness) {
    let _ = h;
    todo!()
}

pub async fn replay_from_time(h: &Harness) {
    let _ = h;
    todo!()
}

pub async fn replay_by_query(h: &Harness) {
    let _ = h;
    todo!()
}

pub async fn replay_makes_the_current_holder_stale(h: &Harness) {
    let _ = h;
    todo!()
}

pub async fn replay_changes_eligibility_not_content(h: &Harness) {
    let _ = h;
    todo!()
}

pub async fn replay_after_reset_recreates_the_delivery(h: &Harness) {
    let _ = h;
    todo!()
}

pub async fn reset_requires_confirm(h: &Harness) {
    let _ = h;
    todo!()
}

pub async fn reset_redelivers_from_the_start_with_attempt_one(h: &Harness) {
    let _ = h;
    todo!()
}

pub async fn reset_is_scoped_to_partitions(h: &Harness) {
    let _ = h;
    todo!()
}

pub async fn reset_makes_leases_stale_and_clears_dead_letters(h: &Harness) {
    let _ = h;
    todo!()
}

pub async fn reset_to_start_after_skips_history(h: &Harness) {
    let _ = h;
    todo!()
}

pub async fn redrive_rewinds_the_frontier(h: &Harness) {
    let _ = h;
    todo!()
}
