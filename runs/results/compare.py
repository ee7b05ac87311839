"""Two jobs compared trial by trial: reward, cost and tokens side by side, and whether the
difference in mean reward is real (pure; `bench results --compare` and the dashboard's compare page).

Trials are paired by task and trial index (named as our trials are: the task, `task#N` for a
repeat), never by folder, so a Harbor job (its folders carry a random suffix) pairs with ours or
another Harbor job's; only pairs scored in both jobs enter the statistics. The mean paired difference gets a 95% confidence interval from a
paired bootstrap (resampling pairs, seeded so a page and the CLI agree); pass/fail gets McNemar's
exact test on the discordant pairs (binomial, two-sided).
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

BOOTSTRAP_SAMPLES = 10_000
BOOTSTRAP_WORK = 2_000_000  # pair draws at most: fewer resamples for a big job (1,000 at least)
SEED = 20261202


def bootstrap_samples(n: int) -> int:
    """10,000 resamples up to 200 pairs, then fewer (at least 1,000) to keep a page quick."""
    return BOOTSTRAP_SAMPLES if n <= 200 else max(1000, BOOTSTRAP_WORK // n)


@dataclass(frozen=True)
class Side:
    reward: float | None
    cost_usd: float | None
    total_tokens: int | None
    outcome: str
    name: str = ""  # the trial's own name in its job (a Harbor trial's differs from the pair key)


@dataclass(frozen=True)
class Pair:
    name: str
    a: Side | None
    b: Side | None

    @property
    def scored(self) -> bool:
        return (
            self.a is not None
            and self.b is not None
            and self.a.reward is not None
            and self.b.reward is not None
        )

    @property
    def delta_reward(self) -> float | None:
        return self.delta("reward")

    @property
    def delta_cost(self) -> float | None:
        return self.delta("cost_usd")

    @property
    def delta_tokens(self) -> float | None:
        return self.delta("total_tokens")

    def delta(self, attr: str) -> float | None:
        x = getattr(self.a, attr, None) if self.a else None
        y = getattr(self.b, attr, None) if self.b else None
        return None if x is None or y is None else y - x


@dataclass
class Comparison:
    pairs: list[Pair]
    n_scored: int
    mean_a: float | None
    mean_b: float | None
    mean_diff: float | None  # b - a over scored pairs
    ci_low: float | None
    ci_high: float | None
    # pass/fail: pairs where only a passed (b), only b passed (c); McNemar's exact p
    only_a_passed: int
    only_b_passed: int
    mcnemar_p: float | None
    only_in_a: list[str] = field(default_factory=list)
    only_in_b: list[str] = field(default_factory=list)

    @property
    def flipped_a(self) -> list[Pair]:
        """Pairs passed in A and failed in B (both scored), by name."""
        return sorted(
            (p for p in self.pairs if p.scored and _passed(p.a) and not _passed(p.b)),
            key=lambda p: p.name,
        )

    @property
    def flipped_b(self) -> list[Pair]:
        """Pairs passed in B and failed in A (both scored), by name."""
        return sorted(
            (p for p in self.pairs if p.scored and _passed(p.b) and not _passed(p.a)),
            key=lambda p: p.name,
        )

    @property
    def significant(self) -> bool | None:
        if self.ci_low is None or self.ci_high is None:
            return None
        return self.ci_low > 0 or self.ci_high < 0

    def verdict(self) -> str:
        if self.mean_diff is None:
            return "no trial is scored in both jobs: nothing to compare"
        ci = f"95% CI [{self.ci_low:+.3f}, {self.ci_high:+.3f}]"
        p = (
            f"McNemar p={self.mcnemar_p:.3g}"
            if self.mcnemar_p is not None
            else "McNemar: no discordant pairs"
        )
        real = (
            "the difference is real (the interval excludes 0)"
            if self.significant
            else "the difference may be chance (the interval includes 0)"
        )
        return f"mean reward B-A {self.mean_diff:+.3f} over {self.n_scored} paired trials, {ci}; {p}; {real}"


def _passed(side: Side | None) -> bool:
    return side is not None and side.reward == 1.0


def paired_bootstrap_ci(
    diffs: list[float], samples: int | None = None, seed: int = SEED
) -> tuple[float, float] | None:
    """The 95% percentile interval of the mean of `diffs`, resampling pairs with replacement."""
    n = len(diffs)
    samples = samples or bootstrap_samples(n)
    if n == 0:
        return None
    if n == 1:
        return diffs[0], diffs[0]
    rng = random.Random(seed)
    choices = rng.choices
    means = sorted(sum(choices(diffs, k=n)) / n for _ in range(samples))
    return means[int(0.025 * (samples - 1))], means[int(math.ceil(0.975 * (samples - 1)))]


def mcnemar_exact(only_a: int, only_b: int) -> float | None:
    """Two-sided exact McNemar p-value: binomial(b + c, 1/2) on the discordant pairs."""
    n = only_a + only_b
    if n == 0:
        return None
    k = min(only_a, only_b)
    tail = sum(math.comb(n, i) for i in range(k + 1)) / 2**n
    return min(1.0, 2 * tail)


def compare(a: Mapping[str, Side], b: Mapping[str, Side]) -> Comparison:
    """Compare job A and job B, each a mapping trial name -> its best attempt's Side."""
    names = list(a) + [n for n in b if n not in a]
    pairs = [Pair(n, a.get(n), b.get(n)) for n in names]
    scored = [p for p in pairs if p.scored]
    ra = [p.a.reward for p in scored if p.a and p.a.reward is not None]
    rb = [p.b.reward for p in scored if p.b and p.b.reward is not None]
    diffs = [y - x for x, y in zip(ra, rb, strict=True)]
    only_a = sum(1 for p in scored if _passed(p.a) and not _passed(p.b))
    only_b = sum(1 for p in scored if _passed(p.b) and not _passed(p.a))
    ci = paired_bootstrap_ci(diffs)
    return Comparison(
        pairs=pairs,
        n_scored=len(scored),
        mean_a=sum(ra) / len(ra) if ra else None,
        mean_b=sum(rb) / len(rb) if rb else None,
        mean_diff=sum(diffs) / len(diffs) if diffs else None,
        ci_low=ci[0] if ci else None,
        ci_high=ci[1] if ci else None,
        only_a_passed=only_a,
        only_b_passed=only_b,
        mcnemar_p=mcnemar_exact(only_a, only_b),
        only_in_a=[n for n in a if n not in b],
        only_in_b=[n for n in b if n not in a],
    )


