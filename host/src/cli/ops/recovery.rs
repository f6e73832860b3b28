//! Sending work back through a group: `rheo group dead-letters`,
//! `rheo group redrive`, `rheo group replay`, `rheo group reset`, and the
//! parked keys of `rheo group quarantine` and `rheo group release`.

use clap::{ArgGroup, Args};
use serde_json::{Map, Value, json};

use super::{GroupRef, ServerArgs, cell, count, json_object, start_after};
use crate::cli::table::{Align, Table};

/// Arguments of `rheo group dead-letters`.
#[derive(Debug, Args)]
pub(crate) struct DeadLettersArgs {
    #[command(flatten)]
    server: ServerArgs,

    #[command(flatten)]
    target: GroupRef,

    /// Page size (server default 100, max 1000).
    #[arg(long, value_name = "N")]
    limit: Option<u32>,

    /// Start after this event id (the previous page's `next`).
    #[arg(long, value_name = "EVENT_ID")]
    after: Option<String>,
}

impl DeadLettersArgs {
    pub(crate) fn run(self) -> anyhow::Result<()> {
        let client = self.server.client()?;
        let query = super::page_query(self.limit, self.after.as_deref());
        let answer = client.get(&self.target.path("/dead-letters"), &query)?;
        self.server.print(&answer, |page| self.render(page))
    }

    fn render(&self, page: &Value) -> String {
        let letters = page["dead_letters"]
            .as_array()
            .map_or(&[][..], Vec::as_slice);
        if letters.is_empty() {
            return format!("no dead letters in group {}\n", self.target.group);
        }
        let mut table = Table::new(&[
            ("EVENT-ID", Align::Left),
            ("PARTITION", Align::Right),
            ("SEQ", Align::Right),
            ("ATTEMPT", Align::Right),
            ("REASON", Align::Left),
            ("DEAD-LETTERED", Align::Left),
        ]);
        for letter in letters {
            table.row([
                cell(&letter["event_id"]),
                cell(&letter["partition"]),
                cell(&letter["sequence"]),
                cell(&letter["attempt"]),
                cell(&letter["reason"]),
                cell(&letter["dead_lettered_at"]),
            ]);
        }
        let mut out = table.render();
        if let Some(next) = page["next"].as_str() {
            out.push_str(&format!(
                "more: rheo group dead-letters {} {} --after {next}\n",
                self.target.stream, self.target.group
            ));
        }
        out
    }
}

/// Arguments of `rheo group redrive`.
#[derive(Debug, Args)]
#[command(group(ArgGroup::new("which").required(true).args(["all", "event_ids"])))]
pub(crate) struct RedriveArgs {
    #[command(flatten)]
    server: ServerArgs,

    #[command(flatten)]
    target: GroupRef,

    /// Every dead letter of the group.
    #[arg(long)]
    all: bool,

    /// These dead letters.
    #[arg(value_name = "EVENT_ID")]
    event_ids: Vec<String>,
}

impl RedriveArgs {
    pub(crate) fn run(self) -> anyhow::Result<()> {
        let client = self.server.client()?;
        let body = if self.all {
            json!({"all": true})
        } else {
            json!({"event_ids": self.event_ids})
        };
        let answer = client.post(&self.target.path("/dead-letters/redrive"), &body)?;
        self.server.print(&answer, |a| {
            let n = a["redriven"].as_u64().unwrap_or(0);
            format!(
                "redriven {}: available to group {} again\n",
                count(n, "dead letter"),
                self.target.group
            )
        })
    }
}

/// Arguments of `rheo group replay`: exactly one selector.
#[derive(Debug, Args)]
#[command(group(ArgGroup::new("selector").required(true)
    .args(["from_sequence", "from", "query", "event_ids"])))]
pub(crate) struct ReplayArgs {
    #[command(flatten)]
    server: ServerArgs,

    #[command(flatten)]
    target: GroupRef,

    /// Re-open everything after this sequence (exclusive).
    #[arg(long = "after-sequence", alias = "from-sequence", value_name = "SEQ")]
    from_sequence: Option<u64>,

    /// Re-open everything from the first event at or after this RFC 3339 time.
    #[arg(long, value_name = "TIME")]
    from: Option<String>,

    /// Re-open what this query matches, e.g. '{"where": {"type": "order.created"}}'.
    #[arg(long, value_name = "JSON", value_parser = json_object)]
    query: Option<Value>,

