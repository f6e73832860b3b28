//! The shell blocks of the READMEs, CONTRIBUTING.md and docs/
//! (docs/testing.md#documentation-blocks):
//! a command a reader pastes must work, so each block is run or checked.
//!
//! - ```` ```sh ````: run with `bash -euo pipefail` in a fresh folder, with
//!   `rheo` on `PATH` and a fresh `rheo serve` (SQLite) whose URL is in
//!   `RHEO_SERVER`; `localhost:7070` and `127.0.0.1:7070` in the text
//!   become its address. A file's blocks run in order, in one folder,
//!   against one server.
//! - ```` ```sh check ````: what no test can run whole (a server in the
//!   foreground, builds, the test suite, installs): each `rheo` command
//!   is parsed by the real binary's argument parser, each `cargo -p NAME`
//!   must name a package of the workspace, and each script of the
//!   repository a command runs must exist.
//! - Any other language is not run; a fence without one is refused.
//!
//! Also here: the systemd unit of docs/production.md passes
//! `systemd-analyze verify` where that tool exists.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use rheo_e2e::{Server, ServerOptions, repo_root, rheo_binary};

/// One fenced block of a Markdown file.
#[derive(Debug)]
struct Block {
    /// The file, relative to the repository, and the fence's line.
    at: String,
    /// The info string: `sh`, `sh check`, `text`, …
    info: String,
    text: String,
}

/// The fenced blocks of `path`.
fn blocks(path: &Path) -> Vec<Block> {
    let text = std::fs::read_to_string(path).expect("read a Markdown file");
    let name = path
        .strip_prefix(repo_root())
        .unwrap_or(path)
        .display()
        .to_string();
    let mut blocks = Vec::new();
    let mut open: Option<(usize, String, String)> = None;
    for (index, line) in text.lines().enumerate() {
        let fence = line.trim_start();
        match &mut open {
            None if fence.starts_with("```") => {
                open = Some((index + 1, fence[3..].trim().to_owned(), String::new()));
            }
            Some(_) if fence.starts_with("```") => {
                let (line, info, text) = open.take().expect("open");
                blocks.push(Block {
                    at: format!("{name}:{line}"),
                    info,
                    text,
                });
            }
            Some((_, _, body)) => {
                body.push_str(line);
                body.push('\n');
            }
            None => {}
        }
    }
    assert!(open.is_none(), "{name}: a fence is not closed");
    blocks
}

/// Every page a reader of the repository meets: CONTRIBUTING.md, every
/// page under docs/ and every README.md (the root's, the examples', the
/// guests' …), but not the handler project template (host/templates),
/// whose README is written into a new project, nor what tools put in
/// build and environment folders.
fn pages() -> Vec<PathBuf> {
    let root = repo_root();
    let mut pages = vec![root.join("CONTRIBUTING.md")];
    let mut stack = vec![root.clone()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).expect("read a folder") {
            let path = entry.expect("entry").path();
            let name = path.file_name().unwrap_or_default().to_string_lossy();
            if path.is_dir() {
                let skipped = name.starts_with('.')
                    || ["target", "node_modules", "templates"].contains(&name.as_ref());
                if !skipped {
                    stack.push(path);
                }
            } else if name == "README.md"
                || (path.starts_with(root.join("docs")) && name.ends_with(".md"))
            {
                pages.push(path);
            }
        }
    }
    pages.sort();
    pages
}

#[test]
fn every_fence_names_its_language() {
    let bare: Vec<String> = pages()
        .iter()
        .flat_map(|page| blocks(page))
        .filter(|b| b.info.is_empty())
        .map(|b| b.at)
        .collect();
    assert!(
        bare.is_empty(),
        "fences without a language (use sh, sh check, text, toml, …; \
         docs/testing.md#documentation-blocks):\n{}",
        bare.join("\n")
    );
}

