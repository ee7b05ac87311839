#!/bin/bash
if grep -qx seeded /app/report.txt && grep -qx seeded /srv/site/seed.txt; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
