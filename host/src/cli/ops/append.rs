//! `rheo event append`: one event from flags, or a JSON-lines file (or stdin)
//! sent through the batch route in chunks.
//!
//! Lines are checked here before they are sent, so a bad line is reported
//! by its number. Everything before it is appended (in order), nothing
//! from it on is sent: fix the line and resume with `tail -n +N`, or
//! simply send the file again if its events carry ids (appends of known
//! ids are idempotent).

use std::fs::File;
use std::io::{BufRead, BufReader, IsTerminal};
use std::path::PathBuf;

use anyhow::Context;
use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use serde_json::{Map, Value, json};

use super::{ServerArgs, cell, count, emit, json_object};
use crate::cli::client::{Client, segment};

/// Most bytes of event JSON in one batch request, well under the server's
/// default body limit (1 MiB).
const MAX_BATCH_BYTES: usize = 512 << 10;

/// The fields of an event input (`docs/log.md#events`).
const EVENT_FIELDS: [&str; 7] = [
    "id",
    "type",
    "key",
    "partition",
    "timestamp",
    "payload",
    "metadata",
];

/// Arguments of `rheo event append`.
#[derive(Debug, Args)]
pub(crate) struct AppendArgs {
    #[command(flatten)]
    server: ServerArgs,

    /// The stream to append to.
    stream: String,

    /// A JSON-lines file of event inputs ({"payload": {...}, "key": "k", ...}
    /// per line), or - for stdin.
    #[arg(long, short = 'f', value_name = "FILE",
          conflicts_with_all = ["payload", "key", "event_type", "id", "partition", "metadata", "timestamp"])]
    file: Option<PathBuf>,

    /// Events per batch request when appending a file (at most 1000).
    #[arg(long, value_name = "N", default_value_t = 500,
          value_parser = clap::value_parser!(u32).range(1..=1000))]
    batch_size: u32,

    /// The event's body, a JSON object [default: {}]
    #[arg(long, value_name = "JSON", value_parser = json_object)]
    payload: Option<Value>,

    /// Routing key (same partitioner as Kafka).
    #[arg(long)]
    key: Option<String>,

    /// Event type.
    #[arg(long = "type", value_name = "TYPE")]
    event_type: Option<String>,

    /// Event id; appending a known id again changes nothing [default: a new
    /// time-ordered UUIDv7]
    #[arg(long)]
    id: Option<String>,

    /// Explicit partition (wins over the key).
    #[arg(long, value_name = "P")]
    partition: Option<u32>,

    /// Metadata, a JSON object (e.g. correlation_id) [default: {}]
    #[arg(long, value_name = "JSON", value_parser = json_object)]
    metadata: Option<Value>,

    /// When it happened, RFC 3339 [default: now]
    #[arg(long, value_name = "TIME")]
    timestamp: Option<String>,
}

impl AppendArgs {
    pub(crate) fn run(self) -> anyhow::Result<()> {
        let client = self.server.client()?;
        match &self.file {
            Some(file) => self.append_file(&client, file),
            None => self.append_one(&client),
        }
    }

    fn append_one(&self, client: &Client) -> anyhow::Result<()> {
        let mut body = Map::new();
        let fields = [
            ("id", json!(self.id)),
            ("type", json!(self.event_type)),
            ("key", json!(self.key)),
            ("partition", json!(self.partition)),
            ("timestamp", json!(self.timestamp)),
            ("payload", self.payload.clone().unwrap_or(Value::Null)),
            ("metadata", self.metadata.clone().unwrap_or(Value::Null)),
        ];
        for (key, value) in fields {
            if !value.is_null() {
                body.insert(key.to_owned(), value);
            }
        }
        let path = format!("/v1/streams/{}/events", segment(&self.stream));
        let answer = client.post(&path, &Value::Object(body))?;
        self.server.print(&answer, |e| {
            let at = format!(
                "partition {} sequence {}",
                cell(&e["partition"]),
                cell(&e["sequence"])
            );
            if e["duplicate"] == Value::Bool(true) {
                format!(
                    "event {} already exists at {at}; nothing appended\n",
                    cell(&e["id"])
                )
            } else {
                format!("appended event {} at {at}\n", cell(&e["id"]))
            }
        })
    }