#[test]
fn the_pasteable_blocks_run() {
    let mut ran = 0;
    for page in pages() {
        let runnable: Vec<Block> = blocks(&page)
            .into_iter()
            .filter(|b| b.info == "sh" || b.info == "bash")
            .collect();
        if runnable.is_empty() {
            continue;
        }
        let dir = tempfile::tempdir().expect("temp dir");
        let work = dir.path().join("work");
        std::fs::create_dir(&work).expect("work dir");
        let server_dir = dir.path().join("server");
        std::fs::create_dir(&server_dir).expect("server dir");
        let server = Server::start(&server_dir, &ServerOptions::default());
        let address = server.base().trim_start_matches("http://").to_owned();
        for block in &runnable {
            let script = block
                .text
                .replace("localhost:7070", &address)
                .replace("127.0.0.1:7070", &address);
            let out = Command::new("bash")
                .args(["-euo", "pipefail", "-c", &script])
                .current_dir(&work)
                .env("PATH", path_with_rheo())
                .env("RHEO_SERVER", server.base())
                .env("HOME", dir.path())
                .env("RHEO_CONFIG_DIR", dir.path().join("config"))
                .env("RHEO_CACHE_DIR", dir.path().join("cache"))
                .env("REPO", repo_root())
                .env_remove("RHEO_AUTH_TOKEN")
                .env_remove("RHEO_CONTEXT")
                .env_remove("RUST_LOG")
                .output()
                .expect("run bash");
            assert!(
                out.status.success(),
                "{} failed ({}):\n{script}\nstdout:\n{}\nstderr:\n{}\nserver log:\n{}",
                block.at,
                out.status,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr),
                server.log_text()
            );
            ran += 1;
        }
    }
    println!("ran {ran} blocks");
    assert!(ran > 0, "no sh block found: the README's quickstart is one");
}

#[test]
fn the_blocks_no_test_can_run_name_real_commands() {
    let packages = workspace_packages();
    let mut checked = 0;
    let mut wrong = Vec::new();
    for page in pages() {
        for block in blocks(&page).into_iter().filter(|b| b.info == "sh check") {
            for command in commands(&block.text) {
                if let Err(why) = check(&command, &packages) {
                    wrong.push(format!("{}: {}\n  {why}", block.at, command.join(" ")));
                }
                checked += 1;
            }
        }
    }
    println!("checked {checked} commands");
    assert!(
        wrong.is_empty(),
        "commands in `sh check` blocks that would fail:\n{}",
        wrong.join("\n")
    );
    assert!(checked > 0);
}

/// Whether `words` (one command, variables already stood in for) would
/// be taken: `rheo …` by the real parser, `cargo … -p NAME` by the
/// workspace, a repository script by its existence.
fn check(words: &[String], packages: &BTreeSet<String>) -> Result<(), String> {
    let program = words[0].as_str();
    if program == "rheo" || program.ends_with("/rheo") {
        return parses(&words[1..]);
    }
    if program == "cargo" {
        let mut iter = words.iter().skip(1);
        while let Some(word) = iter.next() {
            let named = match word.as_str() {
                "-p" | "--package" => iter.next().cloned(),
                w => w.strip_prefix("--package=").map(str::to_owned),
            };
            if let Some(name) = named
                && !packages.contains(&name)
            {
                return Err(format!(
                    "no package {name} in the workspace (there are: {})",
                    packages.iter().cloned().collect::<Vec<_>>().join(", ")
                ));
            }
        }
        // `cargo run … -- ARGS` runs the rheo binary (the default member).
        if words.get(1).is_some_and(|w| w == "run")
            && !words.iter().any(|w| w == "-p" || w == "--package")
            && let Some(split) = words.iter().position(|w| w == "--")
        {
            return parses(&words[split + 1..]);
        }
        return Ok(());
    }
    let local = ["scripts/", "tests/", "guests/", "examples/", ".ci/", "./"];
    if local.iter().any(|p| program.starts_with(p)) && !program.contains("/target/") {
        let path = repo_root().join(program.trim_start_matches("./"));
        if !path.exists() {
            return Err(format!("{program} is not in the repository"));
        }
    }
    Ok(())
}

