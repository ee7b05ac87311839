"""Figures for a public Harbor-format task set: the share `bench tasks check` accepts unchanged,
and of the tasks whose images can be had here, the share the oracle passes (each other listed
with its cause).

    .venv/bin/python benchmarks/tasksets.py TASKS [--oracle] [--jobs-dir DIR] [-j N] [--out FILE]
    .venv/bin/python benchmarks/tasksets.py TASKS --from-snapshot GIT_DIR [--under tasks] [--oracle]

TASKS is a folder of task folders brought here unchanged (the method is in benchmarks/README.md).
With --from-snapshot, TASKS is made first: every task folder under the snapshot's --under folder
(at any depth: sets group tasks as tasks/<group>/<task>) copied out with `git archive`, one by
one and unchanged, side by side; one whose files the snapshot does not hold in full (its largest
files may be absent) is left out and listed.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

# What marks a problem as the machine's (an image it cannot have), not the task config's.
IMAGE_MARKS = ("not present locally", "no image registry is reachable")


def from_snapshot(git_dir: Path, under: str, out: Path) -> tuple[list[str], list[str]]:
    """Copy each task folder of a fetched snapshot into `out` unchanged: (copied, incomplete)."""
    listing = subprocess.run(
        ["git", "--git-dir", str(git_dir), "ls-tree", "-r", "--name-only", "HEAD", "--", under],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    folders = sorted(
        {str(Path(f).parent) for f in listing if Path(f).name in ("task.toml", "task.md")}
    )
    out.mkdir(parents=True, exist_ok=True)
    copied, incomplete = [], []
    for folder in folders:
        name = Path(folder).name
        archive = subprocess.run(
            ["git", "--git-dir", str(git_dir), "archive", "HEAD", folder],
            capture_output=True,
            check=False,
        )
        if archive.returncode != 0:  # a blob the snapshot does not hold
            incomplete.append(name)
            continue
        depth = len(Path(folder).parts) - 1
        subprocess.run(
            ["tar", "-x", "-C", str(out), f"--strip-components={depth}"],
            input=archive.stdout,
            check=True,
        )
        copied.append(name)
    return copied, incomplete


def check(root: Path) -> list[dict]:
    from runs.sandboxes.docker import connect
    from runs.task_check import check_tasks

    rows = []
    for report in check_tasks(root, connect()):
        image = [p for p in report.problems if any(m in p for m in IMAGE_MARKS)]
        config = [p for p in report.problems if p not in image]
        rows.append(
            {
                "task": report.path.name,
                "config_problems": config,
                "image_problems": image,
                "warnings": report.warnings,
                "has_solution": not any("no solution/" in n for n in report.notes),
            }
        )
    return rows


def oracle(root: Path, names: list[str], jobs: Path, concurrency: int) -> list[dict]:
    args = [sys.executable, "-m", "benchflow_site.cli", "run", str(root), "-a", "oracle"]
    for name in names:
        args += ["-i", name]
    args += ["-j", str(concurrency), "--jobs-dir", str(jobs), "--fresh", "--quiet"]
    subprocess.run(args, cwd=REPO, check=False)
    job = max(p for p in jobs.iterdir() if p.is_dir())
    out = []
    for path in sorted(job.glob("*/result.json")):
        result = json.loads(path.read_text())
        reward = (result.get("rewards") or {}).get("reward")
        cause = result.get("error") or result.get("verifier_error") or ""
        out.append(
            {
                "task": result["task_name"],
                "reward": reward,
                "cause": cause[:300],
                "verifier": result.get("verifier_environment_mode"),
            }
        )
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("tasks", type=Path)
    parser.add_argument("--oracle", action="store_true", help="run the oracle on the buildable")
    parser.add_argument("--jobs-dir", type=Path, default=Path("/tmp/tasksets-jobs"))
    parser.add_argument("-j", type=int, default=2)
    parser.add_argument("--from-snapshot", type=Path, metavar="GIT_DIR")
    parser.add_argument("--under", default=".", help="the snapshot's folder holding the tasks")
    parser.add_argument("--out", type=Path, help="also write the figures here, as JSON")
    parser.add_argument("--name", default="", help="the task set's name in --out (its source)")
    args = parser.parse_args()
    if args.from_snapshot:
        copied, incomplete = from_snapshot(args.from_snapshot, args.under, args.tasks)
        print(f"copied from the snapshot: {len(copied)} task(s)")
        if incomplete:
            print(f"left out, files absent from the snapshot: {', '.join(incomplete)}")
    rows = check(args.tasks)
    n = len(rows)
    accepted = [r for r in rows if not r["config_problems"]]
    buildable = [r for r in accepted if not r["image_problems"]]
    print(f"tasks: {n}")
    print(f"config accepted unchanged by bench tasks check: {len(accepted)}/{n}")
    for r in rows:
        for p in r["config_problems"]:
            print(f"  refused {r['task']}: {p[:300]}")
    missing = Counter(
        p.split("The image", 1)[-1][:90] for r in accepted for p in r["image_problems"]
    )
    print(f"images can be had here: {len(buildable)}/{len(accepted)}")
    for text, count in missing.most_common(5):
        print(f"  {count} x {text}")
    warned = Counter(w.split(": ", 2)[1] for r in rows for w in r["warnings"])
    print(f"warnings: {dict(warned)}")
    figures: dict[str, object] = {
        "task_set": args.name or args.tasks.name,
        "when": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "tasks": n,
        "accepted": len(accepted),
        "refused": {r["task"]: r["config_problems"] for r in rows if r["config_problems"]},
        "images_here": len(buildable),
        "missing_images": dict(missing),
        "warnings": dict(warned),
    }
    if args.oracle:
        runnable = [r["task"] for r in buildable if r["has_solution"]]
        figures["with_solution"] = len(runnable)
        if runnable:
            args.jobs_dir.mkdir(parents=True, exist_ok=True)
            results = oracle(args.tasks, runnable, args.jobs_dir, args.j)
            passed = [r for r in results if r["reward"] == 1.0]
            graded = [r for r in results if r["reward"] is not None]
            print(f"oracle passed: {len(passed)}/{len(results)} (graded {len(graded)})")
            separate = sum(r["verifier"] == "separate" for r in results)
            if separate:
                print(f"  {separate} graded by a separate verifier")
            figures["graded"], figures["separate_verifier"] = len(graded), separate
            for r in results:
                if r["reward"] != 1.0:
                    print(f"  {r['task']}: reward {r['reward']}: {r['cause']}")
            figures["oracle_passed"] = len(passed)
            figures["oracle_failed"] = [r for r in results if r["reward"] != 1.0]
        else:
            print("oracle: no task with a solution has its images here")
    if args.out is not None:
        args.out.write_text(json.dumps(figures, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
