"""Read-only registries on a real engine (issue 42 item 2): the `untrusted` preset (copy mode, no
network) with network.registries installs a package from PyPI and from npm as the agent's user,
through its own proxy, which refuses an upload (POST, PUT) to the registry's host with 403 and a
reason before the upstream sees it, refuses a host that is no registry, and filters Debian's plain
HTTP without interception; the host's tree is unchanged (the work is in the copy).

"The registries" are our own container: a tiny PyPI simple index and wheel, an npm packument and
tarball, and a plain-HTTP Debian file, served as pypi.org, files.pythonhosted.org,
registry.npmjs.org, deb.debian.org (and github.com, never allowed) on the test network, over TLS
with a certificate from a CA made in the test. The registries' entries name that CA as their
ca_file (the only CAs the proxy trusts for them) and private: true (the test network's addresses
are private): the policy's own way for a network that intercepts TLS or a mirror inside; the
built-in rules (system CAs, public addresses only) are not weakened for it."""

from __future__ import annotations

import base64
import hashlib
import io
import json
import os
import subprocess
import tarfile
import zipfile

import pytest

from conftest import docker_sdk, script_upstream
from test_secrets_engine import SANDBOX

pytestmark = pytest.mark.engine

NAMES = ("pypi.org", "files.pythonhosted.org", "registry.npmjs.org", "deb.debian.org", "github.com")

CERTS = r"""
set -eu; cd /tmp
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 -subj "/CN=sandbox registries test CA" \
    -keyout ca.key -out ca.pem 2>/dev/null
openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -subj "/CN=pypi.org" -keyout srv.key -out srv.csr 2>/dev/null
printf 'subjectAltName=%s\nextendedKeyUsage=serverAuth\n' "$SANS" > srv.ext
openssl x509 -req -in srv.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 -extfile srv.ext -out srv.crt 2>/dev/null
for f in ca.pem srv.crt srv.key; do echo "== $f"; cat $f; done
"""

# Serves FILES (lines of "host/path TAB content type TAB base64") for GET and HEAD over TLS (443)
# and plain HTTP (80); logs every request line; a POST or PUT is "stored" (it must never get here).
# The upstream image has python3-minimal: sockets, no http.server or json.
REGISTRY = r'''
import base64, os, socket, ssl, tempfile, threading
FILES = {}
for line in os.environ["FILES"].splitlines():
    key, kind, data = line.split("\t")
    FILES[key] = (kind, base64.b64decode(data))
def serve(conn, ctx):
    try:
        if ctx:
            conn = ctx.wrap_socket(conn, server_side=True)
        with conn:
            data = b""
            while b"\r\n\r\n" not in data and len(data) < 65536:
                chunk = conn.recv(4096)
                if not chunk:
                    return
                data += chunk
            head, _, body = data.partition(b"\r\n\r\n")
            lines = head.decode(errors="replace").split("\r\n")
            method, path = lines[0].split(" ")[:2]
            headers = dict(l.split(":", 1) for l in lines[1:] if ":" in l)
            headers = {k.strip().lower(): v.strip() for k, v in headers.items()}
            host = headers.get("host", "").split(":")[0]
            print("REQ %s %s%s" % (method, host, path), flush=True)
            found = FILES.get(host + path.split("?")[0])
            if method in ("POST", "PUT"):
                found = ("text/plain", b"stored\n")
            kind, payload = found or ("text/plain", b"not here\n")
            status = b"200 OK" if found else b"404 Not Found"
            conn.sendall(b"HTTP/1.1 " + status + b"\r\nContent-Type: " + kind.encode() + b"\r\nContent-Length: "
                         + str(len(payload)).encode() + b"\r\nCache-Control: max-age=600\r\nConnection: close\r\n\r\n"
                         + (b"" if method == "HEAD" else payload))
    except (OSError, ssl.SSLError, ValueError) as exc:
        print("FAIL %s" % exc, flush=True)
def accept(sock, ctx):
    while True:
        threading.Thread(target=serve, args=(sock.accept()[0], ctx), daemon=True).start()
folder = tempfile.mkdtemp()
for part in ("CERT", "KEY"):
    with open(os.path.join(folder, part), "w") as out:
        out.write(os.environ[part])
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.load_cert_chain(os.path.join(folder, "CERT"), os.path.join(folder, "KEY"))
for port, tls in ((443, ctx), (80, None)):
    sock = socket.socket(); sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("0.0.0.0", port)); sock.listen(32)
    threading.Thread(target=accept, args=(sock, tls), daemon=True).start()
print("READY", flush=True)
threading.Event().wait()
'''


