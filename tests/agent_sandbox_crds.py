"""The kubernetes-sigs/agent-sandbox CRDs the tests validate against: copies in
tests/data/k8s/agent-sandbox/ (or $AGENT_SANDBOX_CRDS, to try another release), never part of the
product. Their v1beta1 openAPIV3Schema, made strict the way the API server is: a field no schema
names is pruned there (lost without a word), so here it fails."""

from __future__ import annotations

import functools
import os
from pathlib import Path

import pytest
import yaml

DATA = Path(__file__).resolve().parent / "data" / "k8s" / "agent-sandbox"
FILES = {"SandboxTemplate": "extensions.agents.x-k8s.io_sandboxtemplates.yaml",
         "SandboxWarmPool": "extensions.agents.x-k8s.io_sandboxwarmpools.yaml",
         "SandboxClaim": "extensions.agents.x-k8s.io_sandboxclaims.yaml"}   # docs/targets.md's example
VERSION = "v1beta1"


def crd_dir() -> Path:
    """The directory of the CRDs: $AGENT_SANDBOX_CRDS, or the copies beside the tests."""
    path = Path(os.environ.get("AGENT_SANDBOX_CRDS") or DATA)
    missing = [name for name in FILES.values() if not (path / name).is_file()]
    if missing:
        pytest.fail(f"no agent-sandbox CRDs {', '.join(missing)} in {path}")
    return path


def strict(schema):
    """The schema with additionalProperties false on every object that lists its properties and
    does not preserve unknown fields (what the API server would prune)."""
    if isinstance(schema, list):
        return [strict(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: strict(v) for k, v in schema.items()}
    if "properties" in schema and "additionalProperties" not in schema \
            and not schema.get("x-kubernetes-preserve-unknown-fields"):
        out["additionalProperties"] = False
    return out


@functools.cache
def crd(kind: str) -> dict:
    """The CustomResourceDefinition of `kind`, parsed."""
    return yaml.safe_load((crd_dir() / FILES[kind]).read_text())


def version_schema(kind: str) -> dict:
    (version,) = [v for v in crd(kind)["spec"]["versions"] if v["name"] == VERSION]
    assert version["served"] and version["storage"], f"{kind} {VERSION} is no longer the served storage version"
    return version["schema"]["openAPIV3Schema"]


@functools.cache
def validator(kind: str):
    import jsonschema

    return jsonschema.Draft7Validator(strict(version_schema(kind)))


def errors(obj: dict) -> list[str]:
    """Every way `obj` breaks its kind's strict v1beta1 schema, as 'path: message'."""
    assert obj["apiVersion"] == f"{crd(obj['kind'])['spec']['group']}/{VERSION}"
    return [f"{'.'.join(map(str, e.absolute_path))}: {e.message}" for e in validator(obj["kind"]).iter_errors(obj)]


def defaults(kind: str) -> dict[str, object]:
    """spec's fields that the CRD defaults (the API server fills them in when a file leaves them out)."""
    return {k: v["default"] for k, v in version_schema(kind)["properties"]["spec"]["properties"].items()
            if "default" in v}
