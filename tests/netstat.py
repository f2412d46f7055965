"""Listening TCP sockets of a process tree, from /proc (no psutil needed)."""
from __future__ import annotations

import ipaddress
import os
import re
from pathlib import Path


def _address(hex_ip: str) -> str:
    """/proc/net/tcp{,6} hex (32-bit words in host order, little-endian here) -> text address."""
    raw = bytes.fromhex(hex_ip)
    swapped = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))
    address = ipaddress.ip_address(swapped)
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped:
        address = address.ipv4_mapped
    return str(address)


def listening() -> dict[int, tuple[str, int]]:
    """socket inode -> (local address, port) of every listening TCP socket."""
    out = {}
    for name in ("tcp", "tcp6"):
        for line in Path(f"/proc/net/{name}").read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] != "0A":  # LISTEN
                continue
            ip, port = fields[1].split(":")
            out[int(fields[9])] = (_address(ip), int(port, 16))
    return out


def descendants(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            children.setdefault(int(stat[stat.rindex(")") + 2:].split()[1]), []).append(int(entry.name))
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo += children.get(pid, [])
    return out


def sockets_of(pids: list[int]) -> list[dict]:
    """[{pid, name, address, port, environ}] for each listening socket held by one of ``pids``."""
    table, rows = listening(), []
    for pid in pids:
        try:
            fds = list(Path(f"/proc/{pid}/fd").iterdir())
            name = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].decode(errors="replace")
            environ = dict(kv.split("=", 1) for kv in Path(f"/proc/{pid}/environ").read_bytes().decode(
                errors="replace").split("\0") if "=" in kv)
        except OSError:
            continue
        for fd in fds:
            try:
                m = re.fullmatch(r"socket:\[(\d+)\]", os.readlink(fd))
            except OSError:
                continue
            if m and int(m.group(1)) in table:
                address, port = table[int(m.group(1))]
                rows.append({"pid": pid, "name": name, "address": address, "port": port, "environ": environ})
    return rows
