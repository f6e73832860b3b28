// Unit tests of the rheo-handler SDK outside WebAssembly: the SDK is bound
// to a fake host and fed deliveries shaped like the WIT bindings'. What needs
// a real component and host is checked by tests/tests/polyglot.rs.
//
//     node --test guests/js/tests/sdk.test.js
//
// (Node ≥ 18; nothing to install.)

import assert from "node:assert/strict";
import { afterEach, beforeEach, describe, test } from "node:test";

import * as sdk from "../sdk/rheo-handler.js";

const { Ack, AppendError, Reject, Retry } = sdk;

function delivery(payload = '{"n": 1}', metadata = "{}", attempt = 1, id = "e-1") {
  return {
    event: {
      id,
      stream: "in",
      partition: 2,
      sequence: 7,
      key: "k",
      type: "t",
      timestampMs: 1_700_000_000_000,
      payload,
      metadata,
    },
    group: "g",
    attempt,
    leaseId: "lease-1",
  };
}

// Records host calls; `appendAnswer` is returned, or thrown when `appendThrows`.
class FakeHost {
  constructor() {
    this.logs = [];
    this.appended = [];
    this.config = new Map([["k", "v"]]);
    this.appendAnswer = { id: "x", stream: "out", partition: 0, sequence: 1, duplicate: false };
    this.appendThrows = false;
  }

  log(level, message) {
    this.logs.push([level, message]);
  }

  configGet(key) {
    // The bindings answer an absent option with undefined or null.
    return this.config.get(key);
  }

  nowMs() {
    return 42;
  }

  append(stream, event) {
    this.appended.push([stream, event]);
    if (this.appendThrows) {
      // As the bindings throw a WIT error: an Error carrying the variant.
      const error = new Error("append failed");
      error.payload = this.appendAnswer;
      throw error;
    }
    return this.appendAnswer;
  }
}

let host;

function run(fn, d = delivery()) {
  sdk.unregister();
  sdk.handler(fn);
  return sdk.dispatch(d);
}

function assertRetry(outcome, reason, delayMs = null) {
  assert.deepEqual(outcome, { tag: "retry", val: { reason, delayMs } });
}

beforeEach(() => {
  host = new FakeHost();
  sdk.bind(host);
  sdk.unregister();
});

afterEach(() => {
  sdk.unregister();
  sdk.bind(null);
});

