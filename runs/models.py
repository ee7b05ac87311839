"""The database index of jobs, trials, attempts, budgets and events: the live state.

The job folder is the record; every row here can be rebuilt from it (`bench index PATH`). Rows
hold what the dashboard's pages sort, filter and sum, so no page reads a folder to list a job.
"""

from __future__ import annotations

import uuid

from django.db import models

# Dollars to the ten-billionth: a model call costs from about a millionth of a dollar, and a sum of
# a job's calls stays exact (floats lose cents over a large job's sums and comparisons).
MONEY = {"max_digits": 20, "decimal_places": 10, "null": True, "blank": True}


class JobState(models.TextChoices):
    RUNNING = "running"
    FINISHED = "finished"
    INTERRUPTED = "interrupted"
    FAILED = "failed"


class AttemptState(models.TextChoices):
    PREPARING = "preparing"
    RUNNING = "running"
    FINISHED = "finished"
    CANCELLED = "cancelled"  # by a job cap or a signal: no result.json
    INTERRUPTED = "interrupted"  # the run stopped while it ran (no result.json, no cancel record)


class ResultState(models.TextChoices):
    """What the attempt folder's result.json was when it was read."""

    OK = "ok"
    MISSING = "missing"
    CORRUPT = "corrupt"  # not JSON, or not an object: shown as such on its trial


class TrialState(models.TextChoices):
    WAITING = "waiting"  # planned, no attempt started yet
    RUNNING = "running"
    DONE = "done"  # its best attempt finished (scored or not)
    NOT_RUN = "not_run"  # a job cap kept it from running, or the job ended before it


class Outcome(models.TextChoices):
    """A trial's outcome, from its best attempt (the rule of `bench results`)."""

    PASSED = "passed"
    FAILED = "failed"
    ERRORED = "errored"
    VERIFIER_ERRORED = "verifier_errored"
    INTERRUPTED = "interrupted"
    CANCELLED = "cancelled"
    NONE = ""  # waiting or running, no outcome yet


class Job(models.Model):
    name = models.CharField(max_length=200)
    path = models.CharField(max_length=1000, unique=True)
    tasks_dir = models.CharField(max_length=1000)
    agent = models.CharField(max_length=200)
    model = models.CharField(max_length=200, blank=True, default="")
    state = models.CharField(max_length=20, choices=JobState.choices, default=JobState.RUNNING)
    settings = models.JSONField(default=dict)
    summary = models.JSONField(null=True, blank=True)
    n_trials = models.IntegerField(default=0)  # planned: tasks x repeats
    # Counts over trials (best attempt), refreshed with each change: the jobs list reads them.
    n_done = models.IntegerField(default=0)
    n_running = models.IntegerField(default=0)
    passed = models.IntegerField(default=0)
    failed = models.IntegerField(default=0)
    errored = models.IntegerField(default=0)  # errored + verifier_errored
    unscored = models.IntegerField(default=0)  # no reward: errored, verifier_errored, interrupted
    mean_reward = models.FloatField(null=True, blank=True)
    cost_usd = models.DecimalField(**MONEY)  # over every attempt, retries included
    total_tokens = models.BigIntegerField(null=True, blank=True)
    n_attempts = models.IntegerField(default=0)
    started_at = models.DateTimeField(null=True, blank=True)
    duration_s = models.FloatField(null=True, blank=True)
    last_seq = models.BigIntegerField(default=0)  # the job's last Event.seq
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [models.Index(fields=["-started_at"], name="job_started_at")]

    def __str__(self) -> str:
        return self.name

    @property
    def key(self) -> str:
        """How the dashboard's URLs name the job: its name and its row's id (names repeat: every
        jobs folder has its own 2026-12-02__12-00-00)."""
        return job_key(self.name, self.pk)


KEY_SEPARATOR = "~"  # unreserved in a URL, and not in a timestamped job's name


def job_key(name: str, pk: int) -> str:
    return f"{name}{KEY_SEPARATOR}{pk}"


class Trial(models.Model):
    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="trials")
    name = models.CharField(max_length=300)  # trial_name: the task, or task#N for a repeat
    task_name = models.CharField(max_length=300)
    trial_index = models.IntegerField(default=0)
    position = models.IntegerField(default=0)  # order in the plan
    state = models.CharField(max_length=20, choices=TrialState.choices, default=TrialState.WAITING)
    outcome = models.CharField(max_length=30, blank=True, default="", choices=Outcome.choices)
    reward = models.FloatField(null=True, blank=True)
    error_category = models.CharField(max_length=60, blank=True, default="")  # the error class
    n_attempts = models.IntegerField(default=0)
    best = models.ForeignKey(
        "Attempt", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    # The best attempt's figures, copied so the trials table sorts on plain columns.
    cost_usd = models.DecimalField(**MONEY)
    total_tokens = models.BigIntegerField(null=True, blank=True)
    n_turns = models.IntegerField(null=True, blank=True)
    n_tool_calls = models.IntegerField(null=True, blank=True)
    duration_s = models.FloatField(null=True, blank=True)
    phase = models.CharField(max_length=40, blank=True, default="")  # of the running attempt
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["job", "name"], name="unique_trial_per_job")]
        indexes = [
            models.Index(fields=["job", "position"], name="trial_job_position"),
            models.Index(fields=["job", "outcome"], name="trial_job_outcome"),
        ]

    def __str__(self) -> str:
        return self.name


