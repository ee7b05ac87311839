"""Reward 1.0 when /app/counts.json matches the expected counts, else 0.0 (reward.txt)."""

import json
from pathlib import Path

# Counted from the docs shipped in environment/docs (the agent could edit /app/docs).
EXPECTED = {"total_words": 47, "unique_words": 28, "top_word": "the"}


def grade() -> float:
    try:
        got = json.loads(Path("/app/counts.json").read_text())
    except (OSError, ValueError) as e:
        print(f"cannot read /app/counts.json: {e}")
        return 0.0
    if got != EXPECTED:
        print(f"expected {EXPECTED}, got {got}")
        return 0.0
    return 1.0


reward = grade()
Path("/logs/verifier/reward.txt").write_text(f"{reward}\n")
print(f"reward: {reward}")
