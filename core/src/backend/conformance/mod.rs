//! The shared conformance suite: one async check per behaviour, run against
//! every backend by [`backend_conformance!`](crate::backend_conformance).
//!
//! A check gets a fresh, empty backend and a frozen clock (see [`Harness`]);
//! it never sleeps to reach an expiry, it advances the clock. A backend bug
//! fix starts with a check here that fails.
//!
//! ```ignore
//! async fn factory(clock: SharedClock) -> Option<Arc<dyn Backend>> { … }
//! rheo::backend_conformance!(factory);
//! ```
//!
//! A factory returns `None` (after printing why) to skip, e.g. when a service
//! URL is not set locally. CI sets every URL and sets `REQUIRE_BACKENDS`, so
//! there a missing service fails instead.

#![allow(missing_docs)]

pub mod concurrency;
pub mod flow;
pub mod frontier;
pub mod groups;
pub mod inputs;
pub mod leases;
pub mod lifecycle;
pub mod log;
pub mod model;
pub mod nodes;
pub mod ordering;
pub mod outage;
pub mod quarantine;
pub mod retention;

use std::future::Future;
use std::sync::Arc;

use futures::future::BoxFuture;
use serde_json::Value;

use crate::backend::{Backend, CreateStream, FetchRequest, Partitions, Result};
use crate::clock::{FrozenClock, SharedClock};
use crate::model::{
    ConsumerId, Event, EventId, EventInput, GroupName, GroupSpec, JsonObject, Lag, Lease,
    StreamName, Timestamp,
};

/// Where every check's frozen clock starts: 2026-01-01T00:00:00Z.
pub const START: Timestamp = Timestamp::from_millis(1_767_225_600_000);

/// A fresh backend and the frozen clock it reads.
#[derive(Debug)]
pub struct Harness {
    pub backend: Arc<dyn Backend>,
    pub clock: Arc<FrozenClock>,
    /// For a store whose state outlives the process (a database file):
    /// how to restart on it. `None`: the store has no restart to check.
    pub reopen: Option<Reopen>,
    /// How much smaller the checks that drive many single calls at once
    /// run (1: full size): see [`Opened::slow_writes`].
    pub divisor: usize,
}

/// Restarts a backend on the same store, as a restarted server would: it
/// closes the backend it opened last (the harness's at first) so that
/// nothing of it is used again, and opens a new one on the same store,
/// reading the same clock. Checks that use it switch to the new backend.
#[derive(Clone)]
pub struct Reopen(Arc<dyn Fn() -> BoxFuture<'static, Arc<dyn Backend>> + Send + Sync>);

impl Reopen {
    /// Wraps the closure that closes the last backend and opens the next.
    pub fn new(
        reopen: impl Fn() -> BoxFuture<'static, Arc<dyn Backend>> + Send + Sync + 'static,
    ) -> Self {
        Reopen(Arc::new(reopen))
    }

    /// Closes the last backend and opens the store again.
    pub async fn open(&self) -> Arc<dyn Backend> {
        (self.0)().await
    }
}

impl std::fmt::Debug for Reopen {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Reopen(..)")
    }
}

/// Removes what a test created on a shared service (a PostgreSQL schema, a
/// MongoDB database, Redis keys) when dropped: at the end of the test,
/// whether it passed or failed, so a developer's database does not fill up
/// run after run (docs/testing.md#services). A store's test backend keeps
/// one, shared by every node on the same schema, so it runs when the last
/// of them goes. The removal runs to completion on a thread and runtime of
/// its own (the test's runtime may be shutting down) and is best effort.
pub struct Janitor(Option<Box<dyn FnOnce() -> BoxFuture<'static, ()> + Send + Sync>>);

impl Janitor {
    /// A janitor that runs `remove` when dropped.
    pub fn new<F, Fut>(remove: F) -> Janitor
    where
        F: FnOnce() -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        Janitor(Some(Box::new(move || Box::pin(remove()))))
    }
}

impl Drop for Janitor {
    fn drop(&mut self) {
        let Some(remove) = self.0.take() else { return };
        let removed = std::thread::spawn(move || {
            if let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                runtime.block_on(remove());
            }
        });
        let _ = removed.join();
    }
}

