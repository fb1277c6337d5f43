"""tkreg-example: a tkreg plugin holding one TileLang kernel, `example.scale_add`.

Its wheel carries a kernel pack in `tkreg_example/packs/<arch>/` (built by CMakeLists.txt with
`tkreg_add_pack`) and declares it in pyproject.toml:

    [project.entry-points."tkreg.kernels"]
    example = "tkreg_example"

tkreg finds the pack on its first use (the entry point names this module; tkreg takes its
`packs/` folder), so `tkreg.call("example.scale_add", x, y, alpha=2.0)` works once the wheel is
installed.  `scale_add` below is the typed wrapper.  Importing this module imports tkreg only.
"""
from __future__ import annotations

import tkreg

__version__ = "0.1.0"


def scale_add(x, y, alpha: float = 1.0, *, out=None):
    """`out = x * alpha + y` for `x`, `y` of shape [M, N] (bf16 or fp16; fp32 math), on the GPU."""
    return tkreg.call("example.scale_add", x, y, alpha=alpha, out=out)
