#!/usr/bin/env bash
# A handler pipeline: deploys the `transform` example guest with
# transform.toml, appends events to "signups", waits until the handler has
# settled them all, and shows the derived events in "signups-enriched".
# See README.md next to this file.
#
#   examples/handler-pipeline/run.sh [path/to/transform.wasm]
#
# RHEO_URL (default http://127.0.0.1:7070) names the server, RHEO_AUTH_TOKEN
# its token if it has one. RHEO names the rheo binary (default: `rheo` on
# PATH). The module defaults to TRANSFORM_WASM, else to where
# `cargo build --release --target wasm32-wasip2 --manifest-path guests/Cargo.toml`
# puts it. COUNT (default 20) events are appended.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
url="${RHEO_URL:-http://127.0.0.1:7070}"
rheo="${RHEO:-rheo}"
count="${COUNT:-20}"
module="${1:-${TRANSFORM_WASM:-$here/../../guests/target/wasm32-wasip2/release/transform.wasm}}"
if [[ ! -f "$module" ]]; then
  echo "error: no module at $module; build the example guests with:" >&2
  echo "  cargo build --release --target wasm32-wasip2 --manifest-path guests/Cargo.toml" >&2
  exit 1
fi
auth=()
if [[ -n "${RHEO_AUTH_TOKEN:-}" ]]; then
  auth=(-H "authorization: Bearer $RHEO_AUTH_TOKEN")
fi
export RHEO_SERVER="$url"

step() { printf '\n==> %s\n' "$*"; }

# post PATH JSON: prints the request and the answer; stops on an HTTP error.
post() {
  printf 'POST %s\n  -> ' "$1"
  curl -sS --fail-with-body "${auth[@]}" -H 'content-type: application/json' --data "$2" "$url$1"
  printf '\n'
}

# lag: the enrich group's total lag.
lag() {
  curl -sS --fail-with-body "${auth[@]}" "$url/v1/streams/signups/groups/enrich/lag" \
    | sed -n 's/^{"stream":"[^"]*","group":"[^"]*","lag":\([0-9]*\),.*/\1/p'
}

step "1. create the source and target streams"
post /v1/streams '{"name": "signups", "partition_count": 2}'
post /v1/streams '{"name": "signups-enriched"}'

step "2. deploy the transform guest as handler \"enrich\" (the group is created for it)"
"$rheo" handler deploy enrich --manifest "$here/transform.toml" --module "$module"

step "3. append $count events to signups"
events=""
for ((i = 1; i <= count; i++)); do
  events+="${events:+,}{\"id\": \"s-$i\", \"type\": \"user.signed_up\", \"key\": \"user-$i\", \"payload\": {\"n\": $i}, \"metadata\": {\"correlation_id\": \"batch-1\"}}"
done
post /v1/streams/signups/events/batch "{\"events\": [$events]}" >/dev/null
echo "appended s-1 … s-$count"

step "4. wait until the handler has settled every event (lag 0, at most 30 s)"
for ((tries = 0; ; tries++)); do
  left="$(lag)"
  [[ "$left" == 0 ]] && break
  if (( tries >= 300 )); then
    echo "error: lag is still $left after 30 s" >&2
    exit 1
  fi
  sleep 0.1
done
"$rheo" lag signups enrich

step "5. the derived events: one per source event, caused by it"
post /v1/streams/signups-enriched/query '{"where": {"causation_id": "s-1"}}'
"$rheo" query signups-enriched --where '{"correlation_id": "batch-1"}' --limit 5

step "6. the handler: version, digest and counters"
"$rheo" handler list
