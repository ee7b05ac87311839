"""The reward contract: reward.txt and/or reward.json written by the verifier, checked here."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

REWARD_TXT = "/logs/verifier/reward.txt"
REWARD_JSON = "/logs/verifier/reward.json"
TOLERANCE = 1e-9


@dataclass(frozen=True)
class RewardOutcome:
    rewards: dict[str, float] | None
    error: str | None  # a verifier error: why there is no reward


def _number(value: object) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    return None


def _check(value: float, where: str, lo: float, hi: float) -> str | None:
    if math.isnan(value):
        return f"{where} is NaN, not a reward"
    if math.isinf(value):
        return f"{where} is infinite, not a reward"
    if value < lo - TOLERANCE or value > hi + TOLERANCE:
        return f"{where} is {value:g}, outside the reward range [{lo:g}, {hi:g}]"
    return None


def parse_rewards(
    reward_txt: str | None,
    reward_json: str | None,
    exit_code: int | None,
    reward_range: tuple[float, float] = (0.0, 1.0),
) -> RewardOutcome:
    """Turn the verifier's reward files (None when absent) into rewards or an error.

    A non-zero exit with a reward file is still a reward (pytest exits 1 when tests fail).
    """
    lo, hi = reward_range
    from_txt: float | None = None
    rewards: dict[str, float] | None = None

    if reward_txt is not None:
        text = reward_txt.strip()
        try:
            from_txt = float(text)
        except ValueError:
            shown = text if len(text) <= 40 else text[:40] + "…"
            return RewardOutcome(None, f"reward.txt holds {shown!r}, not a number")
        if err := _check(from_txt, "the reward in reward.txt", lo, hi):
            return RewardOutcome(None, err)

    if reward_json is not None:
        try:
            data = json.loads(
                reward_json, parse_constant=lambda c: float(c.lower().replace("infinity", "inf"))
            )
        except json.JSONDecodeError as exc:
            return RewardOutcome(
                None, f"reward.json is not valid JSON ({exc.msg} at line {exc.lineno})"
            )
        except ValueError as exc:  # a constant parse_constant could not turn into a number
            return RewardOutcome(None, f"reward.json is not valid JSON ({exc})")
        if not isinstance(data, dict) or not data:
            return RewardOutcome(
                None, 'reward.json must be an object of numeric rewards, e.g. {"reward": 1.0}'
            )
        rewards = {}
        for key, value in data.items():
            number = _number(value)
            if number is None:
                return RewardOutcome(None, f"reward.json key {key!r} is {value!r}, not a number")
            if err := _check(number, f"reward.json key {key!r}", lo, hi):
                return RewardOutcome(None, err)
            rewards[key] = number
        if "reward" not in rewards:
            rewards = {"reward": sum(rewards.values()) / len(rewards), **rewards}

    if rewards is not None and from_txt is not None:
        if abs(rewards["reward"] - from_txt) > TOLERANCE:
            return RewardOutcome(
                None,
                f"reward.txt says {from_txt:g} but reward.json says {rewards['reward']:g}; they must agree",
            )
        return RewardOutcome(rewards, None)
    if rewards is not None:
        return RewardOutcome(rewards, None)
    if from_txt is not None:
        return RewardOutcome({"reward": from_txt}, None)
    if exit_code not in (0, None):
        return RewardOutcome(
            None,
            f"verifier exited with rc={exit_code}; no reward file found at {REWARD_TXT} or {REWARD_JSON}",
        )
    return RewardOutcome(None, f"No reward file found at {REWARD_TXT} or {REWARD_JSON}")
