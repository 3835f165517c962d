"""What the agent changed in a copy, for a person, and which changes `apply` may carry back: an
allowlist. Decided on folded names (launcher.names): never .git, a protected path, a case collision
or anything but a regular file with plain mode bits; a surface at any depth or a symlink only with
a per-path yes (Allowed). Every string from the agent that is shown goes through values.visible()."""

from __future__ import annotations

import functools
import posixpath
import re
from dataclasses import dataclass

from launcher import names
from launcher.errors import Problem
from launcher.policy.surfaces import Surface, named
from launcher.style import ADDED, BAD, HEADER, HUNK, REMOVED, WARN, Mark, plain
from launcher.values import visible


@dataclass(frozen=True, kw_only=True)
class Allowed:
    """The per-path yes of `apply --allow-surface PATH` and `--allow-symlink PATH` (each repeatable)."""

    surfaces: frozenset[str] = frozenset()
    symlinks: frozenset[str] = frozenset()

    @classmethod
    def given(cls, surfaces: tuple[str, ...] = (), symlinks: tuple[str, ...] = ()) -> Allowed:
        """From the command line: `./a/` names what diff shows as `a`."""
        return cls(surfaces=frozenset(posixpath.normpath(p) for p in surfaces),
                   symlinks=frozenset(posixpath.normpath(p) for p in symlinks))

    def adding(self, changes: list[dict]) -> Allowed:
        """These yeses and, for each change (annotated), the one of each flag it needs (`apply -i`)."""
        return Allowed(surfaces=self.surfaces | {c["path"] for c in changes if "--allow-surface" in c["needs"]},
                       symlinks=self.symlinks | {c["path"] for c in changes if "--allow-symlink" in c["needs"]})


def surface_at(path: str, added: bool) -> tuple[str, Surface] | None:
    """(the path of the surface, its inventory entry) when path is a surface or below one, at any
    depth (surfaces.named: folded names, patterns, NTFS short names); `added` is kept for callers:
    a changed surface (a tracked .gitignore too) counts like a new one."""
    parts = path.split("/")
    for i, part in enumerate(parts):
        surface = named(part, "/".join(parts[:i]))
        if surface is not None and surface.name != ".git":   # .git is refused outright
            return "/".join(parts[:i + 1]), surface
    return None


_GIT_DIRECTORY = "a git directory (the host's git runs code from it)"
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")   # C0, DEL and C1: newlines, tabs, escapes
_ODD = frozenset(("", ".", ".."))   # names that are no name, or a way up
DEPTH = 256   # no project needs more; apply walks (and opens) every directory on the way


@functools.lru_cache(maxsize=8)   # one protected list per copy, asked for each of its changes
def _entries(protected: tuple[str, ...]) -> names.Entries:
    return names.Entries(tuple(e for e in protected if e.strip("/.")))


def refusal(change: dict, protected: tuple[str, ...]) -> str:
    """Why `apply` never carries this change back, whatever it is told, or "" (it may)."""
    path = change["path"]
    parts = names.parts(path)
    folded = [names.fold_name(p) for p in parts]
    if path.startswith("/") or not _ODD.isdisjoint(parts + folded):
        return "not a plain workspace path"
    if len(parts) > DEPTH:
        return f"deeper than {DEPTH} directories"
    if _CONTROL.search(path):
        return "a name with control characters (a newline or a terminal escape forges what host tools print)"
    if ".git" in folded or ("~" in path and any(names.same(p, ".git") for p in parts)):
        return _GIT_DIRECTORY
    entry = _entries(protected).holding(path, folded)
    if entry:
        return f"protected ({entry}: host tools run or trust it)"
    new = change.get("new") or {}
    if new.get("type") == "other":
        return f"not a regular file, directory or symlink (a {visible(new.get('kind', 'special file'), keep_lines=False)})"
    if new.get("type") == "file" and new.get("mode", 0) & 0o7000:
        return f"mode {new['mode']:04o}: setuid, setgid or sticky (apply writes files 0644 or 0755 only)"
    if new.get("type") == "symlink":
        target = new["target"]
        if _CONTROL.search(target):
            return "a symlink whose target has control characters"
        lands = posixpath.normpath(posixpath.join(posixpath.dirname(path), target.replace("\\", "/")))
        if not target or target.startswith(("/", "\\")) or lands == ".." or lands.startswith("../"):
            return f"a symlink leaving the workspace (-> {target})"
        if landing_refusal(lands, protected):   # a way into .git, a protected path or a surface
            return f"a symlink into a refused path (-> {target})"
    return ""


