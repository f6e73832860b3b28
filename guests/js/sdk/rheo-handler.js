// Write a Rheo handler in JavaScript as one function.
//
//     import { Ack, Reject, handler } from "rheo-handler";
//
//     handler((delivery) =>
//       delivery.event.payload.ok === true ? Ack() : Reject("not ok"));
//
// Or one function for a batch of deliveries, with an outcome for each (the
// host calls it with up to the manifest's `batch_size`):
//
//     import { Ack, Retry, batchHandler } from "rheo-handler";
//
//     batchHandler((deliveries) =>
//       deliveries.map((d) => (d.event.payload.ok ? Ack() : Retry("later"))));
//
// The module `app.js` is the handler's; `build.sh` turns it, this SDK and the
// QuickJS engine into one WebAssembly component of the `rheo:handler@0.2.0`
// world (`wit/handler.wit`: `handle` and `handle-batch`). The contract and
// what the host does with each outcome are in docs/handlers.md.
//
// What this layer adds over the raw WIT bindings:
//
// * the delivery's `payload` and `metadata` arrive parsed, as objects; text
//   that is not a JSON object is answered with a `Retry` that says so, and
//   the handler is not called;
// * an exception escaping the handler becomes `Retry("<Name>: <message>")`
//   (with the stack logged) instead of a trap, so the instance is kept;
// * a return value that is not `Ack()`, `Retry(...)` or `Reject(...)` (a
//   Promise included: handlers are synchronous) becomes a `Retry` naming it;
// * a `batchHandler` gets the deliveries whose JSON parsed (the others are
//   retried, as above); an exception escaping it, or an array of outcomes of
//   the wrong length, retries every delivery of the call with a reason that
//   says so; a `handler` asked for a batch runs on each delivery in turn;
// * `log`, `config`, `append` and `nowMs` wrap the host's imports with plain
//   JavaScript values (`append` takes objects and throws `AppendError`);
// * what the bindings would trap on is repaired or refused first: a lone
//   surrogate in text for the host becomes U+FFFD, a delay outside u64 is
//   dropped with a note, a BigInt delay becomes a Number;
// * a `console` (QuickJS has none) whose lines go to the server's log.
//
// This module does not import the host itself: the component's entry module
// (entry.js) hands it the `rheo:handler/host` import with `bind`, and the
// unit tests (tests/sdk.test.js) hand it a fake.

const U32_MAX = 2 ** 32 - 1;
// Every whole Number below this fits a WIT u64 (the largest is 2^64 - 2048).
const U64_LIMIT = 2 ** 64;
const U64_MAX_BIG = 2n ** 64n - 1n;

// --- What a handler returns ---------------------------------------------------

// Outcomes are instances of this class, made by Ack(), Retry() and Reject().
class Outcome {
  constructor(kind, reason, delayMs) {
    this.kind = kind;
    if (kind !== "ack") this.reason = reason;
    if (kind === "retry") this.delayMs = delayMs;
    Object.freeze(this);
  }

  toString() {
    if (this.kind === "ack") return "Ack()";
    if (this.kind === "reject") return `Reject(${JSON.stringify(this.reason)})`;
    const delay = this.delayMs === null ? "" : `, {delayMs: ${this.delayMs}}`;
    return `Retry(${JSON.stringify(this.reason)}${delay})`;
  }
}

/** Done: the delivery is acked and never comes back to this group. */
export function Ack() {
  return new Outcome("ack");
}

/**
 * Not now: the delivery comes back later, until the group's `max_attempts`
 * is used up. Without `delayMs` the group's backoff applies; the host clamps
 * a longer delay to its maximum.
 */
export function Retry(reason, options) {
  if (options === undefined || options === null) return new Outcome("retry", reason, null);
  if (typeof options !== "object") {
    throw new TypeError(
      `Retry(reason, options): options is an object like {delayMs: 500}, not ${show(options)}`,
    );
  }
  const delayMs = options.delayMs === undefined ? null : options.delayMs;
  return new Outcome("retry", reason, delayMs);
}

