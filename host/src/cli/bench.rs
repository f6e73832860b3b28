//! `rheo bench`: throughput and latency of the core operations on a backend.

use anyhow::Context;
use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};

use super::migrate::redact;
use crate::backend;
use crate::bench::{self, WorkloadResult};
use crate::clock::SystemClock;

/// Arguments of `rheo bench`.
#[derive(Debug, Args)]
pub(crate) struct BenchArgs {
    /// Backend URL (default: a fresh SQLite file in a temporary directory).
    #[arg(long)]
    backend: Option<String>,

    /// Events per batched workload.
    #[arg(long, default_value_t = 20_000)]
    events: usize,

    /// Events per append batch and leases per fetch.
    #[arg(long, default_value_t = 50)]
    batch: usize,

    /// Events appended one call at a time.
    #[arg(long, default_value_t = 2_000)]
    single: usize,

    /// Also measure after this many events were appended and consumed, to
    /// show cost does not grow with history (e.g. 1000000).
    #[arg(long, default_value_t = 0)]
    history: usize,

    /// Partitions of the bench stream.
    #[arg(long, default_value_t = 1)]
    partitions: u32,

    /// Print the results as JSON.
    #[arg(long)]
    json: bool,
}

impl BenchArgs {
    pub(crate) async fn run(self) -> anyhow::Result<()> {
        anyhow::ensure!(
            (1..=1000).contains(&self.batch),
            "--batch must be between 1 and 1000"
        );
        let temp = tempfile::tempdir().context("creating a temporary directory")?;
        let url = self
            .backend
            .clone()
            .unwrap_or_else(|| format!("sqlite://{}", temp.path().join("bench.db").display()));
        let store = backend::open(&url, SystemClock::shared())
            .await
            .with_context(|| format!("cannot open backend {}", redact(&url)))?;
        let store = &*store;
        let (stream, group) = bench::bench_stream(store, self.partitions).await?;
        eprintln!(
            "benchmarking {} ({}) on stream {stream}",
            store.kind(),
            redact(&url)
        );

        let mut results = Vec::new();
        let bar = |len: usize, what: &str| progress(len, what, self.json);
        results.push(bench::append_single(store, &stream, self.single).await?);
        let bar1 = bar(self.events, "append");
        results.push(
            bench::append_batched(store, &stream, self.events, self.batch, |n| {
                bar1.set_position(n as u64)
            })
            .await?,
        );
        bar1.finish_and_clear();
        let bar2 = bar(self.events + self.single, "fetch+ack");
        results.push(
            bench::fetch_ack(
                store,
                &stream,
                &group,
                self.events + self.single,
                self.batch,
                |n| bar2.set_position(n as u64),
            )
            .await?,
        );
        bar2.finish_and_clear();

        if self.history > 0 {
            let fill = bar(self.history, "filling history (append)");
            bench::append_batched(store, &stream, self.history, 1000, |n| {
                fill.set_position(n as u64)
            })
            .await?;
            fill.finish_and_clear();
            let drain = bar(self.history, "filling history (consume)");
            bench::fetch_ack(store, &stream, &group, self.history, 1000, |n| {
                drain.set_position(n as u64)
            })
            .await?;
            drain.finish_and_clear();
            let label = format!(" after {} events of history", self.history);
            let bar3 = bar(self.events, "append");
            let mut append = bench::append_batched(store, &stream, self.events, self.batch, |n| {
                bar3.set_position(n as u64)
            })
            .await?;
            bar3.finish_and_clear();
            append.name.push_str(&label);
            results.push(append);
            let bar4 = bar(self.events, "fetch+ack");
            let mut consume =
                bench::fetch_ack(store, &stream, &group, self.events, self.batch, |n| {
                    bar4.set_position(n as u64)
                })
                .await?;
            bar4.finish_and_clear();
            consume.name.push_str(&label);
            results.push(consume);
        }

        if self.json {
            let doc = serde_json::json!({
                "backend": store.kind(),
                "stream": stream,
                "results": results,
            });
            println!("{}", serde_json::to_string_pretty(&doc)?);
        } else {
            print_table(store.kind(), &results);
        }
        Ok(())
    }
}

fn progress(len: usize, what: &str, quiet: bool) -> ProgressBar {
    if quiet || len < 5_000 {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(len as u64);
    bar.set_style(
        ProgressStyle::with_template("{msg:>28} [{bar:30}] {pos}/{len} ({per_sec}, eta {eta})")
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
    );
    bar.set_message(what.to_owned());
    bar
}

fn print_table(kind: &str, results: &[WorkloadResult]) {
    let width = results
        .iter()
        .map(|r| r.name.len())
        .max()
        .unwrap_or(8)
        .max(8);
    println!(
        "{:<width$}  {:>9}  {:>12}  {:>9}  {:>9}",
        format!("{kind}"),
        "events",
        "events/s",
        "p50",
        "p99"
    );
    for r in results {
        println!(
            "{:<width$}  {:>9}  {:>12.0}  {:>7.2}ms  {:>7.2}ms",
            r.name, r.events, r.events_per_sec, r.p50_ms, r.p99_ms
        );
    }
}
