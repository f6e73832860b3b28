//! Two `rheo serve` processes on one Redis (`TEST_REDIS_URL`), the same
//! handler deployed to both, consume one group together: every event is
//! acked exactly once, by one server or the other, and both take part
//! (`support::two_servers_ack_each_event_once`).

mod support;

use std::time::Duration;

use rheo_e2e::service_url;
use support::{delete_redis_keys, rand_suffix};

const EVENTS: usize = 5_000;

#[test]
fn two_servers_on_one_redis_ack_every_event_exactly_once() {
    let Some(url) = service_url("TEST_REDIS_URL", "redis") else {
        return;
    };
    let prefix = format!("rheo_e2e_{}_{:08x}", std::process::id(), rand_suffix());
    let sep = if url.contains('?') { '&' } else { '?' };
    let backend = format!("{url}{sep}prefix={prefix}");
    support::two_servers_ack_each_event_once(backend, EVENTS, Duration::from_secs(60));
    delete_redis_keys(&url, &prefix);
}
