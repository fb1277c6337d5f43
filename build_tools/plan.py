"""Read the launch plan out of tilelang's lowered IR and check it against the op's spec.

What the launcher needs is all in the IR once lowering ran without host codegen (see
shared/DESIGN.md): kernels in launch order (the host function's `tvm_call_packed`s), each
kernel's parameters, grid/block (`thread_extent`), dynamic shared memory, cluster/cooperative/
PDL flags, and every TMA descriptor's encode arguments (`tma_descriptor_args`).  Static dims the
factory baked in become variant constraints, so dispatch never picks a cubin for the wrong size.
"""
from __future__ import annotations

import tilelang  # noqa: F401  (puts its bundled tvm on sys.path)
from tvm import tirx

from tkreg import expr
from tkreg.errors import SpecError
from tkreg.spec import DTYPES, OpSpec, Variant

from .tir_expr import to_program

_TMA_TILED = "__tvm_tensormap_create_tiled"


def _dtype_name(dt) -> str:
    s = str(dt)
    return {"float": "float32", "half": "float16", "float8_e4m3": "float8_e4m3fn",
            "float8_e4m3fn": "float8_e4m3fn", "float8_e5m2": "float8_e5m2",
            "float8_e8m0fnu": "float8_e8m0fnu"}.get(s, s)


def _as_int(e, what):
    if isinstance(e, int):
        return e
    if isinstance(e, tirx.IntImm):
        return int(e.value)
    raise SpecError(f"{what} must be a compile-time constant, got `{e}`")


def _compact_strides(shape) -> list:
    out, acc = [], 1
    for d in reversed(shape):
        out.append(acc)
        acc = acc * d
    return out[::-1]


_SAMPLES = (0, 1, 2, 3, 7, 8, 15, 16, 17, 127, 128, 129, 1000, 4096, 4097, 65535)


def _same_function(a: list, b: list) -> bool:
    """Two size expressions that agree on many sizes (`(M + 16 - 1) // 16` vs `(M + 15) // 16`)."""
    names = sorted(expr.symbols(a) | expr.symbols(b))
    if expr.const(a) is not None or expr.const(b) is not None:
        return False
    for k, v in enumerate(_SAMPLES):
        env = {n: _SAMPLES[(k + 5 * j) % len(_SAMPLES)] for j, n in enumerate(names)}
        try:
            if expr.evaluate(a, env) != expr.evaluate(b, env):
                return False
        except (ZeroDivisionError, KeyError):
            return False
    return True


