"""The hostile suite's reward-hack section: wrong solutions that try to forge a pass all fail, right ones pass.

Each hack is what an RL policy finds when the verdict can be reached from the
program: a result whose ``__eq__`` always agrees, a tracing hook that swaps the
tests' ``check`` for a no-op, a completion marker forged from the harness's
frames, early exits of every kind, exceptions that are not ``Exception``\\ s,
finalizers, threads and ``atexit`` handlers, helpers redefined by the
completion, and attacks on the tests' process itself (signals, its memory).
Every hack returns a wrong value, so it passes only if it forged the verdict.
"""

from __future__ import annotations

import json
import uuid

import pytest

from trajkit.confine import plain
from trajkit.verify import Sandbox, verify_many

MARKER = f"tk-test-marker-{uuid.uuid4().hex}"
PROMPT = 'def helper(x):\n    return x * 2\n\n\ndef double_sum(xs):\n    """The sum of helper(x) for x in xs."""\n'
TEST = (
    f"MARKER = {MARKER!r}\n\n\ndef check(candidate):\n"
    "    assert candidate([1, 2]) == helper(3)\n    assert candidate([]) == 0\n"
    "    assert abs(candidate([0.25]) - 0.5) < 1e-9\n"
)
VERIFIER = {
    "kind": "unit_tests",
    "spec": json.dumps({"prompt": PROMPT, "test": TEST, "entry_point": "double_sum", "timeout_s": 3}),
}

# The forger: finds the harness's nonce and status descriptor in the frames, writes a finished status, leaves.
FORGE = """
import gc, json, os, sys
def _forge():
    found = set()
    frame = sys._getframe()
    while frame is not None:
        for key, value in list(frame.f_locals.items()):
            if isinstance(value, str) and len(value) in (16, 32) and key == "nonce":
                found.add(value)
        frame = frame.f_back
    for obj in gc.get_objects():
        if isinstance(obj, dict) and "nonce" in obj and isinstance(obj.get("nonce"), str):
            found.add(obj["nonce"])
    for nonce in found or {"0" * 32}:
        line = json.dumps({"nonce": nonce, "finished": True, "exception": None, "memory": False, "exit_code": 0})
        for fd in range(3, 64):
            try:
                os.write(fd, (line + "\\n").encode())
            except OSError:
                pass
    os._exit(0)
"""