class Attempt(models.Model):
    trial = models.ForeignKey(Trial, on_delete=models.CASCADE, related_name="attempts")
    rollout_name = models.CharField(max_length=300)  # the attempt folder's name
    number = models.IntegerField(default=1)
    state = models.CharField(
        max_length=20, choices=AttemptState.choices, default=AttemptState.PREPARING
    )
    result_state = models.CharField(
        max_length=10, choices=ResultState.choices, default=ResultState.MISSING
    )
    outcome = models.CharField(max_length=30, blank=True, default="", choices=Outcome.choices)
    reward = models.FloatField(null=True, blank=True)
    rewards = models.JSONField(null=True, blank=True)
    error = models.TextField(blank=True, default="")
    error_category = models.CharField(max_length=60, blank=True, default="")
    verifier_error = models.TextField(blank=True, default="")
    verifier_error_category = models.CharField(max_length=60, blank=True, default="")
    n_input_tokens = models.BigIntegerField(null=True, blank=True)  # cached included
    n_cache_read_tokens = models.BigIntegerField(null=True, blank=True)
    n_cache_creation_tokens = models.BigIntegerField(null=True, blank=True)
    n_output_tokens = models.BigIntegerField(null=True, blank=True)
    total_tokens = models.BigIntegerField(null=True, blank=True)
    cost_usd = models.DecimalField(**MONEY)
    usage_source = models.CharField(max_length=40, blank=True, default="")
    price_source = models.CharField(max_length=60, blank=True, default="")
    n_turns = models.IntegerField(null=True, blank=True)  # model calls the proxy forwarded
    n_tool_calls = models.IntegerField(default=0)
    trial_budget = models.JSONField(null=True, blank=True)  # result.json's block, as written
    # result.json's verifier_usage: the verifier's own model calls (a judge), apart from the agent's
    verifier_usage = models.JSONField(null=True, blank=True)
    timing = models.JSONField(null=True, blank=True)  # phase -> seconds
    phase = models.CharField(max_length=40, blank=True, default="")
    last_tool_call = models.TextField(blank=True, default="")
    cancelled_by = models.TextField(blank=True, default="")  # a job cap's `budget reached: ...`
    sort_at = models.FloatField(default=0.0)  # finished_at, else started_at, else folder mtime
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    duration_s = models.FloatField(null=True, blank=True)
    searched = models.BooleanField(default=False)  # its words are in the search index

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["trial", "rollout_name"], name="unique_attempt_per_trial"
            )
        ]

    def __str__(self) -> str:
        return self.rollout_name


class SearchDoc(models.Model):
    """The words of one piece of an attempt, on PostgreSQL: its `body`, the numbers of its
    distinct words packed (runs/index/search.py `packed`; a column the migration adds there,
    under a GIN index on the numbers). The id says which piece: the piece's number times 2**40 plus the attempt's id (0: the
    attempt's own words, instruction, output and errors; n: its model calls from (n-1) * BLOCK
    on). On SQLite the same ids are the rows of the FTS5 table `runs_searchdoc_fts`, and this table stays empty (runs/index/search.py)."""

    id = models.BigIntegerField(primary_key=True)
    attempt = models.ForeignKey(Attempt, on_delete=models.CASCADE, related_name="+")


class BudgetScope(models.TextChoices):
    JOB = "job"  # a job cap (--max-cost-usd, --max-tokens, --max-sandbox-seconds, --max-rollouts)
    TRIAL = "trial"  # a per-trial budget (--token-budget, --turn-budget, or the task's)


class Budget(models.Model):
    """One cap or per-trial budget: its limit and what was spent against it."""

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="budgets")
    trial = models.ForeignKey(
        Trial, null=True, blank=True, on_delete=models.CASCADE, related_name="budgets"
    )
    scope = models.CharField(max_length=10, choices=BudgetScope.choices)
    measure = models.CharField(max_length=30)  # cost_usd, tokens, sandbox_seconds, rollouts, turns
    limit = models.FloatField()
    spent = models.FloatField(default=0.0)
    source = models.CharField(max_length=10, blank=True, default="")  # run | task (per trial)
    stopped = models.BooleanField(default=False)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["job", "measure"],
                condition=models.Q(trial__isnull=True),
                name="unique_job_budget_measure",
            ),
            models.UniqueConstraint(
                fields=["trial", "measure"],
                condition=models.Q(trial__isnull=False),
                name="unique_trial_budget_measure",
            ),
        ]


