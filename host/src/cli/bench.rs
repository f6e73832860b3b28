//! `rheo bench`: throughput and latency of the core operations on a backend.

use anyhow::Context;
use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};

use crate::backend;
use crate::backend::redact_url as redact;
use crate::bench::{self, HandlerStartup, WorkloadResult};
use crate::clock::SystemClock;
use crate::model::{Flow, GroupName, GroupOrdering, GroupSpec};

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

    /// Partitions of the bench stream (`--partitions` is the spelling of
    /// earlier releases).
    #[arg(
        long = "partition-count",
        alias = "partitions",
        default_value_t = 1,
        value_name = "N"
    )]
    partitions: u32,

    /// Print the results as JSON.
    #[arg(long)]
    json: bool,

    /// WebAssembly handler to measure end to end (default: the example
    /// `echo` guest, embedded in this binary).
    #[cfg(feature = "wasm")]
    #[arg(long, value_name = "FILE.wasm")]
    handler: Option<std::path::PathBuf>,

    /// Skip the end-to-end handler workload.
    #[cfg(feature = "wasm")]
    #[arg(long, conflicts_with = "handler")]
    no_handler: bool,

    /// Events sent through the handler, per instance mode.
    #[cfg(feature = "wasm")]
    #[arg(long, default_value_t = 100_000)]
    handler_events: usize,

    /// Instance modes to measure the handler in.
    #[cfg(feature = "wasm")]
    #[arg(long, value_enum, default_value_t = InstanceChoice::Both)]
    instance: InstanceChoice,

    /// Deliveries the handler runs at once; several values (`16,64`)
    /// measure each in turn.
    #[cfg(feature = "wasm")]
    #[arg(long, value_delimiter = ',', default_value = "16")]
    concurrency: Vec<usize>,

    /// Leases the handler holds at most.
    #[cfg(feature = "wasm")]
    #[arg(long, default_value_t = 256)]
    max_demand: usize,

    /// Deliveries per handler call (the manifest's `batch_size`; above 1
    /// the handler must export `handle-batch`); several values (`1,10,100`)
    /// measure each in turn (docs/handlers.md#batches).
    #[cfg(feature = "wasm")]
    #[arg(long, value_delimiter = ',', default_value = "1")]
    batch_size: Vec<usize>,

    /// Group orderings to consume under, in turn: each fetch+ack and
    /// handler workload runs once per ordering, on a group of its own
    /// (`none,key` compares them in one run; docs/groups.md#ordering).
    #[arg(long, value_delimiter = ',', default_value = "none", value_parser = parse_ordering)]
    ordering: Vec<GroupOrdering>,

    /// Per-key limits to consume under as well, in turn: each adds a group
    /// of ordering none with that `flow.key_concurrency`, measured beside
    /// the --ordering groups on the same events, so `--key-concurrency 4`
    /// gives the limit's cost in one run (docs/groups.md#flow).
    #[arg(long, value_delimiter = ',', value_name = "N,…",
          value_parser = clap::value_parser!(u32).range(1..=10_000))]
    key_concurrency: Vec<u32>,

    /// Per-key rates to consume under as well, in turn: each adds a group
    /// of ordering none with that `flow.key_rate` (burst as large as the
    /// rate), measured beside the others on the same events, so
    /// `--key-rate 100000` gives the cost of the token buckets where none
    /// runs dry, and a rate below what the keys get gives the paced run
    /// (docs/groups.md#flow).
    #[arg(long, value_delimiter = ',', value_name = "R,…")]
    key_rate: Vec<u32>,

    /// Instead of the other workloads: append this many events to a stream
    /// keeping its newest --retention-max-events per partition while the
    /// trimmer runs, print the store's size as it goes, then compare
    /// fetch+ack of what is left with a stream that never trimmed
    /// (docs/benchmarks.md#retention).
    #[arg(long, value_name = "N", default_value_t = 0)]
    retention_events: usize,

    /// Events each partition keeps in the --retention-events run.
    #[arg(long, value_name = "N", default_value_t = 100_000)]
    retention_max_events: u64,

    /// Distinct event keys (`customer-0` …) the events are spread over.
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u32).range(1..))]
    keys: u32,
}

fn parse_ordering(s: &str) -> Result<GroupOrdering, String> {
    s.parse()
        .map_err(|e: crate::model::ValidationError| e.message)
}

