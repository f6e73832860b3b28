//! HTTP consumers in other languages work from the OpenAPI document alone:
//! a Python client is generated from a real server's `/v1/openapi.json`
//! with openapi-python-client (pinned in `tests/clients/python/
//! requirements.txt`) and `tests/clients/python/consumer.py`, written
//! against that client, runs a consumer loop — fetch, ack, nack with a
//! delay, reject, lag, dead letters — on the server (docs/http.md#generated-clients).
//!
//! Anything the generator reports about the document — a warning, a
//! skipped endpoint — fails the test: it is a defect of the document, fixed
//! in `host/src/api`, never in the generated code.
//!
//! The tools live in `tests/clients/python/.venv`, made (or found up to
//! date) by `tests/clients/python/venv.sh`; `scripts/test` runs it first.
//! Without Python the test skips and says why — unless `REQUIRE_GUESTS`
//! (set by CI) lists `python`, in which case it fails. The server runs on
//! the test clock: the consumer moves it to prove the nack delay, and
//! nothing sleeps.

use crate::support;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Instant;

use rheo_e2e::{Server, ServerOptions, answer, repo_root};
use serde_json::{Value, json};
use ureq::Agent;

/// The bearer token the server requires, so the generated client's
/// `AuthenticatedClient` and the document's security scheme are exercised.
const TOKEN: &str = "py-client-secret";

#[test]
fn a_generated_python_client_runs_a_consumer_loop() {
    let Some(venv) = python_tools() else { return };
    let started = Instant::now();
    rheo_e2e::rheo_binary();
    eprintln!(
        "the rheo binary is ready after {:.1} s",
        started.elapsed().as_secs_f64()
    );
    let started = Instant::now();
    let dir = tempfile::tempdir().expect("temp dir");
    let server = Server::start(
        dir.path(),
        &ServerOptions {
            test_clock: true,
            auth_token: Some(TOKEN.to_owned()),
            ..ServerOptions::default()
        },
    );
    let http = rheo_e2e::agent();

    // The document, as a client would download it; a client generated
    // from it without findings, installed into a folder of its own.
    let work = tempfile::tempdir().expect("temp dir");
    let document = download_document(&http, &server, work.path());
    let package = generate_client(&venv, &document, &work.path().join("rheo-client"));
    let site = install_client(&venv, &package, work.path());

    // The consumer loop.
    let summary = run_consumer(&venv, &server, &site, work.path());
    assert_eq!(
        summary,
        json!({
            "stream": "orders", "group": "billing",
            "acked": 10, "nacked": 1, "rejected": 1, "stale": 1,
        })
    );

    // The server agrees, asked directly: all 11 events settled, one of
    // them dead-lettered.
    let group = "/v1/streams/orders/groups/billing";
    assert_caught_up_on(&http, &server, group, 11);
    assert_one_poison_dead_letter(&http, &server, group);
    let (status, info) = get(&http, &server, group);
    assert_eq!(status, 200, "{info}");
    assert_eq!(
        (&info["dead_letters"], &info["inflight"]),
        (&json!(1), &json!(0)),
        "{info}"
    );

    // Every settle the consumer made, counted by the server's metrics.
    let metrics = metrics(&http, &server);
    assert_eq!(
        [
            settles(&metrics, "ack", 200),
            settles(&metrics, "ack", 409),
            settles(&metrics, "nack", 200),
            settles(&metrics, "reject", 200)
        ],
        [10, 1, 1, 1],
        "{metrics}"
    );
    eprintln!(
        "generated client: consumer loop passed in {:.1} s",
        started.elapsed().as_secs_f64()
    );
}

/// Downloads the server's `/v1/openapi.json` to `<work>/openapi.json`;
/// returns its path.
fn download_document(http: &Agent, server: &Server, work: &Path) -> PathBuf {
    let (status, document) = get(http, server, "/v1/openapi.json");
    assert_eq!(status, 200, "{document}");
    let path = work.join("openapi.json");
    std::fs::write(&path, serde_json::to_vec_pretty(&document).expect("JSON"))
        .expect("write openapi.json");
    path
}

