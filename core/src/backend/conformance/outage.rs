//! A store that goes away and comes back: every backend that talks to a
//! server reaches it through a [`Relay`] the check can cut (connections
//! closed) or stall (nothing forwarded, sockets left open), and must answer
//! `backend_unavailable` or `ambiguous` (never a wrong result, never a
//! hang; when stalled, within the store timeout) while it is down, then
//! carry on with nothing lost.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

use super::{Harness, START};
use crate::backend::{Backend, Partitions};
use crate::clock::{FrozenClock, SharedClock};
use crate::model::{EventId, EventInput};

/// A TCP relay the check can cut: while cut it closes every relayed
/// connection and refuses new ones; while stalled it forwards nothing in
/// either direction but keeps every socket open, as a network that drops
/// packets does; while it holds answers it forwards what clients send but
/// nothing the server sends back.
#[derive(Debug)]
pub struct Relay {
    /// The relayed URL: the service URL with host and port pointing here.
    pub url: String,
    up: Arc<AtomicBool>,
    flowing: watch::Sender<bool>,
    answering: watch::Sender<bool>,
    links: Arc<Mutex<Vec<tokio::task::AbortHandle>>>,
}

impl Relay {
    /// Relays to the host and port of `service_url` (`scheme://…@host:port/…`).
    pub async fn start(service_url: &str) -> Relay {
        let mut url = url::Url::parse(service_url).expect("the service URL is a URL");
        let target = format!(
            "{}:{}",
            url.host_str().unwrap_or("127.0.0.1"),
            url.port_or_known_default()
                .expect("the service URL names a port")
        );
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        url.set_host(Some("127.0.0.1")).expect("a host");
        url.set_port(Some(listener.local_addr().expect("bound").port()))
            .expect("a port");
        let up = Arc::new(AtomicBool::new(true));
        let flowing = watch::Sender::new(true);
        let answering = watch::Sender::new(true);
        let links: Arc<Mutex<Vec<tokio::task::AbortHandle>>> = Arc::default();
        let (up2, links2, flowing2) = (up.clone(), links.clone(), flowing.clone());
        let answering2 = answering.clone();
        tokio::spawn(async move {
            while let Ok((inbound, _)) = listener.accept().await {
                if !up2.load(Ordering::SeqCst) {
                    continue; // dropped: the client sees the connection close
                }
                let target = target.clone();
                let flowing = flowing2.subscribe();
                let answering = answering2.subscribe();
                let task = tokio::spawn(async move {
                    if let Ok(outbound) = TcpStream::connect(target).await {
                        let (from_client, to_client) = inbound.into_split();
                        let (from_server, to_server) = outbound.into_split();
                        // Requests only stall with everything else.
                        let open = watch::Sender::new(true);
                        tokio::join!(
                            pump(from_client, to_server, [flowing.clone(), open.subscribe()]),
                            pump(from_server, to_client, [flowing, answering]),
                        );
                    }
                });
                links2.lock().push(task.abort_handle());
            }
        });
        Relay {
            url: url.to_string(),
            up,
            flowing,
            answering,
            links,
        }
    }

    /// Cuts every connection and refuses new ones.
    pub fn cut(&self) {
        self.up.store(false, Ordering::SeqCst);
        for link in self.links.lock().drain(..) {
            link.abort();
        }
    }

    /// Accepts connections again.
    pub fn restore(&self) {
        self.up.store(true, Ordering::SeqCst);
    }

    /// Stops forwarding, keeping every socket open (and accepting new
    /// ones, which get no answer either).
    pub fn stall(&self) {
        self.flowing.send_replace(false);
    }

    /// Forwards again, what was held back first.
    pub fn resume(&self) {
        self.flowing.send_replace(true);
    }

    /// Forwards what clients send, but holds back what the server answers:
    /// a request is carried out, and its caller hears nothing of it.
    pub fn hold_answers(&self) {
        self.answering.send_replace(false);
    }

    /// Forwards the server's answers again, what was held back first.
    pub fn release_answers(&self) {
        self.answering.send_replace(true);
    }
}

/// Copies `from` to `to` while every one of `gates` says so; what it read
/// meanwhile waits until they all do.
async fn pump(
    mut from: OwnedReadHalf,
    mut to: OwnedWriteHalf,
    mut gates: [watch::Receiver<bool>; 2],
) {
    let mut buf = vec![0u8; 16 * 1024];
    'copy: loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        // Each gate open in turn, then all of them at once.
        while !gates.iter().all(|g| *g.borrow()) {
            for gate in &mut gates {
                if gate.wait_for(|open| *open).await.is_err() {
                    break 'copy;
                }
            }
        }
        if to.write_all(&buf[..n]).await.is_err() {
            break;
        }
    }
    let _ = to.shutdown().await;
}

