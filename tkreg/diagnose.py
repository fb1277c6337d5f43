"""Messages for what the launcher refused or failed at, and why each variant passed a call over.

The C launcher only decides: it reports a code from tkreg/codes.py with the argument and a
detail, plus the call's bound arguments and expression slots; the words are written here, where
the spec is at hand.  Every message starts with the op's name and names the argument.
"""
from __future__ import annotations

from . import expr
from .codes import DTYPES, ERRORS, REJECTS
from .driver_api import cu_error
from .env import skip_variants
from .errors import LaunchError, PackError
from .spec import OpSpec

_CODE = {v: k for k, v in ERRORS.items()}
_REJECT = {v: k for k, v in REJECTS.items()}
_TYPE_ERRORS = {"nargs", "kwarg", "twice", "scratch_given", "missing", "required", "not_tensor",
                "dtype_unknown", "dtype", "scalar", "out_dtype"}


def _shape(s) -> str:
    s = tuple(s)
    return f"({s[0]},)" if len(s) == 1 else str(s)


def _dtype(d) -> str:
    return f"torch.{d}"


def _torch_dtype_name(x) -> str:
    return str(getattr(x, "dtype", "?")).replace("torch.", "")


def _device(x) -> str:
    d = x.get_device() if hasattr(x, "get_device") else -1
    return "cpu" if d < 0 else f"cuda:{d}"


def _env(names: tuple, env: tuple) -> dict:
    return {n: v for n, v in zip(names, env) if v is not None}


def expected_shape(t, env: dict) -> str:
    dims = []
    for p in t.dims():
        try:
            dims.append(expr.evaluate(p, env))
        except (KeyError, ZeroDivisionError):
            dims.append("?")
    return _shape(dims)


# Refusals whose message needs no more than the argument and the detail.
_SIMPLE = {
    "twice": "{name} given twice",
    "required": "argument {name} is required, got None",
    "not_tensor": "argument {name} must be a torch.Tensor, got {xtype!r}",
    "dtype_unknown": "argument {name} has dtype {xdtype}, which no tkreg kernel takes",
    "unbound": "cannot infer every size of {name}: an optional input that defines one is None",
    "contiguous": "argument {name} must be contiguous (row-major), got strides {xstrides}; call .contiguous() first",
    "align": ("argument {name} data pointer is not 16-byte aligned (offset {detail}); kernels load 16 bytes at a "
              "time: pass a tensor that starts at an aligned address (e.g. .clone())"),
    "numel32": ("argument {name} has {detail} elements; the kernels index with int32 (max 2147483647); this op "
                "is not built for int64 indexing"),
    "size32": "argument {name} has a size of {detail}, over the int32 range the kernels take",
    "max_device": "device index {detail} is over the launcher's limit",
    "scalar": "scalar {name} must be a number that fits {type}, got {x!r}",
    "tma_zero": "argument {name} has a zero-sized dimension; this kernel reads it with TMA, which needs every size > 0",
    "out_dtype": "cannot tell the dtype of {name}; pass it",
    "eval": "a size of {name} cannot be evaluated (division by zero)",
    "param32": "a size passed to the kernel is {detail}, over the int32 range it takes",
}


def refusal(spec: OpSpec, code: int, index: int, detail, bound: tuple, env: tuple, slot_names: tuple) -> Exception:
    """The exception for one refused call (TypeError for what was passed, ValueError for sizes)."""
    kind = _CODE.get(code, "unknown")
    nt = len(spec.tensors)
    arg = spec.tensors[index] if 0 <= index < nt else spec.scalars[index - nt] if nt <= index < nt + len(spec.scalars) else None
    x = bound[index] if 0 <= index < len(bound) else None
    name = f"`{arg.name}`" if arg is not None else "a kernel launch"
    if kind in _SIMPLE:
        msg = _SIMPLE[kind].format(name=name, detail=detail, x=x, xtype=type(x), xdtype=getattr(x, "dtype", "?"),
                                   xstrides=_shape(x.stride()) if hasattr(x, "stride") else "?",
                                   type=getattr(arg, "type", "?"))
    elif kind == "nargs":
        msg = (f"takes at most {len(spec.user_args())} positional arguments "
               f"({', '.join(a.name for a in spec.user_args())}), got {detail}")
    elif kind == "kwarg":
        scratch = [t.name for t in spec.tensors if t.role == "scratch"]
        msg = (f"`{detail}` is scratch space the launcher allocates" if detail in scratch else
               f"unexpected argument(s) [{detail!r}]; it takes {sorted(a.name for a in spec.user_args())}")
    elif kind == "missing":
        msg = f"missing {'tensor' if index < nt else 'scalar'} {name}"
    elif kind == "dtype":
        msg = f"argument {name} has dtype {_dtype(_torch_dtype_name(x))}; expected {_wanted_dtype(spec, arg, bound)}"
    elif kind == "rank":
        msg = f"argument {name} must have {len(arg.shape)} dims, got shape {_shape(x.shape)}"
    elif kind == "shape":
        msg = (f"argument {name} has shape {_shape(x.shape)}; expected {expected_shape(arg, _env(slot_names, env))} "
               f"from the other arguments (dim {detail} differs)")
    elif kind == "stride":
        try:
            want = expr.evaluate(arg.stride_progs()[detail], _env(slot_names, env))
        except (KeyError, ZeroDivisionError):
            want = "?"
        msg = (f"argument {name} has strides {_shape(x.stride())}; expected stride {want} in dim {detail} "
               f"(declared {_shape(arg.strides)})")
    elif kind == "device":
        msg = (f"argument {name} is on {_device(x)} but earlier arguments are on "
               f"{'cpu' if detail < 0 else f'cuda:{detail}'}; all must share one CUDA device")
    elif kind == "tma_stride":
        elem = getattr(x, "element_size", lambda: 1)()
        msg = (f"argument {name} has a row stride of {detail} bytes; TMA needs a multiple of 16 (pad the last "
               f"dim to a multiple of {max(1, 16 // elem)} elements)")
    else:
        msg = f"refused (code {code}, argument {index}, detail {detail!r})"
    return (TypeError if kind in _TYPE_ERRORS else ValueError)(f"{spec.name}: {msg}")


