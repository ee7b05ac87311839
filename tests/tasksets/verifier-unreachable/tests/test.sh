#!/bin/bash
# Fetches its checker from a host that does not resolve (.invalid never does), as tests that
# download their dependencies at grading time do.
if python3 -c "import urllib.request as u; open('/tmp/check.sh', 'wb').write(u.urlopen('http://checker.example.invalid/check.sh', timeout=20).read())"; then
  bash /tmp/check.sh && echo 1 > /logs/verifier/reward.txt && exit 0
fi
echo 0 > /logs/verifier/reward.txt
