//! `rheo event query`: search a stream's history, one page or (`--all`) every
//! page by following `next_cursor`.

use clap::{Args, ValueEnum};
use serde_json::{Map, Value, json};

use super::{ServerArgs, cell, json_object};
use crate::cli::client::segment;
use crate::cli::table::{Align, Table};

/// Arguments of `rheo event query`.
#[derive(Debug, Args)]
pub(crate) struct QueryArgs {
    #[command(flatten)]
    server: ServerArgs,

    /// The stream to search.
    stream: String,

    /// Filters, ANDed, e.g. '{"type": "order.created", "amount": {"$gt": 10}}'.
    #[arg(long = "where", value_name = "JSON", value_parser = json_object)]
    filter: Option<Value>,

    /// Only events at or after this RFC 3339 time.
    #[arg(long, value_name = "TIME")]
    from: Option<String>,

    /// Only events at or before this RFC 3339 time.
    #[arg(long, value_name = "TIME")]
    to: Option<String>,

    /// Only events after this sequence (exclusive).
    #[arg(long, value_name = "SEQ")]
    after_sequence: Option<u64>,

    /// Only events up to this sequence (inclusive).
    #[arg(long, value_name = "SEQ")]
    until_sequence: Option<u64>,

    /// Sort by this field.
    #[arg(long, value_enum, default_value_t = OrderField::Sequence)]
    order_by: OrderField,

    /// Sort direction.
    #[arg(long, value_enum, default_value_t = Direction::Asc)]
    order: Direction,

    /// Page size (server default 100, max 1000).
    #[arg(long, value_name = "N")]
    limit: Option<u32>,

    /// Continue from a previous page's next cursor.
    #[arg(long, value_name = "CURSOR")]
    cursor: Option<String>,

    /// Fetch every page, following the next cursor to the end.
    #[arg(long)]
    all: bool,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum OrderField {
    Sequence,
    Timestamp,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum Direction {
    Asc,
    Desc,
}

impl QueryArgs {
    pub(crate) fn run(self) -> anyhow::Result<()> {
        let client = self.server.client()?;
        let path = format!("/v1/streams/{}/query", segment(&self.stream));
        let mut cursor = self.cursor.clone();
        let mut events = Vec::new();
        let next_cursor = loop {
            let mut page = client.post(&path, &self.body(cursor.as_deref()))?;
            if let Some(list) = page["events"].as_array_mut() {
                events.append(list);
            }
            match page["next_cursor"].as_str() {
                Some(next) if self.all => cursor = Some(next.to_owned()),
                next => break next.map(str::to_owned),
            }
        };
        let answer = json!({"events": events, "next_cursor": next_cursor});
        self.server.print(&answer, |a| self.render(a))
    }

    fn body(&self, cursor: Option<&str>) -> Value {
        let mut body = Map::new();
        let mut put = |key: &str, value: Value| {
            if !value.is_null() {
                body.insert(key.to_owned(), value);
            }
        };
        put("where", self.filter.clone().unwrap_or(Value::Null));
        put("from", json!(self.from));
        put("to", json!(self.to));
        put("after_sequence", json!(self.after_sequence));
        put("until_sequence", json!(self.until_sequence));
        let field = match self.order_by {
            OrderField::Sequence => "sequence",
            OrderField::Timestamp => "timestamp",
        };
        let dir = match self.order {
            Direction::Asc => "asc",
            Direction::Desc => "desc",
        };
        put("order_by", json!([{"field": field, "dir": dir}]));
        put("limit", json!(self.limit));
        put("cursor", json!(cursor));
        Value::Object(body)
    }

    /// One event per line: id, partition/sequence, type, key, payload.
    fn render(&self, answer: &Value) -> String {
        let events = answer["events"].as_array().map_or(&[][..], Vec::as_slice);
        let mut table = Table::new(&[
            ("ID", Align::Left),
            ("P/SEQ", Align::Right),
            ("TYPE", Align::Left),
            ("KEY", Align::Left),
            ("PAYLOAD", Align::Left),
        ]);
        for event in events {
            table.row([
                cell(&event["id"]),
                format!("{}/{}", cell(&event["partition"]), cell(&event["sequence"])),
                cell(&event["type"]),
                cell(&event["key"]),
                cell(&event["payload"]),
            ]);
        }
        let mut out = if events.is_empty() {
            "no events match\n".to_owned()
        } else {
            table.render()
        };
        if let Some(next) = answer["next_cursor"].as_str() {
            out.push_str(&format!(
                "next page: --cursor {next}   (or --all to follow every page)\n"
            ));
        }
        out
    }
}
