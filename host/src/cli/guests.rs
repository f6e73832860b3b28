//! The example guests (`guests/`), for `rheo demo` and `rheo bench`: found
//! where `guests/build.sh` put them, or built on first use.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, bail};

/// Every example guest `guests/build.sh` builds.
pub(crate) const EXAMPLES: [&str; 8] = [
    "echo",
    "flaky",
    "poison",
    "spin",
    "hog",
    "transform",
    "probe",
    "crash",
];

/// The `guests/` folder: `RHEO_GUESTS_DIR`, else `./guests`, else the one
/// next to the source this binary was built from.
fn guests_dir() -> anyhow::Result<PathBuf> {
    if let Some(dir) = std::env::var_os("RHEO_GUESTS_DIR") {
        return Ok(PathBuf::from(dir));
    }
    let here = PathBuf::from("guests");
    if here.join("build.sh").is_file() {
        return Ok(here);
    }
    let built_from = Path::new(env!("CARGO_MANIFEST_DIR")).join("../guests");
    if built_from.join("build.sh").is_file() {
        return Ok(built_from);
    }
    bail!(
        "cannot find the example guests (guests/build.sh): run from the Rheo repository \
         or set RHEO_GUESTS_DIR"
    )
}

/// Paths of the example guests by name, building them first (with a
/// message on stderr) when any is missing.
pub(crate) fn example_guests() -> anyhow::Result<BTreeMap<String, PathBuf>> {
    let dir = guests_dir()?;
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .map(|t| if t.is_absolute() { t } else { dir.join(t) })
        .unwrap_or_else(|| dir.join("target"));
    let out = target.join("wasm32-wasip2/release");
    let found: BTreeMap<String, PathBuf> = EXAMPLES
        .iter()
        .map(|name| (name.to_string(), out.join(format!("{name}.wasm"))))
        .collect();
    if found.values().all(|p| p.is_file()) {
        return Ok(found);
    }
    eprintln!(
        "building the example guests with {}/build.sh (first run only; about a minute)…",
        dir.display()
    );
    let output = Command::new("bash")
        .arg(dir.join("build.sh"))
        .stderr(std::process::Stdio::inherit())
        .output()
        .context("cannot run guests/build.sh")?;
    if !output.status.success() {
        bail!(
            "building the example guests failed ({}); is the wasm32-wasip2 target \
             installed? rustup target add wasm32-wasip2",
            output.status
        );
    }
    let built: BTreeMap<String, PathBuf> = String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(PathBuf::from)
        .filter_map(|p| Some((p.file_stem()?.to_string_lossy().into_owned(), p)))
        .collect();
    for name in EXAMPLES {
        if !built.get(name).is_some_and(|p| p.is_file()) {
            bail!("guests/build.sh did not produce {name}.wasm");
        }
    }
    Ok(built)
}
