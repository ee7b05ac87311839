"""Money in the index is Decimal: sums stay exact, the pages show it, and the migration to it kept
every existing row's value."""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from runs import events as ev
from runs.index import Index
from runs.models import Attempt, Job, Trial
from tests.conftest import trial_result


@pytest.mark.django_db(transaction=True)
def test_a_jobs_cost_is_the_exact_sum_of_its_attempts(tmp_path):
    # given two attempts whose costs a float sum gets wrong (0.1 + 0.2)
    job_dir = tmp_path / "2026-01-01__00-00-00"
    index = Index()
    index(ev.JobStarted(job_dir.name, str(job_dir), {"plan": ["a", "b"]}, 2, 0, 2, 1, 0))
    for name, cost in (("a", 0.1), ("b", 0.2)):
        rollout = f"{name}__00000001"
        res = trial_result(name, rollout_name=rollout, agent_result={"cost_usd": cost})
        index(ev.AttemptStarted(name, name, 0, 1, rollout))
        index(ev.AttemptFinished(name, rollout, res))
    index.close()
    # then each row holds its cost as written, and the job their exact sum
    assert Attempt.objects.get(rollout_name="a__00000001").cost_usd == Decimal("0.1")
    assert Trial.objects.get(name="b").cost_usd == Decimal("0.2")
    assert Job.objects.get().cost_usd == Decimal("0.3")


def test_the_pages_show_decimal_dollars_as_they_showed_floats():
    from viewer.templatetags.bench import money

    assert money(Decimal("0.0123000000")) == money(0.0123) == "$0.0123"
    assert money(Decimal("12.5")) == "$12.50" and money(None) == "–"


@pytest.mark.django_db(transaction=True)
def test_the_migration_to_decimal_keeps_each_rows_cost():
    # given the index as it was before money was Decimal, with a job whose cost is a float
    executor = MigrationExecutor(connection)
    executor.migrate([("runs", "0005_prepared_ahead")])
    old = executor.loader.project_state([("runs", "0005_prepared_ahead")]).apps
    old_job = old.get_model("runs", "Job")
    old_job.objects.create(
        name="j", path="/jobs/j", tasks_dir="t", agent="oracle", cost_usd=0.0123456789
    )
    old_job.objects.create(name="k", path="/jobs/k", tasks_dir="t", agent="oracle", cost_usd=None)
    # when the index is migrated
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(executor.loader.graph.leaf_nodes())
    # then each value is there, to the ten-billionth of a dollar
    costs = dict(Job.objects.values_list("name", "cost_usd"))
    assert costs == {"j": Decimal("0.0123456789"), "k": None}
