"""STAND-IN model API for the stand-in agent (examples and tests only): answers POST /v1/complete
with a patch that adds NOTES-FROM-THE-MODEL.md, but only when the request carries the expected key
(`Authorization: Bearer $MODEL_API_EXPECTED_KEY`), like a real API. Logs one line per request,
never the key. Standard library sockets only (it runs on python3-minimal)."""

import os
import socket
import threading

EXPECTED = os.environ.get("MODEL_API_EXPECTED_KEY", "")


def patch(task: str) -> bytes:
    lines = ["# Notes from the model", f"Task: {task}"]
    body = "".join(f"+{line}\n" for line in lines)
    return (f"diff --git a/NOTES-FROM-THE-MODEL.md b/NOTES-FROM-THE-MODEL.md\nnew file mode 100644\n"
            f"--- /dev/null\n+++ b/NOTES-FROM-THE-MODEL.md\n@@ -0,0 +1,{len(lines)} @@\n{body}").encode()


def answer(conn: socket.socket, status: str, body: bytes) -> None:
    conn.sendall(f"HTTP/1.0 {status}\r\nContent-Type: text/plain\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body)


def serve(conn: socket.socket) -> None:
    with conn:
        data = b""
        while b"\r\n\r\n" not in data and len(data) < 65536:
            chunk = conn.recv(4096)
            if not chunk:
                return
            data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        lines = head.decode(errors="replace").split("\r\n")
        headers = {k.strip().lower(): v.strip() for k, _, v in (l.partition(":") for l in lines[1:])}
        length = int(headers.get("content-length", "0") or 0)
        while len(body) < length:
            chunk = conn.recv(65536)
            if not chunk:
                break
            body += chunk
        auth = "ok" if EXPECTED and headers.get("authorization") == f"Bearer {EXPECTED}" else "bad"
        task = next((l[5:] for l in body.decode(errors="replace").splitlines() if l.startswith("TASK ")), "")
        print(f"MODEL-API {lines[0]} auth={auth} host={headers.get('host', '')} task={task!r}", flush=True)
        if auth != "ok":
            answer(conn, "401 Unauthorized", b"missing or wrong API key\n")
        elif not lines[0].startswith("POST /v1/complete "):
            answer(conn, "404 Not Found", b"no such endpoint\n")
        else:
            answer(conn, "200 OK", patch(task))


sock = socket.socket()
sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
sock.bind(("0.0.0.0", int(os.environ.get("PORT", "80"))))
sock.listen(16)
print("READY", flush=True)
while True:
    threading.Thread(target=serve, args=(sock.accept()[0],), daemon=True).start()
