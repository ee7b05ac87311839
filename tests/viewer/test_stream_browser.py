"""The trial page's event stream in Chromium: Focus and Full, per-kind filters, #e<n> anchors past
the first page, the keys j/k and /, and search across the whole trial."""

from __future__ import annotations

import pytest

from tests.e2e.browser import Viewer, chromium  # noqa: F401  (the fixture)
from tests.jobfolders import result_doc, write_attempt, write_job, write_summary
from tests.trajectories import trajectory

pytestmark = [pytest.mark.browser, pytest.mark.database]


@pytest.fixture
def trial_url(tmp_path, bench_env):
    job = write_job(tmp_path / "jobs", plan=["hello"])
    attempt = write_attempt(job, "hello__00000001", result_doc("hello", "hello__00000001", 1.0))
    trajectory(attempt, 150)  # 150 calls: several pages of events
    write_summary(job)
    viewer = Viewer(tmp_path, bench_env, ["jobs"])
    yield f"{viewer.base}/jobs/{job.name}/hello/"
    viewer.stop()


def shown(page, selector: str) -> bool:
    return page.locator(selector).first.is_visible()


def test_filters_keys_anchors_and_search_on_the_trial_page(chromium, trial_url):  # noqa: F811
    page = chromium.new_page()
    # given the trial page: Focus mode hides thoughts and model-call markers
    page.goto(trial_url)
    page.wait_for_selector("#e1", state="attached")
    assert shown(page, "#stream .k-tool") and not shown(page, "#stream .k-thought")
    # when Full is chosen, they show; a kind unticked hides
    page.click('#stream-bar button[data-mode="full"]')
    assert shown(page, "#stream .k-thought") and shown(page, "#stream .k-call")
    page.uncheck('#stream-bar input[data-kind="call"]')
    assert not shown(page, "#stream .k-call")
    # j and k step through what is shown, and the address names the step
    page.locator("body").press("j")
    page.locator("#stream details.ev.cur").wait_for()
    first = page.locator("#stream details.ev.cur").get_attribute("id")
    page.locator("body").press("j")
    page.locator("body").press("j")
    page.locator("body").press("k")
    page.wait_for_url(lambda url: not url.endswith(f"#{first}") and "#e" in url)
    second = page.locator("#stream details.ev.cur").get_attribute("id")
    assert first == "e1" and second not in ("e1", None) and page.url.endswith(f"#{second}")
    assert page.locator(f"#{second}").get_attribute("data-kind") != "call"
    # an anchor past the first page loads the pages before it and opens the step
    page.goto(trial_url + "#e400")
    page.locator("#e400.cur").wait_for()
    assert page.locator("#e400").evaluate("d => d.open") is True
    # a search hit's link names a model call by its trajectory line (`#c<line>`): the pages before
    # it load and its item is the current one
    page.goto(trial_url + "?attempt=hello__00000001#c140")
    page.locator("#stream details.ev.cur #c140").wait_for(state="attached")
    assert page.locator("#stream details.ev.cur").get_attribute("data-kind") == "call"
    # / searches the whole trial; a hit not yet loaded is a link that loads it
    page.goto(trial_url)
    page.wait_for_selector("#e1", state="attached")
    page.locator("body").press("/")
    assert page.evaluate("document.activeElement.id") == "stream-q"
    page.keyboard.type("out 148")
    page.keyboard.press("Enter")
    hit = page.locator("#stream-hits a.hit-link").first
    hit.wait_for()
    target = hit.inner_text()
    hit.click()
    page.locator(f"#{target}.cur").wait_for()
    assert "out 148" in page.locator(f"#{target}").inner_text()
    assert page.locator(f"#{target}.hit").count() == 1
