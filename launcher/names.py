"""File names as the most permissive filesystem compares them (APFS/HFS+, NTFS): `apply` decides
protection and collisions on folded names, so a tree written on Linux is as safe on a Mac or Windows."""

from __future__ import annotations

import functools
import re
import unicodedata

# Code points HFS+ leaves out when it compares names (Apple TN1150; git's is_hfs_dotgit skips these).
HFS_IGNORED = frozenset([*range(0x200C, 0x2010), *range(0x202A, 0x202F), *range(0x206A, 0x2070), 0xFEFF])
# NTFS short names git knows to be hashed rather than truncated (git's is_ntfs_dot_generic).
_HASHED_SHORT = {".gitmodules": "gi7eba", ".gitignore": "gi250a", ".gitattributes": "gi7d29", ".mailmap": "maba30"}
_SHORT = re.compile(r"([^~.]{1,6})~[1-9][0-9]*(?:\.([^.]{1,3}))?")


def parts(path: str) -> list[str]:
    """The components of a workspace path; a backslash separates too (it does on Windows)."""
    return path.replace("\\", "/").split("/")


@functools.lru_cache(maxsize=1 << 16)   # a copy of a node_modules folds the same names again and again
def fold_name(name: str) -> str:
    """One component folded; "" when some filesystem sees no name at all in it."""
    if name in (".", ".."):
        return name
    if name.isascii():   # the common case, quick: no format characters, NFD changes nothing
        return name.split(":", 1)[0].lower().rstrip(". ")
    name = name.split(":", 1)[0]   # NTFS: `name:stream` and `name::$INDEX_ALLOCATION` are `name` itself
    # Every format character too, not only HFS+'s list: a stricter fold only refuses more.
    name = "".join(c for c in name if ord(c) not in HFS_IGNORED and unicodedata.category(c) != "Cf")
    # NFD for APFS/HFS+ normalisation; upper() first so NTFS's upcase merges (dotless i -> I) are kept.
    name = unicodedata.normalize("NFD", unicodedata.normalize("NFD", name).upper().casefold())
    return name.rstrip(". ")       # Windows drops trailing dots and spaces


def fold(path: str) -> str:
    """A workspace path with each component folded (see fold_name)."""
    return "/".join(fold_name(p) for p in parts(path))


def same(name: str, other: str) -> bool:
    """Whether the component `name` may open the entry `other` on some filesystem: equal folded, or
    an NTFS 8.3 short name Windows may give `other` (`GIT~1` is .git, `GITHUB~1` is .github)."""
    mine, theirs = fold_name(name), fold_name(other)
    if mine == theirs:
        return True
    short = _SHORT.fullmatch(mine) if "~" in mine else None
    if short is None:
        return False
    if _HASHED_SHORT.get(theirs) == short.group(1):
        return True
    stem = theirs.lstrip(".")
    base, _, ext = stem.rpartition(".") if "." in stem else (stem, "", "")
    return base.replace(".", "").replace(" ", "").startswith(short.group(1)) and ext.startswith(short.group(2) or "")


def under(path: str, entry: str) -> bool:
    """Whether path is entry or below it, compared component by component with same()."""
    mine, theirs = parts(path), [p for p in parts(entry) if p not in ("", ".")]
    return len(mine) >= len(theirs) and all(same(m, t) for m, t in zip(mine, theirs))


class Entries:
    """Workspace paths (protected entries) to match many paths against: a look-up by the folded
    first name, and under() for each only when a name may be an NTFS short name."""

    def __init__(self, entries: tuple[str, ...]):
        self.entries, self.by_first = entries, {}
        for entry in entries:
            folded = tuple(fold_name(p) for p in parts(entry) if p not in ("", "."))
            self.by_first.setdefault(folded[0], []).append((folded, entry))

    def holding(self, path: str, folded: list[str] | None = None) -> str | None:
        """The entry path is or is below, or None (`folded`: its folded parts, when known)."""
        folded = folded or [fold_name(p) for p in parts(path)]
        for entry_folded, entry in self.by_first.get(folded[0], ()):
            if tuple(folded[:len(entry_folded)]) == entry_folded:
                return entry
        if "~" in path:
            return next((e for e in self.entries if under(path, e)), None)
        return None
