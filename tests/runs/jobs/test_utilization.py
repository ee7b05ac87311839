"""Utilization lines: two minutes in, then every five, with warnings for idle slots and idle models."""

from runs.jobs.console import utilization_lines as lines_of
from runs.jobs.utilization import Sample, Utilization, utilization_of


def utilization_lines(samples, slots, window_s, uses_model):
    report = utilization_of(samples, slots, window_s, uses_model)
    return [] if report is None else lines_of(report)


def test_line_matches_the_seed_page():
    samples = [Sample(setup=0, agent=1, waiting=0, in_flight=1, agents_waiting_on_model=1)] * 9 + [
        Sample(setup=0, agent=1, waiting=0, in_flight=0, agents_waiting_on_model=0)
    ]
    assert utilization_lines(samples, 1, 300, uses_model=True) == [
        "Utilization, last 5 min: 1.0 of 1 slot running (0.0 in setup, 1.0 with the agent); 0 tasks waiting; "
        "a model request in flight 90% of the agents' time (0.9 requests at once on average)"
    ]


def test_idle_slots_while_tasks_wait_warn():
    samples = [Sample(setup=1, agent=0, waiting=5, in_flight=0, agents_waiting_on_model=0)] * 10
    lines = utilization_lines(samples, 4, 120, uses_model=False)
    assert lines[0].startswith(
        "Utilization, last 2 min: 1.0 of 4 slots running (1.0 in setup, 0.0 with the agent); 5 tasks waiting"
    )
    assert "sat idle on average while tasks waited" in lines[1]


def test_agents_rarely_waiting_on_the_model_warn():
    samples = [Sample(setup=0, agent=2, waiting=0, in_flight=0, agents_waiting_on_model=0)] * 10
    lines = utilization_lines(samples, 2, 300, uses_model=True)
    assert "a model request in flight 0% of the agents' time" in lines[0]
    assert "waiting on the model only 0%" in lines[1]


def test_reports_come_two_minutes_in_then_every_five():
    util = Utilization(slots=1, started=0.0)
    assert not util.due(119) and util.due(120)
    util.add(Sample(0, 1, 0, 0, 0))
    assert lines_of(util.report(120, uses_model=False))[0].startswith("Utilization, last 2 min:")
    assert not util.due(419) and util.due(420)
    assert util.report(420, uses_model=False) is None  # no samples: nothing to say
