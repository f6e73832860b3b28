//! The ops commands: thin clients of a running server's HTTP API (the
//! semantics in `docs/`, the routes in `GET /v1/openapi.json`). Each sends
//! one request (or a few, when paging or appending a file) and prints the
//! answer as a table, or as the server's JSON with `--json`.
//!
//! They are blocking and run without an async runtime. A failure is one
//! `error: …` line on stderr and an exit code that says what kind of
//! failure it was (`client::exit`, docs/cli.md#exit-codes): the server's
//! `{"error": {code, message}}` shows as `<message> (<code>)`.
//!
//! Files: `streams` (list, create), `groups` (list, create, lag, info),
//! `recovery` (dead letters, redrive, replay, reset), `append`, `query`,
//! `handler` (deploy, swap, list, get, rollback, pause, resume, delete, logs),
//! `nodes`.

mod append;
mod groups;
mod handler;
mod nodes;
mod query;
mod recovery;
mod streams;
mod yaml;

use std::io::{ErrorKind, Write};

use anyhow::Context;
use clap::{Args, Subcommand};
use serde_json::Value;

use super::client::{Client, segment};

/// Where the ops commands look for a server when neither `--server` nor
/// `RHEO_SERVER` says.
pub(crate) const DEFAULT_SERVER: &str = "http://127.0.0.1:7070";

/// The ops subcommands (flattened into the top-level command list): one
/// noun-verb grammar (docs/cli.md#grammar). The bare verbs of earlier
/// releases (`rheo lag`, `rheo append`, …) stay as hidden aliases for one
/// release.
#[derive(Debug, Subcommand)]
pub(crate) enum OpsCommand {
    /// Streams: list, get, create, retention, delete.
    #[command(alias = "streams")]
    Stream(streams::StreamsArgs),
    /// Events of a stream: append, query.
    Event(EventArgs),
    /// Consumer groups: list, create, info, lag, leases, dead-letters,
    /// redrive, replay, reset, delete.
    Group(groups::GroupArgs),
    /// Deploy and manage WebAssembly handlers.
    Handler(handler::HandlerArgs),
    /// The servers sharing the backend, and the handlers each runs.
    Nodes(nodes::NodesArgs),
    // The spellings of earlier releases, hidden (docs/cli.md#grammar).
    /// Earlier spelling of `rheo group` (`rheo groups STREAM` lists).
    #[command(hide = true)]
    Groups(groups::GroupsArgs),
    /// Earlier spelling of `rheo group lag`.
    #[command(hide = true)]
    Lag(groups::LagArgs),
    /// Earlier spelling of `rheo group info`.
    #[command(hide = true)]
    GroupInfo(groups::GroupInfoArgs),
    /// Earlier spelling of `rheo group dead-letters`.
    #[command(hide = true)]
    DeadLetters(recovery::DeadLettersArgs),
    /// Earlier spelling of `rheo group redrive`.
    #[command(hide = true)]
    Redrive(recovery::RedriveArgs),
    /// Earlier spelling of `rheo event append`.
    #[command(hide = true)]
    Append(append::AppendArgs),
    /// Earlier spelling of `rheo event query`.
    #[command(hide = true)]
    Query(query::QueryArgs),
    /// Earlier spelling of `rheo group replay`.
    #[command(hide = true)]
    Replay(recovery::ReplayArgs),
    /// Earlier spelling of `rheo group reset`.
    #[command(hide = true)]
    Reset(recovery::ResetArgs),
}

impl OpsCommand {
    /// Runs the command to completion (blocking).
    pub(crate) fn run(self) -> anyhow::Result<()> {
        match self {
            OpsCommand::Stream(args) => args.run(),
            OpsCommand::Event(args) => args.run(),
            OpsCommand::Group(args) => args.run(),
            OpsCommand::Groups(args) => args.run(),
            OpsCommand::Handler(args) => args.run(),
            OpsCommand::Nodes(args) => args.run(),
            OpsCommand::Lag(args) => args.run(),
            OpsCommand::GroupInfo(args) => args.run(),
            OpsCommand::DeadLetters(args) => args.run(),
            OpsCommand::Redrive(args) => args.run(),
            OpsCommand::Append(args) => args.run(),
            OpsCommand::Query(args) => args.run(),
            OpsCommand::Replay(args) => args.run(),
            OpsCommand::Reset(args) => args.run(),
        }
    }
}

/// Arguments of `rheo event`.
#[derive(Debug, Args)]
#[command(arg_required_else_help = true)]
pub(crate) struct EventArgs {
    #[command(subcommand)]
    action: EventAction,
}

