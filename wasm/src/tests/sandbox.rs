//! The sandbox holds: a guest that tries files, the network, the
//! environment and directory listing gets errors, and what it prints ends
//! up in the log under its handler's name.

use serde_json::json;
use tracing::Level;

use super::capture::Captured;
use super::{lease, runner};
use crate::Limits;
use crate::settle::HandlerOutcome;

#[tokio::test]
async fn probe_gets_errors_not_data() {
    let captured = Captured::start();
    let probe = runner("probe", &[], Limits::default()).await;
    // The probe rejects with "sandbox leak: …" if any attempt yields data.
    assert_eq!(
        probe.invoke(&lease("e-1", json!({}), 1)).await,
        HandlerOutcome::Ack
    );

    let lines = captured.of_handler("probe");
    let logged: Vec<&str> = lines
        .iter()
        .filter(|l| l.field("source") == "log")
        .map(|l| l.field("message"))
        .collect();
    for attempt in [
        "read /etc/passwd: ",
        "connect 127.0.0.1:5432: ",
        "env HOME: ",
        "list /: ",
    ] {
        assert!(
            logged.iter().any(|m| m.starts_with(attempt)),
            "no log line for {attempt:?} in {logged:?}"
        );
    }
}

#[tokio::test]
async fn stdout_becomes_log_lines_tagged_with_the_handler() {
    let captured = Captured::start();
    let probe = runner("probe", &[], Limits::default()).await;
    assert_eq!(
        probe.invoke(&lease("e-1", json!({}), 1)).await,
        HandlerOutcome::Ack
    );
    // Dropping the runner drops its warm instance and with it the stdout
    // stream, flushing any unterminated line.
    drop(probe);
    let stdout: Vec<(Level, String)> = captured
        .of_handler("probe")
        .into_iter()
        .filter(|l| l.field("source") == "stdout")
        .map(|l| (l.level, l.field("message").to_owned()))
        .collect();
    assert_eq!(
        stdout,
        [(Level::INFO, "probe finished: 0 leak(s)".to_owned())]
    );
}
