"""An engine's start error must survive the trip from the EngineActor to the driver (Ray pickles it)."""

from __future__ import annotations

import pickle

from cluster.engine.server import EngineStartError


def test_start_error_round_trips_with_reason_and_log_tail() -> None:
    err = pickle.loads(pickle.dumps(EngineStartError("engine exited with code 1 before healthy", "Traceback ...")))
    assert isinstance(err, EngineStartError)
    assert err.message == "engine exited with code 1 before healthy" and err.log_tail == "Traceback ..."
    assert str(err).startswith("engine exited with code 1 before healthy\n--- engine log (tail) ---")
