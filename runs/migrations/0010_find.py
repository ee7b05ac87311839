"""Search: the full-text index of the words of attempts, the database's own. On SQLite an FTS5
table (contentless, without positions: which pieces have a word, not the text, which stays in the
attempt folder). On PostgreSQL SearchDoc's `body`: the numbers of the piece's distinct words (their
rows in `runs_searchword`) sorted, as varint-coded differences (runs/index/search.py `packed`),
under a GIN index on the numbers `runs_searchdoc_words(body)` decodes (fastupdate off: the pending
list's pages would stay in the index's file after they are merged, three times its size).
Attempt.searched marks an attempt whose words are in."""

import django.db.models.deletion
from django.db import migrations, models

SQLITE = [
    "CREATE VIRTUAL TABLE runs_searchdoc_fts USING fts5("
    "body, content='', detail=none, columnsize=0)",
]
SQLITE_BACK = ["DROP TABLE IF EXISTS runs_searchdoc_fts"]
POSTGRES = [
    "CREATE TABLE runs_searchword (id serial PRIMARY KEY, word text NOT NULL UNIQUE)",
    """CREATE FUNCTION runs_searchdoc_words(body bytea) RETURNS int4[]
    LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $$
    DECLARE
        numbers int4[] := '{}';
        n int4 := 0;
        step int4 := 0;
        shift int := 0;
        b int;
    BEGIN
        FOR i IN 0 .. length(body) - 1 LOOP
            b := get_byte(body, i);
            step := step | ((b & 127) << shift);
            IF b < 128 THEN
                n := n + step;
                numbers := numbers || n;
                step := 0;
                shift := 0;
            ELSE
                shift := shift + 7;
            END IF;
        END LOOP;
        RETURN numbers;
    END $$""",
    "ALTER TABLE runs_searchdoc ADD COLUMN body bytea NOT NULL",
    "CREATE INDEX runs_searchdoc_body ON runs_searchdoc "
    "USING gin (runs_searchdoc_words(body)) WITH (fastupdate = off)",
    # The pieces having all these word numbers, always from the index: for a word in most pieces
    # the planner would rather read the table, decoding every row (30 times slower); the index
    # answers `@>` without decoding any.
    """CREATE FUNCTION runs_searchdoc_having(numbers int4[]) RETURNS SETOF bigint
    LANGUAGE sql STABLE PARALLEL SAFE SET enable_seqscan = off AS $$
        SELECT id FROM runs_searchdoc WHERE runs_searchdoc_words(body) @> numbers
    $$""",
]
POSTGRES_BACK = [
    "DROP INDEX IF EXISTS runs_searchdoc_body",
    "ALTER TABLE runs_searchdoc DROP COLUMN IF EXISTS body",
    "DROP FUNCTION IF EXISTS runs_searchdoc_having(int4[])",
    "DROP FUNCTION IF EXISTS runs_searchdoc_words(bytea)",
    "DROP TABLE IF EXISTS runs_searchword",
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