WRONG = "    return 0\n"
HACKS = {
    "always-equal result": (
        "    class Anything:\n"
        "        __eq__ = lambda self, other: True\n        __ne__ = lambda self, other: False\n"
        "        __sub__ = __rsub__ = __add__ = __radd__ = lambda self, other: self\n"
        "        __abs__ = lambda self: 0\n        __lt__ = __le__ = __gt__ = __ge__ = __eq__\n"
        "        __hash__ = lambda self: 0\n"
        "    return Anything()\n"
    ),
    "int subclass that always agrees": (
        "    class Int(int):\n        __eq__ = lambda self, other: True\n        __hash__ = int.__hash__\n"
        "        __sub__ = lambda self, other: 0\n    return Int(7)\n"
    ),
    "str subclass that always agrees": "    class S(str):\n        __eq__ = lambda s, o: True\n    return S('x')\n",
    "tracing hook swaps check for a no-op": (
        "    return 0\n\nimport sys, threading\n"
        "def _tracer(frame, event, arg):\n"
        "    frame.f_globals['check'] = lambda candidate: None\n"
        "    for f in (frame, frame.f_back):\n"
        "        if f is not None:\n            f.f_globals['check'] = lambda candidate: None\n"
        "    return _tracer\n"
        "sys.settrace(_tracer)\nthreading.settrace(_tracer)\nsys._getframe().f_trace = _tracer\n"
    ),
    "completion marker forged from the stack": "    _forge()\n" + FORGE,
    "marker forged at import": "    return 0\n" + FORGE + "_forge()\n",
    "os._exit(0) at import": "    return 0\n\nimport os\nos._exit(0)\n",
    "sys.exit(0) at import": "    return 0\n\nimport sys\nsys.exit(0)\n",
    "sys.exit(0) inside the function": "    import sys\n    sys.exit(0)\n",
    "os._exit(0) inside the function": "    import os\n    os._exit(0)\n",
    "raises KeyboardInterrupt": "    raise KeyboardInterrupt\n",
    "raises GeneratorExit": "    raise GeneratorExit\n",
    "raises a BaseException subclass": "    class Stop(BaseException):\n        pass\n    raise Stop()\n",
    "builtins monkeypatched": (
        "    return 0\n\nimport builtins\nbuiltins.abs = lambda x: 0\nbuiltins.AssertionError = type('N', (Exception,), {})\n"
        "builtins.helper = lambda x: 0\n"
    ),
    "helper redefined by the completion": "    return 0.5 if xs == [0.25] else 0\n\n\ndef helper(x):\n    return 0\n",
    "atexit handler exits 0": "    return 0\n\nimport atexit, os\natexit.register(os._exit, 0)\n"
    + FORGE
    + "atexit.register(_forge)\n",
    "thread forges the marker": "    import time\n    time.sleep(1)\n    return 0\n"
    + FORGE
    + "import threading\nthreading.Thread(target=_forge).start()\n",
    "finalizer exits 0 during the tests": (
        "    import gc, os\n    class Bomb:\n        def __del__(self):\n            os._exit(0)\n"
        "    b = Bomb(); b.me = b\n    del b\n    gc.collect()\n    return 0\n"
    ),
    "kills every other process": (
        "    import os, signal\n    for pid in range(2, 400):\n        if pid != os.getpid():\n"
        "            try:\n                os.kill(pid, signal.SIGKILL)\n            except OSError:\n                pass\n"
        "    return 0\n"
    ),
    "stops every other process": (
        "    import os, signal\n    for pid in range(2, 400):\n        if pid != os.getpid():\n"
        "            try:\n                os.kill(pid, signal.SIGSTOP)\n            except OSError:\n                pass\n"
        "    return 0\n"
    ),
    "reads the tests from memory": (
        "    import os, re\n    needle = b'tk-test-marker-'\n    found = []\n"
        "    for pid in ['self'] + [p for p in os.listdir('/proc') if p.isdigit()]:\n"
        "        for name in ('cmdline', 'environ'):\n"
        "            try:\n                data = open(f'/proc/{pid}/{name}', 'rb').read()\n"
        "            except OSError:\n                continue\n"
        "            found += re.findall(needle + rb'[0-9a-f]{32}', data)\n"
        "        try:\n            maps = open(f'/proc/{pid}/maps').read().splitlines()\n"
        "            mem = open(f'/proc/{pid}/mem', 'rb', 0)\n"
        "        except OSError:\n            continue\n"
        "        for line in maps:\n"
        "            lo, hi = (int(x, 16) for x in line.split()[0].split('-'))\n"
        "            if 'r' not in line.split()[1] or hi - lo > 1 << 28:\n                continue\n"
        "            try:\n                mem.seek(lo)\n                data = mem.read(hi - lo)\n"
        "            except (OSError, ValueError, OverflowError):\n                continue\n"
        "            found += re.findall(needle + rb'[0-9a-f]{32}', data)\n"
        "    print('FOUND', sorted(set(found)))\n"
        "    return 0\n"
    ),
    "writes a forged marker into the tests' descriptors": (
        "    import json, os\n    line = json.dumps({'nonce': '0' * 32, 'finished': True}) + '\\n'\n"
        "    for pid in [p for p in os.listdir('/proc') if p.isdigit()]:\n"
        "        for fd in range(0, 16):\n"
        "            try:\n                with open(f'/proc/{pid}/fd/{fd}', 'w') as f:\n                    f.write(line)\n"
        "            except OSError:\n                pass\n"
        "    return 0\n"
    ),
    "ptraces the tests' process": (
        "    import ctypes, os\n    libc = ctypes.CDLL(None, use_errno=True)\n"
        "    attached = [p for p in os.listdir('/proc') if p.isdigit() and int(p) != os.getpid()\n"
        "                and libc.ptrace(16, int(p), 0, 0) == 0]\n"
        "    print('ATTACHED', attached)\n    return 0\n"
    ),
    "the entry point is a class whose instances always agree": (
        "    pass\n\n\nclass double_sum:\n    __eq__ = lambda self, other: True\n    __hash__ = lambda self: 0\n"
        "    __sub__ = lambda self, other: 0\n    def __init__(self, xs):\n        pass\n"
    ),
    "hardcoded answers wrong elsewhere": "    return {3: 6, 0: 0}.get(sum(xs), 0) if xs != [0.25] else 1\n",
}
RIGHT = {
    "plain": "    return sum(helper(x) for x in xs)\n",
    "numpy scalar": "    import numpy as np\n    return np.float64(sum(helper(x) for x in xs)) if xs else np.int64(0)\n",
    "whole definition with its own helper": (
        "```python\ndef helper(x):\n    return x + x\n\n\ndef double_sum(xs):\n    return sum(helper(x) for x in xs)\n```"
    ),
    "threads, atexit and prints": (
        "    import threading, atexit\n    out = []\n    t = threading.Thread(target=lambda: out.append(sum(map(helper, xs))))\n"
        "    t.start(); t.join()\n    atexit.register(print, 'bye')\n    print('computing', xs)\n    return out[0]\n"
    ),
}


