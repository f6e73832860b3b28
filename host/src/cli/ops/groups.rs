//! `rheo group` (list, create, info, lag, delete, and the recovery verbs
//! of `recovery`), with `rheo lag` and `rheo group-info`, the hidden
//! spellings of earlier releases.

use clap::{Args, Subcommand};
use serde_json::{Map, Value, json};

use super::{GroupRef, ServerArgs, cell, join, start_after};
use crate::backend::policy::QUARANTINE_CONSUMER;
use crate::cli::client::segment;
use crate::cli::table::{Align, Table, key_values};
use crate::model::human_ms;

/// Arguments of `rheo group`: a verb is required.
#[derive(Debug, Args)]
#[command(arg_required_else_help = true)]
pub(crate) struct GroupArgs {
    #[command(flatten)]
    server: ServerArgs,

    #[command(subcommand)]
    action: GroupsAction,
}

impl GroupArgs {
    pub(crate) fn run(self) -> anyhow::Result<()> {
        GroupsArgs {
            server: self.server,
            stream: None,
            action: Some(self.action),
        }
        .run()
    }
}

/// Arguments of `rheo groups`, the spelling of earlier releases:
/// `rheo groups STREAM` lists, and it takes the verbs of `rheo group`.
#[derive(Debug, Args)]
#[command(subcommand_negates_reqs = true)]
pub(crate) struct GroupsArgs {
    #[command(flatten)]
    server: ServerArgs,

    /// The stream whose groups to list.
    #[arg(required = true)]
    stream: Option<String>,

    #[command(subcommand)]
    action: Option<GroupsAction>,
}

#[derive(Debug, Subcommand)]
enum GroupsAction {
    /// List a stream's groups.
    List {
        /// The stream whose groups to list.
        stream: String,
    },
    /// A group's settings, cursors, lag, inflight and dead-letter count.
    Info(GroupInfoArgs),
    /// Per-partition frontier, high watermark and lag of a group.
    Lag(LagArgs),
    /// What the group has out now: each lease with its event, attempt,
    /// age and expiry (docs/groups.md#what-is-out-leases).
    Leases(LeasesArgs),
    /// A group's dead letters, in sequence order.
    DeadLetters(super::recovery::DeadLettersArgs),
    /// Make dead letters available to the group again (attempts start over).
    Redrive(super::recovery::RedriveArgs),
    /// Re-open a group's deliveries so they are handled again.
    Replay(super::recovery::ReplayArgs),
    /// Forget a group's delivery state and start it again (needs --confirm).
    Reset(super::recovery::ResetArgs),
    /// The keys a group has parked, each behind a head that exhausted its
    /// attempts (docs/groups.md#quarantine).
    Quarantine(super::recovery::QuarantineArgs),
    /// Resume parked keys, or skip their heads into the dead letters
    /// (needs --confirm).
    Release(super::recovery::ReleaseArgs),
    /// Create a consumer group.
    Create {
        /// The stream it consumes.
        stream: String,
        /// 1–128 characters of [A-Za-z0-9._-].
        name: String,
        /// Claims per delivery before a failure dead-letters it [server default: 5]
        #[arg(long, value_name = "N")]
        max_attempts: Option<u32>,
        /// Start after this sequence: N for every partition, or '{"0": 41}'
        /// [default: the beginning]
        #[arg(long = "after-sequence", alias = "start-after", value_name = "SEQ",
              value_parser = start_after, conflicts_with = "start_at")]
        start_after: Option<Value>,
        /// Start at the first event at or after this RFC 3339 time (per
        /// partition; none there: only new events).
        #[arg(long = "from", alias = "start-at", value_name = "TIME")]
        start_at: Option<String>,
        /// Delays for nacks without one, by attempt, e.g. 100ms,1s,5s (the
        /// last repeats; a bare number is milliseconds).
        #[arg(long = "retry-backoff", alias = "retry-backoff-ms", value_name = "DURATION,…",
              value_delimiter = ',', value_parser = crate::config::duration_or_ms)]
        retry_backoff_ms: Vec<u64>,
        /// none: any delivery may go out; key: one delivery per key at a
        /// time, in sequence order; partition: one per partition
        /// (docs/groups.md#ordering) [server default: none]
        #[arg(long, value_name = "ORDERING", value_parser = ["none", "key", "partition"])]
        ordering: Option<String>,
        /// What a head that exhausts its attempts does: dead_letter, or,
        /// under an ordering, quarantine: its key waits, in order, until
        /// `rheo group release` (docs/groups.md#quarantine) [server default:
        /// dead_letter]
        #[arg(long, value_name = "WHAT", value_parser = ["dead_letter", "quarantine"])]
        on_exhausted: Option<String>,
        /// Flow control [default: no limit]
        #[command(flatten)]
        flow: super::FlowArgs,
    },
    /// Delete a group with its cursors, deliveries and dead letters, for
    /// good; the stream and its other groups stay
    /// (docs/operations.md#deleting-streams-and-groups).
    Delete {
        /// The stream it consumes.
        stream: String,
        /// The group.
        name: String,
        /// Really delete it: what it acked, retried and dead-lettered is
        /// forgotten.
        #[arg(long)]
        confirm: bool,
        /// Remove the handlers consuming it first (each drains its leases);
        /// without it, a group a handler consumes is not deleted.
        #[arg(long)]
        force: bool,
    },
}

