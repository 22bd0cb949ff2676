"""Reading and parsing small kernel files (/proc, sysfs, cgroupfs): what samplers and fault injectors share.

A leaf module (it imports nothing from tailscope): the signal samplers read these
files every tick, the fault injectors read them to set up and verify a fault.
"""

from __future__ import annotations

import os

#: Bytes asked for per read(2); kernel files larger than this take more reads.
READ_CHUNK = 64 * 1024


def read_text(path: str) -> str:
    """Read a small kernel file with one open/read/close (no buffering layers)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        chunks = []
        while data := os.read(fd, READ_CHUNK):
            chunks.append(data)
        return b"".join(chunks).decode("ascii", "replace")
    finally:
        os.close(fd)


def parse_key_value_lines(text: str) -> dict[str, int]:
    """Parse ``key value`` lines (cpu.stat, vmstat, memory.events) into ints.

    Lines that do not have exactly an integer second field are skipped, so a
    kernel that adds a differently-shaped line does not break the parse.
    """
    out: dict[str, int] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].lstrip("-").isdigit():
            out[parts[0]] = int(parts[1])
    return out
