//! `rheo stream list` (or `rheo stream` alone), `rheo stream get`,
//! `rheo stream create`, `rheo stream retention` and `rheo stream delete`;
//! `rheo streams` is the spelling of earlier releases.

use clap::{Args, Subcommand};
use serde_json::{Value, json};

use super::{ServerArgs, cell};
use crate::cli::client::segment;
use crate::cli::table::{Align, Table};

/// Arguments of `rheo stream`.
#[derive(Debug, Args)]
pub(crate) struct StreamsArgs {
    #[command(flatten)]
    server: ServerArgs,

    #[command(subcommand)]
    action: Option<StreamsAction>,
}

#[derive(Debug, Subcommand)]
enum StreamsAction {
    /// List the streams (what `rheo stream` alone does).
    List,
    /// One stream: partitions with their first sequence and high
    /// watermark, retention, creation time.
    Get {
        /// The stream.
        name: String,
    },
    /// Create a stream.
    Create {
        /// 1–128 characters of [A-Za-z0-9._-].
        name: String,
        /// How many partitions, fixed for the stream's life. (`--partitions`
        /// is its old spelling; elsewhere `--partitions` picks partitions.)
        #[arg(
            long = "partition-count",
            alias = "partitions",
            default_value_t = 1,
            value_name = "N"
        )]
        partitions: u32,
        #[command(flatten)]
        retention: RetentionArgs,
    },
    /// Show or change how long a stream keeps its events
    /// (docs/log.md#retention); the server trims in the background.
    Retention {
        /// The stream.
        name: String,
        #[command(flatten)]
        retention: RetentionArgs,
        /// Keep every event again (no retention).
        #[arg(long, conflicts_with_all = ["max_age", "max_events", "policy"])]
        keep_all: bool,
    },
    /// Delete a stream with its events, its groups and all their state, for
    /// good (docs/operations.md#deleting-streams-and-groups).
    Delete {
        /// The stream.
        name: String,
        /// Really delete it: nothing of it can be brought back.
        #[arg(long)]
        confirm: bool,
        /// Remove the handlers consuming it first (each drains its leases);
        /// without it, a stream a handler consumes is not deleted.
        #[arg(long)]
        force: bool,
    },
}

/// A retention from flags.
#[derive(Debug, Args)]
struct RetentionArgs {
    /// Remove events older than this, e.g. 90s, 12h or 7d.
    #[arg(long, value_name = "DURATION", value_parser = super::duration_ms)]
    max_age: Option<u64>,
    /// Keep at most this many events per partition, the newest.
    #[arg(long, value_name = "N")]
    max_events: Option<u64>,
    /// limits: the limits alone remove events; interest: also every event
    /// all the stream's groups have settled [default: limits]
    #[arg(long = "retention", value_name = "POLICY", value_parser = ["limits", "interest"])]
    policy: Option<String>,
}

impl RetentionArgs {
    /// The retention as the API takes it; `None` when no flag was given.
    fn body(&self) -> Option<Value> {
        if self.max_age.is_none() && self.max_events.is_none() && self.policy.is_none() {
            return None;
        }
        let mut retention = serde_json::Map::new();
        if let Some(ms) = self.max_age {
            retention.insert("max_age_ms".into(), json!(ms));
        }
        if let Some(n) = self.max_events {
            retention.insert("max_events".into(), json!(n));
        }
        if let Some(policy) = &self.policy {
            retention.insert("policy".into(), json!(policy));
        }
        Some(Value::Object(retention))
    }
}

/// `limits: max age 7d, at most 1000000 events per partition`, or `keeps every event`.
fn describe_retention(retention: &Value) -> String {
    if retention.is_null() {
        return "keeps every event".to_owned();
    }
    let mut parts = Vec::new();
    if let Some(ms) = retention["max_age_ms"].as_u64() {
        parts.push(format!("max age {}", crate::model::human_ms(ms)));
    }
    if let Some(n) = retention["max_events"].as_u64() {
        parts.push(format!("at most {n} events per partition"));
    }
    let policy = retention["policy"].as_str().unwrap_or("limits");
    if policy == "interest" {
        parts.push("events every group settled".to_owned());
    }
    format!("retention {policy}: {}", parts.join(", "))
}

