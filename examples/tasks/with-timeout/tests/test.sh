#!/bin/bash
# Reward 1 when /app/count.txt holds the lines 1..5, else 0. An agent stopped at the 60 s
# agent timeout is graded on whatever it wrote before it was stopped.
mkdir -p /logs/verifier
if [ -f /app/count.txt ] && [ "$(cat /app/count.txt)" = "$(seq 1 5)" ]; then
    echo 1 > /logs/verifier/reward.txt
else
    echo 0 > /logs/verifier/reward.txt
fi
exit 0
