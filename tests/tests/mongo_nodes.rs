//! Two `rheo serve` processes on one MongoDB database (`TEST_MONGODB_URL`,
//! a fresh database per run), the same handler deployed to both, consume
//! one group together: every event is acked exactly once, by one server or
//! the other, none is leased to both (nothing retried, lost or dead), and
//! both take part.
//!
//! The database is left behind: the tests crate has no MongoDB client, and
//! its name is random (`rheo_e2e_<pid>_<hex>`), so runs never meet.

use crate::support;

use std::time::Duration;

use rheo_e2e::service_url;
use support::rand_suffix;

/// Enough for both servers to contend for every partition many times over;
/// few enough that the single-threaded stand-in, shared with the library
/// tests in CI, gets through them in a few minutes.
const EVENTS: usize = 1_000;

/// `url` with its path (the database) replaced by `database`, its options
/// kept: `mongodb://h:p/?directConnection=true` →
/// `mongodb://h:p/<database>?directConnection=true`.
fn with_database(url: &str, database: &str) -> String {
    let (scheme, rest) = url.split_once("://").expect("a mongodb:// URL");
    let hosts_end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (hosts, tail) = rest.split_at(hosts_end);
    let query = tail.find('?').map_or("", |at| &tail[at..]);
    format!("{scheme}://{hosts}/{database}{query}")
}

#[test]
fn mongodb_urls_name_the_database() {
    assert_eq!(
        with_database("mongodb://127.0.0.1:27018/?directConnection=true", "x"),
        "mongodb://127.0.0.1:27018/x?directConnection=true"
    );
    assert_eq!(
        with_database("mongodb://u:p@a:1,b:2/old?w=1&r=2", "x"),
        "mongodb://u:p@a:1,b:2/x?w=1&r=2"
    );
    assert_eq!(with_database("mongodb://a:1", "x"), "mongodb://a:1/x");
    assert_eq!(
        with_database("mongodb://a:1?directConnection=true", "x"),
        "mongodb://a:1/x?directConnection=true"
    );
}

#[test]
fn two_servers_on_one_mongodb_ack_every_event_exactly_once() {
    let Some(url) = service_url("TEST_MONGODB_URL", "mongodb") else {
        return;
    };
    let database = format!("rheo_e2e_{}_{:08x}", std::process::id(), rand_suffix());
    let backend = with_database(&url, &database);
    // The stand-in is slow (a write takes 10–40 ms, more while the library
    // tests share it): the wait lasts as long as acks keep coming.
    support::two_servers_ack_each_event_once(backend, EVENTS, Duration::from_secs(120));
}
