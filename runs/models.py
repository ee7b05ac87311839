"""The database index of jobs, trials and attempts: the live state; the job folder is the record."""

from __future__ import annotations

from django.db import models


class JobState(models.TextChoices):
    RUNNING = "running"
    FINISHED = "finished"
    INTERRUPTED = "interrupted"
    FAILED = "failed"


class AttemptState(models.TextChoices):
    PREPARING = "preparing"
    RUNNING = "running"
    FINISHED = "finished"
    CANCELLED = "cancelled"


class Job(models.Model):
    name = models.CharField(max_length=200)
    path = models.CharField(max_length=1000, unique=True)
    tasks_dir = models.CharField(max_length=1000)
    agent = models.CharField(max_length=200)
    model = models.CharField(max_length=200, blank=True, default="")
    state = models.CharField(max_length=20, choices=JobState.choices, default=JobState.RUNNING)
    settings = models.JSONField(default=dict)
    summary = models.JSONField(null=True, blank=True)
    n_trials = models.IntegerField(default=0)
    passed = models.IntegerField(default=0)
    failed = models.IntegerField(default=0)
    errored = models.IntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return self.name


class Trial(models.Model):
    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="trials")
    name = models.CharField(max_length=300)  # trial_name: the task, or task#N for a repeat
    task_name = models.CharField(max_length=300)
    trial_index = models.IntegerField(default=0)
    outcome = models.CharField(max_length=30, blank=True, default="")  # passed|failed|errored|...
    reward = models.FloatField(null=True, blank=True)
    n_attempts = models.IntegerField(default=0)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["job", "name"], name="unique_trial_per_job")]

    def __str__(self) -> str:
        return self.name


class Attempt(models.Model):
    trial = models.ForeignKey(Trial, on_delete=models.CASCADE, related_name="attempts")
    rollout_name = models.CharField(max_length=300)
    number = models.IntegerField(default=1)
    state = models.CharField(
        max_length=20, choices=AttemptState.choices, default=AttemptState.PREPARING
    )
    reward = models.FloatField(null=True, blank=True)
    error = models.TextField(blank=True, default="")
    error_category = models.CharField(max_length=60, blank=True, default="")
    verifier_error_category = models.CharField(max_length=60, blank=True, default="")
    n_tool_calls = models.IntegerField(default=0)
    total_tokens = models.BigIntegerField(null=True, blank=True)
    cost_usd = models.FloatField(null=True, blank=True)
    started_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    duration_s = models.FloatField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["trial", "rollout_name"], name="unique_attempt_per_trial"
            )
        ]

    def __str__(self) -> str:
        return self.rollout_name