impl std::fmt::Debug for Janitor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Janitor(..)")
    }
}

/// What a backend factory opened: the backend and, for a store that can
/// be restarted on, how ([`Harness::reopen`]). A factory may return a
/// plain `Arc<dyn Backend>` instead.
#[derive(Debug)]
pub struct Opened {
    /// The backend the checks start on.
    pub backend: Arc<dyn Backend>,
    /// How to restart on its store, if it can be.
    pub reopen: Option<Reopen>,
    /// See [`Opened::slow_writes`]; 1 unless set.
    pub divisor: usize,
}

impl Opened {
    /// For a stand-in that commits tens of writes a second (the MongoDB
    /// stand-in, docs/testing.md#where-cis-time-goes): the concurrency
    /// checks that drive a thousand single calls at once run with
    /// `1/divisor` of them — the same consumers, the same races, fewer
    /// rounds.
    pub fn slow_writes(mut self, divisor: usize) -> Self {
        self.divisor = divisor.max(1);
        self
    }
}

impl From<Arc<dyn Backend>> for Opened {
    fn from(backend: Arc<dyn Backend>) -> Self {
        Opened {
            backend,
            reopen: None,
            divisor: 1,
        }
    }
}

impl Harness {
    /// Builds a harness from a backend factory; `None` when the factory skips.
    pub async fn start<F, Fut, O>(factory: F) -> Option<Harness>
    where
        F: FnOnce(SharedClock) -> Fut,
        Fut: Future<Output = Option<O>>,
        O: Into<Opened>,
    {
        let clock = FrozenClock::new(START);
        let opened: Opened = factory(clock.clone()).await?.into();
        Some(Harness {
            backend: opened.backend,
            clock,
            reopen: opened.reopen,
            divisor: opened.divisor,
        })
    }

    /// A harness on `backend` and `clock`, with no restart.
    pub fn on(backend: Arc<dyn Backend>, clock: Arc<FrozenClock>) -> Harness {
        Harness {
            backend,
            clock,
            reopen: None,
            divisor: 1,
        }
    }

    /// `n` of a check's many single calls, divided for a slow stand-in
    /// ([`Opened::slow_writes`]); at least 1.
    pub fn scaled(&self, n: usize) -> usize {
        (n / self.divisor).max(1)
    }

    pub fn b(&self) -> &dyn Backend {
        &*self.backend
    }

    pub fn now(&self) -> Timestamp {
        self.clock.now_ts()
    }

    /// Creates stream `name` with `partitions` partitions.
    pub async fn stream(&self, name: &str, partitions: u32) -> StreamName {
        let name = sn(name);
        self.backend
            .create_stream(CreateStream {
                name: name.clone(),
                partition_count: partitions,
                retention: None,
            })
            .await
            .expect("create stream");
        name
    }

    /// Creates group `name` with default options.
    pub async fn group(&self, stream: &StreamName, name: &str) -> GroupName {
        self.group_with(stream, GroupSpec::new(gn(name))).await
    }

    /// Creates a group from `spec`.
    pub async fn group_with(&self, stream: &StreamName, spec: GroupSpec) -> GroupName {
        let name = spec.name.clone();
        self.backend
            .create_group(stream, spec)
            .await
            .expect("create group");
        name
    }

    /// Appends `n` events with payload `{"n": i}` (i from 0) to partition 0.
    pub async fn append_n(&self, stream: &StreamName, n: usize) -> Vec<Event> {
        self.append_to(stream, 0, n).await
    }

    /// Appends `n` events with payload `{"n": i}` to `partition`.
    pub async fn append_to(&self, stream: &StreamName, partition: u32, n: usize) -> Vec<Event> {
        let inputs = (0..n)
            .map(|i| EventInput {
                partition: Some(partition),
                payload: obj(serde_json::json!({ "n": i })),
                ..EventInput::default()
            })
            .collect();
        self.append_inputs(stream, inputs).await
    }

    /// Appends inputs, expecting success; returns the stored events.
    pub async fn append_inputs(&self, stream: &StreamName, inputs: Vec<EventInput>) -> Vec<Event> {
        self.backend
            .append(stream, inputs)
            .await
            .expect("append")
            .into_iter()
            .map(|a| (*a.event).clone())
            .collect()
    }

