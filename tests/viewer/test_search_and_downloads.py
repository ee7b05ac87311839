"""Search on the job page and across jobs (`/search/`), each hit at its step's anchor; the trials
table as filtered downloaded as CSV and JSON; one trial as JSON; the state of each view in its URL."""

from __future__ import annotations

import csv
import io
import json
import re
from pathlib import Path
from typing import Any

import pytest

from runs.index.folder import index_path
from tests.jobfolders import key, result_doc, write_attempt, write_job

pytestmark = pytest.mark.django_db


def call_line(messages: list[dict[str, Any]], reply: str) -> str:
    return json.dumps(
        {
            "protocol": "messages",
            "model": "m",
            "request": {"messages": messages},
            "response": {"role": "assistant", "content": [{"type": "text", "text": reply}]},
        }
    )


def with_calls(folder: Path, *replies: str) -> None:
    first = [{"role": "user", "content": "Do the task."}]
    lines = [call_line(first, replies[0])]
    for reply in replies[1:]:
        lines.append(call_line([*first, {"role": "assistant", "content": "ok"}], reply))
    (folder / "trajectory").mkdir()
    (folder / "trajectory" / "llm_trajectory.jsonl").write_text("\n".join(lines) + "\n")


@pytest.fixture
def jobs(view_root):
    """Two jobs: in the first, alpha's third call (step 2) mentions a segfault and beta failed;
    the second's gamma mentions a segfault in its first call."""
    first = write_job(view_root, "2026-11-29__12-00-00", plan=["alpha", "beta", "=cmd"])
    alpha = write_attempt(first, "alpha__00000001", result_doc("alpha", "alpha__00000001", 1.0))
    with_calls(alpha, "Reading.", "Running tests.", "The binary hit a Segfault in parse().")
    beta = write_attempt(first, "beta__00000002", result_doc("beta", "beta__00000002", 0.0))
    with_calls(beta, "Nothing to see.")
    write_attempt(first, "=cmd__00000003", result_doc("=cmd", "=cmd__00000003", 0.0))
    second = write_job(view_root, "2026-11-30__12-00-00", plan=["gamma"])
    gamma = write_attempt(second, "gamma__00000004", result_doc("gamma", "gamma__00000004", 0.5))
    with_calls(gamma, "segfault again")
    index_path(first)
    index_path(second)
    return first, second


def test_the_job_page_searches_its_trials_and_links_the_hit_to_its_step(client, jobs):
    first, _ = jobs
    page = client.get(f"/jobs/{key(first)}/?q=segfault").content.decode()
    assert '<input type="search" name="q" value="segfault"' in page
    assert "1 trial(s)" in page  # alpha only: gamma is another job's
    assert "/alpha/?attempt=alpha__00000001#c2" in page
    assert "Segfault in parse()" in page
    assert "beta" not in page.split("<tbody>")[1]


def test_a_hits_anchor_names_the_stream_item_of_its_model_call(client, jobs):
    first, _ = jobs
    page = client.get(f"/jobs/{key(first)}/?q=segfault").content.decode()
    anchor = re.search(r"/alpha/\?attempt=alpha__00000001#(c\d+)", page)
    assert anchor is not None
    trial = client.get(f"/jobs/{key(first)}/alpha/?attempt=alpha__00000001").content.decode()
    # the item holding the call's marker is the one whose reply mentions the segfault
    item = trial.split(f'id="{anchor.group(1)}"', 1)[1].split("</details>", 1)[0]
    after = trial.split(f'id="{anchor.group(1)}"', 1)[1].split('data-call="', 2)
    assert 'class="en"' in item and "model call" in item
    assert "Segfault in parse()" in after[1] and (len(after) < 3 or "Segfault" not in after[2])


def test_search_across_jobs_finds_each_trial_with_its_snippet_and_anchor(client, jobs):
    page = client.get("/search/?q=SEGFAULT").content.decode()
    assert "2 trial(s) found" in page
    assert "/alpha/?attempt=alpha__00000001#c2" in page
    assert "/gamma/?attempt=gamma__00000004#c0" in page
    assert "segfault again" in page and "2026-11-30__12-00-00" in page
    one = client.get("/search/?q=segfault&job=2026-11-29__12-00-00").content.decode()
    assert "1 trial(s) found" in one and "gamma" not in one
    assert "0 trial(s) found" in client.get("/search/?q=nowhere").content.decode()
    assert client.get("/search/").status_code == 200


