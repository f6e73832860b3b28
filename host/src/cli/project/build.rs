//! `rheo handler build`: a handler project into a WebAssembly component.
//!
//! - Rust: `cargo build --release --target wasm32-wasip2` (the target is
//!   added with rustup when missing); the `.wasm` is the cdylib cargo
//!   reports.
//! - Python: componentize-py, installed from PyPI into a venv in the cache.
//! - JavaScript: componentize-qjs (QuickJS), installed from npm with
//!   `npm ci` into the cache.
//!
//! The pinned tool versions are the ones the repository's own guests are
//! built with (`guests/python/requirements.txt`, `guests/js/package-lock.json`),
//! embedded here. A tool that is missing is named in the error, with the fix.

use std::io::{BufRead, BufReader, ErrorKind};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use anyhow::{Context, bail};
use clap::Args;

use super::{Lang, cache_dir};

const PYTHON_REQUIREMENTS: &str = include_str!("../../../../guests/python/requirements.txt");
const JS_PACKAGE: &str = include_str!("../../../../guests/js/package.json");
const JS_LOCK: &str = include_str!("../../../../guests/js/package-lock.json");
const JS_COMPONENTIZE: &str = include_str!("../../../../guests/js/componentize.mjs");

/// Arguments of `rheo handler build`.
#[derive(Debug, Args)]
pub(crate) struct BuildArgs {
    /// The project folder (made by `rheo handler new`).
    #[arg(default_value = ".", value_name = "DIR")]
    dir: PathBuf,
    /// Where to write the component [default: the manifest's `module`
    /// (handler.toml), else build/<folder name>.wasm].
    #[arg(long, short = 'o', value_name = "FILE.wasm")]
    out: Option<PathBuf>,
}

impl BuildArgs {
    pub(crate) fn run(self) -> anyhow::Result<()> {
        let dir = &self.dir;
        let lang = Lang::detect(dir)?;
        let manifest = read_manifest(dir)?;
        let out = match (self.out, &manifest.module) {
            (Some(out), _) => out,
            (None, Some(module)) => dir.join(module),
            (None, None) => dir.join("build").join(format!("{}.wasm", folder_name(dir))),
        };
        if let Some(parent) = out.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(parent)
                .with_context(|| format!("cannot create {}", parent.display()))?;
        }
        let started = Instant::now();
        eprintln!("building the {} handler in {}", lang.label(), dir.display());
        match lang {
            Lang::Rust => rust(dir, &out)?,
            Lang::Python => python(dir, &out)?,
            Lang::Js => js(dir, &out)?,
        }
        let size = std::fs::metadata(&out)
            .with_context(|| format!("the build wrote no {}", out.display()))?
            .len();
        println!(
            "built {} ({:.1} MiB) in {:.1} s",
            out.display(),
            size as f64 / 1_048_576.0,
            started.elapsed().as_secs_f64()
        );
        if let Some(name) = &manifest.name {
            println!(
                "deploy it with: rheo handler deploy {name} --manifest {}",
                dir.join("handler.toml").display()
            );
        }
        Ok(())
    }
}

/// What `build` reads of `handler.toml` (when there is one).
#[derive(Default, serde::Deserialize)]
struct ManifestPart {
    name: Option<String>,
    module: Option<String>,
}

fn read_manifest(dir: &Path) -> anyhow::Result<ManifestPart> {
    let path = dir.join("handler.toml");
    match std::fs::read_to_string(&path) {
        Ok(text) => {
            let value: toml::Table =
                toml::from_str(&text).with_context(|| format!("{}", path.display()))?;
            let field = |key: &str| value.get(key).and_then(|v| v.as_str()).map(str::to_owned);
            Ok(ManifestPart {
                name: field("name"),
                module: field("module"),
            })
        }
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(ManifestPart::default()),
        Err(e) => Err(e).with_context(|| format!("cannot read {}", path.display())),
    }
}

fn folder_name(dir: &Path) -> String {
    std::fs::canonicalize(dir)
        .ok()
        .and_then(|d| d.file_name().map(|n| n.to_string_lossy().into_owned()))
        .unwrap_or_else(|| "handler".to_owned())
}

/// Runs `command`, its output going to ours; a failure names `what`.
fn run(command: &mut Command, what: &str) -> anyhow::Result<()> {
    let program = command.get_program().to_string_lossy().into_owned();
    let status = command
        .status()
        .map_err(|e| spawn_error(&program, e))
        .with_context(|| what.to_owned())?;
    if !status.success() {
        bail!("{what} failed ({status}); its output is above");
    }
    Ok(())
}

