#!/usr/bin/env python
"""Run every benchmark script in ``benchmarks/`` (``make bench``), one after the other.

``cpu.py`` runs first, then the other scripts in name order; helpers (``common.py``, this file,
names starting with ``_``) are not scripts. Each script runs in its own process, so one that
crashes does not stop the others; the exit status is non-zero when any script failed.

    .venv/bin/python benchmarks/run.py                  # all scripts, full size
    .venv/bin/python benchmarks/run.py --quick          # --quick to the scripts that take it
    .venv/bin/python benchmarks/run.py --scripts cpu    # only benchmarks/cpu.py
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
NOT_SCRIPTS = {"run.py", "common.py", "__init__.py", "conftest.py"}


def scripts() -> list[Path]:
    found = [
        p
        for p in HERE.glob("*.py")
        if p.name not in NOT_SCRIPTS and not p.name.startswith(("_", "test_"))
    ]
    return sorted(found, key=lambda p: (p.name != "cpu.py", p.name))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="pass --quick to scripts that take it")
    ap.add_argument("--scripts", help="comma-separated script names (without .py) to run")
    ap.add_argument("--timeout", type=float, help="seconds allowed per script")
    opts = ap.parse_args(argv)

    todo = scripts()
    if opts.scripts:
        wanted = {s.strip().removesuffix(".py") for s in opts.scripts.split(",") if s.strip()}
        missing = wanted - {p.stem for p in todo}
        if missing:
            ap.error(f"no such script(s): {', '.join(sorted(missing))}")
        todo = [p for p in todo if p.stem in wanted]

    summary = []
    for path in todo:
        cmd = [sys.executable, str(path)]
        if opts.quick and '"--quick"' in path.read_text():
            cmd.append("--quick")
        print(f"\n==== {path.name}: {' '.join(cmd[1:])}", flush=True)
        t0 = time.perf_counter()
        try:
            rc = subprocess.run(cmd, timeout=opts.timeout).returncode
        except subprocess.TimeoutExpired:
            rc = "timeout"
        summary.append((path.name, rc, time.perf_counter() - t0))

    print("\n==== benchmarks")
    for name, rc, dt in summary:
        what = {0: "ok", 3: "WRONG ANSWERS (see its output)"}.get(rc, f"failed ({rc})")
        print(f"{name:20s} {what:32s} {dt:7.0f} s")
    return 0 if all(rc == 0 for _, rc, _ in summary) else 1


if __name__ == "__main__":
    sys.exit(main())
