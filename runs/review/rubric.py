"""BenchFlow's rubric review (§2.7), the pure part: a rubric read and checked, a reviewer's
answers checked against it, and the score they give.

rubric.json is `{"criteria": [...]}`, no version key. v0.1: each criterion has exactly `name` (a
Python identifier), `description` (never shown to the reviewer) and `guidance`. v0.2: every
criterion also has `blocker` (0 or 1) and `weight` (1..10). Verdicts are pass, fail or
not_applicable, each with an explanation. A blocker passes or fails; another criterion scores
0/1/2 (fail / not_applicable / pass). raw_quality = Σ(score·weight) / (2·Σ non-blocker weights);
the gates are a deterministic reward of 1.0 with no error and every blocker passing; gated_quality
is raw_quality when the gates hold, else 0; bands: ≥ 0.80 publishable, ≥ 0.65
presentable_with_revisions, else not_publishable.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runs.problems import UserError

VERDICTS = ("pass", "fail", "not_applicable")
SCORES = {"fail": 0, "not_applicable": 1, "pass": 2}
V01 = {"name", "description", "guidance"}
V02 = V01 | {"blocker", "weight"}
BANDS = ((0.80, "publishable"), (0.65, "presentable_with_revisions"))
LOW_BAND = "not_publishable"


@dataclass(frozen=True)
class Criterion:
    name: str
    description: str
    guidance: str
    blocker: bool = False
    weight: int = 1


@dataclass(frozen=True)
class Rubric:
    version: str  # "0.1" or "0.2"
    criteria: tuple[Criterion, ...]

    def for_reviewer(self) -> list[dict[str, Any]]:
        """What the reviewer is shown of each criterion: never its description."""
        return [
            {"name": c.name, "guidance": c.guidance}
            | ({"blocker": int(c.blocker), "weight": c.weight} if self.version == "0.2" else {})
            for c in self.criteria
        ]


def parse_rubric(doc: Any, where: str = "rubric.json") -> Rubric:
    """A rubric document checked as BenchFlow does; a UserError names the criterion and field."""
    if not isinstance(doc, dict) or not isinstance(doc.get("criteria"), list):
        raise UserError(f'{where}: a rubric is {{"criteria": [...]}}; fix: list the criteria')
    if set(doc) != {"criteria"}:
        extra = sorted(set(doc) - {"criteria"})
        raise UserError(f"{where}: unknown key(s) {', '.join(extra)}; fix: only 'criteria'")
    if not doc["criteria"]:
        raise UserError(f"{where}: no criteria; fix: add at least one")
    raws = doc["criteria"]
    keysets = {frozenset(c) if isinstance(c, dict) else frozenset() for c in raws}
    version = "0.2" if any("weight" in k or "blocker" in k for k in keysets) else "0.1"
    wanted = V02 if version == "0.2" else V01
    criteria: list[Criterion] = []
    for n, raw in enumerate(raws, 1):
        label = f"{where}: criterion {n}"
        if not isinstance(raw, dict) or set(raw) != wanted:
            have = sorted(raw) if isinstance(raw, dict) else type(raw).__name__
            raise UserError(
                f"{label} has {have}; fix: a v{version} criterion has exactly {', '.join(sorted(wanted))}"
            )
        name = raw["name"]
        if not isinstance(name, str) or not name.isidentifier():
            raise UserError(
                f"{label}: name {name!r} is not a Python identifier; fix: e.g. tests_pass"
            )
        if any(c.name == name for c in criteria):
            raise UserError(f"{label}: name {name!r} is used twice; fix: one criterion each")
        for key in ("description", "guidance"):
            if not isinstance(raw[key], str):
                raise UserError(f"{label} ({name}): {key} is not text; fix: a string")
        blocker, weight = False, 1
        if version == "0.2":
            if raw["blocker"] not in (0, 1) or isinstance(raw["blocker"], bool):
                raise UserError(f"{label} ({name}): blocker is {raw['blocker']!r}; fix: 0 or 1")
            w = raw["weight"]
            if not isinstance(w, int) or isinstance(w, bool) or not 1 <= w <= 10:
                raise UserError(f"{label} ({name}): weight is {w!r}; fix: a whole number 1..10")
            blocker, weight = bool(raw["blocker"]), w
        criteria.append(Criterion(name, raw["description"], raw["guidance"], blocker, weight))
    return Rubric(version, tuple(criteria))


def load_rubric(path: Path) -> Rubric:
    try:
        doc = json.loads(path.read_text())
    except OSError as exc:
        raise UserError(
            f"{path}: cannot be read ({exc.strerror}); fix: the rubric's path"
        ) from None
    except ValueError as exc:
        raise UserError(f"{path}: not JSON ({exc}); fix: the file's syntax") from None
    return parse_rubric(doc, str(path))


@dataclass(frozen=True)
class Answer:
    name: str
    verdict: str
    explanation: str


def check_answers(rubric: Rubric, doc: Any) -> tuple[list[Answer], list[str]]:
    """The reviewer's answers ({"criteria": [{name, verdict, explanation}]}, or a list of them,
    or {name: {verdict, explanation}}), one per criterion in the rubric's order; and what is
    wrong with them (a criterion unanswered, a verdict not one of VERDICTS)."""
    items: list[Any]
    if isinstance(doc, dict) and isinstance(doc.get("criteria"), list):
        items = doc["criteria"]
    elif isinstance(doc, list):
        items = doc
    elif isinstance(doc, dict):
        items = [{"name": k, **v} for k, v in doc.items() if isinstance(v, dict)]
    else:
        return [], ["the reviewer's answer is not JSON criteria"]
    given = {str(i.get("name")): i for i in items if isinstance(i, dict)}
    answers: list[Answer] = []
    problems: list[str] = []
    for c in rubric.criteria:
        item = given.get(c.name)
        if item is None:
            problems.append(f"{c.name}: not answered")
            continue
        verdict = str(item.get("verdict") or "").strip().lower()
        if verdict not in VERDICTS:
            problems.append(f"{c.name}: verdict {verdict!r} is not pass, fail or not_applicable")
            continue
        answers.append(Answer(c.name, verdict, str(item.get("explanation") or "")[:4000]))
    return answers, problems


def band(quality: float) -> str:
    return next((name for floor, name in BANDS if quality >= floor), LOW_BAND)


def score(
    rubric: Rubric, answers: list[Answer], reward: float | None, errored: bool
) -> dict[str, Any]:
    """raw_quality, gated_quality, the gates and the band of a complete set of answers."""
    by_name = {a.name: a for a in answers}
    blockers = [c for c in rubric.criteria if c.blocker]
    weights = sum(c.weight for c in rubric.criteria if not c.blocker)
    total = sum(
        SCORES[by_name[c.name].verdict] * c.weight
        for c in rubric.criteria
        if not c.blocker and c.name in by_name
    )
    raw = total / (2 * weights) if weights else (1.0 if blockers else 0.0)
    blockers_pass = all(c.name in by_name and by_name[c.name].verdict == "pass" for c in blockers)
    tests_pass = reward == 1.0 and not errored
    gates = tests_pass and blockers_pass
    gated = raw if gates else 0.0
    return {
        "raw_quality": round(raw, 6),
        "gated_quality": round(gated, 6),
        "gates": {"tests_pass": tests_pass, "blockers_pass": blockers_pass, "passed": gates},
        "band": band(gated),
        "raw_band": band(raw),
    }


def verdicts(rubric: Rubric, answers: list[Answer]) -> list[dict[str, Any]]:
    """Each criterion with the reviewer's verdict and explanation (None and "" when unanswered),
    as review.json and scoring/<attempt>.json keep them."""
    given: dict[str, Answer] = {}
    for a in answers:
        given.setdefault(a.name, a)  # the first answer to a criterion, as it was read
    return [
        {
            "name": c.name,
            "guidance": c.guidance,
            "blocker": c.blocker,
            "weight": c.weight,
            "verdict": given[c.name].verdict if c.name in given else None,
            "explanation": given[c.name].explanation if c.name in given else "",
        }
        for c in rubric.criteria
    ]
