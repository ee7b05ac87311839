#!/bin/bash
# Shared by both steps: each step's tests/ is layered over this folder and brings its expected.txt.
# Reward 1 when /app/notes.txt holds the lines of /tests/expected.txt (trailing newlines ignored), else 0.
mkdir -p /logs/verifier
if [ -f /app/notes.txt ] && [ "$(cat /app/notes.txt)" = "$(cat /tests/expected.txt)" ]; then
    echo 1 > /logs/verifier/reward.txt
else
    echo 0 > /logs/verifier/reward.txt
fi
exit 0
