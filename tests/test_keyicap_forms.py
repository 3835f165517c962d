"""The key ICAP service's matcher (images/proxy/sandbox-icap), without an engine: every further form
of a placeholder it looks for (quoted-printable, HTML references, JSON and \\x escapes, escapes behind
a percent-encoded introducer, base64 broken across lines, hex, UTF-16), compressed bodies it decodes
(gzip, deflate, stacked) with a bound, those it cannot read (br, zstd, unknown, a bomb, bad data)
refused whatever they hold, and ordinary bodies (binary, text, gzip) that pass."""

from __future__ import annotations

import base64
import gzip
import json
import quopri
import random
import zlib
from urllib.parse import quote

import pytest

from test_keyicap import OTHER, OWN, PH, icap, loaded, refusal, reqmod, transact  # noqa: F401 - a fixture

SENT_ELSEWHERE = "placeholder of ANTHROPIC_API_KEY sent to https://other.example.com:443"
IN_BODY = ("refused: placeholder of ANTHROPIC_API_KEY in the request body: it goes only in authorization "
           "(https://api.example.com/v1/ in authorization)")


def _qp_every_char(text: str, width: int = 76) -> bytes:
    """Quoted-printable with every character escaped, soft line breaks at `width` columns."""
    encoded = "".join("=%02X" % ord(c) for c in text)
    lines = [encoded[i:i + width - 1] for i in range(0, len(encoded), width - 1)]
    return "=\r\n".join(lines).encode()


def _b64_lines(data: bytes, width: int, sep: bytes) -> bytes:
    flat = base64.b64encode(data)
    return sep.join(flat[i:i + width] for i in range(0, len(flat), width))


HEX = PH.encode().hex()
FORMS = {
    "quoted-printable, every character": _qp_every_char("token: " + PH),
    "quoted-printable, soft line breaks": quopri.encodestring(("x" * 60 + PH + "=\u00e9" + "y" * 100).encode("utf-8")),
    "quoted-printable, lower-case hex": "".join("=%02x" % ord(c) for c in PH).encode(),
    "HTML hex references": "".join("&#x%x;" % ord(c) for c in PH).encode(),
    "HTML decimal references": "".join("&#%d;" % ord(c) for c in PH).encode(),
    "HTML references, zeros, no semicolons": "".join("&#X%04X" % ord(c) if i % 2 else "&#00%d" % ord(c)
                                                      for i, c in enumerate(PH)).encode() + b" ",
    "JSON \\u of every character": "".join("\\u%04x" % ord(c) for c in PH).encode(),
    "JSON \\u upper-case hex": "".join("\\u%04X" % ord(c) for c in PH).encode(),
    "JSON in a JSON string": json.dumps({"inner": json.dumps({"k": PH}).replace("s", "\\u0073")}).encode(),
    "\\x escapes": "".join("\\x%02x" % ord(c) for c in PH).encode(),
    "JSON escapes percent-encoded": quote("".join("\\u%04x" % ord(c) for c in PH), safe="").encode(),
    "HTML references percent-encoded twice": quote(quote("".join("&#%d;" % ord(c) for c in PH), safe=""), safe="").encode(),
    "quoted-printable percent-encoded": quote("".join("=%02X" % ord(c) for c in PH), safe="").encode(),
    "base64 in a JSON string (PEM-like \\n)": json.dumps({"pem": _b64_lines(f"u:{PH}".encode(), 64, b"\n").decode()}).encode(),
    "base64 percent-encoded in a URL": quote(base64.b64encode(f"\xff\xfe{PH}?>".encode("latin-1")).decode(), safe="").encode(),
    "base64 URL-safe, wrapped": _b64_lines(f"{'?' * 40}>{PH}".encode(), 76, b"\n").replace(b"+", b"-").replace(b"/", b"_"),
    "multipart part, Content-Transfer-Encoding: base64": (
        b"--b\r\nContent-Disposition: form-data; name=\"f\"; filename=\"env\"\r\nContent-Transfer-Encoding: base64\r\n\r\n"
        + base64.encodebytes(("HOME=/root\nANTHROPIC_API_KEY=%s\n" % PH).encode()).replace(b"\n", b"\r\n") + b"\r\n--b--\r\n"),
    "multipart part, quoted-printable": (
        b"--b\r\nContent-Type: text/plain\r\nContent-Transfer-Encoding: quoted-printable\r\n\r\n"
        + quopri.encodestring(("k " * 33 + PH).encode()) + b"\r\n--b--\r\n"),
    "hex": HEX.encode(),
    "hex, upper-case digits": HEX.upper().encode(),
    "hex, odd offset": b"a" + HEX.encode() + b"b",
    "hex of the placeholder in capitals": PH.upper().encode().hex().encode(),
    "hex, 32 columns": b"\n".join(HEX.encode()[i:i + 32] for i in range(0, len(HEX), 32)),
    "UTF-16 little-endian": PH.encode("utf-16-le"),
    "UTF-16 big-endian, upper case": ("x=" + PH.upper()).encode("utf-16-be"),
    "UTF-16 after many zeros": bytes(8192) + PH.encode("utf-16-le") + bytes(8192),
    "UTF-32": PH.encode("utf-32"),
    "escapes far apart": ("%73" + PH[1:25] + "\\u%04x" % ord(PH[25]) + PH[26:-1] + "&#%d;" % ord(PH[-1])).encode(),
}