/// Generates the Python client of `document` into `package`; returns it.
/// Any message but the "Generating" line is a finding about the document
/// and fails the test.
fn generate_client(venv: &Path, document: &Path, package: &Path) -> PathBuf {
    let generated = run(
        Command::new(venv.join("bin/openapi-python-client"))
            .arg("generate")
            .arg("--path")
            .arg(document)
            .arg("--output-path")
            .arg(package)
            .args(["--meta", "setup", "--fail-on-warning"])
            .env("PATH", venv_path(venv)),
        "openapi-python-client generate",
    );
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&generated.stdout),
        String::from_utf8_lossy(&generated.stderr)
    );
    let findings: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|line| !line.is_empty() && !line.starts_with("Generating "))
        .collect();
    assert!(
        generated.status.success() && findings.is_empty(),
        "the generator reported problems with the document (fix it in host/src/api):\n{text}"
    );
    assert!(
        package
            .join("rheo_client/api/leases/lease_nack.py")
            .is_file(),
        "no generated client in {}:\n{text}",
        package.display()
    );
    package.to_owned()
}

/// Installs the generated `package` into `<work>/site`, a folder of its
/// own (nothing downloaded: its dependencies and setuptools are in the
/// venv); returns that folder.
fn install_client(venv: &Path, package: &Path, work: &Path) -> PathBuf {
    let site = work.join("site");
    run_ok(
        Command::new(venv.join("bin/python"))
            .args([
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
            ])
            .args([
                "--no-index",
                "--no-deps",
                "--no-build-isolation",
                "--target",
            ])
            .arg(&site)
            .arg(package)
            .current_dir(work),
        "pip install the generated client",
    );
    site
}

/// Runs `tests/clients/python/consumer.py` on stream `orders`, group
/// `billing`, with the client installed in `site`; returns the JSON
/// summary it prints.
fn run_consumer(venv: &Path, server: &Server, site: &Path, work: &Path) -> Value {
    let consumer = repo_root().join("tests/clients/python/consumer.py");
    let ran = run_ok(
        Command::new(venv.join("bin/python"))
            .arg(&consumer)
            .arg(server.base())
            .args(["--stream", "orders", "--group", "billing", "--token", TOKEN])
            .env("PYTHONPATH", site)
            .env("PYTHONDONTWRITEBYTECODE", "1")
            .current_dir(work),
        "consumer.py",
    );
    let stdout = String::from_utf8_lossy(&ran.stdout);
    serde_json::from_str(stdout.trim())
        .unwrap_or_else(|e| panic!("consumer.py printed no JSON summary ({e}):\n{stdout}"))
}

/// Asserts that `group` (a group's path) has nothing pending, inflight or
/// waiting, on three partitions whose frontiers reached their high
/// watermarks, `appended` events in all.
fn assert_caught_up_on(http: &Agent, server: &Server, group: &str, appended: u64) {
    let (status, lag) = get(http, server, &format!("{group}/lag"));
    assert_eq!(status, 200, "{lag}");
    assert_eq!(
        [
            &lag["lag"],
            &lag["pending"],
            &lag["inflight"],
            &lag["waiting_retry"]
        ],
        [&json!(0); 4],
        "{lag}"
    );
    let partitions = lag["partitions"].as_object().expect("partitions");
    assert_eq!(partitions.len(), 3, "{lag}");
    let total: u64 = partitions
        .values()
        .map(|p| {
            assert_eq!(p["frontier"], p["high_watermark"], "{lag}");
            p["high_watermark"].as_u64().expect("high watermark")
        })
        .sum();
    assert_eq!(total, appended, "{lag}");
}