    fn append_file(&self, client: &Client, file: &PathBuf) -> anyhow::Result<()> {
        let stdin = file.as_os_str() == "-";
        let label = if stdin {
            "stdin".to_owned()
        } else {
            file.display().to_string()
        };
        let (reader, size): (Box<dyn BufRead>, Option<u64>) = if stdin {
            (Box::new(std::io::stdin().lock()), None)
        } else {
            let opened = File::open(file).with_context(|| format!("cannot open {label}"))?;
            let size = opened.metadata().ok().map(|m| m.len());
            (Box::new(BufReader::new(opened)), size)
        };
        let show = !self.server.raw() && std::io::stderr().is_terminal();
        let mut sender = Sender {
            client,
            path: format!("/v1/streams/{}/events/batch", segment(&self.stream)),
            label: &label,
            bar: progress(show, size),
            batch: Batch::default(),
            appended: 0,
            duplicates: 0,
            batches: 0,
        };
        let mut read = 0u64;
        for (index, line) in reader.lines().enumerate() {
            let number = index + 1;
            let line = line.with_context(|| format!("reading line {number} of {label}"))?;
            read += line.len() as u64 + 1;
            let text = line.trim();
            if text.is_empty() {
                continue;
            }
            if let Err(why) = check_line(text) {
                sender.flush()?;
                sender.bar.finish_and_clear();
                return Err(super::Invalid(format!(
                    "{label} line {number}: {why}\n(appended before it: {}; \
                     nothing from line {number} on was sent)",
                    count(sender.appended, "event")
                ))
                .into());
            }
            if sender.batch.bytes + text.len() > MAX_BATCH_BYTES {
                sender.flush()?;
            }
            sender.batch.push(number, text);
            if sender.batch.lines.len() >= self.batch_size as usize {
                sender.flush()?;
            }
            if size.is_some() {
                sender.bar.set_position(read);
            }
        }
        sender.flush()?;
        sender.bar.finish_and_clear();
        if self.server.raw() {
            let answer = json!({
                "appended": sender.appended,
                "duplicates": sender.duplicates,
                "batches": sender.batches,
            });
            return self.server.print(&answer, |_| String::new());
        }
        let mut summary = format!("appended {}", count(sender.appended, "event"));
        if sender.duplicates > 0 {
            summary.push_str(&format!(
                " ({} already stored, not appended again)",
                sender.duplicates
            ));
        }
        emit(&format!("{summary}\n"))
    }
}

/// Lines waiting to be sent together.
#[derive(Debug, Default)]
struct Batch {
    lines: Vec<String>,
    first: usize,
    last: usize,
    bytes: usize,
}

impl Batch {
    fn push(&mut self, number: usize, text: &str) {
        if self.lines.is_empty() {
            self.first = number;
        }
        self.last = number;
        self.bytes += text.len() + 1;
        self.lines.push(text.to_owned());
    }
}

/// Sends batches and keeps the totals.
struct Sender<'a> {
    client: &'a Client,
    path: String,
    label: &'a str,
    bar: ProgressBar,
    batch: Batch,
    appended: u64,
    duplicates: u64,
    batches: u64,
}

impl Sender<'_> {
    /// Sends the waiting lines (the checked JSON text as is) in one request.
    fn flush(&mut self) -> anyhow::Result<()> {
        if self.batch.lines.is_empty() {
            return Ok(());
        }
        let batch = std::mem::take(&mut self.batch);
        let body = format!("{{\"events\":[{}]}}", batch.lines.join(","));
        let answer = match self.client.post_raw_json(&self.path, body.as_bytes()) {
            Ok(answer) => answer,
            Err(e) => {
                self.bar.finish_and_clear();
                return Err(anyhow::Error::new(e).context(format!(
                    "appending lines {}–{} of {} (appended before them: {})",
                    batch.first,
                    batch.last,
                    self.label,
                    count(self.appended, "event")
                )));
            }
        };
        let events = answer["events"].as_array().map_or(&[][..], Vec::as_slice);
        let duplicates = events
            .iter()
            .filter(|e| e["duplicate"] == Value::Bool(true))
            .count() as u64;
        self.appended += batch.lines.len() as u64;
        self.duplicates += duplicates;
        self.batches += 1;
        self.bar
            .set_message(format!("{} appended", count(self.appended, "event")));
        self.bar.tick();
        Ok(())
    }
}

/// A bar over the file's bytes, or a spinner for stdin; hidden unless a
/// person is watching stderr.
fn progress(show: bool, size: Option<u64>) -> ProgressBar {
    if !show {
        return ProgressBar::hidden();
    }
    let (bar, template) = match size {
        Some(len) => (
            ProgressBar::new(len),
            "{spinner} [{bar:30}] {percent:>3}%  {msg}",
        ),
        None => (ProgressBar::new_spinner(), "{spinner} {msg}"),
    };
    bar.set_style(
        ProgressStyle::with_template(template)
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
    );
    bar.set_message("0 events appended");
    bar
}

/// Checks one line: a JSON object with only event input fields, and
/// `payload` / `metadata` objects when given. The server checks the rest.
fn check_line(text: &str) -> Result<(), String> {
    let value: Value = serde_json::from_str(text).map_err(|e| format!("not valid JSON: {e}"))?;
    let Value::Object(fields) = value else {
        return Err("expected a JSON object (one event input per line)".to_owned());
    };
    for (key, value) in &fields {
        if !EVENT_FIELDS.contains(&key.as_str()) {
            return Err(format!(
                "unknown field {key:?} (event inputs have {})",
                EVENT_FIELDS.join(", ")
            ));
        }
        let object_expected = matches!(key.as_str(), "payload" | "metadata");
        if object_expected && !value.is_object() && !value.is_null() {
            return Err(format!("{key} must be a JSON object"));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::check_line;

    #[test]
    fn lines_are_event_inputs() {
        assert!(check_line(r#"{"payload": {"n": 1}, "key": "k", "partition": 0}"#).is_ok());
        assert!(check_line("{}").is_ok());
        assert!(check_line("{").unwrap_err().contains("not valid JSON"));
        assert!(check_line("[1]").unwrap_err().contains("JSON object"));
        assert!(
            check_line(r#"{"pay": {}}"#)
                .unwrap_err()
                .contains("\"pay\"")
        );
        assert!(
            check_line(r#"{"payload": 3}"#)
                .unwrap_err()
                .contains("payload")
        );
    }
}