    /// A fetch request: consumer `c1`, 30 s leases, all partitions.
    pub fn fetch_req(&self, stream: &StreamName, group: &GroupName, limit: u32) -> FetchRequest {
        FetchRequest {
            stream: stream.clone(),
            group: group.clone(),
            limit,
            consumer_id: cid("c1"),
            lease_ms: 30_000,
            partitions: Partitions::All,
        }
    }

    /// Fetches with [`Harness::fetch_req`], expecting success.
    pub async fn fetch(&self, stream: &StreamName, group: &GroupName, limit: u32) -> Vec<Lease> {
        self.backend
            .fetch(self.fetch_req(stream, group, limit))
            .await
            .expect("fetch")
    }

    /// Fetches with a given consumer and lease duration.
    pub async fn fetch_as(
        &self,
        stream: &StreamName,
        group: &GroupName,
        limit: u32,
        consumer: &str,
        lease_ms: u64,
    ) -> Vec<Lease> {
        let mut req = self.fetch_req(stream, group, limit);
        req.consumer_id = cid(consumer);
        req.lease_ms = lease_ms;
        self.backend.fetch(req).await.expect("fetch")
    }

    pub async fn ack(&self, lease: &Lease) -> Result<()> {
        self.backend
            .ack(&lease.stream, &lease.group, lease.target())
            .await
    }

    pub async fn nack(&self, lease: &Lease, reason: &str, delay_ms: Option<u64>) -> Result<()> {
        self.backend
            .nack(
                &lease.stream,
                &lease.group,
                lease.target(),
                Some(reason.to_owned()),
                delay_ms,
            )
            .await
    }

    pub async fn reject(&self, lease: &Lease, reason: &str) -> Result<()> {
        self.backend
            .reject(
                &lease.stream,
                &lease.group,
                lease.target(),
                Some(reason.to_owned()),
            )
            .await
    }

    /// Lag over all partitions, expecting success.
    pub async fn lag(&self, stream: &StreamName, group: &GroupName) -> Lag {
        self.backend
            .lag(stream, group, &Partitions::All)
            .await
            .expect("lag")
    }
}

impl FrozenClock {
    /// The frozen clock's current time (named apart from `Clock::now` so
    /// checks need not import the trait).
    pub fn now_ts(&self) -> Timestamp {
        crate::clock::Clock::now(self)
    }
}

pub fn sn(s: &str) -> StreamName {
    StreamName::parse(s).expect("valid stream name")
}

pub fn gn(s: &str) -> GroupName {
    GroupName::parse(s).expect("valid group name")
}

pub fn eid(s: &str) -> EventId {
    EventId::parse(s).expect("valid event id")
}

pub fn cid(s: &str) -> ConsumerId {
    ConsumerId::parse(s).expect("valid consumer id")
}

/// A JSON object from a `json!` value.
pub fn obj(v: Value) -> JsonObject {
    v.as_object().expect("a JSON object").clone()
}

/// The URL of an external service for tests, from `var`. When it is not
/// set the caller should skip — except when `REQUIRE_BACKENDS` (a comma
/// list, as CI sets it) names `backend`: then a missing URL is a failure,
/// so a skip can never hide a regression.
pub fn service_url(var: &str, backend: &str) -> Option<String> {
    match std::env::var(var) {
        Ok(url) if !url.trim().is_empty() => Some(url),
        _ => {
            let required = std::env::var("REQUIRE_BACKENDS").unwrap_or_default();
            if required.split(',').any(|b| b.trim() == backend) {
                panic!("{var} is not set, but REQUIRE_BACKENDS lists {backend}");
            }
            eprintln!("skipping {backend} test: set {var} to run it");
            None
        }
    }
}

/// The `code()` of an error result, for concise asserts.
pub fn code<T: std::fmt::Debug>(r: Result<T>) -> &'static str {
    match r {
        Ok(v) => panic!("expected an error, got Ok({v:?})"),
        Err(e) => e.code(),
    }
}

