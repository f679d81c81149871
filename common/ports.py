"""A free TCP port, for servers that must be told their port before they start (vLLM, Prometheus, stubs).

The port is free when returned and may be taken before the server binds it; callers that start a
server on it retry on a new port when the bind fails (see ``cluster.engine.server``).
"""

from __future__ import annotations

import socket


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])