def landing_refusal(path: str, protected: tuple[str, ...]) -> str:
    """Why no symlink may point at path ("" or "." the workspace root): a host tool that writes
    through the link would change a path that is refused or needs a yes."""
    if path in ("", "."):
        return ""
    found = surface_at(path, added=True)
    return refusal({"path": path, "new": None}, protected) or (f"the surface {found[0]}" if found else "")


def _collisions(changes: list[dict]) -> dict[str, str]:
    """Paths that fold to one name with another change's path (a directory on the way included):
    on a case-insensitive or normalising filesystem one would overwrite the other."""
    ids: dict[tuple[int, str], int] = {}             # (directory, name) -> directory: a tree of the names
    groups: dict[tuple[int, str], set[str]] = {}     # (directory, folded name) -> the names written
    adding = [c["path"].split("/") for c in changes if c["new"] is not None]   # a deletion frees its name
    for parts in adding:
        at = 0
        for part in parts:
            if (at, part) not in ids:
                ids[(at, part)] = len(ids) + 1
                groups.setdefault((at, names.fold(part)), set()).add(part)
            at = ids[(at, part)]
    found = {}
    for parts in adding if any(len(g) > 1 for g in groups.values()) else ():
        at = 0
        for i, part in enumerate(parts):
            others = groups[(at, names.fold(part))] - {part}
            if others:
                found["/".join(parts)] = (f"{'/'.join(parts[:i + 1])} and {'/'.join(parts[:i] + [min(others)])} are "
                                          "one name on a case-insensitive or normalising filesystem (one would "
                                          "overwrite the other)")
                break
            at = ids[(at, part)]
    return found


def annotated(changes: list[dict], protected: tuple[str, ...], allowed: Allowed = Allowed()) -> list[dict]:
    """Each change with "refused" (why apply leaves it out, "" it writes it), "needs" (the per-path
    flags that would let it through, [] when none would) and "surface" (the surface it is in, or "")."""
    collided, out = _collisions(changes), []
    for change in changes:
        path, new = change["path"], change.get("new") or {}
        found = surface_at(path, added=change.get("old") is None and bool(new))
        why, needs = refusal(change, protected) or collided.get(path, ""), []
        if not why:
            reasons = []
            if found and path not in allowed.surfaces and found[0] not in allowed.surfaces:
                needs.append("--allow-surface")
                reasons.append(f"{found[1].tools} reads {found[1].name} ({found[1].why}); "
                               f"write it with --allow-surface {path}")
            if new.get("type") == "symlink" and path not in allowed.symlinks:
                needs.append("--allow-symlink")
                reasons.append(f"a symlink (-> {new['target']}); write it with --allow-symlink {path}, "
                               "if it resolves inside the workspace on the final tree")
            why = "; ".join(reasons)
        out.append({**change, "refused": why, "needs": needs, "surface": found[0] if found else ""})
    return out


def unhonoured(changes: list[dict], allowed: Allowed) -> list[Problem]:
    """A yes that names no change needing it, or a change apply refuses anyway: the command line
    asked for something that will not happen."""
    problems = []
    for flag, given in (("--allow-surface", allowed.surfaces), ("--allow-symlink", allowed.symlinks)):
        for path in sorted(given):
            hits = [c for c in changes if (c["path"] == path or (flag == "--allow-surface" and c["surface"] == path))
                    and (flag == "--allow-surface" or (c["new"] or {}).get("type") == "symlink")]
            where = f"{flag} {visible(path, keep_lines=False)}"
            if not hits:
                problems.append(Problem(file="command line", path=where, expected=f"a change `sandbox diff` marks NEEDS {flag}",
                                        found="no change there", hint="paths as `sandbox diff` shows them"))
            for change in (c for c in hits if c["refused"] and not c["needs"]):
                problems.append(Problem(file="command line", path=where, expected="a change apply may write",
                                        found=f"{visible(change['path'], keep_lines=False)} is refused: "
                                              f"{visible(change['refused'], keep_lines=False)}",
                                        hint="no yes lifts that: apply never carries it back; nothing was written"))
    return problems


