"""The reward contract: reward.txt / reward.json parsing and every verifier error it can raise."""

import pytest

from runs.trials.rewards import parse_rewards


@pytest.mark.parametrize(
    ("_case", "txt", "js", "code", "rewards"),
    [
        ("txt_one", "1\n", None, 0, {"reward": 1.0}),
        ("txt_zero", "0", None, 0, {"reward": 0.0}),
        ("txt_fraction", " 0.25 ", None, 0, {"reward": 0.25}),
        ("json_reward_key", None, '{"reward": 0.5, "a": 1}', 0, {"reward": 0.5, "a": 1.0}),
        (
            "json_mean_without_reward_key",
            None,
            '{"a": 1, "b": 0, "c": 0.5}',
            0,
            {"reward": 0.5, "a": 1.0, "b": 0.0, "c": 0.5},
        ),
        ("both_agree", "1.0", '{"reward": 1}', 0, {"reward": 1.0}),
        ("nonzero_exit_with_reward_is_a_reward", "0", None, 1, {"reward": 0.0}),
    ],
)
def test_rewards_are_read(_case, txt, js, code, rewards):
    outcome = parse_rewards(txt, js, code)
    assert outcome.error is None
    assert outcome.rewards == rewards


@pytest.mark.parametrize(
    ("_case", "txt", "js", "code", "says"),
    [
        ("no_reward_exit_zero", None, None, 0, "No reward file found at /logs/verifier/reward.txt"),
        (
            "no_reward_exit_nonzero",
            None,
            None,
            2,
            "verifier exited with rc=2; no reward file found",
        ),
        ("unparsable_txt", "passed!", None, 0, "reward.txt holds 'passed!', not a number"),
        ("nan_txt", "nan", None, 0, "is NaN"),
        ("inf_txt", "inf", None, 0, "is infinite"),
        ("above_range", "1.5", None, 0, "outside the reward range [0, 1]"),
        ("below_range", "-0.1", None, 0, "outside the reward range [0, 1]"),
        ("json_invalid", None, "{reward: 1}", 0, "reward.json is not valid JSON"),
        ("json_not_object", None, "[1]", 0, "must be an object"),
        ("json_string_value", None, '{"reward": "1"}', 0, "not a number"),
        ("json_nan", None, '{"reward": NaN}', 0, "is NaN"),
        ("json_bool", None, '{"reward": true}', 0, "not a number"),
        (
            "disagree",
            "1",
            '{"reward": 0}',
            0,
            "reward.txt says 1 but reward.json says 0; they must agree",
        ),
    ],
)
def test_bad_rewards_are_verifier_errors(_case, txt, js, code, says):
    outcome = parse_rewards(txt, js, code)
    assert outcome.rewards is None
    assert says in outcome.error


def test_reward_range_may_widen():
    assert parse_rewards("3", None, 0, (0.0, 5.0)).rewards == {"reward": 3.0}
