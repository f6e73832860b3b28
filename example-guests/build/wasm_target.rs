//! Makes sure the compiling toolchain has the `wasm32-wasip2` standard
//! library, adding it with rustup when it is missing: rustup's automatic
//! installs may be off (`RUSTUP_AUTO_INSTALL=0`), and a newcomer's first
//! `cargo run` should not stop at "the target is not installed".
//!
//! Shared by the build script and by its test (`host/tests/wasm_target.rs`),
//! which runs it against a fake `rustc` and `rustup`.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The target the example guests are compiled for.
pub(crate) const WASM_TARGET: &str = "wasm32-wasip2";

/// What [`ensure`] found or did.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum WasmTarget {
    /// The toolchain already had the target.
    Present,
    /// `rustup target add` installed it into this toolchain.
    Added {
        /// The rustup toolchain name (e.g. `1.95.0-x86_64-unknown-linux-gnu`).
        toolchain: String,
    },
}

/// Checks the sysroot of `rustc` for the wasm target and, when it is
/// missing, runs `rustup target add` for the toolchain of this build, then
/// checks again. That toolchain is `rustup_toolchain` (the
/// `RUSTUP_TOOLCHAIN` rustup's proxies set) or else the sysroot's folder
/// under rustup's `toolchains/`.
pub(crate) fn ensure(
    rustc: &OsStr,
    rustup: &OsStr,
    rustup_toolchain: Option<&str>,
) -> Result<WasmTarget, String> {
    let sysroot = sysroot(rustc)?;
    if has_target(&sysroot) {
        return Ok(WasmTarget::Present);
    }
    let toolchain = rustup_toolchain
        .map(str::to_owned)
        .or_else(|| toolchain_of(&sysroot))
        .ok_or_else(|| {
            format!(
                "the {WASM_TARGET} target is not installed for the Rust at {} and that Rust \
                 is not managed by rustup: install its {WASM_TARGET} standard library",
                sysroot.display()
            )
        })?;
    let status = Command::new(rustup)
        .args(["target", "add", "--toolchain", &toolchain, WASM_TARGET])
        .status()
        .map_err(|e| {
            format!(
                "the {WASM_TARGET} target is not installed and rustup could not be run \
                 ({e}): run `rustup target add --toolchain {toolchain} {WASM_TARGET}`"
            )
        })?;
    if !status.success() {
        return Err(format!(
            "`rustup target add --toolchain {toolchain} {WASM_TARGET}` failed ({status})"
        ));
    }
    if !has_target(&sysroot) {
        return Err(format!(
            "`rustup target add --toolchain {toolchain} {WASM_TARGET}` succeeded, but {} \
             still has no {WASM_TARGET} standard library",
            sysroot.display()
        ));
    }
    Ok(WasmTarget::Added { toolchain })
}

/// `rustc --print sysroot`.
fn sysroot(rustc: &OsStr) -> Result<PathBuf, String> {
    let shown = Path::new(rustc).display().to_string();
    let output = Command::new(rustc)
        .args(["--print", "sysroot"])
        .output()
        .map_err(|e| format!("cannot run {shown} --print sysroot: {e}"))?;
    if !output.status.success() {
        return Err(format!(
            "{shown} --print sysroot failed ({}): {}",
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        ));
    }
    let text = String::from_utf8(output.stdout)
        .map_err(|_| format!("{shown} --print sysroot printed a non-UTF-8 path"))?;
    Ok(PathBuf::from(text.trim()))
}

/// Whether the sysroot holds the target's standard library.
fn has_target(sysroot: &Path) -> bool {
    sysroot.join("lib/rustlib").join(WASM_TARGET).is_dir()
}

/// The rustup toolchain a sysroot belongs to: rustup keeps each toolchain
/// in `<RUSTUP_HOME>/toolchains/<name>` (rustc reports the sysroot with
/// symlinks resolved, so a toolchain linked to another reports the other).
fn toolchain_of(sysroot: &Path) -> Option<String> {
    let parent = sysroot.parent()?;
    (parent.file_name()? == "toolchains")
        .then(|| sysroot.file_name()?.to_str().map(str::to_owned))
        .flatten()
}
