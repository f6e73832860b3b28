//! Trust at the edges (docs/http.md#https, docs/http.md#authentication,
//! docs/backends.md#tls-to-postgresql, docs/backends.md#secrets-in-backend-urls):
//! an HTTPS server the CLI talks to with `--ca-cert`, a read-only token,
//! PostgreSQL with `sslmode=verify-full` against a certificate authority the
//! test makes, and no backend password in any log line or CLI output.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair};
use rheo_e2e::{Run, Server, ServerOptions, run_rheo_with, service_url};
use serde_json::Value;

/// The password every URL in these tests carries, in one form or another.
const SECRET: &str = "Sup3r-s3cret";

/// A certificate authority and a server certificate it signed for
/// `localhost` and 127.0.0.1, written as PEM files into `dir`.
struct Pki {
    ca: PathBuf,
    cert: PathBuf,
    key: PathBuf,
    cert_pem: String,
    key_pem: String,
}

impl Pki {
    fn new(dir: &Path) -> Pki {
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params
            .distinguished_name
            .push(DnType::CommonName, "Rheo test CA");
        let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate().expect("CA key"))
            .expect("self-signed CA");
        let key = KeyPair::generate().expect("server key");
        let mut params = CertificateParams::new(vec!["localhost".into(), "127.0.0.1".into()])
            .expect("server params");
        params
            .distinguished_name
            .push(DnType::CommonName, "localhost");
        let cert = params.signed_by(&key, &ca).expect("server certificate");
        let pki = Pki {
            ca: dir.join("ca.pem"),
            cert: dir.join("server.pem"),
            key: dir.join("server.key"),
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        };
        std::fs::write(&pki.ca, ca.pem()).expect("write ca.pem");
        std::fs::write(&pki.cert, &pki.cert_pem).expect("write server.pem");
        std::fs::write(&pki.key, &pki.key_pem).expect("write server.key");
        pki
    }
}

fn rheo(args: &[&str]) -> Run {
    run_rheo_with(args, &[], None)
}