/// Which instance modes `rheo bench` measures a handler in.
#[cfg(feature = "wasm")]
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum InstanceChoice {
    /// Warm instances reused across calls.
    Reuse,
    /// A fresh instance per delivery.
    Fresh,
    /// Both, one after the other.
    Both,
}

impl BenchArgs {
    pub(crate) async fn run(self) -> anyhow::Result<()> {
        anyhow::ensure!(
            (1..=1000).contains(&self.batch),
            "--batch must be between 1 and 1000"
        );
        for (i, ordering) in self.ordering.iter().enumerate() {
            anyhow::ensure!(
                !self.ordering[..i].contains(ordering),
                "--ordering lists {} twice",
                ordering.as_str()
            );
        }
        for (i, n) in self.key_concurrency.iter().enumerate() {
            anyhow::ensure!(
                !self.key_concurrency[..i].contains(n),
                "--key-concurrency lists {n} twice"
            );
        }
        for (i, r) in self.key_rate.iter().enumerate() {
            anyhow::ensure!(
                !self.key_rate[..i].contains(r),
                "--key-rate lists {r} twice"
            );
            anyhow::ensure!(
                (1..=100_000).contains(r),
                "--key-rate must be between 1 and 100000 (got {r})"
            );
        }
        let temp = tempfile::tempdir().context("creating a temporary directory")?;
        let url = self
            .backend
            .clone()
            .unwrap_or_else(|| format!("sqlite://{}", temp.path().join("bench.db").display()));
        let store = backend::open(&url, SystemClock::shared())
            .await
            .with_context(|| format!("cannot open backend {}", redact(&url)))?;
        let store_arc = store;
        if self.retention_events > 0 {
            return self.retention(store_arc, &url).await;
        }
        let store = &*store_arc;
        let (stream, group) = bench::bench_stream(store, self.partitions).await?;
        let groups = self.groups(store, &stream, group).await?;
        let keys = self.keys as usize;
        eprintln!(
            "benchmarking {} ({}) on stream {stream}",
            store.kind(),
            redact(&url)
        );

        let mut results = Vec::new();
        let bar = |len: usize, what: &str| progress(len, what, self.json);
        results.push(bench::append_single(store, &stream, self.single, keys).await?);
        let bar1 = bar(self.events, "append");
        let count = (self.events, keys);
        results.push(
            bench::append_batched(store, &stream, count, self.batch, |n| {
                bar1.set_position(n as u64)
            })
            .await?,
        );
        bar1.finish_and_clear();
        for (label, group) in &groups {
            let bar2 = bar(self.events + self.single, "fetch+ack");
            let total = self.events + self.single;
            let mut consume = bench::fetch_ack(store, &stream, group, total, self.batch, |n| {
                bar2.set_position(n as u64)
            })
            .await?;
            bar2.finish_and_clear();
            consume.name.push_str(label);
            results.push(consume);
        }

        if self.history > 0 {
            let fill = bar(self.history, "filling history (append)");
            bench::append_batched(store, &stream, (self.history, keys), 1000, |n| {
                fill.set_position(n as u64)
            })
            .await?;
            fill.finish_and_clear();
            for (_, group) in &groups {
                let drain = bar(self.history, "filling history (consume)");
                bench::fetch_ack(store, &stream, group, self.history, 1000, |n| {
                    drain.set_position(n as u64)
                })
                .await?;
                drain.finish_and_clear();
            }
            let history = format!(" after {} events of history", self.history);
            let bar3 = bar(self.events, "append");
            let mut append = bench::append_batched(store, &stream, count, self.batch, |n| {
                bar3.set_position(n as u64)
            })
            .await?;
            bar3.finish_and_clear();
            append.name.push_str(&history);
            results.push(append);
            for (label, group) in &groups {
                let bar4 = bar(self.events, "fetch+ack");
                let mut consume =
                    bench::fetch_ack(store, &stream, group, self.events, self.batch, |n| {
                        bar4.set_position(n as u64)
                    })
                    .await?;
                bar4.finish_and_clear();
                consume.name.push_str(label);
                consume.name.push_str(&history);
                results.push(consume);
            }
        }

        #[cfg(feature = "wasm")]
        let startup = if self.no_handler {
            None
        } else {
            let (handler, workloads) = self.handler_workloads(&store_arc).await?;
            results.extend(workloads);
            Some(handler)
        };
        #[cfg(not(feature = "wasm"))]
        let startup: Option<HandlerStartup> = None;

        if self.json {
            let mut doc = serde_json::json!({
                "backend": store.kind(),
                "stream": stream,
                "results": results,
            });
            if let Some(startup) = &startup {
                doc["handler"] = serde_json::to_value(startup)?;
            }
            println!("{}", serde_json::to_string_pretty(&doc)?);
        } else {
            print_table(store.kind(), &results);
            if let Some(startup) = &startup {
                println!("{}", startup_line(startup));
            }
        }
        Ok(())
    }
}