/// Whether the rheo binary's parser takes `args`: they are parsed up to
/// an added `--help`, which then prints the help instead of running (an
/// unknown command or flag, or a value its parser refuses, fails first).
fn parses(args: &[String]) -> Result<(), String> {
    if args.iter().any(|a| a == "--help" || a == "-h") {
        return Ok(());
    }
    let mut args: Vec<&str> = args.iter().map(String::as_str).collect();
    // Past `--` the words are no flags, and `--help` would be one of them.
    let at = args.iter().position(|a| *a == "--").unwrap_or(args.len());
    args.insert(at, "--help");
    let out = Command::new(rheo_binary())
        .args(&args)
        .env_remove("RHEO_SERVER")
        .output()
        .expect("run rheo");
    if out.status.success() {
        Ok(())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).trim().to_owned())
    }
}

/// The packages of the workspace, by name.
fn workspace_packages() -> BTreeSet<String> {
    let root = repo_root();
    let manifest = std::fs::read_to_string(root.join("Cargo.toml")).expect("Cargo.toml");
    let members = manifest
        .split("members = [")
        .nth(1)
        .and_then(|rest| rest.split(']').next())
        .expect("workspace members");
    members
        .split(',')
        .map(|m| m.trim().trim_matches('"'))
        .filter(|m| !m.is_empty())
        .map(|member| {
            let text = std::fs::read_to_string(root.join(member).join("Cargo.toml"))
                .expect("member manifest");
            text.lines()
                .find_map(|l| l.strip_prefix("name = "))
                .expect("package name")
                .trim_matches('"')
                .to_owned()
        })
        .collect()
}

/// The simple commands of a shell block, as words: continuation lines
/// joined, comments dropped, split at `&&`, `||`, `|`, `;`, `&` and
/// parentheses (a `$(…)` or `<(…)` inside is a command of its own),
/// leading `VAR=value` assignments and `sudo` left out, quotes removed,
/// and each `$VAR` stood in for by `x` (a command line is checked, not
/// what the variable would hold).
fn commands(text: &str) -> Vec<Vec<String>> {
    let joined = text.replace("\\\n", " ");
    let mut commands = Vec::new();
    for line in joined.lines() {
        let mut words: Vec<String> = Vec::new();
        let mut word = String::new();
        let mut in_word = false;
        let mut chars = line.chars().peekable();
        while let Some(c) = chars.next() {
            match c {
                '#' if !in_word => break,
                '\'' => {
                    in_word = true;
                    for c in chars.by_ref() {
                        if c == '\'' {
                            break;
                        }
                        word.push(c);
                    }
                }
                '"' => {
                    in_word = true;
                    while let Some(c) = chars.next() {
                        match c {
                            '"' => break,
                            '\\' => word.extend(chars.next()),
                            '$' => {
                                variable(&mut chars);
                                word.push('x');
                            }
                            c => word.push(c),
                        }
                    }
                }
                '$' if chars.peek() == Some(&'(') => {
                    chars.next();
                    finish(&mut words, &mut word, &mut in_word);
                    end(&mut words, &mut commands);
                }
                '$' => {
                    variable(&mut chars);
                    word.push('x');
                    in_word = true;
                }
                '<' | '>' if chars.peek() == Some(&'(') => {
                    chars.next();
                    finish(&mut words, &mut word, &mut in_word);
                    end(&mut words, &mut commands);
                }
                '>' | '<' => {
                    // A redirection (`> out`, `2>&1`): neither its file
                    // descriptor nor its target is a word of the command.
                    if in_word && word.chars().all(|c| c.is_ascii_digit()) {
                        word.clear();
                        in_word = false;
                    }
                    finish(&mut words, &mut word, &mut in_word);
                    while chars.peek().is_some_and(|c| *c == '>' || *c == '&') {
                        chars.next();
                    }
                    while chars.peek() == Some(&' ') {
                        chars.next();
                    }
                    while chars.peek().is_some_and(|c| !c.is_whitespace()) {
                        chars.next();
                    }
                }
                '|' | '&' | ';' | '(' | ')' => {
                    finish(&mut words, &mut word, &mut in_word);
                    end(&mut words, &mut commands);
                }
                c if c.is_whitespace() => finish(&mut words, &mut word, &mut in_word),
                c => {
                    word.push(c);
                    in_word = true;
                }
            }
        }
        finish(&mut words, &mut word, &mut in_word);
        end(&mut words, &mut commands);
    }
    commands
}

