"""The one module that imports `docker` (lazily, for builds, pulls and engineexec's execs: it costs
~0.25 s). What a launch asks goes through engineapi: on a unix socket, without the SDK."""

from __future__ import annotations

import io
import threading
from contextlib import contextmanager, suppress
from typing import Callable, Iterator

from launcher import labels as label
from launcher.engine import dialects, enginebodies, engineapi, streams
from launcher.engine.engineapi import mapped, path_of
from launcher.engine.engineproto import ContainerInfo, ContainerSummary, VolumeInfo
from launcher.engine.engineexec import Execs
from launcher.engine.enginenets import Networks
from launcher.errors import EngineError, NotFound, over_limit
from launcher.host import engineid
from launcher.plan.plan import ContainerSpec, ProxySpec, proxy_env

MANAGED = label.MANAGED_SELECTOR
DEFAULT_SOCKET = "/var/run/docker.sock"


def _sdk_client():
    try:
        import docker
    except ImportError as exc:  # pragma: no cover - a broken install
        raise EngineError(f"the docker Python package is missing: {exc}") from None
    return docker.from_env(timeout=300)   # asks the engine its API version: no ping needed


def connect(info: bool = False) -> "Engine":
    """Connect to the engine the environment points at (DOCKER_HOST or the default socket); `info`:
    its /info asked beside /version (a launch reads both: Docker runs runc --version for each)."""
    try:
        from launcher.host import host

        path = host.engine_socket(DEFAULT_SOCKET)
        if path is None:
            return Engine(engineapi.Sdk(_sdk_client()))
        http = engineapi.Unix(path)
        early = _asked_now(http, "/info") if info else None
        answer = http.call("GET", "/version")
        if answer.status != 200:
            raise engineapi.failed("reading the engine version", answer)
        version = answer.json()
        http.version = version["ApiVersion"]   # the engine's own, as the SDK negotiates it
        return Engine(http, version, early)
    except EngineError:
        raise
    except Exception as exc:  # noqa: BLE001 - every failure here means "no engine"
        from launcher.engine.unreachable import unreachable

        raise unreachable(exc, DEFAULT_SOCKET) from None


def _asked_now(http: "engineapi.Unix", path: str) -> Callable[[], dict | None]:
    """GET `path` on a thread from now on, unversioned (the engine's own API version, which connect then
    takes); what gives its document once, None when it failed (asked again then)."""
    got: list = []

    def ask() -> None:
        with suppress(Exception):
            got.append((answer := http.call("GET", path)).status == 200 and answer.json() or None)
    (thread := threading.Thread(target=ask, daemon=True)).start()
    return lambda: thread.join() or (got.pop() if got else None)