impl BenchArgs {
    /// The `--retention-events` run: size over time, then fetch+ack of a
    /// trimmed stream against an untrimmed one of the same live size.
    async fn retention(
        &self,
        store: std::sync::Arc<dyn crate::backend::Backend>,
        url: &str,
    ) -> anyhow::Result<()> {
        eprintln!(
            "retention on {} ({}): {} events, the newest {} per partition kept, {} partition(s)",
            store.kind(),
            redact(url),
            self.retention_events,
            self.retention_max_events,
            self.partitions
        );
        let bar = progress(self.retention_events, "append (trimming)", self.json);
        let run = bench::retention_run(
            store.clone(),
            self.retention_events,
            self.retention_max_events,
            self.partitions,
            self.batch,
            20,
            |n| bar.set_position(n as u64),
        )
        .await?;
        bar.finish_and_clear();
        if self.json {
            let doc = serde_json::json!({"backend": store.kind(), "retention": run});
            println!("{}", serde_json::to_string_pretty(&doc)?);
            return Ok(());
        }
        println!(
            "{:>12} {:>10} {:>14} {:>9}",
            "APPENDED", "STORED", "STORE-BYTES", "SECONDS"
        );
        for p in &run.points {
            let bytes = p.bytes.map_or_else(|| "-".to_owned(), |b| b.to_string());
            println!(
                "{:>12} {:>10} {:>14} {:>9.1}",
                p.appended, p.stored, bytes, p.elapsed_s
            );
        }
        println!("removed by retention: {}", run.removed);
        let trimmed = run.trimmed.clone();
        let untrimmed = run.untrimmed.clone();
        let ratio = trimmed.events_per_sec / untrimmed.events_per_sec.max(1e-9);
        print_table(
            store.kind(),
            &[
                run.append,
                named(trimmed, " (trimmed)"),
                named(untrimmed, " (never trimmed)"),
            ],
        );
        println!("fetch+ack trimmed / never trimmed: {:.0}%", ratio * 100.0);
        Ok(())
    }

    /// Whether the results name their group's shape: more than one, or
    /// another than an unlimited `none`.
    fn ordered(&self) -> bool {
        self.shapes().len() > 1 || self.ordering.iter().any(|o| *o != GroupOrdering::None)
    }

    /// The groups' shapes, in turn: each --ordering, then each
    /// --key-concurrency and --key-rate, with the label its results carry.
    fn shapes(&self) -> Vec<(String, GroupOrdering, Flow)> {
        let orderings = self
            .ordering
            .iter()
            .map(|&o| (format!("ordering {}", o.as_str()), o, Flow::default()));
        let limits = self.key_concurrency.iter().map(|&n| {
            let flow = Flow {
                key_concurrency: Some(n),
                ..Flow::default()
            };
            (format!("key_concurrency {n}"), GroupOrdering::None, flow)
        });
        let rates = self.key_rate.iter().map(|&r| {
            let flow = Flow {
                key_rate: Some(crate::model::KeyRate {
                    per_second: f64::from(r),
                    burst: r,
                }),
                ..Flow::default()
            };
            (format!("key_rate {r}/s"), GroupOrdering::None, flow)
        });
        orderings.chain(limits).chain(rates).collect()
    }

