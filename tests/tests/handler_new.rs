//! `rheo handler new` → `rheo handler build` → `rheo handler deploy`, as a
//! user runs them outside this repository: a project in a temporary folder,
//! built with nothing but the language's own tools (installed by `build`
//! into Rheo's cache when missing), deployed to a real `rheo serve`, then
//! fed events that it must ack, and a marked one it must dead-letter.
//!
//! The cache (`RHEO_CACHE_DIR`) and the Rust projects' target folder live
//! under cargo's `target/tmp`, so only the first run installs
//! componentize-py / componentize-qjs and compiles the Rust SDK's
//! dependencies. Without Python or Node a language skips and says why —
//! unless `REQUIRE_GUESTS` (set by CI) lists it (`python`, `js`).

use crate::support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use rheo_e2e::{Server, ServerOptions, run_rheo_with};
use serde_json::json;
use support::{eventually, get, post};

#[test]
fn a_new_rust_handler_builds_deploys_and_acks() {
    new_build_deploy("rust");
}

#[test]
fn a_new_python_handler_builds_deploys_and_acks() {
    if available("python", &["python3"]) {
        new_build_deploy("python");
    }
}

#[test]
fn a_new_js_handler_builds_deploys_and_acks() {
    if available("js", &["node", "npm"]) {
        new_build_deploy("js");
    }
}

#[test]
fn build_outside_a_project_says_how_to_make_one() {
    let dir = tempfile::tempdir().expect("temp dir");
    let run = run_rheo_with(
        &["handler", "build", &dir.path().display().to_string()],
        &[],
        None,
    );
    assert_eq!(run.code, Some(1), "{run:?}");
    assert!(
        run.stderr.contains("is not a handler project")
            && run
                .stderr
                .contains("rheo handler new NAME --lang rust|python|js"),
        "{}",
        run.stderr
    );
}

#[test]
fn new_refuses_a_folder_that_is_not_empty() {
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::write(dir.path().join("keep.txt"), "mine").expect("write");
    let target = dir.path().display().to_string();
    let run = run_rheo_with(
        &["handler", "new", "h", "--lang", "rust", "--dir", &target],
        &[],
        None,
    );
    assert_eq!(run.code, Some(1), "{run:?}");
    assert!(run.stderr.contains("is not empty"), "{}", run.stderr);
    let left: Vec<_> = std::fs::read_dir(dir.path()).expect("list").collect();
    assert_eq!(left.len(), 1, "nothing was written next to keep.txt");
}

#[test]
fn a_missing_tool_is_named_with_its_fix() {
    for (lang, says) in [
        ("rust", "cargo not found: install Rust with rustup"),
        ("python", "python3 not found: install Python 3.9 or newer"),
        ("js", "node not found: install Node.js 18 or newer"),
    ] {
        let work = tempfile::tempdir().expect("temp dir");
        let project = work.path().join("p").display().to_string();
        let empty_cache = work.path().join("cache").display().to_string();
        let created = run_rheo_with(
            &["handler", "new", "p", "--lang", lang, "--dir", &project],
            &[],
            None,
        );
        assert_eq!(created.code, Some(0), "{created:?}");
        // No tool on PATH, nothing in the cache.
        let run = run_rheo_with(
            &["handler", "build", &project],
            &[("PATH", "/nonexistent"), ("RHEO_CACHE_DIR", &empty_cache)],
            None,
        );
        assert_eq!(run.code, Some(1), "{lang}: {run:?}");
        assert!(run.stderr.contains(says), "{lang}: {}", run.stderr);
        assert!(
            !work.path().join("p/build/p.wasm").exists(),
            "{lang}: no component"
        );
    }
}

/// Whether the language's tools are installed; when they are not, a skip
/// (printed) or, when `REQUIRE_GUESTS` lists `language`, a failure.
fn available(language: &str, tools: &[&str]) -> bool {
    let missing: Vec<&str> = tools
        .iter()
        .copied()
        .filter(|tool| Command::new(tool).arg("--version").output().is_err())
        .collect();
    if missing.is_empty() {
        return true;
    }
    let required = std::env::var("REQUIRE_GUESTS").unwrap_or_default();
    assert!(
        !required.split(',').any(|g| g.trim() == language),
        "REQUIRE_GUESTS lists {language}, but {} is not installed",
        missing.join(", ")
    );
    eprintln!(
        "skipping the {language} project test: {} not installed",
        missing.join(", ")
    );
    false
}

