"""Who may import whom (docs/architecture.md), checked by importing every module of a package.

Each package is imported in a fresh interpreter, so a forbidden import anywhere below it, direct or
transitive, shows up in ``sys.modules``. A rule broken here is a design change: update the
architecture document with it, or move the code.
"""

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

FORBIDDEN = {
    # package: top-level modules that must not be loaded by importing all of it
    "common": ("ray", "cluster", "vllm", "torch", "workloads", "moe_opt", "analysis", "experiment"),
    "workloads": ("ray", "cluster", "moe_opt", "vllm"),
    "experiment": ("ray", "cluster", "vllm"),
    "result_format": ("ray", "cluster", "vllm"),
    "modelgen": ("ray", "cluster", "vllm"),
    "analysis": ("ray", "cluster", "vllm"),
    "moe_opt.kernels": ("ray", "cluster", "pydantic", "vllm"),
    "moe_opt.plugin": ("ray", "cluster"),
    "moe_opt.tune": ("ray", "cluster", "vllm"),  # vLLM only when a tune runs: the driver imports tune.folder
}


def _import_all_and_list_forbidden(package: str, forbidden: tuple[str, ...]) -> subprocess.CompletedProcess[str]:
    code = (
        "import importlib, pkgutil, sys\n"
        f"pkg = importlib.import_module({package!r})\n"
        "for m in pkgutil.walk_packages(pkg.__path__, pkg.__name__ + '.'):\n"
        "    importlib.import_module(m.name)\n"
        f"bad = sorted(m for m in sys.modules if m.split('.')[0] in {forbidden!r})\n"
        "print(bad); sys.exit(1 if bad else 0)\n"
    )
    return subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_package_imports_nothing_it_must_not(package):
    r = _import_all_and_list_forbidden(package, FORBIDDEN[package])
    assert r.returncode == 0, f"{package} pulls in {r.stdout.strip()}\n{r.stderr[-2000:]}"


def test_the_checker_sees_a_forbidden_import():
    # cluster imports Ray: the same check must fail for it, or the tests above prove nothing.
    r = _import_all_and_list_forbidden("cluster.orchestration", ("ray",))
    assert r.returncode == 1 and "ray" in r.stdout


def test_collecting_the_gpu_tests_imports_no_triton():
    # tests/gpu is collected before tests/kernels, whose conftest can switch Triton to its CPU interpreter only
    # while Triton is not imported yet; else, without a GPU, every kernel test is skipped (seen 2026-12-02: a
    # module-level importorskip("vllm") in tests/gpu/test_gpu_tune.py skipped 72 of them in the full suite).
    r = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--collect-only", "-q", "tests/gpu", "-o",
         "addopts=", "-p", "tests.unit.triton_probe"],
        cwd=REPO, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert "triton imported: False" in r.stdout, r.stdout[-2000:]
