#!/usr/bin/env bash
# Why does vLLM 0.26 not offer FlashInfer CUTLASS for per-tensor FP8 MoE with the bundle? Run on the H200
# machine from the repo root after the stash calls: prints FlashInfer's availability checks as vLLM makes
# them, then starts one engine (Mixtral-shaped FP8, 2 layers) with --moe-backend flashinfer_cutlass and
# reports what it says (its backend choice, or the error), and, if it serves, TTFT of a few requests.
# FP8_CHECKPOINT=none|per_tensor_static|block_128 (TinyMoeSpec.fp8_checkpoint; default none: bf16 weights
# quantised online), HEALTH_S (default 330). Output goes to $OUT/probe-flashinfer-$FP8_CHECKPOINT.log.
set -u
source "$(dirname "$0")/gpu-env.sh"
export FP8_CHECKPOINT=${FP8_CHECKPOINT:-none} HEALTH_S=${HEALTH_S:-330}
log=${OUT:-/tmp}/probe-flashinfer-$FP8_CHECKPOINT.log
python3 - >"$log" 2>&1 <<'PY'
import importlib, json, os, shutil, subprocess, sys, time, traceback, urllib.request
from pathlib import Path
print("nvcc:", shutil.which("nvcc"))
from vllm.utils import flashinfer as fi
for check in ("has_flashinfer", "has_flashinfer_cubin", "has_flashinfer_moe", "has_flashinfer_cutlass_fused_moe"):
    print(check, getattr(fi, check)())
for mod in ("flashinfer", "flashinfer.fused_moe"):
    try:
        importlib.import_module(mod); print("import", mod, "ok")
    except Exception:
        print("import", mod, "failed:"); traceback.print_exc(limit=3)
from cluster.engine.server import free_port
from modelgen.tiny_moe import TinyMoeSpec, ensure_tiny_model
spec = TinyMoeSpec(num_hidden_layers=2, hidden_size=4096, intermediate_size=14336, num_local_experts=8,
                   num_experts_per_tok=2, num_attention_heads=32, num_key_value_heads=8,
                   fp8_checkpoint=os.environ["FP8_CHECKPOINT"])
port = free_port("127.0.0.1")
argv = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(ensure_tiny_model(spec, Path("/tmp/probe"))),
        "--load-format", "dummy", "--port", str(port), "--host", "127.0.0.1", "--max-model-len", "2048",
        "--served-model-name", "m", "--dtype", "bfloat16", "--quantization", "fp8", "--moe-backend", "flashinfer_cutlass",
        "--enforce-eager", "--gpu-memory-utilization", "0.4"]
t0 = time.monotonic()
with open("/tmp/probe-engine.log", "w") as out:
    proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
healthy = False
while time.monotonic() - t0 < float(os.environ["HEALTH_S"]) and proc.poll() is None:
    try:
        healthy = urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2).status == 200
    except Exception:
        pass
    if healthy:
        break
    time.sleep(2)
print(f"engine healthy={healthy} rc={proc.poll()} after {time.monotonic() - t0:.0f} s")
if healthy:
    for n in (7, 100, 333, 1000, 100):
        body = json.dumps({"model": "m", "prompt": [5] * n, "max_tokens": 16, "ignore_eos": True}).encode()
        t = time.monotonic()
        urllib.request.urlopen(urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", body,
                               {"Content-Type": "application/json"}), timeout=300).read()
        print(f"prompt {n} tokens, 16 out: {time.monotonic() - t:.3f} s")
proc.terminate()
lines = Path("/tmp/probe-engine.log").read_text(errors="replace").splitlines()
keep = [l for l in lines if any(k in l for k in ("MoE", "moe", "FlashInfer", "flashinfer", "Error", "error", "JIT", "nvcc", "ninja", "Loading"))]
print("\n".join(keep[-60:]))
print("--- engine log tail ---")
print("\n".join(lines[-25:]))
PY
tail -c 8000 "$log"