describe("dispatch", () => {
  test("the handler sees a parsed delivery", () => {
    const seen = [];
    const outcome = run(
      (d) => {
        seen.push(d);
      },
      delivery('{"n": 1, "s": "é"}', '{"correlation_id": "c"}', 3),
    );
    const d = seen[0];
    assert.deepEqual(
      [d.event.id, d.event.stream, d.event.partition, d.event.sequence],
      ["e-1", "in", 2, 7],
    );
    assert.deepEqual([d.event.key, d.event.type, d.event.timestampMs], ["k", "t", 1_700_000_000_000]);
    assert.deepEqual(d.event.payload, { n: 1, s: "é" });
    assert.deepEqual(d.event.metadata, { correlation_id: "c" });
    assert.deepEqual([d.group, d.attempt, d.leaseId], ["g", 3, "lease-1"]);
    assert.ok(Object.isFrozen(d) && Object.isFrozen(d.event));
    // Nothing returned: not an outcome.
    assert.equal(outcome.tag, "retry");
  });

  test("an absent key and type are null", () => {
    const d = delivery();
    d.event.key = undefined;
    d.event.type = null;
    const seen = [];
    run((x) => {
      seen.push(x);
      return Ack();
    }, d);
    assert.deepEqual([seen[0].event.key, seen[0].event.type], [null, null]);
  });

  test("outcomes map to the WIT variant", () => {
    assert.deepEqual(run(() => Ack()), { tag: "ack" });
    assert.deepEqual(run(() => new Ack()), { tag: "ack" });
    assertRetry(run(() => Retry("later")), "later");
    assertRetry(run(() => Retry("later", { delayMs: 250 })), "later", 250);
    assertRetry(run(() => Retry("later", { delayMs: 0 })), "later", 0);
    assertRetry(run(() => Retry("later", {})), "later");
    assert.deepEqual(run(() => Reject("no")), { tag: "reject", val: "no" });
    assert.deepEqual(run(() => Reject(7)), { tag: "reject", val: "7" });
  });

  test("outcomes are frozen and print like the calls that made them", () => {
    assert.ok(Object.isFrozen(Retry("x")));
    assert.equal(String(Ack()), "Ack()");
    assert.equal(String(Retry("x", { delayMs: 5 })), 'Retry("x", {delayMs: 5})');
    assert.equal(String(Reject("no")), 'Reject("no")');
  });

  test("bad JSON is a retry and the handler is not called", () => {
    const called = [];
    for (const [payload, metadata, expected] of [
      ["{not json", "{}", "rheo-handler: the payload of event e-1 is not JSON: "],
      ["[1, 2]", "{}", "rheo-handler: the payload of event e-1 is a JSON array, not an object"],
      ["", "{}", "rheo-handler: the payload of event e-1 is not JSON: "],
      ["{}", "null", "rheo-handler: the metadata of event e-1 is a JSON null, not an object"],
      ["7", "{}", "rheo-handler: the payload of event e-1 is a JSON number, not an object"],
    ]) {
      const outcome = run((d) => called.push(d), delivery(payload, metadata));
      assert.equal(outcome.tag, "retry");
      assert.ok(outcome.val.reason.startsWith(expected), outcome.val.reason);
    }
    assert.deepEqual(called, []);
  });

  test("an exception is a retry with its name and message, and its stack is logged", () => {
    assertRetry(
      run(() => {
        throw new TypeError("missing");
      }),
      "TypeError: missing",
    );
    const [level, message] = host.logs.at(-1);
    assert.equal(level, "error");
    assert.ok(message.startsWith("handler threw on event e-1 (attempt 1): TypeError: missing"), message);
    assert.match(message, /sdk\.test\.js/);

    class Quiet extends Error {}
    assertRetry(
      run(() => {
        throw new Quiet();
      }),
      "Quiet",
    );
    class Named extends Error {
      constructor() {
        super("with a name");
        this.name = "Named";
      }
    }
    assertRetry(
      run(() => {
        throw new Named();
      }),
      "Named: with a name",
    );
    assertRetry(
      run(() => {
        throw "plain text";
      }),
      'a thrown string: "plain text"',
    );
    assertRetry(
      run(() => {
        throw { code: 7 };
      }),
      'a thrown object: {"code":7}',
    );
    assertRetry(
      run(() => {
        throw undefined;
      }),
      "a thrown undefined: undefined",
    );
  });

  test("anything else returned is a retry that names it", () => {
    assertRetry(
      run(() => "ack"),
      'rheo-handler: the handler returned "ack" (string), not Ack(), Retry(reason) or Reject(reason)',
    );
    assertRetry(
      run(() => {}),
      "rheo-handler: the handler returned undefined (a missing return?), not Ack(), Retry(reason) or Reject(reason)",
    );
    assertRetry(
      run(() => ({ tag: "ack" })),
      'rheo-handler: the handler returned {"tag":"ack"} (object), not Ack(), Retry(reason) or Reject(reason)',
    );
    assert.match(run(() => Ack).val.reason, /returned function Ack \(function\)/);
    assert.ok(run(() => "x".repeat(1000)).val.reason.length < 400);
  });

  test("a Promise (an async handler) is a retry that says handlers are synchronous", () => {
    const outcome = run(async () => Ack());
    assert.equal(outcome.tag, "retry");
    assert.ok(
      outcome.val.reason.startsWith("rheo-handler: the handler returned a Promise (an async function?)"),
      outcome.val.reason,
    );
  });

  test("delays are whole numbers from 0 to 2^64 - 1, BigInts included", () => {
    assertRetry(run(() => Retry("later", { delayMs: 2 ** 60 })), "later", 2 ** 60);
    assertRetry(run(() => Retry("later", { delayMs: 2 ** 64 - 2048 })), "later", 2 ** 64 - 2048);
    assertRetry(run(() => Retry("later", { delayMs: 10n })), "later", 10);
    assertRetry(run(() => Retry("later", { delayMs: 2n ** 64n - 1n })), "later", 2 ** 64 - 2048);
  });

  test("a bad delay falls back to the backoff with a note", () => {
    for (const [delay, shown] of [
      [-1, "-1"],
      [1.5, "1.5"],
      [true, "true"],
      [2 ** 64, "18446744073709552000"],
      ["10", '"10"'],
      [-1n, "-1n"],
      [2n ** 64n, "18446744073709551616n"],
      [NaN, "NaN"],
      [Infinity, "Infinity"],
    ]) {
      const outcome = run(() => Retry("later", { delayMs: delay }));
      assert.equal(outcome.val.delayMs, null);
      assert.ok(
        outcome.val.reason.startsWith(`later (rheo-handler: delayMs ${shown} is not a whole number`),
        outcome.val.reason,
      );
    }
    // Not an options object: Retry itself throws, which is a retry too.
    assert.match(run(() => Retry("later", 500)).val.reason, /^TypeError: Retry\(reason, options\)/);
  });

  test("reasons survive lone surrogates", () => {
    assert.deepEqual(run(() => Reject("bad \udc80 byte \ud83d")), {
      tag: "reject",
      val: "bad \ufffd byte \ufffd",
    });
    assert.deepEqual(run(() => Reject("pair \ud83d\ude00 kept")), {
      tag: "reject",
      val: "pair \ud83d\ude00 kept",
    });
  });

  test("no handler is a retry", () => {
    assertRetry(
      sdk.dispatch(delivery()),
      "rheo-handler: no handler registered (call handler(fn) in app.js)",
    );
  });

  test("a second handler is refused", () => {
    const first = () => Ack();
    assert.equal(sdk.handler(first), first);
    assert.equal(sdk.handler(first), first);
    assert.throws(() => sdk.handler(() => Ack()), /two handlers registered/);
    assert.throws(() => sdk.handler("not a function"), TypeError);
  });

  test("a delivery the SDK cannot read is a retry, not a throw", () => {
    sdk.handler(() => Ack());
    const outcome = sdk.dispatch({});
    assert.equal(outcome.tag, "retry");
    assert.ok(outcome.val.reason.startsWith("rheo-handler: TypeError"), outcome.val.reason);
  });
});

