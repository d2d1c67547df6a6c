"""What crosses between a unit-test run's two processes: plain values, and handles to the solution's objects.

The tests' process asks, the solution's process answers (``harness.serve``).
Questions go over as a pickle; answers come back as tagged JSON. A value of
an exact built-in or standard library type becomes that very value on the
tests' side (``plain.py``). Anything else a solution returns (a generator, a
``map``, an instance of a class it defines) stays in the solution's process
and crosses as a handle:
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

A class the solution defines and the tests name is a ``RemoteClass`` there:
calling it or reading its attributes asks the solution's process, a handle to
an instance of it is an instance of it, and an exception of it is raised as
one, so ``isinstance``, ``type(x) is`` and ``except`` work as in one process.
What the solution says about its classes only shapes these stand-ins: any
claim it makes (that a handle is of some class of its own) is one it could
make true by returning a genuine instance, whose behaviour it decides anyway.

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

from .plain import from_plain, rebuilt, to_plain, unbuilt

_FRAME = struct.Struct(">I")
_PICKLED_AS_IS = frozenset((int, float, str, bool, type(None), list, tuple, dict, set, bytes))  # the tests' args
MAX_REPLY_BYTES = 64 << 20
MAX_READY_BYTES = 1 << 20  # the solution's first message: whether its program ran, and its classes
MAX_AHEAD = 256  # values of an iterator fetched in one question
MAX_CLASSES = 256  # classes of the solution described to the tests
MAX_ANCESTORS = 16
MAX_NAME = 100  # characters of a class's name (all this keeps the description under MAX_READY_BYTES)

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
            reply.update({"raise": exception_name(type(error)), "message": str(error)[:2000]})
            reply["classes"] = own_classes(type(error), self.scope)
        return reply

    def _load(self, body: bytes) -> tuple:
        unpickler = pickle.Unpickler(io.BytesIO(body))
        unpickler.persistent_load = self._persistent
        return unpickler.load()

    def _persistent(self, pid: int | tuple) -> object:
        if type(pid) is int:
            return self.objects[pid]
        return Callback(self, pid[1]) if pid[0] == "callback" else rebuilt(pid, self.scope)

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
        found = {"h": self.handles[key], "type": str(type(value).__qualname__)[:100]}
        classes = own_classes(type(value), self.scope)
        if classes:
            found["classes"] = classes
        return found


def own_classes(cls: type, scope: dict) -> list[str]:
    """The classes the program defined (bound to their own names) that ``cls`` is or derives from, in order."""
    own = [k.__name__ for k in cls.__mro__ if k.__module__ == "__main__" and scope.get(k.__name__) is k]
    return [name for name in own if len(name) <= MAX_NAME][: MAX_ANCESTORS + 1]


def describe_classes(scope: dict) -> dict:
    """Each class the program defined: its ancestors among them and, for an exception, its nearest built-in."""
    found: dict = {}
    for name, value in list(scope.items()):
        if (
            isinstance(value, type)
            and value.__module__ == "__main__"
            and value.__name__ == name
            and len(name) <= MAX_NAME
        ):
            error = exception_name(value) if issubclass(value, BaseException) else None
            found[name] = {"bases": own_classes(value, scope)[1:], "error": error}
            if len(found) == MAX_CLASSES:
                break
    return found


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
        self.described: dict = {}  # what the solution said about its classes
        self.classes: dict[str, RemoteClass] = {}  # the stand-ins built from it so far

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
        stand_in = None if kind is StopIteration else self._class_of(reply.get("classes"), Exception)
        with contextlib.suppress(TypeError):  # UnicodeError and its kin take more than a message
            if stand_in is not None:
                return value, type.__call__(stand_in, message)  # built here: calling a stand-in asks the solution
            return value, kind(message if kind is not RuntimeError else f"{reply.get('raise')}: {message}")
        return value, RuntimeError(f"{reply.get('raise')}: {message}")

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
        """Remotes go as their handles, the tests' own functions as callbacks, dict views and named tuples
        built here as what makes them again (``plain.unbuilt``); the rest as pickle has it."""

        def persistent_id(obj: object):
            if type(obj) in _PICKLED_AS_IS:
                return None
            if isinstance(obj, Remote):
                return obj._handle
            if type(obj) is types.FunctionType and obj.__module__ == "__main__":
                self.callbacks.append(obj)
                return ("callback", len(self.callbacks) - 1)
            return unbuilt(obj)

        buffer = io.BytesIO()
        pickler = pickle.Pickler(buffer)
        pickler.persistent_id = persistent_id
        pickler.dump(message)
        return buffer.getvalue()

    def stand_ins(self, names: list[str], classes: object) -> dict:
        """A stand-in per name: a ``RemoteClass`` for a class the solution described, else a function."""
        self.described = classes if type(classes) is dict else {}
        found = {}
        for name in names:
            stand_in = self._class(name, set())
            found[name] = stand_in if stand_in is not None else self.function(name)
        return found

    def function(self, name: str):
        def call(*args, **kwargs):
            return self.ask("call", name, *args, **kwargs)

        call.__name__ = call.__qualname__ = name
        return call

    def _class(self, name: object, building: set) -> RemoteClass | None:
        """The stand-in for the solution's class ``name`` (and its ancestors'), built from its description."""
        if type(name) is not str or name in self.classes:
            return self.classes.get(name) if type(name) is str else None
        info = self.described.get(name)
        if type(info) is not dict or not name.isidentifier() or name in building:
            return None
        building.add(name)
        error = None if info.get("error") is None else _builtin_error(info.get("error"))
        bases: list = []
        ancestors = info.get("bases")
        for ancestor in ancestors[:MAX_ANCESTORS] if type(ancestors) is list else ():
            base = self._class(ancestor, building)
            same_kind = base is not None and issubclass(base, Remote) == (error is None)
            if same_kind and not any(issubclass(b, base) for b in bases):
                bases.append(base)
        if error is not None and not any(issubclass(b, error) for b in bases):
            bases.append(error)
        namespace = {"__module__": "__main__", "__qualname__": name, "__slots__": (), "_stands_for": (self, name)}
        try:
            stand_in = RemoteClass(name, tuple(bases) or (Remote,), namespace)
        except TypeError:  # bases no class could have (a layout conflict, an inconsistent order)
            stand_in = RemoteClass(name, (error or Remote,), namespace)
        self.classes[name] = stand_in
        return stand_in

    def _class_of(self, names: object, base: type) -> RemoteClass | None:
        """The stand-in of the first of the solution's ``names`` (its classes, nearest first) that derives from ``base``."""
        for name in names[: MAX_ANCESTORS + 1] if type(names) is list else ():
            stand_in = self._class(name, set())
            if stand_in is not None and issubclass(stand_in, base):
                return stand_in
        return None

    def remote(self, data: dict) -> Remote:
        handle, kind = data.get("h"), data.get("type")
        if type(handle) is not int or type(kind) is not str:
            raise TypeError("a garbled handle from the solution")
        if handle not in self.remotes:
            stand_in = self._class_of(data.get("classes"), Remote)
            remote = object.__new__(Remote if stand_in is None else stand_in)
            Remote.__init__(remote, self, handle, kind)
            self.remotes[handle] = remote
        return self.remotes[handle]


