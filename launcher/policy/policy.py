"""Load a policy file (a preset name or a path) into the typed, validated Policy model."""

from __future__ import annotations

import hashlib
import os
import posixpath
import re
from pathlib import Path

from launcher import resources
from launcher.errors import PolicyError, Problem
from launcher.policy import inject, registries
from launcher.policy.allowlist import parse_rule
from launcher.policy.model import (BUILTIN_PROTECTED, Access, BuildPolicy, EnvPolicy, HomeMode, HomePolicy, Limits, MountPolicy,
                            NetworkMode, NetworkPolicy, Policy, Runtime, SecretPolicy, TmpfsPolicy, WorkspaceMode,
                            WorkspacePolicy)
from launcher.policy.schema import check, policy_schema
from launcher.policy.keybind import given, parse_bind
from launcher.policy.secrets import secret_name, secret_value
from launcher.policy.yamlsafe import load_yaml, refuse_secret_literals

CAPABILITY_BITS = {name: bit for bit, name in enumerate((
    "CHOWN DAC_OVERRIDE DAC_READ_SEARCH FOWNER FSETID KILL SETGID SETUID SETPCAP LINUX_IMMUTABLE "
    "NET_BIND_SERVICE NET_BROADCAST NET_ADMIN NET_RAW IPC_LOCK IPC_OWNER SYS_MODULE SYS_RAWIO "
    "SYS_CHROOT SYS_PTRACE SYS_PACCT SYS_ADMIN SYS_BOOT SYS_NICE SYS_RESOURCE SYS_TIME "
    "SYS_TTY_CONFIG MKNOD LEASE AUDIT_WRITE AUDIT_CONTROL SETFCAP MAC_OVERRIDE MAC_ADMIN SYSLOG "
    "WAKE_ALARM BLOCK_SUSPEND AUDIT_READ PERFMON BPF CHECKPOINT_RESTORE").split())}

# Each of these is, on its own, a known way out of a container: they cannot be added back.
FORBIDDEN_CAPABILITIES = frozenset(
    "SYS_ADMIN SYS_MODULE SYS_RAWIO SYS_PTRACE DAC_READ_SEARCH NET_ADMIN SYS_BOOT SYS_TIME "
    "MAC_OVERRIDE MAC_ADMIN AUDIT_CONTROL SYSLOG PERFMON BPF CHECKPOINT_RESTORE".split())

# Container paths that belong to the launcher or the kernel; a policy may not mount over them.
RESERVED_TARGETS = ("/", "/proc", "/sys", "/dev", "/.sandbox", "/etc")

_UNITS = {"": 1, "k": 1024, "m": 1024 ** 2, "g": 1024 ** 3}
_SECONDS = {"": 1, "s": 1, "m": 60, "h": 3600}


def parse_size(text: str) -> int:
    number, unit = re.fullmatch(r"([0-9]+)([kmg]?)", text).groups()
    return int(number) * _UNITS[unit]


MAX_TIMEOUT_SECONDS = 7 * 24 * 3600


def parse_duration(text: str) -> int:
    number, unit = re.fullmatch(r"([0-9]+)([smh]?)", text).groups()
    return int(number) * _SECONDS[unit]


def read_policy(ref: str) -> tuple[str, bytes]:
    """The file a preset name or a path refers to, and its bytes."""
    path = resources.preset_path(ref) if resources.looks_like_preset(ref) else Path(ref)
    if path is None:
        known = ", ".join(resources.preset_names())
        raise PolicyError([Problem(file=ref, path="", expected="a preset name or a policy file path",
                                   found="no such preset", hint=f"bundled presets: {known}")])
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise PolicyError([Problem(file=str(path), path="", expected="a readable policy file",
                                   found=exc.strerror or str(exc))]) from None
    return str(path), data


