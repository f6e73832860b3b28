//! `rheo-compare`: Rheo's batched fetch+ack against what a user would pick
//! instead, measured by this one process on this one machine in one run
//! (`docs/benchmarks.md#rheo-against-its-peers`).
//!
//! Every pair consumes the same number of events, appended beforehand
//! (not timed), by each client in turn claims of `--batch` and one ack call per
//! claim, each a durable commit where the store has them:
//!
//! * **SQLite**: Rheo's embedded default against a claim/delete loop on
//!   one plain queue table in the same durability settings (WAL,
//!   `synchronous = FULL`).
//! * **PostgreSQL**: Rheo against the `SELECT … FOR UPDATE SKIP LOCKED
//!   LIMIT n` claim and batched `DELETE` ack of a plain queue table — the
//!   pattern of pgmq and River.
//! * **Redis**: Rheo's Redis backend against `XREADGROUP COUNT n` + `XACK`
//!   on one Redis stream of the same server; and, as a second pair
//!   (`redis-append`), Rheo's batched append against `n` `XADD`s sent as
//!   one pipeline (the appends are what is timed there).
//! * **JetStream**: a NATS pull consumer fetching `--batch` and acking each
//!   message, against Rheo on SQLite (`jetstream`) and on Redis
//!   (`jetstream-redis`).
//!
//! `--clients 1,4,16` measures every pair once per count: that many
//! concurrent consumers on each side, on one group (or queue, or consumer).
//!
//! Rounds alternate which side goes first; the median round of each side
//! is reported, with the ratio Rheo / peer.

mod clients;
mod jetstream;
mod postgres;
mod sqlite;
mod streams;

use std::sync::Arc;
use std::sync::atomic::AtomicUsize;
use std::time::Instant;

use anyhow::Context;
use clap::{Parser, ValueEnum};
use clients::Tally;
use rheo::bench::{self, WorkloadResult};
use rheo::clock::SystemClock;
use rheo::model::ConsumerId;
use serde::Serialize;

/// The allocator `rheo` ships with, so that Rheo's side is measured as it
/// runs (both sides share it).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Rheo's batched fetch+ack against raw use of the same stores and NATS
/// JetStream, in one run.
#[derive(Debug, Parser)]
#[command(version)]
struct Args {
    /// Events consumed per measurement.
    #[arg(long, default_value_t = 20_000)]
    events: usize,

    /// Events per claim (fetch) and per ack call.
    #[arg(long, default_value_t = 50)]
    batch: usize,

    /// Concurrent consumers (appenders for `redis-append`) on each side:
    /// every pair is measured once per count given.
    #[arg(long, value_delimiter = ',', default_values_t = [1])]
    clients: Vec<usize>,

    /// Rounds per pair; each side's median round is reported.
    #[arg(long, default_value_t = 3)]
    rounds: usize,

    /// The PostgreSQL to measure on (each side gets a fresh schema, dropped
    /// afterwards).
    #[arg(long, default_value = "postgres://postgres@127.0.0.1:5432/test")]
    postgres: String,

    /// The Redis to measure on (each side keys under a fresh prefix,
    /// deleted afterwards).
    #[arg(long, default_value = "redis://127.0.0.1:6379")]
    redis: String,

    /// The NATS server (with JetStream enabled).
    #[arg(long, default_value = "nats://127.0.0.1:4222")]
    nats: String,

    /// Which pairs to measure.
    #[arg(long, value_enum, value_delimiter = ',', default_values_t = [Peer::Sqlite, Peer::Postgres, Peer::Redis, Peer::RedisAppend, Peer::Jetstream, Peer::JetstreamRedis])]
    only: Vec<Peer>,

    /// Print the results as JSON.
    #[arg(long)]
    json: bool,
}