impl GroupsArgs {
    pub(crate) fn run(self) -> anyhow::Result<()> {
        match self.action {
            Some(GroupsAction::Info(args)) => return args.run(),
            Some(GroupsAction::Lag(args)) => return args.run(),
            Some(GroupsAction::Leases(args)) => return args.run(),
            Some(GroupsAction::DeadLetters(args)) => return args.run(),
            Some(GroupsAction::Redrive(args)) => return args.run(),
            Some(GroupsAction::Replay(args)) => return args.run(),
            Some(GroupsAction::Reset(args)) => return args.run(),
            Some(GroupsAction::Quarantine(args)) => return args.run(),
            Some(GroupsAction::Release(args)) => return args.run(),
            _ => {}
        }
        if self.stream.is_some() && self.action.is_some() {
            return Err(super::Invalid(
                "the stream goes after the verb: rheo group create STREAM NAME".into(),
            )
            .into());
        }
        let client = self.server.client()?;
        let list = |stream: &str| -> anyhow::Result<()> {
            let answer = client.get(&format!("/v1/streams/{}/groups", segment(stream)), &[])?;
            self.server.print(&answer, |a| render_list(stream, a))
        };
        if let Some(GroupsAction::List { stream }) = &self.action {
            return list(stream);
        }
        if let Some(GroupsAction::Delete {
            stream,
            name,
            confirm,
            force,
        }) = &self.action
        {
            super::require(*confirm, || {
                format!(
                    "not deleting group {name} without --confirm: which events it acked, \
                     retried or dead-lettered would be forgotten for good (confirm_required)"
                )
            })?;
            let path = format!("/v1/streams/{}/groups/{}", segment(stream), segment(name));
            let answer = client.delete(&super::delete_path(&path, *force))?;
            let what = format!("group {name} of stream {stream}");
            return self
                .server
                .print(&answer, |a| super::render_deleted(&what, a));
        }
        let Some(GroupsAction::Create {
            stream,
            name,
            max_attempts,
            start_after,
            start_at,
            retry_backoff_ms,
            ordering,
            on_exhausted,
            flow,
        }) = self.action
        else {
            return list(self.stream.as_deref().unwrap_or_default());
        };
        let mut body = Map::new();
        body.insert("name".into(), json!(name));
        if let Some(n) = max_attempts {
            body.insert("max_attempts".into(), json!(n));
        }
        if let Some(seq) = start_after {
            body.insert("start_after".into(), seq);
        }
        if let Some(at) = start_at {
            body.insert("start_at".into(), json!(at));
        }
        if !retry_backoff_ms.is_empty() {
            body.insert("retry_backoff_ms".into(), json!(retry_backoff_ms));
        }
        if let Some(ordering) = ordering {
            body.insert("ordering".into(), json!(ordering));
        }
        if let Some(on_exhausted) = on_exhausted {
            body.insert("on_exhausted".into(), json!(on_exhausted));
        }
        if let Some(flow) = flow.body() {
            body.insert("flow".into(), flow);
        }
        let path = format!("/v1/streams/{}/groups", segment(&stream));
        let answer = client.post(&path, &Value::Object(body))?;
        self.server.print(&answer, |g| {
            format!(
                "created group {} on stream {} (max_attempts {}, ordering {}, on_exhausted {}, \
                 flow {})\n",
                cell(&g["name"]),
                cell(&g["stream"]),
                cell(&g["max_attempts"]),
                cell(&g["ordering"]),
                cell(&g["on_exhausted"]),
                super::flow_text(&g["flow"])
            )
        })
    }
}

