"""Grafana dashboards as code for moeperf, plus the Prometheus and Grafana files that go with them.

The dashboards are built with Grafana's ``grafana-foundation-sdk`` and committed as JSON under
``dashboards/json`` (``moeperf dashboards build`` regenerates them); every PromQL expression they
contain is run against a real Prometheus that scraped a real run by the integration tests.
"""
