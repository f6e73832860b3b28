//! Sending work back through a group: `rheo group dead-letters`,
//! `rheo group redrive`, `rheo group replay` and `rheo group reset`.

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
        conflicts_with = "ordering"
    )]
    partitions: Option<Vec<u32>>,

    /// The group's ordering from now on: none, key or partition
    /// (docs/groups.md#ordering); resets every partition [default: unchanged]
    #[arg(long, value_name = "ORDERING", value_parser = ["none", "key", "partition"])]
    ordering: Option<String>,
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
        let answer = client.post(&self.target.path("/reset"), &Value::Object(body))?;
        self.server.print(&answer, |_| match &self.ordering {
            Some(ordering) => format!(
                "reset group {} on stream {} (ordering {ordering})\n",
                self.target.group, self.target.stream
            ),
            None => format!(
                "reset group {} on stream {}\n",
                self.target.group, self.target.stream
            ),
        })
    }
}
