//! Harness for the end-to-end tests: finds (building it if needed) the real
//! `rheo` binary so tests drive it from outside, as a user would.

use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;

/// Path of the `rheo` binary the tests drive: `RHEO_BIN` when set
/// (scripts/run-tests sets it to the binary of the build it ran the tests
/// from), else the binary of this workspace, built once per test run with
/// the same profile as the tests.
pub fn rheo_binary() -> &'static PathBuf {
    static BINARY: OnceLock<PathBuf> = OnceLock::new();
    BINARY.get_or_init(|| {
        if let Some(binary) = std::env::var_os("RHEO_BIN").filter(|b| !b.is_empty()) {
            let binary = PathBuf::from(binary);
            assert!(binary.exists(), "RHEO_BIN {} is missing", binary.display());
            return binary;
        }
        // Test binaries live in target/<profile>/deps; the rheo binary in target/<profile>.
        let exe = std::env::current_exe().expect("test executable path");
        let profile_dir = exe
            .parent()
            .and_then(|deps| deps.parent())
            .expect("target/<profile> directory")
            .to_path_buf();
        let release = profile_dir.ends_with("release");
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let mut build = Command::new(cargo);
        build.args(["build", "--quiet", "-p", "rheo-cli", "--bin", "rheo"]);
        if release {
            build.arg("--release");
        }
        let status = build.status().expect("run cargo build for the rheo binary");
        assert!(status.success(), "building the rheo binary failed");
        let binary = profile_dir.join(format!("rheo{}", std::env::consts::EXE_SUFFIX));
        assert!(
            binary.exists(),
            "{} is missing after the build",
            binary.display()
        );
        binary
    })
}

/// The URL of an external service for a test, from `var`. Unset: the test
/// should skip (it prints why) — unless `REQUIRE_BACKENDS` (set by CI) names
/// `backend`, in which case this panics, so CI never skips silently.
pub fn service_url(var: &str, backend: &str) -> Option<String> {
    match std::env::var(var) {
        Ok(url) if !url.trim().is_empty() => Some(url),
        _ => {
            let required = std::env::var("REQUIRE_BACKENDS").unwrap_or_default();
            if required.split(',').any(|b| b.trim() == backend) {
                panic!("{var} is not set, but REQUIRE_BACKENDS lists {backend}");
            }
            eprintln!("skipping {backend} test: set {var} to run it");
            None
        }
    }
}

