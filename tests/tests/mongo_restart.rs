//! MongoDB restarted in the middle of a handler run: while it is down the
//! API answers `backend_unavailable` and the runtime backs off (its log
//! shows the fetch retries spreading out), nothing panics, and once MongoDB
//! is back the run finishes with every event acked and no dead letter.
//!
//! The test starts its own MongoDB stand-in — SecantusDB, which
//! `scripts/test` installs into `<workspace>/.venv-mongo` — on a free port,
//! with its data in a temporary folder (not `:memory:`, so it survives the
//! restart), so that it can stop and restart it without disturbing anything
//! else; it runs wherever `TEST_MONGODB_URL` is set (CI sets it, and fails
//! if the stand-in is missing). The server runs on `--test-clock`: leases
//! whose settle was lost with the connection are expired by moving that
//! clock, never by sleeping.

use crate::support;

use std::fs::OpenOptions;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rheo_e2e::{repo_root, service_url};
use support::eventually;
use support::restart::{OwnStore, Restart, free_port, restart_mid_run};

/// Events appended before the stop, and again after the restart (each in
/// one batch). Fewer than the Redis test's 3,000: the stand-in is slow.
const BEFORE: usize = 600;
const AFTER: usize = 300;

/// A SecantusDB of this test's own.
struct OwnMongo {
    child: Option<Child>,
    port: u16,
    /// Holds `data/` (the storage, kept across restarts) and the log.
    dir: PathBuf,
}

impl OwnMongo {
    fn start(dir: &Path, port: u16) -> Self {
        let mut mongo = Self {
            child: None,
            port,
            dir: dir.to_owned(),
        };
        mongo.spawn();
        mongo
    }

    fn binary() -> PathBuf {
        let binary = repo_root().join(".venv-mongo/bin/secantusd-py");
        assert!(
            binary.exists(),
            "{} is missing: TEST_MONGODB_URL is set, so this test needs the \
             MongoDB stand-in that scripts/test installs (secantusdb in .venv-mongo)",
            binary.display()
        );
        binary
    }

    fn log(&self) -> PathBuf {
        self.dir.join("secantusd.log")
    }

    fn addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.port))
    }
}

impl OwnStore for OwnMongo {
    /// Starts the stand-in on the same port and storage as before, once the
    /// port is free, and waits until it accepts connections.
    fn spawn(&mut self) {
        eventually("the port is free", Duration::from_secs(30), || {
            TcpListener::bind(self.addr()).ok().map(drop)
        });
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log())
            .expect("open the stand-in's log");
        let child = Command::new(Self::binary())
            .args(["--host", "127.0.0.1", "--port", &self.port.to_string()])
            .arg("--storage-path")
            .arg(self.dir.join("data"))
            // No secantusd.toml of the working directory is picked up.
            .current_dir(&self.dir)
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("the log again"))
            .stderr(log)
            .spawn()
            .expect("spawn secantusd-py");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(60);
        while TcpStream::connect_timeout(&self.addr(), Duration::from_millis(500)).is_err() {
            let exited = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten());
            if exited.is_some() || Instant::now() > deadline {
                let log = std::fs::read_to_string(self.log()).unwrap_or_default();
                panic!(
                    "the stand-in does not answer on {} ({exited:?}):\n{log}",
                    self.port
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Stops the stand-in the way an operator's restart does (SIGTERM: it
    /// closes its storage cleanly) and waits for it to exit.
    fn stop(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        let status = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -TERM the stand-in");
        let deadline = Instant::now() + Duration::from_secs(30);
        let status = loop {
            if let Some(status) = child.try_wait().expect("wait for the stand-in") {
                break status;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!("the stand-in did not exit within 30 s of SIGTERM");
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        assert!(status.success(), "the stand-in stopped cleanly: {status}");
    }
}

impl Drop for OwnMongo {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

#[test]
fn a_mongodb_restart_mid_run_is_unavailable_then_backs_off_and_finishes() {
    if service_url("TEST_MONGODB_URL", "mongodb").is_none() {
        return;
    }
    let mongo_dir = tempfile::tempdir().unwrap();
    let mut mongo = OwnMongo::start(mongo_dir.path(), free_port());
    let backend = format!(
        "mongodb://127.0.0.1:{}/rheo_restart?directConnection=true",
        mongo.port
    );
    restart_mid_run(
        &mut mongo,
        Restart {
            store: "MongoDB",
            backend,
            before: BEFORE,
            after: AFTER,
            batch: BEFORE.max(AFTER),
            // An answer, not a hang: one that takes longer than a few
            // server-selection timeouts is a failure of its own.
            down_append_timeout: Duration::from_secs(30),
            backoff_wait: Duration::from_secs(60),
        },
    );
    // The server has stopped: the stand-in stops cleanly after the run too.
    mongo.stop();
}