class Engine(Networks, Execs):
    """engineproto.Engine over the Engine API: typed inputs and answers, mapped errors, nothing else.
    `http` is an engineapi transport (or enginefake's); the SDK's client is made only when a build,
    pull or exec needs it."""

    def __init__(self, http, version: dict | None = None, info: Callable[[], dict | None] | None = None):
        self.http, self._version, self._client, self._info = http, version, None, info

    @property
    def client(self):
        """The docker SDK's client (imported on first use)."""
        if self._client is None:
            with mapped("connecting to the engine"):
                self._client = self.http.client if isinstance(self.http, engineapi.Sdk) else _sdk_client()
        return self._client

    def _call(self, action: str, method: str, path: str, params: dict | None = None, body=None, *,
              missing: bool = False, **how) -> engineapi.Answer | None:
        """One request; its answer, None for a 404 when `missing` is allowed; errors mapped."""
        try:
            answer = self.http.call(method, path, params, body, **how)
            if answer.status == 404 and missing:
                answer.close()
                return None
            if answer.status >= 400:
                raise engineapi.failed(action, answer)
            return answer
        except (OSError, ValueError) as exc:   # requests' errors are OSErrors too
            raise EngineError(f"{action}: {exc}") from None

    def _json(self, action: str, method: str, path: str, params: dict | None = None, body=None, **how):
        if (answer := self._call(action, method, path, params, body, **how)) is None:
            return None
        try:
            return answer.json()
        except (OSError, ValueError) as exc:
            raise EngineError(f"{action}: {exc}") from None

    def version(self) -> dict:
        if self._version is None:
            self._version = self._json("reading the engine version", "GET", "/version")
        return self._version

    @property
    def dialect(self) -> dialects.EngineDialect:
        """How this engine is asked (engine/dialects/), by its kind (engineid); its plan side: `.plan`."""
        return dialects.of(engineid.identify(self.version(), {}).kind)

    def info(self, libpod: bool = False) -> dict:   # libpod: podman's own (rootless, id maps, cgroups); Docker: {}
        early, self._info = (None, self._info) if libpod else (self._info, None)   # asked at connect: used once
        return (early and early()) or self._json("reading the engine's system information", "GET",
                                                 "/libpod/info" if libpod else "/info", missing=libpod) or {}

    # images
    def _image(self, ref: str, missing: bool = False) -> dict | None:
        return self._json(f"inspecting image {ref}", "GET", path_of("/images/{}/json", ref), missing=missing)

    def image_exists(self, ref: str) -> bool:
        return self._image(ref, missing=True) is not None

    def image_labels(self, ref: str) -> dict | None:
        """The image's labels ({} for none); None when the engine has no such image."""
        found = self._image(ref, missing=True)
        return None if found is None else found["Config"].get("Labels") or {}

    def image_digests(self, ref: str) -> dict:
        """The image's ID (the digest of its config) and its registry digests, if any."""
        attrs = self._image(ref)
        return {"id": attrs.get("Id", ""), "repo_digests": list(attrs.get("RepoDigests") or [])}

    def image_env(self, ref: str) -> list[str]:
        return self._image(ref)["Config"].get("Env") or []

    def pull(self, ref: str) -> None:
        with mapped(f"pulling {ref}"):
            self.client.images.pull(ref)

    def build(self, context: str, tag: str, labels: dict, on_line: Callable[[str], None],
              buildargs: dict[str, str] | None = None, dockerfile: str | None = None) -> None:
        with mapped(f"building {tag}"):   # dockerfile: a path, else context/Dockerfile
            for chunk in self.client.api.build(path=context, tag=tag, labels=labels, rm=True, dockerfile=dockerfile,
                                               forcerm=True, pull=False, decode=True,
                                               buildargs=buildargs or None):
                if "error" in chunk:
                    raise EngineError(f"building {tag} failed: {chunk['error'].strip()}")
                text = chunk.get("stream", "").rstrip()
                if text:
                    on_line(text)

    def import_tar(self, path: str, ref: str) -> None:
        with mapped(f"importing {ref}"):
            self.client.api.import_image_from_file(path, repository=ref)

    # volumes
    volume_labels = lambda self, name: None if (info := self.volume_info(name)) is None else info.labels  # noqa: E731

    def fill_volume(self, name: str, image: str, path: str, labels: dict) -> None:
        """Create a volume holding the content of `path` in `image` (the engine copies it on first use)."""
        self.create_volume(name, labels)
        filler = ""
        try:   # the filler is removed whatever happens; the volume too unless it was filled (Ctrl-C too)
            filler = self._json(f"filling volume {name}", "POST", "/containers/create", body={
                "Image": image, "Cmd": [f"{path}/busybox", "true"], "Labels": labels, "HostConfig": {
                    "NetworkMode": "none", "Mounts": [{"Type": "volume", "Source": name, "Target": path}],
                    **({"Ulimits": enginebodies.ulimits(limits)} if (limits := self.dialect.tool_ulimits()) else {})}})["Id"]
            self.start(filler)
            if (code := self.wait(filler)) != 0:
                raise EngineError(f"filling volume {name} from {image}: exit code {code}")
        except BaseException:
            for undo in (lambda: filler and self.remove(filler), lambda: self.remove_volume(name)):
                with suppress(EngineError):   # in this order: a volume in use cannot be removed
                    undo()
            raise
        self.remove(filler)

    def create_volume(self, name: str, labels: dict, options: dict | None = None) -> VolumeInfo:
        """A local volume (its `docker volume inspect`); `options`: the local driver's mount options."""
        body = {"Name": name, "Driver": "local", "Labels": labels, **({"DriverOpts": options} if options else {})}
        return VolumeInfo.of(self._json(f"creating volume {name}", "POST", "/volumes/create", body=body))

    def volume_info(self, name: str) -> VolumeInfo | None:
        """`docker volume inspect`, or None when there is none."""
        found = self._json(f"inspecting volume {name}", "GET", path_of("/volumes/{}", name), missing=True)
        return None if found is None else VolumeInfo.of(found)

    def list_volumes(self, *filters: str) -> list[VolumeInfo]:
        found = self._json("listing volumes", "GET", "/volumes", {"filters": {"label": [MANAGED, *filters]}})
        return [v for v in map(VolumeInfo.of, found.get("Volumes") or []) if label.matches(v.labels, (MANAGED, *filters))]

    def remove_volume(self, name: str) -> None:
        self._call(f"removing volume {name}", "DELETE", path_of("/volumes/{}", name), {"force": True}).read()

    # containers
    def create(self, spec: ContainerSpec) -> str:
        path, params, body = self.dialect.create_request(spec)
        return self._json(f"creating container {spec.name}", "POST", path, params, body=body)["Id"]

    def create_proxy(self, spec: ProxySpec, secrets: dict[str, str] | None = None,
                     egress_ready: Callable[[], None] = lambda: None, address: str = "",
                     remake: Callable[[], object] | None = None) -> str:
        """The egress proxy (unprivileged, read-only root, no capabilities), `secrets` in its environment, on
        both networks (egress joined once `egress_ready` returns); `address`: a fixed one, no DNS alias;
        `remake`: makes the egress network again when it is gone at the join (the shared one, `sandbox gc`)."""
        body = self.dialect.proxy_body(spec, {**proxy_env(spec), **(secrets or {})}, address)
        ref = self._json(f"creating proxy {spec.name}", "POST", "/containers/create", {"name": spec.name},
                         body=body)["Id"]
        egress_ready()
        for again in (remake, None):
            try:
                self._post(f"connecting proxy {spec.name} to {spec.egress_network}", "/networks/{}/connect",
                           spec.egress_network, body={"Container": ref})
                return ref
            except NotFound:
                if again is None:
                    raise
                again()
        raise AssertionError("unreachable")

    def logs(self, ref: str, stdout: bool = True, stderr: bool = False) -> str:
        """A container's logs, as text (in frames: no container here has a terminal)."""
        action = f"reading the logs of {ref}"
        answer = self._call(action, "GET", path_of("/containers/{}/logs", ref), {"stdout": stdout, "stderr": stderr})
        with mapped(action):
            return b"".join(out or err for out, err in engineapi.frames(answer.chunks())).decode(errors="replace")

    def inspect(self, ref: str) -> ContainerInfo:   # and the engine's own inspect, where its dialect has one
        get = lambda api: self._json(f"inspecting container {ref}", "GET", path_of(api, ref))  # noqa: E731
        native = self.dialect.native_inspect
        return ContainerInfo.of(get("/containers/{}/json"), get(native) if native else None)

    def _post(self, action: str, template: str, ref: str, params: dict | None = None, **how) -> None:
        self._call(action, "POST", path_of(template, ref), params, **how).read()

    def start(self, ref: str) -> None:
        self._post(f"starting container {ref}", "/containers/{}/start", ref)

    def signal(self, ref: str, name: str) -> None:   # TERM, …: to the container's first process
        self._post(f"sending {name} to {ref}", "/containers/{}/kill", ref, {"signal": name})

    def processes(self, ref: str) -> list[str]:   # `docker top`: each one's command line (its last column)
        top = self._json(f"listing the processes of {ref}", "GET", path_of("/containers/{}/top", ref)) or {}
        return [str(row[-1]) for row in top.get("Processes") or [] if row]

    def output(self, ref: str, stdin: bool = False) -> engineapi.Attachment:
        """(stdout, stderr) chunks until the container exits; attach before starting it. `stdin`:
        attached with its stdin as well, where the transport can write there (`writable`)."""
        with mapped(f"attaching to {ref}"):
            return self.http.attach(ref, stdin)

    def wait(self, ref: str) -> int:
        return int(self._json(f"waiting for {ref}", "POST", path_of("/containers/{}/wait", ref), timeout=None)["StatusCode"])

    @contextmanager
    def run_attached(self, spec: ContainerSpec, timeout: float) -> Iterator["streams.Attached"]:
        """Create and start a short-lived container and yield its output as it comes (attached: intact,
        unbuffered). Killed after `timeout` s; always removed; the exit code set after a full block."""
        ref = self.create(spec)
        try:
            run = streams.Attached(self.output(ref), mapped)
            self.start(ref)
            killer = threading.Timer(timeout, self._kill_late, (ref, run))
            killer.daemon = True
            killer.start()
            try:
                yield run
                while run.stdout.read(1 << 20):   # the rest, if the reader stopped early (unread, it blocks
                    pass                            # the container); dropped, never kept
                run.exit_code = self.wait(ref)
            finally:
                killer.cancel()
        finally:
            self.remove(ref)

    def _kill_late(self, ref: str, run: "streams.Attached") -> None:
        run.timed_out = True
        with suppress(Exception):   # it ended meanwhile; the removal after the block cleans up anyway
            self._post(f"killing {ref}", "/containers/{}/kill", ref)

    def read_file(self, ref: str, path: str, limit: int) -> bytes | None:
        """The regular file at `path` of a (created) container; None when there is none or it is not
        a regular file; EngineError beyond `limit` bytes (nothing more is read)."""
        import tarfile

        def regular(info: dict) -> bool:   # no Go file type bits: not a directory, link, device...
            return not info.get("mode", 0) & 0xFFF00000 and (info.get("size", 0) <= limit or over_limit(path, limit))

        data = self.archive_head(ref, path, limit + (64 << 10) + 1, regular)
        if data is None:
            return None
        if len(data) > limit + (64 << 10):    # the tar's headers and padding, then the bound
            over_limit(path, limit)
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as tar:   # the API's tar is never compressed
            member = tar.next()
            if member is None or not member.isreg() or member.size > limit:
                return None
            return tar.extractfile(member).read()

    def put_archive(self, ref: str, path: str, chunks: Iterator[bytes]) -> None:
        """Unpack the tar `chunks` stream at `path` of a container (created is enough)."""
        self._call(f"writing into {path} of {ref}", "PUT", path_of("/containers/{}/archive", ref), {"path": path},
                   raw=chunks).read()

    def archive_head(self, ref: str, path: str, limit: int, wanted: Callable[[dict], bool] = lambda _: True) -> bytes | None:
        """The first `limit` bytes of the tar of `path` (all if shorter); None: no such path, or `wanted` refused its stat."""
        import base64
        import json

        action = f"reading {path} of {ref}"
        answer = self._call(action, "GET", path_of("/containers/{}/archive", ref), {"path": path}, missing=True)
        if answer is None:
            return None
        with mapped(action):
            try:
                stat = answer.headers.get("x-docker-container-path-stat", "")
                if not wanted(json.loads(base64.b64decode(stat)) if stat else {}):
                    return None
                data = bytearray()   # appended in place: the probe's 2 MB in ~30 chunks, not copied each time
                for chunk in answer.chunks():
                    data += chunk
                    if len(data) >= limit:
                        break
                return bytes(data[:limit])
            finally:
                answer.close()

    def exists(self, ref: str, path: str) -> bool:   # a stat: HEAD of the archive API, no tar is made
        return self._call(f"looking at {path} of {ref}", "HEAD", path_of("/containers/{}/archive", ref),
                          {"path": path}, missing=True) is not None

    def pause(self, ref: str) -> None:
        self._post(f"pausing {ref}", "/containers/{}/pause", ref)

    def unpause(self, ref: str) -> None:
        self._post(f"unpausing {ref}", "/containers/{}/unpause", ref)

    def stop(self, ref: str, grace: int) -> None:
        self._post(f"stopping {ref}", "/containers/{}/stop", ref, {"t": grace}, timeout=300 + grace)

    def remove(self, ref: str) -> None:
        if answer := self._call(f"removing {ref}", "DELETE", path_of("/containers/{}", ref), {"force": True, "v": True},
                                missing=True):
            answer.read()

    def list(self, *filters: str) -> list[ContainerSummary]:
        found = self._json("listing sandboxes", "GET", "/containers/json",
                           {"all": True, "filters": {"label": [MANAGED, *filters]}})
        return [c for c in map(ContainerSummary.of, found) if label.matches(c.labels, (MANAGED, *filters))]
