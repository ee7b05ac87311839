"""Search on PostgreSQL, smaller: a piece's word numbers (SearchDoc.body) as differences in 3-bit
groups, a nibble each (runs/index/search.py `packed`), instead of 7-bit groups, a byte each. At
10,000 trials of 20 calls the rows take 4.5 MB instead of 6.3, and the GIN index 11.6 MB instead
of 14.9: with more rows a page, the heap addresses it keeps are closer together, and it stores
them as differences too (benchmarks/README.md). Existing rows are re-coded (the table rewritten
once, without its GIN index, which is built again after), and `runs_searchdoc_words` decodes the
new form.

Also, on either database, each note not in the index yet (made before notes were searchable) is
indexed, so that search finds it at once. A note made since is in already; one whose trial has
no attempt is not (nothing to show it on), as when a note is made."""

from importlib import import_module

from django.db import migrations

# The new form from the old: decoded by 0010's function, then coded again (a function of this
# transaction's own: pg_temp).
NIBBLES = """CREATE FUNCTION pg_temp.runs_searchdoc_nibbles(numbers int4[]) RETURNS bytea
LANGUAGE plpgsql IMMUTABLE STRICT AS $$
DECLARE
    nibbles int[] := '{}';
    out bytea := '';
    before int4 := 0;
    step int4;
    w int4;
BEGIN
    FOREACH w IN ARRAY numbers LOOP
        step := w - before;
        before := w;
        WHILE step >= 8 LOOP
            nibbles := nibbles || (step & 7 | 8);
            step := step >> 3;
        END LOOP;
        nibbles := nibbles || step;
    END LOOP;
    IF mod(cardinality(nibbles), 2) = 1 THEN
        nibbles := nibbles || 0;
    END IF;
    FOR i IN 1 .. coalesce(cardinality(nibbles), 0) BY 2 LOOP
        out := out || set_byte('\\x00'::bytea, 0, nibbles[i] | (nibbles[i + 1] << 4));
    END LOOP;
    RETURN out;
END $$"""
# And back, for a migration backwards: 7-bit groups, a byte each.
BYTES = """CREATE FUNCTION pg_temp.runs_searchdoc_bytes(numbers int4[]) RETURNS bytea
LANGUAGE plpgsql IMMUTABLE STRICT AS $$
DECLARE
    out bytea := '';
    before int4 := 0;
    step int4;
    w int4;
BEGIN
    FOREACH w IN ARRAY numbers LOOP
        step := w - before;
        before := w;
        WHILE step >= 128 LOOP
            out := out || set_byte('\\x00'::bytea, 0, step & 127 | 128);
            step := step >> 7;
        END LOOP;
        out := out || set_byte('\\x00'::bytea, 0, step);
    END LOOP;
    RETURN out;
END $$"""
DECODE_NIBBLES = """CREATE OR REPLACE FUNCTION runs_searchdoc_words(body bytea) RETURNS int4[]
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $$
DECLARE
    numbers int4[] := '{}';
    n int4 := 0;
    step int4 := 0;
    shift int := 0;
    b int;
    x int;
BEGIN
    FOR i IN 0 .. length(body) - 1 LOOP
        b := get_byte(body, i);
        x := b & 15;
        step := step | ((x & 7) << shift);
        IF x < 8 THEN
            n := n + step;
            numbers := numbers || n;
            step := 0;
            shift := 0;
        ELSE
            shift := shift + 3;
        END IF;
        x := b >> 4;
        step := step | ((x & 7) << shift);
        IF x < 8 THEN
            IF step > 0 THEN  -- 0: the filler of the last byte
                n := n + step;
                numbers := numbers || n;
            END IF;
            step := 0;
            shift := 0;
        ELSE
            shift := shift + 3;
        END IF;
    END LOOP;
    RETURN numbers;
END $$"""
# 0010's own decoder of bytes, put back migrating backwards.
DECODE_BYTES = (
    import_module("runs.migrations.0010_find")
    .POSTGRES[1]
    .replace("CREATE FUNCTION", "CREATE OR REPLACE FUNCTION", 1)
)
GIN = (
    "CREATE INDEX runs_searchdoc_body ON runs_searchdoc "
    "USING gin (runs_searchdoc_words(body)) WITH (fastupdate = off)"
)