/// Opens a backend through a relay to `service_url` with `open(relayed
/// URL, clock)`, cuts it mid-way, and checks what every call answers then
/// and after it is restored. `open` should use short connection timeouts.
pub async fn a_lost_connection_is_unavailable_or_ambiguous_and_recovers<F, Fut>(
    service_url: &str,
    open: F,
) where
    F: FnOnce(String, SharedClock) -> Fut,
    Fut: Future<Output = Arc<dyn Backend>>,
{
    let relay = Relay::start(service_url).await;
    let clock = FrozenClock::new(START);
    let h = Harness::on(open(relay.url.clone(), clock.clone()).await, clock);
    let s = h.stream("s", 1).await;
    let g = h.group(&s, "g").await;
    h.append_n(&s, 3).await;
    let lease = h.fetch(&s, &g, 1).await.remove(0);

    relay.cut();
    let b = h.b();
    let outage = [
        b.append(&s, vec![EventInput::default()]).await.map(|_| ()),
        b.fetch(h.fetch_req(&s, &g, 1)).await.map(|_| ()),
        b.ack(&s, &g, lease.target()).await,
        b.lag(&s, &g, &Partitions::All).await.map(|_| ()),
    ];
    for result in &outage {
        let code = result
            .as_ref()
            .expect_err("the store is unreachable")
            .code();
        assert!(
            code == "backend_unavailable" || code == "ambiguous",
            "unexpected {code}: {result:?}"
        );
    }

    relay.restore();
    b.ack(&s, &g, lease.target())
        .await
        .expect("ack once the store is back");
    let more = h.fetch(&s, &g, 1).await;
    assert_eq!(more.len(), 1);
    assert_eq!(more[0].event.sequence, 2, "nothing was lost or skipped");
    assert_eq!(h.lag(&s, &g).await.partitions[&0].frontier, 1);
}

/// Opens a backend through a relay to `service_url` with `open(relayed
/// URL, clock, timeout)` — its own timeouts derived from `timeout` — bounds
/// it by `timeout` ([`crate::backend::bounded`], as `rheo serve` does),
/// then stalls the relay: packets go nowhere, sockets stay open
/// (`docs/cluster.md#a-node-cut-off-from-the-store`). Every call must
/// answer within the timeout, reads `backend_unavailable`, writes that or
/// `ambiguous`; once the relay forwards again (what it held back first),
/// the same backend serves every call, and nothing was lost or stored
/// twice.
pub async fn a_stalled_store_answers_within_the_deadline_and_recovers<F, Fut>(
    service_url: &str,
    timeout: Duration,
    open: F,
) where
    F: FnOnce(String, SharedClock, Duration) -> Fut,
    Fut: Future<Output = Arc<dyn Backend>>,
{
    let relay = Relay::start(service_url).await;
    let clock = FrozenClock::new(START);
    let store = open(relay.url.clone(), clock.clone(), timeout).await;
    let h = Harness {
        backend: crate::backend::bounded(store, timeout),
        clock,
        reopen: None,
        divisor: 1,
    };
    let s = h.stream("s", 1).await;
    let g = h.group(&s, "g").await;
    h.append_n(&s, 3).await;
    let lease = h.fetch(&s, &g, 1).await.remove(0);
    let during = || EventInput {
        id: Some(EventId::parse("during-the-stall").expect("an id")),
        ..EventInput::default()
    };

    relay.stall();
    let b = h.b();
    let started = Instant::now();
    let calls = async {
        tokio::join!(
            timed(started, async {
                b.append(&s, vec![during()]).await.map(drop)
            }),
            timed(started, async {
                b.fetch(h.fetch_req(&s, &g, 1)).await.map(drop)
            }),
            timed(started, b.ack(&s, &g, lease.target())),
            timed(started, async {
                b.lag(&s, &g, &Partitions::All).await.map(drop)
            }),
            timed(started, async { b.get_stream(&s).await.map(drop) }),
        )
    };
    // A call that hangs fails the check rather than the run.
    let (append, fetch, ack, lag, stream) = tokio::time::timeout(timeout * 3, calls)
        .await
        .expect("every call answers while the store is silent");
    let margin = Duration::from_secs(1);
    for (what, (result, took)) in [("append", &append), ("fetch", &fetch), ("ack", &ack)] {
        let code = result.as_ref().expect_err("the store is silent").code();
        assert!(
            code == "backend_unavailable" || code == "ambiguous",
            "{what}: unexpected {code}: {result:?}"
        );
        assert!(*took <= timeout + margin, "{what} answered after {took:?}");
    }
    for (what, (result, took)) in [("lag", &lag), ("get_stream", &stream)] {
        let code = result.as_ref().expect_err("the store is silent").code();
        assert_eq!(code, "backend_unavailable", "{what}: a read writes nothing");
        assert!(*took <= timeout + margin, "{what} answered after {took:?}");
    }

    relay.resume();
    // The same backend, no restart: its connections come back or are
    // replaced within a few timeouts.
    let resent = eventually(timeout * 4, || b.append(&s, vec![during()])).await;
    assert_eq!(resent.len(), 1);
    match (b.ack(&s, &g, lease.target()).await, &ack.0) {
        (Ok(()), _) => {}
        // The ack held back by the relay may have landed after all.
        (Err(e), Err(held)) if e.code() == "stale_lease" && held.code() == "ambiguous" => {}
        (other, held) => panic!("ack after the stall: {other:?} (during: {held:?})"),
    }
    b.fetch(h.fetch_req(&s, &g, 1))
        .await
        .expect("fetch after the stall");
    let stored = b.get_stream(&s).await.expect("the stream after the stall");
    assert_eq!(
        stored.high_watermarks,
        vec![4],
        "the three events before and the one resent, stored once"
    );
    h.lag(&s, &g).await;
}

/// What `call` answered, and how long after `started`.
async fn timed(
    started: Instant,
    call: impl Future<Output = crate::backend::Result<()>>,
) -> (crate::backend::Result<()>, Duration) {
    let result = call.await;
    (result, started.elapsed())
}

/// Runs `call` until it succeeds or a call answers something else than
/// `backend_unavailable` or `ambiguous`, for at most `limit`.
async fn eventually<T, Fut>(limit: Duration, mut call: impl FnMut() -> Fut) -> T
where
    Fut: Future<Output = crate::backend::Result<T>>,
{
    let deadline = Instant::now() + limit;
    loop {
        match call().await {
            Ok(value) => return value,
            Err(e) if e.is_transient() && Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("not back within {limit:?}: {e}"),
        }
    }
}
