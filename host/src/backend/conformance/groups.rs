//! Conformance checks: Groups, fetch, leases and fencing, nack/reject, dead letters, batch settle, redrive.

#![allow(clippy::todo)]

use super::Harness;

pub async fn create_group_twice_is_already_exists(h: &Harness) {
    let _ = h;
    todo!()
}

pub async fn list_groups_is_sorted(h: &Harness) {
    let _ = h;
    todo!()
}

pub async fn create_group_validates_options(h: &Harness) {
    let _ = h;
    todo!()
}

pub async fn groups_are_independent(h: &Harness) {
    let _ = h;
    todo!()
}

pub async fn fetch_respects_limit(h: &Harness) {
    let _ = h;
    todo!()
}

pub async fn first_lease_has_its_fields_and_ack_finishes_it(h: &Harness) {
    let _ = h;
    todo!()
}

pub async fn held_leases_are_not_fetched_again(h: &Harness) {
    let _ = h;
    todo!()
}

pub async fn fetch_with_no_partitions_selects_nothing(h: &Harness) {
    let _ = h;
    todo!()
}

pub async fn fetch_returns_sorted_leases_with_distinct_ids(h: &Harness) {
    let _ = h;
    todo!()
}

pub async fn fetch_validates_its_input(h: &Harness) {
    let _ = h;
    todo!()
}

pub async fn fetch_is_fair_across_partitions(h: &Harness) {
    let _ = h;
    todo!()
}

pub async fn fetch_partition_scope(h: &Harness) {
    let _ = h;
    todo!()
}

pub async fn leases_carry_a_receipt(h: &Harness) {
    let _ = h;
    todo!()
}

pub async fn expired_lease_is_redelivered_with_the_next_attempt(h: &Harness) {
    let _ = h;
    todo!()
}

pub async fn stale_lease_is_fenced_for_every_operation(h: &Harness) {
    let _ = h;
    todo!()
}

pub async fn duplicate_ack_is_stale(h: &Harness) {
    let _ = h;
    todo!()
}

pub async fn renew_extends_the_expiry(h: &Harness) {
    let _ = h;
    todo!()
}

pub async fn renew_after_ack_is_stale(h: &Harness) {
    let _ = h;
    todo!()
}

pub async fn forged_lease_is_stale(h: &Harness) {
    let _ = h;
    todo!()
}

pub async fn receipt_mismatch_is_detected(h: &Harness) {
    let _ = h;
    todo!()
}

pub async fn expiry_alone_does_not_fence(h: &Harness) {
    let _ = h;
    todo!()
}

pub async fn poison_guard_dead_letters_an_expired_last_attempt(h: &Harness) {
    let _ = h;
    todo!()
}

pub async fn retry_then_reject(h: &Harness) {
    let _ = h;
    todo!()
}

pub async fn max_attempts_one_dead_letters_the_first_nack(h: &Harness) {
    let _ = h;
    todo!()
}

pub async fn max_attempts_three_allows_three_deliveries(h: &Harness) {
    let _ = h;
    todo!()
}

pub async fn max_attempts_two_moves_on_to_the_next_event(h: &Harness) {
    let _ = h;
    todo!()
}

pub async fn nack_delay_defers_redelivery(h: &Harness) {
    let _ = h;
    todo!()
}

pub async fn group_backoff_schedule_applies_to_nacks(h: &Harness) {
    let _ = h;
    todo!()
}

pub async fn nack_delay_over_the_maximum_is_refused(h: &Harness) {
    let _ = h;
    todo!()
}

pub async fn batch_settle_has_per_item_results(h: &Harness) {
    let _ = h;
    todo!()
}

pub async fn batch_settle_over_the_maximum_is_refused(h: &Harness) {
    let _ = h;
    todo!()
}

pub async fn dead_letters_list_with_reason_and_event(h: &Harness) {
    let _ = h;
    todo!()
}

pub async fn dead_letters_paginate_in_sequence_order(h: &Harness) {
    let _ = h;
    todo!()
}

pub async fn dead_letters_unknown_cursor_is_cursor_not_found(h: &Harness) {
    let _ = h;
    todo!()
}

pub async fn group_info_reports_counts(h: &Harness) {
    let _ = h;
    todo!()
}

pub async fn redrive_selected_dead_letters_with_fresh_attempts(h: &Harness) {
    let _ = h;
    todo!()
}

pub async fn redrive_all_dead_letters(h: &Harness) {
    let _ = h;
    todo!()
}
