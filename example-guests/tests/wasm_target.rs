//! The build script's handling of a toolchain without `wasm32-wasip2`
//! (`build/wasm_target.rs`), against a fake `rustc` that prints a
//! sysroot inside a fake rustup home and a fake `rustup` that records its
//! arguments — the real target is shared by every build on the machine, so
//! it is not removed to test this.
#![cfg(unix)]

#[path = "../build/wasm_target.rs"]
mod wasm_target;

use std::ffi::OsStr;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use wasm_target::{WasmTarget, ensure};

/// A fake rustup home with one toolchain, and fake `rustc` / `rustup`.
struct FakeToolchain {
    dir: tempfile::TempDir,
    sysroot: PathBuf,
}

impl FakeToolchain {
    /// `rustup` runs `rustup_body` (a shell snippet) after recording its
    /// arguments in `rustup.log`.
    fn new(rustup_body: &str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let sysroot = dir.path().join("home/toolchains/1.95.0-fake-triple");
        std::fs::create_dir_all(sysroot.join("lib/rustlib/fake-triple")).unwrap();
        let log = dir.path().join("rustup.log");
        script(
            &dir.path().join("rustc"),
            &format!("echo '{}'", sysroot.display()),
        );
        script(
            &dir.path().join("rustup"),
            &format!(
                "echo \"$@\" >> '{}'\nsysroot='{}'\n{rustup_body}",
                log.display(),
                sysroot.display()
            ),
        );
        Self { dir, sysroot }
    }

    /// [`ensure`] with this toolchain's fakes, in a build that rustup's
    /// proxy started with `RUSTUP_TOOLCHAIN` = `rustup_toolchain`.
    fn ensure(&self, rustup_toolchain: Option<&str>) -> Result<WasmTarget, String> {
        ensure(
            self.dir.path().join("rustc").as_os_str(),
            self.dir.path().join("rustup").as_os_str(),
            rustup_toolchain,
        )
    }

    /// Each `rustup` call's arguments, one per line.
    fn rustup_calls(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("rustup.log")).unwrap_or_default()
    }

    fn install_target(&self) {
        std::fs::create_dir_all(self.sysroot.join("lib/rustlib/wasm32-wasip2")).unwrap();
    }
}

/// Writes an executable shell script.
fn script(path: &Path, body: &str) {
    std::fs::write(path, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

// One test, its cases in turn: a script written while another test thread
// forks could fail to execute ("text file busy").
#[test]
fn a_missing_wasm_target_is_added_to_the_compiling_toolchain_and_checked() {
    let adds = "mkdir -p \"$sysroot/lib/rustlib/wasm32-wasip2\"";

    let present = FakeToolchain::new(adds);
    present.install_target();
    assert_eq!(present.ensure(None), Ok(WasmTarget::Present));
    assert_eq!(present.rustup_calls(), "", "nothing to add, rustup not run");

    let missing = FakeToolchain::new(adds);
    assert_eq!(
        missing.ensure(None),
        Ok(WasmTarget::Added {
            toolchain: "1.95.0-fake-triple".into()
        })
    );
    assert_eq!(
        missing.rustup_calls(),
        "target add --toolchain 1.95.0-fake-triple wasm32-wasip2\n"
    );
    assert_eq!(
        missing.ensure(None),
        Ok(WasmTarget::Present),
        "added for good"
    );

    // rustup names the toolchain of the build (e.g. `1.95.0` from
    // rust-toolchain.toml) even when its folder links to another one.
    let named = FakeToolchain::new(adds);
    assert_eq!(
        named.ensure(Some("1.95.0")),
        Ok(WasmTarget::Added {
            toolchain: "1.95.0".into()
        })
    );
    assert_eq!(
        named.rustup_calls(),
        "target add --toolchain 1.95.0 wasm32-wasip2\n"
    );

    let refused = FakeToolchain::new("exit 3");
    let err = refused.ensure(None).unwrap_err();
    assert!(
        err.contains("rustup target add --toolchain 1.95.0-fake-triple wasm32-wasip2"),
        "{err}"
    );

    let claims_success = FakeToolchain::new("true");
    let err = claims_success.ensure(None).unwrap_err();
    assert!(err.contains("still has no wasm32-wasip2"), "{err}");

    let no_rustup = FakeToolchain::new(adds);
    let err = ensure(
        no_rustup.dir.path().join("rustc").as_os_str(),
        OsStr::new("/nonexistent/rustup"),
        None,
    )
    .unwrap_err();
    assert!(err.contains("rustup could not be run"), "{err}");

    let not_rustups = tempfile::tempdir().unwrap();
    let sysroot = not_rustups.path().join("usr");
    std::fs::create_dir_all(&sysroot).unwrap();
    let rustc = not_rustups.path().join("rustc");
    script(&rustc, &format!("echo '{}'", sysroot.display()));
    let err = ensure(rustc.as_os_str(), OsStr::new("/nonexistent/rustup"), None).unwrap_err();
    assert!(err.contains("not managed by rustup"), "{err}");
}
