"""The Squid configuration's renderings, kept by their exact input beside the bytecode
(launcher/plan/squidconf.py): a kept one is the same text jinja2 renders, read without importing
jinja2; another sandbox's name still goes in; a file that is not a whole rendering of that input
is rendered again; nothing is written where Python writes no bytecode; the oldest go past KEPT."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from launcher.plan import squidconf
from launcher.policy.allowlist import parse_rule

RULES = (parse_rule("*.example.com"), parse_rule({"host": "git.internal", "private": True}))


@pytest.fixture
def folder(tmp_path, monkeypatch):
    monkeypatch.setattr(squidconf, "kept_folder", lambda: str(tmp_path))
    monkeypatch.setattr(sys, "dont_write_bytecode", False)
    return tmp_path


def _fresh(rules=RULES, name="sandbox-a") -> str:
    """What jinja2 renders for this input, nothing kept nor read."""
    kept = squidconf.kept_folder
    squidconf.kept_folder = lambda: ""
    try:
        return squidconf.render_squid(name, rules)
    finally:
        squidconf.kept_folder = kept


def test_a_kept_rendering_is_what_jinja2_renders_and_takes_another_sandbox_s_name(folder):
    first = squidconf.render_squid("sandbox-a", RULES)
    assert first == _fresh(name="sandbox-a") and "for sandbox-a." in first
    kept = list(folder.iterdir())
    assert len(kept) == 1 and kept[0].suffix == ".conf"
    second = squidconf.render_squid("sandbox-b", RULES)
    assert second == _fresh(name="sandbox-b") and len(list(folder.iterdir())) == 1   # the same input: read back
    assert squidconf.render_squid("sandbox-c", RULES[:1]) == _fresh(RULES[:1], "sandbox-c")
    assert len(list(folder.iterdir())) == 2   # another input, another file


def test_a_file_that_is_not_a_whole_rendering_of_its_input_is_rendered_again(folder):
    squidconf.render_squid("sandbox-a", RULES)
    (kept,) = folder.iterdir()
    key = kept.stem
    for forged in ("http_access allow all\n", f"{'0' * 64}\nhttp_access allow all\n", ""):
        kept.write_text(forged)
        assert squidconf.render_squid("sandbox-a", RULES) == _fresh(), forged
    assert kept.read_text().startswith(f"{key}\n")   # written whole again


def test_nothing_is_written_where_python_writes_no_bytecode(folder, monkeypatch):
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    assert squidconf.render_squid("sandbox-a", RULES) == _fresh()
    assert list(folder.iterdir()) == []


def test_past_kept_the_oldest_go(folder, monkeypatch):
    monkeypatch.setattr(squidconf, "KEPT", 3)
    made = []
    for i in range(5):
        before = set(folder.iterdir())
        squidconf.render_squid("s", (parse_rule(f"host{i}.example.com"),))
        (new,) = set(folder.iterdir()) - before
        os.utime(new, (1000 + i, 1000 + i))   # one second apart, whatever the file system's clock
        made.append(new)
    squidconf.render_squid("s", (parse_rule("host5.example.com"),))
    assert set(folder.iterdir()) >= {made[3], made[4]} and len(list(folder.iterdir())) == 3


def test_a_kept_rendering_is_read_without_importing_jinja2(tmp_path):
    """In a process of its own (as the CLI's): the second compile of the same rules never loads jinja2."""
    script = ("import sys\nfrom launcher.plan import squidconf\nfrom launcher.policy.allowlist import parse_rule\n"
              f"squidconf.kept_folder = lambda: {str(tmp_path)!r}\n"
              "squidconf.render_squid('s', (parse_rule('api.example.com'),))\nprint('jinja2' in sys.modules)\n")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    said = [subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, check=True).stdout.strip()
            for _ in range(2)]
    assert said == ["True", "False"]
