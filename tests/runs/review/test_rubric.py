"""BenchFlow's rubric formats (v0.1, v0.2), the reviewer's answers checked, and the score."""

from __future__ import annotations

import pytest

from runs.problems import UserError
from runs.review import rubric as rb

V01 = {
    "criteria": [
        {"name": "tests_pass", "description": "hidden", "guidance": "did the tests pass?"},
        {"name": "tidy", "description": "hidden", "guidance": "is the code tidy?"},
    ]
}


def v02(*rows: tuple[str, int, int]) -> dict:
    return {
        "criteria": [
            {"name": n, "description": "d", "guidance": "g", "blocker": b, "weight": w}
            for n, b, w in rows
        ]
    }


def answers(**verdicts: str) -> list[rb.Answer]:
    return [rb.Answer(n, v, "because") for n, v in verdicts.items()]


def test_v01_and_v02_are_told_apart_and_the_reviewer_never_sees_a_description() -> None:
    assert rb.parse_rubric(V01).version == "0.1"
    shown = rb.parse_rubric(v02(("safe", 1, 1), ("tidy", 0, 3))).for_reviewer()
    assert shown == [
        {"name": "safe", "guidance": "g", "blocker": 1, "weight": 1},
        {"name": "tidy", "guidance": "g", "blocker": 0, "weight": 3},
    ]
    assert "description" not in str(rb.parse_rubric(V01).for_reviewer())


@pytest.mark.parametrize(
    ("doc", "says"),
    [
        ({"criteria": []}, "no criteria"),
        ({"criteria": [], "version": 2}, "unknown key(s) version"),
        ({"criteria": [{"name": "x", "guidance": "g"}]}, "exactly description, guidance, name"),
        (
            {"criteria": [{"name": "1x", "description": "", "guidance": ""}]},
            "not a Python identifier",
        ),
        (v02(("a", 2, 1)), "blocker is 2; fix: 0 or 1"),
        (v02(("a", 0, 11)), "weight is 11; fix: a whole number 1..10"),
        (v02(("a", 0, 1), ("a", 0, 1)), "used twice"),
        (
            {"criteria": [v02(("a", 0, 1))["criteria"][0], V01["criteria"][0]]},
            "a v0.2 criterion has exactly",
        ),
    ],
)
def test_a_bad_rubric_is_named_with_its_fix(doc: dict, says: str) -> None:
    with pytest.raises(UserError) as err:
        rb.parse_rubric(doc, "r.json")
    assert says in str(err.value) and str(err.value).startswith("r.json")


def test_every_criterion_must_be_answered_with_a_known_verdict() -> None:
    rubric = rb.parse_rubric(V01)
    got, problems = rb.check_answers(
        rubric, {"criteria": [{"name": "tests_pass", "verdict": "PASS", "explanation": "ok"}]}
    )
    assert got == [rb.Answer("tests_pass", "pass", "ok")] and problems == ["tidy: not answered"]
    _, problems = rb.check_answers(
        rubric, {"tests_pass": {"verdict": "maybe"}, "tidy": {"verdict": "fail"}}
    )
    assert problems == ["tests_pass: verdict 'maybe' is not pass, fail or not_applicable"]


def test_blockers_gate_and_weights_give_the_quality_and_its_band() -> None:
    rubric = rb.parse_rubric(v02(("safe", 1, 1), ("tidy", 0, 3), ("docs", 0, 1)))
    # all pass, reward 1: full marks
    full = rb.score(rubric, answers(safe="pass", tidy="pass", docs="pass"), 1.0, False)
    assert (full["raw_quality"], full["gated_quality"], full["band"]) == (1.0, 1.0, "publishable")
    # tidy not applicable (1 of 2), docs failed (0): (1*3 + 0*1) / (2*4) = 0.375
    part = rb.score(rubric, answers(safe="pass", tidy="not_applicable", docs="fail"), 1.0, False)
    assert part["raw_quality"] == 0.375 and part["band"] == "not_publishable"
    # a failing blocker, or a reward below 1, or an error: gated to 0 whatever the rest
    for verdicts, reward, errored in (
        (answers(safe="fail", tidy="pass", docs="pass"), 1.0, False),
        (answers(safe="pass", tidy="pass", docs="pass"), 0.0, False),
        (answers(safe="pass", tidy="pass", docs="pass"), 1.0, True),
    ):
        gated = rb.score(rubric, verdicts, reward, errored)
        assert gated["raw_quality"] == 1.0 and gated["gated_quality"] == 0.0
        assert gated["gates"]["passed"] is False and gated["band"] == "not_publishable"


@pytest.mark.parametrize(
    ("quality", "name"),
    [
        (0.8, "publishable"),
        (0.79, "presentable_with_revisions"),
        (0.65, "presentable_with_revisions"),
        (0.64, "not_publishable"),
    ],
)
def test_bands(quality: float, name: str) -> None:
    assert rb.band(quality) == name