describe("dispatchBatch", () => {
  function runBatch(fn, deliveries) {
    sdk.unregister();
    sdk.batchHandler(fn);
    return sdk.dispatchBatch(deliveries);
  }

  test("a batch handler answers each delivery in order", () => {
    const seen = [];
    const outcomes = runBatch(
      (ds) => {
        seen.push(ds.map((d) => d.event.id));
        return ds.map((d) => ({ ack: Ack(), retry: Retry("later", { delayMs: 50 }), reject: Reject("no") })[d.event.payload.do]);
      },
      [
        delivery('{"do": "reject"}', "{}", 1, "e-1"),
        delivery("{not json", "{}", 1, "e-2"),
        delivery('{"do": "ack"}', "{}", 1, "e-3"),
        delivery('{"do": "retry"}', "{}", 1, "e-4"),
      ],
    );
    // e-2 never reached the handler: its JSON does not parse.
    assert.deepEqual(seen, [["e-1", "e-3", "e-4"]]);
    assert.deepEqual(outcomes[0], { tag: "reject", val: "no" });
    assert.ok(outcomes[1].val.reason.startsWith("rheo-handler: the payload of event e-2 is not JSON"));
    assert.deepEqual(outcomes[2], { tag: "ack" });
    assertRetry(outcomes[3], "later", 50);
    // `handle` of a batch handler is a batch of one.
    assert.deepEqual(sdk.dispatch(delivery('{"do": "ack"}')), { tag: "ack" });
    assert.deepEqual(seen.at(-1), ["e-1"]);
  });

  test("a batch handler that throws or miscounts retries the whole batch", () => {
    const two = [delivery("{}", "{}", 1, "e-1"), delivery("{}", "{}", 1, "e-2")];
    for (const outcome of runBatch(() => {
      throw new Error("db down");
    }, two)) {
      assertRetry(outcome, "Error: db down");
    }
    assert.ok(host.logs.at(-1)[1].includes("handler threw on a batch of 2 deliveries from event e-1"));
    for (const outcome of runBatch(() => [Ack()], two)) {
      assertRetry(outcome, "rheo-handler: the batch handler returned 1 outcomes for 2 deliveries");
    }
    for (const outcome of runBatch(() => Ack(), two)) {
      assert.ok(outcome.val.reason.endsWith("not an array of outcomes"), outcome.val.reason);
    }
  });

  test("a handler asked for a batch runs on each delivery in turn", () => {
    sdk.handler((d) => (d.event.id === "e-1" ? Ack() : Reject(d.event.id)));
    const outcomes = sdk.dispatchBatch([delivery("{}", "{}", 1, "e-1"), delivery("{}", "{}", 1, "e-2")]);
    assert.deepEqual(outcomes, [{ tag: "ack" }, { tag: "reject", val: "e-2" }]);
  });

  test("a batch handler and a handler are two handlers", () => {
    sdk.batchHandler(() => []);
    assert.throws(() => sdk.handler(() => Ack()), /two handlers registered/);
  });
});

