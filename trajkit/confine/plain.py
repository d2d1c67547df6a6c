"""Values that cross from a unit-test run's solution to its tests as data: tagged JSON of exact types.

``to_plain`` runs in the solution's process, ``from_plain`` in the tests'. The
solution's process is the adversary's: it can send any JSON at all, so
``from_plain`` only ever *builds* genuine values of a fixed set of types from
data (never a type or an ``__eq__`` the solution chose), and anything it sends
is a value a correct solution could have returned. Garbled data raises
``TypeError`` (an exception the solution could have raised anyway).

Exact types cross (a subclass, which may compare as it likes, does not):
``None``, ``bool``, ``int``, ``float``, ``complex``, ``str``, ``bytes``,
``bytearray``, ``list``, ``tuple``, ``dict``, ``set``, ``frozenset``, ``range``,
``Fraction``, ``Decimal``, ``deque``, ``Counter``, ``OrderedDict``,
``defaultdict``, dict views, ``date``, ``timedelta``, ``datetime`` and ``time`` (naive
or with a fixed-offset ``timezone``), named tuples (as a named tuple of the same name and
fields built here), numpy scalars (as the Python number they hold) and numpy
arrays of numbers, booleans or strings. Anything else goes through ``handle``
(``crossing.Exports.handle``) and comes back through ``remote``.

This file runs inside the sandbox: standard library only (numpy is imported
here only when an array arrives, which means the solution's process had it).
"""

from __future__ import annotations

import collections
import datetime
import decimal
import fractions

_DICT_KEYS, _DICT_VALUES, _DICT_ITEMS = type({}.keys()), type({}.values()), type({}.items())
_COLLECTIONS = {tuple: "t", set: "s", frozenset: "fs"}
_MAKE = {"t": tuple, "s": set, "fs": frozenset}
_ARRAY_KINDS = "biufcSU"  # numpy dtype kinds whose bytes are plain data (no object pointers)


def _pairs(mapping, handle) -> list:
    return [[to_plain(k, handle), to_plain(v, handle)] for k, v in dict.items(mapping)]


def _values(values, handle) -> list:
    return [to_plain(v, handle) for v in values]


_ENCODE = {
    complex: lambda v, h: {"c": [v.real.hex(), v.imag.hex()]},
    bytes: lambda v, h: {"b": v.hex()},
    bytearray: lambda v, h: {"ba": v.hex()},
    range: lambda v, h: {"r": [hex(v.start), hex(v.stop), hex(v.step)]},
    fractions.Fraction: lambda v, h: {"q": [hex(v.numerator), hex(v.denominator)]},
    decimal.Decimal: lambda v, h: {"D": str(v)},
    collections.deque: lambda v, h: {"dq": [_values(v, h), v.maxlen]},
    collections.Counter: lambda v, h: {"ct": _pairs(v, h)},
    collections.OrderedDict: lambda v, h: {"od": _pairs(v, h)},
    collections.defaultdict: lambda v, h: {"dd": [to_plain(v.default_factory, h), _pairs(v, h)]},
    _DICT_KEYS: lambda v, h: {"dk": _values(v, h)},
    _DICT_VALUES: lambda v, h: {"dv": _values(v, h)},
    _DICT_ITEMS: lambda v, h: {"di": [[to_plain(k, h), to_plain(x, h)] for k, x in v]},
    datetime.date: lambda v, h: {"date": v.isoformat()},
    datetime.timedelta: lambda v, h: {"td": [v.days, v.seconds, v.microseconds]},
    datetime.datetime: lambda v, h: _clock("dt", v, h),
    datetime.time: lambda v, h: _clock("tm", v, h),
}


def _clock(tag: str, value, handle) -> object:
    if value.tzinfo is not None and type(value.tzinfo) is not datetime.timezone:
        return handle(value)  # a tzinfo of the solution's own decides offsets by its code
    return {tag: [value.isoformat(), value.fold]}


