//! Two `rheo serve` processes on one Redis (`TEST_REDIS_URL`), the same
//! handler deployed to both, consume one group together: every event is
//! acked exactly once, by one server or the other, and both take part
//! (`support::two_servers_ack_each_event_once`).

use crate::support;

use std::time::Duration;

const EVENTS: usize = 5_000;

#[test]
fn two_servers_on_one_redis_ack_every_event_exactly_once() {
    let Some(prefix) = rheo_e2e::RedisPrefix::fresh() else {
        return;
    };
    let backend = prefix.url().to_owned();
    support::two_servers_ack_each_event_once(backend, EVENTS, Duration::from_secs(60));
}
