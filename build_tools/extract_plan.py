"""Read the launch plan out of tilelang's lowered IR and check it against the op's spec.

What the launcher needs is all in the IR once lowering ran without host codegen
(`compile.lower`): kernels in launch order (the host function's `tvm_call_packed`s), each
kernel's parameters, grid/block (`thread_extent`), dynamic shared memory, cluster/cooperative/
PDL flags, and every TMA descriptor's encode arguments (`tma_descriptor_args`).  Static dims the
factory baked in become variant constraints, so dispatch never picks a cubin for the wrong size.
The result is tkreg/launch_plan.py's `Plan` record, written into the manifest as it is.
"""
from __future__ import annotations

import tilelang  # noqa: F401  (puts its bundled tvm on sys.path)
from tvm import tirx

from tkreg import expr
from tkreg.codes import DEVICE_SYMBOLS
from tkreg.errors import SpecError
from tkreg.launch_plan import Constraint, Launch, Param, Plan, TmaDesc
from tkreg.spec import DTYPES, OpSpec, Variant

from .tir_expr import to_program

MAX_DYN_SMEM = 232448   # 227 KB: the dynamic shared memory one CTA may opt into on sm_90 and sm_100

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


def _fix(prog: list, static: dict) -> list:
    """A spec program with the variant's static sizes put in (a number when nothing else is left)."""
    p = [static.get(x[1:], x) if isinstance(x, str) and x.startswith("$") else x for x in prog]
    return [expr.evaluate(p, {})] if len(p) > 1 and not expr.symbols(p) else p


def kernel_dtypes(func) -> dict:
    """{tensor: dtype} of a prim_func's buffers, before any lowering."""
    return {b.name: _dtype_name(b.dtype) for b in (func.buffer_map[p] for p in func.params if p in func.buffer_map)}


def check_shared_names(func) -> None:
    """Every shared buffer (barriers too) a kernel allocates needs a name of its own.  tilelang names
    a buffer after the variable it is first bound to, so buffers kept in a list or tuple come out
    unnamed, and some of its passes tell shared buffers apart by name: in an attention kernel whose
    per-consumer tiles sat in lists, the epilogue's copy of O went to another consumer's Q tile
    (docs/attention-tuning.md).  Raises SpecError naming the culprits."""
    names = []

    def visit(n):
        if isinstance(n, tirx.SBlock):
            names.extend(b.name for b in n.alloc_buffers if b.scope().startswith("shared"))
    tirx.stmt_functor.post_order_visit(func.body, visit)
    seen, bad = set(), []
    for name in names:
        if not name or name in seen:
            bad.append(repr(name))
        seen.add(name)
    if bad:
        raise SpecError(f"shared buffers without a name of their own: {', '.join(sorted(set(bad)))} (bind each "
                        "T.alloc_shared / T.alloc_barrier to its own variable, not to a list or tuple element)")