def _builtin_error(name: object) -> type:
    """The built-in exception a stand-in derives from: never one that ends iteration or is not an ``Exception``."""
    kind = getattr(builtins, name, None) if type(name) is str else None
    ends_iteration = (StopIteration, StopAsyncIteration)
    if isinstance(kind, type) and issubclass(kind, Exception) and not issubclass(kind, ends_iteration):
        return kind
    return RuntimeError


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


class RemoteClass(type):
    """The tests' stand-in for a class the solution defined (see the module's docstring)."""

    def __call__(cls, *args, **kwargs):
        return _ask_class(cls, "call", *args, **kwargs)

    def __getattr__(cls, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        return _ask_class(cls, "getattr", name)

    def __setattr__(cls, name: str, value):
        if name.startswith("__"):
            type.__setattr__(cls, name, value)
        else:
            _ask_class(cls, "setattr", name, value)

    def __iter__(cls):
        return _ask_class(cls, "iter")

    def __len__(cls):
        return _ask_class(cls, "len")

    def __bool__(cls):  # a class is true, whatever its len()
        return True

    def __getitem__(cls, key):
        return _ask_class(cls, "getitem", key)


def _ask_class(cls: RemoteClass, op: str, *args, **kwargs):
    if "_stands_for" not in type.__getattribute__(cls, "__dict__"):
        raise TypeError(f"{cls.__name__}: the tests' subclass of a class of the solution cannot be used")
    channel, name = type.__getattribute__(cls, "_stands_for")
    return channel.ask(op, name, *args, **kwargs)


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


def exception_name(kind: type) -> str:
    """The name of the nearest built-in class ``kind`` derives from: ``except ValueError`` in the tests
    catches the solution's own ``ValueError`` subclass, and a class merely named like a built-in is not one."""
    for cls in kind.__mro__:
        if getattr(builtins, cls.__name__, None) is cls:
            return cls.__name__
    return "BaseException"