#[derive(Debug, Subcommand)]
enum EventAction {
    /// Append one event from flags, or many from a JSON-lines file.
    Append(append::AppendArgs),
    /// Search a stream's history (never touches group state).
    Query(query::QueryArgs),
}

impl EventArgs {
    fn run(self) -> anyhow::Result<()> {
        match self.action {
            EventAction::Append(args) => args.run(),
            EventAction::Query(args) => args.run(),
        }
    }
}

/// The flags every ops command takes. They are global to the command, so
/// they may come before or after a nested subcommand (`stream create`).
/// Where neither a flag nor its variable says, the current context says
/// (`rheo context`, docs/cli.md#contexts).
#[derive(Debug, Args)]
pub(crate) struct ServerArgs {
    /// The Rheo server, http://HOST:PORT or https://HOST:PORT [default:
    /// the context's, else http://127.0.0.1:7070]
    #[arg(
        long = "server",
        env = "RHEO_SERVER",
        value_name = "URL",
        global = true
    )]
    url: Option<String>,

    /// Bearer token, for a server started with --auth-token (or the SECRET
    /// of one of its --token NAME=SECRET) [default: the context's]
    #[arg(
        long = "auth-token",
        alias = "token",
        env = "RHEO_AUTH_TOKEN",
        value_name = "TOKEN",
        hide_env_values = true,
        global = true
    )]
    token: Option<String>,

    /// For an https:// server whose certificate is not signed by a public
    /// authority: the PEM file of the CA (or certificate) to trust
    /// [default: the context's]
    #[arg(long, env = "RHEO_CA_CERT", value_name = "FILE", global = true)]
    ca_cert: Option<std::path::PathBuf>,

    /// Use this saved context (server, token and CA) instead of the current
    /// one (`rheo context list`).
    #[arg(long, env = "RHEO_CONTEXT", value_name = "NAME", global = true)]
    context: Option<String>,

    /// Give up on the server after this long, e.g. 30s or 2m (connecting,
    /// sending and the whole answer; a followed log stops then) [default:
    /// no limit but 10s to connect]
    #[arg(long, env = "RHEO_TIMEOUT", value_name = "DURATION", value_parser = duration_ms, global = true)]
    timeout: Option<u64>,

    /// How to print the answer: table, wide (a table with more columns
    /// where there are more), json (the server's answer, pretty) or yaml
    /// [default: table]
    #[arg(
        short = 'o',
        long = "output",
        value_name = "FORMAT",
        value_enum,
        global = true
    )]
    output: Option<Output>,

    /// The same as -o json.
    #[arg(long, global = true, conflicts_with = "output")]
    json: bool,
}

/// How an ops command prints its answer (`-o`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Output {
    /// Aligned columns, for people.
    Table,
    /// The table with every column there is.
    Wide,
    /// The server's JSON answer, pretty.
    Json,
    /// The server's answer as YAML.
    Yaml,
}

impl ServerArgs {
    /// A client for the chosen server: each of server, token and CA from
    /// its flag or variable, else from the context, else the default.
    fn client(&self) -> anyhow::Result<Client> {
        let context = crate::cli::context::chosen(self.context.as_deref())?;
        let saved = context.as_ref();
        let url = (self.url.clone())
            .or_else(|| saved.map(|c| c.server.clone()))
            .unwrap_or_else(|| DEFAULT_SERVER.to_owned());
        let token = (self.token.clone())
            .or_else(|| saved.and_then(|c| c.auth_token.clone()))
            .filter(|t| !t.is_empty());
        let ca_cert = (self.ca_cert.clone()).or_else(|| saved.and_then(|c| c.ca_cert.clone()));
        let timeout = self.timeout.map(std::time::Duration::from_millis);
        Ok(Client::new(&url, token, ca_cert.as_deref(), timeout)?)
    }

    /// The output format asked for.
    fn output(&self) -> Output {
        if self.json {
            Output::Json
        } else {
            self.output.unwrap_or(Output::Table)
        }
    }

    /// Whether the answer goes out as the server's data (JSON or YAML)
    /// rather than as text.
    fn raw(&self) -> bool {
        matches!(self.output(), Output::Json | Output::Yaml)
    }

    /// Whether `-o wide` asked for every column.
    fn wide(&self) -> bool {
        self.output() == Output::Wide
    }

