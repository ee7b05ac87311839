#!/bin/bash
cat > /app/mathlib.py <<'PY'
"""Small numeric helpers."""


def mean(values):
    return sum(values) / len(values) if values else 0.0


def clamp(x, lo, hi):
    return max(lo, min(hi, x))
PY
