"""Model agents' wiring: a Claude login's detection and refusals, each CLI's variables and config."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from runs.agents.claude import ClaudeAgent, login_credentials
from runs.agents.codex import CodexAgent
from runs.agents.install import SPECS
from runs.agents.model_agent import cli_model_name
from runs.agents.opencode import OpenCodeAgent
from runs.agents.registry import resolve_agent
from runs.jobs.preflight import model_problems
from runs.spec import RunSpec
from runs.tasks.config import AgentConfig, SandboxConfig, VerifierConfig
from runs.tasks.load import Task

# a task with every setting at its default (no MCP servers)
A_TASK = Task(
    name="t",
    path=Path("/t"),
    layout="split",
    config_file=Path("/t/task.toml"),
    instruction="x",
    environment_dir=None,
    tests_dir=Path("/t/tests"),
    solution_dir=None,
    sandbox=SandboxConfig(),
    agent=AgentConfig(),
    verifier=VerifierConfig(),
)


def test_a_claude_login_is_used_only_for_bare_aliases_without_an_api_key(tmp_path):
    creds = tmp_path / ".credentials.json"
    creds.write_text("{}")
    env = {"CLAUDE_CONFIG_DIR": str(tmp_path)}
    assert login_credentials("sonnet", env) == creds
    # a provider route: the proxy
    assert login_credentials("anthropic/claude-sonnet-4-5", env) is None
    # an API key wins
    assert login_credentials("sonnet", {**env, "ANTHROPIC_API_KEY": "sk-x"}) is None
    assert (
        login_credentials("sonnet", {"CLAUDE_CODE_OAUTH_TOKEN": "t"})
        == "env:CLAUDE_CODE_OAUTH_TOKEN"
    )
    assert login_credentials("sonnet", {"CLAUDE_CONFIG_DIR": str(tmp_path / "none")}) is None


def test_a_login_cannot_be_held_to_a_per_trial_budget(tmp_path, monkeypatch):
    (tmp_path / ".credentials.json").write_text("{}")
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(tmp_path))
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.delenv("ANTHROPIC_AUTH_TOKEN", raising=False)
    agent = resolve_agent("claude", model="sonnet")
    spec = RunSpec(tasks_dir=Path("t"), agent="claude", model="sonnet", token_budget=1000)
    problems = [str(p) for p in model_problems(spec, agent, gateway=None)]
    assert agent.login and not agent.calls_proxy()
    assert any("a Claude login calls Anthropic directly" in p and "fix:" in p for p in problems)
    spec = RunSpec(tasks_dir=Path("t"), agent="claude", model="sonnet", max_cost_usd=1.0)
    assert any("--max-cost-usd" in str(p) for p in model_problems(spec, agent, gateway=None))


@pytest.mark.parametrize(
    ("login", "base_url", "ports"),
    [
        (True, "http://127.0.0.1:7001", [7001]),
        (True, "http://localhost:7002/gw", [7002]),
        (True, "https://gateway.example.com", []),  # reached over the sandbox's network as it is
        (True, "", []),
        (False, "http://127.0.0.1:7001", []),  # without a login the proxy is the only way out
    ],
)
def test_a_logins_gateway_on_loopback_is_relayed_into_the_sandbox(
    monkeypatch, login, base_url, ports
):
    monkeypatch.setenv("ANTHROPIC_BASE_URL", base_url)
    monkeypatch.setenv("CLAUDE_CODE_OAUTH_TOKEN", "oauth-t")
    agent = ClaudeAgent()
    agent.login = login
    assert agent.loopback_ports() == ports
    if login:
        env = agent.login_env()
        assert (
            env["CLAUDE_CODE_OAUTH_TOKEN"] == "oauth-t"
            and env.get("ANTHROPIC_BASE_URL", "") == base_url
        )


def test_each_cli_gets_only_the_proxy_url_and_its_attempt_key():
    for agent in (ClaudeAgent(), OpenCodeAgent(), CodexAgent()):
        agent.proxy_url, agent.model = "http://127.0.0.1:5555", "deepseek/deepseek-v4-flash"
        env = agent.model_env("bf-attempt-key")
        assert "bf-attempt-key" in env.values()
        assert not any(
            k in env for k in ("DEEPSEEK_API_KEY", "OPENAI_API_KEY", "ANTHROPIC_API_KEY")
        )
    claude = ClaudeAgent()
    claude.proxy_url = "http://127.0.0.1:5555"
    env = claude.model_env("k")
    assert (
        env["ANTHROPIC_BASE_URL"] == "http://127.0.0.1:5555" and env["ANTHROPIC_AUTH_TOKEN"] == "k"
    )
    assert env["DISABLE_TELEMETRY"] == "1" and env["DISABLE_AUTOUPDATER"] == "1"


def test_opencode_and_codex_configs_point_at_the_proxy(tmp_path):
    oc, cx = OpenCodeAgent(), CodexAgent()
    for agent in (oc, cx):
        agent.proxy_url, agent.model = "http://127.0.0.1:5555", "mock/oracle"
    files = oc.files(A_TASK, "x")
    config = json.loads(files[f"{oc.home}/opencode.json"].data)
    assert config["provider"]["benchflow"]["options"]["baseURL"] == "http://127.0.0.1:5555/v1"
    assert "{env:BENCHFLOW_PROXY_KEY}" == config["provider"]["benchflow"]["options"]["apiKey"]
    [(path, entry)] = cx.files(A_TASK, "x").items()
    text = entry.data.decode()
    assert 'base_url = "http://127.0.0.1:5555/v1"' in text and 'wire_api = "responses"' in text
    assert "enabled = false" in text  # analytics off


@pytest.mark.parametrize(
    ("model", "window"),
    [("openai-compatible/qwen3-coder", True), ("mock/oracle", True), ("openai/gpt-5", False)],
)
def test_codex_is_told_a_context_window_for_models_it_does_not_know(model, window):
    import tomllib

    cx = CodexAgent()
    cx.proxy_url, cx.model = "http://127.0.0.1:5555", model
    [entry] = cx.files(A_TASK, "x").values()
    config = tomllib.loads(entry.data.decode())
    if window:  # compaction before the window is full, with room for the output
        assert config["model_context_window"] == 128_000
        assert config["model_auto_compact_token_limit"] == 128_000 - 2 * 8192
    else:  # OpenAI's own models: Codex knows their windows
        assert (
            "model_context_window" not in config and "model_auto_compact_token_limit" not in config
        )
    assert config["model_provider"] == "benchflow"


@pytest.mark.parametrize(
    ("model", "name"),
    [
        ("deepseek/deepseek-v4-flash", "deepseek-v4-flash"),
        ("mock/script:replies.json", "script-replies.json"),
        ("sonnet", "sonnet"),
    ],
)
def test_cli_model_names(model, name):
    assert cli_model_name(model) == name


@pytest.mark.parametrize(
    "instruction", ["- first step\n- second step", "---\ntitle: x\n---\nDo it.", "--help", "plain"]
)
@pytest.mark.parametrize("agent_class", [ClaudeAgent, CodexAgent])
def test_the_instruction_is_passed_whole_after_the_end_of_options(agent_class, instruction):
    # given an instruction.md that opens with a bullet list, front matter or something option-like
    agent = agent_class()
    agent.model = "mock/oracle"
    # when
    argv = agent.argv(instruction)
    # then it is the last argument, after `--`, and no option follows the `--`
    assert argv[-2:] == ["--", instruction]
    assert argv.index("--") == len(argv) - 2


@pytest.mark.parametrize(
    "instruction",
    ['Run `print("hi")` and say "done".\n\n- then   stop', "--help", "x" * 200_000],
    ids=["quotes-newlines", "option-like", "over-128KiB"],
)
def test_opencode_reads_the_instruction_unchanged_on_its_stdin(tmp_path, instruction):
    # given OpenCode's files and command for an instruction with quotes, spaces and newlines (its
    # `run` quotes a message argument holding a space), or one too long for a single argument
    agent = OpenCodeAgent()
    agent.model = "mock/oracle"
    files = agent.files(A_TASK, instruction)
    argv = agent.argv(instruction)
    # when the command runs with a stand-in binary that keeps its arguments and stdin, and the
    # instruction file where files() put it
    fake, prompt = tmp_path / "opencode", tmp_path / "instruction.md"
    fake.write_text('#!/bin/sh\nprintf "%s\\n" "$@" > "$0.args"\ncat > "$0.stdin"\n')
    fake.chmod(0o755)
    model = f"benchflow/{cli_model_name(agent.model)}"
    assert argv[3:] == [agent.binary, model, agent._instruction_file]
    prompt.write_bytes(files[agent._instruction_file].data)
    subprocess.run([*argv[:3], str(fake), argv[4], str(prompt)], check=True)
    # then the instruction is its stdin byte for byte, and no message argument comes with it
    assert (tmp_path / "opencode.stdin").read_text() == instruction
    args = (tmp_path / "opencode.args").read_text().splitlines()
    assert args == ["run", "-m", model, "--format", "json"]


def test_claude_is_told_to_print_before_the_instruction():
    agent = ClaudeAgent()
    agent.model = "sonnet"
    argv = agent.argv("- do it")
    assert argv.index("-p") < argv.index("--") and "--output-format" in argv[: argv.index("--")]


def _opencode_config(model: str = "deepseek/deepseek-v4-flash") -> dict:
    agent = OpenCodeAgent()
    agent.proxy_url, agent.model = "http://127.0.0.1:5555", model
    [entry] = [e for p, e in agent.files(A_TASK, "x").items() if p.endswith("opencode.json")]
    return json.loads(entry.data)


def test_opencode_asks_for_8k_output_tokens_and_compacts_before_128k_of_context():
    # without a limit OpenCode asks for 32000 output tokens (DeepSeek, capped at 8K, rejects every
    # call) and takes a context window of 0, which turns its auto-compaction off
    config = _opencode_config()
    [model] = config["provider"]["benchflow"]["models"].values()
    assert model["limit"] == {"context": 128000, "output": 8192}


def test_opencode_allows_what_its_run_mode_would_otherwise_auto_reject():
    # by default it asks before reading *.env files and after three identical tool calls (doom_loop);
    # `opencode run` rejects every question, which ends the agent's turn
    permission = _opencode_config()["permission"]
    for name in ("bash", "edit", "external_directory", "read", "doom_loop"):
        assert permission[name] == "allow", name


def test_opencode_ignores_an_opencode_json_in_the_tasks_workdir():
    # one there could point the calls away from the proxy, deny the agent's tools or add plugins
    agent = OpenCodeAgent()
    agent.proxy_url, agent.model = "http://127.0.0.1:5555", "mock/oracle"
    assert agent.model_env("k")["OPENCODE_DISABLE_PROJECT_CONFIG"] == "1"


def test_a_claude_logins_config_folder_is_writable_by_a_non_root_agent_user(tmp_path, monkeypatch):
    # given a login through the credentials file, which is mounted inside Claude's config folder
    (tmp_path / ".credentials.json").write_text("{}")
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(tmp_path))
    for name in (
        "ANTHROPIC_API_KEY",
        "ANTHROPIC_AUTH_TOKEN",
        "CLAUDE_CODE_OAUTH_TOKEN",
        "BENCHFLOW_AGENT_MOUNT",
    ):
        monkeypatch.delenv(name, raising=False)
    agent = ClaudeAgent()
    agent.login, agent.model = True, "sonnet"
    [target] = [t for t in agent.mounts(None) if t.endswith(".credentials.json")]  # type: ignore[arg-type]
    # then the folder that holds it is made world-writable before the agent starts, not left to
    # Docker (root, 755), so that the agent's Bash tool can make its session folders there
    config_dir = target.rsplit("/", 1)[0]
    assert config_dir == agent.login_env()["CLAUDE_CONFIG_DIR"]
    assert config_dir in agent.writable_dirs()


@pytest.mark.parametrize("login", [False, True])
def test_claudes_webfetch_asks_no_one_outside_the_proxy_whether_a_domain_may_be_fetched(
    monkeypatch, login
):
    # WebFetch's preflight calls api.anthropic.com/api/web/domain_info unless a setting turns it off
    monkeypatch.setenv("CLAUDE_CODE_OAUTH_TOKEN", "t")
    agent = ClaudeAgent()
    agent.login, agent.model, agent.proxy_url = login, "sonnet", "http://127.0.0.1:5555"
    config_dir = (
        agent.login_env()["CLAUDE_CONFIG_DIR"]
        if login
        else agent.model_env("k")["CLAUDE_CONFIG_DIR"]
    )
    files = agent.files(A_TASK, "x")
    settings = json.loads(files[f"{config_dir}/settings.json"].data)
    assert settings["skipWebFetchPreflight"] is True


def _fake_install(cache: Path, agent_class) -> None:
    """What npm leaves for the agent's pinned version, as far as the sandbox needs it."""
    spec = agent_class.spec
    prefix = cache / f"{spec.name}-{spec.version}"
    (prefix / spec.binary).parent.mkdir(parents=True)
    (prefix / spec.binary).write_text("binary")
    if spec.name == "opencode":  # as if an earlier run had fetched its ripgrep
        (prefix / spec.shipped / "rg").write_text("ripgrep")
    if spec.name == "codex":  # the native package's other parts, beside bin/
        package = (prefix / spec.binary).parent.parent
        (package / "codex-package.json").write_text('{"pathDir": "codex-path"}')
        (package / "codex-path").mkdir()
        (package / "codex-path" / "rg").write_text("ripgrep")
        (package / "codex-resources").mkdir()