def with_allowed(policy: Policy, entries: tuple) -> Policy:
    """The base policy with the command line's --allow entries added (proxy mode only): host
    strings, or {host, private} mappings (--allow-private)."""
    from dataclasses import replace

    if policy.network.mode is not NetworkMode.PROXY:
        raise PolicyError([Problem(file="command line", path="--allow", expected="a policy in network mode proxy",
                                   found=f"{policy.name} uses mode {policy.network.mode.value}",
                                   hint="use --policy ci, or a policy with network: {mode: proxy}")])
    rules, problems = list(policy.network.allow), []
    for i, entry in enumerate(entries):
        try:
            rules.append(parse_rule(entry, policy.network.allow_ip_literals))
        except ValueError as exc:
            problems.append(Problem(file="command line", path=f"--allow[{i}]", expected=str(exc),
                                    found=repr(entry.get("host") if isinstance(entry, dict) else entry),
                                    hint="for example api.example.com, *.pypi.org or host:8443"))
    if problems:
        raise PolicyError(problems)
    return replace(policy, network=replace(policy.network, allow=tuple(dict.fromkeys(rules))))


def parse_policy(data: bytes, file: str) -> Policy:
    """One self-contained policy document. One that `extends` presets is the stack's to load
    (stack.load_base): read alone it would silently drop everything it inherits."""
    raw = load_yaml(data, file)
    if isinstance(raw, dict) and "extends" in raw:
        raise PolicyError([Problem(file=file, path="extends", expected="a policy without extends",
                                   found=f"extends: {raw['extends']!r}",
                                   hint="load it with launcher.pipeline.stack.load_base, which applies what it extends")])
    return policy_from_raw({} if raw is None else raw, file, data)


def with_registry_mode(raw):
    """A document whose network.registries has no network.mode: proxy mode (the registries' meaning in a
    base policy; a later layer's mode is not taken from it, so there none still wins)."""
    net = raw.get("network") if isinstance(raw, dict) else None
    if isinstance(net, dict) and net.get("registries") and "mode" not in net:
        return {**raw, "network": {**net, "mode": "proxy"}}
    return raw


def policy_from_raw(raw, file: str, data: bytes | None, *, inherited_allow: bool = False) -> Policy:
    """Validate a parsed document (the schema, what it cannot say, then the file's text: `data`, its
    bytes, also give the digest) and build the typed model. inherited_allow: a layer without its own
    network.allow (a bound key's host is judged on the combined policy, layers.py)."""
    filled, problems = check(with_registry_mode(raw), policy_schema(), file)
    if problems:
        raise PolicyError(problems)
    problems = _semantic_problems(filled, file, inherited_allow)
    if problems:
        raise PolicyError(problems)
    if data is not None:
        refuse_secret_literals(data, file)
    return _build(filled, file, hashlib.sha256(data).hexdigest() if data is not None else "")


