// Appends a derived event for every delivery: the pipeline example (the
// JavaScript twin of guests/transform).
//
// Config: `target_stream` (required). The derived event has the
// deterministic id "<source id>:transformed", so a redelivered event is
// appended once (the second append answers the first as a duplicate); type
// "<type>.transformed" ("transformed" without a type); the payload copied
// plus "source": <source id>; metadata with `causation_id` = the source id,
// the source's `correlation_id` carried over, and `transformed_at_ms` from
// the host's clock. Acks when the append succeeded (or was a duplicate),
// retries when it failed. A source whose payload has "retry_once": true is
// retried on its first attempt, before anything is appended.

import { Ack, AppendError, Reject, Retry, append, config, handler, log, nowMs } from "rheo-handler";

handler((delivery) => {
  const target = config("target_stream");
  if (target === null) return Reject("transform: config target_stream is not set");
  const source = delivery.event;
  if (delivery.attempt === 1 && source.payload.retry_once === true) {
    return Retry("transform: retry_once");
  }

  const payload = { ...source.payload, source: source.id };
  const metadata = { causation_id: source.id };
  if (Object.hasOwn(source.metadata, "correlation_id")) {
    metadata.correlation_id = source.metadata.correlation_id;
  }
  metadata.transformed_at_ms = nowMs();
  const type = source.type !== null ? `${source.type}.transformed` : "transformed";

  let appended;
  try {
    appended = append(target, payload, { id: `${source.id}:transformed`, type, metadata });
  } catch (error) {
    if (error instanceof AppendError) {
      return Retry(`transform: append to ${target} failed: ${error.message}`);
    }
    throw error;
  }
  log.debug(
    `appended ${appended.id} to ${appended.stream} at ` +
      `${appended.partition}/${appended.sequence} (duplicate: ${appended.duplicate})`,
  );
  return Ack();
});
