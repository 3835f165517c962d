"""The shipped JSON Schema and the typed model describe the same format."""

from __future__ import annotations

import dataclasses

from launcher.policy import model
from launcher.policy.schema import policy_schema

# Schema key -> model field, where the names differ.
RENAMED = {"pass": "pass_names", "set": "set_values", "memory": "memory_bytes", "timeout": "timeout_seconds",
           "session": "session_seconds", "idle": "idle_seconds",
           "size": "size_bytes", "version": None, "extends": None,   # version, extends: loader directives
           "registries": None}   # network.registries: the loader makes them network.allow rules
# Model fields that come from loading, not from the file.
LOADER_ONLY = {"source", "digest"}


def fields(cls) -> set[str]:
    return {f.name for f in dataclasses.fields(cls)}


def keys(schema: dict) -> set[str]:
    return {RENAMED.get(k, k) for k in schema["properties"]} - {None}


def test_top_level_keys_match_the_policy_model():
    assert keys(policy_schema()) == fields(model.Policy) - LOADER_ONLY


def test_nested_objects_match_their_models():
    props = policy_schema()["properties"]
    assert keys(props["workspace"]) == fields(model.WorkspacePolicy)
    assert keys(props["mounts"]["items"]) == fields(model.MountPolicy)
    assert keys(props["tmpfs"]["items"]) == fields(model.TmpfsPolicy)
    assert keys(props["env"]) == fields(model.EnvPolicy)
    assert keys(props["limits"]) == fields(model.Limits)
    assert keys(props["network"]) == fields(model.NetworkPolicy)


def test_enums_match():
    props = policy_schema()["properties"]
    assert props["workspace"]["properties"]["access"]["enum"] == sorted(a.value for a in model.Access)
    assert props["network"]["properties"]["mode"]["enum"] == [m.value for m in model.NetworkMode]
    from launcher import egress  # noqa: F401 - allow entries are parsed into egress.AllowRule


def test_every_object_is_closed_and_every_field_described_or_defaulted():
    def walk(schema, path="policy"):
        if schema.get("type") == "object" and "properties" in schema:
            assert schema.get("additionalProperties") is False, path
            for key, sub in schema["properties"].items():
                assert "default" in sub or key in schema.get("required", []), f"{path}.{key} has no default"
                walk(sub, f"{path}.{key}")
        if schema.get("type") == "array":
            walk(schema["items"], path + "[]")
    walk(policy_schema())


def test_presets_validate_against_the_schema_file_with_a_real_validator_when_available():
    import pytest
    import yaml

    jsonschema = pytest.importorskip("jsonschema")
    from launcher import resources

    for name in resources.preset_names():
        jsonschema.validate(yaml.safe_load(resources.preset_path(name).read_text()), policy_schema())
