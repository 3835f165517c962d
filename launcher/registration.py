"""gVisor in the engine: `sandbox doctor` says whether runsc is installed and registered as the
launcher registers it; `sandbox doctor --fix` merges the registration into daemon.json (a backup
first, every other key kept) and reloads dockerd with SIGHUP (runtimes are a reloadable option:
no restart, running containers untouched). Never done by `run` or `up`."""

from __future__ import annotations

import json
import os
import shutil
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from launcher import runtimes
from launcher.doctor import Finding, Status
from launcher.errors import EngineError

DAEMON_JSON = "/etc/docker/daemon.json"
DOCKER_PID = "/var/run/docker.pid"
FIX = "sudo sandbox doctor --fix"


def findings(info: dict, runsc: str | None) -> list[Finding]:
    """Is runsc installed (`runsc`: its path, or None), and are our runtime names registered?"""
    found = runtimes.registered(info)
    if not runsc:
        return [Finding(status=Status.OK, check="gvisor", detail="runsc not installed (only `runtime: gvisor` needs it)",
                        fix="apt-get install runsc (Debian) or gVisor's release, then " + FIX)]
    want = runtimes.registration(runsc)
    wrong = [n for n, entry in want.items() if n not in found or
             list(found[n].get("runtimeArgs") or []) != entry["runtimeArgs"]]
    if not wrong:
        return [Finding(status=Status.OK, check="gvisor", detail=f"runsc at {runsc}, registered as "
                        f"{', '.join(want)}: `runtime: gvisor` works")]
    return [Finding(status=Status.WARN, check="gvisor", detail=f"runsc at {runsc}, but the engine has "
                    f"{', '.join(wrong)} {'not registered' if all(n not in found for n in wrong) else 'registered otherwise'}"
                    ": `runtime: gvisor` is refused", fix=f"{FIX} (merges it into {DAEMON_JSON}, reloads dockerd)")]


def merged(text: str, runsc: str) -> tuple[str, bool]:
    """daemon.json's text with our runtimes in it, and whether anything changed. Every other key
    (and every other runtime) is kept; a file that is no JSON object is refused, never replaced."""
    try:
        config = json.loads(text) if text.strip() else {}
    except ValueError as exc:
        raise EngineError(f"{DAEMON_JSON} is not valid JSON ({exc}): fix it by hand; nothing was changed") from None
    if not isinstance(config, dict) or not isinstance(config.get("runtimes", {}), dict):
        raise EngineError(f"{DAEMON_JSON} is not a JSON object with a \"runtimes\" object: nothing was changed")
    current = config.get("runtimes", {})
    wanted = {**current, **runtimes.registration(runsc)}
    if wanted == current:
        return text, False
    return json.dumps({**config, "runtimes": wanted}, indent=2) + "\n", True


@dataclass(frozen=True, kw_only=True)
class Fixed:
    changed: bool
    backup: str        # "" when nothing was written
    reloaded: bool


def fix(runsc: str, *, path: str = DAEMON_JSON, pidfile: str = DOCKER_PID, registered: Callable[[], bool],
        wait: float = 10.0) -> Fixed:
    """Register our runtimes in `path` and reload the engine (SIGHUP to the pid in `pidfile`),
    then wait until `registered()` says the engine sees them. Raises EngineError, naming the step."""
    file = Path(path)
    try:
        text = file.read_text() if file.exists() else ""
    except OSError as exc:
        raise EngineError(f"reading {path}: {exc.strerror} (run it as root: {FIX})") from None
    new, changed = merged(text, runsc)
    backup = ""
    if changed:
        try:
            file.parent.mkdir(parents=True, exist_ok=True)
            if file.exists():
                backup = f"{path}.sandbox-backup-{time.strftime('%Y%m%dT%H%M%S')}"
                shutil.copy2(path, backup)
            tmp = file.with_name(f".{file.name}.sandbox-{os.getpid()}")
            tmp.write_text(new)
            os.chmod(tmp, 0o644)
            os.replace(tmp, file)
        except OSError as exc:
            raise EngineError(f"writing {path}: {exc.strerror} (run it as root: {FIX})") from None
    if registered():
        return Fixed(changed=changed, backup=backup, reloaded=False)
    try:
        pid = int(Path(pidfile).read_text().split()[0])
        os.kill(pid, signal.SIGHUP)
    except (OSError, ValueError, IndexError) as exc:
        raise EngineError(f"reloading dockerd (SIGHUP to the pid in {pidfile}): {exc}; "
                          "reload it yourself (`systemctl reload docker` or `kill -HUP $(pidof dockerd)`)") from None
    deadline = time.monotonic() + wait
    while not registered():
        if time.monotonic() > deadline:
            raise EngineError(f"dockerd did not pick up the runtimes from {path} after SIGHUP: is it started with "
                              "another --config-file, or are the runtimes set on its command line too?")
        time.sleep(0.2)
    return Fixed(changed=changed, backup=backup, reloaded=True)
