"""`sandbox check`: lint a stack of policy files without running anything. Errors and warnings
carry the file, the key path and the line; nothing here reads the host (facts are passed in)."""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass

import yaml

from launcher.errors import PolicyError, Problem
from launcher.host.gitgraph import GitPath
from launcher.host.hostfacts import HostFacts
from launcher.plan.refusals import refuse_source
from launcher.policy.allowlist import AllowRule
from launcher.policy.layers import FIELDS, Effective, Layer, LayerKind, combine, covers, get, widened
from launcher.policy.model import Access, HomeMode, NetworkMode, Policy, Runtime
from launcher.policy.secrets import literals_in
from launcher.policy.yamlsafe import NO_SECRET
from launcher.style import BAD, WARN, Mark, plain
from launcher.values import show, show_entry


class Severity(enum.Enum):
    ERROR = "error"
    WARNING = "warning"
    INFO = "info"


_KIND = {Severity.ERROR: BAD, Severity.WARNING: WARN}


@dataclass(frozen=True, kw_only=True)
class Finding:
    severity: Severity
    code: str
    file: str
    path: str
    line: int | None
    message: str
    hint: str = ""

    def __str__(self) -> str:
        return self.text()

    def text(self, mark: Mark = plain) -> str:
        where = f"{self.file}:{self.line}" if self.line else self.file
        severity = self.severity.value + ":"
        severity = mark(severity, _KIND[self.severity]) if self.severity in _KIND else severity
        text = f"{where}: {severity} {self.path + ': ' if self.path else ''}{self.message}"
        return f"{text}\n    hint: {self.hint}" if self.hint else text


@dataclass(frozen=True, kw_only=True)
class Doc:
    """One file of the stack as read: its layer kind, path and exact bytes."""

    kind: LayerKind
    file: str
    data: bytes


# Hosts where anyone can publish content: an allowed one is a way to exfiltrate or fetch payloads.
_SHARED_HOSTS = ("github.com", "raw.githubusercontent.com", "gist.github.com", "gist.githubusercontent.com",
                 "pastebin.com", "transfer.sh", "webhook.site", "storage.googleapis.com", "s3.amazonaws.com",
                 "dropbox.com", "drive.google.com", "discord.com", "hooks.slack.com")


def _tokens(path: str) -> list:
    return [int(t[1:-1]) if t.startswith("[") else t for t in re.findall(r"\[\d+\]|[^.\[\]]+", path)]


def line_of(data: bytes, path: str) -> int | None:
    """The 1-based line of a key path (`network.allow[2]`), or of its nearest ancestor present."""
    match = re.match(r"line (\d+)", path)
    if match:
        return int(match.group(1))
    try:
        node = yaml.compose(data.decode("utf-8"), Loader=yaml.SafeLoader)
    except (yaml.YAMLError, UnicodeDecodeError):
        return None
    line = None
    for token in _tokens(path):
        if isinstance(node, yaml.MappingNode) and isinstance(token, str):
            pair = next(((k, v) for k, v in node.value if k.value == token), None)
            if pair is None:
                break
            line, node = pair[0].start_mark.line + 1, pair[1]
        elif isinstance(node, yaml.SequenceNode) and isinstance(token, int) and token < len(node.value):
            node = node.value[token]
            line = node.start_mark.line + 1
        else:
            break
    return line if line is not None else (1 if node is not None else None)


class Report:
    def __init__(self):
        self.findings: list[Finding] = []

    def add(self, severity, code, doc_or_file, path, message, hint="", data: bytes | None = None):
        file = doc_or_file.file if isinstance(doc_or_file, Doc) else doc_or_file
        data = doc_or_file.data if isinstance(doc_or_file, Doc) else data
        line = line_of(data, path) if data is not None and path else None
        self.findings.append(Finding(severity=severity, code=code, file=file, path=path, line=line,
                                     message=message, hint=hint))

    def problems(self, severity, code, problems: tuple[Problem, ...], docs: dict[str, Doc], prefix=""):
        for p in (p for p in problems if p.expected != NO_SECRET):   # _secrets says those, line by line
            doc = docs.get(p.file)
            self.add(severity, code, doc or p.file, p.path.replace("(top level)", ""),
                     f"{prefix}expected {p.expected}, found {p.found}", p.hint)