fn spawn_error(program: &str, e: std::io::Error) -> anyhow::Error {
    if e.kind() == ErrorKind::NotFound {
        anyhow::anyhow!("{program} not found")
    } else {
        anyhow::anyhow!("cannot run {program}: {e}")
    }
}

/// Fails with `fix` when `program --version` cannot run.
fn need(program: &str, fix: &str) -> anyhow::Result<()> {
    match Command::new(program)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
    {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == ErrorKind::NotFound => bail!("{program} not found: {fix}"),
        Err(e) => bail!("cannot run {program}: {e}"),
    }
}

// --- Rust ---------------------------------------------------------------------

const WASM_TARGET: &str = "wasm32-wasip2";

fn rust(dir: &Path, out: &Path) -> anyhow::Result<()> {
    need(
        "cargo",
        "install Rust with rustup (https://rustup.rs), then run `rheo handler build` again",
    )?;
    wasm_target(dir)?;
    let mut child = Command::new("cargo")
        .args(["build", "--release", "--target", WASM_TARGET])
        .arg("--message-format=json-render-diagnostics")
        .current_dir(dir)
        .stdout(Stdio::piped())
        .spawn()
        .map_err(|e| spawn_error("cargo", e))?;
    // cargo's messages: the last cdylib artifact's `.wasm` is the component.
    let mut wasm = None;
    for line in BufReader::new(child.stdout.take().expect("piped")).lines() {
        let line = line.context("reading cargo's messages")?;
        let Ok(message) = serde_json::from_str::<serde_json::Value>(&line) else {
            continue;
        };
        let cdylib = message["target"]["kind"]
            .as_array()
            .is_some_and(|kinds| kinds.iter().any(|k| k == "cdylib"));
        if message["reason"] == "compiler-artifact" && cdylib {
            wasm = message["filenames"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|f| f.as_str())
                .find(|f| f.ends_with(".wasm"))
                .map(PathBuf::from)
                .or(wasm);
        }
    }
    let status = child.wait().context("waiting for cargo")?;
    if !status.success() {
        bail!("cargo build failed ({status}); its errors are above");
    }
    let Some(wasm) = wasm else {
        bail!(
            "cargo built no cdylib: the crate in {} needs `crate-type = [\"cdylib\"]` under [lib]",
            dir.display()
        );
    };
    std::fs::copy(&wasm, out)
        .with_context(|| format!("cannot copy {} to {}", wasm.display(), out.display()))?;
    Ok(())
}

/// Adds the wasm32-wasip2 target with rustup when the toolchain that
/// builds in `dir` lacks it.
fn wasm_target(dir: &Path) -> anyhow::Result<()> {
    let sysroot = Command::new("rustc")
        .args(["--print", "sysroot"])
        .current_dir(dir)
        .output()
        .map_err(|e| spawn_error("rustc", e))?;
    let sysroot = PathBuf::from(String::from_utf8_lossy(&sysroot.stdout).trim());
    if sysroot.join("lib/rustlib").join(WASM_TARGET).is_dir() {
        return Ok(());
    }
    eprintln!("adding the {WASM_TARGET} target (rustup target add {WASM_TARGET})");
    need(
        "rustup",
        &format!("the {WASM_TARGET} target is missing; add it to your Rust toolchain"),
    )?;
    run(
        Command::new("rustup")
            .args(["target", "add", WASM_TARGET])
            .current_dir(dir),
        &format!("rustup target add {WASM_TARGET}"),
    )
}

// --- Python -------------------------------------------------------------------

fn python(dir: &Path, out: &Path) -> anyhow::Result<()> {
    let (venv, _cache_lock) = python_tools()?;
    let sdk = sdk_part(dir, "sdk/rheo_handler", Lang::Python)?;
    let wit = sdk_part(dir, "sdk/wit", Lang::Python)?;
    // componentize-py imports the app to snapshot it, which writes
    // __pycache__ folders: build from a copy.
    let stage = dir.join("build").join(".stage");
    fresh_dir(&stage)?;
    copy_project(dir, &stage.join("app"))?;
    copy_tree(&sdk, &stage.join("sdk").join("rheo_handler"))?;
    let partial = partial(out);
    run(
        Command::new(venv.join("bin").join("componentize-py"))
            .arg("--quiet")
            .arg("-d")
            .arg(absolute(&wit)?)
            .args(["-w", "handler", "componentize", "-p", "app", "-p", "sdk"])
            .arg("rheo_handler._entry")
            .arg("-o")
            .arg(absolute(&partial)?)
            .current_dir(&stage),
        "componentize-py",
    )?;
    finish(&partial, out)
}

