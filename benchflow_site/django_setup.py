"""Django set up for a command that uses the ORM: settings, and the migrations the database lacks."""

from __future__ import annotations

import os


def setup_django() -> None:
    """Settings a user can get wrong (DATABASE_URL, the secret key) are a UserError, not a crash."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "benchflow_site.settings")
    import django
    from django.core.exceptions import ImproperlyConfigured

    from runs.problems import UserError

    try:
        django.setup()
    except ImproperlyConfigured as exc:
        raise UserError(str(exc)) from None
    from django.db import connections
    from django.db.migrations.executor import MigrationExecutor

    for alias in connections:  # default, and on SQLite the leases' own file (settings.py)
        executor = MigrationExecutor(connections[alias])
        if executor.migration_plan(executor.loader.graph.leaf_nodes()):
            from django.core.management import call_command

            call_command("migrate", database=alias, verbosity=0, interactive=False)
