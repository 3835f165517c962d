"""The egress proxy at launch and after: its networks and container started, with the injected
secrets' values read only then (proxy.py), and its access log read back (audit.py). It builds on
the plan and the engine: what a plan says about the proxy is launcher/plan.py's, its allow rules
launcher/allowlist.py's, its Squid configuration launcher/squidconf.py's (rendered at compile time)."""
