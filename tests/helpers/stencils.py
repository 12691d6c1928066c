"""The stencil programs ``benchmarks/stencils.py`` measures (``benchmarks/stencil_programs.py``),
loaded from the file itself: the tests compile the programs the benchmark times."""

from __future__ import annotations

import importlib.util
from pathlib import Path

_PATH = Path(__file__).resolve().parents[2] / "benchmarks" / "stencil_programs.py"
_spec = importlib.util.spec_from_file_location("stencil_programs", _PATH)
programs = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(programs)
