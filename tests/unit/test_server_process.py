"""Starting a server: errors that survive Ray's pickling, port clashes retried, early deaths reported.

The server here is a few lines of ``http.server`` with vLLM's health contract, so start, retry and
stop run for real (orphan guard, process group, log files) without loading a model.
"""

from __future__ import annotations

import os
import pickle
import socket
import sys
from pathlib import Path

import pytest

from cluster.engine.command import ServerCommand
from cluster.engine.server import EngineStartError, ServerProcess


def test_start_error_round_trips_with_reason_and_log_tail() -> None:
    err = pickle.loads(pickle.dumps(EngineStartError("engine exited with code 1 before healthy", "Traceback ...")))
    assert isinstance(err, EngineStartError)
    assert err.message == "engine exited with code 1 before healthy" and err.log_tail == "Traceback ..."
    assert str(err).startswith("engine exited with code 1 before healthy\n--- engine log (tail) ---")


# A stand-in for vLLM's API server with the same contract: bind the port, answer GET /health with 200.
HEALTH_SERVER = """
import http.server, sys
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200 if self.path == "/health" else 404); self.end_headers()
    def log_message(self, *a): pass
http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
"""


def _health_server(port: int) -> ServerCommand:
    return ServerCommand([sys.executable, "-c", HEALTH_SERVER, str(port)], {})


def test_a_port_taken_before_the_bind_is_retried_on_another_port(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        clash = taken.getsockname()[1]
        ports: list[int] = []

        def command(port: int) -> ServerCommand:
            ports.append(port)
            return _health_server(clash if len(ports) == 1 else port)  # the first start loses the race

        with ServerProcess(command, os.environ, tmp_path, "127.0.0.1") as server:
            server.wait_healthy(60, poll_interval_s=0.05)
            assert server.attempt == 1 and server.healthy() and server.port == ports[1]
            assert "Address already in use" in (tmp_path / "server-0.log").read_text()
            assert server.log_path == tmp_path / "server-1.log"
        assert server.poll() is not None


def test_a_server_that_dies_while_starting_is_not_retried(tmp_path: Path) -> None:
    def command(port: int) -> ServerCommand:
        return ServerCommand([sys.executable, "-c", "import sys; print('bad model'); sys.exit(3)"], {})

    with ServerProcess(command, os.environ, tmp_path, "127.0.0.1") as server:
        with pytest.raises(EngineStartError) as e:
            server.wait_healthy(60, poll_interval_s=0.05)
    assert server.attempt == 0 and "exited with code 3" in e.value.message and "bad model" in e.value.log_tail
