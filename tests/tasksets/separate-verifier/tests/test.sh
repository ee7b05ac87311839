#!/bin/bash
# Each check says what it proves; the reward is 1 only if all hold.
ok=1
check() { if eval "$2"; then echo "ok: $1"; else echo "FAILED: $1"; ok=0; fi; }
check "the declared artifact is at its own path" 'grep -qx 42 /app/out/answer.txt'
check "the collect hook's snapshot came through /logs/artifacts" 'grep -qx snapshot /logs/artifacts/state.txt'
check "nothing undeclared came over" '[ ! -e /app/undeclared.txt ] && [ ! -e /app/state.txt ]'
check "this is the verifier's own image" 'grep -qx separate /etc/verifier-image && ! command -v python3 >/dev/null'
check "the tests are the image's" '[ -f /tests/helper.txt ]'
check "[verifier] env is set" '[ "$JUDGE_NOTE" = from-verifier-env ]'
check "the task's no-network holds" '[ "$(ls /sys/class/net)" = lo ]'
echo $ok > /logs/verifier/reward.txt