def test_the_trials_table_downloads_as_filtered_csv_and_json(client, jobs):
    first, _ = jobs
    response = client.get(f"/jobs/{key(first)}/trials.csv?show=failed&sort=-trial")
    assert response["Content-Disposition"].startswith("attachment")
    rows = list(csv.DictReader(io.StringIO(b"".join(response.streaming_content).decode())))
    assert [r["trial"] for r in rows] == ["'=cmd", "beta"]  # no formula for a spreadsheet
    assert rows[1]["outcome"] == "failed" and rows[1]["reward"] == "0.0"
    body = b"".join(client.get(f"/jobs/{key(first)}/trials.json?q=segfault").streaming_content)
    doc = json.loads(body)
    assert doc["filter"]["q"] == "segfault"
    assert [t["trial"] for t in doc["trials"]] == ["alpha"]
    assert doc["trials"][0]["cost_usd"] == "0.0021000000"  # money as written, exact
    page = client.get(f"/jobs/{key(first)}/?show=failed&q=b").content.decode()
    assert "trials.csv?show=failed&amp;q=b" in page and "trials.json?show=failed&amp;q=b" in page


def test_one_trial_downloads_as_json_with_its_result_and_transcript(client, jobs):
    first, _ = jobs
    page = client.get(f"/jobs/{key(first)}/alpha/").content.decode()
    assert "/alpha/trial.json" in page
    body = b"".join(client.get(f"/jobs/{key(first)}/alpha/trial.json").streaming_content)
    doc = json.loads(body)
    assert doc["trial"]["trial"] == "alpha" and doc["trial"]["best_attempt"] == "alpha__00000001"
    (attempt,) = doc["attempts"]
    assert attempt["result"]["rewards"] == {"reward": 1.0}
    assert len(attempt["transcript"]) == 3
    assert "Segfault" in json.dumps(attempt["transcript"][2])
    assert doc["notes"] == [] and doc["verdict"] is None
    assert client.get(f"/jobs/{key(first)}/nobody/trial.json").status_code == 404


def test_a_note_is_in_the_trials_download_and_its_words_are_found_by_search(
    client, jobs, django_user_model
):
    # given a person's note on beta's step e3, written on the trial page
    first, _ = jobs
    client.force_login(django_user_model.objects.create_user("vic", password="pw-vic-12345678"))
    response = client.post(
        f"/jobs/{key(first)}/beta/note/",
        {"text": "Flaky: a Heisenbug in the fixture", "tags": "flaky", "step": "e3"},
    )
    assert response.status_code == 302
    # when the trial is downloaded
    body = b"".join(client.get(f"/jobs/{key(first)}/beta/trial.json").streaming_content)
    doc = json.loads(body)
    # then its note and tags are in it
    [note] = doc["notes"]
    assert (note["text"], note["tags"], note["step"]) == (
        "Flaky: a Heisenbug in the fixture",
        ["flaky"],
        3,
    )
    assert note["author"] == "vic"
    # and search finds the trial by the note's words, linked to its step
    page = client.get("/search/?q=heisenbug").content.decode()
    assert "1 trial(s) found" in page
    assert "/beta/?attempt=beta__00000002#e3" in page and "Heisenbug" in page
    assert "1 trial(s)" in client.get(f"/jobs/{key(first)}/?q=heisenbug+fixture").content.decode()
    # a tag is a word of the note too; words of calls and of notes are not mixed in one hit
    assert "1 trial(s) found" in client.get("/search/?q=flaky").content.decode()
    assert "0 trial(s) found" in client.get("/search/?q=heisenbug+segfault").content.decode()


def test_every_view_keeps_its_state_in_its_url(client, jobs):
    first, _ = jobs
    page = client.get(f"/jobs/{key(first)}/?show=failed&sort=-reward&q=beta").content.decode()
    # the search form pushes its query into the address bar and keeps the filter and sort
    assert 'hx-push-url="true"' in page
    assert '<input type="hidden" name="sort" value="-reward">' in page
    assert '<input type="hidden" name="show" value="failed">' in page
    # the filter and sort links carry the search, the pages the whole state
    assert "?show=passed&amp;sort=-reward&amp;q=beta" in page
    assert "?show=failed&amp;sort=reward&amp;q=beta" in page
    search = client.get("/search/?q=segfault").content.decode()
    assert 'name="q" value="segfault"' in search


def test_a_snippet_is_text_never_markup(client, view_root):
    job = write_job(view_root, plan=["x"])
    folder = write_attempt(job, "x__00000001", result_doc("x", "x__00000001", 1.0))
    with_calls(folder, "<script>alert('zork')</script>")
    index_path(job)
    page = client.get("/search/?q=zork").content.decode()
    assert "&lt;script&gt;alert(&#x27;zork&#x27;)&lt;/script&gt;" in page
    assert "<script>alert" not in page
