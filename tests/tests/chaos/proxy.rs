//! A TCP proxy between one `rheo serve` and its store that can cut the
//! network silently — stop forwarding in both directions while every
//! socket stays open, as a network that drops packets does — and heal it,
//! forwarding what it held back (`docs/cluster.md#a-node-cut-off-from-the-store`).
//!
//! To cut at a chosen moment of a store call it watches what the server
//! sends: a [`Trigger`] cuts right after a request it recognises, or right
//! after the store's answer to it. For PostgreSQL it reads the frontend
//! protocol: a statement is recognised by its text in the `Parse`
//! message that prepared it and then by each `Bind` that runs it (a
//! prepared statement's text goes over the wire once per connection).
//! It runs on a small tokio runtime of its own; the tests are
//! synchronous.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// When an armed proxy cuts.
#[derive(Debug, Clone)]
pub(crate) enum Trigger {
    /// After the store answered (through `ReadyForQuery`) a PostgreSQL
    /// statement whose text holds this: the session is left inside its
    /// transaction, holding what the statement locked.
    PgAfterReply(&'static str),
    /// Right after the client sent `COMMIT` on the connection that ran a
    /// PostgreSQL statement whose text holds this: the commit reaches the
    /// store, its answer never reaches the client.
    PgAtCommitAfter(&'static str),
    /// Right after forwarding a request that holds every one of these
    /// (a Redis script and an argument of it): the answer is held back.
    AfterRequest(Vec<&'static str>),
}

/// What the proxy shares with its connections.
#[derive(Debug)]
struct Shared {
    flowing: watch::Sender<bool>,
    trigger: Mutex<Option<Trigger>>,
    cut_at: Mutex<Option<Instant>>,
}

impl Shared {
    fn cut(&self) {
        self.cut_at.lock().unwrap().get_or_insert_with(Instant::now);
        self.flowing.send_replace(false);
    }
}

/// A proxy to one `host:port`; stops (closing every socket) when dropped.
#[derive(Debug)]
pub(crate) struct Proxy {
    addr: SocketAddr,
    shared: Arc<Shared>,
    runtime: Option<tokio::runtime::Runtime>,
}

impl Proxy {
    /// Listens on a free port of 127.0.0.1 and forwards to `upstream`.
    pub(crate) fn start(upstream: String) -> Proxy {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("the proxy's runtime");
        let listener = runtime
            .block_on(TcpListener::bind("127.0.0.1:0"))
            .expect("bind the proxy");
        let addr = listener.local_addr().expect("bound");
        let shared = Arc::new(Shared {
            flowing: watch::Sender::new(true),
            trigger: Mutex::new(None),
            cut_at: Mutex::new(None),
        });
        let accepting = Arc::clone(&shared);
        runtime.spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                tokio::spawn(link(client, upstream.clone(), Arc::clone(&accepting)));
            }
        });
        Proxy {
            addr,
            shared,
            runtime: Some(runtime),
        }
    }

    /// `url` with its host and port replaced by the proxy's.
    pub(crate) fn url(&self, url: &str) -> String {
        let (scheme, rest) = url.split_once("://").expect("a URL");
        let (authority, path) = rest.split_at(rest.find(['/', '?']).unwrap_or(rest.len()));
        let user = authority
            .rsplit_once('@')
            .map(|(user, _)| format!("{user}@"));
        format!("{scheme}://{}{}{path}", user.unwrap_or_default(), self.addr)
    }

    /// Cuts now.
    pub(crate) fn cut(&self) {
        self.shared.cut();
    }

    /// Cuts when `trigger` says (once).
    pub(crate) fn arm(&self, trigger: Trigger) {
        *self.shared.trigger.lock().unwrap() = Some(trigger);
    }

    /// When the proxy cut, if it has.
    pub(crate) fn cut_at(&self) -> Option<Instant> {
        *self.shared.cut_at.lock().unwrap()
    }

