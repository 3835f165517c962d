"""The one module that imports `docker` (lazily: it costs ~0.3 s) and maps its errors."""

from __future__ import annotations

import io
import threading
from contextlib import contextmanager
from typing import Callable, Iterator

from launcher import labels as label
from launcher.errors import EngineError, NotFound
from launcher.execsocket import ExecSocket
from launcher.streams import Attached
from launcher.plan import ContainerSpec, MountKind
from launcher.egress.squid import NetworkSpec, ProxySpec, proxy_env

MANAGED = label.MANAGED_SELECTOR


@contextmanager
def _mapped(action: str) -> Iterator[None]:
    import docker.errors
    import requests.exceptions

    try:
        yield
    except docker.errors.NotFound as exc:
        raise NotFound(f"{action}: {exc.explanation or exc}") from None
    except docker.errors.APIError as exc:
        raise EngineError(f"{action}: {exc.explanation or exc}") from None
    except (docker.errors.DockerException, requests.exceptions.RequestException, OSError) as exc:
        raise EngineError(f"{action}: {exc}") from None


def _over(path: str, limit: int):
    raise EngineError(f"reading {path}: over {limit} bytes; refused rather than held in memory")


def connect() -> "Engine":
    """Connect to the engine the environment points at (DOCKER_HOST or the default socket)."""
    try:
        import docker
    except ImportError as exc:  # pragma: no cover - a broken install
        raise EngineError(f"the docker Python package is missing: {exc}") from None
    try:
        client = docker.from_env(timeout=300)   # asks the engine its API version: no ping needed
    except Exception as exc:  # noqa: BLE001 - every failure here means "no engine"
        raise EngineError(
            f"cannot reach the Docker engine ({exc.__class__.__name__}: {exc}).\n"
            "    hint: start it (for example `sudo dockerd &` or `systemctl start docker`) "
            "and check `docker info`") from None
    return Engine(client)


def _log_config(options: tuple[tuple[str, str], ...]):
    import docker.types

    return docker.types.LogConfig(type="json-file", config=dict(options))


