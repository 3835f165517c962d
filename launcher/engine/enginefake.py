"""An engine in memory, for unit tests (as httpx ships MockTransport): `FakeEngine` is the real
`launcher.engine.engine.Engine` over `Transport`, which answers the Engine API routes the launcher sends
from a small model of images, containers, volumes and networks. What the real Engine does through
the docker SDK (builds, pulls, imports, execs) FakeEngine plays itself; it never imports docker.

Knobs (keywords of FakeEngine and Transport): `images` (ref -> {"Labels", "Env"}; None: every image
exists, with PATH=/usr/bin), `output` ((stdout, stderr) pairs every attached container prints),
`exit_code` (what every wait answers), `tamper` (edits each inspect document before it is
answered), `fail` ({"METHOD /path regex": message}: the engine answers 500 with it), `logs`
(container name -> its log text), `archive` ((ContainerInfo, path) -> the raw tar the archive API
answers, or None: no such path), `builds` ((context, tag) -> its output lines), `execs` (argv -> (output pairs, exit code));
`http.add_container` seeds an earlier one. Kept: `calls` ("create", "stdin go", …), `created`, `removed_volumes`, `imported`."""

from __future__ import annotations

import base64
import copy
import hashlib
import itertools
import json
import re
from typing import Callable, Iterable, Iterator

from launcher.engine import podmanfake
from launcher.engine.engine import Engine
from launcher.engine.engineapi import Answer, Attachment
from launcher.engine.engineproto import ContainerInfo
from launcher.engine.fakearchive import filled_probe_volume, probe_files, stat_of, tar_of  # noqa: F401 - tar_of: tests take it from here
from launcher.errors import EngineError

VERSION = {"Version": "20.10.24", "ApiVersion": "1.41", "Os": "linux", "Arch": "amd64", "KernelVersion": "6.1.0",
           "Components": [{"Name": "Engine", "Version": "20.10.24"}, {"Name": "runc", "Version": "1.1.5"}]}
INFO = {"CgroupVersion": "1", "SecurityOptions": ["name=seccomp,profile=default"], "DefaultRuntime": "runc",
        "Runtimes": {"runc": {"path": "runc"}}}
Pairs = Iterable[tuple[bytes | None, bytes | None]]


def _answer(status: int, doc=None, raw: bytes | None = None, headers: dict | None = None) -> Answer:
    data = raw if raw is not None else b"" if doc is None else json.dumps(doc).encode()
    return Answer(status, headers or {}, iter([data]))


def _matches(labels: dict, filters: dict | None) -> bool:
    for wanted in (filters or {}).get("label", []):
        key, has_value, value = wanted.partition("=")
        if key not in labels or (has_value and labels[key] != value):
            return False
    return True


def frame(kind: int, data: bytes) -> bytes:
    """One frame of the engine's multiplexed stream (1 stdout, 2 stderr)."""
    return bytes([kind, 0, 0, 0]) + len(data).to_bytes(4, "big") + data


def inspect_of(body: dict, ref: str, name: str, image: dict) -> dict:
    """What `docker inspect` reports for a container created from the create `body`."""
    host = {k: v for k, v in (body.get("HostConfig") or {}).items() if k != "Mounts"}
    mounts = [{"Type": m["Type"], "Destination": m["Target"], "RW": not m.get("ReadOnly"),
               "Source": "" if m["Type"] == "tmpfs" else m.get("Source") or "",
               **({"Name": m.get("Source")} if m["Type"] == "volume" else {})}
              for m in (body.get("HostConfig") or {}).get("Mounts") or []]
    return {
        "Id": ref, "Name": f"/{name}", "Image": image["Id"], "LogPath": f"/fake/{ref}-json.log",
        "State": {"Running": False, "Status": "created", "ExitCode": 0},
        "HostConfig": {"Privileged": False, "IpcMode": "private", "Runtime": "runc", **host},
        "Config": {"User": body.get("User", ""), "Image": body.get("Image"), "Entrypoint": body.get("Entrypoint"),
                   "Cmd": body.get("Cmd"), "Env": list(body.get("Env") or []) + list(image["Config"]["Env"]),
                   "Labels": {**image["Config"]["Labels"], **(body.get("Labels") or {})}},
        "Mounts": mounts,
        "NetworkSettings": {"Networks": {host.get("NetworkMode") or "default": {"IPAddress": ""}}},
    }


