"""Property tests: for any valid base and layer, the effective policy is never wider than either,
and a layer that is no wider than the base is never refused. The oracle below is written from the
rules' meaning (hosts actually matched, sets, numbers), not from the implementation."""

from __future__ import annotations

import yaml
from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st

from conftest import fake_facts
from launcher.errors import PolicyError
from launcher.host.hostpaths import PathFact
from launcher.pipeline import stack
from launcher.plan.compiler import compile_policy
from launcher.plan.runtimes import GVISOR_THREADS
from launcher.policy import layers
from launcher.policy.layers import FIELDS, LayerKind, full_layer
from launcher.policy.model import Access, HomeMode, NetworkMode, Runtime, WorkspaceMode
from launcher.policy.policy import parse_policy

DIGEST_A, DIGEST_B = "sha256:" + "a" * 64, "sha256:" + "b" * 64
IMAGES = ["sandbox/agent:bookworm", f"sandbox/agent:bookworm@{DIGEST_A}", f"sandbox/agent@{DIGEST_B}",
          "sandbox/agent:trixie", "other/img:1"]
HOSTS = ["api.example.com", "*.example.com", "a.b.example.com", "*.b.example.com", "x.test", "x.test:8443",
         "*.pypi.org", "files.pypi.org:443"]
# Concrete names to ask every rule about: each pool host, and fresh names below each wildcard suffix.
SAMPLES = [(h, p) for h in ("api.example.com", "zz.example.com", "a.b.example.com", "zz.b.example.com", "x.test",
                            "files.pypi.org", "zz.pypi.org", "example.com", "pypi.org") for p in (80, 443, 8443)]
MOUNTS = [("/srv/data", "/data"), ("/srv/ref", "/ref")]
SETS = {"A": ["1", "2"], "B": ["1"]}
CAPS = ["CHOWN", "KILL", "NET_BIND_SERVICE", "SETUID"]
SECRETS = ["model", "search"]


def _secret(name: str) -> dict:
    return {"name": name, "env": name.upper() + "_VALUE", "upstream": f"https://{name}.example.com",
            "header": "Authorization: Bearer {value}"}


def subset(pool):
    return st.lists(st.sampled_from(pool), unique=True, max_size=len(pool))


@st.composite
def documents(draw, base: bool):
    """A policy document over every field; a layer sets a random part of it."""
    mode = draw(st.sampled_from(["none", "proxy"]))
    doc = {
        "image": draw(st.sampled_from(IMAGES)),
        "runtime": draw(st.sampled_from(["runc", "gvisor"])),
        "workspace": {"target": draw(st.sampled_from(["/workspace", "/workspace", "/src"])),
                      "access": draw(st.sampled_from(["read-only", "read-write"])),
                      "git": draw(st.sampled_from(["read-only", "read-write"])),
                      "protect": draw(subset(["docs", "secrets", ".git/hooks", "build/out"])),
                      "mode": draw(st.sampled_from(["bind", "copy"])),
                      "exclude": draw(subset(["node_modules", "build", "*.o"]))},
        "mounts": [{"source": s, "target": t, "access": draw(st.sampled_from(["read-only", "read-write"]))}
                   for s, t in draw(subset(MOUNTS))],
        "tmpfs": [{"target": t, "size": draw(st.sampled_from(["16m", "64m", "256m"])),
                   "mode": draw(st.sampled_from(["0700", "0750", "0755", "1777"]))}
                  for t in draw(subset(["/tmp", "/cache"]))],
        "home": {"mode": draw(st.sampled_from(["tmpfs", "volume"])), "target": draw(st.sampled_from(["/home/agent", "/home/me"])),
                 "size": draw(st.sampled_from(["64m", "512m", "1g"]))},
        "network": {"mode": mode, "allow": draw(subset(HOSTS)) if mode == "proxy" else [],
                    "allow_ip_literals": draw(st.booleans()), "model": draw(st.booleans())},
        "env": {"pass": draw(subset(["TERM", "LANG", "EDITOR"])),
                "set": {k: draw(st.sampled_from(SETS[k])) for k in draw(subset(list(SETS)))}},
        "limits": {"pids": draw(st.integers(16, 1024)), "memory": draw(st.sampled_from(["64m", "512m", "1g", "2g"])),
                   "cpus": draw(st.sampled_from([0.5, 1, 2, 4])), "timeout": draw(st.sampled_from(["90s", "10m", "30m", "2h"])),
                   "session": draw(st.sampled_from(["1h", "8h", "10h"])), "idle": draw(st.sampled_from(["90s", "1h"]))},
        "user": draw(st.sampled_from(["auto", "1000:1000", "1001:1001"])),
        "capabilities": draw(subset(CAPS)),
        "command": draw(st.sampled_from([["bash"], ["sh", "-c", "true"]])),
        "secrets": [_secret(n) for n in draw(subset(SECRETS))] if mode == "proxy" else [],
        "ca_certificates": [],   # host files: the compiler needs them prepared (tests/test_compiler.py)
        "packages": draw(subset(["jq", "make", "ripgrep"])),
        "build": {},   # a repository file: tests/test_imagebuild.py
    }
    if not base:
        keep = draw(st.sets(st.sampled_from(list(FIELDS)), max_size=6))
        doc = _only(doc, keep)
        if draw(st.booleans()) and "network" in doc and doc["network"].get("mode") == "proxy":
            del doc["network"]["mode"]   # inherit the mode
    return {"version": 1, **({"name": "base", "description": "d"} if base else {}), **doc}


def _only(doc: dict, fields: set[str]) -> dict:
    out: dict = {}
    for field in fields:
        head, _, tail = field.partition(".")
        if tail:
            out.setdefault(head, {})[tail] = doc[head][tail]
        else:
            out[head] = doc[head]
    net = out.get("network", {})
    if net.get("mode") == "none":
        net.pop("allow", None)
    return out


