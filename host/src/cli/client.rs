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
    pub(crate) fn new(
        base: &str,
        token: Option<String>,
        ca_cert: Option<&Path>,
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
            .timeout_connect(Some(CONNECT_TIMEOUT))
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
        self.answer(&url, request.call())
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
        let response = request.call().map_err(|e| self.transport_error(e))?;
        if response.status().is_success() {
            return Ok(response.into_body());
        }
        let status = response.status().as_u16();
        match self.answer(&url, Ok(response)) {
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
        self.answer(&url, request.send_json(body))
    }

    /// `PATCH path` with a JSON body.
    pub(crate) fn patch(&self, path: &str, body: &Value) -> Result<Value, ClientError> {
        let url = self.url(path);
        let request = self.with_token(self.agent.patch(&url));
        self.answer(&url, request.send_json(body))
    }

    /// `POST path` with no body.
    pub(crate) fn post_empty(&self, path: &str) -> Result<Value, ClientError> {
        let url = self.url(path);
        let request = self.with_token(self.agent.post(&url));
        self.answer(&url, request.send_empty())
    }

    /// `POST path` with a body that is already JSON text (appends of raw
    /// JSON lines are not parsed and re-serialised).
    pub(crate) fn post_raw_json(&self, path: &str, json: &[u8]) -> Result<Value, ClientError> {
        let url = self.url(path);
        let request = self.with_token(self.agent.post(&url));
        self.answer(&url, request.content_type("application/json").send(json))
    }

    /// `PUT path` with `bytes` of type `content_type`.
    pub(crate) fn put(
        &self,
        path: &str,
        content_type: &str,
        bytes: &[u8],
    ) -> Result<Value, ClientError> {
        self.send_bytes(|agent, url| agent.put(url), path, content_type, bytes)
    }

    /// `POST path` with `bytes` of type `content_type`.
    pub(crate) fn post_bytes(
        &self,
        path: &str,
        content_type: &str,
        bytes: &[u8],
    ) -> Result<Value, ClientError> {
        self.send_bytes(|agent, url| agent.post(url), path, content_type, bytes)
    }

    /// `method path` with `bytes` of type `content_type`.
    fn send_bytes(
        &self,
        method: fn(&ureq::Agent, &str) -> ureq::RequestBuilder<ureq::typestate::WithBody>,
        path: &str,
        content_type: &str,
        bytes: &[u8],
    ) -> Result<Value, ClientError> {
        let url = self.url(path);
        let request = self.with_token(method(&self.agent, &url));
        self.answer(&url, request.content_type(content_type).send(bytes))
    }

    /// `DELETE path`.
    pub(crate) fn delete(&self, path: &str) -> Result<Value, ClientError> {
        let url = self.url(path);
        let request = self.with_token(self.agent.delete(&url));
        self.answer(&url, request.call())
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
        url: &str,
        response: Result<Response<ureq::Body>, ureq::Error>,
    ) -> Result<Value, ClientError> {
        let mut response = response.map_err(|e| self.transport_error(e))?;
        let status = response.status().as_u16();
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
        assert!(Client::new("http://127.0.0.1:7070/", None, None).is_ok());
        assert_eq!(
            Client::new("http://h:1/", None, None).unwrap().base,
            "http://h:1"
        );
        assert!(Client::new("https://rheo.example", None, None).is_ok());
        assert!(Client::new("127.0.0.1:7070", None, None).is_err());
        let plain = Client::new("http://h:1", None, Some(Path::new("ca.pem"))).unwrap_err();
        assert!(plain.to_string().contains("--ca-cert is for https://"));
        let missing = Client::new("https://h:1", None, Some(Path::new("/nonexistent/ca.pem")))
            .unwrap_err()
            .to_string();
        assert!(
            missing.starts_with("--ca-cert /nonexistent/ca.pem:"),
            "{missing}"
        );
    }
}
