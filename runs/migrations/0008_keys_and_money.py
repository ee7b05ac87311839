"""Money in Decimal (a job's, a trial's and an attempt's cost_usd), each value kept as it was to
the ten-billionth of a dollar; and the jobs list's index renamed (its old name was an event
kind's)."""

from django.db import migrations, models


def money() -> models.DecimalField:
    return models.DecimalField(blank=True, decimal_places=10, max_digits=20, null=True)


class Migration(migrations.Migration):
    dependencies = [
        ("runs", "0007_logins"),
    ]

    operations = [
        migrations.RenameIndex(model_name="job", new_name="job_started_at", old_name="job_started"),
        migrations.AlterField(model_name="attempt", name="cost_usd", field=money()),
        migrations.AlterField(model_name="job", name="cost_usd", field=money()),
        migrations.AlterField(model_name="trial", name="cost_usd", field=money()),
    ]
