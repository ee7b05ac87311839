"""Coordination on the worker fleet: a job's Coordination row (lease, fencing number, handovers),
and why a worker takes no attempt now (Worker.problem: its disk is full, say)."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("runs", "0010_find"),
    ]

    operations = [
        migrations.CreateModel(
            name="Coordination",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("job_path", models.CharField(max_length=1000, unique=True)),
                ("queue", models.CharField(max_length=200)),
                ("request", models.JSONField(default=dict)),
                ("state", models.CharField(default="queued", max_length=20)),
                ("fence", models.IntegerField(default=0)),
                ("host", models.CharField(blank=True, default="", max_length=200)),
                ("worker", models.CharField(blank=True, default="", max_length=200)),
                ("pid", models.IntegerField(default=0)),
                ("expires_at", models.DateTimeField(blank=True, null=True)),
                ("renewed_at", models.DateTimeField(blank=True, null=True)),
                ("avoid_host", models.CharField(blank=True, default="", max_length=200)),
                ("handovers", models.JSONField(default=list)),
                ("created_at", models.DateTimeField()),
                ("ended_at", models.DateTimeField(blank=True, null=True)),
                ("outcome", models.CharField(blank=True, default="", max_length=40)),
            ],
        ),
        migrations.AddField(
            model_name="worker",
            name="problem",
            field=models.CharField(blank=True, default="", max_length=500),
        ),
    ]