def _wheel() -> bytes:
    files = {"tinypkg/__init__.py": b"VALUE = 'from our index'\ndef main():\n    print('hello', VALUE.replace(' ', '_'))\n",
             "tinypkg/__main__.py": b"from tinypkg import main\nmain()\n",
             "tinypkg-1.0.dist-info/entry_points.txt": b"[console_scripts]\ntinypkg-hello = tinypkg:main\n",
             "tinypkg-1.0.dist-info/METADATA": b"Metadata-Version: 2.1\nName: tinypkg\nVersion: 1.0\n",
             "tinypkg-1.0.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: sandbox-test\nRoot-Is-Purelib: true\n"
                                            b"Tag: py3-none-any\n"}
    record = "".join(f"{name},sha256={base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b'=').decode()},"
                     f"{len(data)}\n" for name, data in files.items()) + "tinypkg-1.0.dist-info/RECORD,,\n"
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as wheel:
        for name, data in {**files, "tinypkg-1.0.dist-info/RECORD": record.encode()}.items():
            wheel.writestr(name, data)
    return out.getvalue()


def _tarball() -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz") as tgz:
        for name, data in (("package/package.json", json.dumps({"name": "tinynpm", "version": "1.0.0",
                                                                 "main": "index.js"}).encode()),
                           ("package/index.js", b"module.exports = {value: 'from our registry'};\n")):
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o644
            tgz.addfile(info, io.BytesIO(data))
    return out.getvalue()


def _files() -> dict[str, list[str]]:
    wheel, tgz = _wheel(), _tarball()
    url = "https://files.pythonhosted.org/packages/tinypkg-1.0-py3-none-any.whl"
    index = f'<html><body><a href="{url}#sha256={hashlib.sha256(wheel).hexdigest()}">tinypkg-1.0-py3-none-any.whl</a>' \
            "</body></html>\n"
    packument = {"name": "tinynpm", "dist-tags": {"latest": "1.0.0"},
                 "versions": {"1.0.0": {"name": "tinynpm", "version": "1.0.0", "main": "index.js", "dist": {
                     "tarball": "https://registry.npmjs.org/tinynpm/-/tinynpm-1.0.0.tgz",
                     "shasum": hashlib.sha1(tgz).hexdigest(),
                     "integrity": "sha512-" + base64.b64encode(hashlib.sha512(tgz).digest()).decode()}}}}
    b64 = lambda data: base64.b64encode(data).decode()   # noqa: E731
    return {"pypi.org/simple/tinypkg/": ["text/html", b64(index.encode())],
            "files.pythonhosted.org/packages/tinypkg-1.0-py3-none-any.whl": ["application/octet-stream", b64(wheel)],
            "registry.npmjs.org/tinynpm": ["application/json", b64(json.dumps(packument).encode())],
            "registry.npmjs.org/tinynpm/-/tinynpm-1.0.0.tgz": ["application/octet-stream", b64(tgz)],
            "deb.debian.org/debian/README": ["text/plain", b64(b"debian over plain http\n")]}