def test_codex_gets_its_whole_native_package_so_its_bundled_ripgrep_is_on_path(
    tmp_path, monkeypatch
):
    # given Codex installed (its package's manifest names codex-path/, which Codex puts on PATH)
    monkeypatch.setenv("BENCHFLOW_AGENT_CACHE", str(tmp_path))
    monkeypatch.delenv("BENCHFLOW_AGENT_MOUNT", raising=False)
    _fake_install(tmp_path, CodexAgent)
    agent = CodexAgent()
    agent.install(lambda _event: None)
    # when its layer is made
    layer = agent.image_layer()
    assert layer is not None
    # then the manifest and rg come with the binary, and the command runs the binary inside that folder
    for part in ("codex-package.json", "codex-path/rg", "codex-resources"):
        assert (layer.source / part).exists(), part
    inside = agent.argv("x")[0]
    assert inside.startswith(layer.target + "/")
    assert (layer.source / inside.removeprefix(layer.target + "/")).read_text() == "binary"
    # and its cached files image has a new name: the old one held bin/ alone
    assert layer.name != f"codex-{SPECS['codex'].version}" and SPECS["codex"].version in layer.name


@pytest.mark.parametrize("agent_class", [ClaudeAgent])
def test_claude_layer_keeps_its_name_and_binary_path(tmp_path, monkeypatch, agent_class):
    # its layout did not change: layers already built stay in use
    monkeypatch.setenv("BENCHFLOW_AGENT_CACHE", str(tmp_path))
    monkeypatch.delenv("BENCHFLOW_AGENT_MOUNT", raising=False)
    _fake_install(tmp_path, agent_class)
    agent = agent_class()
    agent.install(lambda _event: None)
    layer = agent.image_layer()
    spec = agent_class.spec
    assert layer is not None and layer.name == f"{spec.name}-{spec.version}"
    assert (layer.source / Path(spec.binary).name).is_file()
    assert agent.argv("x")[0] == f"{layer.target}/{Path(spec.binary).name}"


