"""What must hold on every x86-64 CPU, checked on the CPU at hand and on an AVX2-only one.

On an AVX-512 machine, the CPU-sensitive tests run once more in a fresh interpreter as if on an
AVX2-only CPU (AMD EPYC Zen 2/3, Intel Haswell class): NumPy's dispatch without its AVX-512
loops (``NPY_DISABLE_CPU_FEATURES``), numba's LLVM target ``haswell`` without AVX-512 features
(``NUMBA_CPU_NAME`` / ``NUMBA_CPU_FEATURES``). Those are the two places machine code differs
between the two kinds of CPU (glibc's libm has no AVX-512 variants of its own). On a machine
without AVX-512 the suite itself is that run.
"""

from __future__ import annotations

import os
import platform
import re
import subprocess
import sys

import numpy as np
import pytest

import tracekit as tk

AVX2_FEATURES = (
    "+64bit,+adx,+aes,+avx,+avx2,+bmi,+bmi2,+cmov,+crc32,+cx16,+cx8,+f16c,+fma,+fsgsbase,+fxsr,"
    "+lzcnt,+mmx,+movbe,+pclmul,+popcnt,+rdrnd,+sahf,+sse,+sse2,+sse3,+sse4.1,+sse4.2,+ssse3,"
    "+xsave,+xsaveopt,-avx512f,-avx512dq,-avx512cd,-avx512bw,-avx512vl,-avx512vnni,-avx512bf16,"
    "-avx512ifma,-avx512vbmi,-avx512vbmi2,-avx512bitalg,-avx512vpopcntdq,-avx512vp2intersect,"
    "-avxvnni"
)
AVX2_ONLY = {
    "NPY_DISABLE_CPU_FEATURES": "X86_V4 AVX512_ICL AVX512_SPR",
    "NUMBA_CPU_NAME": "haswell",
    "NUMBA_CPU_FEATURES": AVX2_FEATURES,
}


def cpu_features() -> dict:
    from numpy._core._multiarray_umath import __cpu_features__

    return __cpu_features__


def emulating_avx2() -> bool:
    return os.environ.get("NUMBA_CPU_NAME") == "haswell"


def has_avx512() -> bool:
    return bool(cpu_features().get("AVX512F")) and not emulating_avx2()


needs_x86_avx2 = pytest.mark.skipif(
    platform.machine() not in ("x86_64", "AMD64") or not cpu_features().get("AVX2"),
    reason="an x86-64 CPU with AVX2",
)


def kernel_assembly(f, *args) -> str:
    """The machine code of the compiled kernels of ``f`` (compiled afresh: numba does not keep
    the assembly of cached code)."""
    c = tk.compile(tk.trace(f, *args), target="cpu", cache=False, progress=False)
    c(*args)
    program = c.program
    return "\n".join(
        getattr(program.module, name).inspect_asm(sig)
        for name, *_ in program.segments
        for sig in getattr(program.module, name).signatures
    )


def _gelu(x):
    return 0.5 * x * (1.0 + np.tanh(0.7978846 * (x + 0.044715 * x**3)))


@needs_x86_avx2
def test_fused_kernels_use_the_widest_vectors_of_the_cpu():
    x = np.linspace(-4, 4, 50_000).astype(np.float32)
    asm = kernel_assembly(_gelu, x)
    packed = re.findall(r"v\w+ps\s+[^\n]*%([xyz])mm", asm)
    assert packed, "no packed single-precision instruction in the kernels"
    widths = set(packed)
    if has_avx512():
        assert "z" in widths, "an AVX-512 CPU runs the kernels on 256-bit vectors at most"
    else:
        assert "y" in widths, "an AVX2 CPU runs the kernels on 128-bit vectors at most"
        assert "z" not in widths, "an AVX2-only target produced AVX-512 code"


# The tests whose results depend on the CPU's SIMD loops: NumPy's (complex multiply, its
# transcendental functions) and tracekit's (fast math, fused kernels).
CPU_SENSITIVE = [
    "tests/backends/test_fastmath.py",
    "tests/backends/test_portability.py::test_fused_kernels_use_the_widest_vectors_of_the_cpu",
    "tests/test_ops.py",
]


@needs_x86_avx2
@pytest.mark.skipif(not has_avx512(), reason="this CPU is the AVX2-only run itself")
def test_cpu_sensitive_tests_pass_on_an_avx2_only_cpu(tmp_path):
    env = dict(os.environ, **AVX2_ONLY, TRACEKIT_CACHE_DIR=str(tmp_path / "cache"))
    env.pop("PYTEST_XDIST_WORKER", None)
    cmd = [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", *CPU_SENSITIVE]
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    run = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True, timeout=1200)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    assert re.search(r"\d+ passed", run.stdout), run.stdout[-2000:]
