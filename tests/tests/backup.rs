//! `rheo backup` of a live single node and `rheo restore`
//! (`docs/operations.md#backup-and-restore`): a backup taken while events
//! are appended and handled holds every event and ack made before it, the
//! restored node runs its handlers again, and what cannot be backed up
//! this way is refused with a clear message.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rheo_e2e::{Server, ServerOptions, agent, run_rheo};
use serde_json::{Value, json};
use ureq::Agent;

use crate::support::{self, deploy, eventually, get, guest, handler, lag, post, stream};

/// Events appended (and acked) before the load starts.
const BEFORE: usize = 300;

/// Every event id of `orders` (one partition), in sequence order.
fn event_ids(http: &Agent, server: &Server) -> Vec<String> {
    let mut ids = Vec::new();
    loop {
        let path = format!(
            "/v1/streams/orders/events?partition=0&after={}&limit=1000",
            ids.len()
        );
        let (status, body) = get(http, server, &path);
        assert_eq!(status, 200, "{body}");
        let page = body["events"].as_array().cloned().unwrap_or_default();
        if page.is_empty() {
            return ids;
        }
        ids.extend(page.iter().map(|e| e["id"].as_str().unwrap().to_owned()));
    }
}

/// Every file under `folder`, by relative path, with its bytes.
fn files(folder: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut found = Vec::new();
    let mut pending = vec![folder.to_path_buf()];
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                pending.push(path);
            } else {
                let bytes = std::fs::read(&path).unwrap();
                found.push((path.strip_prefix(folder).unwrap().to_path_buf(), bytes));
            }
        }
    }
    found.sort();
    found
}

/// Appends batches of 20 to `orders` on `base` until `stop`; records each
/// batch's ids once the server answered that it stored them.
fn load(http: Agent, base: String, stop: Arc<AtomicBool>, stored: Arc<Mutex<Vec<String>>>) {
    let mut n = 0;
    while !stop.load(Ordering::Relaxed) {
        let ids: Vec<String> = (n..n + 20).map(|i| format!("during-{i}")).collect();
        let events: Vec<Value> = ids.iter().map(|id| json!({"id": id})).collect();
        let answer = http
            .post(format!("{base}/v1/streams/orders/events/batch"))
            .send_json(json!({ "events": events }))
            .expect("an answer");
        assert_eq!(answer.status(), 201);
        stored.lock().unwrap().extend(ids);
        n += 20;
    }
}

