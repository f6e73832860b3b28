//! The HTTP client the ops commands share: a base URL, an optional bearer
//! token, and one call per method that returns the server's JSON answer or
//! a [`ClientError`] saying whose fault the failure was.
//!
//! It is blocking (ureq), so ops commands run before any async runtime is
//! started. `https://` servers are checked against Mozilla's roots, or
//! against the certificates of `--ca-cert` (docs/http.md#https).

use std::fmt::Write as _;
use std::path::Path;
use std::time::Duration;

use serde_json::Value;
use ureq::http::Response;

/// Largest answer read (a page of 1000 large events fits easily).
const MAX_ANSWER_BYTES: u64 = 256 << 20;

/// How long to wait for a TCP connection before calling the server unreachable.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Why a call failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ClientError {
    /// No connection could be made (or it broke): nothing answered.
    #[error(
        "cannot reach the Rheo server at {url}: {cause}\n\
         hint: is `rheo serve` running? set --server or RHEO_SERVER"
    )]
    Unreachable {
        /// The server's base URL.
        url: String,
        /// What the network layer said.
        cause: String,
    },
    /// The server answered with its error body.
    #[error("{message} ({code})")]
    Api {
        /// HTTP status.
        status: u16,
        /// The portable error code, e.g. `stream_not_found`.
        code: String,
        /// The server's explanation.
        message: String,
    },
    /// Something answered, but not the way a Rheo server does.
    #[error("unexpected answer from {url} (HTTP {status}): {detail}")]
    Unexpected {
        /// The URL called.
        url: String,
        /// HTTP status.
        status: u16,
        /// What was wrong with it.
        detail: String,
    },
    /// The request could not be made at all (bad URL, unsupported scheme).
    #[error("{0}")]
    Request(String),
}

/// One HTTP call, for `-v` (docs/cli.md#seeing-the-http-calls): its method,
/// URL and when it started.
struct Call<'a> {
    method: &'static str,
    url: &'a str,
    started: std::time::Instant,
}

impl<'a> Call<'a> {
    fn start(method: &'static str, url: &'a str) -> Self {
        tracing::debug!("{method} {url}");
        Self {
            method,
            url,
            started: std::time::Instant::now(),
        }
    }

    fn answered(&self, status: u16) {
        let ms = self.started.elapsed().as_secs_f64() * 1000.0;
        tracing::debug!("{} {} -> {status} in {ms:.1} ms", self.method, self.url);
    }

    fn failed(&self, error: &ureq::Error) {
        let ms = self.started.elapsed().as_secs_f64() * 1000.0;
        tracing::debug!(
            "{} {} failed after {ms:.1} ms: {error}",
            self.method,
            self.url
        );
    }
}

impl ClientError {
    /// The exit code a command that failed with this ends with
    /// (docs/cli.md#exit-codes).
    pub(crate) fn exit_code(&self) -> u8 {
        match self {
            ClientError::Unreachable { .. } => exit::UNREACHABLE,
            ClientError::Api { status, .. } => match status {
                400 | 413 | 415 | 422 => exit::INVALID,
                401 | 403 => exit::UNAUTHORIZED,
                404 | 410 => exit::NOT_FOUND,
                409 | 412 => exit::CONFLICT,
                503 | 504 => exit::UNAVAILABLE,
                _ => exit::FAILED,
            },
            ClientError::Unexpected { .. } | ClientError::Request(_) => exit::FAILED,
        }
    }
}

/// The exit codes of the `rheo` commands (docs/cli.md#exit-codes).
pub(crate) mod exit {
    /// Anything not below: the server failed the request, a file could
    /// not be read, a build failed.
    pub(crate) const FAILED: u8 = 1;
    /// The command line or its input is wrong: a usage error (clap's),
    /// a refusal before sending (`--confirm` missing, a bad line in a
    /// file), or the server's 400, 413, 415 or 422.
    pub(crate) const INVALID: u8 = 2;
    /// No server answered at the address.
    pub(crate) const UNREACHABLE: u8 = 3;
    /// What the command names does not exist (404), or no longer (410).
    pub(crate) const NOT_FOUND: u8 = 4;
    /// It conflicts with what is there (409): a stream that exists, a
    /// lease that is stale, a handler bound to what is being deleted.
    pub(crate) const CONFLICT: u8 = 5;
    /// The token is missing or wrong (401), or may not do this (403).
    pub(crate) const UNAUTHORIZED: u8 = 6;
    /// The server or its store cannot take it now (503, 504): trying
    /// again later may work.
    pub(crate) const UNAVAILABLE: u8 = 7;
}

