"""Benchmark (not a test): the key ICAP service's own time to judge one large request body, without
an engine or Squid: bodies of zeros, random bytes, text dense with escapes, MIME base64, hex, and
gzip bodies (decoded and searched too), none holding the placeholder.

    python bench/keyscan.py [--size-mib 100] [--rounds 3] [PROXY-DIR]

PROXY-DIR holds the service (sandbox-icap with the files it loads, as images/proxy does; the
default). To compare with another version: `git archive main images/proxy | tar -x -C /tmp/before`,
then `python bench/keyscan.py /tmp/before/images/proxy`. The figure per body is the best of the rounds.
"""

from __future__ import annotations

import argparse
import base64
import gzip
import os
import random
import sys
import tempfile
import time
from importlib.machinery import SourceFileLoader
from importlib.util import module_from_spec, spec_from_loader
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from launcher.policy import keybind  # noqa: E402
from launcher.policy.model import KeyBinding  # noqa: E402


def bodies(size: int) -> dict[str, tuple[str, bytes]]:
    rnd = random.Random(1)
    words = b"the quick brown fox jumps over a lazy dog 1234 deadbeef form=value&x=%20y \\u00e9 &amp; <p>\n".split(b" ")
    text = b" ".join(rnd.choice(words) for _ in range(size // 5))[:size]
    noise = rnd.randbytes(size)
    return {"zeros": ("", bytes(size)), "random bytes": ("", noise), "text with escapes": ("", text),
            "MIME base64": ("", base64.encodebytes(noise[:size * 3 // 4])[:size]), "hex": ("", noise[:size // 2].hex().encode()),
            "gzip -1 of random bytes": ("gzip", gzip.compress(noise, 1)), "gzip -1 of the text": ("gzip", gzip.compress(text, 1))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mib", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("proxy_dir", nargs="?", default=str(ROOT / "images" / "proxy"))
    args = parser.parse_args()
    loader = SourceFileLoader("sandbox_icap_bench", os.path.join(args.proxy_dir, "sandbox-icap"))
    icap = module_from_spec(spec_from_loader(loader.name, loader))
    loader.exec_module(icap)
    placeholder = keybind.placeholder("bench", "key")
    with tempfile.NamedTemporaryFile("w", suffix=".keys") as file:
        file.write(keybind.keys_file(keybind.seen_headers(["Authorization"]), [keybind.keys_line(
            KeyBinding(host="api.example.com", paths=("/",), variable="KEY"), placeholder, "Authorization",
            f"Bearer {placeholder}")]))
        file.flush()
        keys, finders = icap.load(file.name)
    print(f"{args.size_mib} MiB per body, best of {args.rounds}, {args.proxy_dir}")
    for name, (coding, body) in bodies(args.size_mib << 20).items():
        headers = [("host", "other.example.com"), ("content-length", str(len(body)))]
        headers += [("content-encoding", coding)] if coding else []
        best, verdict = float("inf"), ""
        for _ in range(args.rounds):
            start = time.perf_counter()
            verdict = icap.judge(keys, finders, "https://other.example.com/up", headers, bytearray(body))
            best = min(best, time.perf_counter() - start)
        print(f"{name:26} {best:6.2f} s  {verdict[:70] or 'passes'}")


if __name__ == "__main__":
    main()