@pytest.fixture(scope="module")
def registries(engine):
    from launcher.engine import images

    images.ensure_for(engine, images.AGENT_IMAGE, lambda line: None, proxy=True)
    out = docker_sdk().containers.run(images.proxy_image().tag, entrypoint=["sh", "-c", CERTS], user="13:13",
                                       environment={"SANS": ",".join(f"DNS:{n}" for n in NAMES)},
                                       network_disabled=True, remove=True).decode()
    certs = {part.split("\n", 1)[0]: part.split("\n", 1)[1] for part in out.split("== ")[1:]}
    env = {"CERT": certs["srv.crt"], "KEY": certs["srv.key"], "FILES": "\n".join("\t".join((key, *value)) for key, value in _files().items())}
    with script_upstream(engine, "registries", NAMES, REGISTRY, env) as (network, log, _):
        yield network, log, certs["ca.pem"]


POLICY = """version: 1
name: untrusted-registries-test
description: the untrusted preset with read-only registries, served by our own container
extends: [untrusted]
network:
  registries:
"""

# One line per step: "<label> <what it saw>".
SCRIPT = r"""
cd /tmp
echo "uid $(id -u)"
pip install --retries 1 --timeout 20 tinypkg > /tmp/pip.log 2>&1; echo "pip $?"; grep -o 'Defaulting to user installation' /tmp/pip.log | head -n 1
python3 -c "import tinypkg, sys; print('import', tinypkg.VALUE.replace(' ', '_'), tinypkg.__file__)"
echo "module $(python3 -m tinypkg)"
tinypkg-hello > /tmp/script.out 2>&1; echo "homescript $? $(command -v tinypkg-hello)"
python3 -m venv /workspace/.venv && /workspace/.venv/bin/pip install tinypkg > /tmp/venv.log 2>&1; echo "venv $?"
echo "venvscript $(/workspace/.venv/bin/tinypkg-hello)"
cd /workspace && npm install --fetch-retries=1 tinynpm > /tmp/npm.log 2>&1; echo "npm $?"
node -e "console.log('node', require('tinynpm').value.replace(/ /g, '_'))"
cd /tmp
call() { rm -f /tmp/body; code=$(curl -s --max-time 20 -o /tmp/body -w '%{http_code}:%{http_connect}' "$@"); echo "$code $(head -n 1 /tmp/body 2>/dev/null | tr -d '\r')"; }
echo "upload $(call -X POST --data-binary x https://pypi.org/legacy/)"
echo "publish $(call -X PUT --data-binary '{}' -H 'Content-Type: application/json' https://registry.npmjs.org/tinynpm)"
echo "login $(call -X PUT --data-binary '{}' https://registry.npmjs.org/-/user/org.couchdb.user:agent)"
echo "other $(call https://github.com/)"
echo "debian $(call http://deb.debian.org/debian/README)"
echo "debianpost $(call -X POST --data-binary x http://deb.debian.org/debian/upload)"
[ -f /tmp/pip.log ] && tail -n 5 /tmp/pip.log >&2; tail -n 5 /tmp/npm.log >&2
"""


@pytest.fixture
def caches(workspace):
    """The download cache volumes of this test's workspace (listed by label), removed at the end."""
    def listed():
        return [v for v in docker_sdk().volumes.list(filters={"label": [f"dev.sandbox.workspace={os.path.realpath(workspace)}",
                                                                       "dev.sandbox.profile=downloads"]})]
    yield listed
    for volume in listed():
        volume.remove(force=True)


def _policy(tmp_path, ca: str, names=("pypi", "npm", "debian")):
    (tmp_path / "ca.pem").write_text(ca)
    policy = tmp_path / f"policy-{'-'.join(names)}.yaml"
    policy.write_text(POLICY + "".join(f"    - {{name: {name}, private: true, ca_file: ca.pem}}\n" for name in names))
    return policy


def _tree(root) -> dict[str, bytes]:
    return {os.path.relpath(os.path.join(d, f), root): open(os.path.join(d, f), "rb").read()
            for d, _, files in os.walk(root) for f in files}


