// Dead-letters events whose payload says `"poison": true` (with the
// payload's `"reason"`, else "poison event"); acks the rest (the JavaScript
// twin of guests/poison).

import { Ack, Reject, handler, log } from "rheo-handler";

handler((delivery) => {
  const payload = delivery.event.payload;
  if (payload.poison !== true) return Ack();
  const reason = typeof payload.reason === "string" ? payload.reason : "poison event";
  log.warn(`rejecting ${delivery.event.id}: ${reason}`);
  return Reject(reason);
});
