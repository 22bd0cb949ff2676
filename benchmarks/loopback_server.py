"""A small, fast HTTP/1.1 server for the load-generator benchmarks (loopback only).

    python benchmarks/loopback_server.py [--stall-every S --stall-for S] [--cpu N]

asyncio with a bare protocol (no framework): keep-alive, answers every request
``200`` with a 2-byte body as soon as its head (and Content-Length body) has
arrived, so one core serves tens of thousands of requests per second and the
generator, not the server, is what a benchmark measures. With ``--stall-every``
it stops answering for ``--stall-for`` seconds at the end of every period
(requests that arrive meanwhile are answered when the stall ends), measured
from its start. Prints one line ``LISTENING <port> <start epoch ns>`` when ready;
SIGTERM stops it.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import socket
import time

RESPONSE = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Type: text/plain\r\n\r\nok"


class StallClock:
    """Stall windows [start + k*every + (every - stall_for), start + (k+1)*every)."""

    def __init__(self, start_ns: int, every_s: float, stall_s: float):
        self.start_ns, self.every_ns, self.stall_ns = start_ns, int(every_s * 1e9), int(stall_s * 1e9)

    def release_in_s(self, now_ns: int) -> float:
        """Seconds until the current stall ends; 0 outside a stall."""
        if not self.every_ns:
            return 0.0
        phase = (now_ns - self.start_ns) % self.every_ns
        return (self.every_ns - phase) / 1e9 if phase >= self.every_ns - self.stall_ns else 0.0


class HttpProtocol(asyncio.Protocol):
    def __init__(self, stall: StallClock):
        self.stall = stall
        self.buffer = b""
        self.transport = None

    def connection_made(self, transport):
        self.transport = transport
        transport.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while True:
            head_end = self.buffer.find(b"\r\n\r\n")
            if head_end < 0:
                return
            length = 0
            for line in self.buffer[:head_end].split(b"\r\n")[1:]:
                if line[:15].lower() == b"content-length:":
                    length = int(line[15:])
            end = head_end + 4 + length
            if len(self.buffer) < end:
                return
            self.buffer = self.buffer[end:]
            delay = self.stall.release_in_s(time.time_ns())
            if delay > 0:
                asyncio.get_running_loop().call_later(delay, self._answer)
            else:
                self.transport.write(RESPONSE)

    def _answer(self) -> None:
        if not self.transport.is_closing():
            self.transport.write(RESPONSE)


async def serve_until_sigterm(protocol_factory, port: int, *, backlog: int, announce: str = "") -> None:
    """Serve ``protocol_factory`` on 127.0.0.1:``port`` (0: a free port) until SIGTERM, printing
    ``LISTENING <port>[ <announce>]`` once listening. Shared by the benchmarks' loopback servers."""
    loop = asyncio.get_running_loop()
    server = await loop.create_server(protocol_factory, "127.0.0.1", port, backlog=backlog)
    stop = asyncio.Event()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    print(f"LISTENING {server.sockets[0].getsockname()[1]}" + (f" {announce}" if announce else ""), flush=True)
    async with server:
        await stop.wait()


async def serve(port: int, stall: StallClock) -> None:
    await serve_until_sigterm(lambda: HttpProtocol(stall), port, backlog=1024, announce=str(stall.start_ns))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--stall-every", type=float, default=0.0)
    parser.add_argument("--stall-for", type=float, default=0.0)
    parser.add_argument("--cpu", type=int, default=None, help="pin to this CPU")
    args = parser.parse_args()
    if args.cpu is not None:
        os.sched_setaffinity(0, {args.cpu})
    asyncio.run(serve(args.port, StallClock(time.time_ns(), args.stall_every, args.stall_for)))


if __name__ == "__main__":
    main()
