//! `rheo handler new` and `rheo handler build`: handler projects on the
//! user's machine, outside any Rheo source tree.
//!
//! `new` writes a project from the templates in `host/templates/handler/`
//! plus a copy of the language's SDK and of `wit/` (`handler.wit` and the
//! version it builds on, `deps/handler-0.1.0/`; embedded in the binary), so the project builds with nothing but the language's own
//! tools. `build` finds the language from the project's files, installs the
//! build tools it needs from the package registries into Rheo's cache when
//! they are missing (`build.rs`), and writes the component where the
//! manifest's `module` says. What the projects contain: `docs/handlers.md`.

mod build;

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use clap::{Args, ValueEnum};

use crate::model::HandlerName;

pub(crate) use build::BuildArgs;

/// The WIT contract every handler is built against (`rheo:handler@0.2.0`)
/// and the version it builds on (`wit/deps/`).
const WIT: &str = include_str!("../../../../wit/handler.wit");
const WIT_0_1: &str = include_str!("../../../../wit/deps/handler-0.1.0/handler.wit");

/// Arguments of `rheo handler new`.
#[derive(Debug, Args)]
pub(crate) struct NewArgs {
    /// The handler's name (1–128 characters of `[A-Za-z0-9._-]`).
    name: String,
    /// The language to write it in.
    #[arg(long, value_enum)]
    lang: Lang,
    /// Where to create the project [default: ./NAME]; must not exist or be
    /// empty.
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,
    /// The stream it consumes [default: NAME-events].
    #[arg(long)]
    stream: Option<String>,
    /// The consumer group it consumes as [default: NAME].
    #[arg(long)]
    group: Option<String>,
}

/// A language handlers are written in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum Lang {
    /// Rust, built with cargo for wasm32-wasip2.
    Rust,
    /// Python, built with componentize-py.
    Python,
    /// JavaScript, built with jco (QuickJS).
    Js,
}

impl Lang {
    fn label(self) -> &'static str {
        match self {
            Lang::Rust => "Rust",
            Lang::Python => "Python",
            Lang::Js => "JavaScript",
        }
    }

    /// The file holding the handler's code.
    fn source(self) -> &'static str {
        match self {
            Lang::Rust => "src/lib.rs",
            Lang::Python => "app.py",
            Lang::Js => "app.js",
        }
    }

    /// The language of the project in `dir`, from its files.
    fn detect(dir: &Path) -> anyhow::Result<Lang> {
        for (file, lang) in [
            ("Cargo.toml", Lang::Rust),
            ("app.py", Lang::Python),
            ("app.js", Lang::Js),
        ] {
            if dir.join(file).is_file() {
                return Ok(lang);
            }
        }
        bail!(
            "{} is not a handler project: it has no Cargo.toml (Rust), app.py (Python) \
             or app.js (JavaScript); create one with `rheo handler new NAME --lang rust|python|js`",
            dir.display()
        )
    }
}

/// One file of a new project: its path in the project and its text.
type File = (&'static str, String);

impl NewArgs {
    pub(crate) fn run(self) -> anyhow::Result<()> {
        let name = HandlerName::parse(self.name.as_str())
            .map_err(|e| anyhow::anyhow!("{}: {e}", self.name))?;
        let stream = self.stream.unwrap_or_else(|| format!("{name}-events"));
        let group = self.group.unwrap_or_else(|| name.to_string());
        crate::model::StreamName::parse(stream.as_str())
            .map_err(|e| anyhow::anyhow!("--stream {stream}: {e}"))?;
        crate::model::GroupName::parse(group.as_str())
            .map_err(|e| anyhow::anyhow!("--group {group}: {e}"))?;
        let dir = self.dir.unwrap_or_else(|| PathBuf::from(name.as_str()));
        if dir.exists()
            && std::fs::read_dir(&dir)
                .with_context(|| format!("cannot read {}", dir.display()))?
                .next()
                .is_some()
        {
            bail!(
                "{} already exists and is not empty: choose another --dir",
                dir.display()
            );
        }
        let vars = Vars {
            name: name.as_str(),
            crate_name: &crate_name(name.as_str()),
            stream: &stream,
            group: &group,
            lang: self.lang,
        };
        let files = project_files(&vars);
        for (path, text) in &files {
            let path = dir.join(path);
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent)
                    .with_context(|| format!("cannot create {}", parent.display()))?;
            }
            std::fs::write(&path, text)
                .with_context(|| format!("cannot write {}", path.display()))?;
        }
        println!(
            "created {} handler {name} in {}/ ({} files); next:\n  cd {}\n  rheo handler build\n  \
             rheo handler deploy {name} --manifest handler.toml",
            self.lang.label(),
            dir.display(),
            files.len(),
            dir.display(),
        );
        Ok(())
    }
}

/// What the templates' `{{…}}` placeholders stand for.
struct Vars<'a> {
    name: &'a str,
    crate_name: &'a str,
    stream: &'a str,
    group: &'a str,
    lang: Lang,
}

impl Vars<'_> {
    fn render(&self, template: &str) -> String {
        let (extra, tools) = match self.lang {
            Lang::Rust => (
                "| `Cargo.toml` | the crate: a `cdylib` built for `wasm32-wasip2` |\n",
                "the `wasm32-wasip2` target, through rustup",
            ),
            Lang::Python => ("", "componentize-py, from PyPI"),
            Lang::Js => ("", "jco and QuickJS, from npm"),
        };
        template
            .replace("{{name}}", self.name)
            .replace("{{crate}}", self.crate_name)
            .replace("{{stream}}", self.stream)
            .replace("{{group}}", self.group)
            .replace("{{lang}}", self.lang.label())
            .replace("{{source}}", self.lang.source())
            .replace("{{extra_files}}", extra)
            .replace("{{tools}}", tools)
    }
}