class Engine:
    """Thin wrapper over the Docker SDK: typed inputs, mapped errors, nothing else."""

    def __init__(self, client):
        self.client = client

    def version(self) -> dict:
        with _mapped("reading the engine version"):
            return self.client.version()

    def info(self) -> dict:
        with _mapped("reading the engine's system information"):
            return self.client.info()

    # images
    def image_exists(self, ref: str) -> bool:
        import docker.errors

        with _mapped(f"inspecting image {ref}"):
            try:
                self.client.api.inspect_image(ref)
                return True
            except docker.errors.ImageNotFound:
                return False

    def image_labels(self, ref: str) -> dict:
        with _mapped(f"inspecting image {ref}"):
            return self.client.api.inspect_image(ref)["Config"].get("Labels") or {}

    def image_digests(self, ref: str) -> dict:
        """The image's ID (the digest of its config) and its registry digests, if any."""
        with _mapped(f"inspecting image {ref}"):
            attrs = self.client.api.inspect_image(ref)
        return {"id": attrs.get("Id", ""), "repo_digests": list(attrs.get("RepoDigests") or [])}

    def image_env(self, ref: str) -> list[str]:
        with _mapped(f"inspecting image {ref}"):
            return self.client.api.inspect_image(ref)["Config"].get("Env") or []

    def pull(self, ref: str) -> None:
        with _mapped(f"pulling {ref}"):
            self.client.images.pull(ref)

    def build(self, context: str, tag: str, labels: dict, on_line: Callable[[str], None],
              buildargs: dict[str, str] | None = None) -> None:
        with _mapped(f"building {tag}"):
            for chunk in self.client.api.build(path=context, tag=tag, labels=labels, rm=True,
                                               forcerm=True, pull=False, decode=True,
                                               buildargs=buildargs or None):
                if "error" in chunk:
                    raise EngineError(f"building {tag} failed: {chunk['error'].strip()}")
                text = chunk.get("stream", "").rstrip()
                if text:
                    on_line(text)

    def import_tar(self, path: str, repository: str, tag: str) -> None:
        with _mapped(f"importing {repository}:{tag}"):
            self.client.api.import_image_from_file(path, repository=repository, tag=tag)

    # volumes
    def volume_labels(self, name: str) -> dict | None:
        """The volume's labels, or None when there is no such volume."""
        import docker.errors

        with _mapped(f"inspecting volume {name}"):
            try:
                return self.client.api.inspect_volume(name).get("Labels") or {}
            except docker.errors.NotFound:
                return None

    def fill_volume(self, name: str, image: str, path: str, labels: dict) -> None:
        """Create a volume holding the content of `path` in `image` (Docker copies it on first use)."""
        import docker.types

        with _mapped(f"creating volume {name}"):
            self.client.volumes.create(name=name, labels=labels)
            try:
                self.client.containers.run(image, command=[f"{path}/busybox", "true"], remove=True,
                                           network_mode="none", labels=labels,
                                           mounts=[docker.types.Mount(path, name, type="volume")])
            except BaseException:   # Ctrl-C too: an empty volume of ours would be taken as filled
                self.client.api.remove_volume(name, force=True)
                raise

    def create_volume(self, name: str, labels: dict, options: dict | None = None) -> dict:
        """A local volume (its `docker volume inspect`); `options`: the local driver's mount options."""
        with _mapped(f"creating volume {name}"):
            return self.client.api.create_volume(name, driver="local", driver_opts=options or None, labels=labels)

    def volume_info(self, name: str) -> dict | None:
        """`docker volume inspect` (Labels, Mountpoint, Options), or None when there is none."""
        import docker.errors

        with _mapped(f"inspecting volume {name}"):
            try:
                return self.client.api.inspect_volume(name)
            except docker.errors.NotFound:
                return None

    def list_volumes(self, *filters: str) -> list[dict]:
        with _mapped("listing volumes"):
            return self.client.api.volumes(filters={"label": [MANAGED, *filters]}).get("Volumes") or []

    def remove_volume(self, name: str) -> None:
        with _mapped(f"removing volume {name}"):
            self.client.api.remove_volume(name, force=True)

    # containers
    def create(self, spec: ContainerSpec) -> str:
        import docker.types

        mounts, tmpfs = [], {}
        for m in spec.mounts:
            if m.owned_tmpfs:   # HostConfig.Tmpfs: the Mount API cannot set the owner
                tmpfs[m.target] = m.tmpfs_options
            elif m.kind is MountKind.TMPFS:
                mounts.append(docker.types.Mount(m.target, None, type="tmpfs", read_only=m.read_only,
                                                 tmpfs_size=m.size_bytes))
            else:
                mounts.append(docker.types.Mount(m.target, m.source, type=m.kind.value, read_only=m.read_only,
                                                 no_copy=m.no_copy))
        with _mapped(f"creating container {spec.name}"):
            container = self.client.containers.create(
                spec.image, name=spec.name, command=list(spec.command), entrypoint=list(spec.entrypoint),
                user=spec.user, environment=[f"{k}={v}" for k, v in spec.env], working_dir=spec.working_dir,
                labels=dict(spec.labels), hostname=spec.hostname, mounts=mounts, tmpfs=tmpfs or None,
                network_mode=spec.network_mode,
                read_only=spec.read_only_root, cap_drop=list(spec.cap_drop), cap_add=list(spec.cap_add) or None,
                security_opt=list(spec.security_opt), pids_limit=spec.pids_limit, mem_limit=spec.memory_bytes,
                memswap_limit=spec.memory_bytes, nano_cpus=spec.nano_cpus, devices=list(spec.devices) or None,
                pid_mode=spec.pid_mode or None, dns=list(spec.dns) or None, group_add=list(spec.group_add) or None,
                log_config=_log_config(spec.log_options), runtime=spec.runtime, stdin_open=False, tty=False)
            return container.id

    def create_proxy(self, spec: ProxySpec, secrets: dict[str, str] | None = None,
                     egress_ready: Callable[[], None] = lambda: None) -> str:
        """The egress proxy: unprivileged, read-only root, no capabilities, on both networks.
        `secrets`: the injected secrets' values, for this container's environment only.
        `egress_ready`: returns once the egress network exists (it is joined after the create)."""
        api = self.client.api
        with _mapped(f"creating proxy {spec.name}"):
            host_config = api.create_host_config(
                read_only=True, cap_drop=["ALL"], security_opt=["no-new-privileges"], network_mode=spec.internal_network,
                tmpfs={path: spec.scratch_options for path in spec.scratch_dirs},
                pids_limit=spec.pids_limit, mem_limit=spec.memory_bytes, memswap_limit=spec.memory_bytes,
                log_config=_log_config(spec.log_options))
            networking = api.create_networking_config(
                {spec.internal_network: api.create_endpoint_config(aliases=[spec.alias])})
            ref = api.create_container(
                spec.image, name=spec.name, user=spec.user, labels=dict(spec.labels), host_config=host_config,
                networking_config=networking,
                environment={**proxy_env(spec), **(secrets or {})})["Id"]
        egress_ready()
        with _mapped(f"connecting proxy {spec.name} to {spec.egress_network}"):
            api.connect_container_to_network(ref, spec.egress_network)
            return ref

    def logs(self, ref: str, stdout: bool = True, stderr: bool = False) -> str:
        with _mapped(f"reading the logs of {ref}"):
            return self.client.api.logs(ref, stdout=stdout, stderr=stderr).decode(errors="replace")

    # networks
    def create_network(self, spec: NetworkSpec, subnet: str = "") -> bool:
        """False when `subnet` overlaps another network's (then nothing was created)."""
        import docker.errors
        import docker.types

        ipam = docker.types.IPAMConfig(pool_configs=[docker.types.IPAMPool(subnet=subnet)]) if subnet else None
        with _mapped(f"creating network {spec.name}"):
            try:
                self.client.api.create_network(spec.name, driver="bridge", internal=spec.internal, ipam=ipam,
                                               options=dict(spec.options), labels=dict(spec.labels),
                                               check_duplicate=True)
            except docker.errors.APIError as exc:
                if subnet and "overlaps" in str(exc.explanation or exc):
                    return False
                raise
        return True

    def remove_network(self, name: str) -> None:
        import docker.errors

        with _mapped(f"removing network {name}"):
            try:
                self.client.api.remove_network(name)
            except docker.errors.NotFound:
                pass

    def list_networks(self, *filters: str) -> list[dict]:
        with _mapped("listing networks"):
            return self.client.api.networks(filters={"label": [MANAGED, *filters]})

    def inspect(self, ref: str) -> dict:
        with _mapped(f"inspecting container {ref}"):
            return self.client.api.inspect_container(ref)

    def start(self, ref: str) -> None:
        with _mapped(f"starting container {ref}"):
            self.client.api.start(ref)

    def output(self, ref: str) -> Iterator[tuple[bytes | None, bytes | None]]:
        """(stdout, stderr) chunks until the container exits; attach before starting it."""
        with _mapped(f"attaching to {ref}"):
            return self.client.api.attach(ref, stdout=True, stderr=True, stream=True, logs=True, demux=True)

    def wait(self, ref: str) -> int:
        with _mapped(f"waiting for {ref}"):
            return int(self.client.api.wait(ref)["StatusCode"])

    @contextmanager
    def run_attached(self, spec: ContainerSpec, timeout: float) -> Iterator["Attached"]:
        """Create and start a short-lived container and yield its output as it comes (attached, so
        binary output arrives intact and unbounded by the log driver; nothing is buffered whole).
        Killed once `timeout` seconds pass; always removed. After a block that ran to its end, the
        yielded object has the exit code."""
        ref = self.create(spec)
        try:
            run = Attached(self.output(ref), _mapped)
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

    def _kill_late(self, ref: str, run: "Attached") -> None:
        run.timed_out = True
        try:
            self.client.api.kill(ref)
        except Exception:  # noqa: BLE001 - it ended meanwhile; the removal after the block cleans up anyway
            pass

    def read_file(self, ref: str, path: str, limit: int) -> bytes | None:
        """The regular file at `path` of a container (created is enough: the engine mounts its
        volumes for the archive API), None when there is none or it is not a regular file;
        EngineError beyond `limit` bytes (nothing more is read)."""
        import tarfile

        def regular(info: dict) -> bool:   # no Go file type bits: not a directory, link, device...
            return not info.get("mode", 0) & 0xFFF00000 and (info.get("size", 0) <= limit or _over(path, limit))

        data = self.archive_head(ref, path, limit + (64 << 10) + 1, regular)
        if data is None:
            return None
        if len(data) > limit + (64 << 10):    # the tar's headers and padding, then the bound
            _over(path, limit)
        with tarfile.open(fileobj=io.BytesIO(data)) as tar:
            member = tar.next()
            if member is None or not member.isreg() or member.size > limit:
                return None
            return tar.extractfile(member).read()

    def put_archive(self, ref: str, path: str, chunks: Iterator[bytes]) -> None:
        """Unpack the tar `chunks` stream at `path` of a container (created is enough)."""
        with _mapped(f"writing into {path} of {ref}"):
            self.client.api.put_archive(ref, path, chunks)

    def archive_head(self, ref: str, path: str, limit: int, wanted: Callable[[dict], bool] = lambda _: True) -> bytes | None:
        """The first `limit` bytes of the tar the engine makes of `path` (all of it if shorter),
        None when there is no such path or `wanted` refuses its stat; nothing more is read."""
        import docker.errors

        with _mapped(f"reading {path} of {ref}"):
            try:
                stream, info = self.client.api.get_archive(ref, path, chunk_size=1 << 16)
            except docker.errors.NotFound:
                return None
            if not wanted(info):
                return None
            data = b""
            for chunk in stream:
                data += chunk
                if len(data) >= limit:
                    break
            return data[:limit]

    def exists(self, ref: str, path: str) -> bool:
        """Whether `path` exists in a container (a stat: HEAD of the archive API, no tar is made)."""
        api = self.client.api
        with _mapped(f"looking at {path} of {ref}"):
            answer = api.head(api._url("/containers/{0}/archive", ref), params={"path": path})
            if answer.status_code not in (200, 404):
                answer.raise_for_status()
            return answer.status_code == 200

    def pause(self, ref: str) -> None:
        with _mapped(f"pausing {ref}"):
            self.client.api.pause(ref)

    def unpause(self, ref: str) -> None:
        with _mapped(f"unpausing {ref}"):
            self.client.api.unpause(ref)

    def stop(self, ref: str, grace: int) -> None:
        with _mapped(f"stopping {ref}"):
            self.client.api.stop(ref, timeout=grace)

    def remove(self, ref: str) -> None:
        import docker.errors

        with _mapped(f"removing {ref}"):
            try:
                self.client.api.remove_container(ref, force=True, v=True)
            except docker.errors.NotFound:
                pass

    def list(self, *filters: str) -> list[dict]:
        with _mapped("listing sandboxes"):
            return self.client.api.containers(all=True, filters={"label": [MANAGED, *filters]})

    def exec_stream(self, ref: str, argv: list[str], user: str = "") -> tuple[str, Iterator]:
        with _mapped(f"running a command in {ref}"):
            exec_id = self.client.api.exec_create(ref, argv, stdout=True, stderr=True, user=user)["Id"]
            return exec_id, self.client.api.exec_start(exec_id, stream=True, demux=True)

    def exec_socket(self, ref: str, argv: list[str], user: str) -> tuple[str, "ExecSocket"]:
        """Start `argv` in the running container `ref` as `user`, unprivileged, with no terminal (bytes
        pass unchanged), on a socket. Output written before it was sent anything may stay in the
        HTTP reader's buffer and be lost: have it wait for input."""
        with _mapped(f"starting a relay in {ref}"):
            exec_id = self.client.api.exec_create(ref, argv, stdin=True, stdout=True, stderr=True, tty=False,
                                                  privileged=False, user=user)["Id"]
            return exec_id, ExecSocket(self.client.api.exec_start(exec_id, socket=True))

    def exec_running(self, exec_id: str) -> bool:
        with _mapped("inspecting a relay"):
            return bool(self.client.api.exec_inspect(exec_id)["Running"])

    def exec_exit_code(self, exec_id: str) -> int:
        with _mapped("reading the exit code"):
            return int(self.client.api.exec_inspect(exec_id)["ExitCode"] or 0)
