//! HTTPS: a listener that hands axum TLS streams (docs/http.md#https).
//!
//! Handshakes run in tasks of their own, so a client that connects and
//! stays silent holds up nobody; a handshake that has not finished in
//! [`HANDSHAKE_TIMEOUT`] is dropped. Only connections whose handshake
//! succeeded reach the router. rustls with the `ring` provider, TLS 1.2 and
//! 1.3, HTTP/1.1 (ALPN).

use std::io;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use rustls::ServerConfig;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;

/// The PEM files of an HTTPS server (docs/http.md#https): what `rheo
/// serve --tls-cert/--tls-key` (or the config file) names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    /// The certificate chain, the server's own certificate first.
    pub cert: PathBuf,
    /// Its private key (PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
}

/// How long a client may take to finish its TLS handshake.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Connections whose handshake is done, waiting for axum to take them.
const ACCEPTED_QUEUE: usize = 128;

/// The server's TLS settings from its PEM files: the chain (own
/// certificate first) and the private key. Errors name the file and what
/// is wrong with it.
pub fn server_config(files: &TlsFiles) -> anyhow::Result<Arc<ServerConfig>> {
    let chain = read_chain(&files.cert)?;
    let key = PrivateKeyDer::from_pem_file(&files.key).map_err(|e| {
        anyhow::anyhow!(
            "--tls-key {}: no PEM private key (PKCS#8, PKCS#1 or SEC1) could be read: {e}",
            files.key.display()
        )
    })?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .context("TLS protocol versions")?
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .with_context(|| {
            format!(
                "--tls-cert {} and --tls-key {} do not make a usable certificate (does the key belong to the certificate?)",
                files.cert.display(),
                files.key.display()
            )
        })?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

fn read_chain(path: &Path) -> anyhow::Result<Vec<CertificateDer<'static>>> {
    let chain = CertificateDer::pem_file_iter(path)
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .map_err(|e| anyhow::anyhow!("--tls-cert {}: {e}", path.display()))?;
    anyhow::ensure!(
        !chain.is_empty(),
        "--tls-cert {}: no PEM certificate in the file",
        path.display()
    );
    Ok(chain)
}

/// A TCP listener whose connections are TLS streams once their handshake
/// is done. Dropping it stops accepting.
#[derive(Debug)]
pub struct TlsListener {
    accepted: mpsc::Receiver<(TlsStream<TcpStream>, SocketAddr)>,
    local: SocketAddr,
    acceptor: tokio::task::JoinHandle<()>,
}

impl TlsListener {
    /// Accepts on `listener`, handshaking with `config`.
    pub fn new(listener: TcpListener, config: Arc<ServerConfig>) -> io::Result<Self> {
        let local = listener.local_addr()?;
        let (tx, accepted) = mpsc::channel(ACCEPTED_QUEUE);
        let acceptor = tokio::spawn(accept_loop(listener, TlsAcceptor::from(config), tx));
        Ok(Self {
            accepted,
            local,
            acceptor,
        })
    }
}

impl Drop for TlsListener {
    fn drop(&mut self) {
        self.acceptor.abort();
    }
}

async fn accept_loop(
    listener: TcpListener,
    acceptor: TlsAcceptor,
    accepted: mpsc::Sender<(TlsStream<TcpStream>, SocketAddr)>,
) {
    loop {
        let (tcp, peer) = match listener.accept().await {
            Ok(connection) => connection,
            Err(e) => {
                // Out of file descriptors and the like: say so and give
                // the system a moment instead of spinning.
                tracing::warn!("accepting a connection failed: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let acceptor = acceptor.clone();
        let accepted = accepted.clone();
        tokio::spawn(async move {
            match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
                Ok(Ok(stream)) => {
                    // The receiver is gone only when the server stopped.
                    let _ = accepted.send((stream, peer)).await;
                }
                Ok(Err(e)) => tracing::debug!("TLS handshake with {peer} failed: {e}"),
                Err(_) => tracing::debug!("TLS handshake with {peer} timed out"),
            }
        });
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.accepted.recv().await {
            Some(connection) => connection,
            // The accept loop never ends on its own; if it is gone the
            // server is stopping: accept nothing more.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        Ok(self.local)
    }
}