    /// Re-open these events, e.g. a,b,c.
    #[arg(long, value_name = "ID,…", value_delimiter = ',')]
    event_ids: Option<Vec<String>>,

    /// With --after-sequence or --from: only these partitions, e.g. 0,1.
    #[arg(long, value_name = "P,…", value_delimiter = ',',
          conflicts_with_all = ["query", "event_ids"])]
    partitions: Option<Vec<u32>>,
}

impl ReplayArgs {
    pub(crate) fn run(self) -> anyhow::Result<()> {
        let client = self.server.client()?;
        let mut body = Map::new();
        if let Some(seq) = self.from_sequence {
            body.insert("from_sequence".into(), json!(seq));
        }
        if let Some(from) = &self.from {
            body.insert("from".into(), json!(from));
        }
        if let Some(query) = &self.query {
            body.insert("query".into(), query.clone());
        }
        if let Some(ids) = &self.event_ids {
            body.insert("event_ids".into(), json!(ids));
        }
        if let Some(partitions) = &self.partitions {
            body.insert("partitions".into(), json!(partitions));
        }
        let answer = client.post(&self.target.path("/replay"), &Value::Object(body))?;
        self.server.print(&answer, |a| {
            let n = a["reopened"].as_u64().unwrap_or(0);
            let noun = if n == 1 { "delivery" } else { "deliveries" };
            format!("reopened {n} {noun} for group {}\n", self.target.group)
        })
    }
}

/// Arguments of `rheo group reset`.
#[derive(Debug, Args)]
pub(crate) struct ResetArgs {
    #[command(flatten)]
    server: ServerArgs,

    #[command(flatten)]
    target: GroupRef,

    /// Really forget the group's delivery state (acks, attempts, dead letters).
    #[arg(long)]
    confirm: bool,

    /// Start again after this sequence: N for every partition, or '{"0": 41}'
    /// [default: the beginning]
    #[arg(long = "after-sequence", alias = "start-after", value_name = "SEQ",
          value_parser = start_after, conflicts_with = "start_at")]
    start_after: Option<Value>,

    /// Start again at the first event at or after this RFC 3339 time.
    #[arg(long = "from", alias = "start-at", value_name = "TIME")]
    start_at: Option<String>,

    /// Only these partitions, e.g. 0,1 [default: all]
    #[arg(
        long,
        value_name = "P,…",
        value_delimiter = ',',
        conflicts_with_all = ["ordering", "flow", "key_concurrency", "key_rate"]
    )]
    partitions: Option<Vec<u32>>,

    /// The group's ordering from now on: none, key or partition
    /// (docs/groups.md#ordering); resets every partition [default: unchanged]
    #[arg(long, value_name = "ORDERING", value_parser = ["none", "key", "partition"])]
    ordering: Option<String>,

    /// The group's flow control from now on (the limits given replace
    /// all of the old ones); resets every partition [default: unchanged]
    #[command(flatten)]
    flow: super::FlowArgs,
}

impl ResetArgs {
    pub(crate) fn run(self) -> anyhow::Result<()> {
        super::require(self.confirm, || {
            format!(
                "not resetting group {} without --confirm: a reset forgets which events it \
                 acked, retried or dead-lettered (confirm_required)",
                self.target.group
            )
        })?;
        let client = self.server.client()?;
        let mut body = Map::new();
        body.insert("confirm".into(), json!(true));
        if let Some(seq) = &self.start_after {
            body.insert("start_after".into(), seq.clone());
        }
        if let Some(at) = &self.start_at {
            body.insert("start_at".into(), json!(at));
        }
        if let Some(partitions) = &self.partitions {
            body.insert("partitions".into(), json!(partitions));
        }
        if let Some(ordering) = &self.ordering {
            body.insert("ordering".into(), json!(ordering));
        }
        let flow = self.flow.body();
        if let Some(flow) = &flow {
            body.insert("flow".into(), flow.clone());
        }
        let answer = client.post(&self.target.path("/reset"), &Value::Object(body))?;
        let mut changed = Vec::new();
        if let Some(ordering) = &self.ordering {
            changed.push(format!("ordering {ordering}"));
        }
        if let Some(flow) = &flow {
            changed.push(format!("flow {}", super::flow_text(flow)));
        }
        let changed = match changed.is_empty() {
            true => String::new(),
            false => format!(" ({})", changed.join(", ")),
        };
        self.server.print(&answer, |_| {
            format!(
                "reset group {} on stream {}{changed}\n",
                self.target.group, self.target.stream
            )
        })
    }
}

