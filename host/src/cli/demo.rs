//! `rheo demo`: the whole story in one command, on the embedded default
//! (SQLite in a temporary folder), narrated step by step.
//!
//! It drives the same library the server runs — backend, handler registry,
//! WebAssembly runtime — in this process, with the example guests from
//! `guests/` that the binary embeds ([`crate::example_guests`]).

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Args;
use serde_json::{Value, json};

use crate::backend::{
    self, Backend, CreateStream, DeadLettersRequest, FetchRequest, Partitions, Redrive, Replay,
};
use crate::clock::SystemClock;
use crate::handlers::{HandlerRegistry, HandlerView, Manifest};
use crate::model::{
    ConsumerId, Event, EventId, EventInput, GroupName, GroupSpec, HandlerName, JsonObject, Lag,
    Query, Settlement, StreamName, parse_where,
};
use crate::wasm::{EngineOptions, WasmEngine};

/// How long the demo waits for handlers to catch up before giving up.
const PATIENCE: Duration = Duration::from_secs(60);

/// Arguments of `rheo demo`.
#[derive(Debug, Args)]
pub(crate) struct DemoArgs {
    /// Keep the demo's folder (database and handlers) instead of deleting it,
    /// to look around afterwards (e.g. `rheo serve --backend sqlite://<dir>/rheo.db`).
    #[arg(long)]
    keep: bool,

    /// Orders to stream through the hot swap.
    #[arg(long, default_value_t = 2_000)]
    swap_events: usize,
}

impl DemoArgs {
    pub(crate) async fn run(self) -> anyhow::Result<()> {
        let started = Instant::now();
        let temp = tempfile::Builder::new()
            .prefix("rheo-demo-")
            .tempdir()
            .context("cannot create a temporary folder")?;
        let dir = temp.path().to_path_buf();
        let demo = Demo::open(&dir).await?;
        demo.story(self.swap_events).await?;
        demo.registry.shutdown().await;
        if self.keep {
            let kept = temp.keep();
            println!(
                "\nThe demo's data is in {}: `rheo serve --backend sqlite://{}/rheo.db` serves it.",
                kept.display(),
                kept.display()
            );
        }
        println!(
            "\nDone in {:.1} s. Next: `rheo serve`, then the quickstart in README.md.",
            started.elapsed().as_secs_f64()
        );
        Ok(())
    }
}

struct Demo {
    backend: Arc<dyn Backend>,
    registry: HandlerRegistry,
    step: std::cell::Cell<u32>,
}

fn sn(name: &str) -> StreamName {
    StreamName::parse(name).expect("a valid demo stream name")
}

fn gn(name: &str) -> GroupName {
    GroupName::parse(name).expect("a valid demo group name")
}

fn hn(name: &str) -> HandlerName {
    HandlerName::parse(name).expect("a valid demo handler name")
}

fn object(value: Value) -> JsonObject {
    match value {
        Value::Object(o) => o,
        _ => JsonObject::new(),
    }
}

/// An order of the story; the 4th and the 9th carry a declined card.
fn order(i: usize) -> EventInput {
    let customer = format!("customer-{}", i % 5 + 1);
    let mut payload = json!({"order": i, "customer": customer, "total": 40 + (i * 37) % 150});
    if i == 4 || i == 9 {
        payload["poison"] = json!(true);
        payload["reason"] = json!("card declined by issuer");
    }
    EventInput {
        id: Some(EventId::parse(format!("order-{i}")).expect("a valid id")),
        event_type: Some("order.placed".into()),
        key: Some(customer),
        payload: object(payload),
        metadata: object(json!({"correlation_id": format!("checkout-{i}")})),
        ..EventInput::default()
    }
}

fn compact(value: &JsonObject) -> String {
    serde_json::to_string(value).unwrap_or_default()
}

impl Demo {
    async fn open(dir: &std::path::Path) -> anyhow::Result<Self> {
        let url = format!("sqlite://{}", dir.join("rheo.db").display());
        println!("Rheo demo — everything runs in this process, on SQLite at {url}");
        println!("(the embedded default: nothing to install, durable on disk).");
        let backend = backend::open(&url, SystemClock::shared())
            .await
            .context("cannot open the demo database")?;
        let engine = WasmEngine::new(EngineOptions::default())?;
        let registry =
            HandlerRegistry::new(engine, Arc::clone(&backend), Some(&dir.join("handlers")))?;
        Ok(Self {
            backend,
            registry,
            step: std::cell::Cell::new(0),
        })
    }

    fn heading(&self, title: &str) {
        let n = self.step.get() + 1;
        self.step.set(n);
        println!("\n{n}. {title}");
    }

