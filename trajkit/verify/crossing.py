"""What crosses between a unit-test run's two processes: plain values, and handles to the solution's objects.

The tests' process asks, the solution's process answers (``harness.serve``).
Questions go over as a pickle; answers come back as tagged JSON. An exact
built-in value (or a ``range``) becomes that very value on the tests' side.
Anything else a solution returns (a generator, a ``map``, an instance of a
class it defines) stays in the solution's process and crosses as a handle:
the tests see a ``Remote``, which they can call, read and set attributes of,
iterate, index and assign items of, take the ``len``, ``str`` or ``repr`` of
(each a question to the solution's process, answered again with plain values
or handles), or ask ``in``, which iterates it and compares here. A
``Remote`` equals only itself and has no truth value, so no ``__eq__``,
``__bool__``, ``__contains__`` or arithmetic of the solution decides anything
in the tests' process. A ``Remote`` passed back as an argument
(``Pair(5, 24)`` given to ``max_chain_length``) arrives as the solution's own
object; a function of the tests passed as an argument arrives as a
``Callback``, which runs it in the tests' process.

This file runs inside the sandbox next to ``harness.py``: standard library only.
"""

from __future__ import annotations

import builtins
import collections
import contextlib
import io
import json
import operator
import os
import pickle
import struct
import sys
import threading
import types

_FRAME = struct.Struct(">I")
MAX_REPLY_BYTES = 64 << 20
MAX_AHEAD = 256  # values of an iterator fetched in one question

_OPS = {
    "call": lambda obj, *args, **kwargs: obj(*args, **kwargs),
    "getattr": getattr,
    "setattr": setattr,
    "iter": iter,
    "len": len,
    "getitem": operator.getitem,
    "setitem": operator.setitem,
    "str": str,
    "repr": repr,
}


def write_frame(fd: int, body: bytes) -> None:
    data = _FRAME.pack(len(body)) + body
    while data:
        data = data[os.write(fd, data) :]


def read_frame(fd: int, limit: int) -> bytes | None:
    def exactly(n: int) -> bytes | None:
        data = bytearray()
        while len(data) < n:
            chunk = os.read(fd, min(n - len(data), 1 << 20))
            if not chunk:
                return None
            data += chunk
        return bytes(data)

    header = exactly(_FRAME.size)
    if header is None or _FRAME.unpack(header)[0] > limit:
        return None
    return exactly(_FRAME.unpack(header)[0])


class Exports:
    """The solution's side: its names and every object it handed out, and how to answer a question about them."""

    def __init__(self, scope: dict, call_fd: int, reply_fd: int):
        self.scope = scope
        self.call_fd, self.reply_fd = call_fd, reply_fd
        self.objects: list = []  # kept alive, so that ids stay unique
        self.handles: dict[int, int] = {}

    def serve(self) -> tuple | None:
        """Answer questions until the tests' side sends a callback's outcome (returned) or hangs up (None)."""
        while (body := read_frame(self.call_fd, MAX_REPLY_BYTES)) is not None:
            try:
                message = self._load(body)
            except BaseException as exc:  # noqa: BLE001 - answered as the exception it is
                message = ("ask", exc)
            if message[0] != "ask":
                return message
            reply = self.answer(message[1:])
            for stream in (sys.stdout, sys.stderr):
                with contextlib.suppress(BaseException):
                    stream.flush()
            write_frame(self.reply_fd, json.dumps(reply).encode())
        return None

    def answer(self, question: tuple) -> dict:
        """The reply to one question: a value, an exception to raise, or (``next``) the values before one."""
        reply: dict = {}
        try:
            if isinstance(question[0], BaseException):
                raise question[0]
            op, target, args, kwargs = question
            target = self._target(target)
            if op != "next":
                return {"value": to_plain(_OPS[op](target, *args, **kwargs), self.handle)}
            values, error = _ahead(target, *args)
            reply["value"] = to_plain(values, self.handle)
            if error is None:
                return reply
        except BaseException as exc:  # noqa: BLE001 - raised on the tests' side as a plain exception
            error = exc
        reply.update({"raise": "Exception", "message": ""})
        with contextlib.suppress(BaseException):
            reply.update({"raise": exception_name(error), "message": str(error)[:2000]})
        return reply

    def _load(self, body: bytes) -> tuple:
        unpickler = pickle.Unpickler(io.BytesIO(body))
        unpickler.persistent_load = lambda pid: self.objects[pid] if type(pid) is int else Callback(self, pid[1])
        return unpickler.load()

    def _target(self, target: str | int) -> object:
        if type(target) is not str:
            return self.objects[target]
        if target not in self.scope:
            raise NameError(f"name {target!r} is not defined")
        return self.scope[target]

    def handle(self, value: object) -> dict:
        key = id(value)
        if key not in self.handles:
            self.handles[key] = len(self.objects)
            self.objects.append(value)
        return {"h": self.handles[key], "type": str(type(value).__qualname__)[:100]}


