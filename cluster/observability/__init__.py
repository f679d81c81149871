"""Observability: the harness's own Prometheus endpoint, scrape targets and environment capture."""
