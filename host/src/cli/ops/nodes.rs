//! `rheo nodes`: the servers sharing the backend and the handlers each
//! runs (`docs/cluster.md`).

use clap::Args;
use serde_json::Value;

use super::{ServerArgs, cell};
use crate::cli::table::{Align, Table};

/// Arguments of `rheo nodes`.
#[derive(Debug, Args)]
pub(crate) struct NodesArgs {
    #[command(flatten)]
    server: ServerArgs,
}

impl NodesArgs {
    pub(crate) fn run(self) -> anyhow::Result<()> {
        let answer = self.server.client()?.get("/v1/nodes", &[])?;
        self.server.print(&answer, render)
    }
}

/// ID ADDRESS VERSION STARTED HEARTBEAT HANDLERS, the answering node marked
/// with `*`; a handler shows as `name v3` (`paused` / `failed` added).
fn render(answer: &Value) -> String {
    let nodes = answer["nodes"].as_array().map_or(&[][..], Vec::as_slice);
    let this = answer["this_node"].as_str().unwrap_or_default();
    let mut table = Table::new(&[
        ("ID", Align::Left),
        ("ADDRESS", Align::Left),
        ("VERSION", Align::Left),
        ("STARTED", Align::Left),
        ("HEARTBEAT", Align::Left),
        ("HANDLERS", Align::Left),
    ]);
    for node in nodes {
        let mut id = cell(&node["id"]);
        if id == this {
            id.push_str(" *");
        }
        let handlers: Vec<String> = node["handlers"]
            .as_array()
            .map_or(&[][..], Vec::as_slice)
            .iter()
            .map(|h| {
                let mut text = cell(&h["name"]);
                if let Some(v) = h["version"].as_u64() {
                    text.push_str(&format!(" v{v}"));
                }
                match h["status"].as_str() {
                    Some("running") | None => {}
                    Some(status) => text.push_str(&format!(" ({status})")),
                }
                text
            })
            .collect();
        table.row([
            id,
            cell(&node["address"]),
            cell(&node["version"]),
            cell(&node["started_at"]),
            cell(&node["heartbeat_at"]),
            if handlers.is_empty() {
                "-".to_owned()
            } else {
                handlers.join(", ")
            },
        ]);
    }
    let mode = if answer["clustered"] == true {
        format!("{} node(s) share the backend; * answered\n", nodes.len())
    } else {
        "single node: the backend is not shared (docs/cluster.md)\n".to_owned()
    };
    format!("{}{mode}", table.render())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::render;

    #[test]
    fn nodes_show_as_a_table_with_what_each_runs() {
        let answer = json!({
            "clustered": true,
            "this_node": "a",
            "nodes": [
                {"id": "a", "address": "http://10.0.0.1:7070", "version": "0.1.0",
                 "started_at": "2026-12-01T10:00:00.000Z", "heartbeat_at": "2026-12-01T10:05:00.000Z",
                 "handlers": [{"name": "billing", "version": 3, "digest": "ab", "status": "running"},
                              {"name": "mailer", "version": 1, "digest": "cd", "status": "paused"}]},
                {"id": "b", "address": "http://10.0.0.2:7070", "version": "0.1.0",
                 "started_at": "2026-12-01T10:01:00.000Z", "heartbeat_at": "2026-12-01T10:05:01.000Z",
                 "handlers": []}
            ]
        });
        let text = render(&answer);
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[0].starts_with("ID"), "{text}");
        assert!(lines[1].starts_with("a *"), "{text}");
        assert!(
            lines[1].contains("billing v3, mailer v1 (paused)"),
            "{text}"
        );
        assert!(
            lines[2].starts_with("b ") && lines[2].trim_end().ends_with('-'),
            "{text}"
        );
        assert_eq!(lines[3], "2 node(s) share the backend; * answered");
    }

    #[test]
    fn a_single_node_says_so() {
        let answer = json!({"clustered": false, "this_node": "a", "nodes": [
            {"id": "a", "address": "", "version": "0.1.0", "started_at": "x", "heartbeat_at": "y", "handlers": []}]});
        assert!(
            render(&answer).ends_with("single node: the backend is not shared (docs/cluster.md)\n")
        );
    }
}
