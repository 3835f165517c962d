"""Defaults set once: the user's `config.yaml`, a repository's `defaults:` (in its `.sandbox.yaml`,
under the digest its approval pins) and `SANDBOX_*` variables give the commands' defaults. Per key
the first that sets it wins: flag > environment > repository (approved only) > user > built-in.

Pure: host.py reads the files and the environment, stack.py gathers them (and the repository's
approval), the CLI applies the result to its options. Every value is validated here, with the file,
the key, what was expected and a hint; nothing is looked up on the host."""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass

from launcher.errors import PolicyError, Problem
from launcher.policy import registries
from launcher.policy.policy import MAX_TIMEOUT_SECONDS, parse_duration
from launcher.policy.yamlsafe import load_yaml

FLAG, ENV, REPOSITORY, USER, BUILTIN = "flag", "env", "repository", "user", "built-in"
ENVIRONMENT = "environment"   # the `file` of a problem in a SANDBOX_* variable


@dataclass(frozen=True, kw_only=True)
class Key:
    name: str
    kind: str          # policy, agent, duration, ports, paths
    env: str           # the environment variable that sets it
    builtin: str       # what applies when nothing sets it, in words
    repository: bool   # whether a repository's `defaults:` may set it
    also: str = ""     # what else takes it, besides the options `sandbox config` lists


KEYS = (
    Key(name="policy", kind="policy", env="SANDBOX_POLICY", builtin="untrusted", repository=True),
    Key(name="agent", kind="agent", env="SANDBOX_AGENT", builtin="none (the policy's command)", repository=True),
    Key(name="timeout", kind="duration", env="SANDBOX_TIMEOUT", builtin="the policy's limits.timeout", repository=True),
    Key(name="session", kind="duration", env="SANDBOX_SESSION", builtin="the policy's limits.session", repository=True),
    Key(name="idle", kind="duration", env="SANDBOX_IDLE", builtin="the policy's limits.idle", repository=True),
    Key(name="ports", kind="ports", env="SANDBOX_PORTS", builtin="none", repository=True),
    Key(name="registries", kind="registries", env="SANDBOX_REGISTRIES", builtin="none (the policy's network)",
        repository=True),
    Key(name="ca_files", kind="paths", env="SANDBOX_CA_FILES",
        builtin="the host's extra CAs (/usr/local/share/ca-certificates)", repository=False,
        also="the agent image run and up build when it is missing"),
)
BY_NAME = {k.name: k for k in KEYS}

# Names people reach for, and what to write instead.
_HINTS = {"preset": "the preset is the key policy (a preset name or a policy file)",
          "registry": "the key is registries, a list: [pypi, npm]",
          "port": "the key is ports, a list: [8080, \"3000:80\"]",
          "ca_bundle": "the key is ca_files, a list of PEM files", "ca_bundles": "the key is ca_files",
          "ca_certificates": "the key is ca_files (CAs a sandbox's tools trust are the policy's ca_certificates)"}
_DURATION = re.compile(r"[0-9]+[smh]?")
_PORT = re.compile(r"(?:([0-9]{1,5}):)?([0-9]{1,5})")


@dataclass(frozen=True, kw_only=True)
class Defaults:
    """One source's values (a file, or the environment), validated; `file` names it."""

    file: str = ""
    values: tuple[tuple[str, object], ...] = ()

    def get(self, key: str):
        return dict(self.values).get(key)


@dataclass(frozen=True, kw_only=True)
class Repository:
    """A repository's `defaults:`, and whether its approval covers them (`why` says why not)."""

    defaults: Defaults
    approved: bool
    why: str = ""


@dataclass(frozen=True, kw_only=True)
class Setting:
    key: str
    value: object          # None: the built-in (Key.builtin says what that is)
    source: str            # flag, env, repository, user, built-in
    where: str             # the flag, the variable or the file
    unused: tuple[tuple[str, str, object], ...] = ()   # (source, where, value) of what was set below it


@dataclass(frozen=True, kw_only=True)
class Resolved:
    settings: tuple[Setting, ...]
    ignored: tuple[str, ...] = ()      # a repository's values that did not apply, and why

    def get(self, key: str) -> Setting:
        return next(s for s in self.settings if s.key == key)


def _problem(file: str, key: str, expected: str, found: str, hint: str = "") -> Problem:
    return Problem(file=file, path=key, expected=expected, found=found, hint=hint)


def _shown(value) -> str:
    return f"{type(value).__name__} {value!r}" if not isinstance(value, str) else repr(value)