class Transport:
    """The Engine API routes the launcher uses, answered from memory (engineapi's transport shape)."""

    version = "1.41"

    def __init__(self, *, images: dict | None = None, output: Pairs = (), exit_code: int = 0,
                 tamper: Callable[[dict], None] | None = None, fail: dict[str, str] | None = None,
                 logs: dict[str, str] | None = None, archive: Callable[[ContainerInfo, str], bytes | None] | None = None,
                 engine_version: dict | None = None, engine_info: dict | None = None, libpod_info: dict | None = None):
        self.images = None if images is None else {ref: self._image(ref, **doc) for ref, doc in images.items()}
        self.output, self.exit_code, self.tamper = list(output), exit_code, tamper or (lambda doc: None)
        self.fail, self.logs = dict(fail or {}), dict(logs or {})
        self._archive = archive
        self.engine_version, self.engine_info = engine_version or VERSION, engine_info or INFO
        self.libpod_info = libpod_info   # podman's /libpod/info; None: a Docker engine (404)
        self.containers: dict[str, dict] = {}
        self.libpod: dict[str, dict] = {}   # podman's libpod inspect of a container it created
        self.volumes: dict[str, dict] = {}
        self.networks: dict[str, dict] = {}
        self.calls: list[str] = []
        self.created: list[dict] = []
        self.network_bodies: list[dict] = []   # podman's libpod network creates, as asked
        self.removed_volumes: list[str] = []
        self._ids = itertools.count(1)

    @staticmethod
    def _image(ref: str, Labels: dict | None = None, Env: list | None = None, Id: str = "") -> dict:
        return {"Id": Id or "sha256:" + hashlib.sha256(ref.encode()).hexdigest(), "RepoDigests": [],
                "Config": {"Labels": dict(Labels or {}), "Env": list(["PATH=/usr/bin"] if Env is None else Env)}}

    def archive(self, info: ContainerInfo, path: str) -> bytes | None:
        """The test's answer; else every container's probe directory as the launcher fills it."""
        found = self._archive(info, path) if self._archive else None
        return probe_files(path) if found is None else found

    def image(self, ref: str) -> dict | None:
        return self._image(ref) if self.images is None else self.images.get(ref)

    def add_image(self, ref: str, **doc) -> None:
        if self.images is not None:
            self.images[ref] = self._image(ref, **doc)

    def add_container(self, name: str, labels: dict, *, status: str = "running", user: str = "", image: str = "img") -> str:
        """A container someone made earlier (its id): the rest of the model as the create would have it."""
        if self.image(image) is None:
            self.add_image(image)
        answer = self._create({"name": name}, {"Image": image, "User": user, "Labels": dict(labels)})
        ref = json.loads(answer.read())["Id"]
        self.calls.pop(), self.created.pop()   # not this test's doing
        self.containers[ref]["State"].update(Running=status == "running", Status=status)
        return ref

    def container(self, ref: str) -> dict | None:
        """A container by id, name or id prefix."""
        for doc in self.containers.values():
            if ref in (doc["Id"], doc["Name"].lstrip("/")) or (len(ref) >= 3 and doc["Id"].startswith(ref)):
                return doc
        return None

    def info(self, ref: str) -> ContainerInfo:
        return ContainerInfo.of(self.container(ref))

    def attach(self, ref: str, stdin: bool = False) -> Attachment:
        if self.container(ref) is None:
            raise EngineError(f"attaching to {ref}: no such container")
        return Attachment(iter(list(self.output)), (lambda data: self.calls.append(f"stdin {data.decode().strip()}"))
                          if stdin else None)

    def call(self, method: str, path: str, params: dict | None = None, body=None, *, raw=None,
             timeout: float | None = -1, upgrade: bool = False) -> Answer:
        for pattern, message in self.fail.items():
            if re.match(pattern, f"{method} {path}"):
                return _answer(500, {"message": message})
        if raw is not None and not isinstance(raw, bytes):
            raw = b"".join(raw)
        for route_method, route, handler in self.ROUTES:
            found = re.fullmatch(route, path)
            if found and route_method == method:
                return handler(self, *found.groups(), params=params or {}, body=body, raw=raw)
        return _answer(404, {"message": f"the fake engine has no route {method} {path}"})

    # the engine
    def _version(self, **_):
        return _answer(200, self.engine_version)

    def _info(self, **_):
        return _answer(200, self.engine_info)

    def _libpod_info(self, **_):
        return _answer(404, {"message": "page not found"}) if self.libpod_info is None else _answer(200, self.libpod_info)

    def _image_json(self, ref, **_):
        found = self.image(ref)
        return _answer(404, {"message": f"No such image: {ref}"}) if found is None else _answer(200, found)

    # volumes
    def _volume_create(self, body, **_):
        name = body["Name"]
        self.volumes.setdefault(name, {"Name": name, "Driver": "local", "Labels": dict(body.get("Labels") or {}),
                                       "Mountpoint": f"/fake/volumes/{name}/_data", "Options": body.get("DriverOpts"),
                                       "CreatedAt": "2026-01-01T00:00:00Z"})
        return _answer(201, self.volumes[name])

    def _volume(self, name, **_):
        if name not in self.volumes and (labels := filled_probe_volume(name)):
            self._volume_create({"Name": name, "Labels": labels})   # as a launch's ready() fills it
        found = self.volumes.get(name)
        return _answer(404, {"message": f"get {name}: no such volume"}) if found is None else _answer(200, found)

    def _volumes(self, params, **_):
        return _answer(200, {"Volumes": [v for v in self.volumes.values() if _matches(v["Labels"], params.get("filters"))]})

    def _volume_remove(self, name, **_):
        if self.volumes.pop(name, None) is None:
            return _answer(404, {"message": f"get {name}: no such volume"})
        self.removed_volumes.append(name)
        return _answer(204)

    # containers
    def _create(self, params, body, **_):
        name = params.get("name") or f"fake_{next(self._ids)}"
        if self.container(name) is not None:
            return _answer(409, {"message": f'Conflict. The container name "/{name}" is already in use'})
        image = self.image(body["Image"])
        if image is None:
            return _answer(404, {"message": f"No such image: {body['Image']}"})
        ref = hashlib.sha256(f"{name}{next(self._ids)}".encode()).hexdigest()
        self.containers[ref] = inspect_of(body, ref, name, image)
        self.calls.append("create")
        self.created.append(body)
        return _answer(201, {"Id": ref, "Warnings": []})

    def _libpod_create(self, body, **_):   # podman's own create: its inspect as podman 4.3 reports it
        image = self.image(body["image"])
        if image is None:
            return _answer(404, {"message": f"{body['image']}: image not known"})
        ref = hashlib.sha256(f"{body['name']}{next(self._ids)}".encode()).hexdigest()
        self.containers[ref], self.libpod[ref] = podmanfake.compat_inspect_of(body, ref, image), podmanfake.libpod_inspect_of(body)
        self.calls.append("create")
        self.created.append(body)
        return _answer(201, {"Id": ref, "Warnings": []})

    def _libpod_inspect(self, ref, **_):
        doc = self.container(ref)
        return _answer(404, {"message": f"no such container {ref}"}) if doc is None else _answer(200, self.libpod[doc["Id"]])

    def _containers(self, params, **_):
        return _answer(200, [{"Id": d["Id"], "Names": [d["Name"]], "State": d["State"]["Status"],
                              "Labels": d["Config"]["Labels"], "Created": 0}
                             for d in self.containers.values() if _matches(d["Config"]["Labels"], params.get("filters"))])

    def _acting(self, ref: str, verb: str, change: Callable[[dict], None] = lambda state: None) -> Answer:
        doc = self.container(ref)
        if doc is None:
            return _answer(404, {"message": f"No such container: {ref}"})
        self.calls.append(verb)
        change(doc["State"])
        return _answer(204)

    def _inspect(self, ref, **_):
        doc = self.container(ref)
        if doc is None:
            return _answer(404, {"message": f"No such container: {ref}"})
        answered = copy.deepcopy(doc)
        self.tamper(answered)
        return _answer(200, answered)

    def _post(self, ref, verb, params, **_):
        if verb == "wait":
            doc = self.container(ref)
            if doc is None:
                return _answer(404, {"message": f"No such container: {ref}"})
            doc["State"].update(Running=False, Status="exited", ExitCode=self.exit_code)
            return _answer(200, {"StatusCode": self.exit_code})
        if verb == "kill" and (params or {}).get("signal", "KILL") != "KILL":
            # a signal the first process handles (the probe's gate): the model records it, nothing ends
            return self._acting(ref, f"signal {params['signal']}")
        ended = {"Running": False, "Status": "exited"}
        changes = {"start": {"Running": True, "Status": "running"}, "kill": {**ended, "ExitCode": 137},
                   "stop": {**ended, "ExitCode": 0}, "pause": {"Status": "paused"}, "unpause": {"Status": "running"}}
        return self._acting(ref, verb, lambda state: state.update(changes[verb]))

    def _top(self, ref, **_):   # the first process alone: the container's command
        if (doc := self.container(ref)) is None:
            return _answer(404, {"message": f"No such container: {ref}"})
        command = [*(doc["Config"].get("Entrypoint") or []), *(doc["Config"].get("Cmd") or [])]
        return _answer(200, {"Titles": ["PID", "CMD"], "Processes": [["4242", " ".join(command)]]})

    def _remove(self, ref, **_):
        answer = self._acting(ref, "remove")
        if answer.status == 204:
            gone = self.container(ref)["Id"]
            del self.containers[gone]
            for network in self.networks.values():   # it leaves its networks, as the engine's does
                network["Containers"] = [c for c in network.get("Containers", []) if self.container(c) is not None]
        return answer

    def _logs(self, ref, params, **_):
        doc = self.container(ref)
        if doc is None:
            return _answer(404, {"message": f"No such container: {ref}"})
        return _answer(200, raw=frame(1, self.logs.get(doc["Name"].lstrip("/"), "").encode()))

    def _archive_get(self, ref, params, **_):
        found = self.archive(self.info(ref), params["path"]) if self.container(ref) else None
        if found is None:
            return _answer(404, {"message": f"Could not find the file {params['path']} in container {ref}"})
        stat = base64.b64encode(json.dumps(stat_of(found)).encode()).decode()
        return _answer(200, raw=found, headers={"x-docker-container-path-stat": stat})

    def _archive_head(self, ref, params, **_):
        found = self.archive(self.info(ref), params["path"]) if self.container(ref) else None
        return _answer(404 if found is None else 200, raw=b"")

    def _archive_put(self, ref, params, raw, **_):
        if self.container(ref) is None:
            return _answer(404, {"message": f"No such container: {ref}"})
        self.container(ref).setdefault("Archives", []).append((params["path"], raw))
        return _answer(200)

    # networks
    def _network_create(self, body, **_):
        if body["Name"] in self.networks:
            return _answer(409, {"message": f"network with name {body['Name']} already exists"})
        subnet = ((body.get("IPAM") or {}).get("Config") or [{}])[0].get("Subnet")
        self.networks[body["Name"]] = {"Name": body["Name"], "Id": hashlib.sha256(body["Name"].encode()).hexdigest(),
                                       "Labels": dict(body.get("Labels") or {}), "Internal": bool(body.get("Internal")),
                                       "Driver": body.get("Driver", "bridge"), "Options": dict(body.get("Options") or {}),
                                       "IPAM": {"Config": [{"Subnet": subnet}] if subnet else []}, "Containers": []}
        return _answer(201, {"Id": self.networks[body["Name"]]["Id"]})

    def _libpod_network_create(self, body, **_):   # podman's own create
        self.network_bodies.append(body)
        self.networks[body["name"]], made = podmanfake.network_of(body)
        return _answer(200, made)

    def _networks(self, params, **_):
        return _answer(200, [n for n in self.networks.values() if _matches(n["Labels"], params.get("filters"))])

    def _network(self, name, **_):
        found = self.networks.get(name)
        return _answer(200, found) if found else _answer(404, {"message": f"network {name} not found"})

    def _network_remove(self, name, **_):
        if self.networks.pop(name, None) is None:
            return _answer(404, {"message": f"network {name} not found"})
        return _answer(204)

    def _connect(self, name, body, **_):
        if name not in self.networks or self.container(body["Container"]) is None:
            return _answer(404, {"message": f"network {name} or container not found"})
        self.networks[name]["Containers"].append(body["Container"])
        self.container(body["Container"])["NetworkSettings"]["Networks"][name] = {"IPAddress": ""}
        return _answer(200)

    C = "/containers/([^/]+)"
    ROUTES = [
        ("GET", "/version", _version), ("GET", "/info", _info), ("GET", "/libpod/info", _libpod_info),
        ("GET", "/images/(.+)/json", _image_json),
        ("POST", "/volumes/create", _volume_create), ("GET", "/volumes", _volumes),
        ("GET", "/volumes/([^/]+)", _volume), ("DELETE", "/volumes/([^/]+)", _volume_remove),
        ("POST", "/containers/create", _create), ("POST", "/libpod/containers/create", _libpod_create),
        ("GET", "/libpod/containers/([^/]+)/json", _libpod_inspect), ("GET", "/containers/json", _containers),
        ("GET", C + "/json", _inspect), ("POST", C + "/(start|kill|stop|pause|unpause|wait)", _post),
        ("DELETE", C, _remove), ("GET", C + "/logs", _logs), ("GET", C + "/top", _top), ("GET", C + "/archive", _archive_get),
        ("HEAD", C + "/archive", _archive_head), ("PUT", C + "/archive", _archive_put),
        ("POST", "/networks/create", _network_create), ("POST", "/libpod/networks/create", _libpod_network_create),
        ("GET", "/networks", _networks), ("GET", "/networks/([^/]+)", _network),
        ("DELETE", "/networks/([^/]+)", _network_remove), ("POST", "/networks/([^/]+)/connect", _connect),
    ]


