"""gVisor in the engine: `sandbox doctor` says whether runsc is installed and registered as the
launcher registers it; `sandbox doctor --fix` merges the registration into daemon.json (a backup
first, every other key kept) and reloads dockerd with SIGHUP (runtimes are a reloadable option:
no restart, running containers untouched). Never done by `run` or `up`."""

from __future__ import annotations

import json
import os
import shutil
import signal
import stat
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from launcher.doctor.doctor import Finding, Status
from launcher.errors import EngineError
from launcher.plan import dialects, runtimes

DAEMON_JSON = "/etc/docker/daemon.json"
DOCKER_PID = "/var/run/docker.pid"
FIX = "sudo sandbox doctor --fix"


def untrusted(path: str) -> str:
    """Why root's dockerd must not run the binary at `path`, or "": it and every directory above
    its resolved path must be root's and writable by no one else (whoever can replace it is root)."""
    real = os.path.realpath(path)
    at = real
    while True:
        try:
            st = os.lstat(at)
        except OSError as exc:
            return f"{at}: {exc.strerror}"
        if at == real and not stat.S_ISREG(st.st_mode):
            return f"{real} is not a regular file"
        if st.st_uid != 0:
            return f"{at} is owned by uid {st.st_uid}, not root"
        if st.st_mode & 0o022:
            return f"{at} is writable by {'its group' if st.st_mode & 0o020 else 'everyone'} (mode {stat.S_IMODE(st.st_mode):04o})"
        if at == "/":
            return ""
        at = os.path.dirname(at)


def findings(info: dict, runsc: str | None, kind: str = "docker", present: Callable[[str], bool] | None = None) -> list[Finding]:
    """Is runsc installed (`runsc`: its path, or None), and are our runtime names registered (and,
    where `present` can tell, installed) in the engine (`kind`: docker or podman)?"""
    found, dialect = runtimes.registered(info, present), dialects.of(kind)
    if not runsc:
        return [Finding(status=Status.OK, check="gvisor", detail="runsc not installed (only `runtime: gvisor` needs it)",
                        fix="apt-get install runsc (Debian) or gVisor's release, then " +
                        (dialect.gvisor_hint if dialect.gvisor_refused else FIX))]
    if dialect.gvisor_refused:
        return [Finding(status=Status.WARN, check="gvisor", detail=f"runsc at {runsc}; {kind} has "
                        f"{'a runtime runsc' if 'runsc' in found else 'no runtime runsc'}, but `runtime: gvisor` is "
                        f"refused under {kind}: " + dialect.gvisor_refused, fix=dialect.gvisor_hint)]
    why = untrusted(runsc)
    if why:
        return [Finding(status=Status.WARN, check="gvisor", detail=f"runsc at {runsc} is not registered by us: {why}",
                        fix="install runsc as root into a root-owned directory (apt-get install runsc)")]
    runsc = os.path.realpath(runsc)
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
    then wait until `registered()` says the engine sees them. Raises EngineError, naming the step.
    Only a root-owned runsc nobody else can replace is registered, by its resolved path."""
    why = untrusted(runsc)
    if why:
        raise EngineError(f"not registering {runsc}: {why}; root's dockerd would run it.\n"
                          "    hint: install runsc as root into a root-owned directory (apt-get install runsc)")
    runsc = os.path.realpath(runsc)
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