def _run_help(dest: str) -> str:
    import argparse

    from runs.spec import add_run_arguments

    parser = argparse.ArgumentParser()
    add_run_arguments(parser)
    [action] = [a for a in parser._actions if a.dest == dest]
    return " ".join(str(action.help).split())


def test_bench_run_help_names_every_agent_name_it_accepts():
    from runs.agents.registry import ALIASES, known_agent_names

    text = _run_help("agent")
    for name in [*known_agent_names(), *ALIASES]:
        assert name in text, name
    for alias, agent in ALIASES.items():
        assert resolve_agent(alias).name == agent


def test_bench_run_help_says_a_bare_claude_alias_means_a_login_or_anthropic():
    # (test_a_claude_login_is_used_only_for_bare_aliases_without_an_api_key checks that it holds)
    text = _run_help("model")
    assert "sonnet" in text and "Claude login" in text and "ANTHROPIC_API_KEY" in text
    assert "provider-prefixed (mock/oracle, deepseek/deepseek-v4-flash, sonnet" not in text


def test_opencode_starts_without_reaching_the_npm_registry():
    # at every start it installs @opencode-ai/plugin into its config folder with npm's own code;
    # on this host that made 26 DNS/HTTPS connections per run, and none with npm offline
    agent = OpenCodeAgent()
    agent.proxy_url, agent.model = "http://127.0.0.1:5555", "mock/oracle"
    assert agent.model_env("k")["npm_config_offline"] == "true"


