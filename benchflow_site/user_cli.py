"""`bench user add NAME --role viewer|operator|admin`, `list`, `disable`, `enable` and
`reset-password`: the team's logins for `bench serve`. A password is read from the terminal, or
from BENCHFLOW_PASSWORD for scripts, and must pass Django's password validators."""

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
(twice), or read from BENCHFLOW_PASSWORD: 12 characters or more, not a common password, not all
digits, not like the user name."""

VERBS = "add NAME --role ROLE | list | disable NAME | enable NAME | reset-password NAME"


def add_parser(subparsers: Any) -> None:
    user = subparsers.add_parser("user", help=f"users of bench serve: {VERBS}")
    verbs = user.add_subparsers(dest="user_command", metavar="VERB")
    add = verbs.add_parser(
        "add",
        help="add a user (or set an existing one's role and password)",
        description=DESCRIPTION,
    )
    add.add_argument("name", metavar="NAME")
    add.add_argument("--role", required=True, choices=["viewer", "operator", "admin"])
    verbs.add_parser("list", help="the users, their roles, and who is disabled")
    for verb, text in (
        ("disable", "refuse the user's logins and end their sessions (their data stays)"),
        ("enable", "let a disabled user log in again"),
        (
            "reset-password",
            "set a new password (terminal or BENCHFLOW_PASSWORD); ends the user's sessions and lifts "
            "a failed-login lock",
        ),
    ):
        verbs.add_parser(verb, help=text, description=text).add_argument("name", metavar="NAME")


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
    verb = args.user_command
    if verb not in ("add", "list", "disable", "enable", "reset-password"):
        raise UserError(f"bench user needs a verb: bench user {VERBS}")
    setup_django()
    from django.contrib.auth import get_user_model

    from runs.operations import roles

    if verb == "list":
        for user in get_user_model().objects.order_by("username"):
            state = "" if user.is_active else "\tdisabled"
            print(f"{user.username}\t{roles.role_of(user) or '-'}{state}")
        return 0
    if verb == "add":
        created = roles.add_user(args.name, args.role, _password(args.name))
        print(f"{'Added' if created else 'Updated'} {args.name} ({args.role}).")
    elif verb == "reset-password":
        roles.reset_password(args.name, _password(args.name))
        print(f"New password for {args.name}; their sessions have ended.")
    else:
        roles.set_active(args.name, verb == "enable")
        print(
            f"{args.name} is {verb}d."
            + (" Their sessions have ended." if verb == "disable" else "")
        )
    return 0