/// Calls `$callback!($prefix [area::check, …])` with every check.
#[doc(hidden)]
#[macro_export]
macro_rules! __conformance_list {
    ($callback:ident ! ($($prefix:tt)*)) => {
        $crate::$callback! { $($prefix)* [
            // streams and the event log
            log::ping_succeeds,
            log::migrating_again_applies_nothing,
            log::a_migrated_store_reports_every_migration_applied,
            log::create_stream_returns_the_stream,
            log::create_stream_twice_is_already_exists,
            log::create_stream_with_bad_partition_count_is_refused,
            log::list_streams_is_sorted_by_name,
            log::unknown_stream_is_stream_not_found_everywhere,
            log::stream_is_checked_before_group,
            log::append_batch_assigns_contiguous_sequences,
            log::append_sets_fields_and_generates_ids,
            log::append_keeps_explicit_id_and_timestamp,
            log::append_empty_batch_is_empty,
            log::append_with_partition_out_of_range_writes_nothing,
            log::append_with_invalid_field_writes_nothing,
            log::append_known_id_returns_the_stored_event,
            log::append_duplicate_ids_within_a_batch,
            log::append_routes_keys_like_kafka,
            log::same_key_lands_in_one_partition_contiguously,
            log::per_partition_sequences_are_independent,
            log::high_watermarks_track_appends,
            log::read_pages_by_sequence,
            log::read_validates_limit_and_partition,
            log::events_are_immutable_after_consumption,
            log::nested_payload_and_metadata_are_preserved,
            log::query_by_type_and_payload_field,
            log::query_order_desc_with_limit,
            log::query_sequence_bounds,
            log::query_pages_with_cursor,
            log::query_paging_never_skips_or_repeats,
            log::query_paging_across_partitions,
            log::query_by_lineage_metadata,
            log::query_time_range_is_inclusive,
            log::query_filters_on_key_partition_id_and_paths,
            log::query_operators,
            log::query_order_by_timestamp_pages,
            log::query_refuses_bad_limit_and_cursor,
            log::query_unknown_stream_is_stream_not_found,
            log::query_does_not_touch_group_state,
            // groups, fetch, leases, settles
            groups::create_group_twice_is_already_exists,
            groups::list_groups_is_sorted,
            groups::create_group_validates_options,
            groups::groups_are_independent,
            groups::fetch_respects_limit,
            groups::first_lease_has_its_fields_and_ack_finishes_it,
            groups::held_leases_are_not_fetched_again,
            groups::fetch_with_no_partitions_selects_nothing,
            groups::fetch_returns_sorted_leases_with_distinct_ids,
            groups::fetch_validates_its_input,
            groups::fetch_is_fair_across_partitions,
            groups::fetch_reclaims_each_partitions_lowest_first,
            groups::fetch_partition_scope,
            groups::leases_carry_a_receipt,
            groups::expired_lease_is_redelivered_with_the_next_attempt,
            groups::stale_lease_is_fenced_for_every_operation,
            groups::duplicate_ack_is_stale,
            groups::renew_extends_the_expiry,
            groups::renew_after_ack_is_stale,
            groups::renew_many_has_per_item_results,
            groups::forged_lease_is_stale,
            groups::receipt_mismatch_is_detected,
            groups::expiry_alone_does_not_fence,
            groups::poison_guard_dead_letters_an_expired_last_attempt,
            groups::retry_then_reject,
            groups::max_attempts_one_dead_letters_the_first_nack,
            groups::max_attempts_three_allows_three_deliveries,
            groups::max_attempts_two_moves_on_to_the_next_event,
            groups::nack_delay_defers_redelivery,
            groups::group_backoff_schedule_applies_to_nacks,
            groups::nack_delay_over_the_maximum_is_refused,
            groups::batch_settle_has_per_item_results,
            groups::batch_settle_with_several_nacks_in_one_partition,
            groups::batch_settle_after_a_settle_is_stale_whatever_the_receipt,
            groups::batch_settle_over_the_maximum_is_refused,
            groups::dead_letters_list_with_reason_and_event,
            groups::dead_letters_paginate_in_sequence_order,
            groups::dead_letters_unknown_cursor_is_cursor_not_found,
            groups::group_info_reports_counts,
            groups::redrive_selected_dead_letters_with_fresh_attempts,
            groups::redrive_all_dead_letters,
            groups::an_event_named_twice_is_reopened_once,
            // what is out: a group's leases
            leases::leases_list_what_is_out_with_holder_attempt_and_expiry,
            leases::settled_leases_leave_the_list,
            leases::leases_page_in_partition_then_sequence_order,
            leases::an_expired_lease_is_listed_as_expired_until_claimed_again,
            leases::a_poisoned_lease_leaves_the_list_when_dead_lettered,
            leases::replay_reset_and_parked_deliveries_are_not_out,
            leases::leases_validate_the_limit_and_find_the_group,
            // frontier, lag, start points, replay, reset
            frontier::hole_blocks_the_frontier_until_filled,
            frontier::frontier_stops_before_the_only_unsettled_event,
            frontier::reject_closes_a_hole,
            frontier::frontiers_are_per_partition,
            frontier::lag_with_no_partitions_is_zero,
            frontier::lag_counts_pending_inflight_waiting_retry_and_age,
            frontier::frontier_starts_at_start_after,
            frontier::frontier_starts_at_start_at,
            frontier::start_after_map_per_partition,
            frontier::start_positions_pick_the_first_event,
            frontier::start_at_after_the_last_event_sees_only_new_events,
            frontier::replay_from_sequence_redelivers_acked_events,
            frontier::replay_rewinds_the_frontier,
            frontier::replay_partition_scope,
            frontier::replay_event_ids,
            frontier::replay_unknown_event_id_is_refused,
            frontier::replay_from_time,
            frontier::replay_by_query,
            frontier::replay_makes_the_current_holder_stale,
            frontier::replay_changes_eligibility_not_content,
            frontier::replay_after_reset_recreates_the_delivery,
            frontier::replay_before_a_start_past_the_end_reopens_only_events,
            frontier::replayed_events_before_the_start_are_claimed_lowest_first,
            frontier::replay_keeps_attempts_around_the_start,
            frontier::reset_requires_confirm,
            frontier::reset_redelivers_from_the_start_with_attempt_one,
            frontier::reset_is_scoped_to_partitions,
            frontier::reset_makes_leases_stale_and_clears_dead_letters,
            frontier::reset_to_start_after_skips_history,
            frontier::redrive_rewinds_the_frontier,
            frontier::redrive_after_the_group_moved_on,
            // concurrency and wake-ups
            concurrency::concurrent_fetchers_never_share_an_event,
            concurrency::concurrent_fetch_rounds_never_duplicate,
            concurrency::parallel_acks_never_lose_a_frontier_step,
            concurrency::competing_consumers_ack_every_event_exactly_once,
            concurrency::concurrent_appends_keep_sequences_contiguous,
            concurrency::append_wakes_subscribers,
            concurrency::immediate_nack_wakes_subscribers,
            concurrency::next_due_reports_expiry_and_retry_times,
            concurrency::racing_settles_of_one_lease_let_exactly_one_win,
            // ordering per key and per partition
            ordering::groups_show_their_ordering,
            ordering::key_ordering_holds_a_keys_next_event_until_it_settles,
            ordering::key_ordering_expiry_hands_out_the_same_head_again,
            ordering::key_ordering_nack_with_delay_holds_back_only_its_key,
            ordering::key_ordering_dead_letters_a_stuck_head_and_moves_on,
            ordering::key_ordering_replay_reopens_each_key_in_order,
            ordering::key_ordering_replay_waits_for_the_delivery_out,
            ordering::key_ordering_redrive_goes_back_in_key_order,
            ordering::key_ordering_is_fair_across_keys,
            ordering::partition_ordering_hands_out_each_partitions_lowest_alone,
            ordering::competing_consumers_never_hold_two_of_one_key,
            ordering::a_reset_of_every_partition_changes_the_ordering,
            ordering::a_partition_held_by_its_gates_leaves_its_share_to_the_others,
            ordering::an_ordered_fetch_is_as_long_as_the_claimable_heads_allow,
            ordering::key_ordering_a_retry_goes_behind_a_lower_reopened_delivery,
            ordering::key_ordering_a_replay_counts_only_what_it_reopened,
            ordering::key_ordering_a_poisoned_head_lets_a_due_retry_out_in_the_same_fetch,
            // quarantine of a failing key
            quarantine::quarantine_needs_an_ordering_and_shows_on_the_group,
            quarantine::a_head_out_of_attempts_parks_its_key_until_released,
            quarantine::the_poison_guard_parks_too_and_a_skip_dead_letters_the_head,
            quarantine::what_is_not_gated_is_dead_lettered_and_rejects_still_dead_letter,
            quarantine::partition_ordering_parks_the_whole_partition,
            // flow control: at most N of a key
            flow::key_concurrency_needs_no_ordering_and_shows_on_the_group,
            flow::key_concurrency_keeps_at_most_n_of_a_key_out,
            flow::key_concurrency_dead_letters_free_a_slot,
            flow::key_concurrency_replay_and_redrive_wait_for_a_free_slot,
            flow::competing_consumers_never_hold_more_than_n_of_a_key,
            flow::a_reset_of_every_partition_changes_the_flow,
            // flow control: at most R claims of a key a second
            flow::key_rate_is_checked_and_shows_on_the_group,
            flow::key_rate_lets_a_burst_through_then_one_claim_an_interval,
            flow::key_rate_paces_retries_and_counts_expired_leases,
            flow::key_rate_paces_the_heads_of_an_ordering_and_of_key_concurrency,
            flow::key_rate_keeps_sequence_order_past_paced_deliveries,
            flow::competing_consumers_share_one_bucket_per_key,
            // inputs at the edge of what every store holds
            inputs::start_points_beyond_the_maximum_are_refused,
            inputs::start_after_the_maximum_waits_for_nothing,
            inputs::reset_beyond_the_maximum_is_refused_and_changes_nothing,
            inputs::positions_beyond_the_maximum_are_refused_everywhere,
            inputs::payload_numbers_are_kept_exactly,
            // deleting streams and groups
            lifecycle::deletes_require_confirm,
            lifecycle::deleting_what_does_not_exist_is_not_found,
            lifecycle::a_deleted_stream_is_gone_everywhere,
            lifecycle::a_stream_created_again_starts_empty,
            lifecycle::deleting_a_group_leaves_the_stream_and_other_groups,
            lifecycle::a_group_created_again_starts_afresh,
            // retention
            retention::retention_by_count_keeps_the_newest_events,
            retention::retention_by_age_removes_old_events,
            retention::a_group_behind_the_log_start_moves_to_it_counting_what_it_skipped,
            retention::a_settle_of_a_removed_event_is_event_removed,
            retention::dead_letters_keep_what_retention_removed,
            retention::interest_removes_what_every_group_settled,
            retention::below_the_log_start_everything_clamps_to_it,
            retention::a_removed_head_lets_its_keys_next_event_out,
            retention::retention_is_set_changed_and_cleared,
            // a randomized run against a reference model of the semantics
            model::random_operations_match_the_reference_model,
        ] }
    };
}