def to_plain(value: object, handle) -> object:
    """``value`` as tagged JSON (see the module's docstring); anything else becomes ``handle(value)``."""
    kind = type(value)
    if value is None or kind is bool or kind is str:
        return value
    if kind is int:
        return {"i": hex(value)}
    if kind is float:
        return {"f": value.hex()}
    if kind is list:
        return [to_plain(v, handle) for v in value]
    if kind in _COLLECTIONS:  # inline, as the next two: a nested value costs two frames a level
        return {_COLLECTIONS[kind]: [to_plain(v, handle) for v in value]}
    if kind is dict:
        return {"d": [[to_plain(k, handle), to_plain(v, handle)] for k, v in value.items()]}
    encode = _ENCODE.get(kind)
    if encode is not None:
        return encode(value, handle)
    if kind.__module__ == "numpy" and hasattr(value, "ndim"):
        return _numpy(value, handle)
    if issubclass(kind, tuple) and type(getattr(kind, "_fields", None)) is tuple:
        return {"nt": [kind.__name__, list(kind._fields), _values(tuple.__iter__(value), handle)]}
    return handle(value)


def _numpy(value, handle) -> object:
    if value.ndim == 0 and hasattr(value, "item"):
        return to_plain(value.item(), handle)
    if type(value).__name__ == "ndarray" and _plain_dtype(value.dtype):
        return {"nd": [value.dtype.str, list(value.shape), value.tobytes().hex()]}
    return handle(value)


def _plain_dtype(dtype) -> bool:
    return dtype.kind in _ARRAY_KINDS and dtype.fields is None and dtype.subdtype is None


def from_plain(data: object, remote) -> object:
    """The genuine value that tagged JSON from ``to_plain`` stands for (``remote(data)`` for a handle)."""
    kind = type(data)
    if data is None or kind is bool or kind is str:
        return data
    if kind is list:
        return [from_plain(v, remote) for v in data]
    if kind is dict and "h" in data:
        return remote(data)
    if kind is dict and len(data) == 1:
        ((tag, v),) = data.items()
        try:
            if tag == "i" and type(v) is str:  # the commonest first, inline
                return int(v, 16)
            if tag == "f" and type(v) is str:
                return float.fromhex(v)
            if tag in _MAKE and type(v) is list:
                return _MAKE[tag](from_plain(x, remote) for x in v)
            if tag == "d" and type(v) is list:
                return {from_plain(k, remote): from_plain(x, remote) for k, x in v}
            decode = _DECODE.get(tag)
            if decode is not None:
                return decode(v, remote)
        except (RecursionError, MemoryError):
            raise
        except Exception as exc:  # whatever the data made a constructor raise
            raise TypeError("a garbled value from the solution") from exc
    raise TypeError("a garbled value from the solution")


def _hex(v: object) -> int:
    if type(v) is not str:
        raise TypeError(v)
    return int(v, 16)


def _text(v: object) -> str:
    if type(v) is not str:
        raise TypeError(v)
    return v


def _many(v: object, remote) -> list:
    if type(v) is not list:
        raise TypeError(v)
    return [from_plain(x, remote) for x in v]


def _mapping(v: object, remote) -> dict:
    return {from_plain(k, remote): from_plain(x, remote) for k, x in (_parts(p, 2) for p in _list(v))}


def _list(v: object) -> list:
    if type(v) is not list:
        raise TypeError(v)
    return v


def _parts(v: object, n: int) -> list:
    if type(v) is not list or len(v) != n:
        raise TypeError(v)
    return v


def _count(v: object) -> int:
    if type(v) is not int or v < 0:
        raise TypeError(v)
    return v


def _deque(v: object, remote) -> collections.deque:
    values, maxlen = _parts(v, 2)
    return collections.deque(_many(values, remote), None if maxlen is None else _count(maxlen))


def _defaultdict(v: object, remote) -> collections.defaultdict:
    factory, pairs = _parts(v, 2)
    return collections.defaultdict(from_plain(factory, remote), _mapping(pairs, remote))


def _timedelta(v: object, remote) -> datetime.timedelta:
    if any(type(x) is not int for x in _parts(v, 3)):
        raise TypeError(v)
    return datetime.timedelta(*v)