def test_untrusted_with_registries_installs_as_the_agent_and_uploads_are_refused(registries, workspace, tmp_path,
                                                                                caches):
    network, upstream_log, ca = registries
    policy = _policy(tmp_path, ca)
    before = _tree(workspace)
    report = tmp_path / "report.json"
    done = subprocess.run(SANDBOX + ["run", "-p", str(policy), "-w", str(workspace), "--egress-network", network,
                                     "--report", str(report), "--", "bash", "-c", SCRIPT],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    seen = {line.split(" ", 1)[0]: line.split(" ", 1)[1] for line in done.stdout.splitlines() if " " in line}
    log = upstream_log()
    assert seen["uid"] != "0", seen
    assert seen["pip"] == "0" and seen["import"].startswith("from_our_index /home/agent/.local/"), (seen, done.stderr[-3000:])
    assert "Defaulting to user installation" in done.stdout
    # the tool as a module works; its script in ~/.local/bin is on PATH (home is a noexec tmpfs in untrusted:
    # 126 there, docs/egress.md says so); a venv in the workspace runs its scripts
    assert seen["module"] == "hello from_our_index", seen
    assert seen["homescript"].split(" ")[1:] == ["/home/agent/.local/bin/tinypkg-hello"], seen
    assert seen["venvscript"] == "hello from_our_index", seen
    assert seen["venv"] == "0" and seen["npm"] == "0" and seen["node"] == "from_our_registry", (seen, done.stderr[-3000:])
    assert "REQ GET pypi.org/simple/tinypkg/" in log and "REQ GET registry.npmjs.org/tinynpm/-/tinynpm-1.0.0.tgz" in log
    for label, reason in (("upload", "method POST not allowed"), ("publish", "method PUT not allowed"),
                          ("login", "method PUT not allowed"), ("debianpost", "method POST not allowed")):
        assert seen[label].startswith("403:") and "sandbox: refused by the egress policy: " + reason in seen[label], \
            (label, seen[label])
    # A host that is no registry: the proxy refuses it (its CONNECT is cut at the TLS step), nothing reaches it.
    assert seen["other"].startswith("000:"), seen["other"]
    assert seen["debian"] == "200:000 debian over plain http", seen["debian"]
    assert "REQ POST" not in log and "REQ PUT" not in log and "github.com" not in log, log
    # copy mode stays copy mode: node_modules and package.json are in the copy, not in the host's tree
    assert _tree(workspace) == before
    egress = json.loads(report.read_text())["egress"]
    assert any(b["host"] == "github.com" for b in egress["blocked"]), egress["blocked"]
    reasons = [r["reason"] for r in egress["requests"] if r["reason"] != "-"]
    assert len(reasons) == 4 and all(r.startswith("refused: method ") for r in reasons), reasons


SWITCH_SCRIPT = r"""
call() { rm -f /tmp/body; code=$(curl -s --max-time 20 -o /tmp/body -w '%{http_code}:%{http_connect}' "$@"); echo "$code $(head -n 1 /tmp/body 2>/dev/null | tr -d '\r')"; }
echo "mode $(env | grep -c '^HTTPS_PROXY=')"
echo "upload $(call -X POST --data-binary x https://pypi.org/legacy/)"
echo "other $(call https://registry.npmjs.org/tinynpm)"
echo "get $(call https://pypi.org/simple/tinypkg/)"
"""


def test_the_switch_on_untrusted_is_proven_by_the_probe_and_refuses_uploads_and_other_registries(registries, workspace,
                                                                                                tmp_path, caches):
    """`sandbox run -p untrusted --registries pypi` itself: the probe proves the proxy's CA for pypi.org and a
    refused method (egress.bump_ca, egress.http_refused); npm (not chosen) is refused; and nothing reaches
    our stand-in: the built-in rule allows public addresses only (ours is private) and trusts the system
    CAs (ours is the test's). The install itself, with the rule's own CA file: the test above."""
    network, upstream_log, _ = registries
    before, log_before = _tree(workspace), upstream_log()
    report = tmp_path / "report.json"
    done = subprocess.run(SANDBOX + ["run", "-p", "untrusted", "--registries", "pypi", "-w", str(workspace),
                                     "--egress-network", network, "--report", str(report), "--", "bash", "-c",
                                     SWITCH_SCRIPT], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-4000:]
    seen = {line.split(" ", 1)[0]: line.split(" ", 1)[1] for line in done.stdout.splitlines() if " " in line}
    assert seen["mode"] == "1", seen
    # pypi.org is our stand-in here, on a private address: the built-in rule (public addresses only) has
    # the proxy refuse the tunnel itself (403, its page over the bumped connection), upload and download alike
    assert seen["upload"].startswith("403:") and seen["get"].startswith("403:"), seen
    assert seen["other"].startswith("000:"), seen   # npm was not chosen: no rule, the tunnel is cut
    assert upstream_log() == log_before, "something reached the stand-in"
    data = json.loads(report.read_text())
    checks = {c["id"]: c["ok"] for c in data["probe"]["checks"]}
    assert data["probe"]["ok"] and checks["egress.bump_ca"] and checks["egress.http_refused"], checks
    assert any(b["host"] == "registry.npmjs.org" for b in data["egress"]["blocked"]), data["egress"]["blocked"]
    assert _tree(workspace) == before


INSTALL = r"""
cd /tmp && pip install --retries 1 --timeout 20 tinypkg > /tmp/pip.log 2>&1; echo "pip $?"
cd /workspace && npm install --fetch-retries=1 tinynpm > /tmp/npm.log 2>&1; echo "npm $?"
echo "cached $(ls /var/cache/sandbox-downloads | sort | tr '\n' ' ')"
"""


def test_a_second_install_comes_from_the_download_cache_of_that_workspace_and_reach(registries, workspace, tmp_path,
                                                                                   caches):
    """The cache volume is the workspace's and the policy's reach's (its trust key): a second sandbox of
    the same reach downloads nothing again; one of another reach gets a volume of its own."""
    network, upstream_log, ca = registries

    def run(policy):
        done = subprocess.run(SANDBOX + ["run", "-p", str(policy), "-w", str(workspace), "--egress-network", network,
                                         "--", "bash", "-c", INSTALL], capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr[-4000:]
        return {line.split(" ", 1)[0]: line.split(" ", 1)[1] for line in done.stdout.splitlines() if " " in line}, done

    files = ("GET files.pythonhosted.org/packages/tinypkg-1.0-py3-none-any.whl",
             "GET registry.npmjs.org/tinynpm/-/tinynpm-1.0.0.tgz")
    counts = lambda: [upstream_log().count(f) for f in files]   # noqa: E731
    before = counts()
    wide = _policy(tmp_path, ca, ("pypi", "npm"))
    first, done = run(wide)
    assert first["pip"] == first["npm"] == "0" and first["cached"].split() == ["npm", "pip"], first
    assert "created the download cache sandbox-cache-" in done.stderr
    assert [b - a for a, b in zip(before, counts())] == [1, 1]
    (volume,) = caches()
    assert volume.name.startswith("sandbox-cache-") and volume.attrs["Labels"]["dev.sandbox.kind"] == "home"
    second, done = run(wide)
    assert second["pip"] == second["npm"] == "0" and f"using the download cache {volume.name}" in done.stderr, second
    assert [b - a for a, b in zip(before, counts())] == [1, 1], "the second install downloaded again"
    # another reach (debian too: another trust key): another volume, nothing of the first one's comes in
    third, done = run(_policy(tmp_path, ca, ("npm", "pypi", "debian")))
    assert third["pip"] == "0" and volume.name not in done.stderr
    assert len(caches()) == 2 and len({v.attrs["Labels"]["dev.sandbox.trust"] for v in caches()}) == 2
    assert [b - a for a, b in zip(before, counts())] == [2, 2]