def _wanted_dtype(spec: OpSpec, t, bound: tuple) -> str:
    """What tensor `t` must be, in words: its dtype set, its root's dtype, or its fixed dtype."""
    root = spec.tensor(spec.dtype_roots()[t.name])
    if root is t and t.dtypes:
        return " or ".join(_dtype(d) for d in sorted(t.dtypes, key=lambda d: DTYPES[d][0]))
    if root.dtypes:
        return f"{_dtype(_torch_dtype_name(bound[spec.tensors.index(root)]))}, the dtype of `{root.name}`"
    return _dtype(root.dtype)


def rejection(spec: OpSpec, code: int, index: int, bound: tuple, constraints: tuple, want_dtypes: dict,
              sm_known: bool = True) -> str:
    """Why one variant passed a call over (explain and the no-kernel message)."""
    kind = _REJECT.get(code, "?")
    if kind == "accepted":
        return "accepted"
    if kind == "dtype":
        t = spec.tensors[index]
        x = bound[index]
        if x is not None:
            got = _torch_dtype_name(x)
        else:
            root = spec.tensor(spec.dtype_roots()[t.name])
            got = root.dtype or _torch_dtype_name(bound[spec.tensors.index(root)])
        return f"`{t.name}` is {got}, variant takes {want_dtypes.get(t.name, '?')}"
    if kind == "absent":
        return f"needs `{spec.tensors[index].name}` (read with TMA)"
    if kind == "rule":
        text = constraints[index].text
        if "SM_COUNT" in text and not sm_known:
            return f"needs {text} (SM_COUNT is unknown for CPU tensors: pass sm_count=, e.g. 132 for an H200)"
        return f"needs {text}"
    return f"rejected (code {code})"


def no_kernel(spec: OpSpec, rows: list, env: tuple, slot_names: tuple) -> str:
    """`rows`: (key, reason) per candidate."""
    sizes = ", ".join(f"{n}={v}" for n, v in _env(slot_names, env).items())
    lines = "".join(f"\n  {k}: {why}" for k, why in rows)
    skip = skip_variants()
    return (f"{spec.name}: no variant accepts these arguments ({sizes}); candidates:{lines}\n"
            + (f"(TKREG_SKIP_VARIANTS={skip!r} removed the variants it names.)\n" if skip else "")
            + "Set TKREG_FALLBACK=reference to run the torch reference instead.")


_BROKEN = "the pack is broken, rebuild it"
_FAILURES = {
    "param_size": lambda k, n, got, want: (PackError, f"kernel {k} parameter {n} is {got} bytes in the cubin, "
                                                      f"the plan gives {want} bytes: {_BROKEN}"),
    "param_count": lambda k, got, want: (PackError, f"kernel {k} takes {got} parameters in the cubin, the plan "
                                                    f"lists {want}: {_BROKEN}"),
    "param_bytes": lambda k, n: (PackError, f"kernel {k} parameters take {n} bytes, more than a launch can pass"),
}


def failure(kind: str, op: str, key, *facts):
    """Raise what the launcher failed at: a CUDA call (`cuda`: code, what) or a pack its module
    load found broken."""
    where = op if key is None else f"{op}[{key}]"
    if kind == "cuda":
        code, what = facts
        raise LaunchError(f"{where}: {what} failed: {cu_error(code)}")
    if kind == "no_kernel":
        name, code = facts
        raise PackError(f"{where}: the cubin has no kernel {name} ({cu_error(code)}): {_BROKEN}")
    exc, msg = _FAILURES[kind](*facts)
    raise exc(f"{where}: {msg}")
