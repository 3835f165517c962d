"""What the agent changed in a copy, for a person: which changes `apply` refuses, a patch, a stat.
Everything shown comes from the agent, so every line goes through values.visible()."""

from __future__ import annotations

import posixpath

from launcher.values import visible


def refusal(change: dict, protected: tuple[str, ...]) -> str:
    """Why `apply` never carries this change back, or "" (it would)."""
    path = change["path"]
    parts = path.split("/")
    if path.startswith("/") or ".." in parts or "" in parts:
        return "not a plain workspace path"
    if ".git" in parts:
        return "a git directory (the host's git runs code from it)"
    for entry in protected:
        if path == entry or path.startswith(entry.rstrip("/") + "/"):
            return f"protected ({entry}: host tools run or trust it)"
    new = change.get("new") or {}
    if new.get("type") == "other":
        return "not a regular file, directory or symlink"
    if new.get("type") == "symlink":
        target = new["target"]
        lands = posixpath.normpath(posixpath.join(posixpath.dirname(path), target))
        if target.startswith("/") or lands.startswith(".."):
            return f"a symlink leaving the workspace (-> {target})"
        if refusal({"path": lands, "new": None}, protected):   # a way into .git or a protected path
            return f"a symlink into a refused path (-> {target})"
    return ""


def annotated(changes: list[dict], protected: tuple[str, ...]) -> list[dict]:
    return [{**c, "refused": refusal(c, protected)} for c in changes]


_MARK = {"added": "A", "modified": "M", "deleted": "D", "type-changed": "T", "mode-changed": "X"}


def stat_lines(changes: list[dict]) -> list[str]:
    lines = []
    for c in changes:
        size = ("directory" if (c["old"] or {}).get("type") == "dir" else "binary" if c.get("binary") else
                f"+{c['added']} -{c['removed']}" if "added" in c else "")
        refused = f"   REFUSED: {c['refused']}" if c["refused"] else ""
        lines.append(f" {_MARK.get(c['status'], '?')} {visible(c['path'], keep_lines=False)}  {size}{refused}")
    plus, minus = sum(c.get("added", 0) for c in changes), sum(c.get("removed", 0) for c in changes)
    refused = sum(1 for c in changes if c["refused"])
    lines.append(f" {len(changes)} changed ({plus} lines added, {minus} removed)"
                 + (f"; {refused} refused by `apply`" if refused else ""))
    return lines


def patch_lines(changes: list[dict]) -> list[str]:
    """A git-style patch; binary files, symlinks and deletions of directories as one line each."""
    out = []
    for c in changes:
        path = visible(c["path"], keep_lines=False)
        head = f"diff --sandbox a/{path} b/{path}" + (f"   # REFUSED by apply: {c['refused']}" if c["refused"] else "")
        out.append(head)
        old, new = c.get("old") or {}, c.get("new") or {}
        if "patch" in c:
            if old.get("exec") != new.get("exec") and old and new:
                out.append(f"mode {'100755' if old.get('exec') else '100644'} -> {'100755' if new.get('exec') else '100644'}")
            out += [visible(line.rstrip("\n"), keep_lines=False) for line in c["patch"].splitlines(keepends=True)]
        elif c.get("binary"):
            out.append(f"Binary file {c['status']} ({old.get('size', 0)} -> {new.get('size', 0)} bytes)")
        else:
            def shown(d: dict) -> str:
                return {"symlink": f"symlink -> {visible(d.get('target', ''), keep_lines=False)}",
                        "dir": "directory"}.get(d.get("type"), d.get("type", "nothing"))
            out.append(f"{c['status']}: {shown(old) if old else 'nothing'} -> {shown(new) if new else 'nothing'}")
    return out
