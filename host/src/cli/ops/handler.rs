//! `rheo handler …`: deploy WebAssembly handlers, hot-swap their modules
//! (at once or as a canary), list, inspect, roll back, promote, pause,
//! resume or delete them, show their deploy history, and read or follow
//! their log lines.

use std::io::{BufRead, BufReader, ErrorKind, Write};
use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::{Args, Subcommand};
use serde_json::Value;

use super::{ServerArgs, cell, duration_ms};
use crate::cli::client::{Client, segment};
use crate::cli::multipart::{self, Part};
use crate::cli::table::{Align, Table, key_values};

/// Arguments of `rheo handler`. `new` and `build` work on a project on
/// this machine; the others talk to a server, so each takes the server
/// flags.
#[derive(Debug, Args)]
#[command(arg_required_else_help = true)]
pub(crate) struct HandlerArgs {
    #[command(subcommand)]
    action: HandlerAction,
}

#[derive(Debug, Subcommand)]
enum HandlerAction {
    /// Create a handler project (source, manifest, README and the SDK) in
    /// Rust, Python or JavaScript.
    New(crate::cli::project::NewArgs),
    /// Build a handler project into a component (installs the build tools
    /// into the cache when missing; RHEO_CACHE_DIR, else ~/.cache/rheo).
    Build(crate::cli::project::BuildArgs),
    /// Write one of the example handlers built into this binary as a
    /// `.wasm` file, to deploy without building anything (without NAME:
    /// list them). echo acks every event, poison dead-letters events whose
    /// payload has "poison": true, flaky fails until an attempt, …
    Example {
        /// The example's name.
        name: Option<String>,
        /// Where to write it [default: NAME.wasm in the current folder].
        #[arg(long, value_name = "FILE", requires = "name")]
        to: Option<PathBuf>,
    },
    /// Deploy a handler, or replace its manifest and module (a new version).
    Deploy {
        #[command(flatten)]
        server: ServerArgs,
        /// The handler's name.
        name: String,
        /// Its manifest: stream, group, concurrency, … (.toml or .json).
        #[arg(long, value_name = "FILE")]
        manifest: PathBuf,
        /// The WebAssembly component (.wasm) [default: the manifest's
        /// `module`, relative to the manifest].
        #[arg(long, value_name = "FILE")]
        module: Option<PathBuf>,
    },
    /// Hot-swap a handler's module; deliveries in flight finish on the old
    /// one. With --canary, the new module takes only that share of first
    /// attempts beside the current version, and is rolled back as soon as
    /// it fails more often than the current one by more than --margin, or
    /// promoted at the end of --window (docs/handlers.md#canaries).
    Swap {
        #[command(flatten)]
        server: ServerArgs,
        /// The handler's name.
        name: String,
        /// The new component (.wasm).
        #[arg(long, value_name = "FILE", required_unless_present = "module_at")]
        module: Option<PathBuf>,
        /// The new component, as earlier releases took it (hidden; use
        /// --module).
        #[arg(value_name = "MODULE", hide = true, conflicts_with = "module")]
        module_at: Option<PathBuf>,
        /// Run it as a canary on this share of first attempts, e.g. 10%.
        #[arg(long, value_name = "PERCENT", value_parser = percent)]
        canary: Option<f64>,
        /// How long the canary runs before it is promoted, e.g. 90s, 10m,
        /// 1h [default: 10m].
        #[arg(long, value_name = "DURATION", value_parser = duration_ms, requires = "canary")]
        window: Option<u64>,
        /// How many percentage points more often than the current version
        /// the canary may fail before it is rolled back [default: 5].
        #[arg(long, value_name = "POINTS", requires = "canary")]
        margin: Option<f64>,
        /// First attempts the canary must handle before it is judged
        /// either way [default: 50].
        #[arg(long, value_name = "N", requires = "canary")]
        min_deliveries: Option<u64>,
    },
    /// Make a handler's canary the current version now, whatever its counts
    /// say (`rheo handler rollback` stops it instead).
    Promote {
        #[command(flatten)]
        server: ServerArgs,
        /// The handler's name.
        name: String,
    },
    /// Every deploy, swap, canary, promotion and rollback of a handler,
    /// oldest first: when, what, the version and its digest, who (the
    /// token's name), through which node, and why.
    History {
        #[command(flatten)]
        server: ServerArgs,
        /// The handler's name.
        name: String,
    },
    /// Dry-run a candidate module over the handler's history: it and the
    /// live version each handle the chosen events (as first deliveries, in
    /// the sandbox and limits production uses) and are compared event by
    /// event — outcome, reason, latency and the events each would append —
    /// differences first. Nothing is settled and nothing is appended: no
    /// group changes.
    Try {
        #[command(flatten)]
        server: ServerArgs,
        /// The handler's name.
        name: String,
        /// The candidate component (.wasm).
        #[arg(long, value_name = "FILE")]
        module: PathBuf,
        /// Only events matching these filters, as `rheo event query --where`,
        /// e.g. '{"type": "order.created"}'.
        #[arg(long = "where", value_name = "JSON", value_parser = super::json_object)]
        filter: Option<Value>,
        /// Only events at or after this RFC 3339 time.
        #[arg(long, value_name = "TIME")]
        from: Option<String>,
        /// How many events, from the oldest [server default 100, max 1000].
        #[arg(long, value_name = "N")]
        limit: Option<u32>,
        /// Continue after a previous dry run's last event (its next cursor).
        #[arg(long, value_name = "CURSOR")]
        cursor: Option<String>,
        /// Only the events a key parked in the handler's group is holding
        /// back: its head and what follows it in its partition
        /// (docs/groups.md#quarantine).
        #[arg(long, value_name = "KEY")]
        parked_key: Option<String>,
    },
    /// Every deployed handler with its version and counters.
    List {
        #[command(flatten)]
        server: ServerArgs,
    },
    /// One handler in detail.
    Get {
        #[command(flatten)]
        server: ServerArgs,
        /// The handler's name.
        name: String,
    },
    /// Bring back the previous version (a second rollback undoes the
    /// first); while a canary runs, stop the canary instead.
    Rollback {
        #[command(flatten)]
        server: ServerArgs,
        /// The handler's name.
        name: String,
    },
    /// Stop fetching new deliveries (those in flight finish).
    Pause {
        #[command(flatten)]
        server: ServerArgs,
        /// The handler's name.
        name: String,
    },
    /// Fetch again after a pause.
    Resume {
        #[command(flatten)]
        server: ServerArgs,
        /// The handler's name.
        name: String,
    },
    /// Drain and remove a handler (its group and events stay).
    Delete {
        #[command(flatten)]
        server: ServerArgs,
        /// The handler's name.
        name: String,
    },
    /// A handler's last log lines, kept in memory by the server that
    /// answers (in a cluster: what ran on that node), oldest first; one line
    /// each: time, level, version, event id and attempt (inside a
    /// delivery), message. With --json, one JSON object per line.
    Logs {
        #[command(flatten)]
        server: ServerArgs,
        /// The handler's name.
        name: String,
        /// Keep printing new lines as they come, until interrupted or the
        /// handler is deleted or the server stops; lines missed (no longer
        /// kept, or this reader fell behind) are noted on stderr.
        #[arg(long, short = 'f')]
        follow: bool,
        /// How many of the last lines to print first [default: 100; at most
        /// what the server keeps, `rheo serve --handler-log-lines`]
        #[arg(long, value_name = "N")]
        limit: Option<u32>,
    },
}

