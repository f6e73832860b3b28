//! The binary runs and identifies itself.

use std::process::Command;

#[test]
fn version_prints_the_crate_version() {
    let out = Command::new(rheo_e2e::rheo_binary())
        .arg("--version")
        .output()
        .expect("run rheo");
    assert!(out.status.success());
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert_eq!(stdout.trim(), format!("rheo {}", env!("CARGO_PKG_VERSION")));
}