def extract(spec: OpSpec, variant: Variant, func, artifact) -> dict:
    """The plan for one compiled variant (JSON-able); raises SpecError naming what disagrees."""
    where = f"{spec.name}[{variant.key}]"
    tensors = {t.name: t for t in spec.tensors}
    scalars = {s.name: s for s in spec.scalars}

    # 1. the prim_func's buffers must be the spec's tensors; unify shapes and dtypes.
    buffers = {}
    scalar_params = set()
    for p in func.params:
        if p in func.buffer_map:
            b = func.buffer_map[p]
            buffers[b.name] = b
        else:
            scalar_params.add(p.name)
    if set(buffers) != set(tensors):
        raise SpecError(f"{where}: kernel tensors {sorted(buffers)} differ from the spec's {sorted(tensors)}")
    if scalar_params != set(scalars):
        raise SpecError(f"{where}: kernel scalars {sorted(scalar_params)} differ from the spec's {sorted(scalars)}")

    dtypes, constraints = {}, []
    for t in spec.tensors:
        b = buffers[t.name]
        dtypes[t.name] = _dtype_name(b.dtype)
        if dtypes[t.name] not in DTYPES:
            raise SpecError(f"{where}: `{t.name}` has dtype {b.dtype}, which tkreg cannot name")
        if len(b.shape) != len(t.shape):
            raise SpecError(f"{where}: `{t.name}` has rank {len(b.shape)} in the kernel, {len(t.shape)} in the spec")
        for i, (kd, sd) in enumerate(zip(b.shape, t.dims())):
            kprog = to_program(kd)
            if kprog == sd or _same_function(kprog, sd):
                continue
            c = expr.const(kprog)
            if c is None:
                raise SpecError(f"{where}: `{t.name}`.shape[{i}] is `{kd}` in the kernel but "
                                f"`{t.shape[i]}` in the spec")
            if expr.const(sd) is not None:
                raise SpecError(f"{where}: `{t.name}`.shape[{i}] is {c} in the kernel but {sd[0]} in the spec")
            text = f"{expr.to_text(sd)} == {c}"
            if text not in [k["text"] for k in constraints]:
                constraints.append({"text": text, "prog": sd + [c, "=="]})
        if b.strides and [to_program(s) for s in b.strides] != [to_program(s) for s in _compact_strides(b.shape)]:
            raise SpecError(f"{where}: `{t.name}` is declared with non-compact strides; tkreg kernels take "
                            "row-major contiguous tensors")
    for t in spec.tensors:
        want = (t.dtypes if t.dtypes else (t.dtype,) if t.dtype else (dtypes[t.dtype_of],))
        if dtypes[t.name] not in want:
            raise SpecError(f"{where}: `{t.name}` is {dtypes[t.name]} in the kernel; the spec allows {list(want)}")
    if variant.rule:
        constraints.append({"text": variant.rule, "prog": expr.parse(variant.rule)})

    # 2. TMA descriptors, by the name of the kernel parameter that receives them.
    data_to_tensor = {b.data.name: name for name, b in buffers.items()}
    host = [f for _, f in artifact.host_mod.functions.items()]
    if len(host) != 1:
        raise SpecError(f"{where}: expected one host function, found {len(host)}")
    host = host[0]
    tma_list, tma_index = [], {}
    for var, args in (host.attrs.get("tma_descriptor_args") or {}).items():
        args = list(args)
        kind = args[0].value if isinstance(args[0], tirx.StringImm) else str(args[0])
        if kind != _TMA_TILED:
            raise SpecError(f"{where}: TMA descriptor kind {args[0]} is not supported (only tiled)")
        rank = _as_int(args[3], "TMA rank")
        buf = args[4].name
        if buf not in data_to_tensor:
            raise SpecError(f"{where}: TMA descriptor {var.name} reads `{buf}`, which is no argument")
        o = 5
        dims = [to_program(x) for x in args[o:o + rank]]
        strides = [to_program(x) for x in args[o + rank + 1:o + 2 * rank]]  # [0] is the element size
        box = [_as_int(x, "TMA box") for x in args[o + 2 * rank:o + 3 * rank]]
        estr = [_as_int(x, "TMA element stride") for x in args[o + 3 * rank:o + 4 * rank]]
        tail = [_as_int(x, "TMA mode") for x in args[o + 4 * rank:o + 4 * rank + 4]]
        tma_index[var.name] = len(tma_list)
        tma_list.append({"tensor": data_to_tensor[buf], "dtype": _as_int(args[2], "TMA dtype"),
                         "rank": rank, "dims": dims, "strides": strides, "box": box,
                         "elem_strides": estr, "interleave": tail[0], "swizzle": tail[1],
                         "l2": tail[2], "oob": tail[3]})

    # 3. kernels in launch order, with their parameters.
    devices = {gv.name_hint: f for gv, f in artifact.device_mod.functions.items()}
    calls = []

    def visit(n):
        if isinstance(n, tirx.Call) and n.op.name in ("tirx.tvm_call_packed", "tirx.tvm_call_packed_lowered"):
            name = str(n.args[0].value) if isinstance(n.args[0], tirx.StringImm) else str(n.args[0])
            if name in devices:
                calls.append(name)
    tirx.stmt_functor.post_order_visit(host.body, visit)
    if not calls:
        raise SpecError(f"{where}: the host function launches no kernel")

    syms = spec.symbols()
    kernels = []
    for name in calls:
        f = devices[name]
        ext = dict(f.attrs["thread_extent"])
        grid = [to_program(ext.get(k, 1)) for k in ("blockIdx.x", "blockIdx.y", "blockIdx.z")]
        block = [_as_int(ext.get(k, 1), "block size") for k in ("threadIdx.x", "threadIdx.y", "threadIdx.z")]
        smem = to_program(f.attrs.get("dyn_shared_memory_buf", 0) or 0)
        cluster = [int(x) for x in (f.attrs.get("cluster_dims") or (1, 1, 1))]
        params = []
        for p in f.params:
            if p.name in tma_index:
                params.append({"kind": "tma", "index": tma_index[p.name]})
            elif p.name in data_to_tensor and str(p.dtype) == "handle":
                params.append({"kind": "ptr", "tensor": data_to_tensor[p.name]})
            elif p.name in syms:
                params.append({"kind": "sym", "name": p.name, "type": str(p.dtype)})
            elif p.name in scalars:
                params.append({"kind": "scalar", "name": p.name, "type": str(p.dtype)})
            else:
                raise SpecError(f"{where}: kernel {name} parameter `{p.name}` ({p.dtype}) is neither a "
                                "tensor, a TMA descriptor, a symbol nor a scalar of the spec")
        for p in params:
            if p["kind"] == "sym" and p["type"] not in ("int32", "int64"):
                raise SpecError(f"{where}: symbol parameter {p['name']} has type {p['type']}")
        used = set().union(*(expr.symbols(g) for g in grid + [smem])) if grid else set()
        if used - syms:
            raise SpecError(f"{where}: kernel {name} launch dims use {sorted(used - syms)}, unknown to the spec")
        kernels.append({"name": name, "grid": grid, "block": block, "smem": smem,
                        "cluster": cluster,
                        "cooperative": bool(f.attrs.get("use_cooperative_groups", False)),
                        "pdl": bool(f.attrs.get("has_cuda_pdl_sync", False)), "params": params})
    for t in tma_list:
        if set().union(*(expr.symbols(d) for d in t["dims"] + t["strides"])) - syms:
            raise SpecError(f"{where}: a TMA descriptor of `{t['tensor']}` uses unknown symbols")
    return {"dtypes": dtypes, "constraints": constraints, "kernels": kernels, "tma": tma_list}