impl HandlerArgs {
    pub(crate) fn run(self) -> anyhow::Result<()> {
        let server = match self.action {
            HandlerAction::New(new) => return new.run(),
            HandlerAction::Build(build) => return build.run(),
            HandlerAction::Example { name, to } => return example(name, to),
            HandlerAction::Deploy { ref server, .. }
            | HandlerAction::Swap { ref server, .. }
            | HandlerAction::Try { ref server, .. }
            | HandlerAction::List { ref server }
            | HandlerAction::Get { ref server, .. }
            | HandlerAction::Rollback { ref server, .. }
            | HandlerAction::Promote { ref server, .. }
            | HandlerAction::History { ref server, .. }
            | HandlerAction::Pause { ref server, .. }
            | HandlerAction::Resume { ref server, .. }
            | HandlerAction::Delete { ref server, .. }
            | HandlerAction::Logs { ref server, .. } => server,
        };
        let client = server.client()?;
        let path = |name: &str, rest: &str| format!("/v1/handlers/{}{rest}", segment(name));
        let (answer, done) = match &self.action {
            HandlerAction::List { .. } => {
                let answer = client.get("/v1/handlers", &[])?;
                return server.print(&answer, |a| render_list(a, server.wide()));
            }
            HandlerAction::Get { name, .. } => {
                let answer = client.get(&path(name, ""), &[])?;
                return server.print(&answer, render_one);
            }
            HandlerAction::History { name, .. } => {
                let answer = client.get(&path(name, "/history"), &[])?;
                return server.print(&answer, render_history);
            }
            HandlerAction::Try {
                name,
                module,
                filter,
                from,
                limit,
                cursor,
                parked_key,
                ..
            } => {
                let mut filter = filter.clone();
                let mut after_sequence = None;
                if let Some(key) = parked_key {
                    let head = parked_head(&client, name, key)?;
                    let mut narrowed = filter.take().unwrap_or_else(|| serde_json::json!({}));
                    narrowed["key"] = serde_json::json!(key);
                    narrowed["partition"] = head["partition"].clone();
                    filter = Some(narrowed);
                    after_sequence = head["sequence"].as_u64().map(|seq| seq - 1);
                }
                let mut query = serde_json::Map::new();
                let mut put = |key: &str, value: Value| {
                    if !value.is_null() {
                        query.insert(key.to_owned(), value);
                    }
                };
                put("where", filter.unwrap_or(Value::Null));
                put("after_sequence", serde_json::json!(after_sequence));
                put("from", serde_json::json!(from));
                put("limit", serde_json::json!(limit));
                put("cursor", serde_json::json!(cursor));
                let query = serde_json::to_vec(&query)?;
                let wasm = read(module)?;
                let body = multipart::encode(&[
                    Part {
                        name: "module",
                        filename: &file_name(module),
                        content_type: "application/wasm",
                        bytes: &wasm,
                    },
                    Part {
                        name: "query",
                        filename: "query.json",
                        content_type: "application/json",
                        bytes: &query,
                    },
                ]);
                let answer =
                    client.post_bytes(&path(name, "/try"), &body.content_type, &body.body)?;
                return server.print(&answer, render_trial);
            }
            HandlerAction::Logs {
                name,
                follow,
                limit,
                ..
            } => {
                let mut query = Vec::new();
                if let Some(limit) = limit {
                    query.push(("limit", limit.to_string()));
                }
                let path = path(name, "/logs");
                if !follow {
                    let answer = client.get(&path, &query)?;
                    let lines = answer["lines"].as_array().map_or(&[][..], Vec::as_slice);
                    let text: String = lines.iter().map(|l| log_line(l, server.raw())).collect();
                    return super::emit(&text);
                }
                query.push(("follow", "true".to_owned()));
                let body = client.get_streaming(&path, &query, &[])?;
                return follow_log(body.into_reader(), server.raw());
            }
            HandlerAction::New(_) | HandlerAction::Build(_) | HandlerAction::Example { .. } => {
                unreachable!("run above")
            }
            HandlerAction::Deploy {
                name,
                manifest,
                module,
                ..
            } => (
                deploy(&client, &path(name, ""), manifest, module.as_deref())?,
                "deployed",
            ),
            HandlerAction::Swap {
                name,
                module,
                module_at,
                canary,
                window,
                margin,
                min_deliveries,
                ..
            } => {
                let module = module.as_ref().or(module_at.as_ref());
                let wasm = read(module.expect("clap requires one"))?;
                let Some(share) = canary else {
                    let answer = client.put(&path(name, "/module"), "application/wasm", &wasm)?;
                    return server.print(&answer, |h| summary("swapped", h));
                };
                let mut query = format!("?canary={share}");
                let mut add = |key: &str, value: Option<String>| {
                    if let Some(value) = value {
                        query.push_str(&format!("&{key}={value}"));
                    }
                };
                add("window_ms", window.map(|w| w.to_string()));
                add("margin", margin.map(|m| m.to_string()));
                add("min_deliveries", min_deliveries.map(|n| n.to_string()));
                let target = path(name, &format!("/module{query}"));
                let answer = client.put(&target, "application/wasm", &wasm)?;
                return server.print(&answer, canary_started);
            }
            HandlerAction::Promote { name, .. } => {
                (client.post_empty(&path(name, "/promote"))?, "promoted")
            }
            HandlerAction::Rollback { name, .. } => {
                (client.post_empty(&path(name, "/rollback"))?, "rolled back")
            }
            HandlerAction::Pause { name, .. } => {
                (client.post_empty(&path(name, "/pause"))?, "paused")
            }
            HandlerAction::Resume { name, .. } => {
                (client.post_empty(&path(name, "/resume"))?, "resumed")
            }
            HandlerAction::Delete { name, .. } => {
                let answer = client.delete(&path(name, ""))?;
                return server.print(&answer, |_| format!("deleted handler {name}\n"));
            }
        };
        server.print(&answer, |h| summary(done, h))
    }
}

