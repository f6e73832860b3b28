// Fails on purpose until a given attempt, then acks: shows retries (the
// JavaScript twin of guests/flaky).
//
// Config: `succeed_on_attempt` (default 3), the first attempt that acks;
// `retry_delay_ms` (optional), the delay asked for with each retry (without
// it the group's backoff applies).

import { Ack, Retry, config, handler } from "rheo-handler";

const U32_MAX = 2n ** 32n - 1n;
const U64_MAX = 2n ** 64n - 1n;

// The config value as a whole number in 0..=largest, a BigInt; null when
// unset or not such a number.
function configInt(key, largest) {
  const text = (config(key) ?? "").trim();
  if (!/^\+?[0-9]+$/.test(text)) return null;
  const value = BigInt(text.replace(/^\+/, ""));
  return value <= largest ? value : null;
}

handler((delivery) => {
  const succeedOn = Number(configInt("succeed_on_attempt", U32_MAX) ?? 3n);
  if (delivery.attempt >= succeedOn) return Ack();
  const reason = `flaky: attempt ${delivery.attempt} of ${succeedOn} needed`;
  // Retry takes a BigInt delay as it is (the SDK converts it).
  return Retry(reason, { delayMs: configInt("retry_delay_ms", U64_MAX) });
});
