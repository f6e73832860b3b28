// The component's entry module: build.sh stages the handler's folder as
// ./app/ next to this file and names this file to componentize-qjs, which
// exports `handle` and `handleBatch` as the world's functions
// (`rheo:handler@0.2.0`).
//
// Importing ./app/app.js runs its handler(fn) call. That happens when the
// component is built (the engine's state is snapshotted afterwards), not
// when it is called, so an app.js that registers no handler, or fails to
// evaluate, fails the build.

import host from "rheo:handler/host@0.1.0";
import { bind, dispatch, dispatchBatch, registered } from "rheo-handler";
import "./app/app.js";

if (registered() === null) {
  throw new Error(
    "app.js registered no handler: call handler(fn) or batchHandler(fn) from rheo-handler",
  );
}
bind(host);

/** The exports of the `rheo:handler@0.2.0` world. */
export function handle(delivery) {
  return dispatch(delivery);
}

export function handleBatch(deliveries) {
  return dispatchBatch(deliveries);
}