@pytest.mark.parametrize("form", FORMS)
def test_every_form_is_found_in_a_body(loaded, form):
    body = b"prefix " * 3000 + FORMS[form] + b" suffix"
    assert SENT_ELSEWHERE in refusal(transact(loaded, reqmod(OTHER + "Content-Length: %d\r\n" % len(body), body)))
    assert refusal(transact(loaded, reqmod(OWN, body))) == IN_BODY


@pytest.mark.parametrize("width", [16, 64, 76])
@pytest.mark.parametrize("shift", [0, 1, 2])
@pytest.mark.parametrize("sep", [b"\n", b"\r\n", b"\\n", b"\\r\\n"])
def test_base64_broken_across_lines_is_found(loaded, width, shift, sep):
    # the placeholder's base64 starts ten columns before a line ends: every line break cuts it
    prefix = b"u" * (3 * ((width - 10) // 4) + shift)
    body = _b64_lines(prefix + PH.encode(), width, sep)
    assert not any(form in body for form in loaded[1][0].b64)
    assert refusal(transact(loaded, reqmod(OWN, body))) == IN_BODY


@pytest.mark.parametrize("value", ["".join("&#%d;" % ord(c) for c in PH), "".join("=%02X" % ord(c) for c in PH),
                                   quote("".join("\\u%04x" % ord(c) for c in PH)), HEX])
def test_those_forms_are_found_in_a_header_too(loaded, value):
    assert SENT_ELSEWHERE in refusal(transact(loaded, reqmod(OTHER + f"X-Thing: {value}\r\n", None)))


def test_a_form_across_windows_and_past_many_escapes_is_found(loaded):
    # the placeholder straddles two 4 MiB windows; and behind more escape clusters than are undone one by one
    body = bytearray(b"a" * (icap.find._WINDOW - 20)) + PH.encode() + b"z" * 100
    assert refusal(transact(loaded, reqmod(OWN, bytes(body), chunk=1 << 20))) == IN_BODY
    dense = b"%41 x " * 50000 + FORMS["HTML decimal references"]
    assert refusal(transact(loaded, reqmod(OWN, dense, chunk=1 << 20))) == IN_BODY


def _gzip_members(*parts: bytes) -> bytes:
    return b"".join(gzip.compress(p) for p in parts)


def _raw_deflate(data: bytes) -> bytes:
    engine = zlib.compressobj(9, zlib.DEFLATED, -15)
    return engine.compress(data) + engine.flush()


SECRET = json.dumps({"prompt": "hi", "key": PH}).encode()
COMPRESSED = {
    "gzip": ("gzip", gzip.compress(SECRET)),
    "x-gzip": ("x-gzip", gzip.compress(SECRET)),
    "deflate (zlib)": ("deflate", zlib.compress(SECRET)),
    "deflate (raw, as some clients send it)": ("deflate", _raw_deflate(SECRET)),
    "gzip, gzip": ("gzip, gzip", gzip.compress(gzip.compress(SECRET))),
    "gzip, deflate": ("gzip, deflate", zlib.compress(gzip.compress(SECRET))),
    "two headers": ("deflate\r\nContent-Encoding: gzip", gzip.compress(zlib.compress(SECRET))),
    "identity, gzip": ("identity, GZIP", gzip.compress(SECRET)),
    "second gzip member": ("gzip", _gzip_members(b"nothing here", SECRET)),
    "gzip of quoted-printable": ("gzip", gzip.compress(_qp_every_char(PH))),
    "gzip of base64 lines": ("gzip", gzip.compress(base64.encodebytes(PH.encode() * 3))),
    "gzip, 20 MiB before it": ("gzip", gzip.compress(bytes(20 << 20) + SECRET, 1)),
}


@pytest.mark.parametrize("form", COMPRESSED)
def test_the_placeholder_in_a_compressed_body_is_found(loaded, form):
    coding, body = COMPRESSED[form]
    head = f"Content-Encoding: {coding}\r\nContent-Length: {len(body)}\r\n"
    assert SENT_ELSEWHERE in refusal(transact(loaded, reqmod(OTHER + head, body, chunk=65536)))
    assert refusal(transact(loaded, reqmod(OWN + head, body, chunk=65536))) == IN_BODY


def _bomb(size: int) -> bytes:
    engine = zlib.compressobj(9, zlib.DEFLATED, 31)
    block = bytes(1 << 20)
    return b"".join(engine.compress(block) for _ in range(size >> 20)) + engine.flush()


UNREADABLE = {
    "br": ("br", b"\x1b\x03\x00\xf8\xa5\x00", "request body in content-encoding br: not readable here (gzip and deflate are), "
           "so not checked for placeholders"),
    "zstd": ("zstd", b"(\xb5/\xfd\x00Xa\x00\x00hi", "content-encoding zstd: not readable here"),
    "gzip then br": ("gzip, br", b"\x1b\x03\x00", "content-encoding br: not readable here"),
    "unknown": ("x-custom", b"abc", "content-encoding x-custom: not readable here"),
    "compress": ("compress", b"\x1f\x9d\x90abc", "content-encoding compress: not readable here"),
    "transfer-encoding gzip": ("identity\r\nTransfer-Encoding: gzip, chunked", gzip.compress(b"x"),
                               "request body in transfer-encoding gzip: not checked for placeholders"),
    "not gzip": ("gzip", b"plain text, no gzip", "request body is not valid gzip: not checked for placeholders"),
    "truncated": ("gzip", gzip.compress(SECRET)[:-12], "request body in gzip ends before its compressed data does"),
    "gzip then garbage": ("gzip", gzip.compress(b"x") + b"\0\0garbage", "request body is not valid gzip"),
    "deflate then more": ("deflate", zlib.compress(b"x") + zlib.compress(SECRET), "request body with data after its deflate stream"),
}


@pytest.mark.parametrize("form", UNREADABLE)
def test_a_body_that_cannot_be_read_is_refused_whatever_it_holds(loaded, form):
    coding, body, reason = UNREADABLE[form]
    for head in (OWN, OTHER):   # no placeholder anywhere in it, and to the key's own host: refused all the same
        answer = refusal(transact(loaded, reqmod(head + f"Content-Encoding: {coding}\r\n", body, chunk=65536)))
        assert answer.startswith("refused: request body ") and reason in answer, answer
    assert icap._buffered[0] == 0


def test_a_bomb_is_refused(loaded, monkeypatch):
    body = _bomb(icap.find.MAX_DECODED + (1 << 20))   # 129 MiB of zeros: 130 KB of gzip
    answer = refusal(transact(loaded, reqmod(OWN + "Content-Encoding: gzip\r\n", body, chunk=65536)))
    assert answer == "refused: request body over 134217728 bytes once decoded (gzip): not checked for placeholders"
    monkeypatch.setattr(icap.find, "MAX_DECODED", 4 << 20)   # stacked: the inner layer's bound holds too
    body = gzip.compress(_bomb(8 << 20))
    answer = refusal(transact(loaded, reqmod(OWN + "Content-Encoding: gzip, gzip\r\n", body, chunk=65536)))
    assert answer == "refused: request body over 4194304 bytes once decoded (gzip): not checked for placeholders"


def test_a_bomb_is_stopped_at_the_bound_not_expanded(loaded, monkeypatch):
    """The decoder stops once MAX_DECODED is passed: it never holds or makes more than a piece beyond it."""
    made = []
    real = icap.find.zlib.decompressobj

    class Counting:
        def __init__(self, wbits):
            self.inner = real(wbits)

        def decompress(self, data, limit):
            out = self.inner.decompress(data, limit)
            made.append(len(out))
            return out

        def __getattr__(self, name):
            return getattr(self.inner, name)

    monkeypatch.setattr(icap.find.zlib, "decompressobj", Counting)
    monkeypatch.setattr(icap.find, "MAX_DECODED", 8 << 20)
    body = _bomb(64 << 20)
    answer = refusal(transact(loaded, reqmod(OTHER + "Content-Encoding: gzip\r\n", body, chunk=65536)))
    assert "over 8388608 bytes once decoded (gzip)" in answer
    assert (8 << 20) < sum(made) <= (8 << 20) + icap.find._PIECE and max(made) <= icap.find._PIECE
    monkeypatch.undo()
    assert icap.find.MAX_DECODED == icap.MAX_BODY == 128 << 20   # no body over 128 MiB is checked, sent or decoded


def _rng_bytes(seed: int, size: int) -> bytes:
    return random.Random(seed).randbytes(size)


ORDINARY = {
    "binary upload": ("", _rng_bytes(1, 6 << 20)),
    "gzip of text": ("Content-Encoding: gzip\r\n", gzip.compress(b"a perfectly ordinary request body\n" * 100000)),
    "gzip of binary": ("Content-Encoding: gzip\r\n", gzip.compress(_rng_bytes(2, 1 << 20))),
    "deflate, gzip": ("Content-Encoding: deflate, gzip\r\n", gzip.compress(zlib.compress(b'{"a": 1}' * 1000))),
    "identity": ("Content-Encoding: identity\r\n", b"plain"),
    "JSON with escapes": ("", json.dumps({"text": "caf\u00e9 \u2603 <a href=\"x?a=1&b=2\">" * 2000, "n": "\n\t"}).encode()),
    "form data": ("", b"&".join(b"k%d=%s" % (i, quote("v=%d &#%d; \\u00%02x" % (i, i, i)).encode()) for i in range(20000))),
    "MIME base64 of random": ("", base64.encodebytes(_rng_bytes(3, 3 << 20))),
    "hex of random": ("", _rng_bytes(4, 2 << 20).hex().encode()),
    "quoted-printable text": ("", quopri.encodestring("d\u00e9j\u00e0 vu = ok\n".encode() * 50000)),
    "UTF-16 text": ("", ("an ordinary document " * 50000).encode("utf-16")),
    "another placeholder": ("", b"sandbox-placeholder-" + b"0" * 32),
}


@pytest.mark.parametrize("form", ORDINARY)
def test_ordinary_bodies_pass(loaded, form):
    head, body = ORDINARY[form]
    assert transact(loaded, reqmod(OTHER + head, body, chunk=1 << 20)).startswith(b"ICAP/1.0 204 No Content\r\n")
    assert transact(loaded, reqmod(OWN + head, body, chunk=1 << 20)).startswith(b"ICAP/1.0 204 No Content\r\n")


def test_an_empty_body_in_any_coding_passes(loaded):
    assert transact(loaded, reqmod(OTHER + "Content-Encoding: br\r\nContent-Length: 0\r\n", None)).startswith(b"ICAP/1.0 204")
    assert transact(loaded, reqmod(OTHER + "Content-Encoding: br\r\n", b"")).startswith(b"ICAP/1.0 204")


PATHOLOGICAL = [b"\\", b"%5C", b"%255c", b"\\%5C", b"%25", b"%2525", b"&#0", b"&#x0", b"&#", b"&", b"=", b"=\r", b"%",
                b"%3D", b"%26%23", b"&%23", b"\\u00", b"\\\\u", b"%5Cu00", b"&#x", b"%2", b"\\n", b"\\x", b"\0", b"\r\n"]


def test_no_run_of_escape_syntax_costs_more_than_linear_time(loaded):
    """A run of what escapes are made of (a body of backslashes, of %5C, of &#0...) is searched in
    linear time: a regex that tried the whole run again from each of its characters took 7 s for
    16,000 backslashes and would take minutes for 64 KiB; linear, each takes a few milliseconds."""
    import time

    finder = loaded[1][0]
    for unit in PATHOLOGICAL + [b"%25" + b"25" * 30000, b"&#" + b"0" * 60000]:
        window = unit * ((64 << 10) // len(unit))
        start = time.monotonic()
        assert not finder._in(window)
        assert time.monotonic() - start < 10, unit
