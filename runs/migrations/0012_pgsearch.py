"""Search on PostgreSQL, smaller: a piece's word numbers (SearchDoc.body) as differences in 3-bit
groups, a nibble each (runs/index/search.py `packed`), instead of 7-bit groups, a byte each. At
10,000 trials of 20 calls the rows take 4.5 MB instead of 6.3, and the GIN index 11.6 MB instead
of 14.9: with more rows a page, the heap addresses it keeps are closer together, and it stores
them as differences too (benchmarks/README.md). Existing rows are re-coded (the table rewritten
once, without its GIN index, which is built again after), and `runs_searchdoc_words` decodes the
new form.

Also, on either database, the notes made before notes were searchable (0009_review to
0010_find) are indexed, so that search finds them at once, not only after `bench index`."""

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
DECODE_BYTES = """CREATE OR REPLACE FUNCTION runs_searchdoc_words(body bytea) RETURNS int4[]
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
END $$"""
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
    ]
