"""A run's Prometheus export (dashboards/README.md): the driver's client metrics and the engines' targets.

Kept apart from the driver because none of it may cost the run: an unwritable targets folder or
an unusable address turns the export off with a warning, and every method is a no-op then.
"""

from __future__ import annotations

import logging

import ray

from cluster.observability.client_metrics import ClientMetrics, node_label
from cluster.observability.prom_targets import TargetsFile
from experiment.config import ExperimentConfig
from workloads.records import RequestRecord

logger = logging.getLogger(__name__)


class RunMetrics:
    def __init__(self, cfg: ExperimentConfig, run_id: str) -> None:
        self.cfg, self.run_id = cfg, run_id
        self.client_metrics: ClientMetrics | None = None
        self.engine_targets: TargetsFile | None = None
        self.client_targets: TargetsFile | None = None

    def start(self) -> None:
        m = self.cfg.metrics
        if not m.enabled:
            return
        host = ray.util.get_node_ip_address() if m.listen_host == "node-ip" else m.listen_host
        try:
            labels = [lv.label() for lv in self.cfg.sweep.levels] if self.cfg.sweep is not None else []
            self.client_metrics = ClientMetrics(self.run_id, self.cfg.name, self.cfg.slo, labels)
            url = self.client_metrics.serve(host)
            self.client_targets = TargetsFile(m.targets_dir / f"client-{self.run_id}.json", self.run_id)
            self.client_targets.add_endpoint("driver", url, {})
            self.engine_targets = TargetsFile(m.targets_dir / f"engines-{self.run_id}.json", self.run_id)
        except OSError as e:
            logger.warning("Prometheus export off for this run: %s", e)
            self.stop()
            return
        self.client_metrics.run_active(True)
        logger.info("metrics: client metrics at %s, Prometheus targets in %s", url, m.targets_dir)

    def stop(self) -> None:
        """Wait (bounded) for a last scrape, so the run's final numbers reach Prometheus, then close."""
        if self.client_metrics is not None:
            self.client_metrics.run_active(False)
            self.client_metrics.wait_scraped(self.cfg.metrics.final_scrape_timeout_s)
            self.client_metrics.close()
        for t in (self.engine_targets, self.client_targets):
            if t is not None:
                t.close()
        self.client_metrics = self.engine_targets = self.client_targets = None

    def observe(self, record: RequestRecord, client_node_id: str) -> None:
        if self.client_metrics is not None:
            self.client_metrics.observe(record, node=node_label(client_node_id))

    def arm_active(self, arm: str, round_index: int, active: bool) -> None:
        if self.client_metrics is not None:
            self.client_metrics.arm_active(arm, round_index, active)

    def level_active(self, arm: str, level: str) -> None:
        if self.client_metrics is not None:
            self.client_metrics.level_active(arm, level)

    def engine_up(self, arm: str, url: str, node_id: str) -> None:
        if self.engine_targets is not None:
            try:
                self.engine_targets.add(arm, url, {"node": node_label(node_id)})
            except OSError as e:
                self._targets_lost(e)

    def engine_down(self, arm: str) -> None:
        if self.engine_targets is not None:
            try:
                self.engine_targets.remove(arm)
            except OSError as e:
                self._targets_lost(e)

    def _targets_lost(self, e: OSError) -> None:
        """The targets folder stopped taking writes mid-run (removed, full, read-only): the run goes on without
        engine targets, said once; Prometheus keeps the last file it read until the folder is back."""
        logger.warning("Prometheus engine targets off for the rest of this run: %s", e)
        self.engine_targets = None