    /// Prints `answer` as JSON or YAML when asked, else the text `human`
    /// makes of it.
    fn print(&self, answer: &Value, human: impl FnOnce(&Value) -> String) -> anyhow::Result<()> {
        match self.output() {
            Output::Json => print_json(answer),
            Output::Yaml => emit(&yaml::to_string(answer)),
            Output::Table | Output::Wide => emit(&human(answer)),
        }
    }
}

/// A stream and one of its groups.
#[derive(Debug, Args)]
struct GroupRef {
    /// The stream.
    stream: String,
    /// The consumer group.
    group: String,
}

impl GroupRef {
    /// The URL path of the group plus `rest` (e.g. `/lag`).
    fn path(&self, rest: &str) -> String {
        format!(
            "/v1/streams/{}/groups/{}{rest}",
            segment(&self.stream),
            segment(&self.group)
        )
    }
}

use crate::config::duration_ms;

/// A command line or input the CLI refuses before sending anything: exit
/// code [`exit::INVALID`](super::client::exit::INVALID), as the server's
/// own refusal of bad input has.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub(crate) struct Invalid(pub(crate) String);

/// Fails with [`Invalid`] unless `condition` holds.
fn require(condition: bool, message: impl FnOnce() -> String) -> anyhow::Result<()> {
    if condition {
        Ok(())
    } else {
        Err(Invalid(message()).into())
    }
}

/// A delete route with its confirmation, and `force` when asked for.
fn delete_path(path: &str, force: bool) -> String {
    if force {
        format!("{path}?confirm=true&force=true")
    } else {
        format!("{path}?confirm=true")
    }
}

/// `deleted WHAT`, with the handlers a forced delete removed first.
fn render_deleted(what: &str, answer: &Value) -> String {
    let removed: Vec<String> = (answer["removed_handlers"].as_array().into_iter().flatten())
        .map(cell)
        .collect();
    if removed.is_empty() {
        format!("deleted {what}\n")
    } else {
        format!(
            "removed handler(s) {} and deleted {what}\n",
            removed.join(", ")
        )
    }
}

fn join(partitions: &[u32]) -> String {
    partitions
        .iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

/// The query of a paged route: `limit` and where the page starts
/// (`after`, the previous page's `next`), each only when given.
fn page_query(limit: Option<u32>, after: Option<&str>) -> Vec<(&'static str, String)> {
    let mut query = Vec::new();
    if let Some(limit) = limit {
        query.push(("limit", limit.to_string()));
    }
    if let Some(after) = after {
        query.push(("after", after.to_owned()));
    }
    query
}

/// The entries of an answer's map of partition to figures
/// (`{"0": {…}, "1": {…}}`), in partition order.
fn by_partition(map: &Value) -> Vec<(u32, &Value)> {
    let mut partitions: Vec<(u32, &Value)> = (map.as_object().into_iter().flatten())
        .filter_map(|(k, v)| Some((k.parse().ok()?, v)))
        .collect();
    partitions.sort_by_key(|(p, _)| *p);
    partitions
}

/// Writes pretty JSON and a newline to stdout.
fn print_json(value: &Value) -> anyhow::Result<()> {
    let mut text = serde_json::to_string_pretty(value).context("formatting JSON")?;
    text.push('\n');
    emit(&text)
}

/// Writes `text` to stdout. A closed pipe (`rheo event query … | head`) is not
/// an error: the reader has what it wanted.
pub(crate) fn emit(text: &str) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() == ErrorKind::BrokenPipe => Ok(()),
        other => other.context("writing to stdout"),
    }
}

