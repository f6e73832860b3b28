"""A consumer loop written against the Python client that openapi-python-client
generates from Rheo's OpenAPI document (`GET /v1/openapi.json`).

    python consumer.py http://127.0.0.1:7070 [--stream NAME] [--group NAME] [--token TOKEN]

The server must run with `rheo serve --test-clock`: the script sets the clock
and moves it to prove a nack's delay, never sleeping. It imports the generated
package `rheo_client` (install it, or put it on PYTHONPATH), and

1. creates a stream with 3 partitions and a group that starts after
   sequence 0 (`start_after` as an integer), appends 11 events (a batch of
   10 and one single append, repeated to see the idempotent duplicate);
2. runs a consumer loop: fetch → ack for good events, nack with a delay for
   the event marked `retry` on its first attempt, reject for the `poison`
   one, until a fetch comes back empty;
3. proves the delay: the nacked delivery is not fetchable before the delay
   ends (the clock moved to 1 ms before it) and is at its end, on attempt 2;
   the settled first lease is stale by then (409 `stale_lease`);
4. checks the dead letter (the poison event and the reason), that lag is 0
   in every partition (frontier = high watermark) and the group counters.

On success it prints one JSON line with what it did (`acked`, `nacked`,
`rejected`, `stale`, the stream and group) and exits 0; any mismatch exits 1
with a message naming what was expected and what came back. See
docs/http.md#generated-clients.
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
from typing import Any, NoReturn

from rheo_client import AuthenticatedClient, Client
from rheo_client.api.groups import group_create, group_info, group_lag
from rheo_client.api.leases import lease_ack, lease_fetch, lease_nack, lease_reject
from rheo_client.api.recovery import dead_letter_list
from rheo_client.api.streams import event_append, event_append_batch, stream_create
from rheo_client.api.test_clock import clock_move
from rheo_client.models import (
    AckBody,
    AppendBatchBody,
    AppendedBatchBody,
    AppendedBody,
    ClockBody,
    ClockMoveBody,
    CreateGroupBody,
    CreateStreamBody,
    DeadLetterPageBody,
    ErrorBody,
    EventInputBody,
    FetchBody,
    GroupBody,
    GroupInfoBody,
    JsonObject,
    LagBody,
    LeaseBody,
    LeaseListBody,
    NackBody,
    OkBody,
    RejectBody,
    StreamBody,
)
from rheo_client.types import UNSET, Response

# The test clock's start, and the nack delay proven below.
T0 = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
RETRY_DELAY_MS = 60_000
# A lease outlives every clock move below, so only the nack delay decides
# what is claimable.
LEASE_MS = 10 * RETRY_DELAY_MS
CONSUMER = "py-consumer-1"
PARTITIONS = 3


class Mismatch(Exception):
    """The server answered something other than what the script expects."""


def fail(message: str) -> NoReturn:
    raise Mismatch(message)


def check(condition: bool, message: str) -> None:
    if not condition:
        fail(message)


def describe(response: Response[Any]) -> str:
    body = response.content.decode("utf-8", "replace")
    return f"{int(response.status_code)} {body[:500]}"


def expect(response: Response[Any], status: int, kind: type, what: str) -> Any:
    """The parsed body of `response`, which must have `status` and parse as `kind`."""
    if int(response.status_code) != status or not isinstance(response.parsed, kind):
        fail(
            f"{what}: expected {status} with a {kind.__name__}, got {describe(response)}"
        )
    return response.parsed


def expect_error(response: Response[Any], status: int, code: str, what: str) -> None:
    """`response` must be the error `code` with `status`."""
    parsed = response.parsed
    if (
        int(response.status_code) != status
        or not isinstance(parsed, ErrorBody)
        or parsed.error.code != code
    ):
        fail(f"{what}: expected {status} {code}, got {describe(response)}")


class Consumer:
    def __init__(
        self, client: Client | AuthenticatedClient, stream: str, group: str
    ) -> None:
        self.client = client
        self.stream = stream
        self.group = group
        self.acked: list[str] = []
        self.nacked: list[str] = []
        self.rejected: list[str] = []
        self.stale = 0
        # The first lease of each nacked delivery, to show it is stale later.
        self.nacked_leases: dict[str, LeaseBody] = {}

    # --- setup ---------------------------------------------------------------

    def move_clock(
        self, *, set_to: datetime.datetime | None = None, advance_ms: int | None = None
    ) -> datetime.datetime:
        body = ClockMoveBody(
            set_=set_to if set_to is not None else UNSET,
            advance_ms=advance_ms if advance_ms is not None else UNSET,
        )
        now = expect(
            clock_move.sync_detailed(client=self.client, body=body),
            200,
            ClockBody,
            "POST /v1/test/clock",
        )
        return now.now

    def create(self) -> None:
        stream = expect(
            stream_create.sync_detailed(
                client=self.client,
                body=CreateStreamBody(name=self.stream, partition_count=PARTITIONS),
            ),
            201,
            StreamBody,
            "create the stream",
        )
        check(
            stream.partition_count == PARTITIONS,
            f"partition_count: {stream.partition_count}",
        )
        group = expect(
            group_create.sync_detailed(
                self.stream,
                client=self.client,
                body=CreateGroupBody(name=self.group, max_attempts=5, start_after=0),
            ),
            201,
            GroupBody,
            "create the group",
        )
        check(group.max_attempts == 5, f"max_attempts: {group.max_attempts}")

    def append(self) -> list[str]:
        """Appends the events; returns their ids."""
        inputs = []
        for n in range(10):
            payload: dict[str, Any] = {"n": n, "total": 10 * n}
            if n == 3:
                payload["retry"] = True
            if n == 7:
                payload["poison"] = True
            inputs.append(
                EventInputBody(
                    id=f"e-{n}",
                    type_="order.placed",
                    key=f"customer-{n % 4}",
                    payload=JsonObject.from_dict(payload),
                    metadata=JsonObject.from_dict({"source": "consumer.py"}),
                )
            )
        batch = expect(
            event_append_batch.sync_detailed(
                self.stream, client=self.client, body=AppendBatchBody(events=inputs)
            ),
            201,
            AppendedBatchBody,
            "append the batch",
        )
        ids = [appended.id for appended in batch.events]
        check(ids == [f"e-{n}" for n in range(10)], f"batch ids: {ids}")
        check(
            not any(a.duplicate for a in batch.events),
            "a fresh batch has no duplicates",
        )

        single = EventInputBody(
            id="e-10",
            type_="order.placed",
            partition=2,
            payload=JsonObject.from_dict({"n": 10, "total": 100}),
        )
        first = expect(
            event_append.sync_detailed(self.stream, client=self.client, body=single),
            201,
            AppendedBody,
            "append e-10",
        )
        check(
            first.partition == 2 and not first.duplicate,
            f"e-10: partition {first.partition}",
        )
        again = expect(
            event_append.sync_detailed(self.stream, client=self.client, body=single),
            200,
            AppendedBody,
            "append e-10 again",
        )
        check(
            again.duplicate and again.sequence == first.sequence,
            "the second append of e-10 is a duplicate",
        )
        return [*ids, "e-10"]

    # --- the loop ------------------------------------------------------------

    def fetch(self, limit: int = 4) -> list[LeaseBody]:
        leases = expect(
            lease_fetch.sync_detailed(
                self.stream,
                self.group,
                client=self.client,
                body=FetchBody(
                    limit=limit, lease_ms=LEASE_MS, consumer_id=CONSUMER, wait_ms=0
                ),
            ),
            200,
            LeaseListBody,
            "fetch",
        )
        for lease in leases.leases:
            check(
                lease.consumer_id == CONSUMER,
                f"{lease.event_id}: consumer {lease.consumer_id}",
            )
            check(
                lease.event.id == lease.event_id,
                f"{lease.event_id}: the lease carries its event",
            )
        return leases.leases

    def ack(self, lease: LeaseBody) -> None:
        body = AckBody(
            event_id=lease.event_id, lease_id=lease.lease_id, receipt=lease.receipt
        )
        expect(
            lease_ack.sync_detailed(
                self.stream, self.group, client=self.client, body=body
            ),
            200,
            OkBody,
            f"ack {lease.event_id}",
        )
        self.acked.append(lease.event_id)

    def nack(self, lease: LeaseBody, delay_ms: int) -> None:
        body = NackBody(
            event_id=lease.event_id,
            lease_id=lease.lease_id,
            receipt=lease.receipt,
            reason="asked to retry",
            delay_ms=delay_ms,
        )
        expect(
            lease_nack.sync_detailed(
                self.stream, self.group, client=self.client, body=body
            ),
            200,
            OkBody,
            f"nack {lease.event_id}",
        )
        self.nacked.append(lease.event_id)
        self.nacked_leases.setdefault(lease.event_id, lease)

    def reject(self, lease: LeaseBody, reason: str) -> None:
        body = RejectBody(
            event_id=lease.event_id,
            lease_id=lease.lease_id,
            receipt=lease.receipt,
            reason=reason,
        )
        expect(
            lease_reject.sync_detailed(
                self.stream, self.group, client=self.client, body=body
            ),
            200,
            OkBody,
            f"reject {lease.event_id}",
        )
        self.rejected.append(lease.event_id)

    def handle(self, lease: LeaseBody) -> None:
        """The consumer's decision for one delivery."""
        payload = lease.event.payload
        if payload.additional_properties.get("poison"):
            self.reject(lease, "poison marker")
        elif payload.additional_properties.get("retry") and lease.attempt == 1:
            self.nack(lease, RETRY_DELAY_MS)
        else:
            self.ack(lease)

    def drain(self) -> list[str]:
        """Fetches and handles until a fetch is empty; returns the event ids seen."""
        seen = []
        while leases := self.fetch():
            for lease in leases:
                seen.append(lease.event_id)
                self.handle(lease)
        return seen

    # --- checks --------------------------------------------------------------

    def lag(self) -> LagBody:
        return expect(
            group_lag.sync_detailed(self.stream, self.group, client=self.client),
            200,
            LagBody,
            "lag",
        )

    def prove_the_delay(self) -> None:
        """The nacked delivery waits out its delay, then comes back on attempt 2."""
        check(self.nacked == ["e-3"], f"nacked: {self.nacked}")
        # The frontier stops below the waiting delivery: its partition lags by
        # it and everything after it; the others are settled.
        waiting = self.nacked_leases["e-3"].event
        lag = self.lag()
        check(
            (lag.waiting_retry, lag.inflight, lag.pending) == (1, 0, 0),
            f"while e-3 waits: waiting_retry {lag.waiting_retry}, inflight {lag.inflight}, pending {lag.pending}",
        )
        for p, part in sorted(lag.partitions.additional_properties.items()):
            frontier = (
                waiting.sequence - 1
                if p == str(waiting.partition)
                else part.high_watermark
            )
            check(
                (part.frontier, part.lag) == (frontier, part.high_watermark - frontier),
                f"while e-3 waits, partition {p}: frontier {part.frontier}, lag {part.lag}, "
                f"high watermark {part.high_watermark}",
            )
        check(lag.lag >= 1, f"while e-3 waits: lag {lag.lag}")
        leases = self.fetch()
        check(
            leases == [], f"fetchable before the delay: {[l.event_id for l in leases]}"
        )
        self.move_clock(advance_ms=RETRY_DELAY_MS - 1)
        leases = self.fetch()
        check(
            leases == [],
            f"fetchable 1 ms before the delay ends: {[l.event_id for l in leases]}",
        )
        self.move_clock(advance_ms=1)
        leases = self.fetch()
        check(
            [(l.event_id, l.attempt) for l in leases] == [("e-3", 2)],
            f"at the end of the delay: {[(l.event_id, l.attempt) for l in leases]}",
        )
        # The first lease was settled by the nack: it can no longer ack.
        old = self.nacked_leases["e-3"]
        expect_error(
            lease_ack.sync_detailed(
                self.stream,
                self.group,
                client=self.client,
                body=AckBody(
                    event_id=old.event_id, lease_id=old.lease_id, receipt=old.receipt
                ),
            ),
            409,
            "stale_lease",
            "ack with the nacked lease",
        )
        self.stale += 1
        self.handle(leases[0])
        check(self.fetch() == [], "nothing left after the retry")

    def check_the_end(self, appended: list[str]) -> None:
        check(self.rejected == ["e-7"], f"rejected: {self.rejected}")
        expected_acks = sorted(set(appended) - {"e-7"})
        check(
            sorted(self.acked) == expected_acks,
            f"acked {sorted(self.acked)}, expected {expected_acks}",
        )

        page = expect(
            dead_letter_list.sync_detailed(self.stream, self.group, client=self.client),
            200,
            DeadLetterPageBody,
            "dead letters",
        )
        letters = [(d.event_id, d.attempt, d.reason) for d in page.dead_letters]
        check(len(letters) == 1 and letters[0][0] == "e-7", f"dead letters: {letters}")
        check(
            "poison marker" in letters[0][2],
            f"the dead letter keeps the reason: {letters}",
        )
        check(
            page.dead_letters[0].event.payload.additional_properties.get("poison")
            is True,
            "the dead letter's event",
        )
        check(page.next_ is None, f"one page of dead letters: next = {page.next_!r}")

        lag = self.lag()
        check(
            (lag.lag, lag.pending, lag.inflight, lag.waiting_retry) == (0, 0, 0, 0),
            f"lag {lag.lag}, pending {lag.pending}, inflight {lag.inflight}, waiting_retry {lag.waiting_retry}",
        )
        partitions = lag.partitions.additional_properties
        check(
            sorted(partitions) == [str(p) for p in range(PARTITIONS)],
            f"partitions: {sorted(partitions)}",
        )
        for p, part in sorted(partitions.items()):
            check(
                part.lag == 0 and part.frontier == part.high_watermark,
                f"partition {p}: frontier {part.frontier}, high watermark {part.high_watermark}, lag {part.lag}",
            )
        total = sum(part.high_watermark for part in partitions.values())
        check(
            total == len(appended),
            f"high watermarks add up to {total}, not {len(appended)}",
        )

        info = expect(
            group_info.sync_detailed(self.stream, self.group, client=self.client),
            200,
            GroupInfoBody,
            "group info",
        )
        check(
            (info.dead_letters, info.inflight, info.lag.lag) == (1, 0, 0),
            f"group info: dead_letters {info.dead_letters}, inflight {info.inflight}, lag {info.lag.lag}",
        )
        cursors = info.cursors.additional_properties
        for p, part in partitions.items():
            check(
                cursors.get(p) == part.high_watermark + 1,
                f"cursor of partition {p}: {cursors.get(p)}",
            )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "server", help="the server's base URL, e.g. http://127.0.0.1:7070"
    )
    parser.add_argument("--stream", default="orders")
    parser.add_argument("--group", default="billing")
    parser.add_argument("--token", help="the server's --auth-token")
    args = parser.parse_args()

    client: Client | AuthenticatedClient
    if args.token:
        client = AuthenticatedClient(
            base_url=args.server, token=args.token, timeout=60.0
        )
    else:
        client = Client(base_url=args.server, timeout=60.0)
    consumer = Consumer(client, args.stream, args.group)
    try:
        now = consumer.move_clock(set_to=T0)
        check(
            now == T0, f"the test clock is at {now.isoformat()}, not {T0.isoformat()}"
        )
        consumer.create()
        appended = consumer.append()
        seen = consumer.drain()
        check(sorted(seen) == sorted(appended), f"first pass saw {sorted(seen)}")
        consumer.prove_the_delay()
        consumer.check_the_end(appended)
    except Mismatch as mismatch:
        print(f"consumer.py: FAILED: {mismatch}", file=sys.stderr)
        return 1
    print(
        json.dumps(
            {
                "stream": consumer.stream,
                "group": consumer.group,
                "acked": len(consumer.acked),
                "nacked": len(consumer.nacked),
                "rejected": len(consumer.rejected),
                "stale": consumer.stale,
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
