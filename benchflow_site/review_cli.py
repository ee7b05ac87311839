"""`bench review JOB_OR_TRIAL`: a reviewer agent audits trials against a rubric (runs/review/
reviewer.py); parse, prepare the review job, run it as any bench run, score, print."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from runs.spec import positive_int

DESCRIPTION = """\
Audit trials against a rubric with a reviewer agent, as BenchFlow's bench review: report only,
rewards are never changed.

Each trial (a job's best attempts, or the one attempt folder given) is reviewed in a sandbox
holding its saved outputs (artifacts/, agent/, verifier/; bench run --save-outputs keeps the
workspace), its transcript and the task's instruction. The reviewer answers every criterion of
the rubric (-r, else the task's verifier/rubric.json or tests/rubric.json; BenchFlow's v0.1 and
v0.2 formats) with pass, fail or not_applicable and an explanation; blockers and weights give
raw_quality, gated_quality and the band. Each attempt gets review.json (the trial page's Rubric
tab) and the job review_report.json (or -o OUT).

The reviewer's run is a job of its own under <job>/review-runs/<id>/run: its tokens and cost are
counted there, never in the reviewed job's cost line or caps. -m mock/oracle answers with no
provider: every criterion passes when the trial's reward is 1, fails otherwise."""

EPILOG = """\
examples:
  bench review jobs/2026-11-04__18-48-30 -r rubric.json -a claude -m anthropic/claude-sonnet-4-5
  bench review jobs/2026-11-04__18-48-30/hello__a1b2c3d4 -a claude -m mock/oracle --failing

exit codes: 0 every trial reviewed, 1 a review is incomplete (a criterion unanswered), 2 bad input"""


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "review",
        help="audit trials against a rubric with a reviewer agent (never changes a reward)",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("path", type=Path, metavar="JOB_OR_TRIAL")
    p.add_argument("-r", "--rubric", type=Path, help="rubric.json (default: the task's own)")
    p.add_argument(
        "-a", "--agent", default="opencode", help="the reviewer agent (default opencode)"
    )
    p.add_argument(
        "-m", "--model", help="the reviewer's model (mock/oracle: offline, deterministic)"
    )
    p.add_argument("-n", "--concurrency", type=positive_int, default=4, help="reviews at once (4)")
    which = p.add_mutually_exclusive_group()
    which.add_argument("--passing", action="store_const", dest="which", const="passing")
    which.add_argument("--failing", action="store_const", dest="which", const="failing")
    p.add_argument("-o", "--output", type=Path, help="where review_report.json goes")


def run(args: argparse.Namespace) -> int:
    from benchflow_site.django_setup import setup_django
    from runs.review import reviewer

    setup_django()
    plan = reviewer.prepare(args.path, args.rubric, args.which or "all")
    return _review(plan, args.agent, args.model, args.concurrency, args.output)


def _review(plan: Any, agent: str, model: str | None, concurrency: int, output: Path | None) -> int:
    from benchflow_site import cli
    from runs.review import reviewer

    for line in plan.skipped:
        print(f"skipped {line}")
    run_dir = plan.tasks_dir.parent
    argv = ["run", str(plan.tasks_dir), "-a", agent, "-j", str(concurrency)]
    argv += ["--jobs-dir", str(run_dir), "--job", "run", "--quiet"]
    if model:
        argv += ["-m", model]
    cli.cmd_run(cli.build_parser().parse_args(argv))
    report = reviewer.collect(plan, run_dir / "run", agent, model, output)
    incomplete = 0
    for r in report["reviews"]:
        if r["complete"]:
            print(
                f"{r['trial_name']}: {r['band']} (gated {r['gated_quality']:.2f}, raw "
                f"{r['raw_quality']:.2f}; blockers {'pass' if r['gates']['blockers_pass'] else 'FAIL'})"
            )
        else:
            incomplete += 1
            print(f"{r['trial_name']}: incomplete review: {'; '.join(r['problems'])}")
    usage = report["reviewer_usage"]
    cost = f"${usage['cost_usd']:.4f}" if usage["cost_usd"] is not None else "$–"
    tokens = f"{usage['total_tokens']:,}" if usage["total_tokens"] is not None else "–"
    print(
        f"review: {cost}, {tokens} tokens (its own run: {run_dir / 'run'}; not in the job's cost)"
    )
    print(f"report: {output or plan.job_dir / reviewer.REPORT}")
    return 1 if incomplete else 0
