"""Variant keys: a variant's parameters as `name=value` items, sorted and comma-joined
(`N=4096,dtype=bfloat16`).  Every value type round-trips: `parse(format(params)) == params`.
Users read keys in `tkreg.explain` and write them in TKREG_SKIP_VARIANTS; cubin file names are a
digest of them."""
from __future__ import annotations

import json
import re

from .errors import SpecError

_BARE = r"[A-Za-z_][A-Za-z0-9_.\-]*"
_INT = r"-?[0-9]+"
_FLOAT = r"-?(?:[0-9]+\.[0-9]*(?:e[+-]?[0-9]+)?|[0-9]+e[+-]?[0-9]+)"
_ITEM = r'([A-Za-z_][A-Za-z0-9_]*)=("(?:[^"\\]|\\.)*"|[^,"]*)(?:,|$)'


def value(v) -> str:
    """int `12`, float `0.5`, bool `true`, str bare (`bfloat16`) or JSON-quoted (`"12"`)."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if v != v or v in (float("inf"), float("-inf")):
            raise SpecError(f"variant parameter value {v!r}: floats must be finite")
        return repr(v)
    if isinstance(v, str):
        bare = re.fullmatch(_BARE, v) and v not in ("true", "false") and not re.fullmatch(_FLOAT, v)
        return v if bare else json.dumps(v)
    raise SpecError(f"variant parameter value {v!r}: use ints, floats, bools or strings")


def _unvalue(s: str):
    if s.startswith('"'):
        return json.loads(s)
    if s in ("true", "false"):
        return s == "true"
    if re.fullmatch(_INT, s):
        return int(s)
    if re.fullmatch(_FLOAT, s):
        return float(s)
    if re.fullmatch(_BARE, s):
        return s
    raise SpecError(f"bad variant key value {s!r}")


def format_key(params) -> str:
    """(name, value) pairs, sorted -> the key."""
    return ",".join(f"{k}={value(v)}" for k, v in params)


def parse_key(key: str) -> dict:
    out, pos = {}, 0
    while pos < len(key):
        m = re.compile(_ITEM).match(key, pos)
        if not m or m.end() == pos:
            raise SpecError(f"bad variant key {key!r} at {key[pos:]!r}")
        out[m.group(1)] = _unvalue(m.group(2))
        pos = m.end()
    if key.endswith(","):
        raise SpecError(f"bad variant key {key!r}: trailing comma")
    return out