/// `PUT /v1/handlers/{h}` with the manifest and module as multipart parts.
/// Without `module`, the manifest's `module` (relative to the manifest).
fn deploy(
    client: &Client,
    path: &str,
    manifest: &Path,
    module: Option<&Path>,
) -> anyhow::Result<Value> {
    let content_type = match manifest.extension().and_then(|e| e.to_str()) {
        Some("toml") => "application/toml",
        Some("json") => "application/json",
        _ => anyhow::bail!(
            "{}: a manifest is a .toml or .json file",
            manifest.display()
        ),
    };
    let manifest_bytes = read(manifest)?;
    let module = match module {
        Some(module) => module.to_path_buf(),
        None => manifest_module(manifest, content_type, &manifest_bytes)?,
    };
    let module = module.as_path();
    let module_bytes = read(module)?;
    let body = multipart::encode(&[
        Part {
            name: "manifest",
            filename: &file_name(manifest),
            content_type,
            bytes: &manifest_bytes,
        },
        Part {
            name: "module",
            filename: &file_name(module),
            content_type: "application/wasm",
            bytes: &module_bytes,
        },
    ]);
    Ok(client.put(path, &body.content_type, &body.body)?)
}

/// The `module` a manifest names, relative to the manifest's folder.
fn manifest_module(manifest: &Path, content_type: &str, bytes: &[u8]) -> anyhow::Result<PathBuf> {
    // Only `module` is read here; the server checks the rest.
    let module = if content_type == "application/toml" {
        let table: toml::Table = toml::from_str(&String::from_utf8_lossy(bytes))
            .with_context(|| format!("{}", manifest.display()))?;
        table
            .get("module")
            .and_then(|m| m.as_str())
            .map(str::to_owned)
    } else {
        let value: Value =
            serde_json::from_slice(bytes).with_context(|| format!("{}", manifest.display()))?;
        value["module"].as_str().map(str::to_owned)
    };
    let Some(module) = module else {
        anyhow::bail!(
            "{} names no `module`: give the component with --module FILE.wasm",
            manifest.display()
        );
    };
    Ok(manifest
        .parent()
        .unwrap_or_else(|| Path::new("."))
        .join(module))
}

