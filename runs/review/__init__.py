"""Reviewing what agents did: people's notes, tags and verdicts (human.py), and a reviewer agent's
rubric review (rubric.py, reviewer.py)."""
