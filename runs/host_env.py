"""Which of this machine's environment variables a task may read: only the names a person allowed.

A task's `${VAR}` (in an env table or its Compose file) resolves from the environment of whoever
runs it. Task sets are public downloads, so a task may name any variable (`${DATABASE_URL}`): it
resolves only when its name was allowed, by `--allow-env NAME` on `bench run` and `bench tasks
check` (the person running it, on their own machine) or by BENCHFLOW_ALLOW_ENV (the admin's, for
every run of the deployment; the only one a job launched from `bench serve` gets, as the operator
who launched it does not own the server's environment). A model provider's key is never allowed:
agents and verifiers reach their models through the proxy. A name not allowed leaves `${VAR:-x}`
its default, and makes `${VAR}` a problem that names the file, the field, the variable and the fix.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from runs import env_names
from runs.secrets import MODEL_KEY_VARS

ALLOW_ENV_VAR = "BENCHFLOW_ALLOW_ENV"
_SEPARATORS = re.compile(r"[\s,]+")


def allow_problem(name: str) -> str | None:
    """Why `name` may not be allowed (a flag's or the setting's), or None."""
    if not env_names.NAME.match(name):
        return f"{name!r} is not an environment name ([A-Za-z_][A-Za-z0-9_]*)"
    if name in MODEL_KEY_VARS:
        return (
            f"{name} is a model provider's key (or a Claude login), which never enters a sandbox; "
            "fix: drop it: agents and verifiers reach their model through the proxy (a verifier's "
            f"${{{name}}} in [verifier] env gets a token of its own)"
        )
    return None


def setting_names(environ: Mapping[str, str] | None = None) -> list[str]:
    """The names BENCHFLOW_ALLOW_ENV lists (commas or spaces between them)."""
    env = os.environ if environ is None else environ
    return [n for n in _SEPARATORS.split(env.get(ALLOW_ENV_VAR, "")) if n]


def setting_problems(environ: Mapping[str, str] | None = None) -> list[str]:
    return [
        f"{ALLOW_ENV_VAR}: {why}"
        for name in setting_names(environ)
        if (why := allow_problem(name)) is not None
    ]


@dataclass(frozen=True)
class HostEnv:
    """The variables a task's ${VAR} may read here: the allowed names, and the values of those set."""

    allowed: frozenset[str] = frozenset()
    values: Mapping[str, str] = field(default_factory=dict)
    on_server: bool = False  # a job launched from `bench serve`: only the admin's setting counts

    def how_to_allow(self, var: str) -> str:
        if self.on_server:
            return (
                f"an admin lists {var} in {ALLOW_ENV_VAR} where bench serve and its jobs run "
                f"(operators cannot allow this machine's variables), or the task writes "
                f"${{{var}:-default}}"
            )
        return (
            f"allow it with --allow-env {var} (bench run, bench tasks check) or {ALLOW_ENV_VAR}="
            f"{var}, if the task may read it from this machine; or write ${{{var}:-default}}"
        )


NO_HOST_ENV = HostEnv()


def host_env(
    flag_names: Iterable[str] = (),
    environ: Mapping[str, str] | None = None,
    *,
    on_server: bool = False,
) -> HostEnv:
    """What a run may read here: the setting's names, with `flag_names` (--allow-env) unless the
    run was launched from `bench serve`; never a model provider's key or a name that is not one."""
    env = os.environ if environ is None else environ
    names = set(setting_names(env))
    if not on_server:
        names |= set(flag_names)
    names = {n for n in names if allow_problem(n) is None}
    return HostEnv(frozenset(names), {n: env[n] for n in sorted(names) if n in env}, on_server)


def sealed_host_env(values: Mapping[str, str]) -> HostEnv:
    """On a worker: what the run's coordinator allowed and had (runs/workers/sealed.py); the
    worker's own environment is not read."""
    return HostEnv(frozenset(values), dict(values))