/** Never: the delivery is dead-lettered for this group with `reason`. */
export function Reject(reason) {
  return new Outcome("reject", reason);
}

// --- Registration and dispatch -------------------------------------------------

let registeredHandler = null;
// Whether `registeredHandler` takes an array of deliveries (batchHandler).
let takesBatches = false;

function register(fn, batches, name) {
  if (typeof fn !== "function") {
    throw new TypeError(`${name}() needs a function, not ${show(fn)}`);
  }
  if (registeredHandler !== null && registeredHandler !== fn) {
    throw new Error(
      `two handlers registered: ${fnName(registeredHandler)} and ${fnName(fn)}; ` +
        "a component has exactly one",
    );
  }
  registeredHandler = fn;
  takesBatches = batches;
  return fn;
}

/**
 * Registers `fn` as the component's handler (one per component) and returns
 * it. `fn` receives a delivery and returns Ack(), Retry(...) or Reject(...).
 */
export function handler(fn) {
  return register(fn, false, "handler");
}

/**
 * Registers `fn` as the component's handler of batches (one handler per
 * component) and returns it. `fn` receives an array of deliveries and
 * returns an array of outcomes, one per delivery, in the same order.
 */
export function batchHandler(fn) {
  return register(fn, true, "batchHandler");
}

/** The registered handler (`handler` or `batchHandler`), or null. */
export function registered() {
  return registeredHandler;
}

/** Forgets the registered handler (for tests). */
export function unregister() {
  registeredHandler = null;
  takesBatches = false;
}

function fnName(fn) {
  return fn.name ? `${fn.name}()` : "an anonymous function";
}

/**
 * Runs the registered handler on one delivery from the host (the WIT
 * binding's shape) and turns whatever happens into a WIT outcome. Never
 * throws.
 */
export function dispatch(witDelivery) {
  if (takesBatches) return dispatchBatch([witDelivery])[0];
  try {
    if (registeredHandler === null) {
      return witRetry("rheo-handler: no handler registered (call handler(fn) in app.js)");
    }
    let delivery;
    try {
      delivery = parseDelivery(witDelivery);
    } catch (error) {
      if (error instanceof BadJson) return witRetry(error.message);
      throw error;
    }
    let result;
    try {
      result = registeredHandler(delivery);
    } catch (error) {
      logThrown(witDelivery, error);
      return witRetry(describeThrown(error));
    }
    return witOutcome(result);
  } catch (error) {
    // A bug here must not trap either.
    return witRetry(`rheo-handler: ${describeThrown(error)}`);
  }
}

/**
 * Runs the registered handler on a batch of deliveries from the host and
 * answers one WIT outcome per delivery, in order. Never throws.
 */
export function dispatchBatch(witDeliveries) {
  if (!takesBatches) return witDeliveries.map(dispatch);
  try {
    const outcomes = new Array(witDeliveries.length);
    const parsed = [];
    const places = [];
    witDeliveries.forEach((d, i) => {
      try {
        parsed.push(parseDelivery(d));
        places.push(i);
      } catch (error) {
        if (!(error instanceof BadJson)) throw error;
        outcomes[i] = witRetry(error.message);
      }
    });
    if (parsed.length > 0) {
      let results;
      try {
        results = batchOutcomes(registeredHandler(parsed), parsed.length);
      } catch (error) {
        logThrown(witDeliveries[places[0]], error, parsed.length);
        results = parsed.map(() => witRetry(describeThrown(error)));
      }
      places.forEach((place, j) => {
        outcomes[place] = results[j];
      });
    }
    return outcomes;
  } catch (error) {
    // A bug here must not trap either.
    return witDeliveries.map(() => witRetry(`rheo-handler: ${describeThrown(error)}`));
  }
}

// A batch handler's answer as one WIT outcome per delivery: anything but an
// array of `expected` outcomes retries every delivery.
function batchOutcomes(results, expected) {
  const all = (reason) => Array.from({ length: expected }, () => witRetry(reason));
  if (!Array.isArray(results)) {
    return all(`rheo-handler: the batch handler returned ${show(results)}, not an array of outcomes`);
  }
  if (results.length !== expected) {
    return all(
      `rheo-handler: the batch handler returned ${results.length} outcomes for ${expected} deliveries`,
    );
  }
  return results.map(witOutcome);
}