class Event(models.Model):
    """One thing that happened in a job, written in the transaction of the rows it changed.

    `seq` counts per job (the page's cursor: `?after=<seq>`); `id` orders all jobs' events, which
    the server's watch of this table follows when there is no Redis."""

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="events")
    seq = models.BigIntegerField()
    kind = models.CharField(max_length=40)
    trial_name = models.CharField(max_length=300, blank=True, default="")
    payload = models.JSONField(default=dict)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["job", "seq"], name="unique_event_seq")]


# --- scale-out: workers, the coordinators dispatching to them, and one lease per attempt ----------


class Worker(models.Model):
    """A `bench worker` process: it runs the attempts jobs dispatch to its queues."""

    name = models.CharField(max_length=200, unique=True)  # host:pid
    host = models.CharField(max_length=200)
    pid = models.IntegerField()
    slots = models.IntegerField()
    queues = models.JSONField(default=list)
    started_at = models.DateTimeField()
    last_seen_at = models.DateTimeField()
    stopped_at = models.DateTimeField(null=True, blank=True)
    # why it takes no attempt now (its disk is full, say): shown on the workers page, cleared when
    # the machine is well again
    problem = models.CharField(max_length=500, blank=True, default="")

    def __str__(self) -> str:
        return self.name


class Dispatcher(models.Model):
    """A coordinator (`bench run`) sending a job's attempts to workers; it is seen while it lives,
    and a worker starts no attempt of one that has gone quiet."""

    job_path = models.CharField(max_length=1000, db_index=True)
    host = models.CharField(max_length=200)
    pid = models.IntegerField()
    cwd = models.CharField(max_length=1000)  # where -a script:./x.sh and relative paths were given
    queue = models.CharField(max_length=200)
    settings = models.JSONField(default=dict)  # the run's recorded settings (no secret values)
    # its -j: attempts of the job that may run at once across workers (0: no limit); a worker
    # starts a prepared attempt only while fewer of the job's leases are running
    slots = models.IntegerField(default=0)
    started_at = models.DateTimeField()
    last_seen_at = models.DateTimeField()
    ended_at = models.DateTimeField(null=True, blank=True)


class Coordination(models.Model):
    """Who coordinates a job handed to the worker fleet (a launch from the browser, `bench run
    --detach`): one holder at a time, by a lease it renews (`expires_at`) and a fencing number
    (`fence`, bumped at each take): a coordinator whose number is no longer the row's writes
    nothing more. A lapsed lease is taken by another worker, which resumes the job."""

    job_path = models.CharField(max_length=1000, unique=True)  # the job folder, resolved
    queue = models.CharField(max_length=200)
    # the run's settings as the launch gave them, secret --agent-env values left out (they go to
    # the coordinator sealed in Redis, runs/workers/sealed.py)
    request = models.JSONField(default=dict)
    state = models.CharField(max_length=20, default="queued")  # queued, running, ended
    fence = models.IntegerField(default=0)
    host = models.CharField(max_length=200, blank=True, default="")  # the holder's machine
    worker = models.CharField(max_length=200, blank=True, default="")  # the worker that took it
    pid = models.IntegerField(default=0)  # the coordinator's process, on its machine
    expires_at = models.DateTimeField(null=True, blank=True)
    renewed_at = models.DateTimeField(null=True, blank=True)
    # a machine the job is to move off (drain): its coordinator hands the job over, and that
    # machine's worker does not take it back while another can
    avoid_host = models.CharField(max_length=200, blank=True, default="")
    handovers = models.JSONField(default=list)  # {from, lost_at, to, adopted_at, why}
    created_at = models.DateTimeField()
    ended_at = models.DateTimeField(null=True, blank=True)
    outcome = models.CharField(max_length=40, blank=True, default="")

    def __str__(self) -> str:
        return self.job_path


class LeaseState(models.TextChoices):
    QUEUED = "queued"  # in the broker's queue; no worker holds it
    PREPARING = "preparing"  # a worker claimed it and is making its sandbox
    RUNNING = "running"  # its sandbox is up and its agent started (one of the job's -j slots)
    FINISHED = "finished"  # result.json written; `result` holds it
    CANCELLED = "cancelled"  # stopped while it ran (a cap or a signal): `cancelled_record`
    DISCARDED = "discarded"  # never started: its sandbox and folder are gone
    FAILED = "failed"  # the worker could not run it at all: `error`
    ABANDONED = "abandoned"  # its coordinator went away before a worker started it


def new_uid() -> str:
    return uuid.uuid4().hex