def _secrets(report: Report, doc: Doc) -> None:
    for number, shape in literals_in(doc.data.decode("utf-8", errors="replace")):
        report.findings.append(Finding(severity=Severity.ERROR, code="secret", file=doc.file, path="", line=number,
                                       message=f"secret-shaped literal ({shape}…; the value is not shown)",
                                       hint="secrets never belong in a policy file; remove it and rotate it"))


def _egress(report: Report, doc: Doc, rules: tuple[AllowRule, ...], ip_literals: bool) -> None:
    if ip_literals:
        report.add(Severity.WARNING, "egress-broad", doc, "network.allow_ip_literals",
                   "IP literals are allowed: the proxy cannot tell who answers at an address")
    intercepting = any(r.http for r in rules)
    for i, rule in enumerate(rules):
        at = f"network.allow[{i}]"
        if intercepting:   # where some rules are judged per request, say which enforcer each rule has
            report.add(Severity.INFO, "egress-enforcer", doc, at, f"{rule}: {_enforcer(rule)}")
        if rule.wildcard:
            report.add(Severity.WARNING, "egress-broad", doc, at, f"{rule} allows every name below {rule.host}",
                       "list the exact hosts the agent needs")
        if rule.http and rule.http.mode == "audit":
            report.add(Severity.WARNING, "egress-audit", doc, f"{at}.http.mode", f"{rule}: audit mode enforces "
                       "nothing: every request to the host goes through, what enforce would refuse is only logged",
                       "set mode: enforce once `sandbox logs` shows no 'would refuse' the agent needs")
        if rule.private:
            report.add(Severity.WARNING, "egress-private", doc, at, f"{rule} may resolve to a private or internal "
                       "address, and the proxy will connect there", "only for an internal host you trust; whoever "
                       "controls its DNS can point it at any internal service")
        if rule.host in _SHARED_HOSTS or any(rule.host.endswith("." + h) for h in _SHARED_HOSTS) or (
                rule.wildcard and any(h.endswith("." + rule.host) for h in _SHARED_HOSTS)):
            report.add(Severity.WARNING, "egress-broad", doc, at, f"{rule} serves content anyone can publish",
                       "an allowed shared host is a channel out of the sandbox")
        if rule.http:
            _unenforced(report, doc, rules, i)
        for j, other in enumerate(rules):
            if j != i and not (rule.http and not other.http) and covers(other, rule) and (not covers(rule, other) or j < i):
                report.add(Severity.WARNING, "shadowed", doc, at, f"{rule} is already covered by {other} "
                           f"(network.allow[{j}])", "remove one of them")
                break


def _enforcer(rule: AllowRule) -> str:
    if not rule.http:
        return "proxy (tunnel): host and port only, nothing decrypted"
    judged = "methods and paths judged per request, " + ("only logged (audit)" if rule.http.mode == "audit"
                                                        else "refused with 403")
    return f"proxy (intercepted): TLS terminated with this sandbox's CA, {judged}"


def _overlap(http: AllowRule, plain: AllowRule) -> str:
    """How a tunnel rule's names meet an http: rule's: "same" (every name of the tunnel is one the
    proxy intercepts for the http: rule), "wider" (the tunnel's wildcard covers the http: rule's
    names and more), or "" (none shared)."""
    def below(name: str, suffix: str) -> bool:
        return name.endswith("." + suffix)
    if not http.wildcard:
        return "same" if not plain.wildcard and plain.host == http.host else "wider" if plain.wildcard and \
            below(http.host, plain.host) else ""
    if below(plain.host, http.host) or plain.host == http.host and plain.wildcard:
        return "same"
    return "wider" if plain.wildcard and below(http.host, plain.host) else ""


def _ports(ports: list[int]) -> str:
    return ("port " if len(ports) == 1 else "ports ") + ", ".join(map(str, ports))


def _tunnels_beside_keys(report: Report, doc: Doc, rules: tuple[AllowRule, ...], policy: Policy) -> None:
    """Keys bound to their destination: the proxy looks for a placeholder only in what it reads in
    clear; inside a CONNECT tunnel (a rule without http:) it sees nothing, so it goes on unseen."""
    bound = [s.bind.variable for s in policy.secrets if s.bind]
    if not bound:
        return
    for i, rule in enumerate(rules):
        if not rule.http and any(p != 80 for p in rule.ports):
            report.add(Severity.WARNING, "egress-keys-tunnel", doc, f"network.allow[{i}]",
                       f"{rule} is a tunnel (nothing decrypted): a placeholder of a bound key ({', '.join(bound)}) "
                       "sent there is not seen by the proxy and goes on as it is",
                       "give the rule http: (the proxy then reads its requests), or drop it if the agent can do without")


