"""`private: true` on an allow rule: parsed from YAML and --allow-private, kept only where every
layer opts in, flagged by `sandbox check`, and the only way past the proxy's private-range refusal."""

from __future__ import annotations

import pytest

from launcher.plan.squidconf import render_squid
from launcher.policy import layers
from launcher.policy.allowlist import parse_rule


def test_a_rule_may_opt_into_private_addresses_and_says_so():
    rule = parse_rule({"host": "git.internal", "private": True})
    assert rule.private and str(rule) == "git.internal (private)"
    assert not parse_rule("git.internal").private
    with pytest.raises(ValueError):
        parse_rule({"host": "git.internal", "private": "yes"})


def test_private_is_kept_only_where_every_layer_opts_in():
    private, plain = parse_rule({"host": "git.internal", "private": True}), parse_rule("git.internal")
    assert layers._meet(private, plain) == plain and layers._meet(private, private) == private
    assert layers.covers(private, plain) and not layers.covers(plain, private)


def test_the_proxy_refuses_private_addresses_for_every_rule_that_does_not_opt_in():
    config = render_squid("s", (parse_rule("api.example.com"), parse_rule({"host": "git.internal", "private": True})))
    assert "acl to_private dst " in config and "10.0.0.0/8" in config and "100.64.0.0/10" in config
    lines = [l for l in config.splitlines() if l.startswith("http_access allow allow")]
    assert lines[0].endswith("!to_localhost !to_linklocal !to_private")
    assert lines[1].endswith("!to_localhost !to_linklocal")


def test_check_flags_a_private_rule(tmp_path):
    from launcher.check import lintstack

    policy = tmp_path / "p.yaml"
    policy.write_text("version: 1\nname: p\ndescription: d\nnetwork: {mode: proxy, allow: [{host: git.internal, "
                      "private: true}]}\n")
    findings, _ = lintstack.check((str(policy),), str(tmp_path))
    assert any(f.code == "egress-private" and f.path == "network.allow[0]" for f in findings)