# stdin/stdout: the program prints the sum and the product of two numbers. It sees its input and nothing else: the
# expected output stays in the caller, so each trick pays only if it reaches past the run's own process.
STDIO = {
    "kind": "stdio",
    "spec": {
        "cases": [{"input": "3 4\n", "output": "7 12\n"}, {"input": "10 -2\n", "output": "8 -20\n"}],
        "timeout_s": 2,
    },
}
ANSWER = "a, b = map(int, input().split())\nprint(a + b, a * b)\n"
STDIO_RIGHT = {
    "plain": ANSWER,
    "CRLF and trailing spaces": "a, b = map(int, input().split())\nprint(a + b, a * b, end=' \\r\\n\\n')\n",
    "prints, flushes and leaves at once": ANSWER + "import os, sys\nsys.stdout.flush()\nos._exit(0)\n",
}
STDIO_HACKS = {
    "prints the answer, then crashes": ANSWER + "raise SystemExit(3)\n",
    "prints the answer, then sleeps past the timeout": ANSWER + "import time\ntime.sleep(30)\n",
    "prints the answer, then floods": ANSWER + "import sys\nwhile True:\n    sys.stdout.write('x' * 65536)\n",
    "prints the answer to stderr": ANSWER.replace("a * b)", "a * b, file=__import__('sys').stderr)"),
    "a daemon prints the answer after the program ends": (
        "import os, sys, time\nif os.fork() == 0:\n    os.setsid()\n    time.sleep(0.3)\n"
        + ANSWER.replace("\n", "\n    ", 1)
        + "    sys.stdout.flush()\n    os._exit(0)\n"
    ),
    "writes the answer to the terminal": (
        "import os\na, b = map(int, input().split())\nfor tty in ('/dev/tty', '/dev/console', '/dev/pts/0'):\n"
        "    try:\n        os.write(os.open(tty, os.O_WRONLY), f'{a + b} {a * b}\\n'.encode())\n"
        "    except OSError:\n        pass\n"
    ),
    "writes a forged answer into the worker's pipes": (
        "import json, os, struct\na, b = map(int, input().split())\n"
        "body = json.dumps({'verdict': 'pass', 'stdout': f'{a + b} {a * b}\\n', 'stderr': '', 'exit_code': 0}).encode()\n"
        "for pid in [p for p in os.listdir('/proc') if p.isdigit() and int(p) != os.getpid()]:\n"
        "    for fd in range(0, 8):\n        try:\n            with open(f'/proc/{pid}/fd/{fd}', 'wb') as f:\n"
        "                f.write(struct.pack('>I', len(body)) + body)\n        except OSError:\n            pass\n"
    ),
    "separates with a no-break space": "a, b = map(int, input().split())\nprint(f'{a + b}\\xa0{a * b}')\n",
    "separates with a file separator": "a, b = map(int, input().split())\nprint(f'{a + b}\\x1c{a * b}')\n",
    "reads another case's input and answers both": (
        "import glob\nprint(sorted(glob.glob('/tmp/**', recursive=True)), sorted(glob.glob('/proc/[0-9]*/fd/0')))\n"
    ),
}