def no_wider(field: str, got, earlier) -> bool:
    """`got` allows nothing that `earlier` does not (the meaning of each rule)."""
    if field == "image":
        # The same reference, or it pinned to a digest: `name:tag@digest` or `name@digest`.
        name, _, digest = got.partition("@")
        earlier_name, _, earlier_digest = earlier.partition("@")
        bare = earlier_name.rsplit(":", 1)[0] if ":" in earlier_name.split("/")[-1] else earlier_name
        return got == earlier or (bool(digest) and name in (earlier_name, bare)
                                  and (not earlier_digest or digest == earlier_digest))
    if field in ("workspace.target", "home.target", "user"):
        return got == earlier
    if field in ("workspace.access", "workspace.git"):
        return got is Access.READ_ONLY or earlier is Access.READ_WRITE
    if field in ("workspace.protect", "workspace.exclude"):
        return set(got) >= set(earlier)
    if field == "workspace.mode":
        return got is WorkspaceMode.COPY or earlier is WorkspaceMode.BIND
    if field == "mounts":
        return all(any((m.source, m.target) == (e.source, e.target) and
                       (m.access is Access.READ_ONLY or e.access is Access.READ_WRITE) for e in earlier) for m in got)
    if field == "tmpfs":   # no bigger, and no mode bit the earlier one lacks
        return all(any(t.target == e.target and t.size_bytes <= e.size_bytes and t.mode & ~e.mode == 0 for e in earlier)
                   for t in got)
    if field == "home.mode":
        return got is HomeMode.TMPFS or earlier is HomeMode.VOLUME
    if field == "network.mode":
        return got is NetworkMode.NONE or earlier is NetworkMode.PROXY
    if field == "runtime":
        return got is Runtime.GVISOR or earlier is Runtime.RUNC
    if field == "network.allow":
        return all(any(e.matches(h, p) for e in earlier) for h, p in SAMPLES if any(r.matches(h, p) for r in got))
    if field in ("network.allow_ip_literals", "network.model"):
        return not got or earlier
    if field in ("env.pass", "env.set", "capabilities", "secrets", "ca_certificates"):
        return set(got) <= set(earlier)
    if field in ("command", "packages", "build"):   # what runs inside, or the (untrusted) image's content
        return True
    return got <= earlier   # limits, home.size


def parse(doc: dict, base: bool):
    data = yaml.safe_dump(doc).encode()
    try:
        if base:
            return parse_policy(data, "base.yaml")
        return stack.parse_layer(data, "layer.yaml", LayerKind.REPO)
    except PolicyError:
        assume(False)


SETTINGS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(documents(base=True), st.lists(documents(base=False), min_size=1, max_size=3))
def test_the_result_is_never_wider_than_the_base_or_any_layer(base_doc, layer_docs):
    base = parse(base_doc, True)
    stack_ = [parse(doc, False) for doc in layer_docs]
    try:
        eff = layers.effective(base, [full_layer(LayerKind.BASE, base), *stack_])
    except PolicyError as exc:   # the one conflict there is: two different pinned image digests
        assert all("pinned to different digests" in p.found for p in exc.problems), exc
        event("conflicting image digests")
        assume(False)   # not `return`: a run where every stack is refused must fail (Unsatisfiable)
    event("applied")
    for field in FIELDS:
        assert no_wider(field, layers.get(eff.policy, field), layers.get(base, field)), field
    for layer in stack_:   # and never wider than any layer: each is a ceiling
        for field, value in layer.values:
            if FIELDS[field][1] in layers.CEILINGS:
                assert no_wider(field, layers.get(eff.policy, field), value), field
    # what a layer took away is said: a narrowed ceiling field always has a note
    narrowed = {f for f in FIELDS if FIELDS[f][1] in layers.CEILINGS and layers.get(eff.policy, f) != layers.get(base, f)}
    assert narrowed - {"network.allow", "secrets"} <= {n.field for n in eff.notes}   # those two also follow network.mode


def _facts(policy):
    facts = fake_facts()
    return facts.__class__(**{**facts.__dict__, "protected": tuple(
        PathFact(given=p.split("/")[0], real=f"/home/dev/repo/{p.split('/')[0]}", kind="missing")
        for p in policy.workspace.protect),
        "mounts": tuple(PathFact(given=m.source, real=m.source, kind="dir") for m in policy.mounts)})


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(documents(base=True), documents(base=False))
def test_the_compiled_plan_is_never_wider_than_the_base_plan(base_doc, layer_doc):
    assume(base_doc["network"]["mode"] == "none")
    base, layer = parse(base_doc, True), parse(layer_doc, False)
    try:
        eff = layers.effective(base, [full_layer(LayerKind.BASE, base), layer]).policy
    except PolicyError:
        event("refused as a widening")
        assume(False)   # see above: the applied stacks are the point
    event("applied")
    before, after = compile_policy(base, _facts(base)).container, compile_policy(eff, _facts(eff)).container
    writable = lambda c: {m.target for m in c.mounts if not m.read_only}
    assert writable(after) <= writable(before)
    assert set(after.cap_add) <= set(before.cap_add) and after.network_mode == before.network_mode == "none"
    own = lambda c: c.pids_limit - (GVISOR_THREADS if c.runtime != "runc" else 0)  # noqa: E731 - gVisor's threads
    assert own(after) <= own(before) and after.memory_bytes <= before.memory_bytes
    assert after.nano_cpus <= before.nano_cpus
    assert after.runtime == before.runtime or after.runtime == "sandbox-runsc"   # runc -> gvisor only
    assert set(dict(after.env)) <= set(dict(before.env)) and after.read_only_root and after.cap_drop == ("ALL",)
