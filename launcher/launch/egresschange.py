"""`sandbox egress`: an allow rule added to or removed from a running `up` sandbox, with a reason.
The new rule set is compiled the way `up` attaching compiles it (its stored options, then the
changes: an added rule widens the base as `up --allow` does, the org and user layers still its
ceilings; a removed one goes after every layer), its proxy reloads (Squid reconfigures: the
sandbox, its network and its connections stay), the probe proves the sandbox again with the new
plan (else the old configuration is put back: exit 122), and only then is the change kept
(launcher/host/rulechanges.py, for `up` attaching) and written into the proxy's log with its reason."""

from __future__ import annotations

import time
from dataclasses import dataclass, replace

from launcher import labels as label
from launcher.egress import proxy
from launcher.errors import NoSandbox, PolicyError, ProbeFailed, Problem
from launcher.host import proven, rulechanges
from launcher.host.rulechanges import RuleChanges
from launcher.launch import proof, sandboxes, session, upoptions
from launcher.plan import trustfiles
from launcher.plan.plan import proxy_env

REASON_LIMIT = 500
# What a reload gives the running proxy; everything else it was started with must stay as it is.
_RELOADED = ("SANDBOX_SQUID_CONF", "SANDBOX_HTTP_RULES", "SANDBOX_BUMP_NAMES")


@dataclass(frozen=True, kw_only=True)
class EgressChanged:
    sandbox: str
    action: str                # allow | deny
    rule: str
    reason: str
    time: int                  # epoch seconds
    rules: tuple[str, ...]     # the allow rules in force now
    checks: int                # the probe's checks, passed again with them


class _Quiet:
    def status(self, message: str) -> None:
        pass

    def output(self, stream: str, data: bytes) -> None:
        pass


def change(name: str, *, allow: str | None = None, deny: str | None = None, reason: str, listener,
           engine=None) -> EgressChanged:
    """Add (`allow`: HOST, *.suffix, HOST:PORT, or a YAML mapping {host: ..., http: {...}}) or remove
    (`deny`: HOST or HOST:PORT, every rule of it) an allow rule of the running `up` sandbox `name`.
    Refused (PolicyError, 120) when the layers do not allow it or it needs a new sandbox; NoSandbox
    (117); ProbeFailed (122) when the proof failed (the old rules are back in force)."""
    if (allow is None) == (deny is None):
        raise _refused("--allow/--deny", "exactly one rule to allow or to deny", "both" if allow else "neither",
                       "sandbox egress NAME --allow HOST --reason TEXT")
    reason = _reason(reason)
    engine = engine or session.connect(listener)
    with rulechanges.locked(name):
        return _change(engine, name, allow, deny, reason, listener)


def _change(engine, name: str, allow: str | None, deny: str | None, reason: str, listener) -> EgressChanged:
    item = sandboxes.running(engine, name)
    stored = upoptions.parse(item.labels.get(label.UP_OPTIONS))
    if item.labels.get(label.KIND) != "up":
        raise NoSandbox(f"{name} is not a sandbox `sandbox up` started; only those have rules that change")
    if stored is None:
        raise _refused("NAME", "a sandbox whose options are stored (a newer launcher's `up`)", name,
                       f"`sandbox down {name}`, then `sandbox up` with the rule")
    now = rulechanges.load(name, item.id) or RuleChanges(container=item.id)
    base = upoptions.applied(session.Request(workspace=item.labels.get(label.WORKSPACE, "."), given=frozenset()),
                             stored, name)
    old = _planned(base, now, engine, _Quiet())
    if not old.plan.proxy:
        raise _refused("NAME", "a sandbox in network mode proxy", f"{name} has no egress proxy",
                       "rules change only where a proxy enforces them")
    if allow is not None:
        entry, rule = _entry(allow, old.policy.network.allow_ip_literals)
        if rule in old.policy.network.allow:
            raise _refused("--allow", "a rule not in force yet", f"{rule} is allowed already", "nothing to change")
        host = f"*.{rule.host}" if rule.wildcard else rule.host
        after = replace(now, added=now.added + (entry,),
                        removed=tuple(r for r in now.removed if _removal(r)[0] != host))
    else:
        _removal(deny, "--deny")
        after = replace(now, added=tuple(a for a in now.added if a != deny), removed=now.removed + (deny,))
    new = _planned(base, after, engine, listener)
    try:
        _check(old, new, allow, deny, rule if allow is not None else None)
        return _changed(engine, item, old, new, now, after, said=str(rule) if allow is not None else deny,
                        action="allow" if allow is not None else "deny", reason=reason, listener=listener)
    finally:   # the CA files these compiles named (rules per request): the running sandbox binds its own
        running = set(item.labels.get(label.CA_FILES, "").split())
        trustfiles.drop_launch_files(tuple(f for p in (old, new) if p.plan.proxy for f in p.plan.proxy.ca_files
                                           if f not in running))