def _unenforced(report: Report, doc: Doc, rules: tuple[AllowRule, ...], i: int) -> None:
    """A tunnel rule beside rule i (with http:) on the same names: on ports the http: rule lacks it
    opens the host without methods or paths; a wildcard tunnel lets another name carry the host's
    (TLS server name, Host header: domain fronting); on the same names and ports it adds nothing."""
    rule, at = rules[i], f"network.allow[{i}]"
    for j, other in enumerate(rules):
        overlap = "" if other.http or other.ip else _overlap(rule, other)
        if not overlap:
            continue
        extra = [p for p in other.ports if p not in rule.ports]
        shared = [p for p in other.ports if p in rule.ports]
        if extra:
            report.add(Severity.WARNING, "egress-unenforced", doc, f"{at}.http", f"{rule}: {other} (network.allow[{j}]) "
                       f"reaches {'the same host' if overlap == 'same' else 'it'} on {_ports(extra)} "
                       "as a tunnel, where these methods and paths are not enforced",
                       f"remove network.allow[{j}], or give it the same http: rule")
        if shared and overlap == "wider":
            report.add(Severity.WARNING, "egress-unenforced", doc, f"{at}.http", f"{rule}: {other} "
                       f"(network.allow[{j}]) lets a tunnel to another name below {other.host} carry this host's name "
                       "(TLS server name, Host header): a server that answers for both (one front, a CDN) serves it "
                       "without these methods and paths", f"allow the exact hosts the agent needs instead of {other}")
        elif shared:
            report.add(Severity.WARNING, "shadowed", doc, f"network.allow[{j}]", f"{other} adds nothing on "
                       f"{_ports(shared)}: the proxy judges every request there by {at}'s methods and paths "
                       f"({rule})", f"remove it; to allow every request, drop http: from {at}")


def _mounts(report: Report, doc: Doc, policy: Policy, facts: HostFacts | None, workspace: str) -> None:
    for i, mount in enumerate(policy.mounts):
        fact = facts.mounts[i] if facts and i < len(facts.mounts) else None
        if fact is not None:
            refusal = refuse_source(fact, facts, f"mounts[{i}].source", doc.file)
            if refusal and fact.kind == "missing":
                report.add(Severity.WARNING, "mount-missing", doc, f"mounts[{i}].source", refusal.found, refusal.hint)
            elif refusal:
                report.add(Severity.ERROR, "mount-sensitive", doc, f"mounts[{i}].source",
                           f"sensitive host mount: {refusal.found}", refusal.hint)
        real = fact.real if fact else mount.source
        inside = real == workspace or real.startswith(workspace.rstrip("/") + "/")
        if mount.access is Access.READ_WRITE and not inside:
            report.add(Severity.WARNING, "mount-writable", doc, f"mounts[{i}].access",
                       f"{mount.source} is writable from the sandbox, outside the workspace",
                       "the agent changes host files there; prefer read-only")
    if policy.workspace.git is Access.READ_WRITE and policy.workspace.access is Access.READ_WRITE:
        report.add(Severity.WARNING, "git-writable", doc, "workspace.git",
                   "the agent can rewrite .git's index, refs and objects: skip-worktree hides a changed file "
                   "from `git status` on the host (hooks, config, commondir and info stay read-only)",
                   "keep read-only unless the agent must commit; review with `git log -p` and `git ls-files -v`")
    if policy.runtime is Runtime.GVISOR and policy.network.mode is NetworkMode.PROXY:
        report.add(Severity.WARNING, "gvisor-hostinet", doc, "runtime",
                   "under gVisor, proxy mode's sockets use the host kernel's network stack (runsc --network=host, "
                   "inside the sandbox's own namespace): the network half is as under runc",
                   "network: {mode: none} keeps every system call in gVisor")


