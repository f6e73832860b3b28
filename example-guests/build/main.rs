//! Build script of `rheo-example-guests`: compiles the example guests of
//! `guests/` (a separate workspace) for `wasm32-wasip2` and embeds them, so
//! the WebAssembly tests, the benches, the end-to-end tests, `rheo demo`
//! and `rheo bench` all use this one build — and an installed `rheo` runs
//! `rheo demo` from any folder, with no source tree.
//!
//! It writes `example_guests.rs` into `OUT_DIR`: a table of each guest's
//! name and bytes (`include_bytes!` of a copy in `OUT_DIR`), included by
//! `src/lib.rs`. The nested `cargo build` gets its own target
//! folder (`<target>/example-guests`): the outer build holds the lock of
//! its own, and one folder shared by `check`, `clippy`, `test` and `build`
//! means the guests compile once and are then only checked for changes.

mod wasm_target;

use std::ffi::OsString;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

use wasm_target::{WASM_TARGET, WasmTarget};

/// Variables of the outer build that would break or needlessly rebuild the
/// nested one: flags meant for the host target (e.g. `-C target-cpu=native`,
/// coverage instrumentation), clippy as the wrapper of the outer workspace,
/// the outer target folder and target triple.
const NOT_FOR_GUESTS: [&str; 8] = [
    "RUSTFLAGS",
    "CARGO_ENCODED_RUSTFLAGS",
    "CARGO_BUILD_RUSTFLAGS",
    "RUSTC_WORKSPACE_WRAPPER",
    "CARGO_TARGET_DIR",
    "CARGO_BUILD_TARGET_DIR",
    "CARGO_BUILD_BUILD_DIR",
    "CARGO_BUILD_TARGET",
];

fn main() {
    if let Err(message) = run() {
        eprintln!("error: {message}");
        std::process::exit(1);
    }
}

fn run() -> Result<(), String> {
    println!("cargo::rerun-if-changed=build");
    let out_dir = PathBuf::from(var("OUT_DIR")?);
    let manifest_dir = PathBuf::from(var("CARGO_MANIFEST_DIR")?);
    let guests_dir = manifest_dir.join("../guests");
    let crates = guest_workspace_crates(&guests_dir)?;
    println!(
        "cargo::rerun-if-changed={}",
        manifest_dir.join("../wit").display()
    );
    for file in ["Cargo.toml", "Cargo.lock"] {
        println!(
            "cargo::rerun-if-changed={}",
            guests_dir.join(file).display()
        );
    }
    for krate in &crates {
        let dir = guests_dir.join(&krate.folder);
        println!(
            "cargo::rerun-if-changed={}",
            dir.join("Cargo.toml").display()
        );
        println!("cargo::rerun-if-changed={}", dir.join("src").display());
    }

    let rustup_toolchain = std::env::var("RUSTUP_TOOLCHAIN").ok();
    let wasm_target = wasm_target::ensure(
        &var("RUSTC")?,
        "rustup".as_ref(),
        rustup_toolchain.as_deref(),
    )?;
    if let WasmTarget::Added { toolchain } = wasm_target {
        println!(
            "cargo::warning=added the {WASM_TARGET} target to the {toolchain} toolchain \
             (rustup target add) to build the example guests"
        );
    }
    let target_dir = shared_target_dir(&out_dir).join("example-guests");
    build_guests(&var("CARGO")?, &guests_dir, &target_dir)?;

    let built = target_dir.join(WASM_TARGET).join("release");
    let mut embedded = Vec::new();
    for krate in crates.iter().filter(|k| k.is_component) {
        let file = format!("{}.wasm", krate.folder.replace('-', "_"));
        let copy = out_dir.join(&file);
        std::fs::copy(built.join(&file), &copy).map_err(|e| {
            format!(
                "guests/{} built no {} ({e}); a guest's package is named like its folder",
                krate.folder,
                built.join(&file).display()
            )
        })?;
        embedded.push((krate.folder.clone(), copy));
    }
    write_table(&out_dir.join("example_guests.rs"), &embedded)
}

