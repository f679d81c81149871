"""cluster.observability.prom_targets: the file_sd file the driver keeps up to date as engines come and go."""

from __future__ import annotations

import json
import threading

import pytest

from cluster.observability.prom_targets import TargetsError, TargetsFile


def read(tf: TargetsFile) -> list[dict]:
    return json.loads(tf.path.read_text())


def test_add_remove_close(tmp_path):
    tf = TargetsFile(tmp_path / "sd" / "engines-r1.json", "r1")
    assert read(tf) == []  # an empty, valid file from the start: Prometheus never sees a missing one
    tf.add("baseline", "http://127.0.0.1:8001", {"node": "10.0.0.1"})
    tf.add("opt", "http://127.0.0.1:8002", {"node": "10.0.0.2"})
    assert read(tf) == [
        {"targets": ["127.0.0.1:8001"], "labels": {"run": "r1", "node": "10.0.0.1", "arm": "baseline"}},
        {"targets": ["127.0.0.1:8002"], "labels": {"run": "r1", "node": "10.0.0.2", "arm": "opt"}},
    ]
    tf.add("baseline", "http://127.0.0.1:9001", {"node": "10.0.0.1"})  # a restarted engine: new port
    tf.remove("opt")
    tf.remove("opt")  # stop paths run more than once
    assert read(tf) == [{"targets": ["127.0.0.1:9001"], "labels": {"run": "r1", "node": "10.0.0.1", "arm": "baseline"}}]
    tf.close()
    assert not tf.path.exists()
    assert list(tf.path.parent.iterdir()) == []  # no temporary files left


def test_scheme_and_path_become_prometheus_labels(tmp_path):
    tf = TargetsFile(tmp_path / "client-r.json", "r")
    tf.add_endpoint("driver", "https://10.1.2.3:9400/custom/metrics", {})
    (entry,) = read(tf)
    assert entry["targets"] == ["10.1.2.3:9400"]
    assert entry["labels"] == {"run": "r", "__scheme__": "https", "__metrics_path__": "/custom/metrics"}


@pytest.mark.parametrize("url", ["127.0.0.1:80", "ftp://h:1", "http://host", "http://:80"])
def test_bad_urls_are_refused(tmp_path, url):
    with pytest.raises(TargetsError):
        TargetsFile(tmp_path / "t.json", "r").add("a", url, {})


@pytest.mark.parametrize("label", ["bad-name", "__address__", "1x"])
def test_bad_labels_are_refused(tmp_path, label):
    with pytest.raises(TargetsError):
        TargetsFile(tmp_path / "t.json", "r").add("a", "http://h:1", {label: "v"})


def test_concurrent_writers_and_a_reader_never_see_a_partial_file(tmp_path):
    """Arms start in parallel threads; Prometheus may read at any moment: every read must be valid JSON."""
    tf = TargetsFile(tmp_path / "engines-r.json", "r")
    stop = threading.Event()
    bad: list[str] = []

    def reader() -> None:
        while not stop.is_set():
            text = tf.path.read_text()
            try:
                json.loads(text)
            except json.JSONDecodeError:
                bad.append(text)

    def writer(arm: str) -> None:
        for i in range(200):
            tf.add(arm, f"http://127.0.0.1:{1000 + i}", {"node": "n"})
            tf.remove(arm)

    r = threading.Thread(target=reader)
    r.start()
    writers = [threading.Thread(target=writer, args=(f"arm{i}",)) for i in range(4)]
    for w in writers:
        w.start()
    for w in writers:
        w.join()
    stop.set()
    r.join()
    assert bad == []
    assert read(tf) == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["engines-r.json"]
