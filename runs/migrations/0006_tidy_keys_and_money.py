"""The jobs list's index renamed (its old name was an event kind's); existing rows are kept."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("runs", "0005_prepared_ahead"),
    ]

    operations = [
        migrations.RenameIndex(model_name="job", new_name="job_started_at", old_name="job_started"),
    ]
