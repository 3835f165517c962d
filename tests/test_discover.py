"""Finding your way without the source: `sandbox presets`, an example in every command's help,
summaries not cut, `explain` within the terminal, and shell completion that never hangs."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time

import click
import pytest
from click.testing import CliRunner

from launcher import resources
from launcher.check import explain
from launcher.cli import complete, main
from launcher.pipeline import pipeline
from launcher.pipeline.pipeline import LayerOptions

SCRIPT = os.path.join(os.path.dirname(sys.executable), "sandbox")   # completion keys on the program's name


def cli(*args: str, columns: int = 100):
    try:
        runner = CliRunner(mix_stderr=False)   # click 8.1; later versions keep stderr apart anyway
    except TypeError:
        runner = CliRunner()
    return runner.invoke(main, list(args), env={"COLUMNS": str(columns)}, catch_exceptions=False)


def commands(group: click.Group = main, path: tuple[str, ...] = ()):
    for name, command in sorted(group.commands.items()):
        yield path + (name,), command
        if isinstance(command, click.Group):
            yield from commands(command, path + (name,))


def test_presets_lists_every_bundled_preset_as_the_loader_reads_it():
    result = cli("presets", "--json")
    assert result.exit_code == 0, result.stderr
    rows = {r["name"]: r for r in json.loads(result.stdout)}
    assert sorted(rows) == resources.preset_names()
    # untrusted-gvisor only `extends: [untrusted]`: the loader's answer, not the file's few keys.
    assert rows["untrusted-gvisor"]["workspace"] == rows["untrusted"]["workspace"] == "copy, read-write"
    assert rows["untrusted-gvisor"]["runtime"] == "gvisor" and rows["untrusted"]["runtime"] == "runc"
    assert {n: r["writes_reach_your_tree"] for n, r in rows.items()} == {
        "ci": "yes", "devcontainer": "yes", "read-only": "no", "untrusted": "only by `sandbox apply`",
        "untrusted-gvisor": "only by `sandbox apply`"}
    assert rows["ci"]["network"] == "proxy" and rows["read-only"]["network"] == "none"
    assert "pypi.org" in rows["devcontainer"]["allow"] and rows["read-only"]["purpose"].startswith("Look, do not touch")


def test_presets_text_names_each_and_fits_the_terminal():
    result = cli("presets", columns=100)
    assert result.exit_code == 0, result.stderr
    lines = result.stdout.splitlines()
    assert max(map(len, lines)) <= 100
    for name in resources.preset_names():
        assert any(line.startswith(f"{name}: ") for line in lines)
    assert "writes reach your tree: only by `sandbox apply`" in result.stdout


def test_policy_help_points_at_sandbox_presets():
    for name in ("run", "up", "compile", "devcontainer"):
        text = cli(name, "--help", columns=200).stdout
        assert "`sandbox presets`" in text and "policies/" not in text, name


@pytest.mark.parametrize("path", [p for p, _ in commands()], ids=" ".join)
def test_every_command_has_an_example_and_a_whole_summary(path):
    result = cli(*path, "--help", columns=120)
    assert result.exit_code == 0, result.stderr
    assert "\nExample" in result.stdout.replace("\n  ", "\n").replace("\n  ", "\n"), result.stdout
    command = main
    for name in path:
        command = command.commands[name]
    summary = command.get_short_help_str(limit=80)
    assert command.short_help and summary == command.short_help and not summary.endswith("..."), path


def test_the_command_list_cuts_no_summary():
    text = cli("--help", columns=80).stdout
    listed = text.split("Commands:", 1)[1]
    assert "..." not in listed and "…" not in listed
    assert all(name in listed for name in main.commands)


@pytest.mark.parametrize("target", ["run", "up", "argv", "compose", "kubernetes", "devcontainer"])
def test_explain_fits_a_100_column_terminal(target):
    policy = "untrusted" if target in ("run", "up", "kubernetes") else "read-only"   # a copy needs run or up
    result = cli("explain", policy, "--target", target, columns=100)
    assert result.exit_code == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines and max(map(len, lines)) <= 100 and len(lines) > 20, (result.stdout, result.stderr)
    assert "workspace.mode" in result.stdout and "enforced by nothing:" in result.stdout
    wide = cli("explain", policy, "--target", target, columns=1000).stdout
    assert max(map(len, wide.splitlines())) > 100   # the width is the terminal's, not a fixed one


def test_explain_markdown_and_json_ignore_the_terminal():
    eff = pipeline.layered("untrusted", ".", LayerOptions(approved_only=True)).effective
    assert cli("explain", "--format", "markdown", columns=60).stdout == explain.render(eff, True) + "\n"
    assert cli("explain", "--json", columns=60).stdout == cli("explain", "--json", columns=300).stdout


def test_completion_of_presets_agents_and_files():
    assert [i.value for i in complete.presets(None, None, "untr")] == ["untrusted", "untrusted-gvisor"]
    assert [(i.value, i.type) for i in complete.presets(None, None, "./my")] == [("./my", "file")]
    assert "claude-code" in [i.value for i in complete.agents(None, None, "cl")]
    assert complete.agents(None, None, "zz") == []


def test_completion_of_names_asks_the_engine_and_never_fails_or_waits():
    found = complete.names(complete.COPIES, lookup=lambda kinds: ["sandbox-a", "sandbox-b", "other"])
    assert [i.value for i in found(None, None, "sandbox-")] == ["sandbox-a", "sandbox-b"]

    def broken(kinds):
        raise RuntimeError("no engine")
    assert complete.names(complete.SANDBOXES, lookup=broken)(None, None, "") == []
    hung = threading.Event()
    start = time.monotonic()
    assert complete.names(complete.SANDBOXES, wait=0.3, lookup=lambda kinds: hung.wait(30) and [])(None, None, "") == []
    assert time.monotonic() - start < 2
    hung.set()


def completions(env: dict, *lines: str) -> list[tuple[subprocess.CompletedProcess, float]]:
    """Each command line completed by its own process, all at once (each waits on the engine on its
    own); with the seconds each took."""
    started = []
    for words in lines:
        cword = str(len(words.split()) - (0 if words.endswith(" ") else 1))
        started.append((time.monotonic(), subprocess.Popen(
            [SCRIPT], env={**env, "_SANDBOX_COMPLETE": "bash_complete", "COMP_WORDS": words, "COMP_CWORD": cword},
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)))
    done = []
    try:
        for start, process in started:
            out, err = process.communicate(timeout=60)
            done.append((subprocess.CompletedProcess(process.args, process.returncode, out, err),
                         time.monotonic() - start))
    finally:
        for _, process in started:
            if process.poll() is None:
                process.kill()
                process.wait()
    return done


def test_completion_in_a_shell_with_an_engine_that_never_answers(tmp_path):
    silent = socket.socket(socket.AF_UNIX)
    silent.bind(str(tmp_path / "docker.sock"))
    silent.listen(8)   # accepts connections and never says a word
    env = {**os.environ, "DOCKER_HOST": f"unix://{tmp_path}/docker.sock"}
    hung = ("sandbox down ", "sandbox diff sand", "sandbox exec ", "sandbox logs ")
    try:
        *waited, ci, read_only, agents = completions(env, *hung, "sandbox run --policy c", "sandbox check read",
                                                     "sandbox up --agent co")
        for words, (result, seconds) in zip(hung, waited):
            assert result.returncode == 0 and result.stdout.strip() == "" and result.stderr == "", words
            assert seconds < complete.ENGINE_WAIT + 5
        assert ci[0].stdout.split() == ["plain,ci"]
        assert read_only[0].stdout.split() == ["plain,read-only"]
        assert "plain,codex" in agents[0].stdout.split()
    finally:
        silent.close()


def test_the_readme_documents_completion_and_the_new_commands():
    readme = (resources.policies_dir().parent / "README.md").read_text()
    assert 'eval "$(_SANDBOX_COMPLETE=bash_source sandbox)"' in readme
    assert "sandbox presets" in readme and "sandbox trust approve" in readme


def test_explain_into_a_pipe_keeps_whole_lines():
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    piped = subprocess.run([SCRIPT, "explain", "untrusted"], capture_output=True, text=True, env=env, timeout=60)
    assert piped.returncode == 0, piped.stderr
    assert max(map(len, piped.stdout.splitlines())) > 100   # no terminal: nothing to fit, grep sees whole rows
