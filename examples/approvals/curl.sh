#!/usr/bin/env bash
# Ask signoff whether one tool call may run, wait for the decision, print it.
#
# Any language that speaks HTTP does the same: POST the call to /api/approvals, then
# long-poll GET /api/approvals/<id>?wait=30 until it is no longer pending. Run the tool
# only when the answer says "allowed", with the "arguments" it gives (an approver may have
# edited them).
#
#   SIGNOFF_URL=http://127.0.0.1:8080 SIGNOFF_TOKEN=... examples/approvals/curl.sh
#
# Settings (environment):
#   SIGNOFF_URL      where signoff serves (default http://127.0.0.1:8080)
#   SIGNOFF_TOKEN    an API token (SIGNOFF_API_TOKENS, or the operator token)
#   AGENT, TOOL      who asks for what (default billing-bot, refund)
#   ARGUMENTS        the call's arguments, a JSON object
#   SESSION_ID       the conversation the call belongs to (grants of scope run cover it)
#   IDEMPOTENCY_KEY  asking again with the same key (after a crash, say) gives the same
#                    approval, never a second card; derive it from your own call id
#
# Prints one line when the request is pending ("pending <approval id> <ticket id>"), and
# the decision at the end; exits 0 when allowed, 1 when denied, 2 on an error.
set -euo pipefail

url="${SIGNOFF_URL:-http://127.0.0.1:8080}"
token="${SIGNOFF_TOKEN:?set SIGNOFF_TOKEN to an API token}"
agent="${AGENT:-billing-bot}"
tool="${TOOL:-refund}"
default_arguments='{"order": "A-1001", "amount": 42.5}'
arguments="${ARGUMENTS:-$default_arguments}"
session="${SESSION_ID:-conversation-1}"
key="${IDEMPOTENCY_KEY:-$tool-$(date +%s)-$$}"

api() {  # api METHOD PATH [BODY]: the answer's body; fails (exit 2) on a 4xx or 5xx
  local answer status body=()
  [[ $# -ge 3 ]] && body=(--data "$3")
  answer=$(curl --silent --show-error --max-time 90 --request "$1" "$url$2" \
    --header "Authorization: Bearer $token" \
    --header "Content-Type: application/json" \
    --header "Idempotency-Key: $key" \
    "${body[@]}" \
    --write-out '\n%{http_code}')
  status="${answer##*$'\n'}"
  answer="${answer%$'\n'*}"
  if [[ "$status" -ge 400 ]]; then
    echo "signoff answered $status: $answer" >&2
    exit 2
  fi
  printf '%s\n' "$answer"
}

request=$(jq --null-input --compact-output \
  --arg agent "$agent" --arg tool "$tool" --arg session "$session" \
  --argjson arguments "$arguments" \
  '{agent: $agent, tool: $tool, arguments: $arguments, session_id: $session,
    description: "asked from examples/approvals/curl.sh"}')

approval=$(api POST /api/approvals "$request")
id=$(jq --raw-output .approval_id <<<"$approval")

while [[ "$(jq --raw-output .status <<<"$approval")" == pending ]]; do
  echo "pending $id $(jq --raw-output .ticket_id <<<"$approval")"
  approval=$(api GET "/api/approvals/$id?wait=30")
done

jq --raw-output '"\(.status) by \(.decided_by // .basis) (\(.reason // "no reason given"))",
  "arguments: \(.arguments | tojson)", "decision_token: \(.decision_token)"' <<<"$approval"
[[ "$(jq --raw-output .status <<<"$approval")" == allowed ]] || exit 1