/// What Rheo is compared with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
enum Peer {
    /// Rheo on SQLite vs a raw claim/delete loop on one SQLite table.
    Sqlite,
    /// Rheo on PostgreSQL vs a raw SKIP LOCKED queue table.
    Postgres,
    /// Rheo on Redis vs raw XREADGROUP + XACK.
    Redis,
    /// Rheo's batched append on Redis vs raw XADDs, pipelined per batch.
    RedisAppend,
    /// Rheo on SQLite vs a NATS JetStream pull consumer.
    Jetstream,
    /// Rheo on Redis vs a NATS JetStream pull consumer.
    JetstreamRedis,
}

impl Peer {
    fn title(self) -> &'static str {
        match self {
            Self::Sqlite => "SQLite",
            Self::Postgres => "PostgreSQL",
            Self::Redis => "Redis",
            Self::RedisAppend => "Redis (append)",
            Self::Jetstream => "JetStream",
            Self::JetstreamRedis => "JetStream",
        }
    }

    fn raw(self) -> &'static str {
        match self {
            Self::Sqlite => "claim/delete on one table",
            Self::Postgres => "SKIP LOCKED queue table",
            Self::Redis => "XREADGROUP + XACK",
            Self::RedisAppend => "XADD, one pipeline a batch",
            Self::Jetstream | Self::JetstreamRedis => "pull consumer, fetch + ack",
        }
    }

    fn rheo(self) -> &'static str {
        match self {
            Self::Sqlite | Self::Jetstream => "Rheo on SQLite",
            Self::Postgres => "Rheo on PostgreSQL",
            Self::Redis | Self::RedisAppend | Self::JetstreamRedis => "Rheo on Redis",
        }
    }
}

/// One pair's outcome.
#[derive(Debug, Serialize)]
struct Pair {
    peer: Peer,
    /// Concurrent clients on each side.
    clients: usize,
    rheo: String,
    raw: String,
    /// Median rounds, or why the pair was not measured.
    result: Result<(WorkloadResult, WorkloadResult), String>,
}

