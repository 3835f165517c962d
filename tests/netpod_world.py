"""What a Pod must not reach, on the closed test network (tests/podman_closed.py): accepts TCP on
the given ports on every address of its container and answers every DNS query on UDP 53 of the
address given with --dns (NXDOMAIN: any reply shows a resolver is reachable). Standard library
only; run by python3 in the agent image, never with a sandbox."""

import socket
import sys
import threading


def tcp(port: int) -> None:
    server = socket.create_server(("0.0.0.0", port), backlog=64)
    while True:
        conn, _ = server.accept()
        conn.close()


IP_FREEBIND = 15   # <linux/in.h>: the address is added to the container after it starts


def dns(address: str) -> None:
    # Bound to the address itself: a resolver's reply must come from the address asked (nslookup's
    # socket is connected), which a socket on 0.0.0.0 would not send it from.
    server = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    server.setsockopt(socket.IPPROTO_IP, IP_FREEBIND, 1)
    server.bind((address, 53))
    while True:
        query, peer = server.recvfrom(512)
        if len(query) >= 12:
            # the query's id and question, flagged as a response with rcode NXDOMAIN
            server.sendto(query[:2] + b"\x81\x83" + query[4:6] + b"\x00\x00\x00\x00\x00\x00" + query[12:], peer)


if __name__ == "__main__":
    args = sys.argv[1:]
    resolver = args[args.index("--dns") + 1]
    for port in map(int, args[:args.index("--dns")]):
        threading.Thread(target=tcp, args=(port,), daemon=True).start()
    threading.Thread(target=dns, args=(resolver,), daemon=True).start()
    print("listening", flush=True)
    threading.Event().wait()
