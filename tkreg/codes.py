"""Every numeric code, limit and struct layout the Python side and the C launcher share, defined once.

The launcher's `tkreg_codes.h` is generated from this file at build time (CMake runs
`python tkreg/codes.py --header OUT`), so the two sides cannot disagree.  Standard library
only, no relative imports: CMake runs it as a plain script before tkreg is installed.
"""
from __future__ import annotations

import ctypes

# dtype name -> (code, element size in bytes).  Codes index torch's dtype table in the launcher.
DTYPES = {
    "float32": (0, 4), "float16": (1, 2), "bfloat16": (2, 2), "float8_e4m3fn": (3, 1),
    "float8_e5m2": (4, 1), "int32": (5, 4), "int64": (6, 8), "int8": (7, 1), "uint8": (8, 1),
    "bool": (9, 1), "float64": (10, 8), "float8_e8m0fnu": (11, 1),
}
# scalar / kernel-parameter value types -> (code, size in bytes of the kernel parameter)
TYPES = {"int32": (0, 4), "int64": (1, 8), "float32": (2, 4), "float64": (3, 8), "bool": (4, 1)}
ROLES = {"input": 0, "output": 1, "inplace": 2, "scratch": 3}
DTYPE_MODES = {"set": 0, "same": 1, "fixed": 2}       # dtypes=, dtype_of= (flattened), dtype=
PARAMS = {"ptr": 0, "tma": 1, "sym": 2, "scalar": 3}  # what a kernel parameter receives
# where an expression slot gets its value (see tkreg/assemble.py)
SLOTS = {"dim": 0, "stride": 1, "scalar": 2, "present": 3, "sm_count": 4, "param": 5}
# expression opcodes: operator -> (code, arity); 0 and 1 push a constant / a slot
OPCODES = {
    "+": (2, 2), "-": (3, 2), "*": (4, 2), "//": (5, 2), "%": (6, 2), "min": (7, 2),
    "max": (8, 2), "==": (9, 2), "!=": (10, 2), "<": (11, 2), "<=": (12, 2), ">": (13, 2),
    ">=": (14, 2), "and": (15, 2), "or": (16, 2), "not": (17, 1), "neg": (18, 1),
    "tdiv": (19, 2), "tmod": (20, 2), "select": (21, 3),
}
OP_CONST, OP_SYM = 0, 1
# Why a call was refused before launch: (code, argument index, detail) goes to Python, which
# writes the message (tkreg/diagnose.py).
ERRORS = {
    "nargs": 1, "kwarg": 2, "twice": 3, "scratch_given": 4, "missing": 5, "required": 6,
    "not_tensor": 7, "dtype_unknown": 8, "dtype": 9, "rank": 10, "unbound": 11, "shape": 12,
    "stride": 13, "contiguous": 14, "align": 15, "numel32": 16, "size32": 17, "device": 18,
    "max_device": 19, "scalar": 20, "tma_zero": 21, "tma_stride": 22, "out_dtype": 23,
    "eval": 24, "param32": 25,
}
# Why a variant passed over a call (explain and the no-kernel message)
REJECTS = {"accepted": 0, "dtype": 1, "rule": 2, "absent": 3}

DEVICE_SYMBOLS = ("SM_COUNT",)   # read once per device: the multiprocessor count
# CUlaunchAttributeID values (cuda.h) of the launch attributes a kernel may carry
LAUNCH_ATTRS = {"cooperative": 2, "cluster": 4, "pdl": 6}

# The launcher's fixed sizes: tensors, scalars and expression slots of an op, tensor rank,
# slot bindings, constraints, TMA descriptors and kernel parameters of a variant, program length
# and stack depth, devices, and the bytes of one kernel's parameter buffer.
LIMITS = {"MAXT": 32, "MAXS": 32, "MAXSLOT": 64, "MAXRANK": 8, "MAXBIND": 128, "MAXCONS": 64,
          "MAXTMA": 16, "MAXP": 64, "MAXK": 16, "MAXPROG": 512, "STACK": 32, "MAXDEV": 64, "PBUF": 8192}
LIMITS["MAXARGS"] = LIMITS["MAXT"] + LIMITS["MAXS"]
_UP = {k: v + 1 for k, v in LIMITS.items()}   # a count may reach its limit

