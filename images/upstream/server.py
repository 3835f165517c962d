"""Test upstream: answers HTTP on 80, 443 and 8443 (plain, also inside CONNECT tunnels) with its
name and the Host it was asked for; logs CONN and DNS lines for every contact (python3-minimal:
plain sockets and threads only)."""

import os
import socket
import threading

NAME = os.environ.get("UPSTREAM_NAME", "upstream")
PAYLOAD = int(os.environ.get("UPSTREAM_PAYLOAD", "0"))  # bytes served at /big


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
