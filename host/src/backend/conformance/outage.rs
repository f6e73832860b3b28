//! A store that goes away and comes back: every backend that talks to a
//! server reaches it through a [`Relay`] the check can cut, and must answer
//! `backend_unavailable` or `ambiguous` (never a wrong result, never a
//! hang) while it is down, then carry on with nothing lost.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use parking_lot::Mutex;
use tokio::net::{TcpListener, TcpStream};

use super::{Harness, START};
use crate::backend::{Backend, Partitions};
use crate::clock::{FrozenClock, SharedClock};
use crate::model::EventInput;

/// A TCP relay the check can cut: while down it closes every relayed
/// connection and refuses new ones.
#[derive(Debug)]
pub struct Relay {
    /// The relayed URL: the service URL with host and port pointing here.
    pub url: String,
    up: Arc<AtomicBool>,
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
        let links: Arc<Mutex<Vec<tokio::task::AbortHandle>>> = Arc::default();
        let (up2, links2) = (up.clone(), links.clone());
        tokio::spawn(async move {
            while let Ok((mut inbound, _)) = listener.accept().await {
                if !up2.load(Ordering::SeqCst) {
                    continue; // dropped: the client sees the connection close
                }
                let target = target.clone();
                let task = tokio::spawn(async move {
                    if let Ok(mut outbound) = TcpStream::connect(target).await {
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                    }
                });
                links2.lock().push(task.abort_handle());
            }
        });
        Relay {
            url: url.to_string(),
            up,
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