/// `rheo handler example`: lists the embedded example guests, or writes
/// one out.
fn example(name: Option<String>, to: Option<PathBuf>) -> anyhow::Result<()> {
    let names: Vec<&str> = crate::example_guests::names().collect();
    let Some(name) = name else {
        if names.is_empty() {
            return super::emit("this rheo was built without the example handlers\n");
        }
        return super::emit(&format!("{}\n", names.join("\n")));
    };
    let Some(wasm) = crate::example_guests::get(&name) else {
        return Err(super::Invalid(format!(
            "no example handler named {name}; there are: {}",
            names.join(", ")
        ))
        .into());
    };
    let to = to.unwrap_or_else(|| PathBuf::from(format!("{name}.wasm")));
    std::fs::write(&to, wasm).with_context(|| format!("cannot write {}", to.display()))?;
    super::emit(&format!(
        "wrote {} ({} KiB), the example handler {name}\n",
        to.display(),
        wasm.len().div_ceil(1024)
    ))
}

fn read(path: &Path) -> anyhow::Result<Vec<u8>> {
    std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))
}

fn file_name(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// The first 12 hex digits of a digest, as git shortens hashes.
fn short(digest: &Value) -> String {
    digest
        .as_str()
        .map_or_else(|| "-".to_owned(), |d| d.chars().take(12).collect())
}

/// `handler echo deployed: version 1 (digest 0123456789ab), running on orders/billing`.
fn summary(done: &str, h: &Value) -> String {
    let mut out = format!(
        "handler {} {done}: version {} (digest {}), {} on {}/{}",
        cell(&h["name"]),
        cell(&h["version"]),
        short(&h["digest"]),
        cell(&h["status"]),
        cell(&h["stream"]),
        cell(&h["group"]),
    );
    if let Some(previous) = h["previous_version"].as_u64() {
        out.push_str(&format!("; previous version {previous}"));
    }
    out.push('\n');
    if let Some(error) = h["last_error"].as_str() {
        out.push_str(&format!("last error: {error}\n"));
    }
    out
}

/// A dry run: a line per version with its totals, then one row per event,
/// differences first (`*`), and where to continue.
fn render_trial(t: &Value) -> String {
    let events = t["events"].as_array().map_or(&[][..], Vec::as_slice);
    let live = !t["current"].is_null();
    let mut out = format!(
        "dry run of handler {} on stream {}: {} events{}\n",
        cell(&t["handler"]),
        cell(&t["stream"]),
        events.len(),
        if live {
            format!(
                ", {} where the candidate differs from the live version",
                cell(&t["differing"])
            )
        } else {
            ", no live version to compare with".to_owned()
        },
    );
    let mut versions = Table::new(&[
        ("VERSION", Align::Left),
        ("DIGEST", Align::Left),
        ("ACK", Align::Right),
        ("RETRY", Align::Right),
        ("REJECT", Align::Right),
        ("TRAP", Align::Right),
        ("TIMEOUT", Align::Right),
        ("LIMIT", Align::Right),
        ("APPENDS", Align::Right),
        ("P50", Align::Right),
        ("MAX", Align::Right),
    ]);
    for (label, v) in [
        ("candidate".to_owned(), &t["candidate"]),
        (
            format!("live v{}", cell(&t["current"]["version"])),
            &t["current"],
        ),
    ] {
        if v.is_null() {
            continue;
        }
        let totals = &v["totals"];
        versions.row([
            label,
            short(&v["digest"]),
            cell(&totals["acked"]),
            cell(&totals["retried"]),
            cell(&totals["rejected"]),
            cell(&totals["trapped"]),
            cell(&totals["timed_out"]),
            cell(&totals["limited"]),
            cell(&totals["appended"]),
            micros(&totals["p50_us"]),
            micros(&totals["max_us"]),
        ]);
    }
    out.push_str(&versions.render());
    if events.is_empty() {
        out.push_str("no events match\n");
        return out;
    }
    let mut columns = vec![
        ("", Align::Left),
        ("EVENT", Align::Left),
        ("P/SEQ", Align::Right),
        ("CANDIDATE", Align::Left),
    ];
    if live {
        columns.push(("LIVE", Align::Left));
    }
    let mut table = Table::new(&columns);
    for e in events {
        let mut row = vec![
            if e["differs"] == Value::Bool(true) {
                "*"
            } else {
                ""
            }
            .to_owned(),
            cell(&e["event_id"]),
            format!("{}/{}", cell(&e["partition"]), cell(&e["sequence"])),
            trial_run(&e["candidate"]),
        ];
        if live {
            row.push(trial_run(&e["current"]));
        }
        table.row(row);
    }
    out.push('\n');
    out.push_str(&table.render());
    if let Some(next) = t["next_cursor"].as_str() {
        out.push_str(&format!("more events: --cursor {next}\n"));
    }
    out
}

/// One version's result on one event: `reject: why`, `retry in 500 ms:
/// why`, `ack`, and `, 2 appends` when it appended.
fn trial_run(run: &Value) -> String {
    let mut text = cell(&run["outcome"]);
    if let Some(delay) = run["delay_ms"].as_u64() {
        text.push_str(&format!(" in {delay} ms"));
    }
    if let Some(reason) = run["reason"].as_str() {
        text.push_str(&format!(": {reason}"));
    }
    match run["appends"].as_array().map_or(0, Vec::len) {
        0 => {}
        1 => text.push_str(", 1 append"),
        n => text.push_str(&format!(", {n} appends")),
    }
    if let Some(refused) = run["refused_appends"].as_u64().filter(|n| *n > 0) {
        text.push_str(&format!(", {refused} refused"));
    }
    text
}

/// Microseconds, readably.
fn micros(us: &Value) -> String {
    match us.as_u64() {
        Some(us) if us >= 10_000 => format!("{} ms", us / 1000),
        Some(us) => format!("{us} µs"),
        None => cell(us),
    }
}

/// NAME STREAM GROUP STATUS VERSION DIGEST PROCESSED ACKED RETRIED REJECTED.
/// NAME STREAM GROUP STATUS VERSION DIGEST and the main counters; `wide`
/// adds the whole digest and every other counter the server keeps.
fn render_list(answer: &Value, wide: bool) -> String {
    let handlers = answer["handlers"].as_array().map_or(&[][..], Vec::as_slice);
    if handlers.is_empty() {
        return "no handlers deployed (deploy one with `rheo handler deploy`)\n".to_owned();
    }
    const MAIN: [&str; 4] = ["processed", "acked", "retried", "rejected"];
    let mut extra: Vec<String> = handlers
        .iter()
        .filter_map(|h| h["counters"].as_object())
        .flat_map(|c| c.keys().cloned())
        .filter(|k| wide && !MAIN.contains(&k.as_str()))
        .collect();
    extra.sort();
    extra.dedup();
    let headers: Vec<String> = extra
        .iter()
        .map(|k| k.to_ascii_uppercase().replace('_', "-"))
        .collect();
    let mut columns = vec![
        ("NAME", Align::Left),
        ("STREAM", Align::Left),
        ("GROUP", Align::Left),
        ("STATUS", Align::Left),
        ("VERSION", Align::Right),
        ("DIGEST", Align::Left),
        ("PROCESSED", Align::Right),
        ("ACKED", Align::Right),
        ("RETRIED", Align::Right),
        ("REJECTED", Align::Right),
    ];
    columns.extend(headers.iter().map(|h| (h.as_str(), Align::Right)));
    let mut table = Table::new(&columns);
    for h in handlers {
        let counters = &h["counters"];
        let digest = if wide {
            cell(&h["digest"])
        } else {
            short(&h["digest"])
        };
        let mut row = vec![
            cell(&h["name"]),
            cell(&h["stream"]),
            cell(&h["group"]),
            cell(&h["status"]),
            cell(&h["version"]),
            digest,
        ];
        row.extend(
            (MAIN.iter().copied())
                .chain(extra.iter().map(String::as_str))
                .map(|k| cell(&counters[k])),
        );
        table.row(row);
    }
    table.render()
}

fn render_one(h: &Value) -> String {
    let c = &h["counters"];
    let config = h["config"]
        .as_object()
        .filter(|m| !m.is_empty())
        .map_or_else(
            || "-".to_owned(),
            |m| {
                m.iter()
                    .map(|(k, v)| format!("{k}={}", cell(v)))
                    .collect::<Vec<_>>()
                    .join(", ")
            },
        );
    let mut pairs = vec![
        ("name", cell(&h["name"])),
        ("stream", cell(&h["stream"])),
        ("group", cell(&h["group"])),
        ("status", cell(&h["status"])),
        ("version", cell(&h["version"])),
        ("previous version", cell(&h["previous_version"])),
        ("digest", cell(&h["digest"])),
        ("deployed at", cell(&h["deployed_at"])),
        ("config", config),
        ("processed", cell(&c["processed"])),
        ("acked", cell(&c["acked"])),
        ("retried", cell(&c["retried"])),
        ("rejected", cell(&c["rejected"])),
        ("trapped", cell(&c["trapped"])),
        ("timed out", cell(&c["timed_out"])),
        ("inflight", cell(&c["inflight"])),
    ];
    let canary = &h["canary"];
    if canary.is_object() {
        let k = &canary["counts"];
        pairs.extend([
            (
                "canary",
                format!(
                    "version {} (digest {}) on {}% of first attempts",
                    cell(&canary["version"]),
                    short(&canary["digest"]),
                    cell(&canary["share_percent"])
                ),
            ),
            ("canary ends at", cell(&canary["ends_at"])),
            (
                "canary failed",
                format!(
                    "{} of {} (current version: {} of {}) here",
                    cell(&k["canary_failed"]),
                    cell(&k["canary_handled"]),
                    cell(&k["current_failed"]),
                    cell(&k["current_handled"])
                ),
            ),
        ]);
    }
    if let Some(error) = h["last_error"].as_str() {
        pairs.push(("last error", error.to_owned()));
    }
    key_values(&pairs)
}

/// `handler echo: canary version 3 (digest …) on 10% of first attempts until …; version 2 stays current`.
fn canary_started(h: &Value) -> String {
    let c = &h["canary"];
    format!(
        "handler {}: canary version {} (digest {}) on {}% of first attempts until {}; version {} stays current\n\
         it is rolled back if it fails more than {} points more often than version {} (after {} deliveries), else promoted then;\n\
         `rheo handler promote {}` or `rheo handler rollback {}` decide now\n",
        cell(&h["name"]),
        cell(&c["version"]),
        short(&c["digest"]),
        cell(&c["share_percent"]),
        cell(&c["ends_at"]),
        cell(&h["version"]),
        cell(&c["margin_percent"]),
        cell(&h["version"]),
        cell(&c["min_deliveries"]),
        cell(&h["name"]),
        cell(&h["name"]),
    )
}

/// A deploy history: one row per step, oldest first.
fn render_history(answer: &Value) -> String {
    let steps = answer["steps"].as_array().map_or(&[][..], Vec::as_slice);
    if steps.is_empty() {
        return format!("handler {}: no steps recorded\n", cell(&answer["handler"]));
    }
    let mut table = Table::new(&[
        ("AT", Align::Left),
        ("ACTION", Align::Left),
        ("VERSION", Align::Right),
        ("DIGEST", Align::Left),
        ("BY", Align::Left),
        ("NODE", Align::Left),
        ("REASON", Align::Left),
    ]);
    for s in steps {
        table.row([
            cell(&s["at"]),
            cell(&s["action"]),
            cell(&s["version"]),
            short(&s["digest"]),
            cell(&s["by"]),
            cell(&s["node"]),
            cell(&s["reason"]),
        ]);
    }
    table.render()
}

/// `10%` or `10` as 10.0.
fn percent(text: &str) -> Result<f64, String> {
    let number = text.trim().trim_end_matches('%').trim();
    match number.parse::<f64>() {
        Ok(p) if p > 0.0 && p <= 100.0 => Ok(p),
        _ => Err("expected a share above 0% and at most 100%, e.g. 10%".to_owned()),
    }
}

/// One log line as printed: compact JSON with `--json`, else
/// `2026-12-01T20:31:02.123Z INFO  v3 evt-1 #2 message` (event id and
/// attempt only inside a delivery; `[stdout]` or `[stderr]` before the
/// message when it came from there).
fn log_line(line: &Value, json: bool) -> String {
    if json {
        return format!("{line}\n");
    }
    let level = line["level"].as_str().unwrap_or("-").to_ascii_uppercase();
    let mut out = format!("{} {level:<5}", cell(&line["at"]));
    match line["version"].as_u64() {
        Some(v) => out.push_str(&format!(" v{v}")),
        None => out.push_str(" -"),
    }
    if let Some(event) = line["event_id"].as_str() {
        out.push_str(&format!(" {event} #{}", cell(&line["attempt"])));
    }
    if let Some(source @ ("stdout" | "stderr")) = line["source"].as_str() {
        out.push_str(&format!(" [{source}]"));
    }
    out.push(' ');
    out.push_str(line["message"].as_str().unwrap_or(""));
    out.push('\n');
    out
}

/// Prints a followed log's server-sent events as they arrive, until the
/// server ends the stream (or stdout is closed). `gap` events become a note
/// on stderr.
fn follow_log(body: impl std::io::Read, json: bool) -> anyhow::Result<()> {
    let mut reader = BufReader::new(body);
    let mut parser = SseParser::default();
    let mut line = String::new();
    let stdout = std::io::stdout();
    loop {
        line.clear();
        let read = reader
            .read_line(&mut line)
            .context("reading the log stream")?;
        if read == 0 {
            return Ok(());
        }
        let Some(event) = parser.line(line.trim_end_matches(['\n', '\r'])) else {
            continue;
        };
        let text = match event.event.as_str() {
            "line" => match serde_json::from_str::<Value>(&event.data) {
                Ok(value) => log_line(&value, json),
                Err(_) => continue,
            },
            "gap" => {
                let missed = serde_json::from_str::<Value>(&event.data)
                    .ok()
                    .and_then(|v| v["missed"].as_u64())
                    .unwrap_or(0);
                eprintln!(
                    "note: {missed} log line(s) missed here (no longer kept by the server, or this reader fell behind)"
                );
                continue;
            }
            _ => continue,
        };
        let mut out = stdout.lock();
        match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
            Err(e) if e.kind() == ErrorKind::BrokenPipe => return Ok(()),
            other => other.context("writing to stdout")?,
        }
    }
}