def _changed(engine, item, old, new, now: RuleChanges, after: RuleChanges, *, said: str, action: str, reason: str,
             listener) -> EgressChanged:
    """Reload, prove, keep: the new rules in force, or the old ones back (ProbeFailed)."""
    name = item.name
    listener.status(f"reloading the egress proxy of {name} ({action} {said})")
    proxy.reload(engine, new.plan.proxy)
    try:
        report = proof.reprove(engine, new.plan, item.id)
    except ProbeFailed as exc:
        proxy.reload(engine, old.plan.proxy)
        raise ProbeFailed(f"{exc}\n  the egress proxy of {name} is back on its earlier rules; nothing was changed",
                          exc.report) from None
    from launcher.egress.audit import RuleChange, change_line

    done = RuleChange(time=int(time.time()), action=action, rule=said, reason=reason)
    rulechanges.save(name, replace(after, digest=dict(new.plan.container.labels)[label.EFFECTIVE_DIGEST],
                                   changes=now.changes + ({"time": done.time, "action": done.action, "rule": said,
                                                           "reason": reason},)))
    proxy.note(engine, new.plan.proxy, change_line(done))
    proven.save(name, len(report.checks), "after sandbox egress")
    return EgressChanged(sandbox=name, action=done.action, rule=said, reason=reason, time=done.time,
                         rules=tuple(str(r) for r in new.policy.network.allow), checks=len(report.checks))


def _planned(base, changes: RuleChanges, engine, listener):
    request = replace(base, options=replace(base.options, added=changes.added, removed=changes.removed))
    planned = session.prepare(request, listener, kind="up")
    return session.for_engine(request, planned, engine, kind="up")


def _check(old, new, allow, deny, rule) -> None:
    """Refuse a new rule set the layers cut (a ceiling), one that changes nothing, or one that needs
    what the running sandbox or proxy was not started with."""
    if rule is not None and rule not in new.policy.network.allow:
        ceilings = [n for n in new.layered.notes if n.startswith("ceiling:")]
        raise _refused("--allow", "a rule the org and user policies allow (they are ceilings, as for `up --allow`)",
                       f"{allow}: " + ("; ".join(ceilings) or "not in the effective policy"),
                       "ask for what the org/user policy allows, or change that policy")
    if deny is not None and new.policy.network.allow == old.policy.network.allow:
        raise _refused("--deny", "an allow rule in force (HOST, or HOST:PORT)", deny,
                       "`sandbox explain` or the run report lists the rules in force")
    was, wants = set(old.plan.proxy.bump_names), set(new.plan.proxy.bump_names)
    if new.plan.proxy.http_rules and (not old.plan.proxy.http_rules or not wants <= was):
        raise _refused("--allow", "http: rules only for hosts whose TLS the proxy intercepted from its start "
                       f"({', '.join(sorted(was)) or 'none'}): its CA was made then, for those names alone",
                       f"{allow}", "a plain host rule (a tunnel) here; or `sandbox down`, then `sandbox up` with the "
                       "http: rule in the policy")
    differ = _differing(old.plan, new.plan)
    if differ:
        raise _refused(allow and "--allow" or "--deny", "a change of the proxy's rules alone",
                       "a change the running sandbox or its proxy would have to be started with: " + ", ".join(differ),
                       "`sandbox down NAME`, then `sandbox up` with the rule in the policy (or --allow)")


def _differing(old, new) -> list[str]:
    """What else than the proxy's configuration differs between the plans: the sandbox's container
    (but its probe's expectations and labels), or what the proxy was started with."""
    from dataclasses import fields

    def plain(plan):   # each compile names its own pair of CA files (rules per request): the running one's stay
        files = set(plan.proxy.ca_files) - {""}
        return replace(plan.container, command=(), labels=(),
                       mounts=tuple(replace(m, source="") if m.source in files else m for m in plan.container.mounts))

    a, b = plain(old), plain(new)
    found = [f"container.{f.name}" for f in fields(a) if getattr(a, f.name) != getattr(b, f.name)]
    was, now = proxy_env(old.proxy), proxy_env(new.proxy)
    return found + [f"proxy {k}" for k in sorted(set(was) | set(now)) if k not in _RELOADED and was.get(k) != now.get(k)]


def _entry(text: str, ip_literals: bool):
    """--allow's RULE: a host string, or a YAML mapping (a rule with http:), and its AllowRule."""
    from launcher.policy.allowlist import parse_rule

    entry = text
    if text.strip().startswith("{"):
        from launcher.policy.yamlsafe import load_yaml

        entry = load_yaml(text.encode(), "--allow")
    try:
        return entry, parse_rule(entry, ip_literals)
    except ValueError as exc:
        raise _refused("--allow", str(exc), repr(text), "for example api.example.com, *.pypi.org, host:8443 or "
                       "'{host: api.example.com, http: {methods: [GET], paths: [/v1/]}}'") from None


def _removal(text: str, flag: str = "--deny") -> tuple[str, int | None]:
    from launcher.policy.allowlist import removal

    try:
        return removal(text)
    except ValueError as exc:
        raise _refused(flag, str(exc), repr(text), "HOST, *.suffix or HOST:PORT of a rule in force") from None


def _reason(text: str) -> str:
    reason = " ".join(text.split())
    if not reason or len(reason) > REASON_LIMIT or not reason.isprintable():
        raise _refused("--reason", f"why, in one printable line of up to {REASON_LIMIT} characters",
                       repr(text[:60]), "--reason 'the tests download fixtures from it'")
    return reason


def _refused(path: str, expected: str, found: str, hint: str) -> PolicyError:
    return PolicyError([Problem(file="command line", path=path, expected=expected, found=found, hint=hint)])