    /// The groups the fetch+ack workloads consume, each with its label:
    /// `bench` (created with the stream) alone by default, else one group
    /// per ordering, created before anything is appended.
    async fn groups(
        &self,
        store: &dyn backend::Backend,
        stream: &crate::model::StreamName,
        plain: GroupName,
    ) -> anyhow::Result<Vec<(String, GroupName)>> {
        if !self.ordered() {
            return Ok(vec![(String::new(), plain)]);
        }
        let mut groups = Vec::new();
        for (label, ordering, flow) in self.shapes() {
            let name = shape_group(&label)?;
            let spec = GroupSpec {
                ordering,
                flow,
                ..GroupSpec::new(name.clone())
            };
            store
                .create_group(stream, spec)
                .await
                .with_context(|| format!("cannot create a group with {label}"))?;
            groups.push((format!(" ({label})"), name));
        }
        Ok(groups)
    }
}

#[cfg(feature = "wasm")]
impl BenchArgs {
    /// What the handler costs to bring up (size, compile without a cache,
    /// cold start), then end to end through it in each chosen instance mode.
    async fn handler_workloads(
        &self,
        store: &std::sync::Arc<dyn backend::Backend>,
    ) -> anyhow::Result<(HandlerStartup, Vec<WorkloadResult>)> {
        use crate::model::HandlerName;
        use crate::wasm::{
            EngineOptions, HandlerEnv, HandlerRunner, InstanceMode, Limits, WasmEngine,
        };

        for &concurrency in &self.concurrency {
            anyhow::ensure!(
                (1..=crate::handlers::MAX_CONCURRENCY).contains(&concurrency),
                "--concurrency must be between 1 and {} (got {concurrency})",
                crate::handlers::MAX_CONCURRENCY
            );
        }
        anyhow::ensure!(
            (1..=crate::model::MAX_FETCH_LIMIT as usize).contains(&self.max_demand),
            "--max-demand must be between 1 and {}",
            crate::model::MAX_FETCH_LIMIT
        );
        for &size in &self.batch_size {
            anyhow::ensure!(
                (1..=self.max_demand).contains(&size),
                "--batch-size must be between 1 and --max-demand ({}): got {size}",
                self.max_demand
            );
        }
        let (bytes, label, shown) = match &self.handler {
            Some(path) => (
                std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?,
                path.file_stem().map_or_else(
                    || "handler".to_owned(),
                    |s| s.to_string_lossy().into_owned(),
                ),
                path.display().to_string(),
            ),
            None => (
                crate::example_guests::get("echo")
                    .context("the example guests have no echo")?
                    .to_vec(),
                "echo".to_owned(),
                "the example guest echo".to_owned(),
            ),
        };
        let engine = WasmEngine::new(EngineOptions::default())?;
        let size_bytes = bytes.len();
        let compiling = std::time::Instant::now();
        let module = engine
            .load(bytes, None)
            .await
            .with_context(|| format!("{shown} is not a usable handler"))?;
        let compile = compiling.elapsed();
        for &size in &self.batch_size {
            module
                .check_batch_size(size)
                .map_err(|e| anyhow::anyhow!("{shown}: {e}"))?;
        }
        // A runner of its own with no warm instance: its first call is the
        // first instance of this module in the process.
        let cold = HandlerRunner::new(
            module.clone(),
            HandlerEnv::new(HandlerName::parse("bench")?, std::sync::Arc::clone(store)),
            Limits {
                instance: InstanceMode::Fresh,
                ..Limits::default()
            },
        )?;
        let cold_start = bench::cold_start(&**store, &cold).await?;
        let startup = HandlerStartup {
            handler: label.clone(),
            size_bytes,
            compile_ms: compile.as_secs_f64() * 1000.0,
            cold_start_ms: cold_start.as_secs_f64() * 1000.0,
        };
        let modes: &[InstanceMode] = match self.instance {
            InstanceChoice::Reuse => &[InstanceMode::Reuse],
            InstanceChoice::Fresh => &[InstanceMode::Fresh],
            InstanceChoice::Both => &[InstanceMode::Reuse, InstanceMode::Fresh],
        };
        let mut results = Vec::new();
        let several = self.concurrency.len() > 1;
        let batched = self.batch_size.iter().any(|&size| size != 1);
        let ordered = self.ordered();
        let shapes = self.shapes();
        let runs = modes.iter().flat_map(|&m| {
            let shapes = &shapes;
            self.concurrency.iter().flat_map(move |&c| {
                self.batch_size
                    .iter()
                    .flat_map(move |&b| shapes.iter().map(move |o| (m, c, b, o.clone())))
            })
        });
        for (mode, concurrency, batch_size, (label_of_shape, ordering, flow)) in runs {
            let mut name = format!("{label} e2e ({}", mode_name(mode));
            if several {
                name.push_str(&format!(", concurrency {concurrency}"));
            }
            if batched {
                name.push_str(&format!(", batch {batch_size}"));
            }
            if ordered {
                name.push_str(&format!(", {label_of_shape}"));
            }
            name.push(')');
            let env = HandlerEnv::new(HandlerName::parse("bench")?, std::sync::Arc::clone(store));
            let limits = Limits {
                instance: mode,
                max_warm: concurrency,
                ..Limits::default()
            };
            let runner = HandlerRunner::new(module.clone(), env, limits)?;
            let workload = bench::HandlerWorkload {
                name: name.clone(),
                events: self.handler_events,
                concurrency,
                max_demand: self.max_demand,
                partitions: self.partitions,
                keys: self.keys as usize,
                ordering,
                flow,
                batch_size,
            };
            let bar = progress(self.handler_events, &name, self.json);
            let result = bench::through_handler(
                std::sync::Arc::clone(store),
                std::sync::Arc::new(runner),
                &workload,
                |n| bar.set_position(n as u64),
            )
            .await?;
            bar.finish_and_clear();
            results.push(result);
        }
        Ok((startup, results))
    }
}