/// A JSON value as a table cell: strings bare, null as `-`, anything else
/// compact JSON.
fn cell(value: &Value) -> String {
    match value {
        Value::Null => "-".to_owned(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// A count with its noun, singular or plural: `1 event`, `2 events`.
fn count(n: u64, noun: &str) -> String {
    if n == 1 {
        format!("{n} {noun}")
    } else {
        format!("{n} {noun}s")
    }
}

/// Parses a flag that must hold a JSON object (`--payload '{"a": 1}'`).
fn json_object(text: &str) -> Result<Value, String> {
    match serde_json::from_str::<Value>(text) {
        Ok(value @ Value::Object(_)) => Ok(value),
        Ok(_) => Err("expected a JSON object, e.g. '{\"amount\": 10}'".to_owned()),
        Err(e) => Err(format!("not valid JSON: {e}")),
    }
}

/// Parses a start point: a sequence for every partition (`41`), or a JSON
/// map of partition to sequence (`{"0": 41, "1": 7}`).
/// A group's `flow` (docs/groups.md#flow) given as JSON, e.g.
/// '{"key_concurrency": 4}'; '{}' turns every limit off. Read here so a
/// typo is named before anything is sent.
fn flow(text: &str) -> Result<Value, String> {
    let value = json_object(text).map_err(|_| {
        "expected a JSON object of limits, e.g. '{\"key_concurrency\": 4}' or \
         '{\"key_rate\": {\"per_second\": 5}}' ('{}': none)"
            .to_owned()
    })?;
    serde_json::from_value::<crate::model::Flow>(value.clone()).map_err(|e| e.to_string())?;
    Ok(value)
}

/// A group's flow control as options (docs/groups.md#flow): `--flow JSON`,
/// or its limits one by one.
#[derive(Debug, Clone, Default, clap::Args)]
pub(crate) struct FlowArgs {
    /// Flow control as JSON, e.g. '{"key_concurrency": 4}' or
    /// '{"key_rate": {"per_second": 5, "burst": 10}}'; '{}' for none
    /// (docs/groups.md#flow)
    #[arg(long, value_name = "JSON", value_parser = flow,
          conflicts_with_all = ["key_concurrency", "key_rate", "key_burst"])]
    pub(crate) flow: Option<Value>,
    /// At most N deliveries of a key out at once, in any order (needs
    /// ordering none)
    #[arg(long, value_name = "N")]
    pub(crate) key_concurrency: Option<u32>,
    /// At most R claims of a key a second, retries included; a fraction
    /// is fine (0.5: one every two seconds)
    #[arg(long, value_name = "R")]
    pub(crate) key_rate: Option<f64>,
    /// With --key-rate: how many claims of a key may go at once after a
    /// quiet spell [default: 1]
    #[arg(long, value_name = "B", requires = "key_rate")]
    pub(crate) key_burst: Option<u32>,
}

impl FlowArgs {
    /// Whether any flow option is given.
    pub(crate) fn is_given(&self) -> bool {
        self.flow.is_some() || self.key_concurrency.is_some() || self.key_rate.is_some()
    }

    /// The `flow` body these options give, if any.
    pub(crate) fn body(&self) -> Option<Value> {
        if let Some(flow) = &self.flow {
            return Some(flow.clone());
        }
        if !self.is_given() {
            return None;
        }
        let mut limits = serde_json::Map::new();
        if let Some(n) = self.key_concurrency {
            limits.insert("key_concurrency".into(), serde_json::json!(n));
        }
        if let Some(r) = self.key_rate {
            let burst = self.key_burst.unwrap_or(1);
            limits.insert(
                "key_rate".into(),
                serde_json::json!({ "per_second": r, "burst": burst }),
            );
        }
        Some(Value::Object(limits))
    }
}

/// A flow as one line: `none`, or `key_concurrency 4, key_rate 5/s burst 10`.
fn flow_text(flow: &Value) -> String {
    match flow.as_object() {
        Some(limits) if !limits.is_empty() => limits
            .iter()
            .map(|(k, v)| match (k.as_str(), v["per_second"].as_f64()) {
                ("key_rate", Some(r)) => {
                    format!("key_rate {r}/s burst {}", v["burst"].as_u64().unwrap_or(1))
                }
                _ => format!("{k} {v}"),
            })
            .collect::<Vec<_>>()
            .join(", "),
        _ => "none".into(),
    }
}

fn start_after(text: &str) -> Result<Value, String> {
    if let Ok(seq) = text.trim().parse::<u64>() {
        return Ok(Value::from(seq));
    }
    json_object(text).map_err(|_| {
        "expected a sequence number or a JSON map of partition to sequence, e.g. '{\"0\": 41}'"
            .to_owned()
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn flag_values_are_checked_before_sending() {
        assert_eq!(json_object("{\"a\": 1}").unwrap(), json!({"a": 1}));
        assert!(json_object("[1]").unwrap_err().contains("JSON object"));
        assert!(json_object("{").unwrap_err().contains("not valid JSON"));
        assert_eq!(start_after("41").unwrap(), json!(41));
        assert_eq!(start_after("{\"0\": 3}").unwrap(), json!({"0": 3}));
        assert!(start_after("-1").is_err());
    }

    #[test]
    fn cells_and_counts() {
        assert_eq!(cell(&json!(null)), "-");
        assert_eq!(cell(&json!("x")), "x");
        assert_eq!(cell(&json!({"a": [1]})), "{\"a\":[1]}");
        assert_eq!(count(1, "event"), "1 event");
        assert_eq!(count(0, "event"), "0 events");
    }
}
