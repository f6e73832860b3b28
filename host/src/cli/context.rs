//! `rheo context`: saved server profiles (docs/cli.md#contexts). A context
//! names a server with the token and CA to reach it; the current one is
//! what the ops commands use where no flag or variable says otherwise.
//!
//! They live in `contexts.toml` in `RHEO_CONFIG_DIR`, else
//! `$XDG_CONFIG_HOME/rheo`, else `~/.config/rheo`. The file holds tokens,
//! so it is written readable by its owner only.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context as _, bail};
use clap::{Args, Subcommand};
use serde::{Deserialize, Serialize};

use super::ops::{Invalid, emit};
use super::table::{Align, Table};

/// One saved server.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Saved {
    /// http://HOST:PORT or https://HOST:PORT.
    pub(crate) server: String,
    /// The bearer token, if the server wants one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) auth_token: Option<String>,
    /// The CA file to trust for an https server.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) ca_cert: Option<PathBuf>,
}

/// The file's content.
#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Contexts {
    /// The context used when none is named.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    current: Option<String>,
    #[serde(default)]
    contexts: BTreeMap<String, Saved>,
}

/// The context `named` (from `--context` / `RHEO_CONTEXT`), else the
/// current one, else none. A named context that does not exist is an error:
/// quietly using another server would be worse.
pub(crate) fn chosen(named: Option<&str>) -> anyhow::Result<Option<Saved>> {
    let named = named.filter(|n| !n.is_empty());
    let path = match file() {
        Ok(path) => path,
        // No folder to look in: no context, unless one was asked for.
        Err(e) if named.is_some() => return Err(e),
        Err(_) => return Ok(None),
    };
    let contexts = load(&path)?;
    match named {
        Some(name) => match contexts.contexts.get(name) {
            Some(saved) => Ok(Some(saved.clone())),
            None => Err(Invalid(format!(
                "no context named {name} in {} (rheo context list)",
                path.display()
            ))
            .into()),
        },
        None => Ok(contexts
            .current
            .and_then(|name| contexts.contexts.get(&name).cloned())),
    }
}

/// Arguments of `rheo context`.
#[derive(Debug, Args)]
#[command(arg_required_else_help = true)]
pub(crate) struct ContextArgs {
    #[command(subcommand)]
    action: ContextAction,
}

#[derive(Debug, Subcommand)]
enum ContextAction {
    /// Save a server (with its token and CA) under a name, or replace the
    /// one saved under it; the first one saved becomes current.
    Add {
        /// The context's name.
        name: String,
        /// The Rheo server, http://HOST:PORT or https://HOST:PORT.
        #[arg(long, value_name = "URL")]
        server: String,
        /// Bearer token to send to it (stored in the file, readable by you
        /// only).
        #[arg(long, value_name = "TOKEN")]
        auth_token: Option<String>,
        /// The PEM file of the CA to trust for an https:// server.
        #[arg(long, value_name = "FILE")]
        ca_cert: Option<PathBuf>,
        /// Make it the current context.
        #[arg(long = "use")]
        make_current: bool,
    },
    /// Make a saved context the current one.
    Use {
        /// The context's name.
        name: String,
    },
    /// The saved contexts; * marks the current one.
    List,
    /// Forget a saved context.
    Remove {
        /// The context's name.
        name: String,
    },
}

