#!/bin/bash
ok=1
[ "$(cat /app/notes.txt)" = "$(printf 'notes\ndone')" ] || ok=0
[ "$(cat /app/cache.txt)" = kept ] || ok=0
[ "$(cat /app/greeting.txt)" = hello ] || ok=0
[ -x /usr/local/bin/python-from-image ] || ok=0
echo $ok > /logs/verifier/reward.txt