/// Asserts that `group`'s only dead letter is the poison event `e-7`,
/// rejected for its poison marker.
fn assert_one_poison_dead_letter(http: &Agent, server: &Server, group: &str) {
    let (status, dead) = get(http, server, &format!("{group}/dead-letters"));
    assert_eq!(status, 200, "{dead}");
    let letters = dead["dead_letters"].as_array().expect("dead letters");
    assert_eq!(letters.len(), 1, "{dead}");
    assert_eq!(letters[0]["event_id"], "e-7", "{dead}");
    assert_eq!(letters[0]["event"]["payload"]["poison"], true, "{dead}");
    assert!(
        letters[0]["reason"]
            .as_str()
            .is_some_and(|r| r.contains("poison marker")),
        "{dead}"
    );
}

/// How many `POST …/groups/{group}/{route}` requests answered `status`,
/// from the Prometheus text `metrics`.
fn settles(metrics: &str, route: &str, status: u16) -> u64 {
    let line = format!(
        "rheo_http_requests_total{{method=\"POST\",route=\"/v1/streams/{{stream}}/groups/{{group}}/{route}\",status=\"{status}\"}} "
    );
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(&line))
        .map_or(0, |n| n.trim().parse::<u64>().expect("a count"))
}

/// `GET path` with the bearer token.
fn get(http: &Agent, server: &Server, path: &str) -> support::Answer {
    answer(
        http.get(server.url(path))
            .header("Authorization", &format!("Bearer {TOKEN}"))
            .call(),
    )
}

/// The server's Prometheus text.
fn metrics(http: &Agent, server: &Server) -> String {
    let mut response = http.get(server.url("/metrics")).call().expect("metrics");
    response.body_mut().read_to_string().expect("metrics text")
}

/// `PATH` with the venv's `bin` first (the generator runs `ruff` from it).
fn venv_path(venv: &Path) -> std::ffi::OsString {
    let mut paths = vec![venv.join("bin")];
    if let Some(path) = std::env::var_os("PATH") {
        paths.extend(std::env::split_paths(&path));
    }
    std::env::join_paths(paths).expect("a PATH")
}

/// Runs `command` and returns its output (whatever its exit status).
fn run(command: &mut Command, what: &str) -> Output {
    let started = Instant::now();
    let output = command
        .output()
        .unwrap_or_else(|e| panic!("cannot run {what}: {e}"));
    eprintln!("{what}: {:.1} s", started.elapsed().as_secs_f64());
    output
}

/// Runs `command`; panics with its output unless it succeeds.
fn run_ok(command: &mut Command, what: &str) -> Output {
    let output = run(command, what);
    assert!(
        output.status.success(),
        "{what} failed ({}):\n{}{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

/// Whether `REQUIRE_GUESTS` lists `language`.
fn required(language: &str) -> bool {
    std::env::var("REQUIRE_GUESTS")
        .unwrap_or_default()
        .split(',')
        .any(|l| l.trim() == language)
}

/// The venv holding the generator and the client's dependencies, made or
/// found up to date by `tests/clients/python/venv.sh`; `None` (with the
/// reason printed) when Python is not available here and not required.
fn python_tools() -> Option<PathBuf> {
    let script = repo_root().join("tests/clients/python/venv.sh");
    let started = Instant::now();
    let why = match Command::new("bash").arg(&script).output() {
        Err(e) => format!("cannot run bash: {e}"),
        Ok(run) => {
            let stderr = String::from_utf8_lossy(&run.stderr);
            match run.status.code() {
                Some(0) => {
                    let venv = PathBuf::from(String::from_utf8_lossy(&run.stdout).trim());
                    eprintln!(
                        "python client tools ready in {:.1} s: {}\n{stderr}",
                        started.elapsed().as_secs_f64(),
                        venv.display()
                    );
                    return Some(venv);
                }
                // The toolchain is missing (no Python 3.11, no venv module,
                // or the install failed): a skip where Python is optional.
                Some(3) => format!(
                    "no Python toolchain for the client tools: {}",
                    stderr.trim()
                ),
                _ => panic!("{} failed ({}):\n{stderr}", script.display(), run.status),
            }
        }
    };
    assert!(
        !required("python"),
        "{why}, but REQUIRE_GUESTS lists python"
    );
    eprintln!("skipping the generated Python client test: {why}");
    None
}