def _semantic_problems(doc: dict, file: str, inherited_allow: bool = False) -> list[Problem]:
    """Rules the schema cannot say: reserved targets, paths, capabilities, secrets, sizes."""
    problems: list[Problem] = []

    def bad(path, expected, found, hint=""):
        problems.append(Problem(file=file, path=path, expected=expected, found=found, hint=hint))

    targets: dict[str, str] = {}

    def target(path: str, value: str) -> None:
        norm = posixpath.normpath(value)
        if norm != value.rstrip("/") or "\n" in value or "\0" in value:
            bad(path, "a normalised absolute path", repr(value), f"write {norm!r}")
        elif any(norm == r or (r != "/" and norm.startswith(r + "/")) for r in RESERVED_TARGETS):
            bad(path, "a path outside " + ", ".join(RESERVED_TARGETS), repr(value),
                "those belong to the launcher or the kernel")
        elif norm in targets:
            bad(path, "a target used once", repr(value), f"also used by {targets[norm]}")
        targets.setdefault(norm, path)

    target("workspace.target", doc["workspace"]["target"])
    for i, rel in enumerate(doc["workspace"]["protect"]):
        norm = posixpath.normpath(rel)
        if rel.startswith("/") or norm.startswith("..") or norm == "." or "\n" in rel or "\0" in rel:
            bad(f"workspace.protect[{i}]", "a path inside the workspace, relative to it", repr(rel),
                "for example .git/hooks")
    for i, pattern in enumerate(doc["workspace"]["exclude"]):
        if pattern.startswith("/") or ".." in pattern.split("/") or "\n" in pattern or "\0" in pattern:
            bad(f"workspace.exclude[{i}]", "a workspace-relative pattern", repr(pattern), "for example node_modules or build/*.o")
    for i, mount in enumerate(doc["mounts"]):
        target(f"mounts[{i}].target", mount["target"])
    for i, tmpfs in enumerate(doc["tmpfs"]):
        target(f"tmpfs[{i}].target", tmpfs["target"])
        if parse_size(tmpfs["size"]) == 0:
            bad(f"tmpfs[{i}].size", "a size above zero", repr(tmpfs["size"]))
        if int(tmpfs["mode"], 8) & 0o700 != 0o700:
            bad(f"tmpfs[{i}].mode", "a mode that lets the owner (the agent) read, write and search",
                repr(tmpfs["mode"]), "for example 0700")
    home = doc["home"]
    target("home.target", home["target"])
    ws_target = posixpath.normpath(doc["workspace"]["target"])
    home_target = posixpath.normpath(home["target"])
    if home_target.startswith(ws_target + "/") or ws_target.startswith(home_target + "/"):
        bad("home.target", "a path neither inside the workspace nor holding it", repr(home["target"]),
            "for example /home/agent")
    if parse_size(home["size"]) == 0:
        bad("home.size", "a size above zero", repr(home["size"]))
    # `--tmpfs PATH:OPTIONS` and compose's "PATH:OPTIONS" cannot carry these characters in PATH
    for path, value in [("home.target", home["target"])] + [(f"tmpfs[{i}].target", t["target"])
                                                          for i, t in enumerate(doc["tmpfs"])]:
        if any(c in value for c in ":, \t"):
            bad(path, "a path without ':', ',' or blanks", repr(value), "the engine's tmpfs option list cannot carry them")
    if parse_size(doc["limits"]["memory"]) < 16 * 1024 ** 2:
        bad("limits.memory", "at least 16m", repr(doc["limits"]["memory"]))
    for key in ("timeout", "session", "idle"):
        if parse_duration(doc["limits"][key]) == 0:
            bad(f"limits.{key}", "a duration above zero", repr(doc["limits"][key]))
        elif parse_duration(doc["limits"][key]) > MAX_TIMEOUT_SECONDS:
            bad(f"limits.{key}", "at most 168h (a week)", repr(doc["limits"][key]),
                "a sandbox is not a server: for longer work, `sandbox up` again")
    if doc["user"] != "auto" and (doc["user"].startswith("0:") or doc["user"].endswith(":0")):
        bad("user", "a non-root uid:gid", repr(doc["user"]), "the agent never runs as root or group 0")
    for i, cap in enumerate(doc["capabilities"]):
        name = cap.removeprefix("CAP_")
        if name not in CAPABILITY_BITS:
            bad(f"capabilities[{i}]", "a Linux capability name", repr(cap), "for example NET_BIND_SERVICE")
        elif name in FORBIDDEN_CAPABILITIES:
            bad(f"capabilities[{i}]", "a capability that does not break isolation", repr(cap),
                f"{name} is a known container escape and cannot be granted")
    net = doc["network"]
    if net["mode"] == "none" and net["allow"]:
        bad("network.allow", "no entries in mode none", f"{len(net['allow'])} entries",
            "set network.mode: proxy to allow hosts through the egress proxy")
    if net["mode"] == "none" and net["registries"]:
        bad("network.registries", "no registries in mode none", f"{len(net['registries'])} entries",
            "leave network.mode out (registries then mean proxy mode with their rules alone), or set it to proxy")
    for i, entry in enumerate(net["registries"]):
        if (problem := registries.entry_problem(entry)) is not None:
            bad(f"network.registries[{i}]{problem[0]}", problem[1], problem[2], registries.unknown(entry.get("name") if isinstance(entry, dict) else entry) if
                "registry" in problem[1] else "for example pypi, or {name: pypi, ca_file: ~/corp-ca.pem}")
    for i, entry in enumerate(net["allow"]):
        try:
            parse_rule(entry, net["allow_ip_literals"])
        except ValueError as exc:
            bad(f"network.allow[{i}]{getattr(exc, 'path', '')}", str(exc), getattr(exc, "found", "") or repr(entry),
                _allow_hint(exc))
    for i, name in enumerate(doc["env"]["pass"]):
        if secret_name(name):
            bad(f"env.pass[{i}]", "a non-secret variable name", repr(name),
                "secrets never enter the sandbox; give the agent an endpoint instead")
    for name, value in doc["env"]["set"].items():
        if secret_name(name) or secret_value(value):
            bad(f"env.set.{name}", "a non-secret variable", f"a secret-shaped {'name' if secret_name(name) else 'value'}",
                "secrets never enter the sandbox (the value is not shown)")
        elif "\n" in value or "\0" in value:
            bad(f"env.set.{name}", "a single-line value", "a newline or NUL in the value")
    for key in ("dockerfile", "context", "devcontainer"):
        rel = doc["build"][key]
        if rel and (posixpath.normpath(rel).startswith("../") or posixpath.normpath(rel) == ".."):
            bad(f"build.{key}", "a path inside the workspace, relative to it", repr(rel), "for example .sandbox/Dockerfile")
    for key in ("dockerfile", "devcontainer"):
        if doc["build"][key] and posixpath.normpath(doc["build"][key]) == ".":
            bad(f"build.{key}", "a file in the workspace", repr(doc["build"][key]), "for example .sandbox/Dockerfile")
    if doc["build"]["dockerfile"] and doc["build"]["devcontainer"]:
        bad("build.devcontainer", "either build.dockerfile or build.devcontainer", "both",
            "a devcontainer.json names its Dockerfile itself (build.dockerfile in it)")
    for path, expected, found, hint in inject.problems(doc["secrets"], net, inherited_allow):
        bad(path, expected, found, hint)
    variables: dict[str, str] = {}
    for i, entry in enumerate(doc["secrets"]):   # a bound key's placeholder variable: its own
        variable = (entry["bind"]["variable"] or entry["env"]) if given(entry["bind"]) else ""
        if isinstance(variable, str) and variable:
            if variable in doc["env"]["pass"] or variable in doc["env"]["set"]:
                bad(f"secrets[{i}].bind.variable", "a variable env.pass and env.set do not name", repr(variable),
                    "the sandbox gets the placeholder in it; drop it from env")
            elif variable in variables:
                bad(f"secrets[{i}].bind.variable", "a variable one binding uses", repr(variable),
                    f"also used by {variables[variable]}")
            variables.setdefault(variable, f"secrets[{i}]")
    return problems