/// Ends the word being read, if any.
fn finish(words: &mut Vec<String>, word: &mut String, in_word: &mut bool) {
    if *in_word {
        words.push(std::mem::take(word));
        *in_word = false;
    }
}

/// Ends the command being read: its words from the first that is not an
/// assignment or a prefix (`sudo`, `time`, `exec`).
fn end(words: &mut Vec<String>, commands: &mut Vec<Vec<String>>) {
    let first = words
        .iter()
        .position(|w| !(is_assignment(w) || w == "sudo" || w == "time" || w == "exec"));
    if let Some(first) = first {
        commands.push(words[first..].to_vec());
    }
    words.clear();
}

/// Skips the rest of a variable's name after `$` (`NAME`, `{NAME}`, `?`).
fn variable(chars: &mut std::iter::Peekable<std::str::Chars<'_>>) {
    if chars.peek() == Some(&'{') {
        for c in chars.by_ref() {
            if c == '}' {
                break;
            }
        }
        return;
    }
    if chars
        .peek()
        .is_some_and(|c| "?$!#@*0123456789".contains(*c))
    {
        chars.next();
        return;
    }
    while chars
        .peek()
        .is_some_and(|c| c.is_ascii_alphanumeric() || *c == '_')
    {
        chars.next();
    }
}

/// `NAME=value`, a variable set for the command that follows.
fn is_assignment(word: &str) -> bool {
    word.split_once('=').is_some_and(|(name, _)| {
        !name.is_empty()
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
            && !name.starts_with(|c: char| c.is_ascii_digit())
    })
}

#[test]
fn commands_are_split_as_the_shell_would() {
    let words =
        |text: &str| -> Vec<String> { commands(text).into_iter().map(|c| c.join(" ")).collect() };
    assert_eq!(
        words("RHEO_X=1 rheo stream list -o json | jq . # a comment\n"),
        ["rheo stream list -o json", "jq ."]
    );
    assert_eq!(
        words("source <(rheo completions bash)\n"),
        ["source", "rheo completions bash"]
    );
    assert_eq!(
        words(
            "cargo build --release \\\n  -p rheo-cli && cp target/release/rheo /usr/local/bin/\n"
        ),
        [
            "cargo build --release -p rheo-cli",
            "cp target/release/rheo /usr/local/bin/"
        ]
    );
    assert_eq!(
        words("rheo event append orders --payload '{\"a\": 1}' > out.txt 2>&1\n"),
        ["rheo event append orders --payload {\"a\": 1}"]
    );
    assert_eq!(
        words("rheo context add x --server \"$RHEO_SERVER\" --auth-token ${T}\n"),
        ["rheo context add x --server x --auth-token x"]
    );
}

#[test]
fn the_checks_refuse_what_would_fail() {
    let packages = workspace_packages();
    let command = |text: &str| commands(text).remove(0);
    assert!(check(&command("rheo group lag orders billing -o json"), &packages).is_ok());
    assert!(check(&command("rheo lag orders billing"), &packages).is_ok());
    let unknown = check(&command("rheo group lagg orders billing"), &packages).unwrap_err();
    assert!(unknown.contains("'lagg'"), "{unknown}");
    assert!(check(&command("rheo stream list --frobnicate"), &packages).is_err());
    assert!(check(&command("rheo serve --store-timeout 2parsecs"), &packages).is_err());
    assert!(check(&command("cargo test -p rheo-sql sqlite::"), &packages).is_ok());
    assert!(check(&command("cargo build -p rheo-nope"), &packages).is_err());
    assert!(check(&command("cargo run --release -- demo"), &packages).is_ok());
    assert!(check(&command("cargo run --release -- dmeo"), &packages).is_err());
    assert!(check(&command("scripts/test"), &packages).is_ok());
    assert!(check(&command("scripts/no-such-script"), &packages).is_err());
}

/// The unit of docs/production.md, with its `rheo` path pointed at the
/// binary under test, passes `systemd-analyze verify`.
#[test]
fn the_systemd_unit_verifies() {
    let Some(verify) = which("systemd-analyze") else {
        println!("skipped: systemd-analyze is not installed");
        return;
    };
    let unit = std::fs::read_to_string(repo_root().join("dist/systemd/rheo.service"))
        .expect("dist/systemd/rheo.service");
    assert!(
        unit.contains("ExecStart=/usr/local/bin/rheo serve"),
        "the unit runs /usr/local/bin/rheo serve, as docs/production.md installs it:\n{unit}"
    );
    let dir = tempfile::tempdir().expect("temp dir");
    let copy = dir.path().join("rheo.service");
    let binary = rheo_binary().display().to_string();
    std::fs::write(&copy, unit.replace("/usr/local/bin/rheo", &binary)).expect("write unit");
    let out = Command::new(verify)
        .arg("verify")
        .arg(&copy)
        .output()
        .expect("run systemd-analyze");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && !stderr.contains("rheo.service:"),
        "systemd-analyze verify ({}):\n{stderr}",
        out.status
    );
}

fn which(program: &str) -> Option<PathBuf> {
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|dir| dir.join(program))
        .find(|path| path.is_file())
}

/// `PATH` with the folder of the rheo binary under test first.
fn path_with_rheo() -> std::ffi::OsString {
    let dir = rheo_binary().parent().expect("the binary's folder");
    let mut paths = vec![dir.to_path_buf()];
    if let Some(path) = std::env::var_os("PATH") {
        paths.extend(std::env::split_paths(&path));
    }
    std::env::join_paths(paths).expect("PATH")
}

/// Every error code the server answers with (`Error::code` of the core,
/// `ApiError::code` of the HTTP API) has its entry in
/// docs/troubleshooting.md (cause and fix) and in docs/errors.md.
#[test]
fn every_error_code_is_explained() {
    let root = repo_root();
    let mut codes = BTreeSet::new();
    for source in ["core/src/backend/error.rs", "host/src/api/error.rs"] {
        let text = std::fs::read_to_string(root.join(source)).expect("error source");
        // The arms of `fn code`: `Variant… => "the_code",`.
        let body = text
            .split("pub fn code(&self) -> &'static str {")
            .nth(1)
            .and_then(|rest| rest.split("\n    }\n").next())
            .unwrap_or_else(|| panic!("{source} has fn code"));
        for arm in body.split("=> \"").skip(1) {
            let code: String = arm.chars().take_while(|c| *c != '"').collect();
            codes.insert(code);
        }
    }
    assert!(codes.len() > 20, "{codes:?}");
    let troubleshooting =
        std::fs::read_to_string(root.join("docs/troubleshooting.md")).expect("troubleshooting.md");
    let errors = std::fs::read_to_string(root.join("docs/errors.md")).expect("errors.md");
    let missing: Vec<String> = codes
        .iter()
        .filter(|code| {
            !troubleshooting.contains(&format!("#### `{code}`"))
                || !errors.contains(&format!("`{code}`"))
        })
        .cloned()
        .collect();
    assert!(
        missing.is_empty(),
        "codes without their entry in docs/troubleshooting.md (a `#### `code`` heading) \
         or docs/errors.md: {missing:?}"
    );
}

/// The README is for users: short, with the two commands first
/// (contributor material lives in CONTRIBUTING.md).
#[test]
fn the_readme_is_short_and_starts_with_the_two_commands() {
    let readme = std::fs::read_to_string(repo_root().join("README.md")).expect("README.md");
    let lines = readme.lines().count();
    assert!(lines <= 150, "README.md has {lines} lines; at most 150");
    let first = blocks(&repo_root().join("README.md"))
        .into_iter()
        .next()
        .expect("a block");
    let commands: Vec<String> = commands(&first.text).iter().map(|c| c.join(" ")).collect();
    assert_eq!(
        commands,
        ["cargo run --release -- demo", "scripts/test"],
        "the README's first block is the two commands ({})",
        first.at
    );
}