#[test]
fn a_backup_under_load_restores_every_event_and_ack_made_before_it() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (dir.path().join("a"), dir.path().join("b"));
    std::fs::create_dir(&a).unwrap();
    let http = agent();
    let server = Server::start(&a, &ServerOptions::default());
    stream(&http, &server, "orders", 1);
    let manifest = json!({"stream": "orders", "group": "billing", "concurrency": 4});
    let (status, body) = deploy(&http, &server, "echo", &manifest, &guest("echo"));
    assert_eq!(status, 201, "{body}");
    support::append_batch(&http, &server, "orders", "before-", 0..BEFORE);
    eventually(
        "the handler acks the first events",
        Duration::from_secs(60),
        || (lag(&http, &server, "orders", "billing")["lag"] == 0).then_some(()),
    );

    let (stop, stored) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(Mutex::new(Vec::new())),
    );
    let appending = {
        let (http, base) = (http.clone(), server.base().to_owned());
        let (stop, stored) = (Arc::clone(&stop), Arc::clone(&stored));
        std::thread::spawn(move || load(http, base, stop, stored))
    };
    eventually("the load is running", Duration::from_secs(30), || {
        (stored.lock().unwrap().len() >= 100).then_some(())
    });
    let stored_before: Vec<String> = stored.lock().unwrap().clone();
    let backup = dir.path().join("a.backup");
    let store = format!("sqlite://{}", a.join("rheo.db").display());
    let handlers = a.join("handlers");
    let (ok, out, err) = run_rheo(&[
        "backup",
        "--to",
        backup.to_str().unwrap(),
        "--backend",
        &store,
        "--handlers-dir",
        handlers.to_str().unwrap(),
    ]);
    assert!(ok, "{err}");
    assert!(out.starts_with("backed up 1 stream(s), "), "{out}");
    stop.store(true, Ordering::Relaxed);
    appending.join().expect("the load ran");
    let handler_files = files(&handlers);
    let echo = handler(&http, &server, "echo");
    drop(server);

    let (ok, out, err) = run_rheo(&[
        "restore",
        backup.to_str().unwrap(),
        "--data-dir",
        b.to_str().unwrap(),
    ]);
    assert!(ok, "{err}");
    assert!(out.starts_with("restored 1 stream(s), "), "{out}");
    assert_eq!(
        files(&b.join("handlers")),
        handler_files,
        "the handlers came back as they were"
    );

    // The restored store, read by a server that runs no handler.
    let checker = Server::start(
        &b,
        &ServerOptions {
            backend: Some(format!("sqlite://{}", b.join("rheo.db").display())),
            handlers_dir: Some(dir.path().join("no-handlers")),
            ..ServerOptions::default()
        },
    );
    let restored = event_ids(&http, &checker);
    let appended_before: Vec<String> = (0..BEFORE)
        .map(|i| format!("before-{i}"))
        .chain(stored_before)
        .collect();
    assert_eq!(
        restored[..appended_before.len()],
        appended_before[..],
        "every event stored before the backup, in order"
    );
    // Every event acked before the backup is still acked: nothing of them
    // is open again, and the lag counts only later events.
    let (status, fetched) = post(
        &http,
        &checker,
        "/v1/streams/orders/groups/billing/fetch",
        &json!({"limit": 1000, "consumer_id": "checker", "wait_ms": 0}),
    );
    assert_eq!(status, 200, "{fetched}");
    let open: Vec<&str> = fetched["leases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["event"]["id"].as_str().unwrap())
        .collect();
    assert!(!open.iter().any(|id| id.starts_with("before-")), "{open:?}");
    let behind = lag(&http, &checker, "orders", "billing")["lag"]
        .as_u64()
        .unwrap();
    assert!(behind as usize <= restored.len() - BEFORE, "lag {behind}");
    drop(checker);

    // The restored node runs its handler again, as it was, and catches up.
    let node = Server::start(&b, &ServerOptions::default());
    let again = handler(&http, &node, "echo");
    assert_eq!(
        (&again["version"], &again["digest"]),
        (&echo["version"], &echo["digest"])
    );
    eventually(
        "the restored handler catches up",
        Duration::from_secs(120),
        || (lag(&http, &node, "orders", "billing")["lag"] == 0).then_some(()),
    );
}

#[test]
fn backup_and_restore_refuse_what_they_cannot_do_and_overwrite_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let store = format!("sqlite://{}", dir.path().join("rheo.db").display());
    let backup = dir.path().join("x.backup");
    let backup = backup.to_str().unwrap();
    let (ok, _, err) = run_rheo(&["backup", "--to", backup, "--backend", &store]);
    assert!(
        !ok && err.contains("does not exist: nothing to back up"),
        "{err}"
    );
    let (ok, _, err) = run_rheo(&["migrate", "--backend", &store]);
    assert!(ok, "{err}");
    let (ok, _, err) = run_rheo(&["backup", "--to", backup, "--backend", &store]);
    assert!(ok, "{err}");
    let (ok, _, err) = run_rheo(&["backup", "--to", backup, "--backend", &store]);
    assert!(
        !ok && err.contains("exists: a backup never overwrites a file"),
        "{err}"
    );
    let (ok, _, err) = run_rheo(&["restore", backup, "--backend", &store]);
    assert!(
        !ok && err.contains("exists: restore into a new place"),
        "{err}"
    );
    let (ok, _, err) = run_rheo(&[
        "backup",
        "--to",
        "y.backup",
        "--backend",
        "postgres://db/rheo",
    ]);
    assert!(
        !ok && err.contains("back PostgreSQL, Redis and MongoDB up with their own tools"),
        "{err}"
    );
    let not_a_backup = dir.path().join("rheo.db");
    let elsewhere = dir.path().join("elsewhere");
    let (ok, _, err) = run_rheo(&[
        "restore",
        not_a_backup.to_str().unwrap(),
        "--data-dir",
        elsewhere.to_str().unwrap(),
    ]);
    assert!(!ok && err.contains("is not a rheo backup"), "{err}");
    assert!(!elsewhere.join("rheo.db").exists(), "nothing restored");
}
