//! The reference broker: a NATS JetStream stream on file storage and a
//! durable pull consumer with explicit acks, fetching `batch` messages at a
//! time and acking each. JetStream's acks are not confirmed by the server
//! one by one, so the run ends only when the consumer reports no message
//! awaiting an ack. Its file store syncs to disk on an
//! interval (two minutes by default), not per commit as Rheo's stores do.

use anyhow::Context;
use std::time::Instant;

use async_nats::jetstream::consumer::{AckPolicy, Consumer, pull};
use async_nats::jetstream::stream::{Config, StorageType};
use futures::StreamExt;
use rheo::bench::WorkloadResult;

use crate::clients::{self, Tally};

/// Publishes `payloads` to a fresh stream (not timed), then consumes them
/// (timed) until the consumer has every one acked. The stream is deleted
/// afterwards.
pub(crate) async fn pull_ack(
    url: &str,
    payloads: &[String],
    batch: usize,
    clients: usize,
) -> anyhow::Result<WorkloadResult> {
    let client = async_nats::connect(url)
        .await
        .with_context(|| format!("cannot connect to NATS at {url}"))?;
    let js = async_nats::jetstream::new(client);
    let name = format!("RHEO_COMPARE_{:08X}", rand::random::<u32>());
    let subject = format!("rheo-compare.{}", name.to_lowercase());
    let stream = js
        .create_stream(Config {
            name: name.clone(),
            subjects: vec![subject.clone()],
            storage: StorageType::File,
            ..Default::default()
        })
        .await
        .with_context(|| format!("cannot create stream {name} (is JetStream enabled?)"))?;
    let result = consume(&js, &stream, &subject, payloads, (batch, clients)).await;
    js.delete_stream(&name)
        .await
        .with_context(|| format!("cannot delete stream {name}"))?;
    result
}

async fn consume(
    js: &async_nats::jetstream::Context,
    stream: &async_nats::jetstream::stream::Stream,
    subject: &str,
    payloads: &[String],
    (batch, clients): (usize, usize),
) -> anyhow::Result<WorkloadResult> {
    for chunk in payloads.chunks(1000) {
        let mut acks = Vec::with_capacity(chunk.len());
        for payload in chunk {
            acks.push(
                js.publish(subject.to_owned(), payload.clone().into())
                    .await?,
            );
        }
        for ack in acks {
            ack.await?;
        }
    }
    let consumer = stream
        .create_consumer(pull::Config {
            durable_name: Some("bench".into()),
            ack_policy: AckPolicy::Explicit,
            ..Default::default()
        })
        .await?;

    let total = payloads.len();
    clients::timed("pull fetch + ack", total, clients, |tally| {
        let consumer = consumer.clone();
        async move { client(tally, consumer, batch, total).await }
    })
    .await
}

/// One client: fetches and acks until every message is acked.
async fn client(
    mut tally: Tally,
    consumer: Consumer<pull::Config>,
    batch: usize,
    total: usize,
) -> anyhow::Result<Tally> {
    let mut empty = 0u32;
    while tally.more() {
        let since = Instant::now();
        let mut messages = consumer.fetch().max_messages(batch).messages().await?;
        let mut got = 0;
        while let Some(message) = messages.next().await {
            let message = message.map_err(|e| anyhow::anyhow!("fetch: {e}"))?;
            let _payload: serde_json::Value = serde_json::from_slice(&message.payload)?;
            message
                .ack()
                .await
                .map_err(|e| anyhow::anyhow!("ack: {e}"))?;
            got += 1;
        }
        if got > 0 {
            empty = 0;
            tally.record(since, got);
            if !tally.more() {
                // The last round ends when every ack has reached the
                // server and been applied.
                while consumer.get_info().await?.num_ack_pending > 0 {
                    tokio::task::yield_now().await;
                }
            }
            continue;
        }
        // Nothing handed out right now (e.g. too many acks still on their
        // way, or the rest held by other clients): ask again shortly, but
        // not forever.
        empty += 1;
        anyhow::ensure!(
            empty < 5000,
            "JetStream stopped delivering messages ({total} to consume)"
        );
        tokio::time::sleep(std::time::Duration::from_millis(1)).await;
    }
    Ok(tally)
}
