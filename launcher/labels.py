"""Every Docker label the launcher sets or reads, in one place: `ls`, `gc`, clean-up and the
compiler agree on them by construction."""

from __future__ import annotations

PREFIX = "dev.sandbox"
MANAGED = f"{PREFIX}.managed"                    # "1" on everything we create (images, volumes, networks, containers)
KIND = f"{PREFIX}.kind"                          # run, up, external, proxy, network, egress, testnet, copy, home, tool
SANDBOX = f"{PREFIX}.sandbox"                    # the sandbox a resource belongs to (its container name)
POLICY = f"{PREFIX}.policy"                      # the effective policy's name
POLICY_DIGEST = f"{PREFIX}.policy-digest"        # sha256 of its layer files
EFFECTIVE_DIGEST = f"{PREFIX}.effective-digest"  # sha256 of every effective value (see trustlevel.effective_digest)
WORKSPACE = f"{PREFIX}.workspace"                # the workspace's real host path
OWNER_PID = f"{PREFIX}.owner-pid"                # the launcher process, for `gc`
COPY = f"{PREFIX}.copy"                          # copy mode: the copy a sandbox works on (its volumes carry it too)
HOME = f"{PREFIX}.home"                          # home.mode volume: the home volume a sandbox uses
CACHE = f"{PREFIX}.cache"                        # read-only registries: the download cache volume a sandbox uses
PROFILE = f"{PREFIX}.profile"                    # a home volume's agent profile
TRUST = f"{PREFIX}.trust"                        # a home volume's or copy's trust key (trustlevel.key)
PROTECTED = f"{PREFIX}.protected"                # a copy's volumes: JSON list of paths `apply` never carries back
FORKED = f"{PREFIX}.forked"                      # a fork's volumes (`sandbox fork`): "ORIGIN@CHECKPOINT" it was made from
CONTEXT = f"{PREFIX}.context"                    # images with a fixed tag: the hash of the build context
PLACEHOLDERS = f"{PREFIX}.placeholders"          # JSON list of mount points created in the workspace
CA_FILES = f"{PREFIX}.ca-files"                  # a proxy's: its launch's own CA files (rules per request), removed with it
SESSION = f"{PREFIX}.session"                    # up: "SESSION IDLE", limits.session and limits.idle in seconds
SESSION_CEILING = f"{PREFIX}.session-ceiling"    # up: "SECONDS SOURCE", how far `sandbox extend` may go, and who said so
PORTS = f"{PREFIX}.ports"                        # `up --port`: HOST_PORT:PORT,… forwarded from the host's loopback
UP_OPTIONS = f"{PREFIX}.up-options"              # up: the options it was started with, as JSON (launcher/launch/upoptions.py)
PROBE_BUSYBOX = f"{PREFIX}.probe-busybox"        # the probe volume: sha256 of the busybox it was filled with

MANAGED_SELECTOR = f"{MANAGED}=1"


def selector(key: str, value: str) -> str:
    """A `docker ... --filter label=` value."""
    return f"{key}={value}"


def matches(labels: dict, selectors) -> bool:
    """Whether `labels` meet every selector (KEY or KEY=VALUE), as Docker's label filters mean: the
    engine's list is held to this too, since podman 4.3 ORs a volume list's label filters (a list
    for one kind of volume named every managed volume)."""
    return all(labels.get(key) == value if sep else key in labels
               for key, sep, value in (s.partition("=") for s in selectors))