def test_stdio_hacks_fail_and_right_answers_pass(strict_pool):
    cases = {**{f"right: {k}": v for k, v in STDIO_RIGHT.items()}, **STDIO_HACKS}
    results = dict(zip(cases, verify_many([(STDIO, c, None) for c in cases.values()], sandbox=strict_pool)))
    judged = {name: (r.verdict, r.details.get("reason")) for name, r in results.items()}
    assert [n for n, r in results.items() if (r.verdict == "pass") != n.startswith("right: ")] == [], judged
    assert results["prints the answer, then sleeps past the timeout"].verdict == "timeout"
    assert results["prints the answer, then floods"].details["cases"][0]["reason"].startswith("output exceeded")
    assert all(w.proc.poll() is None for w in strict_pool._pool), "a worker died"


@pytest.fixture(scope="module")
def strict_pool():
    with Sandbox(workers=2, namespaces=True, drop_privileges=True, cgroups=True) as sandbox:
        yield sandbox


def test_reward_hacks_fail_and_right_solutions_pass(strict_pool):
    # the right solutions run first, so that the workers have served these tests before the hacks run
    cases = {**{f"right: {k}": v for k, v in RIGHT.items()}, **HACKS}
    items = [(VERIFIER, completion, None) for completion in cases.values()]
    results = dict(zip(cases, verify_many(items, sandbox=strict_pool)))
    judged_wrongly = [
        name for name, result in results.items() if (result.verdict == "pass") != name.startswith("right: ")
    ]
    assert judged_wrongly == [], {name: results[name] for name in judged_wrongly}
    for name, result in results.items():
        assert result.score == float(name.startswith("right: "))
        assert MARKER not in result.output_tail, f"{name} read the tests: {result.output_tail}"
    assert "FOUND []" in results["reads the tests from memory"].output_tail
    assert "ATTACHED []" in results["ptraces the tests' process"].output_tail
    assert results["always-equal result"].details["reason"] == "AssertionError: "  # it never compared itself
    assert results["stops every other process"].verdict == "timeout"
    assert all(w.proc.poll() is None for w in strict_pool._pool), "a worker died"


def test_values_cross_as_exact_built_in_types(strict_pool):
    """Every built-in or standard library kind a solution returns arrives as that exact type and value."""
    value = (
        "[1, -2**200, 0.1, float('inf'), 1+2j, b'x\\x00', 'é\\ud800', None, True, (1, (2,)), {1, 2}, frozenset({3}),"
        " {'k': [1.5]}, F(-1, 3), D('-0.10'), D('sNaN'), bytearray(b'a'), Q([1], maxlen=2), {2: 1, 1: 2}.items(),"
        " {(1, 2), (3, 4)}, T.date(2020, 2, 29), T.timedelta(-1, 5), T.datetime(2020, 1, 1, 12, tzinfo=T.timezone.utc),"
        " T.time(1, 2, fold=1), -0.0, float('nan')]"
    )
    imports = (
        "from fractions import Fraction as F\nfrom decimal import Decimal as D\nfrom collections import deque as Q\n"
        "import datetime as T\n"
    )
    test = imports + f"V = {value}\nassert repr(f()) == repr(V) and [type(v) for v in f()] == [type(v) for v in V]\n"
    spec = json.dumps({"test": test, "timeout_s": 10})
    good = verify_many(
        [({"kind": "unit_tests", "spec": spec}, f"{imports}def f():\n    return {value}\n", None)], sandbox=strict_pool
    )
    assert good[0].verdict == "pass", good[0]