/// Expands to one `#[tokio::test]` per conformance check for a backend
/// factory `async fn(SharedClock) -> Option<Arc<dyn Backend>>`.
#[macro_export]
macro_rules! backend_conformance {
    ($factory:path) => {
        $crate::__conformance_list!(__conformance_tests!($factory));
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __conformance_tests {
    ($factory:path [ $($area:ident :: $check:ident),* $(,)? ]) => {
        $(
            #[::tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn $check() {
                if let Some(h) = $crate::backend::conformance::Harness::start($factory).await {
                    $crate::backend::conformance::$area::$check(&h).await;
                }
            }
        )*
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __conformance_names {
    ([ $($area:ident :: $check:ident),* $(,)? ]) => {
        &[$(concat!(stringify!($area), "::", stringify!($check))),*]
    };
}

/// Every check's name, `area::check`.
pub const CHECKS: &[&str] = crate::__conformance_list!(__conformance_names!());

#[cfg(test)]
mod tests {
    use super::CHECKS;

    #[test]
    fn the_suite_has_at_least_seventy_distinct_checks() {
        let mut names: Vec<_> = CHECKS
            .iter()
            .map(|c| c.split("::").nth(1).unwrap())
            .collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), CHECKS.len(), "check names must be unique");
        assert!(CHECKS.len() >= 70, "only {} checks", CHECKS.len());
    }
}