/// One server-sent event.
#[derive(Debug, Default, PartialEq, Eq)]
struct SseEvent {
    event: String,
    id: Option<String>,
    data: String,
}

/// The server-sent events format, a line at a time: `field: value` lines
/// up to a blank line make an event; `:` lines are comments (keep-alives).
#[derive(Debug, Default)]
struct SseParser {
    event: Option<String>,
    id: Option<String>,
    data: Option<String>,
}

impl SseParser {
    /// Takes one line (without its end); an event when `line` completes one.
    fn line(&mut self, line: &str) -> Option<SseEvent> {
        if line.is_empty() {
            let data = self.data.take()?;
            return Some(SseEvent {
                event: self.event.take().unwrap_or_else(|| "message".to_owned()),
                id: self.id.take(),
                data,
            });
        }
        if line.starts_with(':') {
            return None;
        }
        let (field, value) = line.split_once(':').unwrap_or((line, ""));
        let value = value.strip_prefix(' ').unwrap_or(value);
        match field {
            "event" => self.event = Some(value.to_owned()),
            "id" => self.id = Some(value.to_owned()),
            "data" => match &mut self.data {
                Some(data) => {
                    data.push('\n');
                    data.push_str(value);
                }
                None => self.data = Some(value.to_owned()),
            },
            _ => {}
        }
        None
    }
}