impl Pair {
    fn ratio(&self) -> Option<f64> {
        let (rheo, raw) = self.result.as_ref().ok()?;
        Some(rheo.events_per_sec / raw.events_per_sec.max(1e-9))
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    anyhow::ensure!(args.events > 0, "--events must be at least 1");
    anyhow::ensure!(
        (1..=rheo::model::MAX_FETCH_LIMIT as usize).contains(&args.batch),
        "--batch must be between 1 and {}",
        rheo::model::MAX_FETCH_LIMIT
    );
    anyhow::ensure!(args.rounds > 0, "--rounds must be at least 1");
    anyhow::ensure!(
        args.clients.iter().all(|c| (1..=MAX_CLIENTS).contains(c)),
        "--clients must be between 1 and {MAX_CLIENTS}"
    );
    let mut pairs = Vec::new();
    for &peer in &args.only {
        for &clients in &args.clients {
            let result = pair(&args, peer, clients)
                .await
                .map_err(|e| format!("{e:#}"));
            if let Err(e) = &result {
                let with = match clients {
                    1 => String::new(),
                    n => format!(" with {n} clients"),
                };
                eprintln!("{}{with}: not measured: {e}", peer.title());
            }
            pairs.push(Pair {
                peer,
                clients,
                rheo: peer.rheo().to_owned(),
                raw: peer.raw().to_owned(),
                result,
            });
        }
    }
    if args.json {
        let doc: Vec<_> = pairs
            .iter()
            .map(|p| {
                serde_json::json!({
                    "peer": p.peer,
                    "clients": p.clients,
                    "rheo": p.rheo,
                    "raw": p.raw,
                    "rheo_result": p.result.as_ref().ok().map(|r| &r.0),
                    "raw_result": p.result.as_ref().ok().map(|r| &r.1),
                    "ratio": p.ratio(),
                    "error": p.result.as_ref().err(),
                })
            })
            .collect();
        println!("{}", serde_json::to_string_pretty(&doc)?);
    } else {
        print_table(&args, &pairs);
    }
    anyhow::ensure!(
        pairs.iter().any(|p| p.result.is_ok()),
        "no pair could be measured"
    );
    Ok(())
}

/// The most concurrent clients a side runs (PostgreSQL's raw side opens a
/// connection per client).
const MAX_CLIENTS: usize = 64;

/// Measures one pair `args.rounds` times, alternating which side goes first.
async fn pair(
    args: &Args,
    peer: Peer,
    clients: usize,
) -> anyhow::Result<(WorkloadResult, WorkloadResult)> {
    let (mut rheo, mut raw) = (Vec::new(), Vec::new());
    for round in 0..args.rounds {
        let sides = if round % 2 == 0 {
            [true, false]
        } else {
            [false, true]
        };
        for is_rheo in sides {
            let started = Instant::now();
            let result = if is_rheo {
                rheo_side(args, peer, clients).await?
            } else {
                raw_side(args, peer, clients).await?
            };
            eprintln!(
                "{} ×{clients} round {}/{}: {:<28} {:>9.0} events/s ({:.1} s)",
                peer.title(),
                round + 1,
                args.rounds,
                if is_rheo { peer.rheo() } else { peer.raw() },
                result.events_per_sec,
                started.elapsed().as_secs_f64()
            );
            if is_rheo {
                rheo.push(result);
            } else {
                raw.push(result);
            }
        }
    }
    Ok((median(rheo), median(raw)))
}

/// Rheo's side: a fresh stream, `events` appended in batches, then timed
/// fetch+ack in batches until all are consumed.
async fn rheo_side(args: &Args, peer: Peer, clients: usize) -> anyhow::Result<WorkloadResult> {
    match peer {
        Peer::Sqlite | Peer::Jetstream => {
            let dir = tempfile::tempdir().context("cannot create a temporary directory")?;
            let url = format!("sqlite://{}", dir.path().join("rheo.db").display());
            rheo_fetch_ack(&url, args, clients).await
        }
        Peer::Postgres => {
            let schema = postgres::Schema::create(&args.postgres, "rheo").await?;
            let url = postgres::with_schema(&args.postgres, schema.name())?;
            let result = rheo_fetch_ack(&url, args, clients).await;
            schema.drop().await?;
            result
        }
        Peer::Redis | Peer::RedisAppend | Peer::JetstreamRedis => {
            streams::connect(&args.redis).await?;
            let prefix = format!("rheo_compare_{:08x}", rand::random::<u32>());
            let sep = if args.redis.contains('?') { '&' } else { '?' };
            let url = format!("{}{sep}prefix={prefix}", args.redis);
            let result = if peer == Peer::RedisAppend {
                rheo_append(&url, args, clients).await
            } else {
                rheo_fetch_ack(&url, args, clients).await
            };
            streams::delete_prefix(&args.redis, &prefix).await?;
            result
        }
    }
}

/// Rheo's batched append, timed (the same events as the fetch+ack pairs),
/// each client appending the next batch.
async fn rheo_append(url: &str, args: &Args, clients: usize) -> anyhow::Result<WorkloadResult> {
    let backend = rheo::backend::open(url, SystemClock::shared()).await?;
    let (stream, _) = bench::bench_stream(&*backend, 1).await?;
    let (events, batch) = (args.events, args.batch);
    let batches = events.div_ceil(batch);
    let next = Arc::new(AtomicUsize::new(0));
    clients::timed("append", events, clients, |tally| {
        let (backend, stream, next) = (backend.clone(), stream.clone(), next.clone());
        async move {
            let (backend, stream, next) = (&backend, &stream, &next);
            let append = move || async move {
                let Some(i) = Tally::take(next, batches) else {
                    return Ok(0);
                };
                let range = i * batch..((i + 1) * batch).min(events);
                let inputs: Vec<_> = range.map(bench::input).collect();
                let n = inputs.len();
                backend.append(stream, inputs).await?;
                anyhow::Ok(n)
            };
            clients::rounds(tally, append).await
        }
    })
    .await
}

/// Rheo's fetch+ack, timed: each client fetches a batch as a consumer of
/// its own and acks it in one settle call.
async fn rheo_fetch_ack(url: &str, args: &Args, clients: usize) -> anyhow::Result<WorkloadResult> {
    let backend = rheo::backend::open(url, SystemClock::shared()).await?;
    let (stream, group) = bench::bench_stream(&*backend, 1).await?;
    bench::append_batched(&*backend, &stream, (args.events, 1000), args.batch, |_| {}).await?;
    let limit = u32::try_from(args.batch)?;
    let result = clients::timed("fetch+ack", args.events, clients, |tally| {
        let (backend, stream, group) = (backend.clone(), stream.clone(), group.clone());
        let consumer = ConsumerId::parse(format!("compare-{}", tally.client));
        async move {
            let consumer = consumer?;
            let (backend, stream, group, consumer) = (&backend, &stream, &group, &consumer);
            let round = move || async move {
                Ok(bench::fetch_and_ack(&**backend, (stream, group), consumer, limit).await?)
            };
            clients::rounds(tally, round).await
        }
    })
    .await?;
    anyhow::ensure!(
        result.events == args.events,
        "Rheo consumed {} of {} events",
        result.events,
        args.events
    );
    Ok(result)
}

/// The peer's side, on the same events.
async fn raw_side(args: &Args, peer: Peer, clients: usize) -> anyhow::Result<WorkloadResult> {
    let payloads: Vec<String> = (0..args.events)
        .map(|i| serde_json::to_string(&bench::input(i).payload))
        .collect::<Result<_, _>>()?;
    let result = match peer {
        Peer::Sqlite => sqlite::claim_delete(&payloads, args.batch, clients).await?,
        Peer::Postgres => {
            postgres::skip_locked(&args.postgres, &payloads, args.batch, clients).await?
        }
        Peer::Redis => streams::read_ack(&args.redis, &payloads, args.batch, clients).await?,
        Peer::RedisAppend => streams::add(&args.redis, &payloads, args.batch, clients).await?,
        Peer::Jetstream | Peer::JetstreamRedis => {
            jetstream::pull_ack(&args.nats, &payloads, args.batch, clients).await?
        }
    };
    anyhow::ensure!(
        result.events == args.events,
        "the peer consumed {} of {} events",
        result.events,
        args.events
    );
    Ok(result)
}

/// The round with the median throughput.
fn median(mut results: Vec<WorkloadResult>) -> WorkloadResult {
    results.sort_by(|a, b| a.events_per_sec.total_cmp(&b.events_per_sec));
    results.swap_remove(results.len() / 2)
}

fn print_table(args: &Args, pairs: &[Pair]) {
    println!(
        "fetch+ack (append for the append pair), {} events, batch {}, median of {} rounds",
        args.events, args.batch, args.rounds
    );
    println!(
        "{:<14} {:>7} {:<20} {:>10} {:>17}   {:<27} {:>10} {:>17} {:>7}",
        "store",
        "clients",
        "Rheo",
        "events/s",
        "p50 / p99",
        "peer",
        "events/s",
        "p50 / p99",
        "ratio"
    );
    for p in pairs {
        match &p.result {
            Ok((rheo, raw)) => println!(
                "{:<14} {:>7} {:<20} {:>10.0} {:>17}   {:<27} {:>10.0} {:>17} {:>6.2}×",
                p.peer.title(),
                p.clients,
                p.rheo,
                rheo.events_per_sec,
                latency(rheo),
                p.raw,
                raw.events_per_sec,
                latency(raw),
                p.ratio().unwrap_or_default()
            ),
            Err(e) => println!("{:<14} {:>7} not measured: {e}", p.peer.title(), p.clients),
        }
    }
}

/// `p50 / p99` of one call, in ms.
fn latency(r: &WorkloadResult) -> String {
    format!("{:.2} / {:.2} ms", r.p50_ms, r.p99_ms)
}