def _value(key: Key, value, file: str, *, base: str, home: str, presets, agents, repository: bool):
    """The validated value of `key` (a string, or a tuple of strings), or a Problem."""
    path = f"defaults.{key.name}" if repository else key.name
    if key.kind == "policy":
        if not isinstance(value, str) or not value:
            return _problem(file, path, "a preset name or a policy file path", _shown(value),
                            f"bundled presets: {', '.join(presets)}")
        if repository and value not in presets:
            return _problem(file, path, f"a bundled preset ({', '.join(presets)})", repr(value),
                            "a repository names a preset only: a file's content would not be covered by the "
                            "approval of .sandbox.yaml (narrow the preset in .sandbox.yaml itself)")
        if re.fullmatch(r"[a-z0-9][a-z0-9-]*", value):
            if value not in presets:
                import difflib  # here: only a bad value's "did you mean" needs it
                close = difflib.get_close_matches(value, presets, n=1)
                return _problem(file, path, "a preset name or a policy file path", f"no preset {value!r}",
                                f"did you mean {close[0]!r}?" if close else f"bundled presets: {', '.join(presets)}")
            return value
        return _path(value, base, home)
    if key.kind == "agent":
        agents = agents() if callable(agents) else agents   # the profiles are imported only for an agent key
        if not isinstance(value, str) or value not in agents:
            import difflib  # here: only a bad value's "did you mean" needs it
            close = difflib.get_close_matches(value, agents, n=1) if isinstance(value, str) else []
            return _problem(file, path, "an agent profile name", _shown(value),
                            f"did you mean {close[0]!r}?" if close else f"`sandbox agents` lists them: {', '.join(agents)}")
        return value
    if key.kind == "duration":
        text = str(value) if isinstance(value, int) and not isinstance(value, bool) else value
        if not isinstance(text, str) or not _DURATION.fullmatch(text) or not 0 < parse_duration(text) <= MAX_TIMEOUT_SECONDS:
            return _problem(file, path, "a duration above zero and at most 168h: seconds, or a number with s, m or h",
                            _shown(value), "for example 90s, 20m, 2h")
        return text
    if key.kind == "registries":   # a list, or the text a flag takes (pypi,npm)
        if not isinstance(value, (list, str)):
            return _problem(file, path, "a list of registries", _shown(value), f"for example {key.name}: [pypi, npm]")
        try:
            return registries.names(value, file=file, path=path)
        except PolicyError as exc:
            return exc.problems[0]
    items = value   # a variable holds a list as text: ports comma-separated, paths colon-separated
    if isinstance(value, str) and file == ENVIRONMENT:
        items = value.split("," if key.kind == "ports" else ":")
    if not isinstance(items, list):
        example = '[8080, "3000:80"]' if key.kind == "ports" else "[~/corp-ca.pem]"
        return _problem(file, path, "a list", _shown(value), f"for example {key.name}: {example}")
    out = []
    for index, item in enumerate(items):
        where = f"{path}[{index}]"
        if key.kind == "ports":
            text = str(item).strip() if isinstance(item, (int, str)) and not isinstance(item, bool) else None
            match = _PORT.fullmatch(text) if text is not None else None
            if not match or not (match[1] is None or int(match[1]) <= 65535) or not 0 < int(match[2]) <= 65535:
                return _problem(file, where, "[HOST_PORT:]PORT (host 0-65535, 0 picks one; the port inside 1-65535)",
                                _shown(item), "as `sandbox up --port` takes it: 8080, or 3000:80")
            out.append(text)
        else:
            if not isinstance(item, str) or not item.strip():
                return _problem(file, where, "a path to a PEM file", _shown(item))
            out.append(_path(item.strip(), base, home))
    return tuple(out)


def _path(text: str, base: str, home: str) -> str:
    """A path as a file names it: `~` is the user's home, a relative one is relative to the file."""
    if text == "~" or text.startswith("~/"):
        return posixpath.normpath(home + text[1:])
    return posixpath.normpath(posixpath.join(base, text)) if base else text


def parse(raw, file: str, *, home: str, presets, agents, repository: bool = False) -> Defaults:
    """A mapping of keys (the user's config.yaml, or a repository's `defaults:`), validated; every
    problem at once."""
    where = "defaults" if repository else "(top level)"
    if raw is None:
        return Defaults(file=file)
    if not isinstance(raw, dict):
        raise PolicyError([_problem(file, where, "a mapping of keys to values", type(raw).__name__,
                                    "for example policy: ci")])
    problems, values = [], []
    allowed = [k.name for k in KEYS if k.repository or not repository]
    for name, value in raw.items():
        key = BY_NAME.get(name) if isinstance(name, str) else None
        path = f"defaults.{name}" if repository else str(name)
        if name == "version" and not repository:
            if value != 1:
                problems.append(_problem(file, "version", "1", _shown(value), "write version: 1"))
            continue
        if key is None or name not in allowed:
            import difflib  # here: only a bad value's "did you mean" needs it
            close = difflib.get_close_matches(str(name), allowed, n=1)
            hint = (_HINTS.get(name) or (f"did you mean {close[0]!r}?" if close else "")) if key is None else (
                "a repository cannot name CA files: trusting a CA is your choice, and the files' content is not "
                "covered by the approval; set ca_files in ~/.config/sandbox/config.yaml")
            problems.append(_problem(file, path, f"one of the keys {', '.join(allowed)}",
                                     f"unknown key {name!r}" if key is None else f"the key {name}",
                                     hint or f"known keys: {', '.join(allowed)}"))
            continue
        base = "" if repository else posixpath.dirname(file)
        checked = _value(key, value, file, base=base, home=home, presets=presets, agents=agents, repository=repository)
        if isinstance(checked, Problem):
            problems.append(checked)
        else:
            values.append((name, checked))
    if problems:
        raise PolicyError(problems)
    return Defaults(file=file, values=tuple(values))


