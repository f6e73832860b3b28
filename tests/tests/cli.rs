//! The `rheo` binary, driven from outside as a user would.

use rheo_e2e::{run_rheo, service_url};

#[test]
fn version_prints_the_crate_version() {
    let (ok, stdout, _) = run_rheo(&["--version"]);
    assert!(ok);
    assert_eq!(stdout.trim(), format!("rheo {}", env!("CARGO_PKG_VERSION")));
}

#[test]
fn migrate_creates_a_sqlite_schema_once() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("rheo.db").display());
    let (ok, first, err) = run_rheo(&["migrate", "--backend", &url]);
    assert!(ok, "{err}");
    assert!(first.contains("applied 4 migration(s)"), "{first}");
    assert!(first.contains("0001 streams and events"), "{first}");
    assert!(first.contains("0003 scan floors"), "{first}");
    assert!(first.contains("0005 ordering"), "{first}");
    let (ok, second, err) = run_rheo(&["migrate", "--backend", &url]);
    assert!(ok, "{err}");
    assert!(second.contains("up to date"), "{second}");
}

#[test]
fn migrate_creates_a_postgres_schema_and_a_second_run_changes_nothing() {
    let Some(base) = service_url("TEST_POSTGRES_URL", "postgres") else {
        return;
    };
    let schema = format!("rheo_e2e_{:08x}", std::process::id() ^ 0x5eed);
    let sep = if base.contains('?') { '&' } else { '?' };
    let url = format!("{base}{sep}schema={schema}");
    let (ok, first, err) = run_rheo(&["migrate", "--backend", &url]);
    assert!(ok, "{err}");
    assert!(
        first.starts_with("postgres: applied 5 migration(s)"),
        "{first}"
    );
    assert!(first.contains("0004 cluster"), "{first}");
    assert!(first.contains("0005 ordering"), "{first}");
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
    let drop = std::process::Command::new("psql")
        .args([
            base.as_str(),
            "-qc",
            &format!("DROP SCHEMA \"{schema}\" CASCADE"),
        ])
        .status();
    let _ = drop;
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
