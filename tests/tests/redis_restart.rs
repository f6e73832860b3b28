//! Redis restarted in the middle of a handler run: while it is down the API
//! answers `backend_unavailable` and the runtime backs off (its log shows
//! the fetch retries spreading out), nothing panics, and once Redis is back
//! the run finishes with every event acked and no dead letter.
//!
//! The test starts its own `redis-server` (on a free port, append-only file
//! synced on every write, in a temporary folder) so that it can stop and
//! restart it without disturbing anything else; it runs wherever
//! `TEST_REDIS_URL` is set (CI sets it, and fails if `redis-server` is
//! missing). The server runs on `--test-clock`: leases whose settle was
//! lost with the connection are expired by moving that clock, never by
//! sleeping.

use crate::support;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use rheo_e2e::service_url;
use support::eventually;
use support::restart::{OwnStore, Restart, free_port, restart_mid_run};

/// A `redis-server` of this test's own.
struct OwnRedis {
    child: Option<Child>,
    port: u16,
    dir: PathBuf,
}

impl OwnRedis {
    fn start(dir: &Path, port: u16) -> Self {
        let mut redis = Self {
            child: None,
            port,
            dir: dir.to_owned(),
        };
        redis.spawn();
        redis
    }

    fn cli(&self, args: &[&str]) -> Option<String> {
        let out = Command::new("redis-cli")
            .args(["-p", &self.port.to_string()])
            .args(args)
            .output()
            .ok()?;
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
    }
}

impl OwnStore for OwnRedis {
    fn spawn(&mut self) {
        let child = Command::new("redis-server")
            .args(["--bind", "127.0.0.1", "--port", &self.port.to_string()])
            .args([
                "--save",
                "",
                "--appendonly",
                "yes",
                "--appendfsync",
                "always",
            ])
            .arg("--dir")
            .arg(&self.dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server must be installed where TEST_REDIS_URL is set");
        self.child = Some(child);
        eventually("redis-server answers", Duration::from_secs(20), || {
            self.cli(&["ping"]).filter(|out| out.trim() == "PONG")
        });
    }

    /// Stops the server the way an operator's restart does; every write it
    /// acknowledged is in the append-only file.
    fn stop(&mut self) {
        let _ = self.cli(&["shutdown"]);
        if let Some(mut child) = self.child.take() {
            let status = child.wait().expect("wait for redis-server");
            assert!(status.success(), "redis-server stopped cleanly: {status}");
        }
    }
}

impl Drop for OwnRedis {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

#[test]
fn a_redis_restart_mid_run_is_unavailable_then_backs_off_and_finishes() {
    if service_url("TEST_REDIS_URL", "redis").is_none() {
        return;
    }
    let redis_dir = tempfile::tempdir().unwrap();
    let mut redis = OwnRedis::start(redis_dir.path(), free_port());
    let backend = format!("redis://127.0.0.1:{}?prefix=restart", redis.port);
    restart_mid_run(
        &mut redis,
        Restart {
            store: "Redis",
            backend,
            // In batches of 500: 2,000 before the stop, 1,000 after.
            before: 2000,
            after: 1000,
            batch: 500,
            // The agent's usual patience.
            down_append_timeout: Duration::from_secs(60),
            backoff_wait: Duration::from_secs(30),
        },
    );
}