    fn guest(&self, name: &str) -> anyhow::Result<Vec<u8>> {
        crate::example_guests::get(name)
            .map(<[u8]>::to_vec)
            .with_context(|| {
                format!("the example guest {name} is missing: this binary was built without the example guests")
            })
    }

    async fn story(&self, swap_events: usize) -> anyhow::Result<()> {
        let orders = sn("orders");
        let invoices = sn("invoices");

        self.heading("Streams are partitioned, append-only logs");
        for (stream, partitions) in [(&orders, 3), (&invoices, 3)] {
            self.backend
                .create_stream(CreateStream {
                    name: stream.clone(),
                    partition_count: partitions,
                    retention: None,
                })
                .await?;
            println!("   created stream `{stream}` with {partitions} partitions");
        }

        self.heading("Appending events with keys and lineage metadata");
        let appended = self
            .backend
            .append(&orders, (1..=12).map(order).collect())
            .await?;
        println!(
            "   {:<9} {:>9} {:>4}  {:<11} {:<17} payload",
            "id", "partition", "seq", "key", "correlation_id"
        );
        for a in &appended {
            let e = &a.event;
            println!(
                "   {:<9} {:>9} {:>4}  {:<11} {:<17} {}",
                e.id.as_str(),
                e.partition,
                e.sequence,
                e.key.as_deref().unwrap_or("-"),
                e.metadata
                    .get("correlation_id")
                    .and_then(Value::as_str)
                    .unwrap_or("-"),
                compact(&e.payload)
            );
        }
        println!(
            "   (the key picks the partition, Kafka-compatible murmur2: one customer, one partition, in order)"
        );
        let again = self.backend.append_one(&orders, order(3)).await?;
        println!(
            "   appending order-3 again is idempotent: duplicate = {}, still at {}/{}",
            again.duplicate, again.event.partition, again.event.sequence
        );

        self.heading("WebAssembly handlers consume as groups: ack, retry, dead-letter");
        let mut billing = Manifest::new(orders.clone(), gn("billing"));
        billing.concurrency = 4;
        billing.append_to = Some(vec![invoices.clone()]);
        billing
            .config
            .insert("target_stream".into(), invoices.to_string());
        let mut shipping = Manifest::new(orders.clone(), gn("shipping"));
        shipping.concurrency = 4;
        shipping
            .config
            .insert("succeed_on_attempt".into(), "3".into());
        shipping
            .config
            .insert("retry_delay_ms".into(), "100".into());
        let mut fraud = Manifest::new(orders.clone(), gn("fraud"));
        fraud.concurrency = 4;
        let plan = [
            (
                "billing",
                "transform",
                billing,
                "writes an invoice per order to `invoices` (host.append, deterministic id), then acks",
            ),
            (
                "shipping",
                "flaky",
                shipping,
                "asks for a retry in 100 ms until attempt 3, then acks",
            ),
            (
                "fraud",
                "poison",
                fraud,
                "rejects orders whose card was declined: they go to the dead letters",
            ),
        ];
        for (name, guest, manifest, what) in plan {
            let (view, _) = self
                .registry
                .deploy(hn(name), manifest, self.guest(guest)?)
                .await?;
            println!(
                "   deployed `{name}` = guests/{guest} v{} ({}…): {what}",
                view.version.unwrap_or(0),
                &view.digest.as_deref().unwrap_or("")
                    [..12.min(view.digest.as_deref().unwrap_or("").len())]
            );
        }
        self.wait_for("the handlers to settle the 12 orders", || async {
            let b = self.view("billing").await?.counters;
            let s = self.view("shipping").await?.counters;
            let f = self.view("fraud").await?.counters;
            Ok(b.acked >= 12 && s.acked >= 12 && f.acked + f.rejected >= 12)
        })
        .await?;
        self.print_handlers(&["billing", "shipping", "fraud"])
            .await?;

        self.heading("Dead letters keep the event and the handler's reason");
        self.print_dead_letters(&orders, "fraud").await?;

        self.heading("The ack frontier: lag counts a hole until it fills");
        self.lag_with_a_hole(&orders).await?;

        self.heading("History is queryable: by payload and by lineage");
        let big = self
            .query(&orders, json!({"payload.total": {"$gte": 150}}))
            .await?;
        println!("   orders with payload.total >= 150:");
        for e in &big {
            println!(
                "     {} total {}",
                e.id.as_str(),
                e.payload.get("total").unwrap_or(&Value::Null)
            );
        }
        let lineage = self
            .query(&invoices, json!({"metadata.correlation_id": "checkout-7"}))
            .await?;
        println!(
            "   invoices with metadata.correlation_id = checkout-7 (lineage carried by the handler):"
        );
        for e in &lineage {
            println!(
                "     {} caused by {}, {}",
                e.id.as_str(),
                e.metadata
                    .get("causation_id")
                    .and_then(Value::as_str)
                    .unwrap_or("-"),
                compact(&e.payload)
            );
        }

        self.heading("Replay: a group re-reads history; handlers are idempotent");
        let before = self.view("billing").await?.counters.processed;
        let reopened = self
            .backend
            .replay(
                &orders,
                &gn("billing"),
                Replay::FromSequence {
                    after: 0,
                    partitions: Partitions::All,
                },
            )
            .await?;
        println!("   replayed `billing` from the start: {reopened} deliveries re-opened");
        self.wait_for("billing to handle the replay", || async {
            Ok(self.view("billing").await?.counters.acked >= before + reopened)
        })
        .await?;
        let invoices_now = self.count(&invoices).await?;
        println!(
            "   billing processed {} deliveries in all; `invoices` still holds {invoices_now} events (the re-appends were duplicates)",
            self.view("billing").await?.counters.processed
        );

        self.heading("Hot swap while events flow, then redrive the dead letters");
        self.hot_swap(&orders, swap_events).await?;
        let redriven = self
            .backend
            .redrive(&orders, &gn("fraud"), Redrive::All)
            .await?;
        println!("   redrove {redriven} dead letters into `fraud`; v2 accepts them");
        let target = 12 + swap_events as u64;
        self.wait_for("fraud to settle the redriven orders", || async {
            Ok(self.view("fraud").await?.counters.acked >= target)
        })
        .await?;
        self.print_dead_letters(&orders, "fraud").await?;

        self.heading("The handlers catch up; a manual consumer keeps its place");
        for group in ["billing", "shipping"] {
            self.wait_for(&format!("{group} to catch up"), || async {
                Ok(self.lag(&orders, group, Partitions::All).await?.lag == 0)
            })
            .await?;
        }
        for group in ["billing", "shipping", "fraud", "audit"] {
            let lag = self.lag(&orders, group, Partitions::All).await?;
            println!(
                "   {group:<9} lag {:>5}   pending {:>5}   inflight {}   waiting retry {}",
                lag.lag, lag.pending, lag.inflight, lag.waiting_retry
            );
        }
        self.print_handlers(&["billing", "shipping", "fraud"])
            .await?;
        println!("   (`audit` has no handler: its events wait until it fetches again)");
        Ok(())
    }