# The plan structs the launcher reads, as (field, C type, array length, allowed [lo, hi)).  Python
# fills them (tkreg/assemble.py, through `struct`, which checks every value against its range) and
# the launcher copies them as they are; the header declares the same layouts.  A length or a
# bound may name a LIMITS entry.  Programs are (offset, length) into the owner's int64 code.
I32, I64, U32 = "int32_t", "int64_t", "uint32_t"
_BIT = (0, 2)
STRUCTS = {
    "Prog": [("off", I32, None, (0, 2**31)), ("n", I32, None, (1, _UP["MAXPROG"]))],
    "TSig": [("role", I32, None, (0, len(ROLES))), ("optional", I32, None, _BIT), ("rank", I32, None, (0, _UP["MAXRANK"])),
             ("dmode", I32, None, (0, len(DTYPE_MODES))), ("darg", I32, None, (0, 1 << len(DTYPES))),
             ("like", I32, None, (-1, "MAXT")), ("newsrc", I32, None, (-1, "MAXT")), ("strided", I32, None, _BIT),
             ("zero", I32, None, _BIT), ("dims", "Prog", "MAXRANK", None), ("strides", "Prog", "MAXRANK", None)],
    # a slot's value from the call: tensor a's dim b (a dim `div * S` binds S = dim / div), its
    # stride b, scalar a, or whether optional tensor a is present
    "Bind": [("slot", I32, None, (0, "MAXSLOT")), ("kind", I32, None, (0, SLOTS["sm_count"])),
             ("a", I32, None, (0, "MAXT")), ("b", I32, None, (0, "MAXRANK")), ("div", I64, None, (1, 2**62))],
    "OpPlan": [("nt", I32, None, (0, _UP["MAXT"])), ("ns", I32, None, (0, _UP["MAXS"])), ("nslot", I32, None, (0, _UP["MAXSLOT"])),
               ("npre", I32, None, (0, _UP["MAXSLOT"])), ("index64", I32, None, _BIT), ("sm_slot", I32, None, (-1, "MAXSLOT")),
               ("nuser", I32, None, (0, _UP["MAXARGS"])), ("nout", I32, None, (0, _UP["MAXT"])),
               ("nbind", I32, None, (0, _UP["MAXBIND"])), ("user", I32, "MAXARGS", (0, "MAXARGS")), ("out", I32, "MAXT", (0, "MAXT")),
               ("stype", I32, "MAXS", (0, len(TYPES))), ("t", "TSig", "MAXT", None), ("bind", "Bind", "MAXBIND", None)],
    "Tma": [("tensor", I32, None, (0, "MAXT")), ("dtype", I32, None, (0, 32)), ("rank", I32, None, (1, 6)),
            ("dims", "Prog", 5, None), ("strides", "Prog", 4, None), ("box", U32, 5, (1, 257)),
            ("estr", U32, 5, (1, 9)), ("il", I32, None, (0, 3)), ("sw", I32, None, (0, 8)),
            ("l2", I32, None, (0, 4)), ("oob", I32, None, (0, 2))],
    "Param": [("kind", I32, None, (0, len(PARAMS))), ("index", I32, None, (0, "MAXSLOT")),
              ("type", I32, None, (0, len(TYPES))), ("off", I32, None, None)],   # off: set at module load
    # cuda.h's CUlaunchAttribute: an id, then its value (cluster dims x, y, z; or a flag's 1)
    "LaunchAttr": [("id", I32, None, (0, 64)), ("pad", I32, None, None), ("value", U32, 16, (0, 17))],
    "Kernel": [("grid", "Prog", 3, None), ("smem", "Prog", None, None), ("block", U32, 3, (1, 1025)),
               ("na", I32, None, (0, 4)), ("at", "LaunchAttr", 3, None), ("np", I32, None, (0, _UP["MAXP"])),
               ("p", "Param", "MAXP", None)],
    "VariantPlan": [("nt", I32, None, (0, _UP["MAXT"])), ("ns", I32, None, (0, _UP["MAXS"])), ("nslot", I32, None, (0, _UP["MAXSLOT"])),
                    ("nset", I32, None, (0, _UP["MAXSLOT"])), ("ncons", I32, None, (0, _UP["MAXCONS"])),
                    ("ntma", I32, None, (0, _UP["MAXTMA"])), ("nkern", I32, None, (1, _UP["MAXK"])),
                    ("dtypes", I32, "MAXT", (-1, len(DTYPES))), ("set_slot", I32, "MAXSLOT", (0, "MAXSLOT")),
                    ("uses", I64, None, (0, 2**62)), ("set_val", I64, "MAXSLOT", (-2**62, 2**62)),
                    ("cons", "Prog", "MAXCONS", None), ("tma", "Tma", "MAXTMA", None)],
}
_CTYPE = {I32: ctypes.c_int32, I64: ctypes.c_int64, U32: ctypes.c_uint32}


