from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("runs", "0006_verifier_usage"),
    ]

    operations = [
        migrations.CreateModel(
            name="LoginThrottle",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("key", models.CharField(max_length=200, unique=True)),
                ("failures", models.IntegerField(default=0)),
                ("last_failed_at", models.DateTimeField(db_index=True)),
                ("locked_until", models.DateTimeField(blank=True, null=True)),
            ],
        ),
    ]