/// A request method that sends a body (`PUT`, `POST`).
type SendsBody = fn(&ureq::Agent, &str) -> ureq::RequestBuilder<ureq::typestate::WithBody>;

/// A connection to one Rheo server.
#[derive(Debug)]
pub(crate) struct Client {
    agent: ureq::Agent,
    base: String,
    token: Option<String>,
}

impl Client {
    /// A client for the server at `base` (e.g. `http://127.0.0.1:7070`);
    /// an `https://` server's certificate must chain to one of `ca_cert`'s
    /// (a PEM file) when given, else to a public root.
    /// With `timeout`, every call (connecting, sending, the whole answer)
    /// fails as unreachable once it has taken that long.
    pub(crate) fn new(
        base: &str,
        token: Option<String>,
        ca_cert: Option<&Path>,
        timeout: Option<Duration>,
    ) -> Result<Self, ClientError> {
        let base = base.trim().trim_end_matches('/').to_owned();
        let https = base.starts_with("https://");
        if !https && !base.starts_with("http://") {
            return Err(ClientError::Request(format!(
                "{base:?} is not a server URL; expected http://HOST:PORT or https://HOST:PORT"
            )));
        }
        let mut config = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_connect(Some(
                timeout.map_or(CONNECT_TIMEOUT, |t| t.min(CONNECT_TIMEOUT)),
            ))
            .timeout_global(timeout)
            .user_agent(format!("rheo-cli/{}", env!("CARGO_PKG_VERSION")));
        if let Some(path) = ca_cert {
            if !https {
                return Err(ClientError::Request(format!(
                    "--ca-cert is for https:// servers; {base} is plain http"
                )));
            }
            let roots = read_roots(path)?;
            config = config.tls_config(
                ureq::tls::TlsConfig::builder()
                    .root_certs(ureq::tls::RootCerts::new_with_certs(&roots))
                    .build(),
            );
        }
        Ok(Self {
            agent: config.build().into(),
            base,
            token,
        })
    }

    /// `GET path?query`.
    pub(crate) fn get(&self, path: &str, query: &[(&str, String)]) -> Result<Value, ClientError> {
        let url = self.url(path);
        let mut request = self.with_token(self.agent.get(&url));
        for (key, value) in query {
            request = request.query(*key, value);
        }
        let call = Call::start("GET", &url);
        self.answer(call, request.call())
    }

    /// `GET path?query` with extra `headers`, whose answer is read as it
    /// arrives (a followed log): the body of a 2xx answer, else the error
    /// the server gave. No read timeout: the server may stay quiet.
    pub(crate) fn get_streaming(
        &self,
        path: &str,
        query: &[(&str, String)],
        headers: &[(&str, String)],
    ) -> Result<ureq::Body, ClientError> {
        let url = self.url(path);
        let mut request = self.with_token(self.agent.get(&url));
        for (key, value) in query {
            request = request.query(*key, value);
        }
        for (name, value) in headers {
            request = request.header(*name, value);
        }
        let call = Call::start("GET", &url);
        let response = request.call().map_err(|e| {
            call.failed(&e);
            self.transport_error(e)
        })?;
        if response.status().is_success() {
            call.answered(response.status().as_u16());
            return Ok(response.into_body());
        }
        let status = response.status().as_u16();
        match self.answer(call, Ok(response)) {
            Err(e) => Err(e),
            Ok(_) => Err(ClientError::Unexpected {
                url,
                status,
                detail: "not a success".into(),
            }),
        }
    }