#[cfg(feature = "wasm")]
fn mode_name(mode: crate::wasm::InstanceMode) -> &'static str {
    match mode {
        crate::wasm::InstanceMode::Reuse => "reuse",
        crate::wasm::InstanceMode::Fresh => "fresh",
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

/// A latency in ms, in µs below a millisecond and in s from a second.
fn duration(ms: f64) -> String {
    if ms < 1.0 {
        format!("{:.1}µs", ms * 1000.0)
    } else if ms < 1000.0 {
        format!("{ms:.2}ms")
    } else {
        format!("{:.2}s", ms / 1000.0)
    }
}

/// The handler's size, compile time and cold start, one line.
fn startup_line(s: &HandlerStartup) -> String {
    format!(
        "{}: component {:.2} MiB ({} bytes), compile {} (no cache), cold start {}",
        s.handler,
        s.size_bytes as f64 / (1024.0 * 1024.0),
        s.size_bytes,
        duration(s.compile_ms),
        duration(s.cold_start_ms)
    )
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
            "{:<width$}  {:>9}  {:>12.0}  {:>9}  {:>9}",
            r.name,
            r.events,
            r.events_per_sec,
            duration(r.p50_ms),
            duration(r.p99_ms)
        );
    }
}

/// `result` with `suffix` after its name.
fn named(mut result: WorkloadResult, suffix: &str) -> WorkloadResult {
    result.name.push_str(suffix);
    result
}

/// The group a shape's workloads consume: `bench-` and its label, with
/// what a group name may not hold made a dash.
fn shape_group(label: &str) -> anyhow::Result<GroupName> {
    Ok(GroupName::parse(format!(
        "bench-{}",
        label.replace([' ', '_', '/'], "-")
    ))?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_shape_has_its_own_group_name() {
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            bench: BenchArgs,
        }
        let cli = <Cli as clap::Parser>::try_parse_from([
            "bench",
            "--ordering",
            "none,key,partition",
            "--key-concurrency",
            "4,16",
            "--key-rate",
            "100000,5",
        ])
        .unwrap();
        let shapes = cli.bench.shapes();
        let names: Vec<String> = shapes
            .iter()
            .map(|(label, ..)| shape_group(label).unwrap().to_string())
            .collect();
        assert_eq!(names.len(), 7);
        assert_eq!(names[6], "bench-key-rate-5-s");
        let mut unique = names.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(unique.len(), names.len(), "{names:?}");
        assert_eq!(shapes[5].2.key_rate.unwrap().burst, 100_000);
    }

    #[test]
    fn the_startup_line_names_size_compile_and_cold_start() {
        let line = startup_line(&HandlerStartup {
            handler: "echo".into(),
            size_bytes: 1_684_342,
            compile_ms: 1150.0,
            cold_start_ms: 0.25,
        });
        assert_eq!(
            line,
            "echo: component 1.61 MiB (1684342 bytes), compile 1.15s (no cache), cold start 250.0µs"
        );
    }
}