/// The venv with componentize-py, installed from PyPI when missing or
/// installed from other requirements; with the cache's lock on it.
fn python_tools() -> anyhow::Result<(PathBuf, std::fs::File)> {
    let cache = cache_dir()?;
    let lock = lock_tools(&cache, "python-tools")?;
    let venv = cache.join("python-tools");
    let marker = venv.join("requirements.installed");
    let componentize = venv.join("bin").join("componentize-py");
    if componentize.is_file()
        && std::fs::read_to_string(&marker).is_ok_and(|r| r == PYTHON_REQUIREMENTS)
    {
        return Ok((venv, lock));
    }
    let fix = "install Python 3.9 or newer with its venv module \
               (Debian/Ubuntu: apt install python3 python3-venv)";
    need("python3", fix)?;
    eprintln!(
        "installing componentize-py into {} from PyPI (once)",
        venv.display()
    );
    run(
        Command::new("python3")
            .args(["-m", "venv", "--clear"])
            .arg(&venv),
        &format!("python3 -m venv (to {fix})"),
    )?;
    let requirements = venv.join("requirements.txt");
    std::fs::write(&requirements, PYTHON_REQUIREMENTS)
        .with_context(|| format!("cannot write {}", requirements.display()))?;
    run(
        Command::new(venv.join("bin").join("python"))
            .args([
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
            ])
            .args(["--only-binary", ":all:", "-r"])
            .arg(&requirements),
        "installing componentize-py from PyPI (check the network, or PIP_INDEX_URL)",
    )?;
    std::fs::write(&marker, PYTHON_REQUIREMENTS)
        .with_context(|| format!("cannot write {}", marker.display()))?;
    Ok((venv, lock))
}

// --- JavaScript ---------------------------------------------------------------

fn js(dir: &Path, out: &Path) -> anyhow::Result<()> {
    let (tools, _cache_lock) = js_tools()?;
    let sdk = sdk_part(dir, "sdk/rheo-handler.js", Lang::Js)?;
    let entry = sdk_part(dir, "sdk/entry.js", Lang::Js)?;
    let wit = sdk_part(dir, "sdk/wit", Lang::Js)?;
    // The stage is the module root: app/, entry.js, and the SDK as the
    // package `rheo-handler`.
    let stage = dir.join("build").join(".stage");
    fresh_dir(&stage)?;
    copy_project(dir, &stage.join("app"))?;
    let package = stage.join("node_modules").join("rheo-handler");
    std::fs::create_dir_all(&package)?;
    std::fs::copy(&sdk, package.join("rheo-handler.js"))?;
    std::fs::write(
        package.join("package.json"),
        r#"{"name": "rheo-handler", "type": "module", "main": "rheo-handler.js"}"#,
    )?;
    std::fs::copy(&entry, stage.join("entry.js"))?;
    let partial = partial(out);
    run(
        Command::new("node")
            .arg("componentize.mjs")
            .arg(absolute(&wit)?)
            .arg(absolute(&stage)?)
            .arg(absolute(&partial)?)
            .current_dir(&tools),
        "componentize-qjs",
    )?;
    finish(&partial, out)
}

/// The folder with componentize-qjs installed by `npm ci` from the pinned
/// lock file, when missing or installed from another lock file; with the
/// cache's lock on it.
fn js_tools() -> anyhow::Result<(PathBuf, std::fs::File)> {
    let cache = cache_dir()?;
    let tools = cache.join("js-tools");
    let marker = tools.join("lock.installed");
    need(
        "node",
        "install Node.js 18 or newer (https://nodejs.org, or your package manager)",
    )?;
    let write = |name: &str, text: &str| {
        let path = tools.join(name);
        std::fs::write(&path, text).with_context(|| format!("cannot write {}", path.display()))
    };
    let lock = lock_tools(&cache, "js-tools")?;
    if std::fs::read_to_string(&marker).is_ok_and(|l| l == JS_LOCK) {
        // The build script may be newer than the tools.
        write("componentize.mjs", JS_COMPONENTIZE)?;
        return Ok((tools, lock));
    }
    need("npm", "npm comes with Node.js: install Node.js 18 or newer")?;
    eprintln!(
        "installing componentize-qjs into {} from npm (once)",
        tools.display()
    );
    std::fs::create_dir_all(&tools)
        .with_context(|| format!("cannot create {}", tools.display()))?;
    let _ = std::fs::remove_file(&marker);
    write("package.json", JS_PACKAGE)?;
    write("package-lock.json", JS_LOCK)?;
    write("componentize.mjs", JS_COMPONENTIZE)?;
    run(
        Command::new("npm")
            .args(["ci", "--ignore-scripts", "--no-audit", "--no-fund"])
            .args(["--loglevel=error"])
            .current_dir(&tools),
        "installing componentize-qjs from npm (check the network, or the npm registry setting)",
    )?;
    write("lock.installed", JS_LOCK)?;
    Ok((tools, lock))
}