    /// `POST path` with a JSON body.
    pub(crate) fn post(&self, path: &str, body: &Value) -> Result<Value, ClientError> {
        let url = self.url(path);
        let request = self.with_token(self.agent.post(&url));
        self.answer(Call::start("POST", &url), request.send_json(body))
    }

    /// `PATCH path` with a JSON body.
    pub(crate) fn patch(&self, path: &str, body: &Value) -> Result<Value, ClientError> {
        let url = self.url(path);
        let request = self.with_token(self.agent.patch(&url));
        self.answer(Call::start("PATCH", &url), request.send_json(body))
    }

    /// `POST path` with no body.
    pub(crate) fn post_empty(&self, path: &str) -> Result<Value, ClientError> {
        let url = self.url(path);
        let request = self.with_token(self.agent.post(&url));
        self.answer(Call::start("POST", &url), request.send_empty())
    }

    /// `POST path` with a body that is already JSON text (appends of raw
    /// JSON lines are not parsed and re-serialised).
    pub(crate) fn post_raw_json(&self, path: &str, json: &[u8]) -> Result<Value, ClientError> {
        let url = self.url(path);
        let request = self.with_token(self.agent.post(&url));
        let call = Call::start("POST", &url);
        self.answer(call, request.content_type("application/json").send(json))
    }

    /// `PUT path` with `bytes` of type `content_type`.
    pub(crate) fn put(
        &self,
        path: &str,
        content_type: &str,
        bytes: &[u8],
    ) -> Result<Value, ClientError> {
        self.send_bytes(
            ("PUT", |agent, url| agent.put(url)),
            path,
            content_type,
            bytes,
        )
    }

    /// `POST path` with `bytes` of type `content_type`.
    pub(crate) fn post_bytes(
        &self,
        path: &str,
        content_type: &str,
        bytes: &[u8],
    ) -> Result<Value, ClientError> {
        self.send_bytes(
            ("POST", |agent, url| agent.post(url)),
            path,
            content_type,
            bytes,
        )
    }

    /// `method path` with `bytes` of type `content_type`.
    fn send_bytes(
        &self,
        (name, method): (&'static str, SendsBody),
        path: &str,
        content_type: &str,
        bytes: &[u8],
    ) -> Result<Value, ClientError> {
        let url = self.url(path);
        let request = self.with_token(method(&self.agent, &url));
        let call = Call::start(name, &url);
        self.answer(call, request.content_type(content_type).send(bytes))
    }

    /// `DELETE path`.
    pub(crate) fn delete(&self, path: &str) -> Result<Value, ClientError> {
        let url = self.url(path);
        let request = self.with_token(self.agent.delete(&url));
        self.answer(Call::start("DELETE", &url), request.call())
    }

    fn with_token<B>(&self, request: ureq::RequestBuilder<B>) -> ureq::RequestBuilder<B> {
        match &self.token {
            Some(token) => request.header("Authorization", format!("Bearer {token}")),
            None => request,
        }
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// The JSON answer of a 2xx response; the error body of any other.
    fn answer(
        &self,
        call: Call<'_>,
        response: Result<Response<ureq::Body>, ureq::Error>,
    ) -> Result<Value, ClientError> {
        let url = call.url;
        let mut response = response.map_err(|e| {
            call.failed(&e);
            self.transport_error(e)
        })?;
        let status = response.status().as_u16();
        call.answered(status);
        let bytes = response
            .body_mut()
            .with_config()
            .limit(MAX_ANSWER_BYTES)
            .read_to_vec()
            .map_err(|e| self.transport_error(e))?;
        let unexpected = |detail: String| ClientError::Unexpected {
            url: url.to_owned(),
            status,
            detail,
        };
        let body: Value = if bytes.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&bytes).map_err(|_| unexpected(excerpt(&bytes)))?
        };
        if (200..300).contains(&status) {
            return Ok(body);
        }
        let error = &body["error"];
        match (error["code"].as_str(), error["message"].as_str()) {
            (Some(code), Some(message)) => Err(ClientError::Api {
                status,
                code: code.to_owned(),
                message: message.to_owned(),
            }),
            _ => Err(unexpected(excerpt(&bytes))),
        }
    }