function logThrown(witDelivery, error, batch = 1) {
  try {
    const stack = error instanceof Error && typeof error.stack === "string" ? error.stack : "";
    let where = `event ${witDelivery.event.id} (attempt ${witDelivery.attempt})`;
    if (batch > 1) where = `a batch of ${batch} deliveries from ${where}`;
    const head = `handler threw on ${where}: `;
    log.error(head + describeThrown(error) + (stack ? `\n${stack.trimEnd()}` : ""));
  } catch {
    // The retry matters more than the log line.
  }
}

class BadJson extends Error {}

function parseObject(text, what, eventId) {
  let value;
  try {
    value = JSON.parse(text);
  } catch (error) {
    throw new BadJson(
      `rheo-handler: the ${what} of event ${eventId} is not JSON: ${errorMessage(error)}`,
    );
  }
  if (!isPlainObject(value)) {
    throw new BadJson(
      `rheo-handler: the ${what} of event ${eventId} is a JSON ${jsonKind(value)}, not an object`,
    );
  }
  return value;
}

function jsonKind(value) {
  if (value === null) return "null";
  if (Array.isArray(value)) return "array";
  return typeof value;
}

function isPlainObject(value) {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

function parseDelivery(d) {
  const e = d.event;
  const event = Object.freeze({
    id: e.id,
    stream: e.stream,
    partition: e.partition,
    // u64 in WIT; a Number here, exact up to Number.MAX_SAFE_INTEGER (2^53 - 1).
    sequence: e.sequence,
    key: e.key ?? null,
    type: e.type ?? null,
    timestampMs: e.timestampMs,
    payload: parseObject(e.payload, "payload", e.id),
    metadata: parseObject(e.metadata, "metadata", e.id),
  });
  return Object.freeze({ event, group: d.group, attempt: d.attempt, leaseId: d.leaseId });
}

function errorMessage(error) {
  try {
    return error instanceof Error ? String(error.message) : String(error);
  } catch {
    return "";
  }
}

/** What a thrown value says: `<Name>: <message>` for an Error. */
function describeThrown(error) {
  if (error instanceof Error) {
    let name = "Error";
    let message = "";
    try {
      name = String(error.name || "Error");
      // A subclass that does not set its name is known by its class.
      const className = error.constructor?.name;
      if (name === "Error" && className) name = className;
      message = String(error.message ?? "");
    } catch {
      // A broken getter: the name alone.
    }
    return message ? `${name}: ${message}` : name;
  }
  return `a thrown ${typeName(error)}: ${show(error)}`;
}

function typeName(value) {
  if (value === null) return "null";
  if (Array.isArray(value)) return "array";
  if (typeof value === "object") {
    const name = Object.getPrototypeOf(value)?.constructor?.name;
    return name && name !== "Object" ? name : "object";
  }
  return typeof value;
}

/** A short rendering of any value, for reasons. */
function show(value) {
  let shown;
  try {
    if (typeof value === "string") shown = JSON.stringify(value);
    else if (typeof value === "function") shown = `function ${value.name || "(anonymous)"}`;
    else if (typeof value === "bigint") shown = `${value}n`;
    else if (typeof value === "object" && value !== null) {
      shown = value instanceof Promise ? "a Promise" : (JSON.stringify(value) ?? String(value));
    } else shown = String(value);
  } catch {
    shown = Object.prototype.toString.call(value);
  }
  return shown.length > 200 ? `${shown.slice(0, 200)}…` : shown;
}

/**
 * `value` as text that survives the trip to the host: a lone surrogate
 * cannot be encoded as UTF-8, so it is replaced with U+FFFD.
 */
function text(value) {
  const s = typeof value === "string" ? value : String(value);
  return s.replace(
    /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/g,
    "\uFFFD",
  );
}

/**
 * `value` as the bindings take a WIT `option<u64>`: null stays null, a whole
 * Number in 0..2^64 or a BigInt in 0..2^64-1 becomes a Number (above 2^53 the
 * nearest one, which the host's clamp makes moot for delays); anything else
 * is undefined. (The bindings trap on a BigInt or a negative Number.)
 */
function u64(value) {
  if (value === null) return null;
  if (typeof value === "number" && Number.isInteger(value) && value >= 0 && value < U64_LIMIT) {
    return value;
  }
  if (typeof value === "bigint" && value >= 0n && value <= U64_MAX_BIG) {
    return Math.min(Number(value), U64_LIMIT - 2048);
  }
  return undefined;
}

function witRetry(reason, delayMs = null) {
  return { tag: "retry", val: { reason: text(reason), delayMs } };
}

function witOutcome(result) {
  if (result instanceof Outcome) {
    if (result.kind === "ack") return { tag: "ack" };
    if (result.kind === "reject") return { tag: "reject", val: text(result.reason) };
    const delay = u64(result.delayMs);
    if (delay === undefined) {
      return witRetry(
        `${text(result.reason)} (rheo-handler: delayMs ${show(result.delayMs)} is not a whole ` +
          "number of milliseconds from 0 to 2^64 - 1; the group's backoff applies)",
      );
    }
    return witRetry(result.reason, delay);
  }
  if (result instanceof Promise) {
    return witRetry(
      "rheo-handler: the handler returned a Promise (an async function?); handlers are " +
        "synchronous: return Ack(), Retry(reason) or Reject(reason)",
    );
  }
  const shown =
    result === undefined ? "undefined (a missing return?)" : `${show(result)} (${typeName(result)})`;
  return witRetry(
    `rheo-handler: the handler returned ${shown}, not Ack(), Retry(reason) or Reject(reason)`,
  );
}

// --- Host functions ------------------------------------------------------------

let host = null;

/** Gives the SDK the `rheo:handler/host` import (entry.js does; tests pass a fake). */
export function bind(hostImport) {
  host = hostImport;
}

function theHost() {
  if (host === null) {
    throw new Error(
      "rheo-handler: the host is not available yet (host functions work while handling a " +
        "delivery, not while app.js is first evaluated)",
    );
  }
  return host;
}

function logAt(level) {
  return (message) => theHost().log(level, text(message));
}

/**
 * Lines in the server's log, tagged with the handler's name (`console.log`
 * and the rest of `console` write there too, see logConsole).
 */
export const log = Object.freeze({
  trace: logAt("trace"),
  debug: logAt("debug"),
  info: logAt("info"),
  warn: logAt("warn"),
  error: logAt("error"),
});

// What console methods print: strings as they are, Errors with their stack,
// anything else as JSON where it can be.
function consoleText(values) {
  return values
    .map((value) => {
      if (typeof value === "string") return value;
      if (value instanceof Error) {
        return value.stack ? `${describeThrown(value)}\n${value.stack}` : describeThrown(value);
      }
      if (typeof value === "object" && value !== null) {
        try {
          return JSON.stringify(value) ?? String(value);
        } catch {
          return Object.prototype.toString.call(value);
        }
      }
      return String(value);
    })
    .join(" ");
}

function consoleAt(level) {
  // Before the host is bound (while app.js is first evaluated, at build
  // time) there is nowhere to write: the line is dropped.
  return (...values) => {
    if (host !== null) host.log(level, text(consoleText(values)));
  };
}

/**
 * A `console` whose lines go to the server's log: `log` and `info` at info
 * level, `debug`, `warn` and `error` at theirs, `trace` at trace. The
 * QuickJS engine has no console of its own; this module installs this one
 * as `globalThis.console` where there is none.
 */
export const logConsole = Object.freeze({
  log: consoleAt("info"),
  info: consoleAt("info"),
  debug: consoleAt("debug"),
  warn: consoleAt("warn"),
  error: consoleAt("error"),
  trace: consoleAt("trace"),
});

if (typeof globalThis.console === "undefined") {
  globalThis.console = logConsole;
}

/** The manifest's `config` value for `key` (a string); null when unset. */
export function config(key) {
  return theHost().configGet(text(key)) ?? null;
}

/**
 * The host's clock in Unix milliseconds (the clock that times leases, which
 * may be a test clock).
 */
export function nowMs() {
  return theHost().nowMs();
}

/**
 * An append the host refused or could not make. `kind` is
 * "stream_not_found", "invalid", "not_allowed" or "unavailable"; `detail`
 * the host's text (empty for stream_not_found); `message` is
 * "<kind>: <detail>" (or the kind alone). Only "unavailable" may
 * succeed when retried (`retryable`), and with a deterministic id it is safe
 * to.
 */
export class AppendError extends Error {
  constructor(kind, message = "") {
    super(message ? `${kind}: ${message}` : kind);
    this.name = "AppendError";
    this.kind = kind;
    this.detail = message;
  }

  get retryable() {
    return this.kind === "unavailable";
  }
}

const APPEND_ERROR_KINDS = {
  "stream-not-found": "stream_not_found",
  invalid: "invalid",
  "not-allowed": "not_allowed",
  unavailable: "unavailable",
};

// The bindings throw a WIT error as an Error whose `payload` is the variant
// (`{tag: "invalid", val: "…"}`).
function appendError(error) {
  const variant = error !== null && typeof error === "object" ? error.payload : undefined;
  const kind =
    variant !== null && typeof variant === "object" ? APPEND_ERROR_KINDS[variant.tag] : undefined;
  if (kind === undefined) return new AppendError("unavailable", describeThrown(error));
  return new AppendError(kind, typeof variant.val === "string" ? variant.val : "");
}

function jsonText(value, what) {
  if (value === undefined || value === null) return "";
  if (!isPlainObject(value)) {
    throw new TypeError(`append: ${what} must be an object, not ${typeName(value)}`);
  }
  return text(JSON.stringify(value));
}

function optionalText(value, what) {
  if (value === undefined || value === null) return null;
  if (typeof value === "string") return text(value);
  throw new TypeError(`append: ${what} must be a string, null or absent, not ${typeName(value)}`);
}

/**
 * Appends one event to `stream` through the host, exactly as the HTTP API
 * would, and returns where it was stored: `{id, stream, partition, sequence,
 * duplicate}`. `payload` and `options.metadata` are objects (written as
 * JSON.stringify writes them). A deterministic `options.id` makes the append
 * idempotent: a second append with the same id writes nothing and answers
 * `duplicate: true`. Throws AppendError when the host refuses, TypeError or
 * RangeError for arguments it could never accept.
 */
export function append(stream, payload, options = {}) {
  if (typeof stream !== "string") {
    throw new TypeError(`append: stream must be a string, not ${typeName(stream)}`);
  }
  if (!isPlainObject(options)) {
    throw new TypeError(`append: options must be an object, not ${typeName(options)}`);
  }
  const { id, type, key, partition, metadata } = options;
  if (
    partition !== undefined &&
    partition !== null &&
    !(Number.isInteger(partition) && partition >= 0 && partition <= U32_MAX)
  ) {
    throw new RangeError(`append: partition ${show(partition)} is not a whole number in 0..2^32-1`);
  }
  if (!isPlainObject(payload)) {
    throw new TypeError(`append: payload must be an object, not ${typeName(payload)}`);
  }
  const event = {
    id: optionalText(id, "id"),
    type: optionalText(type, "type"),
    key: optionalText(key, "key"),
    partition: partition ?? null,
    payload: jsonText(payload, "payload"),
    metadata: jsonText(metadata, "metadata"),
  };
  let ref;
  try {
    ref = theHost().append(text(stream), event);
  } catch (error) {
    throw appendError(error);
  }
  return Object.freeze({
    id: ref.id,
    stream: ref.stream,
    partition: ref.partition,
    sequence: ref.sequence,
    duplicate: ref.duplicate,
  });
}
