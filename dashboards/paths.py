"""Where the committed dashboard JSON lives, apart from the code that generates it.

``moeperf dashboards check`` reads the committed JSON only; keeping its path out of ``generate`` lets the check
run where the Grafana SDK that generates the JSON is not installed (the H200 machine's bundle has no
grafana-foundation-sdk).
"""

from pathlib import Path

JSON_DIR = Path(__file__).resolve().parent / "json"
