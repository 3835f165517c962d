"""The egress proxy at launch and after: its networks and container started, with the injected
secrets' values read only then (proxy.py), and its access log read back (audit.py). It builds on
the plan and the engine: what a plan says about the proxy is launcher/plan/plan.py's, its allow
rules launcher/policy/allowlist.py's, its Squid configuration launcher/plan/squidconf.py's
(rendered at compile time).

May import: agents, engine, host, plan, policy."""