/// Arguments of `rheo group quarantine`.
#[derive(Debug, Args)]
pub(crate) struct QuarantineArgs {
    #[command(flatten)]
    server: ServerArgs,

    #[command(flatten)]
    target: GroupRef,
}

impl QuarantineArgs {
    pub(crate) fn run(self) -> anyhow::Result<()> {
        let client = self.server.client()?;
        let answer = client.get(&self.target.path("/quarantine"), &[])?;
        self.server.print(&answer, |a| {
            parked_table(&a["parked"])
                .unwrap_or_else(|| format!("no keys parked in group {}\n", self.target.group))
        })
    }
}

/// Parked keys as a table; `None` when there are none.
fn parked_table(parked: &Value) -> Option<String> {
    let parked = parked.as_array().filter(|p| !p.is_empty())?;
    let mut table = Table::new(&[
        ("KEY", Align::Left),
        ("PARTITION", Align::Right),
        ("SEQ", Align::Right),
        ("EVENT-ID", Align::Left),
        ("ATTEMPT", Align::Right),
        ("REASON", Align::Left),
        ("PARKED", Align::Left),
    ]);
    for key in parked {
        let name = match &key["key"] {
            Value::Null => "(partition)".to_owned(),
            k => cell(k),
        };
        table.row([
            name,
            cell(&key["partition"]),
            cell(&key["sequence"]),
            cell(&key["event_id"]),
            cell(&key["attempt"]),
            cell(&key["reason"]),
            cell(&key["parked_at"]),
        ]);
    }
    Some(table.render())
}

/// Arguments of `rheo group release`: exactly one of --all, --key, --event-id.
#[derive(Debug, Args)]
#[command(group(ArgGroup::new("which").required(true).args(["all", "keys", "event_ids"])))]
pub(crate) struct ReleaseArgs {
    #[command(flatten)]
    server: ServerArgs,

    #[command(flatten)]
    target: GroupRef,

    /// Every parked key.
    #[arg(long)]
    all: bool,

    /// These keys, e.g. --key acct-7,acct-9.
    #[arg(long = "key", value_name = "KEY,…", value_delimiter = ',')]
    keys: Option<Vec<String>>,

    /// The keys whose parked heads are these events (a partition parked
    /// under ordering = partition is named this way).
    #[arg(long = "event-id", value_name = "ID,…", value_delimiter = ',')]
    event_ids: Option<Vec<String>>,

    /// Send each head to the dead letters and go on with the key's next
    /// event, instead of handing the head out again with fresh attempts.
    #[arg(long)]
    skip_head: bool,

    /// Really release: the key's events go out again from its head.
    #[arg(long)]
    confirm: bool,
}

impl ReleaseArgs {
    pub(crate) fn run(self) -> anyhow::Result<()> {
        super::require(self.confirm, || {
            format!(
                "not releasing without --confirm: group {}'s parked keys would go out again \
                 (confirm_required; `rheo group quarantine {} {}` lists them)",
                self.target.group, self.target.stream, self.target.group
            )
        })?;
        let client = self.server.client()?;
        let mut body = Map::new();
        body.insert("confirm".into(), json!(true));
        body.insert("skip_head".into(), json!(self.skip_head));
        if self.all {
            body.insert("all".into(), json!(true));
        } else if let Some(keys) = &self.keys {
            body.insert("keys".into(), json!(keys));
        } else if let Some(ids) = &self.event_ids {
            body.insert("event_ids".into(), json!(ids));
        }
        let answer = client.post(
            &self.target.path("/quarantine/release"),
            &Value::Object(body),
        )?;
        self.server.print(&answer, |a| {
            let released = a["released"].as_array().map_or(0, Vec::len) as u64;
            let how = if self.skip_head {
                "heads dead-lettered, the keys go on with their next events"
            } else {
                "heads go out again first, attempts started over"
            };
            let mut out = format!(
                "released {} of group {}: {how}\n",
                count(released, "key"),
                self.target.group
            );
            if let Some(table) = parked_table(&a["released"]) {
                out.push_str(&table);
            }
            let missing: Vec<String> = (a["not_parked"].as_array().into_iter().flatten())
                .map(cell)
                .collect();
            if !missing.is_empty() {
                out.push_str(&format!(
                    "not parked (left alone): {}\n",
                    missing.join(", ")
                ));
            }
            out
        })
    }
}
