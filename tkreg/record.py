"""The base of tkreg's frozen records (spec, plan, manifest): fields, one __init__, equality, hash
and repr, written once.

`@RECORD` reads a class's fields from its annotations, in order, with the class attributes as
defaults (`field(default, compare=False)` leaves one out of equality); `Fields` gives every record
the same keyword-or-positional __init__ (then `__post_init__`, if the class has one) and refuses
assignment after it.  Not `dataclasses`: it execs three functions per class (~0.5 ms each of
tkreg's nine records), and every process pays that on its first tkreg call (the cold start).
"""
from __future__ import annotations

_REQUIRED = object()


class FrozenInstanceError(AttributeError):
    """Assignment to a record's field (the name dataclasses uses)."""


class _Field:
    __slots__ = ("default", "compare")

    def __init__(self, default, compare: bool):
        self.default, self.compare = default, compare


def field(default=None, *, compare: bool = True) -> _Field:
    return _Field(default, compare)


def RECORD(cls):
    """Record the class's fields: ((name, default or _REQUIRED, compare), ...)."""
    ann = cls.__dict__.get("__annotations__")
    if ann is None:   # Python 3.14 may compute annotations lazily; the stdlib reads them for us
        import inspect
        ann = inspect.get_annotations(cls)
    fields = []
    for name in ann:
        d = cls.__dict__.get(name, _REQUIRED)
        if isinstance(d, _Field):
            d, compare = d.default, d.compare
            setattr(cls, name, d)
        else:
            compare = True
        fields.append((name, d, compare))
    cls._fields = tuple(fields)
    return cls


class Fields:
    __slots__ = ()
    _fields: tuple = ()

    def __init__(self, *args, **kwargs):
        fields = self._fields
        if len(args) > len(fields):
            raise TypeError(f"{type(self).__name__}() takes {len(fields)} arguments, got {len(args)}")
        for i, (name, default, _) in enumerate(fields):
            if i < len(args):
                value = args[i]
            elif name in kwargs:
                value = kwargs.pop(name)
            elif default is not _REQUIRED:
                value = default
            else:
                raise TypeError(f"{type(self).__name__}() missing argument {name!r}")
            object.__setattr__(self, name, value)
        if kwargs:
            raise TypeError(f"{type(self).__name__}() got unexpected arguments {sorted(kwargs)}")
        post = getattr(self, "__post_init__", None)
        if post is not None:
            post()

    def __setattr__(self, name, value):
        raise FrozenInstanceError(f"cannot assign to field {name!r}")

    def __delattr__(self, name):
        raise FrozenInstanceError(f"cannot delete field {name!r}")

    def _values(self) -> tuple:
        return tuple(getattr(self, n) for n, _, compare in self._fields if compare)

    def __eq__(self, other):
        return type(other) is type(self) and other._values() == self._values()

    def __hash__(self):
        return hash((type(self).__name__,) + self._values())

    def __repr__(self):
        return f"{type(self).__name__}({', '.join(f'{n}={getattr(self, n)!r}' for n, _, _ in self._fields)})"
