// A batch handler (`batchHandler`, `rheo:handler@0.2.0`): settles each
// delivery of a batch as its payload's `"do"` asks — `"ack"` (or no `"do"`),
// `"retry"` (after `"delay_ms"`, if given) or `"reject"` — so one call acks,
// retries and rejects items separately; a retry's or reject's reason says
// how many deliveries the call had (the JavaScript twin of guests/batch).

import { Ack, Reject, Retry, batchHandler } from "rheo-handler";

batchHandler((deliveries) => {
  const why = (what) => `${what} in a batch of ${deliveries.length}`;
  return deliveries.map((delivery) => {
    const { do: action, delay_ms: delay } = delivery.event.payload;
    if (action === undefined || action === "ack") return Ack();
    if (action === "retry") {
      return typeof delay === "number" ? Retry(why("retry"), { delayMs: delay }) : Retry(why("retry"));
    }
    if (action === "reject") return Reject(why("reject"));
    return Reject(`unknown "do": ${action}`);
  });
});
