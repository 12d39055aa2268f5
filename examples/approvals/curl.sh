#!/usr/bin/env bash
# Ask signoff whether one tool call may run, wait for the decision, run the call with the
# arguments the decision gives, and report what happened.
#
# Any language that speaks HTTP does the same (see docs/approvals-api.md): POST the call
# to /api/approvals with an Idempotency-Key, long-poll GET /api/approvals/<id>?wait=30
# until it is no longer pending, run the tool only when the answer says "allowed", with
# the answer's "arguments" (an approver may have edited them), then POST the outcome to
# /api/approvals/<id>/outcome. signoff authorises and records; it never runs the tool.
#
#   SIGNOFF_URL=http://127.0.0.1:8080 SIGNOFF_TOKEN=... examples/approvals/curl.sh
#
# Needs bash, curl and python3 (for JSON; no jq).
#
# Settings (environment):
#   SIGNOFF_URL      where signoff serves (default http://127.0.0.1:8080)
#   SIGNOFF_TOKEN    an API token (an entry of SIGNOFF_API_TOKENS, or the operator token)
#   AGENT, TOOL      who asks for what (default billing-bot, refund)
#   ARGUMENTS        the call's arguments, a JSON object
#   DESCRIPTION      why the call is made (shown on the card)
#   SESSION_ID       the conversation the call belongs to (grants of scope run cover it)
#   IDEMPOTENCY_KEY  asking again with the same key (after a crash, say) gives the same
#                    approval, never a second card; derive it from your own call id
#   TOOL_COMMAND     runs the call once allowed: a command that gets the arguments to run
#                    with (a JSON object) as its one argument; exit 0 reports succeeded,
#                    anything else failed, with its output's last line as the summary.
#                    Unset: nothing runs and OUTCOME (default succeeded) is reported,
#                    with SUMMARY if set.
#   WAIT_SECONDS     how long one long poll waits (1 to 60, default 30)
#   GIVE_UP_SECONDS  how long to keep asking while signoff cannot be reached, or answers
#                    503 (default 600)
#   PYTHON           the Python that reads JSON (default python3)
#
# Prints "pending <approval id> <ticket id>" before each long poll, then the decision
# ("allowed by <who> (<reason>)" or "denied by ..."), "arguments: <JSON>", the decision
# token and "outcome: <status>". Exits 0 when allowed, 1 when denied, 2 on an error.
# Asking again with the key of an approval whose outcome is already reported prints the
# same decision and that outcome, and runs nothing a second time.
set -euo pipefail

url="${SIGNOFF_URL:-http://127.0.0.1:8080}"
url="${url%/}"
token="${SIGNOFF_TOKEN:?set SIGNOFF_TOKEN to an API token}"
agent="${AGENT:-billing-bot}"
tool="${TOOL:-refund}"
default_arguments='{"order": "A-1001", "amount": 42.5}'
arguments="${ARGUMENTS:-$default_arguments}"
description="${DESCRIPTION:-asked from examples/approvals/curl.sh}"
session="${SESSION_ID:-conversation-1}"
key="${IDEMPOTENCY_KEY:-$agent-$tool-$(date +%s)-$$}"
wait_seconds="${WAIT_SECONDS:-30}"
give_up="${GIVE_UP_SECONDS:-600}"
python="${PYTHON:-python3}"

fail() {
  echo "curl.sh: $*" >&2
  exit 2
}

field() {  # field NAME: the top-level field NAME of the JSON on stdin ("" for null)
  "$python" -c '
import json, sys
value = json.load(sys.stdin).get(sys.argv[1])
print("" if value is None else value if isinstance(value, str) else json.dumps(value))
' "$1"
}

api() {  # api METHOD PATH [BODY]: the answer's body; retries while signoff is unreachable
  local method=$1 path=$2 body=${3-} started=$SECONDS delay=0.5 answer status code
  local headers=(--header "Authorization: Bearer $token")
  if [[ -n $body ]]; then
    headers+=(--header "Content-Type: application/json" --data "$body")
  fi
  if [[ $method == POST && $path == /api/approvals ]]; then
    headers+=(--header "Idempotency-Key: $key")
  fi
  while true; do
    code=0
    answer=$(curl --silent --show-error --max-time $((${wait_seconds%.*} + 30)) \
      --request "$method" "${headers[@]}" --write-out '\n%{http_code}' "$url$path") || code=$?
    status="${answer##*$'\n'}"
    answer="${answer%$'\n'*}"
    case "$code:$status" in
      0:2??) printf '%s\n' "$answer"; return 0 ;;
      0:503 | 0:502 | 0:504) why="signoff answered $status" ;;
      0:*) fail "signoff answered $status to $method $path: $answer" ;;
      7:* | 28:* | 52:* | 55:* | 56:*) why="signoff did not answer (curl exit $code)" ;;
      *) fail "curl failed (exit $code) on $method $path" ;;
    esac
    if ((SECONDS - started >= give_up)); then
      fail "$why; gave up after $give_up s"
    fi
    echo "curl.sh: $why; asking again in ${delay}s" >&2
    sleep "$delay"
    delay=$("$python" -c 'import sys; print(min(float(sys.argv[1]) * 2, 5))' "$delay")
  done
}

request=$(AGENT="$agent" TOOL="$tool" ARGUMENTS="$arguments" SESSION="$session" \
  DESCRIPTION="$description" "$python" -c '
import json, os
print(json.dumps({
    "agent": os.environ["AGENT"],
    "tool": os.environ["TOOL"],
    "arguments": json.loads(os.environ["ARGUMENTS"]),
    "session_id": os.environ["SESSION"],
    "description": os.environ["DESCRIPTION"],
}))') || fail "ARGUMENTS is not a JSON object: $arguments"

approval=$(api POST /api/approvals "$request")
id=$(field approval_id <<<"$approval")
status=$(field status <<<"$approval")

while [[ $status == pending ]]; do
  echo "pending $id $(field ticket_id <<<"$approval")"
  approval=$(api GET "/api/approvals/$id?wait=$wait_seconds")
  status=$(field status <<<"$approval")
done

decided_by=$(field decided_by <<<"$approval")
reason=$(field reason <<<"$approval")
to_run=$(field arguments <<<"$approval")
echo "$status by ${decided_by:-$(field basis <<<"$approval")} (${reason:-no reason given})"
echo "arguments: $to_run"
echo "decision_token: $(field decision_token <<<"$approval")"
[[ $status == allowed ]] || exit 1

reported=$(field outcome <<<"$approval")
if [[ -n $reported ]]; then  # asked again after the call ran: never run it twice
  echo "outcome: $(field status <<<"$reported") (reported before)"
  exit 0
fi

if [[ -n ${TOOL_COMMAND:-} ]]; then
  ran=0
  output=$(bash -c "$TOOL_COMMAND \"\$1\"" "$tool" "$to_run" 2>&1) || ran=$?
  outcome=$([[ $ran == 0 ]] && echo succeeded || echo failed)
  summary="${output##*$'\n'}"
else
  outcome="${OUTCOME:-succeeded}"
  summary="${SUMMARY:-}"
fi
report=$(OUTCOME="$outcome" SUMMARY="${summary:0:4000}" "$python" -c '
import json, os
print(json.dumps({"status": os.environ["OUTCOME"], "summary": os.environ["SUMMARY"] or None}))')
answered=$(api POST "/api/approvals/$id/outcome" "$report")
echo "outcome: $(field outcome <<<"$answered" | field status)"
