#!/usr/bin/env python3
"""A backend for the demo lab and the end-to-end tests.

    backend.py NAME [HTTP_PORT] [UDP_PORT]

HTTP/1.1 with keep-alive on HTTP_PORT (default 8080):
  GET /whoami        -> "NAME SOURCE_ADDRESS\n" (the address the backend saw:
                        the client's with DNAT, lbd's SNAT address with full-NAT)
  GET /bytes/N       -> N bytes of a fixed pattern (byte i is i*7 % 251)
  GET /slow/N        -> the same N bytes, 64 KiB every 50 ms (a long download)
UDP echo on UDP_PORT (default 5353): answers "NAME SOURCE_ADDRESS " + payload.
Both listen on IPv4 and IPv6; an IPv4 source is shown as such (10.0.0.1,
not ::ffff:10.0.0.1).
"""
import http.server
import socket
import sys
import threading
import time

NAME = sys.argv[1] if len(sys.argv) > 1 else "backend"
HTTP_PORT = int(sys.argv[2]) if len(sys.argv) > 2 else 8080
UDP_PORT = int(sys.argv[3]) if len(sys.argv) > 3 else 5353
PATTERN = bytes((i * 7) % 251 for i in range(251 * 256))
CHUNK = 64 * 1024


def source(addr):
    """An address as the peer sent it: IPv4-mapped IPv6 shown as IPv4."""
    return addr[7:] if addr.startswith("::ffff:") else addr


def dual_stack(kind):
    """A socket of `kind` for [::] that takes IPv4 too."""
    s = socket.socket(socket.AF_INET6, kind)
    s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
    return s


def pattern(n):
    """The first n bytes of the endless pattern, in chunks."""
    sent = 0
    while sent < n:
        start = sent % 251
        piece = PATTERN[start:start + min(CHUNK, n - sent)]
        sent += len(piece)
        yield piece


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self):
        parts = self.path.strip("/").split("/")
        if parts[0] == "whoami":
            body = f"{NAME} {source(self.client_address[0])}\n".encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        elif parts[0] in ("bytes", "slow") and len(parts) == 2 and parts[1].isdigit():
            n = int(parts[1])
            self.send_response(200)
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Content-Length", str(n))
            self.send_header("X-Backend", NAME)
            self.end_headers()
            for piece in pattern(n):
                self.wfile.write(piece)
                if parts[0] == "slow":
                    time.sleep(0.05)
        else:
            self.send_error(404)

    def log_message(self, *args):
        pass


def udp_echo(s):
    while True:
        data, addr = s.recvfrom(65535)
        s.sendto(f"{NAME} {source(addr[0])} ".encode() + data, addr)


# Bound here, before the HTTP server listens: a caller that waits for the
# HTTP port finds the UDP one ready too.
udp = dual_stack(socket.SOCK_DGRAM)
udp.bind(("::", UDP_PORT))
threading.Thread(target=udp_echo, args=(udp,), daemon=True).start()
class Server(http.server.ThreadingHTTPServer):
    address_family = socket.AF_INET6

    def server_bind(self):
        self.socket.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        super().server_bind()


server = Server(("::", HTTP_PORT), Handler)
server.daemon_threads = True
server.serve_forever()
