//! docs/configuration.md's table of `rheo serve`'s settings comes from
//! one source, the definitions that parse the command line (`ServeArgs`),
//! and its file keys from the one that reads the file (`ServeOptions`):
//! this test fails when the page and the code differ, and
//! `UPDATE_DOCS=1 cargo test -p rheo --lib cli::reference` rewrites the
//! table.

use std::collections::BTreeSet;

use clap::CommandFactory;

use crate::config::ServeOptions;

const PAGE: &str = "../docs/configuration.md";
const BEGIN: &str = "<!-- begin: rheo serve settings, generated -->";
const END: &str = "<!-- end: rheo serve settings -->";

/// One row per setting: flag, variable, file key, default, meaning.
fn table() -> String {
    let cli = super::Cli::command();
    let serve = cli.find_subcommand("serve").expect("rheo serve");
    let keys = file_keys();
    let mut out =
        String::from("| Flag | Variable | File key | Default | Meaning |\n|---|---|---|---|---|\n");
    for arg in serve.get_arguments() {
        let Some(long) = arg.get_long() else {
            continue;
        };
        if arg.is_hide_set() || long == "help" {
            continue;
        }
        // A switch: `--test-clock`, `--test-clock=false` from a variable.
        let switch = arg.get_num_args().is_some_and(|n| n.min_values() == 0);
        let value = if switch {
            String::new()
        } else {
            arg.get_value_names()
                .and_then(|names| names.first())
                .map(|name| format!(" {name}"))
                .unwrap_or_default()
        };
        let flag = format!("`--{long}{value}`");
        let variable = arg
            .get_env()
            .map_or("".to_owned(), |env| format!("`{}`", env.to_string_lossy()));
        let key = match long {
            "config" => "".to_owned(),
            "no-migrate" => "`migrate = false`".to_owned(),
            "token" => "`tokens`".to_owned(),
            other => format!("`{}`", other.replace('-', "_")),
        };
        if let Some(name) = key
            .strip_prefix('`')
            .and_then(|k| k.split([' ', '`']).next())
        {
            assert!(
                keys.contains(name),
                "--{long}: the file key {name} is not one the config file reads ({keys:?})"
            );
        }
        let help = arg
            .get_long_help()
            .or(arg.get_help())
            .map(|h| h.to_string())
            .unwrap_or_default();
        let (meaning, default) = match help.rsplit_once("[default: ") {
            Some((meaning, default)) => (
                meaning.trim().to_owned(),
                default.trim_end().trim_end_matches(']').to_owned(),
            ),
            None if switch => (help.trim().to_owned(), "off".to_owned()),
            None => (help.trim().to_owned(), "none".to_owned()),
        };
        let cell = |text: &str| {
            text.split_whitespace()
                .collect::<Vec<_>>()
                .join(" ")
                .replace('|', "\\|")
        };
        out.push_str(&format!(
            "| {flag} | {variable} | {key} | {} | {} |\n",
            cell(&default),
            cell(&meaning)
        ));
    }
    out
}

/// The keys the config file reads, as serde lists them when refusing
/// one it does not know.
fn file_keys() -> BTreeSet<String> {
    let error = toml::from_str::<ServeOptions>("no_such_key = 1")
        .expect_err("an unknown key is refused")
        .to_string();
    let listed = error
        .split("expected one of ")
        .nth(1)
        .unwrap_or_else(|| panic!("the refusal lists the keys: {error}"));
    listed
        .split(',')
        .map(|k| {
            k.trim()
                .trim_matches(|c: char| c == '`' || c.is_whitespace())
        })
        .map(|k| {
            k.lines()
                .next()
                .unwrap_or_default()
                .trim_matches('`')
                .to_owned()
        })
        .filter(|k| !k.is_empty())
        .collect()
}

#[test]
fn the_configuration_page_lists_every_setting_of_rheo_serve() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(PAGE);
    let page = std::fs::read_to_string(&path).expect("docs/configuration.md");
    let start = page
        .find(BEGIN)
        .expect("the page marks its generated table")
        + BEGIN.len();
    let end = page.find(END).expect("the page ends its generated table");
    let wanted = format!("\n\n{}\n", table());
    if std::env::var_os("UPDATE_DOCS").is_some() {
        let updated = format!("{}{wanted}{}", &page[..start], &page[end..]);
        std::fs::write(&path, updated).expect("write docs/configuration.md");
        return;
    }
    assert!(
        page[start..end] == wanted,
        "docs/configuration.md's table differs from rheo serve's definitions; \
         regenerate it with UPDATE_DOCS=1 cargo test -p rheo --lib cli::reference:\n{wanted}"
    );
}

/// The example file of docs/configuration.md is one `rheo serve` reads.
#[test]
fn the_example_config_file_is_read() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(PAGE);
    let page = std::fs::read_to_string(&path).expect("docs/configuration.md");
    let example = page
        .split("```toml\n")
        .nth(1)
        .and_then(|rest| rest.split("```").next())
        .expect("the page has a toml block");
    let options: ServeOptions = toml::from_str(example)
        .unwrap_or_else(|e| panic!("docs/configuration.md's example is refused: {e}"));
    assert_eq!(options.default_lease_ms, Some(30_000));
    assert_eq!(options.store_timeout_ms, Some(10_000));
}