def _per_file(report: Report, doc: Doc, layer: Layer, policy: Policy) -> None:
    values = dict(layer.values)
    if doc.kind is LayerKind.REPO and "image" in values and "@sha256:" not in values["image"]:
        report.add(Severity.WARNING, "image-digest", doc, "image", f"{values['image']} is not pinned to a digest",
                   "a repository layer may only pin the image (image@sha256:…); without one it does nothing")
    if doc.kind is LayerKind.REPO and "build" in values and (values["build"].dockerfile or values["build"].devcontainer):
        named = values["build"].dockerfile or values["build"].devcontainer
        report.add(Severity.WARNING, "repository-build", doc, "build", f"builds the repository's {named} "
                   "on the host's engine: its RUN steps run there, outside the sandbox, when approved",
                   "review the Dockerfile (and what it copies) with this file before approving it")
    if "home.size" in values and "home.size" not in layer.defaulted and policy.home.mode is HomeMode.VOLUME:
        report.add(Severity.WARNING, "ignored", doc, "home.size", "ignored: a home volume has no size limit",
                   "drop home.size, or use home: {mode: tmpfs}")
    passed, set_names = values.get("env.pass", ()), dict(values.get("env.set", ()))
    for i, name in enumerate(passed):
        if name in set_names:
            report.add(Severity.WARNING, "shadowed", doc, f"env.pass[{i}]",
                       f"{name} is also in env.set, whose value wins", "keep one of them")
    if "network.allow" in values:
        _egress(report, doc, values["network.allow"], policy.network.allow_ip_literals)
        _tunnels_beside_keys(report, doc, values["network.allow"], policy)
    for i, secret in enumerate(values.get("secrets", ())):
        if secret.upstream.startswith("http://"):
            report.add(Severity.WARNING, "secret-cleartext", doc, f"secrets[{i}].upstream",
                       f"the proxy sends {secret.name}'s value to {secret.upstream} without TLS",
                       "use https:// unless that network is your own")


def _survives(field: str, entry, value: tuple) -> bool:
    if field == "network.allow":
        return any(covers(entry, rule) for rule in value)
    if field == "mounts":
        return any((m.source, m.target) == (entry.source, entry.target) for m in value)
    if field == "tmpfs":
        return any(t.target == entry.target for t in value)
    if field == "env.set":
        return any(name == entry[0] for name, _ in value)
    return entry in value


def _unreachable(report: Report, eff: Effective, docs: dict[str, Doc]) -> None:
    """Entries a layer allows that a later layer took away: they never take effect here."""
    for i, layer in enumerate(eff.layers):
        doc = docs.get(layer.file)
        for field, value in layer.values:
            if doc is None or FIELDS[field][1] != "intersect":
                continue
            for index, entry in enumerate(value):
                gone = next((j for j in range(i + 1, len(eff.steps))
                             if not _survives(field, entry, get(eff.steps[j], field))), None)
                if gone is not None:
                    at = f"{field}.{entry[0]}" if field == "env.set" else f"{field}[{index}]"
                    report.add(Severity.WARNING, "unreachable", doc, at,
                               f"{show_entry(field, entry)} never applies: {eff.layers[gone].label} removes it")


def _capped(report: Report, eff: Effective, base: Effective, layers: list[Layer], by_file: dict) -> None:
    """A layer asking for more than the layers before it allow is capped (a ceiling), never
    refused: said as a note, and so is everything a ceiling took away."""
    offset = len(base.steps) - 1
    for j, layer in enumerate(layers):
        before, doc = eff.steps[offset + j], by_file.get(layer.file)
        for field, value in layer.values:
            if doc and widened(field, get(before, field), value):
                report.add(Severity.INFO, "capped", doc, field, f"{show(field, value)} is more than the layers before "
                           f"allow ({show(field, get(before, field))}): capped, never widened")
    for note in eff.notes[len(base.notes):]:
        report.add(Severity.INFO, note.kind, by_file.get(note.layer.split(" ", 1)[-1]) or note.layer, note.field,
                   f"{note.asked} -> {note.left}")


