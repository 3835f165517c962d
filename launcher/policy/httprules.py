"""Request-level egress rules (`network.allow[].http`): which methods and path prefixes an allowed host
accepts, enforced or only audited by the sandbox's own proxy (TLS terminated with a CA made for that
sandbox), and the one path normalisation that the policy and the proxy's rule helper both use."""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import unquote

METHODS = ("GET", "HEAD", "OPTIONS", "POST", "PUT", "PATCH", "DELETE")
MODES = ("enforce", "audit")
# Ports where something other than HTTP is spoken: an http: rule there could never be enforced.
NON_HTTP_PORTS = {21: "ftp", 22: "ssh", 23: "telnet", 25: "smtp", 53: "dns", 110: "pop3", 143: "imap", 389: "ldap",
                  465: "smtps", 587: "submission", 636: "ldaps", 853: "dns over tls", 993: "imaps", 995: "pop3s",
                  1433: "mssql", 1521: "oracle", 2375: "docker", 2376: "docker", 3306: "mysql", 3389: "rdp",
                  5432: "postgres", 5672: "amqp", 6379: "redis", 9418: "git", 11211: "memcached", 27017: "mongodb"}
_KEYS = ("methods", "paths", "mode", "ca_file")


class RuleError(ValueError):
    """A malformed allow entry; `path` is the key below the entry (".http.methods[1]"), `found` what was there."""

    def __init__(self, message: str, path: str = "", found: str = ""):
        super().__init__(message)
        self.path, self.found = path, found


@dataclass(frozen=True, kw_only=True)
class HttpRule:
    methods: tuple[str, ...] = METHODS   # upper case, in METHODS order
    paths: tuple[str, ...] = ("/",)      # normalised prefixes, compared segment by segment
    mode: str = "enforce"                # audit: let through, log "would refuse" with the reason
    ca_file: str = ""                    # host PEM file: the only CAs the proxy trusts for this host ("" system CAs)

    def __str__(self) -> str:
        return f"{'/'.join(self.methods)} {' '.join(self.paths)}" + (" (audit)" if self.mode == "audit" else "")


def normalise(path: str) -> str | None:
    """The path as the most permissive server could read it: percent-decoding repeated until nothing
    changes (so %252e is a dot too), backslashes as slashes, `;` parameters dropped from each
    segment, empty and `.` segments dropped, `..` resolved; None for a path that climbs above the
    root or holds a control character (refused whatever the prefix)."""
    path = path.split("?", 1)[0].split("#", 1)[0]
    for _ in range(8):
        decoded = unquote(path, errors="surrogateescape")
        if decoded == path:
            break
        path = decoded
    else:
        return None
    if re.search(r"[\x00-\x1f\x7f]", path):
        return None
    segments: list[str] = []
    for segment in path.replace("\\", "/").split("/"):
        segment = segment.split(";", 1)[0]
        if segment in ("", "."):
            continue
        if segment == "..":
            if not segments:
                return None
            segments.pop()
            continue
        segments.append(segment)
    return "/" + "/".join(segments)


def under(path: str, prefix: str) -> bool:
    """Whether normalised `path` is `prefix` or below it, segment by segment (/a/b is not under /a/bc)."""
    prefix = prefix.rstrip("/")
    return not prefix or path == prefix or path.startswith(prefix + "/")


def refusal(rule: HttpRule, method: str, path: str) -> str:
    """Why `rule` refuses this request (a one-line reason), or "" when it allows it."""
    method = method.upper()
    if method not in rule.methods:
        return f"method {method} not allowed (allowed: {', '.join(rule.methods)})"
    normal = normalise(path)
    if normal is None:
        return "path climbs above / or holds a control character"
    if not any(under(normal, prefix) for prefix in rule.paths):
        return f"path {normal} is outside {', '.join(rule.paths)}"
    return ""


def parse_http(entry, ports: tuple[int, ...]) -> HttpRule:
    """An allow entry's `http:` mapping; raises RuleError with the key path below the entry."""
    if not isinstance(entry, dict) or set(entry) - set(_KEYS):
        extra = sorted(set(entry) - set(_KEYS)) if isinstance(entry, dict) else []
        raise RuleError("{methods: [GET, ...], paths: [/prefix/, ...], mode: enforce|audit, ca_file: FILE}", ".http",
                        f"unknown key {extra[0]!r}" if extra else repr(entry))
    for port in ports:
        if port in NON_HTTP_PORTS:
            raise RuleError(f"an HTTP port for a rule with http: (80, 443 or another web port), not {port} "
                            f"({NON_HTTP_PORTS[port]}), where the proxy could not read a request", ".http", str(port))
    methods = entry.get("methods", list(METHODS))
    if not isinstance(methods, list) or not methods:
        raise RuleError("a non-empty list of methods", ".http.methods", repr(methods))
    for i, method in enumerate(methods):
        if not isinstance(method, str) or method.upper() not in METHODS:
            raise RuleError(f"an HTTP method: one of {', '.join(METHODS)}", f".http.methods[{i}]", repr(method))
    paths = entry.get("paths", ["/"])
    if not isinstance(paths, list) or not paths:
        raise RuleError("a non-empty list of path prefixes", ".http.paths", repr(paths))
    for i, path in enumerate(paths):
        if not isinstance(path, str) or not path.startswith("/"):
            raise RuleError("a path prefix starting with /", f".http.paths[{i}]", repr(path))
        if normalise(path) != (path.rstrip("/") or "/") or re.search(r"\s", path) or "%" in path or ";" in path or "?" in path or "#" in path:
            raise RuleError(f"a plain path prefix (no dot segments, doubled slashes, %-escapes, ;, ? or spaces), e.g. "
                            f"{normalise(path) or '/'}", f".http.paths[{i}]", repr(path))
    mode = entry.get("mode", "enforce")
    if mode not in MODES:
        raise RuleError("mode enforce (refuse with 403) or audit (let through, log what would be refused)",
                        ".http.mode", repr(mode))
    ca_file = entry.get("ca_file", "")
    if not isinstance(ca_file, str):
        raise RuleError("a host path to a PEM file of CA certificates", ".http.ca_file", repr(ca_file))
    wanted = {m.upper() for m in methods}
    return HttpRule(methods=tuple(m for m in METHODS if m in wanted), paths=tuple(dict.fromkeys(paths)),
                    mode=mode, ca_file=ca_file)


def covers(wide: HttpRule | None, narrow: HttpRule | None) -> bool:
    """True when every request `narrow` lets through `wide` lets through too (None: a tunnel, everything)."""
    if wide is None:
        return True
    if narrow is None or (wide.mode == "enforce" and narrow.mode == "audit") or wide.ca_file != narrow.ca_file:
        return False
    return set(narrow.methods) <= set(wide.methods) and all(any(under(p, w) for w in wide.paths) for p in narrow.paths)


def meet(a: HttpRule | None, b: HttpRule | None) -> HttpRule | None | bool:
    """What both allow: None (both tunnels), a rule, or False when they share no request (or name
    different CA files)."""
    if a is None or b is None:
        return a if b is None else b
    if a.ca_file != b.ca_file:
        return False
    methods = tuple(m for m in a.methods if m in b.methods)
    paths = tuple(dict.fromkeys([p for p in a.paths if any(under(p, q) for q in b.paths)]
                                + [q for q in b.paths if any(under(q, p) for p in a.paths)]))
    if not methods or not paths:
        return False
    return HttpRule(methods=methods, paths=paths, mode="audit" if a.mode == b.mode == "audit" else "enforce",
                    ca_file=a.ca_file)