fn render_list(stream: &str, answer: &Value) -> String {
    let groups = answer["groups"].as_array().map_or(&[][..], Vec::as_slice);
    if groups.is_empty() {
        return format!(
            "no groups on stream {stream} (create one with `rheo group create {stream} NAME`)\n"
        );
    }
    let mut table = Table::new(&[
        ("NAME", Align::Left),
        ("MAX-ATTEMPTS", Align::Right),
        ("RETRY-BACKOFF", Align::Left),
        ("ORDERING", Align::Left),
        ("FLOW", Align::Left),
        ("CREATED", Align::Left),
    ]);
    for group in groups {
        table.row([
            cell(&group["name"]),
            cell(&group["max_attempts"]),
            backoff(&group["retry_backoff_ms"]),
            cell(&group["ordering"]),
            super::flow_text(&group["flow"]),
            cell(&group["created_at"]),
        ]);
    }
    table.render()
}

/// A retry schedule: `immediate`, or `100ms, 1.0s`.
fn backoff(schedule: &Value) -> String {
    let delays: Vec<String> = schedule
        .as_array()
        .map(|d| d.iter().filter_map(Value::as_u64).map(human_ms).collect())
        .unwrap_or_default();
    if delays.is_empty() {
        "immediate".to_owned()
    } else {
        delays.join(", ")
    }
}

/// Arguments of `rheo group lag`.
#[derive(Debug, Args)]
pub(crate) struct LagArgs {
    #[command(flatten)]
    server: ServerArgs,

    #[command(flatten)]
    target: GroupRef,

    /// Only these partitions, e.g. 0,1 [default: all]
    #[arg(long, value_name = "P,…", value_delimiter = ',')]
    partitions: Option<Vec<u32>>,
}

impl LagArgs {
    pub(crate) fn run(self) -> anyhow::Result<()> {
        let client = self.server.client()?;
        let query = match &self.partitions {
            Some(list) => vec![("partitions", join(list))],
            None => Vec::new(),
        };
        let answer = client.get(&self.target.path("/lag"), &query)?;
        self.server.print(&answer, |lag| {
            lag_table(lag, None) + &lag_summary(lag) + "\n"
        })
    }
}

/// Arguments of `rheo group leases`.
#[derive(Debug, Args)]
pub(crate) struct LeasesArgs {
    #[command(flatten)]
    server: ServerArgs,

    #[command(flatten)]
    target: GroupRef,

    /// At most this many leases [server default: 100, at most 1000].
    #[arg(long, value_name = "N")]
    limit: Option<u32>,

    /// Continue after a previous page (its `next`, e.g. 0:41).
    #[arg(long, value_name = "CURSOR")]
    after: Option<String>,
}

impl LeasesArgs {
    pub(crate) fn run(self) -> anyhow::Result<()> {
        let client = self.server.client()?;
        let query = super::page_query(self.limit, self.after.as_deref());
        let answer = client.get(&self.target.path("/leases"), &query)?;
        let wide = self.server.wide();
        self.server
            .print(&answer, |page| render_leases(&self.target, page, wide))
    }
}