impl StreamsArgs {
    pub(crate) fn run(self) -> anyhow::Result<()> {
        let client = self.server.client()?;
        match self.action {
            None | Some(StreamsAction::List) => {
                let answer = client.get("/v1/streams", &[])?;
                self.server.print(&answer, render_list)
            }
            Some(StreamsAction::Get { name }) => {
                let answer = client.get(&format!("/v1/streams/{}", segment(&name)), &[])?;
                self.server.print(&answer, render_one)
            }
            Some(StreamsAction::Create {
                name,
                partitions,
                retention,
            }) => {
                let mut body = json!({"name": name, "partition_count": partitions});
                if let Some(retention) = retention.body() {
                    body["retention"] = retention;
                }
                let answer = client.post("/v1/streams", &body)?;
                self.server.print(&answer, |s| {
                    format!(
                        "created stream {} with {} partition(s); {}\n",
                        cell(&s["name"]),
                        cell(&s["partition_count"]),
                        describe_retention(&s["retention"])
                    )
                })
            }
            Some(StreamsAction::Retention {
                name,
                retention,
                keep_all,
            }) => {
                let path = format!("/v1/streams/{}", segment(&name));
                let answer = match retention.body() {
                    Some(body) => client.patch(&path, &json!({ "retention": body }))?,
                    None if keep_all => client.patch(&path, &json!({ "retention": null }))?,
                    None => client.get(&path, &[])?,
                };
                self.server.print(&answer, |s| {
                    format!(
                        "stream {}: {}\n",
                        cell(&s["name"]),
                        describe_retention(&s["retention"])
                    )
                })
            }
            Some(StreamsAction::Delete {
                name,
                confirm,
                force,
            }) => {
                super::require(confirm, || {
                    format!(
                        "not deleting stream {name} without --confirm: its events, groups \
                         and dead letters would be gone for good (confirm_required)"
                    )
                })?;
                let path = super::delete_path(&format!("/v1/streams/{}", segment(&name)), force);
                let answer = client.delete(&path)?;
                self.server.print(&answer, |a| {
                    super::render_deleted(&format!("stream {name}"), a)
                })
            }
        }
    }
}

/// NAME PARTITIONS EVENTS RETENTION CREATED; events are those stored
/// (high watermark − first sequence + 1, summed).
fn render_list(answer: &Value) -> String {
    let streams = answer["streams"].as_array().map_or(&[][..], Vec::as_slice);
    if streams.is_empty() {
        return "no streams yet (create one with `rheo stream create NAME`)\n".to_owned();
    }
    let mut table = Table::new(&[
        ("NAME", Align::Left),
        ("PARTITIONS", Align::Right),
        ("EVENTS", Align::Right),
        ("RETENTION", Align::Left),
        ("CREATED", Align::Left),
    ]);
    for stream in streams {
        let events: u64 = stream["partitions"]
            .as_object()
            .map(|parts| {
                parts
                    .values()
                    .filter_map(|p| {
                        let high = p["high_watermark"].as_u64()?;
                        let first = p["first_sequence"].as_u64().unwrap_or(1);
                        Some((high + 1).saturating_sub(first))
                    })
                    .sum()
            })
            .unwrap_or(0);
        table.row([
            cell(&stream["name"]),
            cell(&stream["partition_count"]),
            events.to_string(),
            retention_cell(&stream["retention"]),
            cell(&stream["created_at"]),
        ]);
    }
    table.render()
}

/// A stream's settings, then PARTITION FIRST-SEQUENCE HIGH-WATERMARK EVENTS.
fn render_one(stream: &Value) -> String {
    let mut out = crate::cli::table::key_values(&[
        ("stream", cell(&stream["name"])),
        ("partitions", cell(&stream["partition_count"])),
        ("retention", describe_retention(&stream["retention"])),
        ("created", cell(&stream["created_at"])),
    ]);
    out.push('\n');
    let mut table = Table::new(&[
        ("PARTITION", Align::Right),
        ("FIRST-SEQUENCE", Align::Right),
        ("HIGH-WATERMARK", Align::Right),
        ("EVENTS", Align::Right),
    ]);
    for (partition, p) in super::by_partition(&stream["partitions"]) {
        let high = p["high_watermark"].as_u64().unwrap_or(0);
        let first = p["first_sequence"].as_u64().unwrap_or(1);
        table.row([
            partition.to_string(),
            first.to_string(),
            high.to_string(),
            (high + 1).saturating_sub(first).to_string(),
        ]);
    }
    out + &table.render()
}

/// The RETENTION cell: `-`, or e.g. `7d,1000000` / `interest`.
fn retention_cell(retention: &Value) -> String {
    if retention.is_null() {
        return "-".to_owned();
    }
    let mut parts = Vec::new();
    if retention["policy"].as_str() == Some("interest") {
        parts.push("interest".to_owned());
    }
    if let Some(ms) = retention["max_age_ms"].as_u64() {
        parts.push(format!("age {}", crate::model::human_ms(ms)).replace(' ', ""));
    }
    if let Some(n) = retention["max_events"].as_u64() {
        parts.push(format!("max {n}"));
    }
    parts.join(",").replace(' ', "")
}