    fn transport_error(&self, error: ureq::Error) -> ClientError {
        let unreachable = |cause: String| ClientError::Unreachable {
            url: self.base.clone(),
            cause,
        };
        // rustls reports a certificate it refuses as an I/O error.
        let tls = match &error {
            ureq::Error::Tls(_) | ureq::Error::Rustls(_) => true,
            ureq::Error::Io(e) => e
                .get_ref()
                .is_some_and(|inner| inner.downcast_ref::<rustls::Error>().is_some()),
            _ => false,
        };
        if tls {
            return ClientError::Request(format!(
                "TLS with {} failed: {error}\n\
                 hint: is the server's certificate signed by a public authority? if not, pass its CA with --ca-cert FILE (or RHEO_CA_CERT)",
                self.base
            ));
        }
        match error {
            ureq::Error::Io(e) => unreachable(e.to_string()),
            ureq::Error::ConnectionFailed => unreachable("connection failed".into()),
            ureq::Error::HostNotFound => unreachable("host not found".into()),
            ureq::Error::Timeout(t) => unreachable(format!("timed out ({t})")),
            other => ClientError::Request(format!("request to {} failed: {other}", self.base)),
        }
    }
}

/// The certificates of a PEM file, for `--ca-cert`.
fn read_roots(path: &Path) -> Result<Vec<ureq::tls::Certificate<'static>>, ClientError> {
    use ureq::tls::PemItem;
    let bad = |why: String| ClientError::Request(format!("--ca-cert {}: {why}", path.display()));
    let pem = std::fs::read(path).map_err(|e| bad(e.to_string()))?;
    let mut roots = Vec::new();
    for item in ureq::tls::parse_pem(&pem) {
        if let PemItem::Certificate(cert) = item.map_err(|e| bad(e.to_string()))? {
            roots.push(cert);
        }
    }
    if roots.is_empty() {
        return Err(bad("no PEM certificate in the file".into()));
    }
    Ok(roots)
}

/// The start of a body that is not what was expected, for messages.
fn excerpt(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    let text = text.trim();
    match text.char_indices().nth(200) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None if text.is_empty() => "empty body".to_owned(),
        None => text.to_owned(),
    }
}

/// `text` as one URL path segment: everything but RFC 3986 unreserved
/// characters percent-encoded, so a name can never change the route.
pub(crate) fn segment(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(byte));
        } else {
            let _ = write!(out, "%{byte:02X}");
        }
    }
    // `.` and `..` alone are path navigation, not names.
    match out.as_str() {
        "." => "%2E".to_owned(),
        ".." => "%2E%2E".to_owned(),
        _ => out,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_become_single_path_segments() {
        assert_eq!(segment("orders.v2_a-b~"), "orders.v2_a-b~");
        assert_eq!(segment("a/b c?"), "a%2Fb%20c%3F");
        assert_eq!(segment(".."), "%2E%2E");
        assert_eq!(segment("é"), "%C3%A9");
    }

    #[test]
    fn http_and_https_urls_are_accepted() {
        assert!(Client::new("http://127.0.0.1:7070/", None, None, None).is_ok());
        assert_eq!(
            Client::new("http://h:1/", None, None, None).unwrap().base,
            "http://h:1"
        );
        assert!(Client::new("https://rheo.example", None, None, None).is_ok());
        assert!(Client::new("127.0.0.1:7070", None, None, None).is_err());
        let plain = Client::new("http://h:1", None, Some(Path::new("ca.pem")), None).unwrap_err();
        assert!(plain.to_string().contains("--ca-cert is for https://"));
        let missing = Client::new(
            "https://h:1",
            None,
            Some(Path::new("/nonexistent/ca.pem")),
            None,
        )
        .unwrap_err()
        .to_string();
        assert!(
            missing.starts_with("--ca-cert /nonexistent/ca.pem:"),
            "{missing}"
        );
    }
}