/// The parked head of `key` in the group handler `name` consumes
/// (`docs/groups.md#quarantine`).
fn parked_head(
    client: &crate::cli::client::Client,
    name: &str,
    key: &str,
) -> anyhow::Result<Value> {
    let handler = client.get(&format!("/v1/handlers/{}", segment(name)), &[])?;
    let (stream, group) = (cell(&handler["stream"]), cell(&handler["group"]));
    let path = format!(
        "/v1/streams/{}/groups/{}/quarantine",
        segment(&stream),
        segment(&group)
    );
    let parked = client.get(&path, &[])?;
    (parked["parked"].as_array().into_iter().flatten())
        .find(|p| p["key"].as_str() == Some(key))
        .cloned()
        .ok_or_else(|| {
            super::Invalid(format!(
                "key {key:?} is not parked in group {group} of stream {stream} \
                 (`rheo group quarantine {stream} {group}` lists the parked keys)"
            ))
            .into()
        })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn canary_shares_and_windows_read_as_people_write_them() {
        assert_eq!(percent("10%"), Ok(10.0));
        assert_eq!(percent(" 2.5 "), Ok(2.5));
        assert_eq!(percent("100%"), Ok(100.0));
        for bad in ["0%", "101", "ten", ""] {
            assert!(percent(bad).is_err(), "{bad:?}");
        }
        assert_eq!(duration_ms("500ms"), Ok(500));
        assert_eq!(duration_ms("90s"), Ok(90_000));
        assert_eq!(duration_ms("10m"), Ok(600_000));
        assert_eq!(duration_ms("1h"), Ok(3_600_000));
        assert_eq!(duration_ms("7d"), Ok(604_800_000));
        for bad in ["10", "0s", "1w", "m", "-5s"] {
            assert!(duration_ms(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn a_history_lists_each_step_with_its_short_digest() {
        let answer = json!({"handler": "h", "steps": [
            {"at": "2026-12-02T10:00:00.000Z", "action": "deploy", "version": 1,
             "digest": "aaaaaaaaaaaaaaaa", "by": "ci", "node": "n1", "reason": null},
            {"at": "2026-12-02T10:05:00.000Z", "action": "rollback", "version": 2,
             "digest": "bbbbbbbbbbbbbbbb", "by": "rheo", "node": "n1",
             "reason": "the canary failed 20.0% …"},
        ]});
        let text = render_history(&answer);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3, "{text}");
        assert!(lines[0].starts_with("AT"), "{text}");
        assert!(
            lines[1].contains("deploy") && lines[1].contains("aaaaaaaaaaaa "),
            "{text}"
        );
        assert!(
            lines[2].contains("rollback") && lines[2].contains("the canary failed 20.0%"),
            "{text}"
        );
        assert_eq!(
            render_history(&json!({"handler": "h", "steps": []})),
            "handler h: no steps recorded\n"
        );
    }

    #[test]
    fn sse_events_are_parsed_line_by_line() {
        let mut p = SseParser::default();
        assert_eq!(p.line(": keep-alive"), None);
        assert_eq!(p.line(""), None, "a comment alone is no event");
        assert_eq!(p.line("event: line"), None);
        assert_eq!(p.line("id: 7"), None);
        assert_eq!(p.line("data: {\"seq\":7}"), None);
        assert_eq!(
            p.line(""),
            Some(SseEvent {
                event: "line".into(),
                id: Some("7".into()),
                data: "{\"seq\":7}".into(),
            })
        );
        p.line("event: gap");
        p.line("data:{\"missed\":3}");
        let gap = p.line("").unwrap();
        assert_eq!(
            (gap.event.as_str(), gap.id, gap.data.as_str()),
            ("gap", None, "{\"missed\":3}")
        );
        p.line("data: a");
        p.line("data: b");
        assert_eq!(p.line("").unwrap().data, "a\nb");
    }

    #[test]
    fn log_lines_print_time_level_version_delivery_and_message() {
        let line = json!({
            "seq": 3, "at": "2026-12-01T20:31:02.123Z", "level": "info", "source": "log",
            "message": "hello", "version": 3, "event_id": "evt-1", "stream": "s",
            "partition": 0, "sequence": 9, "attempt": 2,
        });
        assert_eq!(
            log_line(&line, false),
            "2026-12-01T20:31:02.123Z INFO  v3 evt-1 #2 hello\n"
        );
        let outside = json!({
            "seq": 1, "at": "2026-12-01T20:31:02.123Z", "level": "warn", "source": "stderr",
            "message": "starting",
        });
        assert_eq!(
            log_line(&outside, false),
            "2026-12-01T20:31:02.123Z WARN  - [stderr] starting\n"
        );
        assert_eq!(log_line(&outside, true), format!("{outside}\n"));
    }
}
