//! The licenses of what Rheo ships (`docs/licenses.md`): every crate the
//! `rheo` binary is built from, and every crate of the example handler
//! components it embeds (the `guests/` workspace, built for
//! `wasm32-wasip2`), as `cargo metadata` reports each one's license. The
//! test fails when one of them is under a license not accepted here, or
//! when `THIRD-PARTY-LICENSES.md` no longer lists exactly these crates:
//! `UPDATE_LICENSES=1 cargo test -p rheo-e2e --test e2e -- licenses`
//! writes it again.
//!
//! Only normal and build dependencies count (tests, benchmarks and their
//! tools are not shipped), for the platform they are built for.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

/// Licenses a shipped crate may be under (SPDX identifiers); `X WITH Y`
/// is accepted when `X` is and `Y` is one of [`EXCEPTIONS`].
const ACCEPTED: &[&str] = &[
    "Apache-2.0",
    "BSD-2-Clause",
    "BSD-3-Clause",
    "BSL-1.0",
    "CC0-1.0",
    "CDLA-Permissive-2.0",
    "ISC",
    "MIT",
    "Unicode-3.0",
    "Unlicense",
    "Zlib",
];

/// License exceptions that only widen what the license allows.
const EXCEPTIONS: &[&str] = &["LLVM-exception"];

const INVENTORY: &str = "THIRD-PARTY-LICENSES.md";

#[test]
fn every_shipped_crate_is_under_an_accepted_license_and_in_the_inventory() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut crates = shipped(
        &root.join("Cargo.toml"),
        "x86_64-unknown-linux-gnu",
        "rheo-cli",
    );
    crates.extend(shipped(
        &root.join("guests/Cargo.toml"),
        "wasm32-wasip2",
        "",
    ));
    // Rheo's own crates are under Rheo's license (LICENSE).
    crates.retain(|c| !c.own);

    let refused: Vec<String> = crates
        .iter()
        .filter(|c| !accepted(&c.license))
        .map(|c| format!("{} {}: {}", c.name, c.version, c.license))
        .collect();
    assert!(
        refused.is_empty(),
        "crates under a license not accepted (tests/tests/licenses.rs): {refused:#?}"
    );

    let expected = inventory(&crates);
    let path = root.join(INVENTORY);
    if std::env::var_os("UPDATE_LICENSES").is_some() {
        std::fs::write(&path, &expected).expect("write the inventory");
        return;
    }
    let found = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        found == expected,
        "{INVENTORY} is out of date: run `UPDATE_LICENSES=1 cargo test -p rheo-e2e --test e2e -- licenses` and commit it"
    );
}

#[test]
fn license_expressions_are_read_as_spdx_says() {
    for yes in [
        "MIT",
        "MIT OR Apache-2.0",
        "MIT/Apache-2.0",
        "(MIT OR Apache-2.0) AND Unicode-3.0",
        "Apache-2.0 WITH LLVM-exception OR Apache-2.0 OR MIT",
        "Apache-2.0 WITH LLVM-exception",
        "GPL-3.0 OR MIT",
    ] {
        assert!(accepted(yes), "{yes}");
    }
    for no in [
        "GPL-3.0",
        "MIT AND GPL-3.0",
        "(MIT OR Apache-2.0) AND AGPL-3.0",
        "GPL-2.0 WITH Classpath-exception-2.0",
        "MIT WITH Unknown-exception",
        "",
        "(MIT",
    ] {
        assert!(!accepted(no), "{no}");
    }
}

/// A crate as `cargo metadata` describes it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Crate {
    name: String,
    version: String,
    license: String,
    own: bool,
}

