#!/bin/bash
python3 - <<'PY'
import collections
import json
import pathlib
import re

words = []
for path in sorted(pathlib.Path("/app/docs").glob("*.txt")):
    words += re.findall(r"[a-z]+", path.read_text().lower())
counts = collections.Counter(words)
top = min(counts, key=lambda w: (-counts[w], w))
result = {"total_words": len(words), "unique_words": len(counts), "top_word": top}
pathlib.Path("/app/counts.json").write_text(json.dumps(result) + "\n")
PY
