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