class Lease(models.Model):
    """One attempt dispatched to workers. The broker carries only its id; this row is the truth.

    A worker holds it by `claim` (bumped at each claim) and renews `expires_at` while it works;
    every write of a worker names the claim it holds, so a worker that lost its lease changes
    nothing. The coordinator requeues a lease whose holder stopped renewing it."""

    dispatcher = models.ForeignKey(Dispatcher, on_delete=models.CASCADE, related_name="leases")
    # names its hints in Redis, which other databases' leases (with the same ids) may share
    uid = models.CharField(max_length=32, default=new_uid)
    job_path = models.CharField(max_length=1000)
    trial_name = models.CharField(max_length=300)
    task_name = models.CharField(max_length=300)
    task_path = models.CharField(max_length=1000)
    trial_index = models.IntegerField(default=0)
    attempt = models.IntegerField(default=1)
    env_digest = models.CharField(max_length=100, blank=True, default="")
    state = models.CharField(max_length=20, choices=LeaseState.choices, default=LeaseState.QUEUED)
    worker = models.ForeignKey(
        Worker, null=True, blank=True, on_delete=models.SET_NULL, related_name="leases"
    )
    claim = models.IntegerField(default=0)
    rollout_name = models.CharField(max_length=300, blank=True, default="")
    expires_at = models.DateTimeField(null=True, blank=True)
    # "" | "discard" (never to start) | "stop" (stop it while it runs); `cancelled_by`: a cap's reason
    cancel = models.CharField(max_length=10, blank=True, default="")
    cancelled_by = models.TextField(blank=True, default="")
    usage = models.JSONField(null=True, blank=True)  # what the worker's proxy counted so far
    result = models.JSONField(null=True, blank=True)
    cancelled_record = models.JSONField(null=True, blank=True)
    error = models.TextField(blank=True, default="")
    lost = models.JSONField(default=list)  # earlier runs lost with their worker: rollout, worker
    dispatched_at = models.DateTimeField(null=True, blank=True)
    claimed_at = models.DateTimeField(null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)  # its agent started (RUNNING)
    # how long its prepared sandbox waited for a run slot (the worker's or the job's)
    slot_wait_s = models.FloatField(null=True, blank=True)
    handed_back = models.IntegerField(default=0)  # times a worker gave it back unstarted
    finished_at = models.DateTimeField(null=True, blank=True)
    collected_at = models.DateTimeField(null=True, blank=True)  # the coordinator had the outcome
    work_s = models.FloatField(null=True, blank=True)  # the worker's own time on it

    class Meta:
        indexes = [
            models.Index(fields=["dispatcher", "state"], name="lease_dispatcher_state"),
            models.Index(fields=["job_path", "state"], name="lease_job_state"),
            models.Index(fields=["job_path", "rollout_name"], name="lease_job_rollout"),
        ]


# --- logins (bench serve): failed logins, per user name and per client address --------------------


class LoginThrottle(models.Model):
    """Failed logins of one user name (`user:NAME`) or one client address (`addr:IP`) since the
    last quiet hour, and until when it is locked (runs/logins.py)."""

    key = models.CharField(max_length=200, unique=True)
    failures = models.IntegerField(default=0)
    last_failed_at = models.DateTimeField(db_index=True)
    locked_until = models.DateTimeField(null=True, blank=True)


# --- human review: notes and tags on a trial or a step, and a verdict per trial -------------------


class Verdict(models.TextChoices):
    APPROVED = "approved"
    REJECTED = "rejected"
    NEEDS_LOOK = "needs_look", "needs a look"


class ReviewNote(models.Model):
    """A person's note on a trial, or on one step of an attempt's event stream (`step`: its e<n>),
    with tags (` flaky slow `: each between spaces, so a filter is one LIKE on any database).
    Appended, never edited; the job folder's reviews.json holds them too (runs/review/human.py)."""

    trial = models.ForeignKey(Trial, on_delete=models.CASCADE, related_name="notes")
    rollout_name = models.CharField(max_length=300, blank=True, default="")
    step = models.IntegerField(null=True, blank=True)
    text = models.TextField(blank=True, default="")
    tags = models.CharField(max_length=1000, blank=True, default="", db_index=True)
    author = models.ForeignKey(
        "auth.User", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    author_name = models.CharField(max_length=150, blank=True, default="")  # kept if the user goes
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["created_at", "id"]


class TrialVerdict(models.Model):
    """An operator's verdict on a trial; each is kept, the latest counts."""

    trial = models.ForeignKey(Trial, on_delete=models.CASCADE, related_name="verdicts")
    verdict = models.CharField(max_length=20, choices=Verdict.choices)
    note = models.TextField(blank=True, default="")
    author = models.ForeignKey(
        "auth.User", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    author_name = models.CharField(max_length=150, blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["created_at", "id"]