/// Takes `<cache>/<tools>.lock` for the rest of a build: two builds that
/// share the cache take turns, so one never uses (or installs over) tools
/// the other is installing.
fn lock_tools(cache: &Path, tools: &str) -> anyhow::Result<std::fs::File> {
    std::fs::create_dir_all(cache).with_context(|| format!("cannot create {}", cache.display()))?;
    let path = cache.join(format!("{tools}.lock"));
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .with_context(|| format!("cannot open {}", path.display()))?;
    if file.try_lock().is_err() {
        eprintln!("waiting for another build that uses {}", path.display());
        file.lock()
            .with_context(|| format!("cannot lock {}", path.display()))?;
    }
    Ok(file)
}

// --- Files --------------------------------------------------------------------

/// A part of the project's SDK copy, or an error saying how to get it back.
fn sdk_part(dir: &Path, part: &str, lang: Lang) -> anyhow::Result<PathBuf> {
    let path = dir.join(part);
    if !path.exists() {
        bail!(
            "{} is missing: copy sdk/ from a new project (`rheo handler new NAME --lang {}`)",
            path.display(),
            match lang {
                Lang::Rust => "rust",
                Lang::Python => "python",
                Lang::Js => "js",
            }
        );
    }
    Ok(path)
}

fn fresh_dir(dir: &Path) -> anyhow::Result<()> {
    match std::fs::remove_dir_all(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == ErrorKind::NotFound => {}
        Err(e) => return Err(e).with_context(|| format!("cannot remove {}", dir.display())),
    }
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))
}

/// The project's own files (not `build/`, `sdk/`, `node_modules/`, caches
/// or hidden entries) copied into `to`.
fn copy_project(dir: &Path, to: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(dir).with_context(|| format!("cannot read {}", dir.display()))? {
        let entry = entry?;
        let name = entry.file_name();
        let name = name.to_string_lossy();
        let skipped = ["build", "sdk", "node_modules", "__pycache__"];
        if name.starts_with('.') || skipped.contains(&name.as_ref()) {
            continue;
        }
        copy_tree(&entry.path(), &to.join(&*name))?;
    }
    Ok(())
}

fn copy_tree(from: &Path, to: &Path) -> anyhow::Result<()> {
    if from.is_dir() {
        std::fs::create_dir_all(to)?;
        for entry in std::fs::read_dir(from)? {
            let entry = entry?;
            if entry.file_name() == "__pycache__" {
                continue;
            }
            copy_tree(&entry.path(), &to.join(entry.file_name()))?;
        }
        Ok(())
    } else {
        std::fs::copy(from, to)
            .map(drop)
            .with_context(|| format!("cannot copy {} to {}", from.display(), to.display()))
    }
}

fn absolute(path: &Path) -> anyhow::Result<PathBuf> {
    std::path::absolute(path).with_context(|| format!("{}", path.display()))
}

/// Where a build writes before the result replaces `out`, so a failed
/// build leaves the previous component alone.
fn partial(out: &Path) -> PathBuf {
    let mut name = out.file_name().unwrap_or_default().to_os_string();
    name.push(".partial");
    out.with_file_name(name)
}

fn finish(partial: &Path, out: &Path) -> anyhow::Result<()> {
    std::fs::rename(partial, out)
        .with_context(|| format!("cannot move {} to {}", partial.display(), out.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builds_sharing_a_cache_take_turns() {
        let cache = tempfile::tempdir().unwrap();
        let held = lock_tools(cache.path(), "python-tools").unwrap();
        let other = std::fs::File::open(cache.path().join("python-tools.lock")).unwrap();
        assert!(other.try_lock().is_err(), "a second build waits");
        // Another language's tools are not held up.
        drop(lock_tools(cache.path(), "js-tools").unwrap());
        drop(held);
        assert!(
            other.try_lock().is_ok(),
            "and goes on once the first is done"
        );
    }
}
