"""The HTML report opened in a real headless Chromium (Debian's `chromium`): plots and tables render.

A probe script is appended to a copy of the page (the report itself has no script): after layout
it records the drawn size of every SVG series and table into the DOM, which --dump-dom prints.
The screenshot is checked for the arms' line colours, so the plots are really painted.
"""

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from analysis.report import load_result, write_report
from analysis.svg import PALETTE
from analysis.verdicts import AnalysisSettings

FIXTURE = Path(__file__).resolve().parents[1] / "unit" / "data" / "analysis_quick_cpu_result.json"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed (apt-get install -y chromium)"),
]

PROBE = """<script>
window.addEventListener('load', () => {
  const box = e => { const r = e.getBoundingClientRect(); return [Math.round(r.width), Math.round(r.height)]; };
  const out = {
    plots: [...document.querySelectorAll('svg.plot')].map(box),
    series: [...document.querySelectorAll('svg.plot polyline.series')].map(p => [p.dataset.arm, box(p)]),
    verdictRows: document.querySelectorAll('table.verdicts tbody tr').length,
    verdictTable: box(document.querySelector('table.verdicts')),
    armRows: document.querySelectorAll('table.arms tbody tr').length,
  };
  const pre = document.createElement('pre'); pre.id = 'probe'; pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
});
</script>"""


def _chromium(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    profile = tmp_path / f"profile-{len(list(tmp_path.glob('profile-*')))}"
    profile.mkdir()
    cmd = [
        CHROMIUM,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={profile}",
        *args,
    ]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    out = tmp_path_factory.mktemp("report")
    result = load_result(FIXTURE)
    write_report(result, out, formats=["html"], settings=AnalysisSettings(bootstrap_resamples=100))
    return out / "report.html", result


def test_plots_and_tables_are_laid_out(report, tmp_path):
    html_path, result = report
    probed = tmp_path / "probed.html"
    probed.write_text(html_path.read_text().replace("</body>", PROBE + "</body>"))
    r = _chromium(tmp_path, "--virtual-time-budget=5000", "--dump-dom", probed.as_uri())
    assert r.returncode == 0, r.stderr[-2000:]
    m = re.search(r'<pre id="probe">(.*?)</pre>', r.stdout, re.S)
    assert m, r.stdout[-2000:]
    probe = json.loads(m.group(1).replace("&quot;", '"'))
    assert len(probe["plots"]) == 3 and all(w > 300 and h > 200 for w, h in probe["plots"])
    arms = {a.name for a in result.arms}
    assert {arm for arm, _ in probe["series"]} == arms
    assert all(w > 10 for _, (w, _h) in probe["series"])  # every curve spans real width on the page
    assert probe["verdictRows"] == 14 and probe["verdictTable"][1] > 100
    assert probe["armRows"] == len(result.arms)


def test_screenshot_shows_the_arm_curves(report, tmp_path):
    from PIL import Image

    html_path, result = report
    shot = tmp_path / "report.png"
    r = _chromium(tmp_path, "--window-size=1340,2200", f"--screenshot={shot}", html_path.as_uri())
    assert r.returncode == 0 and shot.is_file(), r.stderr[-2000:]
    img = Image.open(shot).convert("RGB")
    colours = {c for _, c in img.getcolors(maxcolors=1 << 20)}
    for hex_colour in PALETTE[: len(result.arms)]:
        rgb = tuple(int(hex_colour[i : i + 2], 16) for i in (1, 3, 5))
        assert rgb in colours, f"no pixel of {hex_colour}: a curve was not painted"