def _from_iso(kind: type):
    def build(v: object, remote):
        text, fold = _parts(v, 2)
        if fold not in (0, 1) or type(fold) is not int:
            raise TypeError(fold)
        return kind.fromisoformat(_text(text)).replace(fold=fold)

    return build


_NAMED_TUPLES: dict[tuple, type] = {}  # the named tuple classes built here, by name and fields
_BUILT = set()


def _named_tuple_class(name: str, fields: tuple) -> type:
    key = (name, fields)
    if key not in _NAMED_TUPLES:
        _NAMED_TUPLES[key] = collections.namedtuple(name, fields, module="__main__")
        _BUILT.add(_NAMED_TUPLES[key])
    return _NAMED_TUPLES[key]


def _named_tuple(v: object, remote) -> tuple:
    name, fields, values = _parts(v, 3)
    kind = _named_tuple_class(_text(name), tuple(_text(f) for f in _list(fields)))
    return kind._make(_many(values, remote))


_VIEWS = {
    "dk": lambda values: dict.fromkeys(values).keys(),
    "dv": lambda values: dict(enumerate(values)).values(),
    "di": lambda pairs: dict(pairs).items(),
}
_VIEW_TAGS = {_DICT_KEYS: "dk", _DICT_VALUES: "dv", _DICT_ITEMS: "di"}


def unbuilt(value: object) -> tuple | None:
    """What the tests pickle in place of a value built here that pickle cannot carry back to the solution
    (a dict view, a named tuple of a class made here); ``rebuilt`` makes it again there."""
    kind = type(value)
    if kind in _VIEW_TAGS:
        return ("view", _VIEW_TAGS[kind], list(value))
    if kind in _BUILT:
        return ("tuple", kind.__name__, kind._fields, tuple(value))
    return None


def rebuilt(pid: tuple, scope: dict) -> object:
    """In the solution's process: the value ``unbuilt`` stands for, a named tuple of the solution's own
    class of that name and fields where it has one."""
    if pid[0] == "view":
        return _VIEWS[pid[1]](pid[2])
    name, fields, values = pid[1:]
    kind = scope.get(name)
    if not (isinstance(kind, type) and issubclass(kind, tuple) and getattr(kind, "_fields", None) == fields):
        kind = _named_tuple_class(name, fields)
    return kind._make(values)


def _array(v: object, remote):
    dtype, shape, data = _parts(v, 3)
    import numpy  # only when an array arrived, so only where the solution had numpy

    kind = numpy.dtype(_text(dtype))
    if not _plain_dtype(kind):
        raise TypeError(dtype)
    shape = tuple(_count(x) for x in _list(shape))
    raw = bytes.fromhex(_text(data))
    if kind.kind == "b":  # every byte of a genuine boolean array is 0 or 1
        return (numpy.frombuffer(raw, numpy.uint8) != 0).reshape(shape)
    return numpy.frombuffer(raw, kind).reshape(shape).copy()


_DECODE = {
    "c": lambda v, r: complex(*(float.fromhex(_text(x)) for x in _parts(v, 2))),
    "b": lambda v, r: bytes.fromhex(_text(v)),
    "ba": lambda v, r: bytearray.fromhex(_text(v)),
    "r": lambda v, r: range(*(_hex(x) for x in _parts(v, 3))),
    "q": lambda v, r: fractions.Fraction(*(_hex(x) for x in _parts(v, 2))),
    "D": lambda v, r: decimal.Decimal(_text(v)),
    "dq": _deque,
    "ct": lambda v, r: collections.Counter(_mapping(v, r)),
    "od": lambda v, r: collections.OrderedDict(_mapping(v, r)),
    "dd": _defaultdict,
    "dk": lambda v, r: _VIEWS["dk"](_many(v, r)),
    "dv": lambda v, r: _VIEWS["dv"](_many(v, r)),
    "di": lambda v, r: _mapping(v, r).items(),
    "date": lambda v, r: datetime.date.fromisoformat(_text(v)),
    "td": _timedelta,
    "dt": _from_iso(datetime.datetime),
    "tm": _from_iso(datetime.time),
    "nt": _named_tuple,
    "nd": _array,
}