def _n(v):
    return LIMITS[v] if isinstance(v, str) else v


def _classes() -> tuple[dict, dict]:
    classes, fields = {}, {}
    for name, cols in STRUCTS.items():
        fields[name] = {f: (_n(length), rng and typ in _CTYPE and (_n(rng[0]), _n(rng[1]))) for f, typ, length, rng in cols}
        classes[name] = type(name, (ctypes.Structure,), {"_fields_": [
            (f, (_CTYPE.get(typ) or classes[typ]) * _n(length) if length else (_CTYPE.get(typ) or classes[typ]))
            for f, typ, length, _ in cols]})
    return classes, fields


CTYPES, _FIELDS = _classes()   # name -> ctypes.Structure with the launcher's layout; its ranges


def struct(name: str, **values):
    """A filled plan struct; ValueError naming the field when a value is out of its range (or
    a list longer than its array).  Fields not given stay zero."""
    s = CTYPES[name]()
    fields = _FIELDS[name]
    for f, v in values.items():
        length, rng = fields[f]
        items = list(v) if length else (v,)
        if length and len(items) > length:
            raise ValueError(f"{name}.{f}: {len(items)} entries, at most {length}")
        for x in items if rng else ():
            if x.__class__ is not int or not rng[0] <= x < rng[1]:
                raise ValueError(f"{name}.{f} = {x!r}, expected an integer in [{rng[0]}, {rng[1]})")
        if length:
            getattr(s, f)[:len(items)] = items
        else:
            setattr(s, f, v)
    return s


def header() -> str:
    """The C header the launcher includes (enum names are the Python keys, upper-cased)."""
    def enum(prefix, table, key=lambda v: v):
        items = ", ".join(f"{prefix}{k.upper()} = {key(v)}" for k, v in table.items())
        return f"enum {{ {items} }};"
    ops = {"const": (OP_CONST, 0), "sym": (OP_SYM, 0)}
    names = {"+": "add", "-": "sub", "*": "mul", "//": "floordiv", "%": "floormod", "==": "eq",
             "!=": "ne", "<": "lt", "<=": "le", ">": "gt", ">=": "ge"}
    ops.update({names.get(k, k): v for k, v in OPCODES.items()})
    sizes = [0] * len(DTYPES)
    for code, size in DTYPES.values():
        sizes[code] = size
    tsizes = [0] * len(TYPES)
    for code, size in TYPES.values():
        tsizes[code] = size
    arity = [0] * (max(c for c, _ in ops.values()) + 1)
    for c, n in ops.values():
        arity[c] = n
    lines = [
        "/* Generated from tkreg/codes.py by `python tkreg/codes.py --header`: do not edit. */",
        "#ifndef TKREG_CODES_H", "#define TKREG_CODES_H", "#include <stdint.h>",
        enum("OP_", ops, lambda v: v[0]),
        f"#define NOPCODES {len(arity)}",
        "static const int OP_ARITY[NOPCODES] = {" + ", ".join(map(str, arity)) + "};",
        enum("ROLE_", ROLES), enum("DT_", DTYPE_MODES), enum("P_", PARAMS),
        enum("T_", TYPES, lambda v: v[0]), enum("S_", SLOTS), enum("E_", ERRORS), enum("R_", REJECTS),
        f"#define NDTYPES {len(DTYPES)}", f"#define NTYPES {len(TYPES)}",
        "static const int ELEM_SIZE[NDTYPES] = {" + ", ".join(map(str, sizes)) + "};",
        "static const int TYPE_SIZE[NTYPES] = {" + ", ".join(map(str, tsizes)) + "};",
    ]
    lines += [f"#define {k} {v}" for k, v in LIMITS.items()]
    for name, fields in STRUCTS.items():
        decl = " ".join(f"{typ} {f}" + (f"[{length}]" if length else "") + ";" for f, typ, length, _ in fields)
        lines.append(f"typedef struct {{ {decl} }} {name};")
    return "\n".join(lines + ["#endif", ""])


if __name__ == "__main__":
    import sys
    if len(sys.argv) != 3 or sys.argv[1] != "--header":
        sys.exit("usage: python tkreg/codes.py --header OUT.h")
    text = header()
    try:
        with open(sys.argv[2]) as f:
            if f.read() == text:   # unchanged: keep the timestamp, so nothing rebuilds
                sys.exit(0)
    except OSError:
        pass
    with open(sys.argv[2], "w") as f:
        f.write(text)
