"""`bench user add NAME --role viewer|operator|admin` (and `bench user list`): the team's logins for
`bench serve`. The password is read from the terminal, or from BENCHFLOW_PASSWORD for scripts."""

from __future__ import annotations

import argparse
import getpass
import sys
from typing import Any

from benchflow_site.django_setup import setup_django
from runs.environment import setting
from runs.problems import UserError

DESCRIPTION = """\
Add a user of `bench serve` with a role: a viewer reads every page; an operator may also launch,
cancel, resume, rerun and regrade jobs; an admin also has the Django admin at /admin/. Adding a
name that exists sets its role and password again. The password is asked for on the terminal
(twice), or read from BENCHFLOW_PASSWORD."""


def add_parser(subparsers: Any) -> None:
    user = subparsers.add_parser("user", help="users of bench serve: add NAME --role ROLE | list")
    verbs = user.add_subparsers(dest="user_command", metavar="VERB")
    add = verbs.add_parser(
        "add",
        help="add a user (or set an existing one's role and password)",
        description=DESCRIPTION,
    )
    add.add_argument("name", metavar="NAME")
    add.add_argument("--role", required=True, choices=["viewer", "operator", "admin"])
    verbs.add_parser("list", help="the users and their roles")


def _password(name: str) -> str:
    if password := setting("BENCHFLOW_PASSWORD"):
        return password
    if not sys.stdin.isatty():
        raise UserError(
            "no terminal to read a password from; fix: set BENCHFLOW_PASSWORD for scripts"
        )
    first = getpass.getpass(f"Password for {name}: ")
    if getpass.getpass("Again: ") != first:
        raise UserError("the passwords differ; nothing was changed")
    return first


def run(args: argparse.Namespace) -> int:
    if args.user_command not in ("add", "list"):
        raise UserError(
            "bench user needs a verb: bench user add NAME --role ROLE, or bench user list"
        )
    setup_django()
    from django.contrib.auth import get_user_model

    from runs.operations import roles

    if args.user_command == "list":
        for user in get_user_model().objects.order_by("username"):
            print(f"{user.username}\t{roles.role_of(user) or '-'}")
        return 0
    created = roles.add_user(args.name, args.role, _password(args.name))
    print(f"{'Added' if created else 'Updated'} {args.name} ({args.role}).")
    return 0