impl ContextArgs {
    pub(crate) fn run(self) -> anyhow::Result<()> {
        let path = file()?;
        let mut contexts = load(&path)?;
        let message = match self.action {
            ContextAction::List => return emit(&render(&contexts, &path)),
            ContextAction::Add {
                name,
                server,
                auth_token,
                ca_cert,
                make_current,
            } => {
                check_name(&name)?;
                if !(server.starts_with("http://") || server.starts_with("https://")) {
                    bail!(Invalid(format!(
                        "--server {server}: expected http://HOST:PORT or https://HOST:PORT"
                    )));
                }
                // A relative CA path would mean another file from another folder.
                let ca_cert = match ca_cert {
                    Some(ca) => Some(
                        std::fs::canonicalize(&ca)
                            .with_context(|| format!("cannot read --ca-cert {}", ca.display()))?,
                    ),
                    None => None,
                };
                let saved = Saved {
                    server,
                    auth_token,
                    ca_cert,
                };
                let replaced = contexts.contexts.insert(name.clone(), saved).is_some();
                if make_current || contexts.current.is_none() {
                    contexts.current = Some(name.clone());
                }
                let current = if contexts.current.as_deref() == Some(&name) {
                    " (current)"
                } else {
                    ""
                };
                let verb = if replaced { "replaced" } else { "saved" };
                format!("{verb} context {name}{current}\n")
            }
            ContextAction::Use { name } => {
                if !contexts.contexts.contains_key(&name) {
                    bail!(Invalid(format!(
                        "no context named {name} (rheo context list)"
                    )));
                }
                contexts.current = Some(name.clone());
                format!("now using context {name}\n")
            }
            ContextAction::Remove { name } => {
                if contexts.contexts.remove(&name).is_none() {
                    bail!(Invalid(format!(
                        "no context named {name} (rheo context list)"
                    )));
                }
                if contexts.current.as_deref() == Some(&name) {
                    contexts.current = None;
                }
                format!("removed context {name}\n")
            }
        };
        save(&path, &contexts)?;
        emit(&message)
    }
}

fn check_name(name: &str) -> anyhow::Result<()> {
    let valid = !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "._-".contains(c));
    if valid {
        Ok(())
    } else {
        bail!(Invalid(format!(
            "context name {name:?}: 1–64 characters of [A-Za-z0-9._-]"
        )))
    }
}

/// NAME SERVER TOKEN CA-CERT, the current one starred.
fn render(contexts: &Contexts, path: &Path) -> String {
    if contexts.contexts.is_empty() {
        return format!(
            "no contexts saved in {} (save one with `rheo context add NAME --server URL`)\n",
            path.display()
        );
    }
    let mut table = Table::new(&[
        ("CURRENT", Align::Left),
        ("NAME", Align::Left),
        ("SERVER", Align::Left),
        ("TOKEN", Align::Left),
        ("CA-CERT", Align::Left),
    ]);
    for (name, saved) in &contexts.contexts {
        let current = contexts.current.as_deref() == Some(name.as_str());
        table.row([
            if current { "*" } else { "" }.to_owned(),
            name.clone(),
            saved.server.clone(),
            // Never printed: only whether one is saved.
            if saved.auth_token.is_some() {
                "saved"
            } else {
                "-"
            }
            .to_owned(),
            (saved.ca_cert.as_ref()).map_or("-".to_owned(), |p| p.display().to_string()),
        ]);
    }
    table.render()
}

/// `contexts.toml` in the configuration folder.
fn file() -> anyhow::Result<PathBuf> {
    let from_env = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty());
    let dir = if let Some(dir) = from_env("RHEO_CONFIG_DIR") {
        PathBuf::from(dir)
    } else if let Some(dir) = from_env("XDG_CONFIG_HOME") {
        PathBuf::from(dir).join("rheo")
    } else if let Some(home) = from_env("HOME") {
        PathBuf::from(home).join(".config").join("rheo")
    } else {
        bail!("no folder for saved contexts: set RHEO_CONFIG_DIR (or HOME)")
    };
    Ok(dir.join("contexts.toml"))
}

fn load(path: &Path) -> anyhow::Result<Contexts> {
    match std::fs::read_to_string(path) {
        Ok(text) => toml::from_str(&text).with_context(|| format!("reading {}", path.display())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Contexts::default()),
        Err(e) => Err(e).with_context(|| format!("reading {}", path.display())),
    }
}

/// Writes the file whole, through a temporary file renamed over it, so a
/// crash leaves the old or the new one; readable by its owner only.
fn save(path: &Path, contexts: &Contexts) -> anyhow::Result<()> {
    let dir = path.parent().expect("the file is in a folder");
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let text = toml::to_string(contexts).context("formatting the contexts")?;
    let temp = path.with_extension("toml.new");
    {
        use std::io::Write;
        let mut options = std::fs::OpenOptions::new();
        options.write(true).create(true).truncate(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
        let mut out = options
            .open(&temp)
            .with_context(|| format!("writing {}", temp.display()))?;
        out.write_all(text.as_bytes())
            .and_then(|()| out.sync_all())
            .with_context(|| format!("writing {}", temp.display()))?;
    }
    std::fs::rename(&temp, path).with_context(|| format!("writing {}", path.display()))
}
