"""The benchmarks run at a tiny size and write their figures (no time is asserted)."""

import subprocess
import sys

from tests.conftest import ROOT


def test_trial_startup_benchmark_writes_its_table(tmp_path):
    out = tmp_path / "bench.md"
    proc = subprocess.run([sys.executable, "benchmarks/trial_startup.py", "--trials", "2", "--skip-ddp",
                           "--output", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    text = out.read_text()
    assert "## Per-trial start-up cost" in text
    rows = [line for line in text.splitlines() if line.startswith("| single process")]
    assert len(rows) == 2 and {"| on |" in r for r in rows} == {True, False}