def _allow_hint(exc: ValueError) -> str:
    if getattr(exc, "path", "").startswith(".http"):
        return "for example {host: api.example.com, http: {methods: [GET, HEAD], paths: [/repos/acme/], mode: enforce}}"
    return "for example api.example.com, *.pypi.org or host:8443"


def _rule_file(rule, file: str):
    """An http: rule's ca_file as a host path (relative to the policy file, like every host path in it)."""
    if not (rule.http and rule.http.ca_file):
        return rule
    from dataclasses import replace

    return replace(rule, http=replace(rule.http, ca_file=_host_path(rule.http.ca_file, file)))


def _host_path(value: str, file: str) -> str:
    """A host path as a policy file gives it: relative ones are relative to that file (as compose and
    devcontainer.json do), so a policy works from any directory; ~ stays for the host to expand."""
    if not value or value.startswith(("/", "~")):
        return value
    return os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(file)), value))


def _build(doc: dict, file: str, digest: str) -> Policy:
    ws = doc["workspace"]
    extra = [posixpath.normpath(p) for p in ws["protect"] if posixpath.normpath(p) not in BUILTIN_PROTECTED]
    user = None if doc["user"] == "auto" else tuple(int(x) for x in doc["user"].split(":"))
    return Policy(
        name=doc["name"], description=doc["description"], source=file, digest=digest, image=doc["image"],
        workspace=WorkspacePolicy(target=posixpath.normpath(ws["target"]), access=Access(ws["access"]),
                                  protect=BUILTIN_PROTECTED + tuple(dict.fromkeys(extra)), git=Access(ws["git"]),
                                  mode=WorkspaceMode(ws["mode"]), exclude=tuple(dict.fromkeys(ws["exclude"]))),
        mounts=tuple(MountPolicy(source=_host_path(m["source"], file), target=posixpath.normpath(m["target"]),
                                 access=Access(m["access"])) for m in doc["mounts"]),
        tmpfs=tuple(TmpfsPolicy(target=posixpath.normpath(t["target"]), size_bytes=parse_size(t["size"]),
                                mode=int(t["mode"], 8)) for t in doc["tmpfs"]),
        home=HomePolicy(mode=HomeMode(doc["home"]["mode"]), target=posixpath.normpath(doc["home"]["target"]),
                        size_bytes=parse_size(doc["home"]["size"])),
        network=NetworkPolicy(mode=NetworkMode(doc["network"]["mode"]),
                              allow=tuple(dict.fromkeys([_rule_file(parse_rule(e, doc["network"]["allow_ip_literals"]), file)
                                                         for e in doc["network"]["allow"]]
                                                        + [r for e in doc["network"]["registries"]
                                                           for r in registries.entry_rules(e, lambda p: _host_path(p, file))])),
                              allow_ip_literals=doc["network"]["allow_ip_literals"], model=doc["network"]["model"]),
        env=EnvPolicy(pass_names=tuple(doc["env"]["pass"]), set_values=tuple(doc["env"]["set"].items())),
        limits=Limits(pids=doc["limits"]["pids"], memory_bytes=parse_size(doc["limits"]["memory"]),
                      cpus=float(doc["limits"]["cpus"]), timeout_seconds=parse_duration(doc["limits"]["timeout"]),
                      session_seconds=parse_duration(doc["limits"]["session"]),
                      idle_seconds=parse_duration(doc["limits"]["idle"])),
        user=user,
        capabilities=tuple(sorted({c.removeprefix("CAP_") for c in doc["capabilities"]})),
        command=tuple(doc["command"]),
        secrets=tuple(SecretPolicy(name=e["name"], env=e["env"], file=_host_path(e["file"], file),
                                   upstream=e["upstream"].rstrip("/"), header=e["header"],
                                   ca_file=_host_path(e["ca_file"], file),
                                   bind=parse_bind(e["bind"], e["env"]) if given(e["bind"]) else None)
                      for e in doc["secrets"]),
        ca_certificates=tuple(dict.fromkeys(_host_path(c, file) for c in doc["ca_certificates"])),
        runtime=Runtime(doc["runtime"]),
        packages=tuple(dict.fromkeys(doc["packages"])),
        build=BuildPolicy(dockerfile=posixpath.normpath(doc["build"]["dockerfile"]) if doc["build"]["dockerfile"] else "",
                          context=posixpath.normpath(doc["build"]["context"] or "."),
                          devcontainer=posixpath.normpath(doc["build"]["devcontainer"]) if doc["build"]["devcontainer"] else "",
                          source=file if doc["build"]["dockerfile"] or doc["build"]["devcontainer"] else ""),
    )
