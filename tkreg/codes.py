"""Every numeric code the pack words and the C launcher share, defined once.

The launcher's `tkreg_codes.h` is generated from this file at build time (CMake runs
`python tkreg/codes.py --header OUT`), so the two sides cannot disagree.  Standard library
only, no relative imports: CMake runs it as a plain script before tkreg is installed.
"""
from __future__ import annotations

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
        "#ifndef TKREG_CODES_H", "#define TKREG_CODES_H",
        enum("OP_", ops, lambda v: v[0]),
        f"#define NOPCODES {len(arity)}",
        "static const int OP_ARITY[NOPCODES] = {" + ", ".join(map(str, arity)) + "};",
        enum("ROLE_", ROLES), enum("DT_", DTYPE_MODES), enum("P_", PARAMS),
        enum("T_", TYPES, lambda v: v[0]), enum("S_", SLOTS), enum("E_", ERRORS), enum("R_", REJECTS),
        f"#define NDTYPES {len(DTYPES)}", f"#define NTYPES {len(TYPES)}",
        "static const int ELEM_SIZE[NDTYPES] = {" + ", ".join(map(str, sizes)) + "};",
        "static const int TYPE_SIZE[NTYPES] = {" + ", ".join(map(str, tsizes)) + "};",
        "#endif", "",
    ]
    return "\n".join(lines)


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
