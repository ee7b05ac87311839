"""The trial page's event stream: its first page painted with the page, the rest a cursor away,
search across the trial, and only the attempt's own stream files read."""

from __future__ import annotations

import re
from urllib.parse import unquote

from runs.results import event_stream
from tests.jobfolders import key
from tests.runs.results.test_stream_merge import claude_trial
from tests.trajectories import trajectory


def more_url(html: str) -> str:
    found = re.search(r'class="more" data-url="([^"]+)"', html)
    assert found, "no next page"
    return found.group(1).replace("&amp;", "&")


def test_the_trial_page_paints_the_first_events_and_the_rest_follows_a_page_at_a_time(client, job):
    # given: a trial of 200 model calls
    trajectory(job / "hello__00000001", 200)
    # when
    page = client.get(f"/jobs/{key(job)}/hello/").content.decode()
    # then: the first page is in the page, numbered from e1, with its filters and search
    numbers = [int(n) for n in re.findall(r'<details class="ev [^"]*" id="e(\d+)"', page)]
    assert numbers[0] == 1 and numbers == list(range(1, len(numbers) + 1))
    assert event_stream.PER_PAGE <= len(numbers) < 200  # whole model calls: a few more
    assert 'id="stream-q"' in page and 'data-kind="thought"' in page
    assert "fix &lt;the&gt; bug" in page
    # and the next page goes on from where it stopped
    nxt = client.get(more_url(page)).content.decode()
    assert re.search(r'<details class="ev [^"]*" id="e(\d+)"', nxt).group(1) == str(
        len(numbers) + 1
    )
    while 'class="more"' in nxt:
        nxt = client.get(more_url(nxt)).content.decode()
        assert '<details class="ev ' in nxt  # no page is empty
    assert "End of the stream." in nxt and "done" in nxt


def test_search_finds_a_step_the_page_has_not_loaded(client, job):
    trajectory(job / "hello__00000001", 200)
    page = client.get(f"/jobs/{key(job)}/hello/").content.decode()
    url = re.search(r'id="stream-q" [^>]*data-url="([^"]+)"', page).group(1).replace("&amp;", "&")
    hits = client.get(url + "&q=out+187").content.decode()
    anchors = re.findall(r'href="#(e\d+)"', hits)
    assert len(anchors) == 1 and int(anchors[0][1:]) > event_stream.PER_PAGE


def test_a_stream_is_read_only_from_the_attempts_own_trajectory_or_session_logs(client, job):
    trajectory(job / "hello__00000001", 3)
    base = f"/jobs/{key(job)}/hello/hello__00000001/stream/"
    assert client.get(base + f"?kind=trajectory&src={event_stream.TRAJECTORY}").status_code == 200
    for query in (
        "?kind=trajectory&src=result.json",
        "?kind=trajectory&src=agent/sessions/../../../../etc/passwd.jsonl",
        f"?kind=python&src={event_stream.TRAJECTORY}",
    ):
        assert client.get(base + query).status_code == 404, unquote(query)


def test_what_the_agent_wrote_is_shown_as_text(client, job):
    folder = job / "hello__00000001"
    trajectory(folder, 2)
    text = (folder / event_stream.TRAJECTORY).read_text().replace("plan 0", "<script>x()</script>")
    (folder / event_stream.TRAJECTORY).write_text(text)
    page = client.get(f"/jobs/{key(job)}/hello/").content.decode()
    assert "&lt;script&gt;x()&lt;/script&gt;" in page and "<script>x()" not in page


def test_a_session_log_and_the_proxys_calls_read_as_one_stream(client, job):
    # given: Claude Code's session log with its subagent's, and the proxy's trajectory
    claude_trial(job / "hello__00000001")
    # when
    page = client.get(f"/jobs/{key(job)}/hello/").content.decode()
    # then: the log's steps, each model call with the proxy's tokens, the failed call it lacks
    assert "Task t." in page and "Done." in page and "Say hello." in page
    assert "mock-model · 19,066 in · 20 out" in page  # the main agent's first call
    assert "mock-model · 11,286 in · 1 out" in page  # its subagent's, nested
    assert "failed call (HTTP 529)" in page
    assert page.count('id="c1"') == 1 and 'id="e6"' in page and 'id="e7"' not in page
    assert "End of the stream." in page
