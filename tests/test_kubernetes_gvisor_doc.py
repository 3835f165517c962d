"""docs/targets.md's worked example for a cluster with gVisor's RuntimeClass is what `sandbox compile`
emits and takes: its RuntimeClass is the one the Pod names and is valid Kubernetes, its Pod fields
are the compiled Pod's, its commands run, its probe line is what the plan expects. No stale docs."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from test_kubernetes import agent_pod, kube_validate, probe_args

DOC = Path(__file__).parent.parent / "docs" / "targets.md"
HEADING = "### Worked example: a cluster with gVisor's RuntimeClass"
SANDBOX = [sys.executable, "-m", "launcher"]


def section() -> str:
    text = DOC.read_text()
    start = text.index(HEADING)
    end = re.compile(r"^#{1,3} ", re.M).search(text, start + len(HEADING))
    return text[start:end.start() if end else len(text)]


def blocks(kind: str) -> list[str]:
    return re.findall(rf"^```{kind}\n(.*?)^```$", section(), re.M | re.S)


def objects() -> dict[str, dict]:
    return {o["kind"]: o for block in blocks("yaml") for o in yaml.safe_load_all(block)}


def subset(part, whole) -> bool:
    """Whether `part` says only what `whole` says: mappings by key, lists item by item (an item with
    a name stands for the item of that name)."""
    if isinstance(part, dict):
        return isinstance(whole, dict) and all(k in whole and subset(v, whole[k]) for k, v in part.items())
    if isinstance(part, list) and part and all(isinstance(i, dict) and "name" in i for i in part):
        named = {i.get("name"): i for i in whole} if isinstance(whole, list) else {}
        return all(i["name"] in named and subset(i, named[i["name"]]) for i in part)
    return part == whole


@pytest.fixture(scope="module")
def compiled(tmp_path_factory) -> list[dict]:
    """The example's own compile command, run as written in an empty checkout."""
    (line,) = [c for c in blocks("sh")[0].splitlines() if c.startswith("sandbox compile")]
    argv = shlex.split(line.split(">")[0])[1:]
    result = subprocess.run(SANDBOX + argv, capture_output=True, text=True, cwd=tmp_path_factory.mktemp("ws"))
    assert result.returncode == 0, result.stderr
    return list(yaml.safe_load_all(result.stdout))


def test_the_runtime_class_is_the_one_the_pod_names_and_is_valid(compiled):
    rc = objects()["RuntimeClass"]
    assert rc["handler"] == "runsc"
    assert rc["metadata"]["name"] == agent_pod(compiled)["spec"]["runtimeClassName"]
    kv, versions = kube_validate()
    for version in versions:
        kv.validate(rc, version, strict=True)


def test_the_pod_fields_shown_are_the_compiled_pods(compiled):
    shown = objects()["Pod"]
    assert subset(shown, agent_pod(compiled)), "docs/targets.md's gVisor Pod differs from `sandbox compile`"
    assert subset({"spec": {"runtimeClassName": "gvisor"}}, shown)
    args = probe_args(compiled)
    assert args["kernel"] == "gvisor" and "`kernel=gvisor`" in section()
    assert f"`net={args['net']}`" in section()


def test_the_subset_check_can_fail(compiled):
    pod = agent_pod(compiled)
    assert not subset({"spec": {"runtimeClassName": "runsc"}}, pod)
    assert not subset({"spec": {"containers": [{"name": "agent", "command": ["/bin/sh"]}]}}, pod)
    assert not subset({"spec": {"containers": [{"name": "nobody"}]}}, pod)


def test_the_probe_line_shown_is_what_the_plan_expects(compiled):
    (line,) = blocks("text")[0].splitlines()
    tag, check, verdict, expected, observed = line.split("\t")
    assert (tag, check, verdict) == ("PROBE", "kernel.runtime", "pass")
    assert expected == probe_args(compiled)["kernel"] and observed.startswith(f"{expected}: Linux version ")


def test_the_namespace_label_is_the_one_the_file_asks_for(tmp_path):
    head = subprocess.run(SANDBOX + ["compile", "-p", "untrusted-gvisor", "-w", str(tmp_path), "--format",
                                     "kubernetes"], capture_output=True, text=True).stdout
    label = re.search(r"namespace labelled (\S+?)\.$", head, re.M).group(1)
    assert f"kubectl label namespace agents {label}" in blocks("sh")[0]
