#!/bin/bash
# Three sub-goals, each 0..1; reward.json holds each and their mean as "reward".
mkdir -p /logs/verifier
report=/app/report

files=0
[ -f "$report/summary.txt" ] && files=$((files + 1))
[ -f "$report/publish.sh" ] && files=$((files + 1))
files=$(awk -v n="$files" 'BEGIN { printf "%.3f", n / 2 }')

content=0.0
if [ -f "$report/summary.txt" ] && [ "$(head -n 1 "$report/summary.txt")" = "status: ok" ]; then
    content=1.0
fi

perms=0.0
[ -f "$report/publish.sh" ] && [ -x "$report/publish.sh" ] && perms=1.0

reward=$(awk -v a="$files" -v b="$content" -v c="$perms" 'BEGIN { printf "%.3f", (a + b + c) / 3 }')
printf '{"reward": %s, "files": %s, "content": %s, "perms": %s}\n' \
    "$reward" "$files" "$content" "$perms" > /logs/verifier/reward.json
cat /logs/verifier/reward.json
exit 0
