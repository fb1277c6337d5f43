"""The base of tkreg's frozen records (spec, plan, manifest): equality, hash and repr over the
dataclass fields, written once.

`@RECORD` is `@dataclass(frozen=True, eq=False, repr=False)`: dataclasses then generate only what
freezing needs, which halves these classes' creation cost; every process pays it on its first
tkreg call (cold start), so it counts.  Fields marked `compare=False` are left out of equality.
"""
from __future__ import annotations

from dataclasses import dataclass

RECORD = dataclass(frozen=True, eq=False, repr=False)


class Fields:
    __slots__ = ()

    def _values(self) -> tuple:
        return tuple(getattr(self, n) for n, f in self.__dataclass_fields__.items() if f.compare)

    def __eq__(self, other):
        return type(other) is type(self) and other._values() == self._values()

    def __hash__(self):
        return hash((type(self).__name__,) + self._values())

    def __repr__(self):
        return f"{type(self).__name__}({', '.join(f'{n}={getattr(self, n)!r}' for n in self.__dataclass_fields__)})"