/// Rheo's tool cache and the Rust projects' target folder, kept between
/// runs.
fn cache() -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("handler-projects")
}

fn rheo(args: &[&str]) -> rheo_e2e::Run {
    let cache = cache();
    let run = run_rheo_with(
        args,
        &[
            ("RHEO_CACHE_DIR", &cache.join("tools").display().to_string()),
            (
                "CARGO_TARGET_DIR",
                &cache.join("cargo-target").display().to_string(),
            ),
        ],
        None,
    );
    assert_eq!(
        run.code,
        Some(0),
        "rheo {}\nstdout:\n{}\nstderr:\n{}",
        args.join(" "),
        run.stdout,
        run.stderr
    );
    run
}

fn new_build_deploy(lang: &str) {
    let work = tempfile::tempdir().expect("temp dir");
    let project = work.path().join(format!("hello-{lang}"));
    let project_arg = project.display().to_string();
    let created = rheo(&[
        "handler",
        "new",
        "hello",
        "--lang",
        lang,
        "--dir",
        &project_arg,
        "--stream",
        "inbox",
    ]);
    assert!(created.stdout.contains("rheo handler build"), "{created:?}");
    for file in ["README.md", "handler.toml", "sdk"] {
        assert!(project.join(file).exists(), "{lang} project lacks {file}");
    }

    let built = rheo(&["handler", "build", &project_arg]);
    let module = project.join("build").join("hello.wasm");
    let bytes = std::fs::read(&module).expect("the component is where the manifest says");
    assert_eq!(&bytes[..4], b"\0asm", "a WebAssembly binary");
    assert!(
        built
            .stdout
            .contains("rheo handler deploy hello --manifest"),
        "{built:?}"
    );
    assert!(
        !project.join("build/hello.wasm.partial").exists(),
        "no partial output left"
    );

    let server_dir = work.path().join("server");
    std::fs::create_dir(&server_dir).expect("server folder");
    let server = Server::start(&server_dir, &ServerOptions::default());
    let http = rheo_e2e::agent();
    let (status, body) = post(&http, &server, "/v1/streams", &json!({"name": "inbox"}));
    assert_eq!(status, 201, "{body}");
    // From inside the project, as its README says: the module comes from
    // the manifest.
    deploy_from(&project, server.base());

    let mut events: Vec<_> = (0..20)
        .map(|i| json!({"id": format!("e-{i}"), "payload": {"n": i}}))
        .collect();
    events.push(json!({"id": "bad", "payload": {"poison": true}}));
    let (status, body) = post(
        &http,
        &server,
        "/v1/streams/inbox/events/batch",
        &json!({ "events": events }),
    );
    assert_eq!(status, 201, "{body}");

    let counters = eventually(
        "the handler settles all 21 events",
        Duration::from_secs(120),
        || {
            let (_, view) = get(&http, &server, "/v1/handlers/hello");
            let c = &view["counters"];
            (c["acked"].as_u64()? + c["rejected"].as_u64()? == 21).then(|| c.clone())
        },
    );
    assert_eq!(
        (counters["acked"].as_u64(), counters["rejected"].as_u64()),
        (Some(20), Some(1)),
        "{counters}"
    );
    let (_, lag) = get(&http, &server, "/v1/streams/inbox/groups/hello/lag");
    let (_, dead) = get(
        &http,
        &server,
        "/v1/streams/inbox/groups/hello/dead-letters",
    );
    assert_eq!(lag["lag"], json!(0), "{lag}");
    let dead_ids: Vec<_> = dead["dead_letters"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|d| d["event_id"].clone())
        .collect();
    assert_eq!(dead_ids, vec![json!("bad")], "{dead}");
}

/// `rheo handler deploy hello --manifest handler.toml` run in `project`.
fn deploy_from(project: &Path, server: &str) {
    let out = Command::new(rheo_e2e::rheo_binary())
        .args([
            "handler",
            "deploy",
            "hello",
            "--manifest",
            "handler.toml",
            "--server",
            server,
        ])
        .current_dir(project)
        .env_remove("RHEO_SERVER")
        .env_remove("RHEO_AUTH_TOKEN")
        .output()
        .expect("run rheo handler deploy");
    assert!(
        out.status.success(),
        "deploy failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
