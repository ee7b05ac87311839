#!/bin/bash
# main reached the sidecar by its service name, read the volume they share, and had no way out
grep -qx lighthouse /app/answer.txt \
  && grep -q "^unreachable" /app/internet.txt \
  && grep -q "written by the notes service" /shared/from-notes.txt \
  && ! python3 -c "import urllib.request as u; u.urlopen('http://deb.debian.org/debian/', timeout=5)" 2>/dev/null
if [ $? -eq 0 ]; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi
