#!/bin/bash
python3 - <<'PY'
import urllib.request as u
open("/app/answer.txt", "w").write(u.urlopen("http://notes:8000/word", timeout=10).read().decode())
try:
    u.urlopen("http://deb.debian.org/debian/", timeout=5)
    reachable = "reachable"
except OSError as e:
    reachable = f"unreachable ({e})"
open("/app/internet.txt", "w").write(reachable)
PY
