//! The `rheo` binary, driven from outside as a user would.

use rheo_e2e::run_rheo;

#[test]
fn version_prints_the_crate_version_and_the_commit() {
    let (ok, stdout, _) = run_rheo(&["--version"]);
    assert!(ok);
    // The commit the binary was built from: this checkout's (the build
    // script re-runs when HEAD moves), `unknown` outside a git checkout.
    let commit = std::process::Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .current_dir(rheo_e2e::repo_root())
        .output()
        .ok()
        .filter(|out| out.status.success())
        .map_or("unknown".to_owned(), |out| {
            String::from_utf8_lossy(&out.stdout).trim().to_owned()
        });
    assert_eq!(
        stdout.trim(),
        format!("rheo {} ({commit})", env!("CARGO_PKG_VERSION"))
    );
}

/// `rheo completions bash` is a script bash sources, and its completion
/// function completes commands and their flags as `--help` lists them.
#[test]
fn bash_completes_rheo_commands_and_flags_from_the_generated_script() {
    let (ok, script, stderr) = run_rheo(&["completions", "bash"]);
    assert!(ok, "{stderr}");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rheo.bash");
    std::fs::write(&path, script).unwrap();
    // What bash's completion asks for: the words typed so far, which one
    // is being completed; the function gets the command, that word and
    // the one before.
    let complete = |words: &str, cword: usize| {
        let program = format!(
            "source {} && complete -p rheo >/dev/null && COMP_WORDS=({words}) && COMP_CWORD={cword} \
             && COMP_LINE='{words}' && COMP_POINT=${{#COMP_LINE}} \\
             && _rheo rheo \"${{COMP_WORDS[COMP_CWORD]}}\" \"${{COMP_WORDS[COMP_CWORD-1]}}\" && printf '%s\n' \"${{COMPREPLY[@]}}\"",
            path.display()
        );
        let out = std::process::Command::new("bash")
            .args(["--norc", "-c", &program])
            .output()
            .expect("run bash");
        assert!(
            out.status.success(),
            "bash: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    // The earlier spelling `streams` is hidden, so only `stream` completes.
    let commands = complete("rheo str", 1);
    assert_eq!(commands.trim(), "stream", "{commands}");
    let verbs = complete("rheo group le", 2);
    assert_eq!(verbs.trim(), "leases", "{verbs}");
    let flags = complete("rheo serve --back", 2);
    assert_eq!(flags.trim(), "--backend", "{flags}");
    let shells = complete("rheo completions ''", 2);
    for shell in ["bash", "zsh", "fish"] {
        assert!(shells.lines().any(|l| l == shell), "{shell} in {shells}");
    }
}

/// `rheo man` prints rheo(1) in roff; `--dir` writes a page per command.
#[test]
fn man_prints_the_manual_page_and_writes_one_per_command() {
    let (ok, page, stderr) = run_rheo(&["man"]);
    assert!(ok, "{stderr}");
    assert!(page.contains(".TH rheo 1"), "{page}");
    assert!(page.contains("serve"), "the commands are listed: {page}");
    let dir = tempfile::tempdir().unwrap();
    let folder = dir.path().join("man1");
    let (ok, stdout, stderr) = run_rheo(&["man", "--dir", folder.to_str().unwrap()]);
    assert!(ok, "{stderr}");
    let mut pages: Vec<String> = std::fs::read_dir(&folder)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    pages.sort();
    assert!(
        stdout.contains(&format!("wrote {} manual pages", pages.len())),
        "{stdout}"
    );
    for page in [
        "rheo.1",
        "rheo-serve.1",
        "rheo-stream-create.1",
        "rheo-group-lag.1",
        "rheo-man.1",
    ] {
        assert!(pages.iter().any(|p| p == page), "{page} in {pages:?}");
    }
    // The hidden spellings of earlier releases get no page.
    for hidden in ["rheo-lag.1", "rheo-streams.1", "rheo-append.1"] {
        assert!(!pages.iter().any(|p| p == hidden), "{hidden} in {pages:?}");
    }
    let serve = std::fs::read_to_string(folder.join("rheo-serve.1")).unwrap();
    assert!(
        serve.contains("backend"),
        "rheo-serve.1 has serve's flags: {serve}"
    );
}

#[test]
fn migrate_creates_a_sqlite_schema_once() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("rheo.db").display());
    let (ok, first, err) = run_rheo(&["migrate", "--backend", &url]);
    assert!(ok, "{err}");
    assert!(first.contains("applied 10 migration(s)"), "{first}");
    assert!(first.contains("0001 streams and events"), "{first}");
    assert!(first.contains("0003 scan floors"), "{first}");
    assert!(first.contains("0005 ordering"), "{first}");
    assert!(first.contains("0007 retention"), "{first}");
    assert!(first.contains("0011 settles by position"), "{first}");
    let (ok, second, err) = run_rheo(&["migrate", "--backend", &url]);
    assert!(ok, "{err}");
    assert!(second.contains("up to date"), "{second}");
}