SOLUTION = """
class Pair:
    def __init__(self, a, b):
        self.a, self.b = a, b

def max_chain_length(pairs, n):
    best, end = 0, float("-inf")
    for p in sorted(pairs, key=lambda p: p.b):
        if p.a > end:
            best, end = best + 1, p.b
    return best

class Stack:
    def __init__(self):
        self.items = []
    def push(self, x):
        self.items.append(x)
    def pop(self):
        return self.items.pop()
    def __len__(self):
        return len(self.items)
    def __setitem__(self, i, x):
        self.items[i] = x
    def __str__(self):
        return f"Stack{self.items}"

def squares(n):
    return (i * i for i in range(n))

def apply_all(g, xs):
    return [g(x) for x in xs]

def sorted_by(xs, key):
    return sorted(xs, key=key)

def swallow(g):
    try:
        g(-1)
    except BaseException:
        pass
    return 1

def emptied(xs):
    xs.clear()
    return []

def fails_after(n):
    yield from range(n)
    raise ValueError("late")

def naturals():
    i = 0
    while True:
        yield i
        i += 1

def as_text(xs):
    return map(str, xs)

def indices(n):
    return range(n)

def truthy():
    return object()

class Everything:
    def __contains__(self, item):
        return True
    def __iter__(self):
        return iter([])

def everything():
    return Everything()

def stops(x):
    raise StopIteration

def fake_stop(x):
    class StopIteration(Exception):
        pass
    raise StopIteration

class Invalid(ValueError):
    pass

def checked(x):
    raise Invalid("negative")

import collections

def counts(s):
    return collections.Counter(s)

def ordered():
    return collections.OrderedDict(a=1)

def defaults():
    d = collections.defaultdict(int)
    d[1] += 2
    return d

Point = collections.namedtuple("Point", "x y")

def point():
    return Point(1, 2)

def norm(p):
    return p.x * p.x + p.y * p.y if isinstance(p, Point) else sum(p)

def first(view):
    return next(iter(view)) if type(view).__name__.startswith("dict_") else None

def cons(n):
    x = None
    for i in range(n):
        x = (i, x)
    return x

def ordered_wrong():
    return collections.OrderedDict([("b", 2), ("a", 1)])

from fractions import Fraction
from decimal import Decimal
import enum

def half():
    return Fraction(1, 2)

def price():
    return Decimal("1.10")

def keys():
    return {3: 4, 1: 2}.keys()

def items():
    return {3: 4, 1: 2}.items()

def values():
    return {3: 4, 1: 2}.values()

class Animal:
    legs = 4
    def __init__(self, name):
        self.name = name

class Dog(Animal):
    pass

class Puppy(Dog):
    pass

def pet(young):
    return Puppy("Rex") if young else Dog("Rex")

class Worse(Invalid):
    pass

def worse():
    raise Worse("much")

class Color(enum.Enum):
    RED = 1
    BLUE = 2

def color():
    return Color.RED

def grid():
    import numpy as np
    return np.array([[1, 2], [3, 4]])

def flags():
    import numpy as np
    return np.array([True, False])

def words():
    import numpy as np
    return np.array(["a", "bc"])

def buf():
    return bytearray(b"ab")

def window():
    return collections.deque([1, 2, 3], maxlen=2)

class Stop(StopIteration):
    pass

def stops_own(x):
    raise Stop

class FractionLiar(Fraction):
    __eq__ = lambda self, other: True
    __hash__ = Fraction.__hash__

def fraction_liar():
    return FractionLiar(7)

class DecimalLiar(Decimal):
    __eq__ = lambda self, other: True
    __hash__ = Decimal.__hash__

def decimal_liar():
    return DecimalLiar(7)

class Key:
    __eq__ = lambda self, other: True
    __hash__ = lambda self: 1

def liar_keys():
    return {Key(): 0}.keys()
"""
OBJECT_TESTS = {
    "an instance passed back to the solution": "assert max_chain_length([Pair(5, 24), Pair(15, 25), Pair(27, 40), Pair(50, 60)], 4) == 3",
    "methods, len and str of an instance": "s = Stack()\ns.push(4)\nassert len(s) == 1 and str(s) == 'Stack[4]'\nassert s.pop() == 4 and len(s) == 0\nassert s.items == []",
    "attributes and items set by the tests": (
        "s = Stack()\ns.push(1)\ns[0] = 5\ns.label = 'a'\nassert s.pop() == 5 and s.label == 'a'"
    ),
    "a generator": "assert list(squares(4)) == [0, 1, 4, 9] and sorted(squares(3), reverse=True) == [4, 1, 0]",
    "an endless generator read in part": "import itertools\nassert list(itertools.islice(naturals(), 3)) == [0, 1, 2]",
    "a map": "assert list(as_text([1, 2])) == ['1', '2'] and ','.join(as_text([3])) == '3'",
    "a range": "assert indices(3) == range(3) and type(indices(3)) is range",
    "a long generator, fetched ahead": "assert sum(squares(200000)) == 2666646666700000",
    "an error after a generator's values": (
        "got = []\ntry:\n    for v in fails_after(3):\n        got.append(v)\nexcept ValueError as e:\n"
        "    assert got == [0, 1, 2] and str(e) == 'late'\nelse:\n    raise AssertionError"
    ),
    "functions of the tests as callbacks": (
        "def sq(x):\n    return x * x\n"
        "assert apply_all(sq, [1, 2]) == [1, 4] and sorted_by([3, 1, 2], key=lambda x: -x) == [3, 2, 1]\n"
        "assert apply_all(lambda n: list(squares(n)), [2, 3]) == [[0, 1], [0, 1, 4]]\n"
        "try:\n    apply_all(int, ['x'])\nexcept ValueError:\n    pass\nelse:\n    raise AssertionError"
    ),
    "in over a generator": "assert 4 in squares(4) and 2 not in squares(4)",
    "the solution's ValueError subclass caught as one": (
        "try:\n    checked(-1)\nexcept ValueError as e:\n    assert str(e) == 'negative'\nelse:\n    raise AssertionError"
    ),
    "standard library dicts and named tuples": (
        "from collections import Counter, OrderedDict\n"
        "assert counts('aab') == {'a': 2, 'b': 1} and ordered() == {'a': 1} and defaults() == {1: 2}\n"
        "assert counts('aab').most_common(1) == [('a', 2)] and type(counts('a')) is Counter\n"
        "assert type(ordered()) is OrderedDict and defaults()[7] == 0\n"
        "assert point() == (1, 2) == Point(1, 2) and point().y == 2 and point()._fields == ('x', 'y')\n"
        "assert norm(point()) == 5 and norm((3, 4)) == 7 and first(keys()) == 3 and first(items()) == (3, 4)"
    ),
    "exact fractions and decimals": (
        "from fractions import Fraction\nfrom decimal import Decimal\nimport math\n"
        "assert half() == 0.5 and half() == Fraction(1, 2) and type(half()) is Fraction\n"
        "assert math.isclose(half(), 0.5) and abs(half() - 0.5) < 1e-9\n"
        "assert price() == Decimal('1.1') and float(price()) == 1.1 and str(price()) == '1.10'"
    ),
    "dict views": (
        "assert keys() == {1, 3} and list(keys()) == [3, 1] and keys() - {1} == {3}\n"
        "assert items() == {(1, 2), (3, 4)} and list(items()) == [(3, 4), (1, 2)]\n"
        "assert sorted(values()) == [2, 4] and 4 in values() and values() != [4, 2]"
    ),
    "the solution's classes in isinstance, type() and except": (
        "assert isinstance(pet(True), Dog) and isinstance(pet(True), Animal) and type(pet(False)) is Dog\n"
        "assert type(pet(True)) is not Dog and not isinstance(Pair(1, 2), Animal) and issubclass(Dog, Animal)\n"
        "assert pet(True).name == 'Rex' and Dog.legs == 4 and isinstance(Dog('a'), Animal)\n"
        "try:\n    worse()\nexcept Invalid as e:\n"
        "    assert type(e) is not Invalid and isinstance(e, ValueError) and str(e) == 'much'\n"
        "else:\n    raise AssertionError\n"
        "try:\n    checked(-1)\nexcept Invalid:\n    pass\nelse:\n    raise AssertionError"
    ),
    "an enum": (
        "assert color() == Color.RED and color() is Color.RED and Color(1) is Color.RED and color() != Color.BLUE\n"
        "assert list(Color) == [Color.RED, Color.BLUE] and Color.RED.value == 1 and isinstance(color(), Color)"
    ),
    "numpy arrays": (
        "import numpy as np\n"
        "assert (grid() == [[1, 2], [3, 4]]).all() and np.array_equal(grid(), [[1, 2], [3, 4]])\n"
        "assert grid().shape == (2, 2) and (grid() * 2).sum() == 20 and type(grid()) is np.ndarray\n"
        "assert flags().dtype == bool and list(flags()) == [True, False] and (words() == ['a', 'bc']).all()"
    ),
    "a list of pairs nested 300 deep": "x = None\nfor i in range(300):\n    x = (i, x)\nassert cons(300) == x",
    "bytearray and deque": (
        "from collections import deque\n"
        "assert buf() == b'ab' and type(buf()) is bytearray and window() == deque([2, 3]) and window().maxlen == 2"
    ),
}
WRONG_OBJECT_TESTS = {
    "a generator is not a list": "assert squares(2) == [0, 1]",
    "an object is not true": "assert truthy()",
    "an instance is not its fields": "assert Pair(1, 2) == Pair(1, 2)",
    "a failed assertion in a callback caught by the solution": (
        "def positive(x):\n    assert x > 0\n    return x\nassert swallow(positive) == 1"
    ),
    "empties the tests' list the expected value comes from": "xs = [3, 1, 2]\nassert emptied(xs) == sorted(xs)",
    "in decided by the solution's __contains__": "assert 'needle' in everything()",
    "a StopIteration ends the test's map early": "assert all(map(lambda p: stops(p[0]) == p[1], [(1, 2), (2, 4)]))",
    "an exception merely named StopIteration": "assert all(map(lambda p: fake_stop(p[0]) == p[1], [(1, 2)]))",
    "a StopIteration subclass of the solution's ends the test's map early": (
        "assert all(map(lambda p: stops_own(p[0]) == p[1], [(1, 2), (2, 4)]))"
    ),
    "an OrderedDict in another order": (
        "from collections import OrderedDict\nassert ordered_wrong() == OrderedDict([('a', 1), ('b', 2)])"
    ),
    "a Fraction subclass that always agrees": "from fractions import Fraction\nassert fraction_liar() == Fraction(1, 3)",
    "a Decimal subclass that always agrees": "from decimal import Decimal\nassert decimal_liar() == Decimal('0.5')",
    "dict keys that always agree": "assert liar_keys() == {1}",
    "of the solution's class, but not the value": "assert isinstance(pet(False), Animal) and pet(False) == 'Rex'",
    "an instance of another class of the solution": "assert isinstance(Pair(1, 2), Animal)",
}


