//! Harness for the end-to-end tests: finds (building it if needed) the real
//! `rheo` binary so tests drive it from outside, as a user would.

use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;

/// Path of the `rheo` binary of this workspace, built once per test run
/// with the same profile as the tests.
pub fn rheo_binary() -> &'static PathBuf {
    static BINARY: OnceLock<PathBuf> = OnceLock::new();
    BINARY.get_or_init(|| {
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
        build.args(["build", "--quiet", "-p", "rheo", "--bin", "rheo"]);
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
        .output()
        .expect("run rheo");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}