/// The crates reachable from `root_package` (every workspace member when
/// empty) of the workspace at `manifest` through normal and build
/// dependencies, on `platform`.
fn shipped(manifest: &Path, platform: &str, root_package: &str) -> BTreeSet<Crate> {
    let cargo = std::env::var_os("CARGO").map_or_else(|| PathBuf::from("cargo"), PathBuf::from);
    let out = Command::new(cargo)
        .args([
            "metadata",
            "--format-version",
            "1",
            "--locked",
            "--filter-platform",
            platform,
        ])
        .arg("--manifest-path")
        .arg(manifest)
        .output()
        .expect("run cargo metadata");
    assert!(
        out.status.success(),
        "cargo metadata failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let metadata: Value = serde_json::from_slice(&out.stdout).expect("cargo metadata's JSON");
    let packages: HashMap<&str, &Value> = metadata["packages"]
        .as_array()
        .expect("packages")
        .iter()
        .map(|p| (p["id"].as_str().expect("an id"), p))
        .collect();
    let members: BTreeSet<&str> = metadata["workspace_members"]
        .as_array()
        .expect("workspace members")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    let nodes: HashMap<&str, &Value> = metadata["resolve"]["nodes"]
        .as_array()
        .expect("the resolved graph")
        .iter()
        .map(|n| (n["id"].as_str().expect("an id"), n))
        .collect();
    let mut todo: Vec<&str> = if root_package.is_empty() {
        members.iter().copied().collect()
    } else {
        members
            .iter()
            .copied()
            .filter(|id| packages[id]["name"] == root_package)
            .collect()
    };
    assert!(
        !todo.is_empty(),
        "no package {root_package} in {}",
        manifest.display()
    );
    let mut seen = BTreeSet::new();
    while let Some(id) = todo.pop() {
        if !seen.insert(id) {
            continue;
        }
        for dep in nodes[id]["deps"].as_array().expect("deps") {
            let shipped = dep["dep_kinds"]
                .as_array()
                .expect("dep kinds")
                .iter()
                .any(|k| k["kind"].is_null() || k["kind"] == "build");
            if shipped {
                todo.push(dep["pkg"].as_str().expect("a package id"));
            }
        }
    }
    seen.into_iter()
        .map(|id| {
            let p = packages[id];
            Crate {
                name: p["name"].as_str().expect("a name").to_owned(),
                version: p["version"].as_str().expect("a version").to_owned(),
                license: p["license"].as_str().unwrap_or("").to_owned(),
                own: members.contains(id),
            }
        })
        .collect()
}

/// Whether SPDX expression `expression` lets Rheo ship the crate: an `OR`
/// needs one accepted side, an `AND` both. (`/` is the old spelling of
/// `OR`.) Anything unreadable is refused.
fn accepted(expression: &str) -> bool {
    let spaced = expression
        .replace('/', " OR ")
        .replace('(', " ( ")
        .replace(')', " ) ");
    let tokens: Vec<&str> = spaced.split_whitespace().collect();
    let mut at = 0;
    let verdict = or(&tokens, &mut at);
    verdict == Some(true) && at == tokens.len()
}

fn or(tokens: &[&str], at: &mut usize) -> Option<bool> {
    let mut verdict = and(tokens, at)?;
    while tokens.get(*at) == Some(&"OR") {
        *at += 1;
        verdict |= and(tokens, at)?;
    }
    Some(verdict)
}

fn and(tokens: &[&str], at: &mut usize) -> Option<bool> {
    let mut verdict = license(tokens, at)?;
    while tokens.get(*at) == Some(&"AND") {
        *at += 1;
        verdict &= license(tokens, at)?;
    }
    Some(verdict)
}

fn license(tokens: &[&str], at: &mut usize) -> Option<bool> {
    let token = *tokens.get(*at)?;
    *at += 1;
    if token == "(" {
        let verdict = or(tokens, at)?;
        (tokens.get(*at) == Some(&")")).then(|| *at += 1)?;
        return Some(verdict);
    }
    if ["OR", "AND", "WITH", ")"].contains(&token) {
        return None;
    }
    let mut verdict = ACCEPTED.contains(&token);
    if tokens.get(*at) == Some(&"WITH") {
        let exception = *tokens.get(*at + 1)?;
        *at += 2;
        verdict &= EXCEPTIONS.contains(&exception);
    }
    Some(verdict)
}

/// The inventory's text: the crates by license, as the test writes it.
fn inventory(crates: &BTreeSet<Crate>) -> String {
    let mut by_license: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    for c in crates {
        by_license
            .entry(&c.license)
            .or_default()
            .push(format!("{} {}", c.name, c.version));
    }
    let mut text = String::from(
        "# Third-party licenses\n\n\
         The crates the `rheo` binary is built from, and those of the example\n\
         handler components it embeds, by the license each one declares\n\
         (`cargo metadata`). Written by the test in `tests/tests/licenses.rs`,\n\
         which fails in CI when this list is out of date or a crate's license\n\
         is not one Rheo accepts ([docs/licenses.md](docs/licenses.md)). Each\n\
         crate's license text ships in its source package.\n",
    );
    for (license, names) in by_license {
        text.push_str(&format!("\n## {license} ({})\n\n", names.len()));
        let mut line = String::new();
        for name in names {
            if !line.is_empty() && line.len() + name.len() + 2 > 78 {
                text.push_str(line.trim_end());
                text.push('\n');
                line.clear();
            }
            line.push_str(&name);
            line.push_str(", ");
        }
        text.push_str(line.trim_end_matches([',', ' ']));
        text.push('\n');
    }
    text
}