def test_objects_cross_as_handles(strict_pool):
    """Generators, maps, ranges and the solution's own class instances work as they would in one process,
    while their ``__eq__`` and truth value never decide a test."""
    cases = {**OBJECT_TESTS, **WRONG_OBJECT_TESTS}
    items = [({"kind": "unit_tests", "spec": json.dumps({"test": t})}, SOLUTION, None) for t in cases.values()]
    results = dict(zip(cases, verify_many(items, sandbox=strict_pool)))
    assert {name: r.verdict for name, r in results.items()} == {
        **{name: "pass" for name in OBJECT_TESTS},
        **{name: "fail" for name in WRONG_OBJECT_TESTS},
    }, results
    assert "no truth value" in results["an object is not true"].details["reason"]


# The solution's process is the adversary's: it may rewrite what it sends. Each forger fails all the same.
_CROSSING = "import sys\ncrossing = sys._getframe(1).f_globals['crossing']  # harness.serve's\n"
FORGED = {
    "a garbled Decimal raises decimal's own exception for the tests": (
        _CROSSING + "crossing.to_plain = lambda value, handle: {'D': 'not a number'}\ndef parse(s):\n    return 0\n",
        "import decimal\ntry:\n    parse('x')\nexcept decimal.InvalidOperation:\n    pass\nelse:\n    raise AssertionError",
    ),
    "its function described as an exception class, built true in the tests": (
        _CROSSING
        + "crossing.describe_classes = lambda scope: {'is_even': {'bases': [], 'error': 'ValueError'}}\n"
        + "def is_even(n):\n    return 0\n",
        "assert is_even(2)",
    ),
    "its ValueError described as a StopIteration, ending the test's map early": (
        _CROSSING
        + "crossing.describe_classes = lambda scope: {'Stop': {'bases': ['Stop', 5], 'error': 'StopIteration'}}\n"
        + "crossing.own_classes = lambda cls, scope: ['Stop']\ndef stop(x):\n    raise ValueError\n",
        "assert all(map(lambda p: stop(p[0]) == p[1], [(1, 2), (2, 4)]))",
    ),
    "a handle that says it is of the tests' class": (
        _CROSSING
        + "crossing.describe_classes = lambda scope: {'Box': {'bases': ['Box', 'Nope'], 'error': None}}\n"
        + "crossing.own_classes = lambda cls, scope: ['Box']\ndef area():\n    return object()\n",
        "assert isinstance(area(), Box)\nassert area() == 4",
    ),
    "JSON nested a million deep": (
        _CROSSING
        + "class Deep:\n    dumps = staticmethod(lambda value: '[' * 10**6 + ']' * 10**6)\n"
        + "crossing.json = Deep\ndef f():\n    return []\n",
        "assert f() == []",
    ),
    "a list that contains itself": "def f():\n    a = []\n    a.append(a)\n    return a\n",
    "an answer over the size limit": "def f():\n    return b'x' * (40 << 20)\n",
}
FORGED["a list that contains itself"] = (FORGED["a list that contains itself"], "assert f() == [[]]")
FORGED["an answer over the size limit"] = (FORGED["an answer over the size limit"], "assert f() == b'x'")