/// A crate of the guests workspace.
struct GuestCrate {
    /// Its folder under `guests/` (also its package name).
    folder: String,
    /// Whether it builds a component (`cdylib`), not a library for guests.
    is_component: bool,
}

/// The crates of the guests workspace: folders of `guests/` with a
/// `Cargo.toml`, sorted by name.
fn guest_workspace_crates(guests_dir: &Path) -> Result<Vec<GuestCrate>, String> {
    let entries = std::fs::read_dir(guests_dir)
        .map_err(|e| format!("cannot list {}: {e}", guests_dir.display()))?;
    let mut crates = Vec::new();
    for entry in entries {
        let dir = entry
            .map_err(|e| format!("cannot list {}: {e}", guests_dir.display()))?
            .path();
        let Ok(manifest) = std::fs::read_to_string(dir.join("Cargo.toml")) else {
            continue;
        };
        let folder = dir
            .file_name()
            .and_then(|n| n.to_str())
            .ok_or_else(|| format!("{} is not a UTF-8 name", dir.display()))?;
        crates.push(GuestCrate {
            folder: folder.to_owned(),
            is_component: manifest.contains("\"cdylib\""),
        });
    }
    crates.sort_by(|a, b| a.folder.cmp(&b.folder));
    if !crates.iter().any(|k| k.is_component) {
        return Err(format!("no guest crate in {}", guests_dir.display()));
    }
    Ok(crates)
}

/// The outer build's target folder: the nearest ancestor of `OUT_DIR`
/// that cargo tagged with `CACHEDIR.TAG` (`OUT_DIR` itself if none is).
fn shared_target_dir(out_dir: &Path) -> PathBuf {
    out_dir
        .ancestors()
        .find(|dir| dir.join("CACHEDIR.TAG").is_file())
        .unwrap_or(out_dir)
        .to_path_buf()
}

/// `cargo build --release` of the whole guests workspace into `target_dir`.
fn build_guests(cargo: &OsString, guests_dir: &Path, target_dir: &Path) -> Result<(), String> {
    let mut command = Command::new(cargo);
    command
        .current_dir(guests_dir)
        .args(["build", "--release", "--locked", "--workspace", "--target"])
        .arg(WASM_TARGET)
        .arg("--target-dir")
        .arg(target_dir);
    for name in NOT_FOR_GUESTS {
        command.env_remove(name);
    }
    let output = command
        .output()
        .map_err(|e| format!("cannot run cargo to build the example guests: {e}"))?;
    // Our stdout is read by cargo for directives: the nested output goes to
    // stderr, shown when the build fails (or with -vv).
    eprint!("{}", String::from_utf8_lossy(&output.stdout));
    eprint!("{}", String::from_utf8_lossy(&output.stderr));
    if !output.status.success() {
        return Err(format!(
            "building the example guests ({}) failed ({}); cargo's output is above",
            guests_dir.display(),
            output.status
        ));
    }
    Ok(())
}

/// Writes the table `src/lib.rs` includes.
fn write_table(path: &Path, embedded: &[(String, PathBuf)]) -> Result<(), String> {
    let mut table = String::from(
        "/// Each example guest of `guests/`, by name (sorted), with its component.\n",
    );
    writeln!(
        table,
        "const EMBEDDED: [(&str, &[u8]); {}] = [",
        embedded.len()
    )
    .expect("writing to a String");
    for (name, file) in embedded {
        let file = file
            .to_str()
            .ok_or_else(|| format!("{} is not a UTF-8 path", file.display()))?;
        writeln!(table, "    ({name:?}, include_bytes!({file:?})),").expect("writing to a String");
    }
    table.push_str("];\n");
    std::fs::write(path, table).map_err(|e| format!("cannot write {}: {e}", path.display()))
}

/// An environment variable cargo sets for build scripts.
fn var(name: &str) -> Result<OsString, String> {
    std::env::var_os(name).ok_or_else(|| format!("cargo did not set {name}"))
}
