"""Test upstream: answers HTTP on 80, 443 and 8443 (plain, also inside CONNECT tunnels) with its
name and the Host it was asked for; logs CONN and DNS lines for every contact (python3-minimal:
plain sockets and threads only).

With UPSTREAM_OPEN_PROXY=1 it is also the careless proxy a weakened sandbox would have: it opens any
CONNECT tunnel and forwards absolute-URI requests to whatever the Host header names, but only to
addresses on its own (internal) network."""

import os
import socket
import threading

NAME = os.environ.get("UPSTREAM_NAME", "upstream")
PAYLOAD = int(os.environ.get("UPSTREAM_PAYLOAD", "0"))  # bytes served at /big
OPEN_PROXY = os.environ.get("UPSTREAM_OPEN_PROXY") == "1"


def resolve(host: str) -> tuple[str | None, bool]:
    """(address, is it us) for `host`; the address only if it is on this container's /16, so
    nothing outside our own network is ever contacted."""
    try:
        ip = socket.gethostbyname(host)
        own = socket.gethostbyname(socket.gethostname())
    except OSError:
        return None, False
    return (ip if ip.split(".")[:2] == own.split(".")[:2] else None), ip == own


def relay(a: socket.socket, b: socket.socket) -> None:
    def pump(src: socket.socket, dst: socket.socket) -> None:
        try:
            while chunk := src.recv(65536):
                dst.sendall(chunk)
        except OSError:
            pass
        finally:
            try:
                dst.shutdown(socket.SHUT_WR)
            except OSError:
                pass
    other = threading.Thread(target=pump, args=(b, a), daemon=True)
    other.start()
    pump(a, b)
    other.join()


def open_proxy(conn: socket.socket, method: str, target: str, host: str, data: bytes) -> bool:
    """Forward like a careless proxy would; False when this request is for us as an origin."""
    if method == "CONNECT":
        name, _, port = target.rpartition(":")
    elif target.startswith("http://"):
        name, _, port = host.partition(":")   # trusts the Host header, as a careless proxy does
        port = port or "80"
    else:
        return False
    ip, is_us = resolve(name)
    if is_us and method != "CONNECT":
        return False
    if ip is None:
        conn.sendall(b"HTTP/1.0 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n")
        return True
    print(f"PROXY {method} {name}:{port} -> {ip}", flush=True)
    with socket.create_connection((ip, int(port)), timeout=10) as out:
        if method == "CONNECT":
            conn.sendall(b"HTTP/1.0 200 Connection established\r\n\r\n")
        else:
            out.sendall(data)
        relay(conn, out)
    return True


def serve(conn: socket.socket, port: int, peer: str) -> None:
    with conn:
        print(f"CONN {port} {peer}", flush=True)
        data = b""
        while b"\r\n\r\n" not in data and len(data) < 65536:
            chunk = conn.recv(4096)
            if not chunk:
                break
            data += chunk
        lines = data.decode(errors="replace").split("\r\n")
        host = next((l.split(":", 1)[1].strip() for l in lines[1:] if l.lower().startswith("host:")), "")
        print(f"HTTP {port} {host} {lines[0]}", flush=True)
        parts = lines[0].split()
        if OPEN_PROXY and len(parts) > 1 and open_proxy(conn, parts[0], parts[1], host, data):
            return
        body = b"x" * PAYLOAD if len(parts) > 1 and parts[1].endswith("/big") else f"{NAME} {host} {port}\n".encode()
        conn.sendall(b"HTTP/1.0 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body))
        view = memoryview(body)
        for start in range(0, len(body), 1 << 20):
            conn.sendall(view[start:start + (1 << 20)])


def listen(port: int) -> None:
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("0.0.0.0", port))
    sock.listen(64)
    while True:
        conn, peer = sock.accept()
        threading.Thread(target=serve, args=(conn, port, peer[0]), daemon=True).start()


def dns() -> None:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("0.0.0.0", 53))
    while True:
        data, peer = sock.recvfrom(512)
        print(f"DNS {peer[0]} {data[12:40]!r}", flush=True)


for port in (80, 443, 8443):
    threading.Thread(target=listen, args=(port,), daemon=True).start()
print("READY", flush=True)
dns()
