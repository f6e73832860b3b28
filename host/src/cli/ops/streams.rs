//! `rheo streams`: list the streams, or `rheo streams create`.

use clap::{Args, Subcommand};
use serde_json::{Value, json};

use super::{ServerArgs, cell};
use crate::cli::table::{Align, Table};

/// Arguments of `rheo streams`.
#[derive(Debug, Args)]
pub(crate) struct StreamsArgs {
    #[command(flatten)]
    server: ServerArgs,

    #[command(subcommand)]
    action: Option<StreamsAction>,
}

#[derive(Debug, Subcommand)]
enum StreamsAction {
    /// Create a stream.
    Create {
        /// 1–128 characters of [A-Za-z0-9._-].
        name: String,
        /// Partitions, fixed for the stream's life.
        #[arg(long, default_value_t = 1, value_name = "N")]
        partitions: u32,
    },
}

impl StreamsArgs {
    pub(crate) fn run(self) -> anyhow::Result<()> {
        let client = self.server.client()?;
        match self.action {
            None => {
                let answer = client.get("/v1/streams", &[])?;
                self.server.print(&answer, render_list)
            }
            Some(StreamsAction::Create { name, partitions }) => {
                let body = json!({"name": name, "partition_count": partitions});
                let answer = client.post("/v1/streams", &body)?;
                self.server.print(&answer, |s| {
                    format!(
                        "created stream {} with {} partition(s)\n",
                        cell(&s["name"]),
                        cell(&s["partition_count"])
                    )
                })
            }
        }
    }
}

/// NAME PARTITIONS EVENTS CREATED; events are the sum of the high watermarks.
fn render_list(answer: &Value) -> String {
    let streams = answer["streams"].as_array().map_or(&[][..], Vec::as_slice);
    if streams.is_empty() {
        return "no streams yet (create one with `rheo streams create NAME`)\n".to_owned();
    }
    let mut table = Table::new(&[
        ("NAME", Align::Left),
        ("PARTITIONS", Align::Right),
        ("EVENTS", Align::Right),
        ("CREATED", Align::Left),
    ]);
    for stream in streams {
        let events: u64 = stream["partitions"]
            .as_object()
            .map(|parts| {
                parts
                    .values()
                    .filter_map(|p| p["high_watermark"].as_u64())
                    .sum()
            })
            .unwrap_or(0);
        table.row([
            cell(&stream["name"]),
            cell(&stream["partition_count"]),
            events.to_string(),
            cell(&stream["created_at"]),
        ]);
    }
    table.render()
}