/// A Cargo package name for a handler name: cargo refuses dots and a
/// leading digit.
fn crate_name(name: &str) -> String {
    let name = name.replace('.', "-");
    if name.starts_with(|c: char| c.is_ascii_digit()) {
        format!("handler-{name}")
    } else {
        name
    }
}

/// Every file of a new project in `vars.lang`.
fn project_files(vars: &Vars<'_>) -> Vec<File> {
    macro_rules! template {
        ($path:literal) => {
            include_str!(concat!("../../../templates/handler/", $path))
        };
    }
    let mut files: Vec<File> = vec![
        ("README.md", vars.render(template!("README.md.tmpl"))),
        ("handler.toml", vars.render(template!("handler.toml"))),
    ];
    let plain = |text: &str| text.to_owned();
    match vars.lang {
        Lang::Rust => files.extend([
            ("Cargo.toml", vars.render(template!("rust/Cargo.toml"))),
            ("src/lib.rs", vars.render(template!("rust/src/lib.rs"))),
            (".gitignore", plain(template!("rust/.gitignore"))),
            (
                "sdk/rheo-guest/Cargo.toml",
                plain(include_str!("../../../../guests/rheo-guest/Cargo.toml")),
            ),
            (
                "sdk/rheo-guest/src/lib.rs",
                plain(include_str!("../../../../guests/rheo-guest/src/lib.rs")),
            ),
            ("sdk/rheo-guest/wit/handler.wit", plain(WIT)),
            (
                "sdk/rheo-guest/wit/deps/handler-0.1.0/handler.wit",
                plain(WIT_0_1),
            ),
        ]),
        Lang::Python => files.extend([
            ("app.py", vars.render(template!("python/app.py"))),
            (".gitignore", plain(template!("python/.gitignore"))),
            (
                "sdk/rheo_handler/__init__.py",
                plain(include_str!(
                    "../../../../guests/python/sdk/rheo_handler/__init__.py"
                )),
            ),
            (
                "sdk/rheo_handler/_entry.py",
                plain(include_str!(
                    "../../../../guests/python/sdk/rheo_handler/_entry.py"
                )),
            ),
            ("sdk/wit/handler.wit", plain(WIT)),
            ("sdk/wit/deps/handler-0.1.0/handler.wit", plain(WIT_0_1)),
        ]),
        Lang::Js => files.extend([
            ("app.js", vars.render(template!("js/app.js"))),
            (".gitignore", plain(template!("js/.gitignore"))),
            (
                "sdk/rheo-handler.js",
                plain(include_str!("../../../../guests/js/sdk/rheo-handler.js")),
            ),
            (
                "sdk/entry.js",
                plain(include_str!("../../../../guests/js/sdk/entry.js")),
            ),
            ("sdk/wit/handler.wit", plain(WIT)),
            ("sdk/wit/deps/handler-0.1.0/handler.wit", plain(WIT_0_1)),
        ]),
    }
    files
}

/// Where `rheo handler build` keeps the tools it installs: `RHEO_CACHE_DIR`,
/// else `$XDG_CACHE_HOME/rheo`, else `~/.cache/rheo`.
fn cache_dir() -> anyhow::Result<PathBuf> {
    let from_env = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty());
    if let Some(dir) = from_env("RHEO_CACHE_DIR") {
        return Ok(PathBuf::from(dir));
    }
    if let Some(dir) = from_env("XDG_CACHE_HOME") {
        return Ok(PathBuf::from(dir).join("rheo"));
    }
    if let Some(home) = from_env("HOME") {
        return Ok(PathBuf::from(home).join(".cache").join("rheo"));
    }
    bail!("no cache folder for the build tools: set RHEO_CACHE_DIR (or HOME)")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(lang: Lang) -> Vars<'static> {
        Vars {
            name: "billing.v2",
            crate_name: "billing-v2",
            stream: "orders",
            group: "billing",
            lang,
        }
    }

    #[test]
    fn every_placeholder_is_filled() {
        for lang in [Lang::Rust, Lang::Python, Lang::Js] {
            for (path, text) in project_files(&vars(lang)) {
                assert!(!text.contains("{{"), "{lang:?} {path} keeps a placeholder");
            }
        }
    }

    #[cfg(feature = "wasm")]
    #[test]
    fn the_manifest_names_the_handler_stream_group_and_module() {
        let files = project_files(&vars(Lang::Python));
        let (_, text) = files.iter().find(|(p, _)| *p == "handler.toml").unwrap();
        let manifest = crate::handlers::Manifest::from_toml(text).unwrap();
        assert_eq!(
            manifest.name.as_ref().map(|n| n.as_str()),
            Some("billing.v2")
        );
        assert_eq!(manifest.stream.as_str(), "orders");
        assert_eq!(manifest.group.as_str(), "billing");
        assert_eq!(manifest.module.as_deref(), Some("build/billing.v2.wasm"));
    }

    #[test]
    fn crate_names_are_ones_cargo_accepts() {
        assert_eq!(crate_name("billing.v2"), "billing-v2");
        assert_eq!(crate_name("7up"), "handler-7up");
        assert_eq!(crate_name("echo_1"), "echo_1");
    }

    #[test]
    fn a_folder_without_a_project_says_how_to_make_one() {
        let dir = tempfile::tempdir().unwrap();
        let e = Lang::detect(dir.path()).unwrap_err().to_string();
        assert!(e.contains("rheo handler new"), "{e}");
        std::fs::write(dir.path().join("app.py"), "").unwrap();
        assert_eq!(Lang::detect(dir.path()).unwrap(), Lang::Python);
    }
}
