"""Environment names are data: the one rule every way a name enters a sandbox (or a process of
ours) passes through: --agent-env, the launch form, a task's env tables, a Compose file's
`environment:`, `--allow-env` and `bench worker --pass-env`.

A name is a plain identifier (`[A-Za-z_][A-Za-z0-9_]*`), and not one that makes a shell, the
dynamic loader or an interpreter run code it names or holds: a value given under such a name is
code, whoever typed it. The list starts from what sudo strips from an environment it passes on
(plugins/sudoers/env.c, `initial_badenv_table`) and glibc's ld.so (`UNSECURE_ENVVARS`), keeps
those that run code, and adds what the manuals of bash, dash, zsh, python, node, perl, ruby, the
JVM, git, less and OpenSSL say runs code. PATH stays allowed: a task's image decides its
programs anyway, and tasks set it.
"""

from __future__ import annotations

import re

NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")

_SHELL = "the shell runs"
_LOADER = "the dynamic loader (ld.so) loads"

# exact name -> what it makes run
CODE_NAMES: dict[str, str] = {
    # bash, dash, sh, ksh, zsh
    "BASH_ENV": f"a file {_SHELL} (sourced) before every non-interactive bash script",
    "ENV": f"a file {_SHELL} (sourced) at the start of sh, dash and ksh (and bash as sh)",
    "SHELLOPTS": "bash options (xtrace makes bash expand PS4, which runs commands)",
    "BASHOPTS": "bash options set before any script line (extdebug runs traps and functions)",
    "PS0": "a prompt bash expands, running the commands in it",
    "PS1": "a prompt bash expands, running the commands in it",
    "PS2": "a prompt bash expands, running the commands in it",
    "PS4": "the xtrace prefix bash expands on every traced line, running the commands in it",
    "PROMPT_COMMAND": f"a command {_SHELL} before every prompt",
    "BASH_LOADABLES_PATH": "where bash loads builtins (shared objects) from",
    "FPATH": "where ksh and zsh autoload functions from",
    "ZDOTDIR": "where zsh reads its start-up files (code) from",
    "NULLCMD": "a command zsh runs for a bare redirection",
    "READNULLCMD": "a command zsh runs for a bare redirection",
    # glibc
    "GCONV_PATH": "where glibc's iconv loads conversion modules (shared objects) from",
    "GETCONF_DIR": "where getconf finds the programs it runs",
    "GLIBC_TUNABLES": "glibc's start-up tunables (parsed in every program before main)",
    # python
    "PYTHONSTARTUP": "a file python runs at every interactive start",
    "PYTHONPATH": "where python imports modules (code) from, ahead of its own",
    "PYTHONHOME": "where python finds its standard library (code)",
    "PYTHONUSERBASE": "where python finds user site-packages, whose .pth files run at start",
    "PYTHONINSPECT": "an interactive python prompt after every script",
    "PYTHONBREAKPOINT": "a callable python imports and runs at breakpoint()",
    "PYTHONWARNINGS": "warning filters whose categories python imports (code) at start",
    # node
    "NODE_OPTIONS": "node options (--require, --import run modules before every script)",
    "NODE_PATH": "where node resolves modules (code) from",
    # perl
    "PERL5OPT": "perl options (-M runs a module before every script)",
    "PERL5LIB": "where perl loads modules (code) from, ahead of its own",
    "PERLLIB": "where perl loads modules (code) from, ahead of its own",
    "PERL5DB": "the code perl's debugger runs",
    # ruby
    "RUBYOPT": "ruby options (-r runs a library before every script)",
    "RUBYLIB": "where ruby loads libraries (code) from, ahead of its own",
    # the JVM
    "JAVA_TOOL_OPTIONS": "JVM options (-javaagent runs code in every java)",
    "_JAVA_OPTIONS": "JVM options (-javaagent runs code in every java)",
    "JDK_JAVA_OPTIONS": "JVM options (-javaagent runs code in every java)",
    # git: commands it runs and configuration (core.fsmonitor, core.sshCommand run commands)
    "GIT_SSH": "a program git runs for every ssh remote",
    "GIT_SSH_COMMAND": "a command git runs for every ssh remote",
    "GIT_PROXY_COMMAND": "a command git runs for every git:// remote",
    "GIT_ASKPASS": "a program git runs to ask for a password",
    "SSH_ASKPASS": "a program ssh and git run to ask for a password",
    "GIT_EDITOR": "a command git runs as its editor",
    "GIT_PAGER": "a command git runs as its pager",
    "GIT_EXTERNAL_DIFF": "a command git runs for every diff",
    "GIT_EXEC_PATH": "where git finds its own sub-commands (programs)",
    "GIT_TEMPLATE_DIR": "hooks (programs) git copies into every new repository",
    "GIT_DIR": "a repository whose configuration and hooks (commands) git runs",
    "GIT_CONFIG": "a git configuration (core.fsmonitor, core.sshCommand run commands)",
    "GIT_CONFIG_GLOBAL": "a git configuration (core.fsmonitor, core.sshCommand run commands)",
    "GIT_CONFIG_SYSTEM": "a git configuration (core.fsmonitor, core.sshCommand run commands)",
    "GIT_CONFIG_COUNT": "git configuration entries (core.fsmonitor, core.sshCommand run commands)",
    "GIT_CONFIG_PARAMETERS": "git configuration entries (core.fsmonitor runs a command)",
    # others that run what the value names
    "LESSOPEN": "a command less runs on every file it opens",
    "LESSCLOSE": "a command less runs on every file it closes",
    "OPENSSL_CONF": "an OpenSSL configuration, which may load engines (shared objects)",
    "OPENSSL_ENGINES": "where OpenSSL loads engines (shared objects) from",
}

# name prefix -> what it makes run
CODE_PREFIXES: dict[str, str] = {
    "BASH_FUNC_": "a function definition bash imports into every bash (exported functions)",
    "LD_": f"a library or file {_LOADER} into every dynamically linked program",
    "DYLD_": "a library the macOS loader loads into every program",
    "_RLD": "a library an old Unix loader loads into every program",
    "GIT_CONFIG_KEY_": "a git configuration entry (core.fsmonitor, core.sshCommand run commands)",
    "GIT_CONFIG_VALUE_": "a git configuration entry (core.fsmonitor, core.sshCommand run commands)",
}


def name_problem(name: str) -> str | None:
    """Why `name` may not be given to a sandbox, or None when it may."""
    if not NAME.match(name):
        return (
            f"{name!r} is not an environment name: a name is letters, digits and _, not starting "
            "with a digit ([A-Za-z_][A-Za-z0-9_]*)"
        )
    if name in CODE_NAMES:
        return f"{name} is code, not data: it names {CODE_NAMES[name]}"
    for prefix, what in CODE_PREFIXES.items():
        if name.startswith(prefix):
            return f"{name} is code, not data: {prefix}* names {what}"
    return None


def value_problem(name: str, value: str) -> str | None:
    """Why `value` may not be given under `name`: a bash older than the 2014 fixes reads any value
    that begins with `() {` as a function and runs what follows it."""
    if value.lstrip().startswith("() {"):
        return f"{name}'s value begins with '() {{', which an older bash runs as a function"
    return None


def env_problem(name: str, value: str | None = None) -> str | None:
    """The rule for one name (and its value, when there is one)."""
    return name_problem(name) or (None if value is None else value_problem(name, value))