/// Runs `rheo` with `args`; returns (success, stdout, stderr).
pub fn run_rheo(args: &[&str]) -> (bool, String, String) {
    let out = std::process::Command::new(rheo_binary())
        .args(args)
        .env_remove("RUST_LOG")
        // CI lints its own build with these; the handler projects a test
        // builds through `rheo handler build` are not linted.
        .env_remove("RUSTFLAGS")
        .env_remove("RUSTC_WORKSPACE_WRAPPER")
        .output()
        .expect("run rheo");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// What a finished `rheo` run left behind.
#[derive(Debug)]
pub struct Run {
    /// The exit code (`None` when a signal ended it).
    pub code: Option<i32>,
    /// Everything written to stdout.
    pub stdout: String,
    /// Everything written to stderr.
    pub stderr: String,
}

/// Runs `rheo` with `args`, the variables `env` (on top of an environment
/// without `RUST_LOG`, `RHEO_SERVER` or `RHEO_AUTH_TOKEN`) and `stdin` as
/// its standard input (empty when `None`).
pub fn run_rheo_with(args: &[&str], env: &[(&str, &str)], stdin: Option<&[u8]>) -> Run {
    use std::io::Write;
    use std::process::Stdio;
    let mut child = Command::new(rheo_binary())
        .args(args)
        .env_remove("RUST_LOG")
        // CI lints its own build with these; the handler projects a test
        // builds through `rheo handler build` are not linted.
        .env_remove("RUSTFLAGS")
        .env_remove("RUSTC_WORKSPACE_WRAPPER")
        .env_remove("RHEO_SERVER")
        .env_remove("RHEO_AUTH_TOKEN")
        .envs(env.iter().copied())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run rheo");
    let input = stdin.unwrap_or_default().to_vec();
    let mut pipe = child.stdin.take().expect("piped stdin");
    // Written from another thread, so a large input cannot deadlock
    // against output the child is blocked on writing.
    let writer = std::thread::spawn(move || {
        let _ = pipe.write_all(&input);
    });
    let out = child.wait_with_output().expect("wait for rheo");
    writer.join().expect("stdin writer");
    Run {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// How to start a server: `rheo serve` on 127.0.0.1 port 0 plus these options.
#[derive(Debug, Clone, Default)]
pub struct ServerOptions {
    /// Backend URL; `None` uses a SQLite file `rheo.db` in the server's folder.
    pub backend: Option<String>,
    /// Starts the clock frozen and enables `/v1/test/clock`.
    pub test_clock: bool,
    /// Requires `Authorization: Bearer <token>` on `/v1`.
    pub auth_token: Option<String>,
    /// Handlers directory; `None` uses `handlers/` in the server's folder.
    pub handlers_dir: Option<PathBuf>,
    /// Further `rheo serve` arguments.
    pub args: Vec<String>,
}

impl ServerOptions {
    /// A server that needs `token` to change anything and also takes
    /// `read`, a token that may only read (`--read-token`).
    pub fn with_read_token(token: &str, read: &str) -> Self {
        ServerOptions {
            auth_token: Some(token.into()),
            args: vec!["--read-token".into(), read.into()],
            ..ServerOptions::default()
        }
    }
}

/// A running `rheo serve` child process. Killed when dropped.
#[derive(Debug)]
pub struct Server {
    child: std::process::Child,
    base: String,
    /// The folder holding the default database, handlers and the log.
    pub dir: PathBuf,
    /// Where the server's stderr (its log) goes.
    pub log: PathBuf,
    // Kept open so the server never writes to a closed pipe.
    _stdout: std::io::BufReader<std::process::ChildStdout>,
}

impl Server {
    /// Starts `rheo serve` in `dir` with `options` and waits for its
    /// "rheo listening on" line.
    pub fn start(dir: &std::path::Path, options: &ServerOptions) -> Server {
        use std::io::BufRead;
        let backend = options
            .backend
            .clone()
            .unwrap_or_else(|| format!("sqlite://{}", dir.join("rheo.db").display()));
        let handlers = options
            .handlers_dir
            .clone()
            .unwrap_or_else(|| dir.join("handlers"));
        let log = dir.join(format!("serve-{}.log", unique()));
        let log_file = std::fs::File::create(&log).expect("create the log file");
        let mut command = Command::new(rheo_binary());
        command
            .args(["serve", "--listen", "127.0.0.1:0", "--backend", &backend])
            .arg("--handlers-dir")
            .arg(&handlers)
            .args(&options.args)
            .current_dir(dir)
            .env_remove("RUST_LOG")
            // CI lints its own build with these; the handler projects a test
            // builds through `rheo handler build` are not linted.
            .env_remove("RUSTFLAGS")
            .env_remove("RUSTC_WORKSPACE_WRAPPER")
            .env_remove("RHEO_AUTH_TOKEN")
            .stdout(std::process::Stdio::piped())
            .stderr(log_file);
        if options.test_clock {
            command.arg("--test-clock");
        }
        // The MongoDB stand-in is slow: tens of milliseconds a write, and
        // seconds at times when the library tests share it in CI, on top of
        // the queue of a server's own transactions. A store call there gets
        // two minutes unless the test sets its own bound; real MongoDB
        // keeps the default (docs/cluster.md).
        if backend.starts_with("mongodb:")
            && !options.args.iter().any(|a| a == "--store-timeout-ms")
        {
            command.args(["--store-timeout-ms", "120000"]);
            if !options.args.iter().any(|a| a == "--request-timeout-ms") {
                command.args(["--request-timeout-ms", "180000"]);
            }
        }
        if let Some(token) = &options.auth_token {
            command.args(["--auth-token", token]);
        }
        let mut child = command.spawn().expect("spawn rheo serve");
        let mut stdout = std::io::BufReader::new(child.stdout.take().expect("piped stdout"));
        let mut line = String::new();
        stdout.read_line(&mut line).expect("read the address line");
        let Some(base) = line.trim().strip_prefix("rheo listening on ") else {
            let _ = child.kill();
            let _ = child.wait();
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            panic!("unexpected first line {line:?}; stderr:\n{text}")
        };
        Server {
            base: base.to_owned(),
            child,
            dir: dir.to_path_buf(),
            log,
            _stdout: stdout,
        }
    }

    /// The base URL, e.g. `http://127.0.0.1:41234`.
    pub fn base(&self) -> &str {
        &self.base
    }

    /// The full URL of `path` (which starts with `/`).
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// The server's log so far.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The server's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Kills the server with SIGKILL (no chance to clean up) and reaps it.
    pub fn kill(&mut self) {
        self.child.kill().expect("SIGKILL rheo serve");
        let _ = self.child.wait();
    }

    /// Sends SIGTERM and waits (bounded) for the exit status.
    pub fn terminate(&mut self) -> std::process::ExitStatus {
        let status = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .expect("run kill");
        assert!(status.success());
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        loop {
            if let Some(status) = self.child.try_wait().expect("wait for rheo") {
                return status;
            }
            if std::time::Instant::now() > deadline {
                let _ = self.child.kill();
                panic!("rheo serve did not exit within 30 s of SIGTERM");
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn unique() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// An HTTP agent that returns error statuses as responses (not errors).
pub fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(std::time::Duration::from_secs(60)))
        .build()
        .into()
}

/// Status and JSON body (`Null` when the body is not JSON) of a response.
pub fn answer(
    response: Result<ureq::http::Response<ureq::Body>, ureq::Error>,
) -> (u16, serde_json::Value) {
    let mut response = response.expect("an HTTP response");
    let status = response.status().as_u16();
    let body = response
        .body_mut()
        .read_json()
        .unwrap_or(serde_json::Value::Null);
    (status, body)
}

/// The repository root (holds `guests/`, `wit/`, `Cargo.toml`).
pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace root")
        .to_path_buf()
}

/// A name no other test of any run uses: `rheo_t_<unix secs>_<pid><n>`.
/// The stores' own tests drop `rheo_t_` names older than an hour (a run
/// killed before its guards ran).
fn scratch_name() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock after 1970")
        .as_secs();
    format!("rheo_t_{secs}_{:x}{}", std::process::id(), unique())
}

/// A PostgreSQL schema of one test's own on `TEST_POSTGRES_URL`, dropped
/// (with `psql`) when this is dropped: at the end of the test, passed or
/// failed. Declare it before the servers on it, so that they stop first.
#[derive(Debug)]
pub struct PgSchema {
    admin: String,
    name: String,
    url: String,
}

impl PgSchema {
    /// A fresh schema, or `None` (the test skips) without PostgreSQL.
    pub fn fresh() -> Option<PgSchema> {
        let admin = service_url("TEST_POSTGRES_URL", "postgres")?;
        let name = scratch_name();
        let sep = if admin.contains('?') { '&' } else { '?' };
        let url = format!("{admin}{sep}schema={name}");
        Some(PgSchema { admin, name, url })
    }

    /// The schema's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// A backend URL for it: `TEST_POSTGRES_URL` with `schema=<name>`.
    pub fn url(&self) -> &str {
        &self.url
    }
}

impl Drop for PgSchema {
    fn drop(&mut self) {
        // A session left mid-transaction must not hold the drop for long.
        let _ = Command::new("psql")
            .args([self.admin.as_str(), "-qX", "-c", "SET lock_timeout = '10s'"])
            .args([
                "-c",
                &format!("DROP SCHEMA IF EXISTS \"{}\" CASCADE", self.name),
            ])
            .output();
    }
}

/// Keys under a prefix of one test's own on `TEST_REDIS_URL`, deleted
/// (with `redis-cli`) when this is dropped: at the end of the test, passed
/// or failed. Declare it before the servers on it.
#[derive(Debug)]
pub struct RedisPrefix {
    admin: String,
    url: String,
    prefix: String,
}

impl RedisPrefix {
    /// A fresh prefix, or `None` (the test skips) without Redis.
    pub fn fresh() -> Option<RedisPrefix> {
        let admin = service_url("TEST_REDIS_URL", "redis")?;
        let prefix = scratch_name();
        let sep = if admin.contains('?') { '&' } else { '?' };
        let url = format!("{admin}{sep}prefix={prefix}");
        Some(RedisPrefix { admin, url, prefix })
    }

    /// The Redis server's own URL (no prefix).
    pub fn server(&self) -> &str {
        &self.admin
    }

    /// A backend URL for it: `TEST_REDIS_URL` with `prefix=<prefix>`.
    pub fn url(&self) -> &str {
        &self.url
    }
}

impl Drop for RedisPrefix {
    fn drop(&mut self) {
        let pattern = format!("{}:*", self.prefix);
        let Ok(keys) = Command::new("redis-cli")
            .args(["-u", &self.admin, "--scan", "--pattern", &pattern])
            .output()
        else {
            return;
        };
        let keys = String::from_utf8_lossy(&keys.stdout);
        for chunk in keys.lines().collect::<Vec<_>>().chunks(500) {
            let _ = Command::new("redis-cli")
                .args(["-u", &self.admin, "del"])
                .args(chunk)
                .output();
        }
    }
}