def _recode(schema_editor, coder: str, decoder: str) -> None:  # type: ignore[no-untyped-def]
    """Every row's body re-coded (ALTER ... TYPE ... USING rewrites the table, leaving no dead
    rows behind), read by the decoder in place, then `decoder` in its place and the index again."""
    name = coder.split("pg_temp.", 1)[1].split("(", 1)[0]
    for sql in (
        "DROP INDEX IF EXISTS runs_searchdoc_body",
        coder,
        "ALTER TABLE runs_searchdoc ALTER COLUMN body TYPE bytea "
        f"USING pg_temp.{name}(runs_searchdoc_words(body))",
        decoder,
        GIN,
        f"DROP FUNCTION pg_temp.{name}(int4[])",
    ):
        schema_editor.execute(sql)


def _packed(numbers: list[int]) -> bytes:
    """runs/index/search.py `packed` as of this migration (a copy: a later form of it must not
    change what this writes)."""
    nibbles, before = [], 0
    for n in sorted(set(numbers)):
        step, before = n - before, n
        while step >= 8:
            nibbles.append(step & 7 | 8)
            step >>= 3
        nibbles.append(step)
    if len(nibbles) % 2:
        nibbles.append(0)
    return bytes(low | high << 4 for low, high in zip(nibbles[::2], nibbles[1::2], strict=True))


def _note_attempt(attempt_model, note) -> int | None:  # type: ignore[no-untyped-def]
    """The attempt a note is shown on: the one it names, else its trial's latest."""
    rows = attempt_model.objects.filter(trial_id=note.trial_id).order_by("-id")
    named = rows.filter(rollout_name=note.rollout_name).first() if note.rollout_name else None
    row = named or rows.first()
    return row.pk if row is not None else None


def index_notes(apps, schema_editor):  # type: ignore[no-untyped-def]
    """Each note not in the index yet as a piece of its own (id: minus the note's id), as
    runs/index/search.py `index_notes` writes it; a note made since is in already."""
    from runs.results.search_text import words

    connection = schema_editor.connection
    if connection.vendor not in ("sqlite", "postgresql"):
        return
    note_model = apps.get_model("runs", "ReviewNote")
    attempt_model = apps.get_model("runs", "Attempt")
    alias = connection.alias
    with connection.cursor() as cursor:
        for note in note_model.objects.using(alias).order_by("id").iterator():
            found = sorted(set(words(f"{note.text}\n{note.tags}")))
            attempt = _note_attempt(attempt_model, note) if found else None
            if attempt is None:
                continue
            if connection.vendor == "sqlite":
                cursor.execute(
                    "SELECT 1 FROM runs_searchdoc_fts WHERE runs_searchdoc_fts MATCH %s "
                    "AND rowid = %s",
                    [f'"{found[0]}"', -note.pk],
                )
                if cursor.fetchone() is None:
                    cursor.execute(
                        "INSERT INTO runs_searchdoc_fts (rowid, body) VALUES (%s, %s)",
                        [-note.pk, " ".join(found)],
                    )
                continue
            cursor.execute(
                "INSERT INTO runs_searchword (word) SELECT unnest(%s::text[]) "
                "ON CONFLICT (word) DO NOTHING",
                [found],
            )
            cursor.execute("SELECT id FROM runs_searchword WHERE word = ANY(%s::text[])", [found])
            body = _packed([n for (n,) in cursor.fetchall()])
            cursor.execute(
                "INSERT INTO runs_searchdoc (id, attempt_id, body) VALUES (%s, %s, %s) "
                "ON CONFLICT (id) DO NOTHING",
                [-note.pk, attempt, body],
            )


def smaller(apps, schema_editor):  # type: ignore[no-untyped-def]
    if schema_editor.connection.vendor == "postgresql":
        _recode(schema_editor, NIBBLES, DECODE_NIBBLES)


def larger(apps, schema_editor):  # type: ignore[no-untyped-def]
    if schema_editor.connection.vendor == "postgresql":
        _recode(schema_editor, BYTES, DECODE_BYTES)


class Migration(migrations.Migration):
    dependencies = [
        ("runs", "0011_heal"),
    ]

    operations = [
        migrations.RunPython(smaller, larger, hints={"model_name": "searchdoc"}),
        migrations.RunPython(
            index_notes, migrations.RunPython.noop, hints={"model_name": "searchdoc"}
        ),
    ]