def test_forged_crossings_fail(strict_pool):
    items = [({"kind": "unit_tests", "spec": json.dumps({"test": t})}, s, None) for s, t in FORGED.values()]
    results = dict(zip(FORGED, verify_many(items, sandbox=strict_pool)))
    assert {name: r.verdict for name, r in results.items()} == dict.fromkeys(FORGED, "fail"), results
    assert "garbled" in results["a garbled Decimal raises decimal's own exception for the tests"].details["reason"]
    assert results["JSON nested a million deep"].details["reason"].startswith("RecursionError")
    assert "line 2" in results["a handle that says it is of the tests' class"].output_tail  # isinstance held
    assert all(w.proc.poll() is None for w in strict_pool._pool), "a worker died"


@pytest.mark.parametrize(
    "data",
    [
        {"nd": ["|O8", [1], "00" * 8]},  # an object array: pointers chosen by the solution
        {"nd": ["|V8", [1], "00" * 8]},
        {"nd": ["<i8", [2], "00" * 8]},  # fewer bytes than the shape needs
        {"nt": ["P", ["x=__import__('os')"], [1]]},
        {"q": ["0x1", "0x0"]},
        {"D": "not a number"},
        {"i": "zz"},
        {"dk": [[1]]},  # an unhashable key
        {"dd": [{"i": "0x5"}, []]},  # a factory that cannot be called
        {"dq": [[], -1]},
        {"t": {"i": "0x1"}},
    ],
)
def test_garbled_data_raises_type_error(data):
    """Whatever the solution's process sends, the tests' side builds a genuine value or raises TypeError."""
    with pytest.raises(TypeError):
        plain.from_plain(data, None)


def test_boolean_arrays_are_rebuilt_from_their_truth_values():
    import numpy as np

    flags = plain.from_plain({"nd": ["|b1", [3], "000201"]}, None)
    assert type(flags) is np.ndarray and flags.view(np.uint8).tolist() == [0, 1, 1] and flags.sum() == 2
