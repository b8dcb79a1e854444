"""Wire format between pool clients, the daemon and its workers: length-prefixed pickles.

Why pickle: jobs are Python callables plus arguments and results are arbitrary Python objects
(Inductor's CachingAutotuner). Pickle executes code on load, so the daemon only accepts peers of
its own uid on this node (SO_PEERCRED on the Unix socket) and the socket lives in a 0700
directory; workers talk to the daemon over inherited pipes only.

Frame: 8-byte big-endian length, then a pickle of one dict. Helpers take an optional absolute
deadline (time.monotonic()) so a hung peer cannot block a reader forever.
"""
from __future__ import annotations

import os
import pickle
import select
import socket
import struct
import time
from typing import Any

HEADER = struct.Struct("!Q")
MAX_FRAME = 1 << 31  # 2 GiB: a bigger frame means a corrupt stream, not a real job
PROTOCOL_VERSION = 1


class ProtocolError(Exception):
    """The peer sent something that is not a frame of this protocol (or closed mid-frame)."""


class PeerClosed(ProtocolError):
    """EOF at a frame boundary: the peer went away cleanly (or died between frames)."""


class DeadlineExceeded(Exception):
    """No complete frame arrived before the deadline."""


def encode(obj: Any) -> bytes:
    body = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    return HEADER.pack(len(body)) + body


def _wait_readable(fd: int, deadline: float | None) -> None:
    if deadline is None:
        return
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise DeadlineExceeded()
        ready, _, _ = select.select([fd], [], [], min(left, 1.0))
        if ready:
            return


def _read_exact_fd(fd: int, n: int, deadline: float | None, at_boundary: bool) -> bytes:
    chunks: list[bytes] = []
    got = 0
    while got < n:
        _wait_readable(fd, deadline)
        chunk = os.read(fd, min(n - got, 1 << 20))
        if not chunk:
            if at_boundary and got == 0:
                raise PeerClosed("peer closed the stream")
            raise ProtocolError(f"stream ended after {got} of {n} bytes")
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def read_frame_fd(fd: int, deadline: float | None = None) -> Any:
    """Read one frame from a pipe or socket file descriptor."""
    (size,) = HEADER.unpack(_read_exact_fd(fd, HEADER.size, deadline, at_boundary=True))
    if size > MAX_FRAME:
        raise ProtocolError(f"frame of {size} bytes exceeds the {MAX_FRAME} byte limit")
    body = _read_exact_fd(fd, size, deadline, at_boundary=False)
    return pickle.loads(body)


def write_frame_fd(fd: int, obj: Any) -> None:
    view = memoryview(encode(obj))
    while view:
        written = os.write(fd, view)
        view = view[written:]


def send(sock: socket.socket, obj: Any) -> None:
    sock.sendall(encode(obj))


def recv(sock: socket.socket, deadline: float | None = None) -> Any:
    return read_frame_fd(sock.fileno(), deadline)


def peer_uid(sock: socket.socket) -> int:
    """The uid of the process at the other end of a connected Unix socket (Linux SO_PEERCRED)."""
    creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    _pid, uid, _gid = struct.unpack("3i", creds)
    return uid
