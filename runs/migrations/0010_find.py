"""Search: the full-text index of the words of attempts, the database's own. On SQLite an FTS5
table (contentless, without positions: which pieces have a word, not the text, which stays in the
attempt folder); on PostgreSQL SearchDoc's `body`, the piece's distinct words sorted and joined by
spaces (compressed in its row: toast_tuple_target 128), under a GIN index on its words as an array
(fastupdate off: the pending list's pages would stay in the index's file after they are merged,
three times its size). Attempt.searched marks an attempt whose words are in."""

import django.db.models.deletion
from django.db import migrations, models

SQLITE = [
    "CREATE VIRTUAL TABLE runs_searchdoc_fts USING fts5("
    "body, content='', detail=none, columnsize=0)",
]
SQLITE_BACK = ["DROP TABLE IF EXISTS runs_searchdoc_fts"]
POSTGRES = [
    "ALTER TABLE runs_searchdoc ADD COLUMN body text NOT NULL",
    "ALTER TABLE runs_searchdoc SET (toast_tuple_target = 128)",
    "CREATE INDEX runs_searchdoc_body ON runs_searchdoc "
    "USING gin (string_to_array(body, ' ')) WITH (fastupdate = off)",
]
POSTGRES_BACK = [
    "DROP INDEX IF EXISTS runs_searchdoc_body",
    "ALTER TABLE runs_searchdoc RESET (toast_tuple_target)",
    "ALTER TABLE runs_searchdoc DROP COLUMN IF EXISTS body",
]


def _statements(vendor: str, forward: bool) -> list[str]:
    if vendor == "sqlite":
        return SQLITE if forward else SQLITE_BACK
    if vendor == "postgresql":
        return POSTGRES if forward else POSTGRES_BACK
    return []


def full_text(apps, schema_editor):  # type: ignore[no-untyped-def]
    for sql in _statements(schema_editor.connection.vendor, True):
        schema_editor.execute(sql)


def no_full_text(apps, schema_editor):  # type: ignore[no-untyped-def]
    for sql in _statements(schema_editor.connection.vendor, False):
        schema_editor.execute(sql)


class Migration(migrations.Migration):
    dependencies = [
        ("runs", "0009_review"),
    ]

    operations = [
        migrations.AddField(
            model_name="attempt",
            name="searched",
            field=models.BooleanField(default=False),
        ),
        migrations.CreateModel(
            name="SearchDoc",
            fields=[
                ("id", models.BigIntegerField(primary_key=True, serialize=False)),
                (
                    "attempt",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="+",
                        to="runs.attempt",
                    ),
                ),
            ],
        ),
        migrations.RunPython(full_text, no_full_text, hints={"model_name": "searchdoc"}),
    ]