def asked(changes: list[dict]) -> list[dict]:
    """What `apply -i` asks about (changes as judged for diff): each it writes or a yes lets through."""
    return [c for c in changes if not c["refused"] or c["needs"]]


# What git writes into its own directory while the agent merely uses it: `git status` rewrites the
# index (the copy's files have new inodes and times), add and commit write objects, reflogs and the
# message. Refused like all of .git, so never applied; left out of the lists, counted in one line.
# Only these exact names in the workspace's own .git: hooks, config, info, refs, HEAD, every other
# spelling and nested git directories stay listed.
_GIT_RECORD = re.compile(r"\.git/(index|COMMIT_EDITMSG|ORIG_HEAD|logs/(HEAD|refs/[\w.-]+(/[\w.-]+)*)|objects/("
                         r"[0-9a-f]{2}/([0-9a-f]{38}|[0-9a-f]{62})|pack/pack-([0-9a-f]{40}|[0-9a-f]{64})\.(pack|idx|rev)))",
                         re.ASCII)


def git_record(change: dict) -> bool:
    """A refused change of a file git keeps as its own record in the workspace's .git (see above)."""
    return (change["refused"] == _GIT_DIRECTORY and bool(_GIT_RECORD.fullmatch(change["path"]))
            and all((change.get(side) or {}).get("type", "file") == "file" for side in ("old", "new")))


def git_records_line(changes: list[dict]) -> str:
    """One line for the git records among changes ("" for none)."""
    records = [c["path"] for c in changes if git_record(c)]
    kinds = ", ".join(sorted({path.split("/")[1] for path in records}))
    return (f"not listed: {len(records)} change{'s' if len(records) != 1 else ''} git made to its own records in "
            f".git ({kinds}), never applied like all of .git (`--json` lists them)") if records else ""


def refusal_lines(changes: list[dict]) -> list[str]:
    return [f"not applied: {visible(c['path'], keep_lines=False)}: {visible(c['refused'], keep_lines=False)}"
            for c in changes if c["refused"] and not git_record(c)]


def _verdict(change: dict, mark: Mark = plain) -> str:
    if not change["refused"]:
        return ""
    if change.get("needs"):
        return mark(f"NEEDS {', '.join(change['needs'])}: {visible(change['refused'], keep_lines=False)}", WARN)
    return mark(f"REFUSED: {visible(change['refused'], keep_lines=False)}", BAD)


def _mode(state: dict) -> str:
    return f"{0o100000 | state.get('mode', 0o755 if state.get('exec') else 0o644):06o}"


def _detail(c: dict) -> str:
    """What is there now; a type change says what was there, or what took its place."""
    if c.get("dir") == "new":
        return f"{_kind(c.get('old') or {})} -> directory"
    symlink = (c.get("new") or {}).get("type") == "symlink"
    return ("directory -> " + ("symlink " if symlink else "") if c.get("dir") == "old" else "") + _now(c)


def _kind(state: dict) -> str:
    kind = state.get("kind") if state.get("type") == "other" else state.get("type", "")
    return {"dir": "directory", "symlink": "symlink"}.get(kind, visible(kind or "", keep_lines=False))


