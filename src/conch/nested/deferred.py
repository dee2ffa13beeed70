"""`_`: the placeholder for the level a `select`/`where`/`regroup` is applied to (spec/002), and
the deferred expressions built from it, resolved against that level when the call is made."""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

from conch.errors import ExpressionError


# ----- `_`: a placeholder for the level a select/where/regroup is applied to ------------------------
class Deferred:
    """`_` and expressions built from it; resolved against the level of the enclosing call.

    >>> clips.where(_.duration > 10)         # `_` is `clips` here             # doctest: +SKIP
    """

    __slots__ = ("_fn", "_repr")
    _fn: Callable[[Any], Any]
    _repr: str

    def __init__(self, fn: Callable[[Any], Any], text: str) -> None:
        object.__setattr__(self, "_fn", fn)
        object.__setattr__(self, "_repr", text)

    def resolve(self, path: Any) -> Any:
        return self._fn(path)

    def __repr__(self) -> str:
        return self._repr

    def __getattr__(self, name: str) -> Deferred:
        if name.startswith("__"):
            raise AttributeError(name)
        return Deferred(lambda p: getattr(self._fn(p), name), f"{self._repr}.{name}")

    def __getitem__(self, key: Any) -> Deferred:
        return Deferred(lambda p: self._fn(p)[key], f"{self._repr}[{key!r}]")

    def __call__(self, *args: Any, **kwargs: Any) -> Deferred:
        def call(p: Any) -> Any:
            a = [resolve(x, p) for x in args]
            kw = {k: resolve(v, p) for k, v in kwargs.items()}
            return self._fn(p)(*a, **kw)

        return Deferred(call, f"{self._repr}(...)")

    def __bool__(self) -> bool:
        raise ExpressionError("a Conch expression has no truth value; use & | ~ instead of and/or/not")

    __hash__ = object.__hash__


_REFLECTED = {
    "radd": "add",
    "rsub": "sub",
    "rmul": "mul",
    "rtruediv": "truediv",
    "rfloordiv": "floordiv",
    "rand": "and_",
    "ror": "or_",
}
_OPERATOR = {**_REFLECTED, "and": "and_", "or": "or_"}


def _deferred_op(name: str) -> Callable[..., Deferred]:
    """`_ <op> other` applied once `_` is bound: through the `operator` function, not the bound
    dunder, so Python's reflected-operand rule holds (`_.x > 2 & t["id"] < 5` lets the core side
    lower the nested one)."""
    base = name.strip("_")
    reflected = base in _REFLECTED
    fn = getattr(operator, _OPERATOR.get(base, base))

    def op(self: Deferred, *other: Any) -> Deferred:
        def apply(p: Any) -> Any:
            operands = [self._fn(p), *[resolve(o, p) for o in other]]
            return fn(*reversed(operands)) if reflected else fn(*operands)

        return Deferred(apply, f"{self._repr} {name}")

    return op


for _name in [
    "__add__",
    "__radd__",
    "__sub__",
    "__rsub__",
    "__mul__",
    "__rmul__",
    "__truediv__",
    "__rtruediv__",
    "__floordiv__",
    "__rfloordiv__",
    "__mod__",
    "__pow__",
    "__neg__",
    "__abs__",
    "__invert__",
    "__and__",
    "__rand__",
    "__or__",
    "__ror__",
    "__eq__",
    "__ne__",
    "__lt__",
    "__le__",
    "__gt__",
    "__ge__",
]:
    setattr(Deferred, _name, _deferred_op(_name))

_ = Deferred(lambda p: p, "_")


def resolve(v: Any, path: Any) -> Any:
    return v.resolve(path) if isinstance(v, Deferred) else v
