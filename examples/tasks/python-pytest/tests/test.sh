#!/bin/bash
# Reward 1 when every test in test_outputs.py passes, else 0.
mkdir -p /logs/verifier
cd /tests
python3 -m pytest -q -p no:cacheprovider /tests/test_outputs.py
if [ $? -eq 0 ]; then
    echo 1 > /logs/verifier/reward.txt
else
    echo 0 > /logs/verifier/reward.txt
fi
exit 0