/// `rheo migrate --status` lists what is applied and pending; a store a
/// newer rheo migrated is listed as such, and `rheo serve` and `rheo
/// migrate` refuse it, naming its schema and the newest this build knows.
#[test]
fn migrate_status_lists_migrations_and_a_store_from_a_newer_rheo_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("rheo.db");
    let url = format!("sqlite://{}", db.display());
    let status = || {
        let (ok, out, err) = run_rheo(&["migrate", "--status", "--backend", &url]);
        assert!(ok, "{err}");
        out
    };
    let fresh = status();
    assert!(
        fresh.starts_with("sqlite: 0 applied, 10 pending\n"),
        "{fresh}"
    );
    assert!(
        fresh.contains("  pending  0001 streams and events\n"),
        "{fresh}"
    );
    let (ok, _, err) = run_rheo(&["migrate", "--backend", &url]);
    assert!(ok, "{err}");
    let migrated = status();
    assert!(
        migrated.starts_with("sqlite: 10 applied, 0 pending\n"),
        "{migrated}"
    );
    assert!(
        migrated.contains("  applied  0007 retention\n")
            && migrated.contains("  applied  0011 settles by position\n"),
        "{migrated}"
    );

    // What a newer rheo's migration leaves in the store.
    let recorded = std::process::Command::new("python3")
        .args([
            "-c",
            "import sqlite3, sys; c = sqlite3.connect(sys.argv[1]); \
             c.execute(\"INSERT INTO _sqlx_migrations (version, description, success, checksum, execution_time) \
             VALUES (9999, 'from the future', 1, x'00', 0)\"); c.commit()",
        ])
        .arg(&db)
        .status()
        .expect("run python3");
    assert!(recorded.success());
    let newer = status();
    assert!(
        newer.starts_with("sqlite: 10 applied, 0 pending, 1 unknown to this rheo"),
        "{newer}"
    );
    assert!(newer.contains("  unknown  9999\n"), "{newer}");
    for args in [
        vec![
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--backend",
            url.as_str(),
        ],
        vec!["migrate", "--backend", url.as_str()],
    ] {
        let (ok, _, err) = run_rheo(&args);
        assert!(!ok, "{args:?} ran on a newer store");
        assert!(
            err.contains("the store's schema is at migration 9999, newer than this rheo"),
            "{err}"
        );
        assert!(err.contains("its newest is 0014 key rate"), "{err}");
    }
}

#[test]
fn migrate_creates_a_postgres_schema_and_a_second_run_changes_nothing() {
    let Some(schema) = rheo_e2e::PgSchema::fresh() else {
        return;
    };
    let url = schema.url().to_owned();
    let (ok, first, err) = run_rheo(&["migrate", "--backend", &url]);
    assert!(ok, "{err}");
    assert!(
        first.starts_with("postgres: applied 13 migration(s)"),
        "{first}"
    );
    assert!(first.contains("0004 cluster"), "{first}");
    assert!(first.contains("0008 ack by event"), "{first}");
    assert!(first.contains("0009 first acks leave no row"), "{first}");
    assert!(first.contains("0010 acks by position"), "{first}");
    let (ok, second, err) = run_rheo(&["migrate", "--backend", &url]);
    assert!(ok, "{err}");
    assert_eq!(
        second.trim(),
        "postgres: schema is up to date, nothing to apply"
    );
    assert!(
        !err.contains("already exists"),
        "no driver notices leak: {err}"
    );
}

#[test]
fn an_unreachable_database_is_a_clear_error() {
    let (ok, _, err) = run_rheo(&[
        "migrate",
        "--backend",
        "postgres://rheo:secret@127.0.0.1:1/x",
    ]);
    assert!(!ok);
    assert!(err.contains("backend unavailable"), "{err}");
    assert!(err.contains("rheo:***@"), "password masked: {err}");
    assert!(!err.contains("secret"), "{err}");
}

#[test]
fn an_unknown_backend_scheme_names_the_known_ones() {
    let (ok, _, err) = run_rheo(&["migrate", "--backend", "mysql://x"]);
    assert!(!ok);
    assert!(
        err.contains("known: memory://, sqlite://, postgres://, redis://, mongodb://"),
        "{err}"
    );
}
