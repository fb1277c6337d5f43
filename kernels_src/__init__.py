"""tkreg's built-in kernels: one module per op family, each listing its OpSpecs in `SPECS`.

Factories import tilelang inside the function, so reading the specs (and cache hits in
build_tools) never pays for importing tilelang.
"""