def test_opencode_ships_the_ripgrep_of_the_codex_install_beside_its_binary(tmp_path, monkeypatch):
    # given OpenCode installed by npm (no rg: it would download one from GitHub) and Codex installed
    monkeypatch.setenv("BENCHFLOW_AGENT_CACHE", str(tmp_path))
    monkeypatch.delenv("BENCHFLOW_AGENT_MOUNT", raising=False)
    monkeypatch.setenv("PATH", "/nonexistent")  # no npm: nothing may be fetched
    _fake_install(tmp_path, CodexAgent)
    spec = OpenCodeAgent.spec
    (tmp_path / f"opencode-{spec.version}" / spec.binary).parent.mkdir(parents=True)
    (tmp_path / f"opencode-{spec.version}" / spec.binary).write_text("binary")
    # when the job installs it
    agent = OpenCodeAgent()
    agent.install(lambda _event: None)
    # then Codex's static rg ships beside opencode, in a layer of a new name (the old had no rg)
    layer = agent.image_layer()
    assert layer is not None and layer.name == f"opencode-{spec.version}-layout2"
    rg = layer.source / "rg"
    assert rg.read_text() == "ripgrep" and rg.stat().st_mode & 0o111
    # and OpenCode finds it in its cache folder, which stays the agent's to write in
    link = agent.files(A_TASK, "x")[f"{agent.home}/.cache/opencode/bin/rg"]
    assert link.link == f"{layer.target}/rg"
    assert f"{agent.home}/.cache/opencode/bin" in agent.writable_dirs()
    assert agent.model_env("k")["XDG_CACHE_HOME"] == f"{agent.home}/.cache"