def parse_file(data: bytes, file: str, *, home: str, presets, agents) -> Defaults:
    """The user's config.yaml (a safe YAML load: duplicate keys, aliases and oversized input refused)."""
    return parse(load_yaml(data, file), file, home=home, presets=presets, agents=agents)


def split_repository(raw, file: str, *, presets, agents) -> tuple[object, Defaults]:
    """A repository's `.sandbox.yaml` as (its policy layer without `defaults:`, its defaults)."""
    if not isinstance(raw, dict) or "defaults" not in raw:
        return raw, Defaults(file=file)
    defaults = parse(raw["defaults"], file, home="", presets=presets, agents=agents, repository=True)
    return {k: v for k, v in raw.items() if k != "defaults"}, defaults


def parse_environment(env: dict[str, str], *, home: str, presets, agents) -> Defaults:
    """The SANDBOX_* variables that are set and not empty (ports comma-separated, CA files
    colon-separated; a relative path is relative to the working directory, as a flag's)."""
    problems, values = [], []
    for key in KEYS:
        text = env.get(key.env, "").strip()
        if not text:
            continue
        checked = _value(key, text, ENVIRONMENT, base="", home=home, presets=presets, agents=agents, repository=False)
        if isinstance(checked, Problem):
            problems.append(Problem(file=ENVIRONMENT, path=key.env, expected=checked.expected, found=checked.found,
                                    hint=checked.hint or f"unset {key.env}, or fix its value"))
        else:
            values.append((key.name, checked))
    if problems:
        raise PolicyError(problems)
    return Defaults(file=ENVIRONMENT, values=tuple(values))


def resolve(*, flags: dict[str, tuple[str, object]], env: Defaults, repository: Repository | None,
            user: Defaults) -> Resolved:
    """Per key, the first source that sets it: flag > environment > repository (only when approved)
    > user > built-in. `flags`: key -> (the flag, its value) for the flags given."""
    settings, ignored = [], []
    for key in KEYS:
        found = []
        if key.name in flags:
            found.append((FLAG, *flags[key.name]))
        if env.get(key.name) is not None:
            found.append((ENV, key.env, env.get(key.name)))
        if repository is not None and repository.defaults.get(key.name) is not None:
            value = repository.defaults.get(key.name)
            if repository.approved:
                found.append((REPOSITORY, repository.defaults.file, value))
            else:
                ignored.append(f"{repository.defaults.file}: defaults.{key.name}: {_text(value)} is not applied: "
                               f"{repository.why}")
        if user.get(key.name) is not None:
            found.append((USER, user.file, user.get(key.name)))
        if found:
            source, where, value = found[0]
            settings.append(Setting(key=key.name, value=value, source=source, where=where, unused=tuple(found[1:])))
        else:
            settings.append(Setting(key=key.name, value=None, source=BUILTIN, where=""))
    return Resolved(settings=tuple(settings), ignored=tuple(ignored))


def _text(value) -> str:
    return ", ".join(value) if isinstance(value, tuple) else str(value)


def shown(setting: Setting) -> str:
    """A setting's value for people: the built-in's words when nothing set it."""
    return BY_NAME[setting.key].builtin if setting.value is None else (_text(setting.value) or "none")


def as_json(resolved: Resolved, applies: dict[str, str]) -> dict:
    """`sandbox config --json`'s fields: per key its value (null: the built-in), source, where,
    what was set below it, and the options it is the default of (`applies`, from the CLI)."""
    return {"settings": [{"key": s.key, "value": list(s.value) if isinstance(s.value, tuple) else s.value,
                          "shown": shown(s), "source": s.source, "where": s.where, "env": BY_NAME[s.key].env,
                          "options": applies.get(s.key, ""),
                          "unused": [{"source": u[0], "where": u[1],
                                      "value": list(u[2]) if isinstance(u[2], tuple) else u[2]} for u in s.unused]}
                         for s in resolved.settings],
            "ignored": list(resolved.ignored)}
