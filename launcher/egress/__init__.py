"""Proxy-only egress: allow rules, the Squid sidecar and its config, secrets the proxy injects, the audit log."""
