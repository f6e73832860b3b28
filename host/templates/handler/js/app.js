// The {{name}} handler: called once per delivery of stream "{{stream}}" to
// group "{{group}}"; what it returns settles the delivery.
//
// Return Ack(), Retry(reason, { delayMs }) or Reject(reason). An exception
// is a retry with its text. Handlers are synchronous: no Promises.

import { Ack, Reject, config, handler, log } from "rheo-handler";

handler((delivery) => {
  const payload = delivery.event.payload; // an object
  if (payload.poison === true) {
    log.warn(`rejecting ${delivery.event.id}`);
    return Reject("poison marker");
  }
  const greeting = config("greeting") ?? "";
  log.info(`${greeting}: event ${delivery.event.id} (attempt ${delivery.attempt})`);
  return Ack();
});
