"""A new user's first hour, in Debian's chromium against `bench serve`: launch the oracle and then
the nop agent on one task from the form (the task ticked in its table), watch the first finish,
compare the two (a flipped task linking to both trials), see both in the outcomes grid and the
Pareto view, and export them to one file that opens with the network refused.

Each page is kept as a 1280x900 screenshot; scripts/screenshots.py copies them into
docs/screenshots/ for the README."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import run_bench
from tests.jobfolders import name_in
from tests.runs.operations.server import PASSWORD, Served

pytestmark = [pytest.mark.browser, pytest.mark.docker, pytest.mark.database]

VIEWPORT = {"width": 1280, "height": 900}


@pytest.fixture
def served(tmp_path, bench_env):
    s = Served(tmp_path, bench_env)
    yield s
    s.stop()


def _shot(page, shots: Path, name: str) -> None:
    shots.mkdir(exist_ok=True)
    page.screenshot(path=str(shots / f"{name}.png"))


TASKS = ("hello-world", "count-words", "partial-credit")


def _launch(page, served: Served, agent: str, shots: Path | None = None) -> str:
    page.click("#nav-launch")
    with page.expect_response(lambda r: "/launch/tasks/" in r.url):
        page.select_option("#id_tasks_dir", str(served.tasks / "examples"))
    page.wait_for_selector(f"#pick-{TASKS[0]}")
    page.wait_for_function("!document.querySelector('.htmx-settling, .htmx-swapping')")
    page.fill("#id_agent", agent)
    for task in TASKS:
        page.check(f"#pick-{task}")
    page.fill("#id_concurrency", "2")
    if shots is not None:
        _shot(page, shots, "launch")
    page.click("#launch")
    page.wait_for_url(served.base + "/jobs/*/")
    return page.url


def test_a_new_user_launches_watches_compares_and_exports(
    chromium, served, docker_client, tmp_path
):
    shots = tmp_path / "shots"
    context = chromium.new_context(viewport=VIEWPORT)
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.goto(served.base + "/login/")
    page.fill("input[name=username]", "operator")
    page.fill("input[name=password]", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url(served.base + "/")
    # launch: the oracle on three tasks ticked in the task table; the page follows it live
    oracle_url = _launch(page, served, "oracle", shots)
    page.wait_for_selector("#progress b.finished", timeout=300_000)
    page.wait_for_selector("#grid canvas[data-drawn='1']:not([data-passed='0'])", timeout=60_000)
    page.wait_for_selector("#chart .uplot")
    assert "Value" not in page.inner_text("#chart")  # the chart's legend names its x value
    page.evaluate("document.getElementById('chart').previousElementSibling.scrollIntoView()")
    _shot(page, shots, "job")
    page.click("#trials a:text('hello-world')")
    page.wait_for_selector("#attempt-agent")
    _shot(page, shots, "trial")
    # and the nop agent on the same tasks, which fails them
    nop_url = _launch(page, served, "nop")
    page.wait_for_selector("#progress b.finished", timeout=300_000)
    oracle, nop = oracle_url.split("/jobs/")[1].strip("/"), nop_url.split("/jobs/")[1].strip("/")
    # compare: hello-world flipped, linking to the trial in each job
    page.goto(f"{served.base}/compare/?a={oracle}&b={nop}")
    flipped = page.locator(".flips > div").first.locator("tr:has-text('hello-world')")
    assert flipped.locator("a", has_text="in A").get_attribute("href") == (
        f"/jobs/{oracle}/hello-world/"
    )
    assert flipped.locator("a", has_text="in B").get_attribute("href") == (
        f"/jobs/{nop}/hello-world/"
    )
    _shot(page, shots, "compare")
    # the outcomes grid across both, from the compare page's link; a square leads to its trial
    page.click("text=both in the outcomes grid")
    page.wait_for_selector("#grid canvas[data-drawn='1']:not([data-failed='0'])")
    page.wait_for_selector(".pareto canvas[data-points='2']")  # on wall time: the oracle costs $0
    assert page.locator("#pass1 tbody tr").count() == 2
    _shot(page, shots, "outcomes")
    # the Pareto view's measure is in the URL: ticked, then kept by a reload
    page.check(".pareto input[value='sandbox_s']")
    page.wait_for_url("**pareto=sandbox_s**")
    page.reload()
    page.wait_for_selector(".pareto canvas[data-drawn='1']")
    page.wait_for_selector("#grid canvas[data-drawn='1']")
    assert page.locator(".pareto input[value='sandbox_s']").is_checked()
    box = page.locator("#grid canvas").bounding_box()
    assert box is not None
    first = min(240, max(80, box["width"] * 0.22)) + 5  # the first column's first square
    task = page.evaluate("JSON.parse(document.getElementById('grid-data').textContent).tasks[0]")
    page.locator("#grid canvas").hover(position={"x": first, "y": 68})
    assert page.locator(".grid-tip").is_visible() and task in page.inner_text(".grid-tip")
    page.locator("#grid canvas").click(position={"x": first, "y": 68})
    page.wait_for_url(f"{served.base}/jobs/{oracle}/{task}/")
    page.goto(served.base + "/")
    _shot(page, shots, "jobs")
    # export both to one file; it opens with every request refused
    out = tmp_path / "both.html"
    done = run_bench(
        [
            "view",
            str(served.jobs / name_in(oracle_url)),
            str(served.jobs / name_in(nop_url)),
            "--export",
            str(out),
        ],
        env=served.env,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    offline = chromium.new_context(viewport=VIEWPORT)
    asked: list[str] = []
    offline.route(
        "**/*",
        lambda r: (
            asked.append(r.request.url),
            r.continue_() if r.request.url.startswith("file:") else r.abort(),
        ),
    )
    shown = offline.new_page()
    shown.goto(out.as_uri())
    shown.wait_for_selector("#grid canvas[data-drawn='1']:not([data-failed='0'])")
    _shot(shown, shots, "export")
    assert [u for u in asked if not u.startswith("file:")] == []
    offline.close()
    context.close()
    # no page asked for anything missing (the favicon) or broke a script
    assert errors == [], errors
    assert sorted(p.name for p in shots.iterdir()) == [
        f"{n}.png" for n in ("compare", "export", "job", "jobs", "launch", "outcomes", "trial")
    ]
    size = subprocess.run(
        [
            sys.executable,
            "-c",
            "import struct,sys;d=open(sys.argv[1],'rb').read(24);print(*struct.unpack('>II',d[16:24]))",
            str(shots / "job.png"),
        ],
        capture_output=True,
        text=True,
    ).stdout.split()
    assert size == ["1280", "900"]
