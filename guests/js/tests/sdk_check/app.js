// A handler that exercises the SDK from inside a real component, for
// tests/tests/polyglot.rs: the payload's "do" says what to try. Results come
// back as outcomes (a reject's reason is the report), appended events or log
// lines; the test runs it in a group with max_attempts 1, so a retry shows
// up as a dead letter "max_attempts: <reason>". (The JavaScript twin of
// guests/python/tests/sdk_check.)

import { Ack, AppendError, Reject, Retry, append, config, handler, log, nowMs } from "rheo-handler";

function reportAppendError(call) {
  try {
    call();
  } catch (error) {
    if (error instanceof AppendError) {
      return Reject(`${error.kind}|${error.detail}|${error.retryable}`);
    }
    throw error;
  }
  return Reject("the append succeeded");
}

// What a handler could reach beyond the host functions: QuickJS has no
// file, process or network API; only the ECMAScript globals are there.
function sandbox() {
  const leaks = [];
  for (const name of ["process", "require", "fetch", "XMLHttpRequest", "WebSocket", "Deno", "Bun", "std", "os"]) {
    if (typeof globalThis[name] !== "undefined") leaks.push(`global ${name}`);
  }
  return Reject(`sandbox: ${leaks.join("; ") || "sealed"}`);
}

handler((delivery) => {
  const event = delivery.event;
  switch (event.payload.do) {
    case "raise":
      throw new RangeError(`boom ${event.payload.n}`);
    case "throw_text":
      throw "plain text";
    case "return_none":
      return undefined;
    case "return_text":
      return "ack";
    case "return_promise":
      return Promise.resolve(Ack());
    case "bad_delay":
      return Retry("later", { delayMs: -5 });
    case "big_delay":
      // Beyond u64 (the bindings would trap): the SDK drops it, with a note.
      return Retry("much later", { delayMs: 2 ** 64 });
    case "bigint_delay":
      // A BigInt (the bindings would trap on it): the SDK sends a Number.
      return Retry("bigint", { delayMs: 60_000n });
    case "append_list":
      append("sdk-out", [1, 2]);
      return Ack();
    case "append_missing":
      return reportAppendError(() => append("no-such-stream", { a: 1 }));
    case "append_invalid":
      return reportAppendError(() => append("sdk-out", { a: 1 }, { partition: 7 }));
    case "append": {
      const ref = append(
        "sdk-out",
        { from: event.id, text: "héllo ✓" },
        { id: `${event.id}:out`, type: "checked", key: "k-1", metadata: { correlation_id: "c-9" } },
      );
      const again = append("sdk-out", { from: event.id }, { id: `${event.id}:out` });
      return Reject(
        JSON.stringify({
          id: ref.id,
          stream: ref.stream,
          partition: ref.partition,
          sequence: ref.sequence,
          duplicate: ref.duplicate,
          again_duplicate: again.duplicate,
          again_sequence: again.sequence,
        }),
      );
    }
    case "config":
      return Reject(`${JSON.stringify(config("greeting"))} ${JSON.stringify(config("missing"))}`);
    case "now":
      return Reject(String(nowMs()));
    case "delivery":
      return Reject(
        JSON.stringify({
          id: event.id,
          stream: event.stream,
          partition: event.partition,
          sequence: event.sequence,
          key: event.key,
          type: event.type,
          timestamp_ms: event.timestampMs,
          payload: event.payload,
          metadata: event.metadata,
          group: delivery.group,
          attempt: delivery.attempt,
          lease_id: delivery.leaseId,
        }),
      );
    case "log":
      log.info("sdk-check info line");
      log.warn("sdk-check warn line");
      log.error("sdk-check error line");
      console.log("sdk-check console line", { n: 1 });
      return Ack();
    case "sandbox":
      return sandbox();
    case "surrogate":
      // A lone surrogate cannot cross into the host as UTF-8 (the bindings
      // would trap): the SDK replaces it.
      return Reject("bad \udc80 byte");
    default:
      return Ack();
  }
});
