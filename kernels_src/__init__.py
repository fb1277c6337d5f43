"""tkreg's built-in kernels: one package per op family (norm, activation, rotary, quant, gemm,
attention, moe), each listing its OpSpecs in `SPECS`; `common.py` holds what several families share.

Factories import tilelang inside the function, so reading the specs (and cache hits in
build_tools) never pays for importing tilelang.
"""
