"""Messages for what the launcher refused, and why each variant passed a call over.

The C launcher only decides: it reports a code from tkreg/codes.py with the argument and a
detail, plus the call's bound arguments and expression slots; the words are written here, where
the spec is at hand.  Every message starts with the op's name and names the argument.
"""
from __future__ import annotations

from . import expr
from .codes import DTYPES, ERRORS, REJECTS
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


def refusal(spec: OpSpec, code: int, index: int, detail, bound: tuple, env: tuple, slot_names: tuple) -> Exception:
    """The exception for one refused call (TypeError for what was passed, ValueError for sizes)."""
    kind = _CODE.get(code, "unknown")
    nt = len(spec.tensors)
    arg = spec.tensors[index] if 0 <= index < nt else spec.scalars[index - nt] if nt <= index < nt + len(spec.scalars) else None
    x = bound[index] if 0 <= index < len(bound) else None
    name = f"`{arg.name}`" if arg is not None else ""
    values = _env(slot_names, env)
    if kind == "nargs":
        names = ", ".join(a.name for a in spec.user_args())
        msg = f"takes at most {len(spec.user_args())} positional arguments ({names}), got {detail}"
    elif kind == "kwarg":
        scratch = [t.name for t in spec.tensors if t.role == "scratch"]
        msg = (f"`{detail}` is scratch space the launcher allocates" if detail in scratch else
               f"unexpected argument(s) [{detail!r}]; it takes {sorted(a.name for a in spec.user_args())}")
    elif kind == "twice":
        msg = f"{name} given twice"
    elif kind == "missing":
        msg = f"missing {'tensor' if index < nt else 'scalar'} {name}"
    elif kind == "required":
        msg = f"argument {name} is required, got None"
    elif kind == "not_tensor":
        msg = f"argument {name} must be a torch.Tensor, got {type(x)!r}"
    elif kind == "dtype_unknown":
        msg = f"argument {name} has dtype {getattr(x, 'dtype', '?')}, which no tkreg kernel takes"
    elif kind == "dtype":
        root = spec.tensor(spec.dtype_roots()[arg.name])
        got = _dtype(_torch_dtype_name(x))
        if root is arg and arg.dtypes:
            msg = f"argument {name} has dtype {got}; expected {' or '.join(_dtype(d) for d in sorted(arg.dtypes, key=lambda d: DTYPES[d][0]))}"
        elif root.dtypes:
            want = _torch_dtype_name(bound[spec.tensors.index(root)])
            msg = f"argument {name} has dtype {got}; expected {_dtype(want)}, the dtype of `{root.name}`"
        else:
            msg = f"argument {name} has dtype {got}; expected {_dtype(root.dtype)}"
    elif kind == "rank":
        msg = f"argument {name} must have {len(arg.shape)} dims, got shape {_shape(x.shape)}"
    elif kind == "unbound":
        msg = (f"cannot infer every size of {name or 'the call'}: an optional input that defines one is None"
               if arg is not None else "cannot infer every size: an input that defines one is None")
    elif kind == "shape":
        msg = (f"argument {name} has shape {_shape(x.shape)}; expected {expected_shape(arg, values)} from the other "
               f"arguments (dim {detail} differs)")
    elif kind == "stride":
        want = "?"
        try:
            want = expr.evaluate(arg.stride_progs()[detail], values)
        except (KeyError, ZeroDivisionError):
            pass
        msg = (f"argument {name} has strides {_shape(x.stride())}; expected stride {want} in dim {detail} "
               f"(declared {_shape(arg.strides)})")
    elif kind == "contiguous":
        msg = f"argument {name} must be contiguous (row-major), got strides {_shape(x.stride())}; call .contiguous() first"
    elif kind == "align":
        msg = (f"argument {name} data pointer is not 16-byte aligned (offset {detail}); kernels load 16 bytes at a "
               "time: pass a tensor that starts at an aligned address (e.g. .clone())")
    elif kind == "numel32":
        msg = (f"argument {name} has {detail} elements; the kernels index with int32 (max {2**31 - 1}); "
               "this op is not built for int64 indexing")
    elif kind == "size32":
        msg = f"argument {name} has a size of {detail}, over the int32 range the kernels take"
    elif kind == "device":
        first = "cpu" if detail < 0 else f"cuda:{detail}"
        msg = f"argument {name} is on {_device(x)} but earlier arguments are on {first}; all must share one CUDA device"
    elif kind == "max_device":
        msg = f"device index {detail} is over the launcher's limit"
    elif kind == "scalar":
        msg = f"scalar {name} must be a number that fits {arg.type}, got {x!r}"
    elif kind == "tma_zero":
        msg = (f"argument {name} has a zero-sized dimension; this kernel reads it with TMA, which needs every "
               "size > 0")
    elif kind == "tma_stride":
        elem = getattr(x, "element_size", lambda: 1)()
        msg = (f"argument {name} has a row stride of {detail} bytes; TMA needs a multiple of 16 (pad the last "
               f"dim to a multiple of {max(1, 16 // elem)} elements)")
    elif kind == "out_dtype":
        msg = f"cannot tell the dtype of {name}; pass it"
    elif kind == "eval":
        msg = f"a size of {name or 'a kernel launch'} cannot be evaluated (division by zero)"
    elif kind == "param32":
        msg = f"a size passed to the kernel is {detail}, over the int32 range it takes"
    else:
        msg = f"refused (code {code}, argument {index}, detail {detail!r})"
    return (TypeError if kind in _TYPE_ERRORS else ValueError)(f"{spec.name}: {msg}")


def rejection(spec: OpSpec, code: int, index: int, bound: tuple, constraints: tuple, want_dtypes: dict) -> str:
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
        return f"needs {constraints[index].text}"
    return f"rejected (code {code})"


def no_kernel(spec: OpSpec, rows: list, env: tuple, slot_names: tuple) -> str:
    """`rows`: (key, reason) per candidate."""
    sizes = ", ".join(f"{n}={v}" for n, v in _env(slot_names, env).items())
    lines = "".join(f"\n  {k}: {why}" for k, why in rows)
    return (f"{spec.name}: no variant accepts these arguments ({sizes}); candidates:{lines}\n"
            "Set TKREG_FALLBACK=reference to run the torch reference instead.")