def pair_key(task: str, trial_index: int) -> str:
    """What a trial pairs by across jobs: its task and index, as our trial names spell them."""
    return task if trial_index == 0 else f"{task}#{trial_index}"


def sides_from_job(job: Any) -> dict[str, Side]:
    """pair key -> Side from a loaded job (runs.results.load.Job, best attempts)."""
    return {
        pair_key(t.task, t.trial_index): Side(t.reward, t.cost_usd, t.total_tokens, t.outcome)
        for t in job.best_trials
        if t.outcome != "cancelled"
    }


def _money(v: float | None) -> str:
    return "-" if v is None else f"${v:.4f}"


def _num(v: float | None, fmt: str = "{:.2f}") -> str:
    return "-" if v is None else fmt.format(v)


def render_comparison(c: Comparison, name_a: str, name_b: str) -> str:
    """What `bench results --compare A B` prints."""
    width = max([len(p.name) for p in c.pairs] + [5])
    lines = [
        f"A: {name_a}",
        f"B: {name_b}",
        "",
        f"{'trial':<{width}}  {'reward A':>8}  {'reward B':>8}  {'Δ':>6}  {'cost A':>9}  {'cost B':>9}  {'tokens A':>9}  {'tokens B':>9}",
    ]
    for p in c.pairs:
        ra = p.a.reward if p.a else None
        rb = p.b.reward if p.b else None
        lines.append(
            f"{p.name:<{width}}  {_num(ra):>8}  {_num(rb):>8}  {_num(p.delta('reward'), '{:+.2f}'):>6}  "
            f"{_money(p.a.cost_usd if p.a else None):>9}  {_money(p.b.cost_usd if p.b else None):>9}  "
            f"{_num(p.a.total_tokens if p.a else None, '{:,.0f}'):>9}  {_num(p.b.total_tokens if p.b else None, '{:,.0f}'):>9}"
        )
    lines += ["", c.verdict()]
    lines.append(
        f"pass/fail: {c.only_a_passed} passed only in A, {c.only_b_passed} passed only in B"
    )
    if c.only_in_a or c.only_in_b:
        lines.append(
            f"unpaired: {len(c.only_in_a)} only in A, {len(c.only_in_b)} only in B (left out)"
        )
    return "\n".join(lines)


def comparison_document(c: Comparison, name_a: str, name_b: str) -> dict[str, Any]:
    """The `benchflow.comparison` JSON document."""
    return {
        "kind": "benchflow.comparison",
        "schema_version": 1,
        "a": name_a,
        "b": name_b,
        "n_paired_scored": c.n_scored,
        "mean_reward_a": c.mean_a,
        "mean_reward_b": c.mean_b,
        "mean_diff": c.mean_diff,
        "ci95": [c.ci_low, c.ci_high] if c.ci_low is not None else None,
        "bootstrap_samples": bootstrap_samples(c.n_scored),
        "mcnemar": {
            "only_a_passed": c.only_a_passed,
            "only_b_passed": c.only_b_passed,
            "p": c.mcnemar_p,
        },
        "only_in_a": c.only_in_a,
        "only_in_b": c.only_in_b,
        "flipped": {
            "passed_only_in_a": [p.name for p in c.flipped_a],
            "passed_only_in_b": [p.name for p in c.flipped_b],
        },
        "pairs": [
            {
                "trial": p.name,
                "a": None if p.a is None else p.a.__dict__,
                "b": None if p.b is None else p.b.__dict__,
                "reward_delta": p.delta("reward"),
                "cost_delta": p.delta("cost_usd"),
                "tokens_delta": p.delta("total_tokens"),
            }
            for p in c.pairs
        ],
    }