def lint(docs: list[Doc], *, base: Effective | None, base_problem: PolicyError | None, layers: list[Layer],
         layer_problems: list[tuple[Doc, PolicyError]], facts: HostFacts | None, workspace: str,
         git_paths: tuple[GitPath, ...] = (), repo_state: str = "", target: str = "run",
         strict: bool = False) -> list[Finding]:
    """Findings for a stack: `docs` are the files as read, `base`/`layers` what parsed of them;
    what `target` cannot enforce is a warning, an error with `strict`."""
    from launcher.targets import TARGETS

    report = Report()
    for name, why in TARGETS[target].cannot():
        report.add(Severity.ERROR if strict else Severity.WARNING, "not-enforced", f"--target {target}", name,
                   f"not enforced by {target}: {why}", "use `sandbox run` or `sandbox up` where it matters")
    by_file = {doc.file: doc for doc in docs}
    for doc in docs:
        _secrets(report, doc)
    if base_problem is not None:
        report.problems(Severity.ERROR, "invalid", base_problem.problems, by_file)
    for doc, problem in layer_problems:
        report.problems(Severity.ERROR, "invalid", problem.problems, by_file)
    if base is not None:
        base_doc = by_file.get(base.policy.source)
        if base_doc:
            _mounts(report, base_doc, base.policy, facts, workspace)
            _per_file(report, base_doc, base.layers[-1], base.policy)
        for layer in layers:
            doc = by_file.get(layer.file)
            if doc:
                _per_file(report, doc, layer, base.policy)
        eff, conflicts = combine(base.policy, layers, prior=base)
        report.problems(Severity.ERROR, "conflict", tuple(conflicts), by_file)
        for note in base.notes:   # what the base file widened over its presets, or a later preset narrowed
            said = "widened from the preset" if note.kind == "widened" else f"narrowed by {note.layer}"
            report.add(Severity.INFO, note.kind, by_file.get(base.policy.source) or base.policy.source, note.field,
                       f"{said}: {note.asked} -> {note.left}")
        _capped(report, eff, base, layers, by_file)
        _unreachable(report, eff, by_file)
        model = next((d for d in eff.decisions if d.field == "network.model"), None)
        if eff.policy.network.model and model:
            report.add(Severity.INFO, "model-api", by_file.get(model.decided_by.split(" ", 1)[-1]) or base_doc or base.policy.source,
                       "network.model", "with --agent NAME and a model key, the agent reaches its model API through "
                       "the proxy (and nothing else it was not allowed)", "network.model: false in an org or user "
                       "policy forbids it")
    for git in (g for g in git_paths if g.key and g.kind != "program"):
        inside = git.path.startswith(workspace.rstrip("/") + "/")
        if git.scope in ("local", "worktree") and not inside and git.path != workspace:
            report.add(Severity.WARNING, "hooks-outside", git.config, "", f"{git.key} = {git.value} points outside "
                       f"the workspace ({git.path})", "git runs hooks from there; make sure no mount exposes it")
        elif inside:
            report.add(Severity.INFO, "hooks-protected", git.config, "",
                       f"{git.key} = {git.value}: {git.path} is kept read-only in the sandbox")
    if repo_state:
        repo = next((d for d in docs if d.kind is LayerKind.REPO), None)
        report.add(Severity.INFO, "repo-trust", repo.file if repo else workspace, "", repo_state)
    return in_order(report.findings)


def in_order(findings: list[Finding]) -> list[Finding]:
    rank = {Severity.ERROR: 0, Severity.WARNING: 1, Severity.INFO: 2}
    return sorted(findings, key=lambda f: (rank[f.severity], f.file, f.line or 0))



def render(findings: list[Finding], docs: list[Doc], fmt: str = "text", mark: Mark = plain) -> str:
    counts = {s: sum(f.severity is s for f in findings) for s in Severity}
    if fmt == "json":
        import json

        return json.dumps({
            "files": [{"kind": d.kind.value, "file": d.file} for d in docs],
            "errors": counts[Severity.ERROR], "warnings": counts[Severity.WARNING],
            "findings": [{"severity": f.severity.value, "code": f.code, "file": f.file, "line": f.line,
                          "path": f.path, "message": f.message, "hint": f.hint} for f in findings]}, indent=2)
    lines = ["checked, in order: " + ", ".join(f"{d.kind.value} {d.file}" for d in docs)]
    lines += [f.text(mark) for f in findings]
    lines.append(f"{counts[Severity.ERROR]} error(s), {counts[Severity.WARNING]} warning(s)")
    return "\n".join(lines)