def _now(c: dict) -> str:
    old, new = c.get("old") or {}, c.get("new") or {}
    if new.get("type") == "symlink":
        return f"-> {visible(new['target'], keep_lines=False)}"
    if old.get("type") == "dir" or not new:
        return "directory" if old.get("type") == "dir" else ""
    if new.get("type") != "file":
        return _kind(new)
    mode = _mode(new) if old.get("type") != "file" or _mode(old) == _mode(new) else f"{_mode(old)} -> {_mode(new)}"
    lines = ("binary" if c.get("binary") else f"+{c['added']} -{c['removed']}") if ("added" in c or c.get("binary")) else ""
    return f"{mode} {new.get('size', 0)} bytes {lines}".rstrip()


_MARK = {"added": "A", "modified": "M", "deleted": "D", "type-changed": "T", "mode-changed": "X"}
_LOOK = {"added": ADDED, "deleted": REMOVED}


def stat_line(c: dict, mark: Mark = plain) -> str:
    """One change: status letter, path, what is there now, the verdict."""
    letter = _MARK.get(c["status"], "?")
    letter = mark(letter, _LOOK[c["status"]]) if c["status"] in _LOOK else letter
    verdict = f"   {_verdict(c, mark)}" if c["refused"] else ""
    return f" {letter} {visible(c['path'], keep_lines=False)}  {_detail(c)}{verdict}"


def stat_lines(changes: list[dict], mark: Mark = plain) -> list[str]:
    """A line per change (git's own records left out: git_records_line), then the totals."""
    changes = [c for c in changes if not git_record(c)]
    lines = [stat_line(c, mark) for c in changes]
    plus, minus = sum(c.get("added", 0) for c in changes), sum(c.get("removed", 0) for c in changes)
    refused = sum(1 for c in changes if c["refused"] and not c.get("needs"))
    needs = sum(1 for c in changes if c.get("needs"))
    lines.append(f" {len(changes)} changed ({plus} lines added, {minus} removed)"
                 + (f"; {refused} refused by `apply`" if refused else "")
                 + (f"; {needs} written only with a per-path yes" if needs else ""))
    return lines


def _patch(text: str, mark: Mark) -> list[str]:
    """A unified diff's lines, escaped, then marked: its two file lines, hunks, added and removed."""
    out = []
    for number, line in enumerate(text.splitlines()):
        shown = visible(line, keep_lines=False)
        kind = HEADER if number < 2 else {"@": HUNK, "+": ADDED, "-": REMOVED}.get(line[:1])
        out.append(mark(shown, kind) if kind else shown)
    return out


def patch_lines(changes: list[dict], mark: Mark = plain) -> list[str]:
    """A git-style patch; binary files, symlinks and deletions of directories as one line each
    (git's own records left out: git_records_line)."""
    out = []
    for c in changes:
        if git_record(c):
            continue
        path = visible(c["path"], keep_lines=False)
        out.append(mark(f"diff --sandbox a/{path} b/{path}", HEADER) + (f"   # {_verdict(c, mark)}" if c["refused"] else ""))
        old, new = c.get("old") or {}, c.get("new") or {}
        if c.get("dir") and ("patch" in c or c.get("binary")):
            was = "directory" if c["dir"] == "old" else _kind(old)
            out.append(mark(f"type changed: {was} -> {'directory' if c['dir'] == 'new' else _kind(new)}", HEADER))
        if "patch" in c:
            if old and new and _mode(old) != _mode(new):
                out.append(mark(f"mode {_mode(old)} -> {_mode(new)}", HEADER))
            elif new and not old:
                out.append(mark(f"new file mode {_mode(new)}, {new.get('size', 0)} bytes", HEADER))
            out += _patch(c["patch"], mark)
        elif c.get("binary"):
            out.append(mark(f"Binary file {c['status']} ({old.get('size', 0)} -> {new.get('size', 0)} bytes"
                            + (f", mode {_mode(new)}" if new else "") + ")", HEADER))
        else:
            def shown(d: dict, side: str) -> str:
                if not d:
                    return "directory" if c.get("dir") == side else "nothing"
                return f"symlink -> {visible(d.get('target', ''), keep_lines=False)}" if d.get("type") == "symlink" else _kind(d)
            out.append(mark(f"{c['status']}: {shown(old, 'old')} -> {shown(new, 'new')}", HEADER))
    return out