    async fn view(&self, name: &str) -> anyhow::Result<HandlerView> {
        Ok(self.registry.get(&hn(name)).await?)
    }

    /// Polls `done` until it holds, or fails after [`PATIENCE`].
    async fn wait_for<F, Fut>(&self, what: &str, done: F) -> anyhow::Result<()>
    where
        F: Fn() -> Fut,
        Fut: Future<Output = anyhow::Result<bool>>,
    {
        let deadline = Instant::now() + PATIENCE;
        while !done().await? {
            if Instant::now() > deadline {
                bail!("gave up waiting for {what} after {} s", PATIENCE.as_secs());
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Ok(())
    }

    async fn print_handlers(&self, names: &[&str]) -> anyhow::Result<()> {
        println!(
            "   {:<9} {:>7} {:>9} {:>6} {:>7} {:>8}",
            "handler", "version", "processed", "acked", "retried", "rejected"
        );
        for name in names {
            let v = self.view(name).await?;
            println!(
                "   {:<9} {:>7} {:>9} {:>6} {:>7} {:>8}",
                name,
                v.version.unwrap_or(0),
                v.counters.processed,
                v.counters.acked,
                v.counters.retried,
                v.counters.rejected
            );
        }
        Ok(())
    }

    async fn print_dead_letters(&self, stream: &StreamName, group: &str) -> anyhow::Result<()> {
        let page = self
            .backend
            .dead_letters(DeadLettersRequest {
                stream: stream.clone(),
                group: gn(group),
                limit: 100,
                after: None,
            })
            .await?;
        if page.dead_letters.is_empty() {
            println!("   `{group}` has no dead letters");
        }
        for d in &page.dead_letters {
            println!(
                "   dead letter {} ({}/{}), attempt {}: {:?}",
                d.event_id.as_str(),
                d.partition,
                d.sequence,
                d.attempt,
                d.reason
            );
        }
        Ok(())
    }

    async fn lag(
        &self,
        stream: &StreamName,
        group: &str,
        partitions: Partitions,
    ) -> anyhow::Result<Lag> {
        Ok(self.backend.lag(stream, &gn(group), &partitions).await?)
    }

    /// Group `audit` consumes by hand: it takes four leases from one
    /// partition and acks all but the second.
    async fn lag_with_a_hole(&self, orders: &StreamName) -> anyhow::Result<()> {
        let audit = gn("audit");
        self.backend
            .create_group(orders, GroupSpec::new(audit.clone()))
            .await?;
        let stream = self.backend.get_stream(orders).await?;
        let partition = (0u32..)
            .zip(&stream.high_watermarks)
            .max_by_key(|(_, hw)| **hw)
            .map_or(0, |(p, _)| p);
        let leases = self
            .backend
            .fetch(FetchRequest {
                stream: orders.clone(),
                group: audit.clone(),
                limit: 4,
                consumer_id: ConsumerId::parse("auditor-1")?,
                lease_ms: 60_000,
                partitions: Partitions::Only(vec![partition]),
            })
            .await?;
        if leases.len() < 2 {
            bail!("partition {partition} has too few events for the example");
        }
        let seqs: Vec<String> = leases
            .iter()
            .map(|l| l.event.sequence.to_string())
            .collect();
        println!(
            "   group `audit` leased sequences {} of partition {partition}; it acks all but {}",
            seqs.join(", "),
            seqs[1]
        );
        let mut held = leases;
        let hole = held.remove(1);
        let acks = held
            .into_iter()
            .map(|l| Settlement::ack(l.into_target()))
            .collect();
        for r in self.backend.settle(orders, &audit, acks).await? {
            r?;
        }
        let show = |lag: &Lag| {
            let p = &lag.partitions[&partition];
            format!(
                "frontier {}, high watermark {}, lag {}",
                p.frontier, p.high_watermark, p.lag
            )
        };
        let only = || Partitions::Only(vec![partition]);
        let lag = self.lag(orders, "audit", only()).await?;
        println!(
            "   with the hole: {} — acks after a gap do not move the frontier",
            show(&lag)
        );
        self.backend
            .settle(orders, &audit, vec![Settlement::ack(hole.into_target())])
            .await?
            .into_iter()
            .collect::<Result<Vec<_>, _>>()?;
        let lag = self.lag(orders, "audit", only()).await?;
        println!(
            "   hole filled:    {} — the frontier jumps past every acked event",
            show(&lag)
        );
        Ok(())
    }

    async fn query(&self, stream: &StreamName, filter: Value) -> anyhow::Result<Vec<Event>> {
        let query = Query {
            filters: parse_where(&filter)?,
            ..Query::default()
        };
        Ok(self.backend.query(stream, &query).await?.events)
    }

    async fn count(&self, stream: &StreamName) -> anyhow::Result<u64> {
        let s = self.backend.get_stream(stream).await?;
        Ok(s.high_watermarks.iter().sum())
    }

    /// Streams `count` orders into `fraud` while its module is swapped from
    /// `poison` (v1) to `echo` (v2) halfway.
    async fn hot_swap(&self, orders: &StreamName, count: usize) -> anyhow::Result<()> {
        let backend = Arc::clone(&self.backend);
        let stream = orders.clone();
        let producer = tokio::spawn(async move {
            let mut sent = 0;
            while sent < count {
                let n = 100.min(count - sent);
                let batch = (sent..sent + n)
                    .map(|i| EventInput {
                        id: Some(EventId::parse(format!("flow-{i}")).expect("a valid id")),
                        event_type: Some("order.placed".into()),
                        key: Some(format!("customer-{}", i % 50)),
                        payload: object(json!({"order": 1000 + i, "total": i % 200})),
                        ..EventInput::default()
                    })
                    .collect();
                backend.append(&stream, batch).await?;
                sent += n;
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            Ok::<_, backend::Error>(())
        });
        println!(
            "   streaming {count} more orders while swapping `fraud` from poison (v1) to echo (v2)…"
        );
        let quarter = 12 + count as u64 / 4;
        self.wait_for("fraud to get going", || async {
            Ok(self.view("fraud").await?.counters.processed >= quarter)
        })
        .await?;
        let swapped = self
            .registry
            .swap_module(&hn("fraud"), self.guest("echo")?)
            .await?;
        println!(
            "   swapped: `fraud` is now v{} (echo); deliveries in flight finished on v1",
            swapped.version.unwrap_or(0)
        );
        producer.await.context("the producer task failed")??;
        let target = 12 + count as u64;
        self.wait_for("fraud to catch up", || async {
            let c = self.view("fraud").await?.counters;
            Ok(c.acked + c.rejected >= target)
        })
        .await?;
        let view = self.view("fraud").await?;
        for (version, c) in &view.counters_by_version {
            println!(
                "   v{version}: processed {:>5}  acked {:>5}  retried {}  rejected {}  trapped {}",
                c.processed, c.acked, c.retried, c.rejected, c.trapped
            );
        }
        let failed = view.counters.retried + view.counters.trapped + view.counters.timed_out;
        if failed == 0 {
            println!(
                "   no delivery failed because of the swap (retried 0, trapped 0, timed out 0)"
            );
        } else {
            println!(
                "   warning: {failed} deliveries were retried, trapped or timed out during the swap"
            );
        }
        Ok(())
    }
}
