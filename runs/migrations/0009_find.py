"""Search: SearchDoc (a model call or an attempt's own words) and its full-text index, which is
the database's own: an FTS5 table on SQLite (contentless: the words, not the text, which stays in
the attempt folder), a tsvector column with a GIN index on PostgreSQL."""

import django.db.models.deletion
from django.db import migrations, models

SQLITE = [
    "CREATE VIRTUAL TABLE runs_searchdoc_fts USING fts5(body, content='', detail=none)",
]
SQLITE_BACK = ["DROP TABLE IF EXISTS runs_searchdoc_fts"]
POSTGRES = [
    "ALTER TABLE runs_searchdoc ADD COLUMN body tsvector",
    "CREATE INDEX runs_searchdoc_body ON runs_searchdoc USING gin (body)",
]
POSTGRES_BACK = [
    "DROP INDEX IF EXISTS runs_searchdoc_body",
    "ALTER TABLE runs_searchdoc DROP COLUMN IF EXISTS body",
]


def full_text(apps, schema_editor):  # type: ignore[no-untyped-def]
    vendor = schema_editor.connection.vendor
    for sql in SQLITE if vendor == "sqlite" else POSTGRES if vendor == "postgresql" else []:
        schema_editor.execute(sql)


def no_full_text(apps, schema_editor):  # type: ignore[no-untyped-def]
    vendor = schema_editor.connection.vendor
    for sql in (
        SQLITE_BACK if vendor == "sqlite" else POSTGRES_BACK if vendor == "postgresql" else []
    ):
        schema_editor.execute(sql)


class Migration(migrations.Migration):
    dependencies = [
        ("runs", "0008_keys_and_money"),
    ]

    operations = [
        migrations.CreateModel(
            name="SearchDoc",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("step", models.IntegerField(default=-1)),
                ("kind", models.CharField(max_length=12)),
                (
                    "attempt",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="+",
                        to="runs.attempt",
                    ),
                ),
                (
                    "job",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="+",
                        to="runs.job",
                    ),
                ),
                (
                    "trial",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="+",
                        to="runs.trial",
                    ),
                ),
            ],
        ),
        migrations.RunPython(full_text, no_full_text, hints={"model_name": "searchdoc"}),
    ]