class Callback:
    """A function of the tests given to the solution as an argument: calling it runs it in the tests' process."""

    def __init__(self, exports: Exports, index: int):
        self.exports, self.index = exports, index

    def __call__(self, *args, **kwargs):
        exports = self.exports
        request = {"callback": self.index, "args": to_plain(list(args), exports.handle)}
        request["kwargs"] = to_plain(kwargs, exports.handle)
        write_frame(exports.reply_fd, json.dumps(request).encode())
        outcome = exports.serve()  # the callback may ask questions of its own meanwhile
        if outcome is None:
            raise RuntimeError("the tests' process hung up")
        if outcome[0] == "return":
            return outcome[1]
        kind = getattr(builtins, str(outcome[1]), None)
        raise (kind if isinstance(kind, type) and issubclass(kind, Exception) else RuntimeError)(outcome[2])


class Channel:
    """The tests' side: asks the solution's process and turns its answers into plain values or ``Remote``\\ s."""

    def __init__(self, call_fd: int, reply_fd: int):
        self.call_fd, self.reply_fd = call_fd, reply_fd
        self.lock = threading.RLock()  # a callback of the tests may ask questions while one is open
        self.remotes: dict[int, Remote] = {}
        self.callbacks: list = []

    def ask(self, op: str, target: str | int, *args, **kwargs):
        value, error = self.exchange(op, target, *args, **kwargs)
        if error is not None:
            raise error
        return value

    def exchange(self, op: str, target: str | int, *args, **kwargs) -> tuple[object, Exception | None]:
        """The value the solution answered with, and the exception it raised (with ``next``, after the values)."""
        question = self._pickle(("ask", op, target, args, kwargs))
        with self.lock:
            write_frame(self.call_fd, question)
            reply = self._reply()
            while "callback" in reply:
                write_frame(self.call_fd, self._call_back(reply))
                reply = self._reply()
        value = from_plain(reply["value"], self.remote) if "value" in reply else None
        if "value" in reply and "raise" not in reply:
            return value, None
        kind = getattr(builtins, str(reply.get("raise")), None)
        if not (isinstance(kind, type) and issubclass(kind, Exception)) or (kind is StopIteration and op != "next"):
            kind = RuntimeError  # SystemExit, KeyboardInterrupt; a StopIteration would end a test's map() early
        message = reply.get("message")
        return value, kind(f"{reply.get('raise')}: {message}" if kind is RuntimeError else message)

    def _reply(self) -> dict:
        body = read_frame(self.reply_fd, MAX_REPLY_BYTES)
        if body is None:
            raise RuntimeError("the solution's process ended without answering")
        reply = json.loads(body)
        if type(reply) is not dict:
            raise TypeError("a garbled answer from the solution")
        return reply

    def _call_back(self, request: dict) -> bytes:
        """Run the tests' function the solution called; its result (or exception) pickled for the solution.
        A failed assertion is not the solution's to catch: it fails the tests right here."""
        index = request["callback"]
        args, kwargs = from_plain(request.get("args"), self.remote), from_plain(request.get("kwargs"), self.remote)
        if type(index) is not int or not 0 <= index < len(self.callbacks) or type(args) is not list:
            raise TypeError("a garbled callback from the solution")
        try:
            return self._pickle(("return", self.callbacks[index](*args, **kwargs)))
        except AssertionError:
            raise
        except Exception as exc:  # noqa: BLE001 - raised in the solution, as it would be in one process
            return self._pickle(("raise", type(exc).__name__, str(exc)[:2000]))

    def _pickle(self, message: tuple) -> bytes:
        """Remotes go as their handles, the tests' own functions as callbacks; the rest as pickle has it."""

        def persistent_id(obj: object):
            if type(obj) is Remote:
                return obj._handle
            if type(obj) is types.FunctionType and obj.__module__ == "__main__":
                self.callbacks.append(obj)
                return ("callback", len(self.callbacks) - 1)
            return None

        buffer = io.BytesIO()
        pickler = pickle.Pickler(buffer)
        pickler.persistent_id = persistent_id
        pickler.dump(message)
        return buffer.getvalue()

    def function(self, name: str):
        def call(*args, **kwargs):
            return self.ask("call", name, *args, **kwargs)

        call.__name__ = call.__qualname__ = name
        return call

    def remote(self, data: dict) -> Remote:
        handle, kind = data.get("h"), data.get("type")
        if type(handle) is not int or type(kind) is not str:
            raise TypeError("a garbled handle from the solution")
        if handle not in self.remotes:
            self.remotes[handle] = Remote(self, handle, kind)
        return self.remotes[handle]