/// PARTITION SEQUENCE EVENT ATTEMPT AGE EXPIRES, with HOLDER and LEASE
/// when `wide`; then where the next page starts.
fn render_leases(target: &GroupRef, page: &Value, wide: bool) -> String {
    let leases = page["leases"].as_array().map_or(&[][..], Vec::as_slice);
    let next = page["next"].as_str();
    if leases.is_empty() && next.is_none() {
        return format!(
            "group {} of stream {} has nothing out\n",
            target.group, target.stream
        );
    }
    let mut columns = vec![
        ("PARTITION", Align::Right),
        ("SEQUENCE", Align::Right),
        ("EVENT", Align::Left),
        ("ATTEMPT", Align::Right),
        ("AGE", Align::Right),
        ("EXPIRES", Align::Left),
    ];
    if wide {
        columns.extend([("HOLDER", Align::Left), ("LEASE", Align::Left)]);
    }
    let mut table = Table::new(&columns);
    for lease in leases {
        let expires = match lease["expires_in_ms"].as_u64() {
            // A quarantined head (docs/groups.md#quarantine).
            _ if lease["consumer_id"] == QUARANTINE_CONSUMER => "never: parked".to_owned(),
            _ if lease["expired"].as_bool() == Some(true) => "expired".to_owned(),
            Some(ms) => format!("in {}", human_ms(ms)),
            None => cell(&lease["expires_at"]),
        };
        let mut row = vec![
            cell(&lease["partition"]),
            cell(&lease["sequence"]),
            cell(&lease["event_id"]),
            cell(&lease["attempt"]),
            lease["age_ms"]
                .as_u64()
                .map_or_else(|| "-".to_owned(), human_ms),
            expires,
        ];
        if wide {
            row.extend([cell(&lease["consumer_id"]), cell(&lease["lease_id"])]);
        }
        table.row(row);
    }
    let mut out = table.render();
    if let Some(next) = next {
        out.push_str(&format!(
            "more: rheo group leases {} {} --after {next}\n",
            target.stream, target.group
        ));
    }
    out
}

/// Arguments of `rheo group info`.
#[derive(Debug, Args)]
pub(crate) struct GroupInfoArgs {
    #[command(flatten)]
    server: ServerArgs,

    #[command(flatten)]
    target: GroupRef,
}

impl GroupInfoArgs {
    pub(crate) fn run(self) -> anyhow::Result<()> {
        let client = self.server.client()?;
        let answer = client.get(&self.target.path(""), &[])?;
        self.server.print(&answer, render_info)
    }
}

fn render_info(info: &Value) -> String {
    let lag = &info["lag"];
    let mut out = key_values(&[
        ("stream", cell(&info["stream"])),
        ("group", cell(&info["group"])),
        ("max attempts", cell(&info["max_attempts"])),
        ("retry backoff", backoff(&info["retry_backoff_ms"])),
        ("ordering", cell(&info["ordering"])),
        ("on exhausted", cell(&info["on_exhausted"])),
        ("flow", super::flow_text(&info["flow"])),
        ("lag", cell(&lag["lag"])),
        ("pending", cell(&lag["pending"])),
        ("inflight", cell(&info["inflight"])),
        ("waiting retry", cell(&lag["waiting_retry"])),
        ("dead letters", cell(&info["dead_letters"])),
        ("skipped by retention", cell(&info["skipped_by_retention"])),
        ("oldest unacked", oldest(&lag["oldest_unacked_age_ms"])),
    ]);
    out.push('\n');
    out + &lag_table(lag, Some(&info["cursors"]))
}

/// PARTITION [CURSOR] FRONTIER HIGH-WATERMARK LAG.
fn lag_table(lag: &Value, cursors: Option<&Value>) -> String {
    let mut columns = vec![("PARTITION", Align::Right)];
    if cursors.is_some() {
        columns.push(("CURSOR", Align::Right));
    }
    columns.extend([
        ("FRONTIER", Align::Right),
        ("HIGH-WATERMARK", Align::Right),
        ("LAG", Align::Right),
    ]);
    let mut table = Table::new(&columns);
    for (partition, p) in super::by_partition(&lag["partitions"]) {
        let mut row = vec![partition.to_string()];
        if let Some(cursors) = cursors {
            row.push(cell(&cursors[partition.to_string()]));
        }
        row.extend([
            cell(&p["frontier"]),
            cell(&p["high_watermark"]),
            cell(&p["lag"]),
        ]);
        table.row(row);
    }
    table.render()
}

fn lag_summary(lag: &Value) -> String {
    format!(
        "lag {}: pending {}, inflight {}, waiting_retry {}, oldest unacked {}",
        cell(&lag["lag"]),
        cell(&lag["pending"]),
        cell(&lag["inflight"]),
        cell(&lag["waiting_retry"]),
        oldest(&lag["oldest_unacked_age_ms"])
    )
}

fn oldest(age_ms: &Value) -> String {
    age_ms
        .as_u64()
        .map_or_else(|| "none".to_owned(), |ms| format!("{} ago", human_ms(ms)))
}