    /// Waits (at most `limit`) for the proxy to cut; when it did.
    pub(crate) fn wait_for_cut(&self, limit: Duration) -> Instant {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(at) = self.cut_at() {
                return at;
            }
            assert!(
                Instant::now() < deadline,
                "the proxy did not cut within {limit:?}"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Forwards again, what it held back first; disarms.
    pub(crate) fn heal(&self) {
        *self.shared.trigger.lock().unwrap() = None;
        *self.shared.cut_at.lock().unwrap() = None;
        self.shared.flowing.send_replace(true);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

/// What one connection's two directions share: the PostgreSQL statements
/// it prepared that match the trigger, and what it waits for.
#[derive(Debug, Default)]
struct Watch {
    /// Frontend bytes not yet parsed into messages.
    pending: Vec<u8>,
    /// Past the startup message.
    started: bool,
    /// The text of each statement the connection prepared, by name.
    prepared: HashMap<String, String>,
    /// Cut after the next `ReadyForQuery` from the store.
    after_reply: bool,
    /// Backend bytes not yet parsed, while waiting for that.
    reply: Vec<u8>,
    /// Cut after the next `COMMIT` from the client.
    at_commit: bool,
}

async fn link(client: TcpStream, upstream: String, shared: Arc<Shared>) {
    let Ok(server) = TcpStream::connect(upstream).await else {
        return;
    };
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (from_client, to_client) = client.into_split();
    let (from_server, to_server) = server.into_split();
    let watch = Arc::new(Mutex::new(Watch::default()));
    tokio::join!(
        pump(from_client, to_server, &shared, &watch, true),
        pump(from_server, to_client, &shared, &watch, false),
    );
}

/// Forwards `from` to `to` while the proxy flows; looks at each chunk for
/// the trigger (`upstream`: client to store).
async fn pump(
    mut from: OwnedReadHalf,
    mut to: OwnedWriteHalf,
    shared: &Shared,
    watch: &Mutex<Watch>,
    upstream: bool,
) {
    let mut flowing = shared.flowing.subscribe();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        if flowing.wait_for(|f| *f).await.is_err() {
            break;
        }
        let chunk = &buf[..n];
        let cut = if upstream {
            request(chunk, shared, &mut watch.lock().unwrap())
        } else {
            reply(chunk, &mut watch.lock().unwrap())
        };
        if to.write_all(chunk).await.is_err() {
            break;
        }
        if cut {
            shared.cut();
        }
    }
    let _ = to.shutdown().await;
}

/// Whether forwarding this request chunk cuts (or arms its connection).
/// Every chunk is parsed, armed or not, so each connection's messages and
/// prepared statements stay known.
fn request(chunk: &[u8], shared: &Shared, watch: &mut Watch) -> bool {
    let mut trigger = shared.trigger.lock().unwrap();
    if let Some(Trigger::AfterRequest(patterns)) = &*trigger {
        let hit = patterns.iter().all(|p| contains(chunk, p.as_bytes()));
        if hit {
            *trigger = None;
        }
        return hit;
    }
    watch.pending.extend_from_slice(chunk);
    let mut cut = false;
    for (kind, payload) in messages(&mut watch.pending, &mut watch.started) {
        let strings = cstrings(&payload);
        match kind {
            b'P' => {
                if let [name, text] = &strings[..] {
                    watch.prepared.insert(name.clone(), text.clone());
                }
            }
            b'B' => {
                let text = strings.get(1).and_then(|name| watch.prepared.get(name));
                let Some(text) = text else { continue };
                match &*trigger {
                    Some(Trigger::PgAfterReply(want)) if text.contains(want) => {
                        watch.after_reply = true;
                        *trigger = None;
                    }
                    Some(Trigger::PgAtCommitAfter(want)) if text.contains(want) => {
                        watch.at_commit = true;
                        *trigger = None;
                    }
                    _ => {}
                }
            }
            b'Q' if watch.at_commit
                && strings
                    .first()
                    .is_some_and(|q| q.trim().eq_ignore_ascii_case("COMMIT")) =>
            {
                watch.at_commit = false;
                cut = true;
            }
            _ => {}
        }
    }
    cut
}

/// Whether forwarding this answer chunk cuts: it holds the
/// `ReadyForQuery` a connection waits for.
fn reply(chunk: &[u8], watch: &mut Watch) -> bool {
    if !watch.after_reply {
        return false;
    }
    watch.reply.extend_from_slice(chunk);
    let mut started = true;
    let ready = messages(&mut watch.reply, &mut started)
        .iter()
        .any(|(kind, _)| *kind == b'Z');
    if ready {
        watch.after_reply = false;
        watch.reply.clear();
    }
    ready
}

/// The whole PostgreSQL messages at the front of `bytes` (type and
/// payload), removed from it; before `started`, untyped startup messages
/// (an SSL or GSS request keeps it before the start).
fn messages(bytes: &mut Vec<u8>, started: &mut bool) -> Vec<(u8, Vec<u8>)> {
    let mut out = Vec::new();
    loop {
        let head = usize::from(*started);
        if bytes.len() < head + 4 {
            break;
        }
        let len = u32::from_be_bytes(bytes[head..head + 4].try_into().unwrap()) as usize;
        if bytes.len() < head + len {
            break;
        }
        let message: Vec<u8> = bytes.drain(..head + len).collect();
        if *started {
            out.push((message[0], message[5..].to_vec()));
        } else {
            let code = message
                .get(4..8)
                .map(|c| u32::from_be_bytes(c.try_into().unwrap()));
            // SSLRequest and GSSENCRequest come before the startup message.
            *started = !matches!(code, Some(80_877_103 | 80_877_104));
        }
    }
    out
}

/// The NUL-terminated strings at the front of a message's payload.
fn cstrings(payload: &[u8]) -> Vec<String> {
    payload
        .split(|b| *b == 0)
        .take(2)
        .map(|s| String::from_utf8_lossy(s).into_owned())
        .collect()
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}
