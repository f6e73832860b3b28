//! Network partition tests (`docs/cluster.md#a-node-cut-off-from-the-store`),
//! on PostgreSQL and on Redis: node `a` is cut off from the store — while
//! idle, inside a fetch, inside an append, with a write in flight — and
//! healed each time (`cuts.rs`); then, with the transform handler running
//! on both nodes, `a` is cut off in the middle of its handler's work and
//! healed, and every event is still handled and acked, none lost.
//!
//! Where PostgreSQL has transactions that lock rows across round trips,
//! Redis runs each write as one script: its cuts "inside" a fetch or an
//! append are a script that reached Redis and whose answer was lost.

use std::time::{Duration, Instant};

use super::cuts::{
    PEERS_WITHIN, Pair, cut_inside_append, cut_inside_fetch, cut_while_idle, nothing_lost,
};
use super::proxy::{Proxy, Trigger};
use super::support::chaos::{
    HANDLER, Target, append_until_stored, assert_all_acked, assert_each_once, assert_no_panic,
    clock_now, drain, events, events_in, pass_leases, set_up_pipeline,
};
use super::support::{eventually, get};

/// PostgreSQL's statement of a fetch that locks the group's cursor rows
/// (`fetch_lock_cursors.sql`), and of an append that locks its partitions'
/// rows (`append_lock_partitions.sql`).
const PG_LOCK_CURSORS: &str = "FOR UPDATE OF gp";
const PG_LOCK_PARTITIONS: &str = "ORDER BY partition FOR UPDATE";

/// Events of the handler workload, before and during the cut.
const BEFORE: usize = 200;
const DURING: usize = 200;

#[test]
fn postgres_partition_stalls_no_other_node_and_loses_nothing() {
    let Some(schema) = rheo_e2e::PgSchema::fresh() else {
        return;
    };
    let direct = schema.url().to_owned();
    let started = Instant::now();
    let proxy = Proxy::start(upstream(&direct, 5432));
    // Plain text, so that the proxy can read the protocol.
    let proxied = format!("{}&sslmode=disable", proxy.url(&direct));
    let p = Pair::start(&direct, &proxied, proxy);
    cut_while_idle(&p);
    // The session is left holding the cursor rows (or the partition rows):
    // the server ends it after its idle-in-transaction timeout.
    cut_inside_fetch(
        &p,
        Trigger::PgAfterReply(PG_LOCK_CURSORS),
        "backend_unavailable",
    );
    let inside = Trigger::PgAfterReply(PG_LOCK_PARTITIONS);
    cut_inside_append(&p, inside, "backend_unavailable", "cut-append", false);
    // The commit reaches the server; its answer does not reach a.
    let at_commit = Trigger::PgAtCommitAfter(PG_LOCK_PARTITIONS);
    cut_inside_append(&p, at_commit, "ambiguous", "commit-in-flight", true);
    nothing_lost(&p);
    workload_across_a_cut(&p, Trigger::PgAfterReply(PG_LOCK_CURSORS));
    println!("postgres partition test done in {:.1} s", secs(started));
}

#[test]
fn redis_partition_stalls_no_other_node_and_loses_nothing() {
    let Some(prefix) = rheo_e2e::RedisPrefix::fresh() else {
        return;
    };
    let started = Instant::now();
    let direct = prefix.url().to_owned();
    let proxy = Proxy::start(upstream(prefix.server(), 6379));
    let proxied = proxy.url(&direct);
    let p = Pair::start(&direct, &proxied, proxy);
    cut_while_idle(&p);
    // A fetch's claims and an append, each one script: it ran, its answer
    // was lost.
    let claims = Trigger::AfterRequest(vec!["EVALSHA", "a-cut"]);
    cut_inside_fetch(&p, claims, "ambiguous");
    let append = Trigger::AfterRequest(vec!["EVALSHA", "script-in-flight"]);
    cut_inside_append(&p, append, "ambiguous", "script-in-flight", true);
    nothing_lost(&p);
    // Any script of a's handler (its consumer id is `t@a`).
    workload_across_a_cut(&p, Trigger::AfterRequest(vec!["EVALSHA", "t@a"]));
    drop(p);
    println!("redis partition test done in {:.1} s", secs(started));
}

/// The transform handler runs on both nodes (deployed through `b`); `a`
/// is cut off at `trigger` while it works, `b` appends more and handles
/// them, then takes over `a`'s leases once they expire; after the heal
/// every event is transformed once and acked.
fn workload_across_a_cut(p: &Pair, trigger: Trigger) {
    let started = Instant::now();
    set_up_pipeline(&p.http, &p.b, 2);
    eventually("a runs the handler", Duration::from_secs(60), || {
        let (status, body) = get(&p.http, &p.a, &format!("/v1/handlers/{HANDLER}"));
        (status == 200 && body["status"] == "running").then_some(())
    });
    let b = Target::new(&p.b);
    let long = Duration::from_secs(60);
    p.proxy.arm(trigger);
    append_until_stored(&b, "in", &events(0, BEFORE, 40), long);
    let cut = p.proxy.wait_for_cut(Duration::from_secs(30));
    append_until_stored(&b, "in", &events(BEFORE, DURING, 40), long);
    assert!(
        cut.elapsed() <= PEERS_WITHIN,
        "b took {:.1} s to append during the cut",
        secs(cut)
    );
    // b handles what it can while a is cut off: more than a ever had.
    let moving = events_in(&p.http, &p.b, "out");
    eventually("b's handler carries on", long, || {
        (events_in(&p.http, &p.b, "out") > moving).then_some(())
    });
    let a_now = clock_now(&p.http, &p.a);
    pass_leases(&p.http, &p.b, Some(&a_now));
    p.proxy.heal();
    let total = (BEFORE + DURING) as u64;
    drain(&p.http, &p.b, total, Duration::from_secs(120));
    let ids = || (0..BEFORE + DURING).map(|i| format!("e{i}"));
    assert_each_once(&p.http, &p.b, "in", ids());
    let transformed = ids().map(|id| format!("{id}:transformed"));
    assert_each_once(&p.http, &p.b, "out", transformed);
    assert_all_acked(&p.http, &p.b);
    assert_no_panic(&[p.a.log.clone(), p.b.log.clone()]);
    println!("handler workload across a cut: {:.1} s", secs(started));
}

/// `host:port` of a service URL (`default_port` when it names none).
fn upstream(url: &str, default_port: u16) -> String {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    let authority = &rest[..rest.find(['/', '?']).unwrap_or(rest.len())];
    let host = authority
        .rsplit_once('@')
        .map_or(authority, |(_, host)| host);
    if host
        .rsplit_once(':')
        .is_some_and(|(_, port)| port.parse::<u16>().is_ok())
    {
        host.to_owned()
    } else {
        format!("{host}:{default_port}")
    }
}

fn secs(since: Instant) -> f64 {
    since.elapsed().as_secs_f64()
}