class Remote:
    """An object that lives in the solution's process. Equal only to itself; it has no truth value.

    Iterated, it fetches values ahead in growing batches (up to ``MAX_AHEAD`` a question), so that
    a long generator costs few round trips: the solution's iterator runs ahead of the test by that much.
    """

    __slots__ = ("_ahead", "_batch", "_channel", "_error", "_handle", "_type")

    def __init__(self, channel: Channel, handle: int, kind: str):
        self._channel, self._handle, self._type = channel, handle, kind
        self._ahead: collections.deque = collections.deque()
        self._error: Exception | None = None
        self._batch = 1

    def _ask(self, op: str, *args, **kwargs):
        return self._channel.ask(op, self._handle, *args, **kwargs)

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        return self._ask("getattr", name)

    def __setattr__(self, name: str, value):
        if name in Remote.__slots__:
            object.__setattr__(self, name, value)
        else:
            self._ask("setattr", name, value)

    def __call__(self, *args, **kwargs):
        return self._ask("call", *args, **kwargs)

    def __iter__(self):
        return self._ask("iter")

    def __next__(self):
        if not self._ahead:
            if self._error is not None:
                error, self._error = self._error, None
                raise error
            values, error = self._channel.exchange("next", self._handle, self._batch)
            if error is not None and values is None:
                raise error
            if type(values) is not list or not values:
                raise TypeError("a garbled answer from the solution")
            self._ahead.extend(values)
            self._error, self._batch = error, min(2 * self._batch, MAX_AHEAD)
        return self._ahead.popleft()

    def __setitem__(self, key, value):
        self._ask("setitem", key, value)

    def __len__(self):
        return self._ask("len")

    def __getitem__(self, key):
        return self._ask("getitem", key)

    def __contains__(self, item):  # compared here, as for an object without __contains__: never the solution's say
        return any(value is item or value == item for value in self)

    def __str__(self):
        return self._ask("str")

    def __repr__(self):
        return self._ask("repr")

    def __bool__(self):
        raise TypeError(f"a {self._type} from the solution has no truth value here")

    __eq__ = object.__eq__
    __hash__ = object.__hash__


def _ahead(iterator, n: int) -> tuple[list, BaseException | None]:
    """Up to ``n`` next values of ``iterator`` and the exception that ended it early (raised if no value came)."""
    values: list = []
    try:
        while len(values) < n:
            values.append(next(iterator))
    except BaseException as exc:
        if not values:
            raise
        return values, exc
    return values, None


def exception_name(exc: BaseException) -> str:
    """The name of the nearest built-in class ``exc`` is an instance of: ``except ValueError`` in the tests
    catches the solution's own ``ValueError`` subclass, and a class merely named like a built-in is not one."""
    for cls in type(exc).__mro__:
        if getattr(builtins, cls.__name__, None) is cls:
            return cls.__name__
    return "BaseException"


_AS_DICT = (collections.Counter, collections.OrderedDict, collections.defaultdict)


def to_plain(value: object, handle) -> object:
    """``value`` as tagged JSON of exact built-in types; numpy scalars become the Python number they hold,
    the standard library's dicts (``Counter``, ``OrderedDict``, ``defaultdict``) a dict and a named tuple a
    tuple, as they compare equal to those in one process; anything else becomes ``handle(value)``."""
    kind = type(value)
    if kind.__module__ == "numpy" and getattr(value, "ndim", None) == 0 and hasattr(value, "item"):
        value = value.item()
        kind = type(value)
    if kind in _AS_DICT:
        value, kind = dict(dict.items(value)), dict
    elif issubclass(kind, tuple) and hasattr(kind, "_fields"):
        value, kind = tuple(tuple.__iter__(value)), tuple
    if value is None or kind is bool or kind is str:
        return value
    if kind is int:
        return {"i": hex(value)}
    if kind is float:
        return {"f": value.hex()}
    if kind is complex:
        return {"c": [value.real.hex(), value.imag.hex()]}
    if kind is bytes:
        return {"b": value.hex()}
    if kind is range:
        return {"r": [hex(value.start), hex(value.stop), hex(value.step)]}
    if kind is list:
        return [to_plain(v, handle) for v in value]
    if kind in (tuple, set, frozenset):
        return {_TAGS[kind]: [to_plain(v, handle) for v in value]}
    if kind is dict:
        return {"d": [[to_plain(k, handle), to_plain(v, handle)] for k, v in value.items()]}
    return handle(value)


_TAGS = {tuple: "t", set: "s", frozenset: "fs"}
_MAKE = {"t": tuple, "s": set, "fs": frozenset}


def from_plain(data: object, remote) -> object:
    """The exact built-in value (or ``remote(handle)``) that tagged JSON from ``to_plain`` stands for."""
    kind = type(data)
    if data is None or kind is bool or kind is str:
        return data
    if kind is list:
        return [from_plain(v, remote) for v in data]
    if kind is dict and "h" in data:
        return remote(data)
    if kind is dict and len(data) == 1:
        ((tag, v),) = data.items()
        if tag == "i" and type(v) is str:
            return int(v, 16)
        if tag == "f" and type(v) is str:
            return float.fromhex(v)
        if tag == "c" and type(v) is list and len(v) == 2:
            return complex(float.fromhex(v[0]), float.fromhex(v[1]))
        if tag == "b" and type(v) is str:
            return bytes.fromhex(v)
        if tag == "r" and type(v) is list and len(v) == 3:
            return range(*(int(x, 16) for x in v))
        if tag in _MAKE and type(v) is list:
            return _MAKE[tag](from_plain(x, remote) for x in v)
        if tag == "d" and type(v) is list:
            return {from_plain(k, remote): from_plain(x, remote) for k, x in v}
    raise TypeError("a garbled value from the solution")