class FakeEngine(Engine):
    """launcher.engine.engine.Engine over the in-memory Transport; the SDK's part played here."""

    def __init__(self, *, builds: Callable[[str, str], Iterable[str]] | None = None,
                 execs: Callable[[list[str]], tuple[Pairs, int]] | None = None, **knobs):
        super().__init__(Transport(**knobs))
        self.builds = builds or (lambda context, tag: ())
        self.execs = execs or (lambda argv: ((), 0))
        self.imported: list[str] = []
        self.exec_codes: dict[str, int] = {}

    @property
    def client(self):
        raise EngineError("the fake engine has no SDK client")

    def __getattr__(self, name):   # the model and what happened: calls, created, containers, volumes, …
        if name in ("calls", "created", "removed_volumes", "containers", "volumes", "networks", "images"):
            return getattr(self.http, name)
        raise AttributeError(name)

    def pull(self, ref: str) -> None:
        if self.http.image(ref) is None:
            raise EngineError(f"pulling {ref}: the fake engine reaches no registry")

    def build(self, context: str, tag: str, labels: dict, on_line: Callable[[str], None],
              buildargs: dict[str, str] | None = None, dockerfile: str | None = None) -> None:
        for line in self.builds(context, tag):
            on_line(line)
        self.http.add_image(tag, Labels=labels)

    def import_tar(self, path: str, ref: str) -> None:
        self.imported.append(ref)
        self.http.add_image(ref)

    def fill_volume(self, name: str, image: str, path: str, labels: dict) -> None:
        self.create_volume(name, labels)

    def exec_stream(self, ref: str, argv: list[str], user: str = "") -> tuple[str, Iterator]:
        if not self.inspect(ref).running:
            raise EngineError(f"running a command in {ref}: container {ref} is not running")
        pairs, code = self.execs(list(argv))
        exec_id = f"exec-{len(self.exec_codes) + 1}"
        self.exec_codes[exec_id] = code
        return exec_id, iter(list(pairs))

    def exec_socket(self, ref: str, argv: list[str], user: str):
        raise EngineError(f"starting a relay in {ref}: the fake engine has no exec socket")

    def exec_running(self, exec_id: str) -> bool:
        return False

    def exec_exit_code(self, exec_id: str) -> int:
        return self.exec_codes.get(exec_id, 0)
