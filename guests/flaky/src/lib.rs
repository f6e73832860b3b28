//! Fails on purpose until a given attempt, then acks: shows retries.
//!
//! Config: `succeed_on_attempt` (default 3) — the first attempt that acks;
//! `retry_delay_ms` (optional) — the delay asked for with each retry
//! (without it the group's backoff applies).

use rheo_guest::{Delivery, Outcome};

fn handle(delivery: Delivery) -> Outcome {
    let succeed_on: u32 = rheo_guest::config_parse("succeed_on_attempt").unwrap_or(3);
    if delivery.attempt >= succeed_on {
        return Outcome::Ack;
    }
    let reason = format!("flaky: attempt {} of {succeed_on} needed", delivery.attempt);
    match rheo_guest::config_parse::<u64>("retry_delay_ms") {
        Some(delay_ms) => Outcome::retry_after(reason, delay_ms),
        None => Outcome::retry(reason),
    }
}

rheo_guest::handler!(handle);