def test_opencode_ripgrep_comes_from_codex_package_with_npm_pack_when_codex_is_not_installed(
    tmp_path, monkeypatch
):
    # given no Codex install, and an npm whose `pack` leaves Codex's linux-x64 package in the folder given
    import io
    import tarfile

    monkeypatch.setenv("BENCHFLOW_AGENT_CACHE", str(tmp_path / "cache"))
    tgz = tmp_path / "codex-linux-x64.tgz"
    with tarfile.open(tgz, "w:gz") as tar:
        info = tarfile.TarInfo("package/vendor/x86_64-unknown-linux-musl/codex-path/rg")
        info.size, info.mode = 7, 0o755
        tar.addfile(info, io.BytesIO(b"rg 15.2"))
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "npm").write_text(
        f'#!/bin/sh\necho "$@" > {tmp_path}/npm-args\n'
        f'while [ "$1" != "--pack-destination" ]; do shift; done\ncp {tgz} "$2"/\n'
    )
    (bin_dir / "npm").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    spec = OpenCodeAgent.spec
    prefix = tmp_path / "cache" / f"opencode-{spec.version}"
    (prefix / spec.binary).parent.mkdir(parents=True)
    (prefix / spec.binary).write_text("binary")
    # when
    from runs.agents.install import ensure_installed

    folder = ensure_installed(spec, lambda _event: None)
    # then only the rg was taken from the package, for the pinned Codex version
    assert (folder / "rg").read_bytes() == b"rg 15.2" and (folder / "rg").stat().st_mode & 0o111
    assert (
        f"@openai/codex@{SPECS['codex'].version}-linux-x64" in (tmp_path / "npm-args").read_text()
    )
    assert sorted(p.name for p in folder.iterdir()) == ["opencode", "rg"]


def test_a_link_entry_goes_into_the_tar_as_a_symbolic_link():
    import io
    import tarfile

    from runs.sandboxes.files import FileEntry, make_tar

    data = make_tar(
        {"/home/a/bin/rg": FileEntry(b"", link="/opt/x/rg"), "/home/a/f": FileEntry(b"hi")},
        dirs=["/home/a", "/home/a/bin"],
    )
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        members = {m.name: m for m in tar.getmembers()}
        assert members["home/a/bin/rg"].issym() and members["home/a/bin/rg"].linkname == "/opt/x/rg"
        assert members["home/a/f"].isfile() and tar.extractfile("home/a/f").read() == b"hi"
        assert [m.name for m in tar.getmembers()][:2] == ["home/a", "home/a/bin"]  # dirs first
