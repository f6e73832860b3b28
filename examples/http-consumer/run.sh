#!/usr/bin/env bash
# A producer and a consumer over plain HTTP, with curl: a keyed stream,
# idempotent appends, a consumer group, fetch, ack, nack with a delay,
# reject, fencing, lag, dead letters and a query. Every request is printed
# with the server's answer. See README.md next to this file.
#
#   examples/http-consumer/run.sh
#
# RHEO_URL (default http://127.0.0.1:7070) names the server, RHEO_AUTH_TOKEN
# its token if it has one; STREAM and GROUP (default orders / billing) the
# names to use, which must not exist yet.
set -euo pipefail

url="${RHEO_URL:-http://127.0.0.1:7070}"
stream="${STREAM:-orders}"
group="${GROUP:-billing}"
auth=()
if [[ -n "${RHEO_AUTH_TOKEN:-}" ]]; then
  auth=(-H "authorization: Bearer $RHEO_AUTH_TOKEN")
fi
answer_file="$(mktemp)"
trap 'rm -f "$answer_file"' EXIT

# step TEXT: a heading.
step() { printf '\n==> %s\n' "$*"; }

# call METHOD PATH [JSON] [EXPECTED_STATUS]: sends the request, prints it and
# the answer, keeps the answer in $answer. Any 4xx/5xx other than
# EXPECTED_STATUS stops the script.
call() {
  local method=$1 path=$2 body=${3:-} expected=${4:-}
  local args=(-sS -X "$method" -o "$answer_file" -w '%{http_code}' "${auth[@]}")
  if [[ -n "$body" ]]; then
    args+=(-H 'content-type: application/json' --data "$body")
  fi
  local status
  status="$(curl "${args[@]}" "$url$path")"
  answer="$(cat "$answer_file")"
  printf '%s %s%s\n  -> %s %s\n' "$method" "$path" "${body:+ $body}" "$status" "$answer"
  if (( status >= 400 )) && [[ "$status" != "$expected" ]]; then
    echo "error: unexpected HTTP $status" >&2
    exit 1
  fi
}

# lease_of EVENT_ID: the lease id the last fetch answer holds for that event.
# (Each lease object starts with its lease_id; splitting the answer there
# puts every lease's fields, event_id included, on a line of their own.)
lease_of() {
  local line
  while IFS= read -r line; do
    if [[ "$line" == *"\"event_id\":\"$1\""* ]]; then
      printf '%s\n' "${line%%\"*}"
      return
    fi
  done < <(sed 's/{"lease_id":"/\n/g' <<<"$answer")
  echo "error: no lease for $1 in: $answer" >&2
  exit 1
}

s="/v1/streams/$stream"
g="$s/groups/$group"

step "1. create stream $stream with 2 partitions"
call POST /v1/streams "{\"name\": \"$stream\", \"partition_count\": 2}"

step "2. append with keys: one key always lands in one partition (Kafka's murmur2)"
call POST "$s/events" '{"id": "o-1", "type": "order.placed", "key": "customer-7", "payload": {"total": 120}, "metadata": {"correlation_id": "checkout-1"}}'
call POST "$s/events/batch" '{"events": [
  {"id": "o-2", "type": "order.placed", "key": "customer-3", "payload": {"total": 35}},
  {"id": "o-3", "type": "order.placed", "key": "customer-7", "payload": {"total": -5}}]}'

step "3. append o-1 again: a known id is not stored twice (200, duplicate: true)"
call POST "$s/events" '{"id": "o-1", "type": "order.placed", "key": "customer-7", "payload": {"total": 120}}'

step "4. create group $group (3 attempts per delivery)"
call POST "$s/groups" "{\"name\": \"$group\", \"max_attempts\": 3}"

step "5. fetch: one lease per event, sorted by (partition, sequence)"
call POST "$g/fetch" '{"limit": 10, "lease_ms": 30000, "consumer_id": "worker-1"}'
lease1="$(lease_of o-1)"
lease2="$(lease_of o-2)"
lease3="$(lease_of o-3)"

step "6. ack o-1, nack o-2 for a retry in 60 s, reject o-3 (a dead letter)"
call POST "$g/ack" "{\"event_id\": \"o-1\", \"lease_id\": \"$lease1\"}"
call POST "$g/nack" "{\"event_id\": \"o-2\", \"lease_id\": \"$lease2\", \"reason\": \"payment service busy\", \"delay_ms\": 60000}"
call POST "$g/reject" "{\"event_id\": \"o-3\", \"lease_id\": \"$lease3\", \"reason\": \"total must be positive\"}"

step "7. fencing: a settled lease cannot settle again (409 stale_lease)"
call POST "$g/ack" "{\"event_id\": \"o-1\", \"lease_id\": \"$lease1\"}" 409

step "8. fetch again: nothing is claimable until o-2's retry is due"
call POST "$g/fetch" '{"limit": 10}'

step "9. lag: frontier and high watermark per partition; o-2 waits for its retry"
call GET "$g/lag"

step "10. dead letters: o-3 with its reason and the event"
call GET "$g/dead-letters"

step "11. query the history (never touches the group): totals of 100 or more, newest first"
call POST "$s/query" '{"where": {"payload.total": {"$gte": 100}}, "order_by": [{"field": "sequence", "dir": "desc"}]}'
call POST "$s/query" '{"where": {"correlation_id": "checkout-1"}}'

printf '\ndone: o-1 acked, o-2 due again in 60 s, o-3 dead-lettered (redrive: POST %s/dead-letters/redrive {"all": true})\n' "$g"
