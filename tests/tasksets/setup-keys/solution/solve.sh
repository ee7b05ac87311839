#!/bin/bash
python3 -c "import urllib.request as u; open('/app/report.txt', 'wb').write(u.urlopen('http://127.0.0.1:8123/seed.txt').read())"
mkdir -p /app/out/notes
echo kept > /app/out/notes/a.txt
echo scratch > /app/out/b.tmp
