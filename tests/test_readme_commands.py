"""The README's "What you can do" list names only commands and flags that exist: each command's
`--help` answers, and every `--flag` the line shows is among that help's options."""

from __future__ import annotations

import re

import pytest
from click.testing import CliRunner

from launcher.cli import main
from tests.conftest import ROOT

FLAG = re.compile(r"(?<![\w-])(--[a-z][a-z0-9-]*|-[a-zA-Z])(?![\w-])")


def _block() -> list[str]:
    text = (ROOT / "README.md").read_text()
    section = text.split("\n## What you can do\n", 1)[1]
    return section.split("```sh\n", 1)[1].split("\n```", 1)[0].splitlines()


def _uses(lines: list[str]) -> list[tuple[tuple[str, ...], tuple[str, ...], str]]:
    """(command path, flags shown, the README line) for every `sandbox …` in the block."""
    uses = []
    for line in lines:
        shown = re.split(r"\s{2,}#", line, maxsplit=1)[0].strip()
        if not shown.startswith("sandbox "):
            continue   # the completion line: not a command of ours
        for segment in re.split(r"\s\|\s(?=sandbox )", shown):
            words = segment.split()[1:]
            ours = segment.split(" -- ", 1)[0]   # after `--` the words are the agent's command
            flags = tuple(dict.fromkeys(FLAG.findall(ours.replace("[", " ").replace("]", " "))))
            for name in words[0].split("|"):
                path = (name,)
                group = main.commands[name]
                if hasattr(group, "commands") and len(words) > 1 and words[1] in group.commands:
                    path += (words[1],)
                uses.append((path, flags, line))
    return uses


def _options(path: tuple[str, ...]) -> set[str]:
    result = CliRunner().invoke(main, [*path, "--help"])
    assert result.exit_code == 0, result.output
    options = result.output.split("\nOptions:\n", 1)[1].split("\nCommands:\n", 1)[0]
    # An option's own row starts "  -p, --policy TEXT  help…"; the words of its help never count.
    return {flag for row in options.splitlines() if row.startswith("  -") for flag in FLAG.findall(row.split("  ", 2)[1])}


def _missing(path: tuple[str, ...], flags: tuple[str, ...]) -> list[str]:
    known = _options(path)
    return [f for f in flags if f not in known]


USES = _uses(_block())


def test_the_block_was_read():
    assert len(USES) > 30 and ("images", "build") in {u[0] for u in USES}


@pytest.mark.parametrize("path,flags,line", USES, ids=[" ".join(u[0]) + " " + " ".join(u[1]) for u in USES])
def test_every_command_and_flag_in_the_readme_exists(path, flags, line):
    assert not _missing(path, flags), f"README: {line.strip()}\n{' '.join(path)} has {sorted(_options(path))}"


def test_a_flag_or_command_that_does_not_exist_is_caught():
    uses = _uses(["sandbox run|check … --workspace-mode bind -- CMD --not-ours   # a comment --nor-this",
                  "sandbox images build --agent NAME | sandbox ls --json"])
    assert [(u[0], u[1]) for u in uses] == [(("run",), ("--workspace-mode",)), (("check",), ("--workspace-mode",)),
                                            (("images", "build"), ("--agent",)), (("ls",), ("--json",))]
    assert [_missing(u[0], u[1]) for u in uses] == [[], ["--workspace-mode"], [], []]
    assert _missing(("down",), ("--allow",)) == ["--allow"]   # words of down's help, not an option of it
    with pytest.raises(KeyError):
        _uses(["sandbox nosuchcommand --help"])


def test_every_command_of_the_cli_is_in_the_list():
    shown = {u[0] for u in USES}
    for name, command in main.commands.items():
        paths = [(name, sub) for sub in command.commands] if hasattr(command, "commands") else [(name,)]
        for path in paths:
            assert path in shown, f"README's \"What you can do\" does not show `sandbox {' '.join(path)}`"