def extract(spec: OpSpec, variant: Variant, func, artifact) -> Plan:
    """The plan for one compiled variant; raises SpecError naming what disagrees."""
    where = f"{spec.name}[{variant.key}]"
    tensors = {t.name: t for t in spec.tensors}
    scalars = {s.name: s for s in spec.scalars}

    # 1. the prim_func's buffers are the spec's tensors (a variant may leave inputs and scratch
    #    out, never an output); unify shapes, strides and dtypes.
    buffers = {}
    scalar_params = set()
    for p in func.params:
        if p in func.buffer_map:
            b = func.buffer_map[p]
            buffers[b.name] = b
        else:
            scalar_params.add(p.name)
    try:
        spec.check_uses(buffers)
    except SpecError as e:
        raise SpecError(f"{where}: kernel tensors {sorted(buffers)} differ from the spec's {sorted(tensors)}: {e}") from None
    if scalar_params - set(scalars) - set(DEVICE_SYMBOLS):
        raise SpecError(f"{where}: kernel scalars {sorted(scalar_params)} differ from the spec's {sorted(scalars)}")

    params = {p: variant.kwargs()[p] for p in spec.param_symbols()}
    dtypes, constraints = {}, []
    static = {}     # size symbol -> the number this variant bakes in (its `X == c` constraints)
    for t in spec.tensors:
        if t.name not in buffers:
            continue
        b = buffers[t.name]
        dtypes[t.name] = _dtype_name(b.dtype)
        if dtypes[t.name] not in DTYPES:
            raise SpecError(f"{where}: `{t.name}` has dtype {b.dtype}, which tkreg cannot name")
        if len(b.shape) != len(t.shape):
            raise SpecError(f"{where}: `{t.name}` has rank {len(b.shape)} in the kernel, {len(t.shape)} in the spec")
        for i, (kd, sd) in enumerate(zip(b.shape, t.dims())):
            kprog = to_program(kd)
            sd = [params.get(x[1:], x) if isinstance(x, str) and x.startswith("$") else x for x in sd]
            if not expr.symbols(sd) and len(sd) > 1:  # variant parameters only: a number for this variant
                sd = [expr.evaluate(sd, {})]
            if kprog == sd or _same_function(kprog, sd):
                continue
            c = expr.const(kprog)
            if c is None:
                raise SpecError(f"{where}: `{t.name}`.shape[{i}] is `{kd}` in the kernel but "
                                f"`{t.shape[i]}` in the spec")
            if expr.const(sd) is not None:
                raise SpecError(f"{where}: `{t.name}`.shape[{i}] is {c} in the kernel but {sd[0]} in the spec")
            text = f"{expr.to_text(sd)} == {c}"
            if text not in [k.text for k in constraints]:
                constraints.append(Constraint(text, sd + [c, "=="]))
            if len(sd) == 1 and isinstance(sd[0], str):
                static[sd[0][1:]] = c
    for t in spec.tensors:   # strides once every static size is known: ("sq", "D", 1) with D baked in
        if t.name not in buffers:
            continue
        b = buffers[t.name]
        kstrides = [to_program(s) for s in b.strides] if b.strides else [to_program(s) for s in _compact_strides(b.shape)]
        want = t.stride_progs()
        if want is None:
            if b.strides and kstrides != [to_program(s) for s in _compact_strides(b.shape)]:
                raise SpecError(f"{where}: `{t.name}` has strides in the kernel; declare them in the spec "
                                "(Tensor(..., strides=(...)))")
        elif any(k != w and not _same_function(k, w) for k, w in zip(kstrides, (_fix(w, static) for w in want))):
            raise SpecError(f"{where}: `{t.name}` has strides {[str(s) for s in b.strides]} in the kernel but "
                            f"{list(t.strides)} in the spec")
    roots = spec.dtype_roots()
    for t in spec.tensors:
        if t.name not in dtypes:
            continue
        root = tensors[roots[t.name]]
        want = root.dtypes or (root.dtype,)
        if root.name in dtypes and root is not t:
            want = (dtypes[root.name],)
        if dtypes[t.name] not in want:
            raise SpecError(f"{where}: `{t.name}` is {dtypes[t.name]} in the kernel; the spec allows {list(want)}")
    if variant.rule:
        constraints.append(Constraint(variant.rule, expr.parse(variant.rule)))

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
        tail = [_as_int(x, "TMA mode") for x in args[o + 4 * rank:o + 4 * rank + 4]]
        tma_index[var.name] = len(tma_list)
        tma_list.append(TmaDesc(
            data_to_tensor[buf], _as_int(args[2], "TMA dtype"), rank,
            [to_program(x) for x in args[o:o + rank]],
            [to_program(x) for x in args[o + rank + 1:o + 2 * rank]],  # [0] is the element size
            [_as_int(x, "TMA box") for x in args[o + 2 * rank:o + 3 * rank]],
            [_as_int(x, "TMA element stride") for x in args[o + 3 * rank:o + 4 * rank]], *tail))

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

    syms = spec.symbols() | spec.stride_symbols() | set(DEVICE_SYMBOLS)
    known = syms | spec.scalar_symbols()
    kernels = []
    for name in calls:
        f = devices[name]
        ext = dict(f.attrs["thread_extent"])
        grid = [to_program(ext.get(k, 1)) for k in ("blockIdx.x", "blockIdx.y", "blockIdx.z")]
        block = [_as_int(ext.get(k, 1), "block size") for k in ("threadIdx.x", "threadIdx.y", "threadIdx.z")]
        smem = to_program(f.attrs.get("dyn_shared_memory_buf", 0) or 0)
        if len(smem) == 1 and isinstance(smem[0], int) and smem[0] > MAX_DYN_SMEM:
            # the driver refuses it at the first launch (cuFuncSetAttribute: invalid argument)
            raise SpecError(f"{where}: kernel {name} needs {smem[0]} bytes of shared memory; sm_90/sm_100 "
                            f"CTAs get at most {MAX_DYN_SMEM} (use fewer pipeline stages or smaller tiles)")
        cluster = [int(x) for x in (f.attrs.get("cluster_dims") or (1, 1, 1))]
        params = []
        for p in f.params:
            if p.name in tma_index:
                params.append(Param("tma", index=tma_index[p.name]))
            elif p.name in data_to_tensor and str(p.dtype) == "handle":
                params.append(Param("ptr", data_to_tensor[p.name]))
            elif p.name in syms:
                if str(p.dtype) not in ("int32", "int64"):
                    raise SpecError(f"{where}: symbol parameter {p.name} has type {p.dtype}")
                params.append(Param("sym", p.name, type=str(p.dtype)))
            elif p.name in scalars:
                if str(p.dtype) != scalars[p.name].type:
                    raise SpecError(f"{where}: kernel {name} takes scalar `{p.name}` as {p.dtype}; the spec "
                                    f"says {scalars[p.name].type}")
                params.append(Param("scalar", p.name, type=str(p.dtype)))
            else:
                raise SpecError(f"{where}: kernel {name} parameter `{p.name}` ({p.dtype}) is neither a "
                                "tensor, a TMA descriptor, a symbol nor a scalar of the spec")
        used = set().union(*(expr.symbols(g) for g in grid + [smem]))
        if used - known:
            raise SpecError(f"{where}: kernel {name} launch dims use {sorted(used - known)}, unknown to the spec")
        kernels.append(Launch(name, grid, block, smem, cluster,
                              bool(f.attrs.get("use_cooperative_groups", False)),
                              bool(f.attrs.get("has_cuda_pdl_sync", False)), params))
    for t in tma_list:
        if set().union(*(expr.symbols(d) for d in t.dims + t.strides)) - known:
            raise SpecError(f"{where}: a TMA descriptor of `{t.tensor}` uses unknown symbols")
    return Plan(dtypes, constraints, kernels, tma_list)
