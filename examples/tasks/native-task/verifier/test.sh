#!/bin/bash
# Reward 1 when /app/output.txt is input.txt reversed and input.txt is untouched, else 0.
mkdir -p /logs/verifier
expected_input=$'alpha\nbravo\ncharlie\ndelta\necho'
expected_output=$'echo\ndelta\ncharlie\nbravo\nalpha'
if [ -f /app/output.txt ] && [ "$(cat /app/output.txt)" = "$expected_output" ] \
    && [ "$(cat /app/input.txt)" = "$expected_input" ]; then
    echo 1 > /logs/verifier/reward.txt
else
    echo 0 > /logs/verifier/reward.txt
fi
exit 0