describe("host functions", () => {
  test("logConsole writes log lines, and nothing before the host is bound", () => {
    sdk.logConsole.log("a", 1, { b: [2] }, null);
    sdk.logConsole.info("i");
    sdk.logConsole.debug("d");
    sdk.logConsole.warn("w");
    sdk.logConsole.error(new RangeError("e"));
    sdk.logConsole.trace("t");
    assert.deepEqual(host.logs.slice(0, 5), [
      ["info", 'a 1 {"b":[2]} null'],
      ["info", "i"],
      ["debug", "d"],
      ["warn", "w"],
      ["error", host.logs[4][1]],
    ]);
    assert.match(host.logs[4][1], /^RangeError: e\n/);
    assert.deepEqual(host.logs[5], ["trace", "t"]);
    sdk.bind(null);
    sdk.logConsole.log("dropped");
    assert.equal(host.logs.length, 6);
    // Node has a console of its own, which the SDK leaves alone.
    assert.notEqual(globalThis.console, sdk.logConsole);
  });

  test("log, config and nowMs call the host", () => {
    sdk.log.trace("t");
    sdk.log.debug("d");
    sdk.log.info("i");
    sdk.log.warn("w");
    sdk.log.error(7);
    assert.deepEqual(host.logs, [
      ["trace", "t"],
      ["debug", "d"],
      ["info", "i"],
      ["warn", "w"],
      ["error", "7"],
    ]);
    assert.equal(sdk.config("k"), "v");
    assert.equal(sdk.config("nope"), null);
    assert.equal(sdk.nowMs(), 42);
  });

  test("without a bound host they say so", () => {
    sdk.bind(null);
    assert.throws(() => sdk.nowMs(), /the host is not available yet/);
  });

  test("append sends JSON text and answers a ref", () => {
    const ref = sdk.append(
      "out",
      { a: [1, "é"] },
      { id: "x", type: "t", key: "k", partition: 1, metadata: { correlation_id: "c" } },
    );
    assert.deepEqual(ref, { id: "x", stream: "out", partition: 0, sequence: 1, duplicate: false });
    let [stream, event] = host.appended.at(-1);
    assert.equal(stream, "out");
    assert.deepEqual([event.id, event.type, event.key, event.partition], ["x", "t", "k", 1]);
    assert.deepEqual(JSON.parse(event.payload), { a: [1, "é"] });
    assert.deepEqual(JSON.parse(event.metadata), { correlation_id: "c" });
    sdk.append("out", {});
    [, event] = host.appended.at(-1);
    assert.deepEqual(event, {
      id: null,
      type: null,
      key: null,
      partition: null,
      payload: "{}",
      metadata: "",
    });
  });

  test("append refuses what the host could never take", () => {
    for (const call of [
      () => sdk.append("out", [1]),
      () => sdk.append("out", null),
      () => sdk.append("out", {}, { metadata: "{}" }),
      () => sdk.append(7, {}),
      () => sdk.append("out", {}, { id: 5 }),
      () => sdk.append("out", {}, { partition: -1 }),
      () => sdk.append("out", {}, { partition: 1.5 }),
      () => sdk.append("out", {}, { partition: true }),
      () => sdk.append("out", {}, { partition: 2 ** 32 }),
      () => sdk.append("out", {}, "options"),
      () => sdk.append("out", { big: 1n }),
    ]) {
      assert.throws(call, (error) => error instanceof TypeError || error instanceof RangeError);
    }
    assert.deepEqual(host.appended, []);
  });

  test("append errors become AppendError", () => {
    host.appendThrows = true;
    let caught;
    for (const [error, kind, detail, retryable] of [
      [{ tag: "stream-not-found" }, "stream_not_found", "", false],
      [{ tag: "invalid", val: "bad id" }, "invalid", "bad id", false],
      [{ tag: "not-allowed", val: "not listed" }, "not_allowed", "not listed", false],
      [{ tag: "unavailable", val: "down" }, "unavailable", "down", true],
    ]) {
      host.appendAnswer = error;
      assert.throws(() => sdk.append("out", {}), AppendError);
      try {
        sdk.append("out", {});
      } catch (e) {
        caught = e;
      }
      assert.deepEqual([caught.kind, caught.detail, caught.retryable], [kind, detail, retryable]);
    }
    assert.equal(caught.message, "unavailable: down");
    assert.equal(String(caught), "AppendError: unavailable: down");
    host.appendAnswer = { tag: "something-new" };
    try {
      sdk.append("out", {});
    } catch (e) {
      caught = e;
    }
    assert.deepEqual([caught.kind, caught.detail], ["unavailable", "Error: append failed"]);
  });
});