/// Runs `rheo` like [`rheo`], but kills it after 30 s: a command that was
/// expected to fail at start must not hang the test if it starts after all.
fn rheo_bounded(args: &[&str]) -> Run {
    use std::process::Stdio;
    let mut child = Command::new(rheo_e2e::rheo_binary())
        .args(args)
        .env_remove("RUST_LOG")
        .env_remove("RHEO_BACKEND")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run rheo");
    let deadline = Instant::now() + Duration::from_secs(30);
    while child.try_wait().expect("wait for rheo").is_none() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let out = child.wait_with_output().expect("rheo's output");
    Run {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

fn json(run: &Run) -> Value {
    assert_eq!(run.code, Some(0), "rheo failed: {}", run.stderr);
    serde_json::from_str(&run.stdout).unwrap_or_else(|e| panic!("{e}: {}", run.stdout))
}

fn assert_no_secret(what: &str, text: &str) {
    assert!(
        !text.contains(SECRET),
        "{what} shows the backend password:\n{text}"
    );
}

#[test]
fn the_cli_talks_to_an_https_server_with_its_ca_and_a_read_token_only_reads() {
    let dir = tempfile::tempdir().expect("temp dir");
    let pki = Pki::new(dir.path());
    let (cert, key, ca) = (
        pki.cert.to_str().expect("utf-8 path"),
        pki.key.to_str().expect("utf-8 path"),
        pki.ca.to_str().expect("utf-8 path"),
    );
    let server = Server::start(
        dir.path(),
        &ServerOptions {
            backend: Some("memory://".into()),
            auth_token: Some("all-token".into()),
            args: [
                "--tls-cert",
                cert,
                "--tls-key",
                key,
                "--read-token",
                "read-token",
            ]
            .map(String::from)
            .to_vec(),
            ..ServerOptions::default()
        },
    );
    let base = server.base().to_owned();
    assert!(base.starts_with("https://127.0.0.1:"), "{base}");
    let cli = |token: &str, args: &[&str]| {
        let mut all = args.to_vec();
        all.extend(["--server", &base, "--ca-cert", ca, "--token", token]);
        rheo(&all)
    };

    let created = cli(
        "all-token",
        &["streams", "create", "orders", "--partitions", "2"],
    );
    assert_eq!(created.code, Some(0), "{}", created.stderr);
    let appended = cli(
        "all-token",
        &["append", "orders", "--payload", r#"{"n": 1}"#],
    );
    assert_eq!(appended.code, Some(0), "{}", appended.stderr);

    // The read token lists and reads, history queries included…
    let listed = json(&cli("read-token", &["streams", "--json"]));
    assert_eq!(listed["streams"][0]["name"], "orders", "{listed}");
    let found = json(&cli("read-token", &["event", "query", "orders", "--json"]));
    assert_eq!(
        found["events"][0]["payload"],
        serde_json::json!({"n": 1}),
        "{found}"
    );
    // …and changes nothing.
    let refused = cli("read-token", &["streams", "create", "other"]);
    assert_ne!(refused.code, Some(0));
    assert!(refused.stderr.contains("forbidden"), "{}", refused.stderr);
    let refused = cli("read-token", &["append", "orders", "--payload", "{}"]);
    assert!(refused.stderr.contains("forbidden"), "{}", refused.stderr);
    let listed = json(&cli("read-token", &["streams", "--json"]));
    assert_eq!(
        listed["streams"].as_array().map(Vec::len),
        Some(1),
        "{listed}"
    );

    // Without the CA the certificate does not check out: an error that
    // names the fix, never a silent downgrade.
    let untrusted = rheo(&["streams", "--server", &base, "--token", "read-token"]);
    assert_ne!(untrusted.code, Some(0));
    assert!(
        untrusted.stderr.contains("--ca-cert"),
        "{}",
        untrusted.stderr
    );
    // Plain HTTP to the HTTPS port gets no answer from the API.
    let plain = base.replace("https://", "http://");
    let downgraded = rheo(&["streams", "--server", &plain, "--token", "read-token"]);
    assert_ne!(downgraded.code, Some(0), "{}", downgraded.stdout);
    // The certificate names localhost too.
    let by_name = base.replace("127.0.0.1", "localhost");
    let named = rheo(&[
        "streams",
        "--server",
        &by_name,
        "--ca-cert",
        ca,
        "--token",
        "read-token",
    ]);
    assert_eq!(
        named.code,
        Some(0),
        "localhost is in the certificate: {}",
        named.stderr
    );
}

#[test]
fn a_server_refuses_tls_files_that_do_not_fit() {
    let dir = tempfile::tempdir().expect("temp dir");
    let pki = Pki::new(dir.path());
    let other = tempfile::tempdir().expect("temp dir");
    let stranger = Pki::new(other.path());
    let cases = [
        (
            pki.cert.clone(),
            stranger.key.clone(),
            "do not make a usable certificate",
        ),
        (pki.key.clone(), pki.key.clone(), "no PEM certificate"),
        (pki.cert.clone(), pki.cert.clone(), "--tls-key"),
        (
            dir.path().join("missing.pem"),
            pki.key.clone(),
            "missing.pem",
        ),
    ];
    for (cert, key, expected) in cases {
        let run = rheo(&[
            "serve",
            "--backend",
            "memory://",
            "--listen",
            "127.0.0.1:0",
            "--tls-cert",
            cert.to_str().expect("utf-8"),
            "--tls-key",
            key.to_str().expect("utf-8"),
        ]);
        assert_ne!(run.code, Some(0), "served with {cert:?} and {key:?}");
        assert!(run.stderr.contains(expected), "{expected}: {}", run.stderr);
    }
    let half = rheo(&["serve", "--backend", "memory://", "--tls-cert", "x.pem"]);
    assert!(half.stderr.contains("tls_key"), "{}", half.stderr);
}

/// `psql` against `url`, each statement on its own (ALTER SYSTEM refuses
/// a transaction block); the output of the last.
fn psql(url: &str, statements: &[&str]) -> Result<String, String> {
    let mut command = Command::new("psql");
    command.args([url, "-v", "ON_ERROR_STOP=1", "-Atq"]);
    for statement in statements {
        command.args(["-c", statement]);
    }
    let out = command.output().map_err(|e| format!("run psql: {e}"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

/// `url` with its host replaced by `host` and `params` appended.
fn with_host(url: &str, userinfo: &str, host: &str, params: &str) -> String {
    let (scheme, rest) = url.split_once("://").expect("a URL");
    let rest = rest.rsplit_once('@').map_or(rest, |(_, r)| r);
    let path = rest.find('/').map_or("/", |i| &rest[i..]);
    let path = path.split_once('?').map_or(path, |(p, _)| p);
    let port = rest
        .split('/')
        .next()
        .and_then(|h| h.rsplit_once(':'))
        .map_or("5432", |(_, p)| p);
    format!("{scheme}://{userinfo}@{host}:{port}{path}?{params}")
}

/// Turns TLS on in the local PostgreSQL with `pki`'s server certificate:
/// the files are written by the server itself (`COPY … TO PROGRAM`, so they
/// belong to its user), then a reload; waits until a TLS connection works.
fn postgres_tls_with(url: &str, pki: &Pki) {
    let data = psql(url, &["SHOW data_directory"]).expect("read data_directory");
    let write = |pem: &str, name: &str| {
        let lines = pem.trim_end().replace('\'', "");
        // Through a program, so the key is written private (0600), as
        // PostgreSQL insists.
        psql(
            url,
            &[&format!(
                "COPY (SELECT unnest(string_to_array('{lines}', E'\\n'))) \
                 TO PROGRAM 'cat > {data}/{name} && chmod 600 {data}/{name}'"
            )],
        )
        .unwrap_or_else(|e| panic!("write {name} into {data}: {e}"));
    };
    write(&pki.cert_pem, "rheo-test-server.crt");
    write(&pki.key_pem, "rheo-test-server.key");
    psql(
        url,
        &[
            "ALTER SYSTEM SET ssl_cert_file = 'rheo-test-server.crt'",
            "ALTER SYSTEM SET ssl_key_file = 'rheo-test-server.key'",
            "ALTER SYSTEM SET ssl = on",
            "SELECT pg_reload_conf()",
        ],
    )
    .expect("turn TLS on");
    // The reload is asynchronous: wait (bounded) until a connection that
    // verifies against our CA succeeds.
    let ca = pki.ca.to_str().expect("utf-8 path");
    let check = with_host(
        url,
        "postgres",
        "localhost",
        &format!("sslmode=verify-full&sslrootcert={ca}"),
    );
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        match psql(&check, &["SELECT 1"]) {
            Ok(_) => return,
            Err(e) if Instant::now() > deadline => {
                panic!("PostgreSQL never served our certificate: {e}")
            }
            Err(_) => std::thread::sleep(Duration::from_millis(100)),
        }
    }
}

#[test]
fn postgres_with_verify_full_and_no_password_shown_anywhere() {
    let Some(url) = service_url("TEST_POSTGRES_URL", "postgres") else {
        return;
    };
    let dir = tempfile::tempdir().expect("temp dir");
    let pki = Pki::new(dir.path());
    postgres_tls_with(&url, &pki);
    let ca = pki.ca.to_str().expect("utf-8 path");
    let Some(scratch) = rheo_e2e::PgSchema::fresh() else {
        return;
    };
    let schema = scratch.name();
    // Trust authentication ignores the password: it is here to be hidden.
    let backend = with_host(
        &url,
        &format!("postgres:{SECRET}"),
        "localhost",
        &format!(
            "sslmode=verify-full&sslrootcert={ca}&schema={schema}&password={SECRET}&application_name=rheo"
        ),
    );

    let mut server = Server::start(
        dir.path(),
        &ServerOptions {
            backend: Some(backend.clone()),
            ..ServerOptions::default()
        },
    );
    let base = server.base().to_owned();
    let cli = |args: &[&str]| {
        let mut all = args.to_vec();
        all.extend(["--server", &base]);
        rheo(&all)
    };
    assert_eq!(cli(&["streams", "create", "secure"]).code, Some(0));
    assert_eq!(
        cli(&["append", "secure", "--payload", r#"{"over": "tls"}"#]).code,
        Some(0)
    );
    let listed = json(&cli(&["streams", "--json"]));
    assert_eq!(listed["streams"][0]["name"], "secure", "{listed}");
    // Every connection the server holds is encrypted.
    let counts = psql(
        &url,
        &[
            "SELECT count(*) FILTER (WHERE s.ssl) || ' ' || count(*) FROM pg_stat_ssl s \
           JOIN pg_stat_activity a USING (pid) \
           WHERE a.application_name = 'rheo' AND a.client_addr IS NOT NULL",
        ],
    )
    .expect("count the server's connections");
    let (tls, all) = counts.split_once(' ').expect("two counts");
    assert!(all != "0" && tls == all, "TLS connections / all: {counts}");

    // Verification is real: without our CA the same URL is refused.
    let unverified = backend.replace(&format!("&sslrootcert={ca}"), "");
    let refused = rheo(&["migrate", "--backend", &unverified]);
    assert_ne!(
        refused.code,
        Some(0),
        "verify-full without the CA connected"
    );
    assert_no_secret("rheo migrate's error", &refused.stderr);
    assert_no_secret("rheo migrate's output", &refused.stdout);

    server.terminate();
    let log = server.log_text();
    assert!(
        log.contains("***"),
        "the backend URL is logged, masked:\n{log}"
    );
    assert_no_secret("the server's log", &log);
}

#[test]
fn no_backend_password_in_any_url_form_reaches_output() {
    let dir = tempfile::tempdir().expect("temp dir");
    // Nothing listens on port 1: every backend fails to connect, and says so.
    let urls = [
        format!("postgres://rheo:{SECRET}@127.0.0.1:1/x"),
        format!("postgres://rheo@127.0.0.1:1/x?password={SECRET}&sslmode=disable"),
        format!("postgresql://rheo:{SECRET}@127.0.0.1:1/x?sslpassword={SECRET}"),
        format!("postgres://rheo:{SECRET}@127.0.0.1:notaport/x"),
        format!("redis://:{SECRET}@127.0.0.1:1/0"),
        format!("redis://default:{SECRET}@127.0.0.1:1?prefix=bad prefix"),
        format!("mongodb://rheo:{SECRET}@127.0.0.1:1/db?serverSelectionTimeoutMS=300"),
        format!(
            "mongodb://rheo:{SECRET}@127.0.0.1:1,127.0.0.1:2/db?replicaSet=rs&serverSelectionTimeoutMS=300"
        ),
        format!(
            "sqlite://{}?password={SECRET}",
            dir.path().join("x.db").display()
        ),
        format!("nosuch://rheo:{SECRET}@host/x"),
        format!("rheo:{SECRET}@host"),
    ];
    for url in &urls {
        for args in [
            vec!["migrate", "--backend", url.as_str()],
            vec![
                "serve",
                "--listen",
                "127.0.0.1:0",
                "--backend",
                url.as_str(),
            ],
            vec!["bench", "--backend", url.as_str(), "--events", "1"],
        ] {
            let run = rheo_bounded(&args);
            let all = format!("{}\n{}", run.stdout, run.stderr);
            assert_no_secret(&format!("rheo {} with {url}", args[0]), &all);
            assert_ne!(run.code, Some(0), "{url}: {all}");
        }
    }
    // From the environment: --help lists the variable, never its value.
    let help = run_rheo_with(
        &["serve", "--help"],
        &[
            ("RHEO_BACKEND", &urls[0]),
            ("RHEO_AUTH_TOKEN", SECRET),
            ("RHEO_READ_TOKEN", SECRET),
        ],
        None,
    );
    assert_eq!(help.code, Some(0));
    assert!(help.stdout.contains("RHEO_BACKEND"), "{}", help.stdout);
    assert_no_secret("rheo serve --help", &help.stdout);
    let help = run_rheo_with(&["migrate", "--help"], &[("RHEO_BACKEND", &urls[1])], None);
    assert_no_secret("rheo migrate --help", &help.stdout);
    // A config file whose backend line the TOML parser quotes in its error.
    let config = dir.path().join("rheo.toml");
    std::fs::write(
        &config,
        format!("backend = \"postgres://rheo:{SECRET}@db/x\"\nlisten = [\n"),
    )
    .expect("write the config");
    let run = rheo(&["serve", "--config", config.to_str().expect("utf-8")]);
    assert_ne!(run.code, Some(0));
    assert_no_secret("a config file's parse error", &run.stderr);
}
