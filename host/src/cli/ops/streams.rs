//! `rheo streams`: list the streams, `rheo streams create` and
//! `rheo streams delete`.

use clap::{Args, Subcommand};
use serde_json::{Value, json};

use super::{ServerArgs, cell};
use crate::cli::client::segment;
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
            Some(StreamsAction::Delete {
                name,
                confirm,
                force,
            }) => {
                anyhow::ensure!(
                    confirm,
                    "not deleting stream {name} without --confirm: its events, groups and \
                     dead letters would be gone for good (confirm_required)"
                );
                let path = super::delete_path(&format!("/v1/streams/{}", segment(&name)), force);
                let answer = client.delete(&path)?;
                self.server.print(&answer, |a| {
                    super::render_deleted(&format!("stream {name}"), a)
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
