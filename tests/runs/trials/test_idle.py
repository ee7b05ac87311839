"""The idle watchdog's rule: what counts as activity, and when pending work gets 3x the limit."""

import pytest

from runs.spec import idle_timeout as parse_idle_timeout
from runs.trials.idle import IdleWatch, idle_error, idle_stop_info


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def make(limit=10.0, *, output=None, tools=0, proxy=None):
    clock = Clock()
    state = {"output": output, "tools": tools, "proxy": proxy}
    watch = IdleWatch(
        limit,
        lambda: state["output"],
        lambda: state["tools"],
        (lambda: state["proxy"]) if proxy is not None else None,
        clock=clock,
    )
    return watch, clock, state


def test_silence_for_the_limit_expires():
    watch, clock, _ = make(10)
    clock.now += 9.9
    assert watch.expired() is None
    clock.now += 0.1
    assert watch.expired() == 10


def test_output_resets_the_clock():
    watch, clock, state = make(10)
    clock.now += 8
    state["output"] = clock.now
    clock.now += 8
    assert watch.expired() is None  # 8 s since the output
    clock.now += 2
    assert watch.expired() == 10


def test_a_model_call_started_or_finished_resets_the_clock_and_one_in_flight_is_pending():
    watch, clock, state = make(10, proxy=(0, 0))
    assert watch.expired() is None
    clock.now += 9
    state["proxy"] = (1, 1)  # a call started: activity, and pending while in flight
    assert watch.expired() is None
    clock.now += 29
    assert watch.expired() is None and watch.pending  # 3x while the call is in flight
    clock.now += 1
    assert watch.expired() == 30
    state["proxy"] = (2, 0)  # it finished: activity again, nothing pending
    assert watch.expired() is None and not watch.pending
    clock.now += 10
    assert watch.expired() == 10


def test_an_open_tool_call_gets_three_times_the_limit():
    watch, clock, state = make(10, tools=1)
    clock.now += 29
    assert watch.expired() is None and watch.pending
    clock.now += 1
    assert watch.expired() == 30
    state["tools"] = 0
    assert watch.expired() == 10  # nothing pending: the plain limit, long passed


def test_the_error_matches_benchflows_wording_and_class():
    from runs.errors import classify

    text = idle_error(600, 601.4, 7)
    assert text == (
        "Agent idle for 600s with no new tool call, message, or thought "
        "(last activity 601s ago, 7 tool calls so far)"
    )
    assert classify(text) == "idle_timeout"
    watch, clock, _ = make(600)
    clock.now += 600
    assert watch.expired() == 600
    clock.now += (
        4  # stopping the agent took a while: the error reports the silence the watchdog saw
    )
    assert idle_stop_info(watch, 600.0, 3) == {
        "idle_timeout_sec": 600,
        "limit_sec": 600.0,
        "pending": False,
        "silent_sec": 600.0,
        "n_tool_calls": 3,
    }


@pytest.mark.parametrize(
    ("text", "want"),
    [("600", 600.0), ("2.5", 2.5), ("0", None), ("none", None), ("None", None), ("0.0", None)],
)
def test_parse_idle_timeout(text, want):
    assert parse_idle_timeout(text) == want


@pytest.mark.parametrize("text", ["-1", "soon", "nan"])
def test_parse_idle_timeout_refuses(text):
    with pytest.raises(ValueError):
        parse_idle_timeout(text)


def test_the_setting_is_recorded_and_a_resume_keeps_it(tmp_path):
    from runs.spec import RunSpec

    off = RunSpec(tasks_dir=tmp_path, agent_idle_timeout=None)
    assert off.recorded()["agent_idle_timeout_sec"] is None
    assert RunSpec.from_recorded(off.recorded()).agent_idle_timeout is None
    assert (
        RunSpec.from_recorded(
            RunSpec(tasks_dir=tmp_path, agent_idle_timeout=42).recorded()
        ).agent_idle_timeout
        == 42
    )
    old = {
        k: v
        for k, v in RunSpec(tasks_dir=tmp_path).recorded().items()
        if k != "agent_idle_timeout_sec"
    }
    # a job from before the setting: the default
    assert RunSpec.from_recorded(old).agent_idle_timeout == 600


async def test_the_gateway_reports_an_attempts_calls_for_the_watchdog(tmp_path):
    # given the proxy with one registered attempt on the offline mock model
    import httpx

    from benchflow_site.gateway import ProxyGateway
    from proxy.server import ProxyServer

    gateway = ProxyGateway()
    gateway.server = ProxyServer(env={})
    gateway.port = await gateway.server.start("127.0.0.1", 0)
    try:
        assert gateway.activity("t__a1") == (0, 0)  # unknown attempt
        key = gateway.register(
            attempt_id="t__a1",
            model="mock/echo",
            log_path=tmp_path / "l.jsonl",
            token_budget=None,
            turn_budget=None,
            solution_text=None,
            on_budget_spent=lambda _id: None,
        )
        assert gateway.activity("t__a1") == (0, 0)
        # when the agent makes one call
        async with httpx.AsyncClient() as client:
            resp = await client.post(
                f"http://127.0.0.1:{gateway.port}/v1/chat/completions",
                headers={"authorization": f"Bearer {key}"},
                json={"model": "m", "messages": [{"role": "user", "content": "hi"}]},
            )
        assert resp.status_code == 200
        # then its start and its end are two events, and nothing is in flight
        assert gateway.activity("t__a1") == (2, 0)
    finally:
        await gateway.stop()
