#!/bin/bash
# Reward 1 when /app/hello.txt holds exactly "hello" (surrounding whitespace ignored), else 0.
mkdir -p /logs/verifier
if [ -f /app/hello.txt ] && [ "$(tr -d '[:space:]' < /app/hello.txt)" = "hello" ]; then
    echo 1 > /logs/verifier/reward.txt
else
    echo 0 > /logs/verifier/reward.txt
fi
exit 0
