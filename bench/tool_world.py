"""bench/tool_learning.py's task world, its scripted teacher and its scripted judge.

**The world.** ``TEMPLATES``: task templates over the project's MCP servers
(``trajkit.envs.servers``: calculator, kv, units): one tool, several tools of
one server, and two servers together. A template is a question with parameters,
the reference solution (turns of tool calls, each computed from the parameters
and the tool results so far) and what is checked by trajkit's answer matching
(``trajkit.verify.matching``): the final ``Answer:`` line (the last tool
result's number, ``number``; or the value read back, ``exact``) and/or the kv
server's end state (probes, compared as values). Expected values come from
running the solution on the servers' own tool functions (kv's store is a dict
here), so they are what the real servers return. Every question parses back to one template and its parameters
(``parse``): that is how the teacher, like a model, knows what it is asked.

**The teacher** (``Teacher``, served over HTTP by
``trajkit.models.scripted_server``) is the task generator of ``synth tasks``
(candidates from the templates that fit the drawn tools and servers, parameters
drawn from a hash of the request) and the agent of ``synth rollouts``: the
reference solution, except that each episode gets one injected label, drawn
from a hash of the question and the episode's seed with the shares of
``LABELS`` (the bench's docstring states them):

* ``correct`` -- the reference solution, then a sentence and the ``Answer:`` line
  (the one the agent's system prompt asks for), from the last tool result;
* ``wrong_tool`` -- one call goes to a confusable tool (subtract for add,
  list_units for convert, get for set, ...); the rest follows from its result;
* ``wrong_arguments`` -- one argument is off (a number, a swapped unit, a
  misspelt key); the rest follows from its result;
* ``missing_call`` -- no tool at all: the answer comes "from memory", right for
  about half of the tasks, otherwise off by a little;
* ``ignores_result`` -- the first call has a wrong argument, but what follows
  (later calls, the value saved, the final answer) uses the right values, not
  what the tools said;
* ``redundant_calls`` -- the reference solution with one call made twice;
* ``wrong_type`` -- one argument of the wrong JSON type (the string ``"12"``
  for the number ``12``; a number for a string): it parses, but breaks the
  tool's schema.

``label(question, seed)`` is that draw, so the bench writes each rollout's label
to a side file from the trajectory's question and sampling seed; nothing the
judge reads carries it. The model name ``teacher-reference`` answers every
episode correctly (the held-out reference trajectories ``eval tools`` replays).

**The judge** (``Teacher`` again, on the judge prompts) reads only the prompt's
text, as an LLM judge would: every task is rated well; a trajectory is fully
complete when its final answer is grounded in the last tool result (the
answer's value appears there), incomplete when it is not or the last call
failed, very incomplete without a tool call or an answer; redundant when a call
repeats one with the same arguments. It does not see argument types, nor
whether a saved value followed from the tools.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
import string
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from trajkit.demo.fixture import TASK_RATINGS, data_block, ratings_xml, verdict_nonce
from trajkit.envs.servers import calculator, units

Call = tuple[str, dict[str, Any]]
Step = Callable[[dict[str, Any], list[Any]], list[Call]]

# (label, share): fixed before any arm runs; bench/tool_learning.py's docstring states the same numbers
LABELS: tuple[tuple[str, float], ...] = (
    ("correct", 0.55),
    ("wrong_tool", 0.08),
    ("wrong_arguments", 0.08),
    ("missing_call", 0.07),
    ("ignores_result", 0.07),
    ("redundant_calls", 0.07),
    ("wrong_type", 0.08),
)
REFERENCE_MODEL = "teacher-reference"
UNKNOWN = "I cannot help with that request."
NUMBER = r"-?\d+(?:\.\d+)?"
_KINDS = {"number": NUMBER, "word": r"[a-z][a-z_]*", "text": r"[a-z][a-z ]*?"}


def fmt(x: Any) -> str:
    """A value as the servers write it: an integer without ``.0``, a float in Python's shortest form."""
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return str(x)
    return str(int(x)) if float(x).is_integer() else repr(float(x))


def value_of(text: str) -> Any:
    """A tool result's text as a value: a number when it is one, else the text."""
    t = (text or "").strip()
    if re.fullmatch(NUMBER, t):
        return int(t) if "." not in t else float(t)
    return t


def run_tool(tool: str, args: dict[str, Any], kv: dict[str, str]) -> str:
    """The text of one tool call as the real server answers it (``kv``: the kv server's state)."""
    try:
        if tool == "set":
            kv[args["key"]] = args["value"]
            return f"ok: {args['key']} = {args['value']}"
        if tool in ("get", "delete"):
            if args["key"] not in kv:
                return f"Error: no such key: {args['key']}"
            if tool == "get":
                return kv[args["key"]]
            del kv[args["key"]]
            return f"deleted: {args['key']}"
        if tool == "list_keys":
            return json.dumps(sorted(kv))
        if tool == "dump":
            return json.dumps(kv, sort_keys=True)
        module = units if tool in ("convert", "list_units") else calculator
        return fmt(getattr(module, tool)(**args))
    except Exception as e:  # noqa: BLE001 - a tool error is a result, as the server reports it
        return f"Error: {e}"


# ---------------------------------------------------------------- templates
@dataclass(frozen=True)
class Template:
    """A task template: question, parameters, reference solution, checks."""

    key: str
    servers: tuple[str, ...]
    question: str
    draw: Callable[[random.Random], dict[str, Any]]
    steps: tuple[Step, ...]  # one turn each; a step may make several calls at once
    reply: str  # the final sentence: {x} is the last tool result, other fields are parameters
    # how the answer is checked: "number" (the last tool result's last number), "exact" (the ``saved`` value),
    # None (not at all: the kv end state is what counts)
    match: str | None = "number"
    probes: tuple[Call, ...] = ()  # end-state checks on kv ("$name" arguments are parameters)
    saved: str | None = None  # what a state task's answer line repeats: a parameter, or "x" (the last result)
    words: tuple[str, ...] = ()  # parameters that are words, not numbers
    texts: tuple[str, ...] = ()  # parameters that are phrases
    tools: tuple[str, ...] = field(init=False)
    pattern: re.Pattern = field(init=False)

    def __post_init__(self) -> None:
        calls = self.solve(self.draw(random.Random(0)))[0]
        object.__setattr__(self, "tools", tuple(dict.fromkeys(t for t, _ in calls)))
        regex = ""
        for literal, name, _, _ in string.Formatter().parse(self.question):
            regex += re.escape(literal)
            if name:
                kind = "word" if name in self.words else "text" if name in self.texts else "number"
                regex += f"(?P<{name}>{_KINDS[kind]})" if f"(?P<{name}>" not in regex else f"(?P={name})"
        object.__setattr__(self, "pattern", re.compile(regex))

    @property
    def combo(self) -> str:
        """The server/tool combination: the tools in the order the solution first calls them."""
        return "+".join(self.tools)

    def text(self, p: dict[str, Any]) -> str:
        return self.question.format(**{k: fmt(v) for k, v in p.items()})

    def parse(self, question: str) -> dict[str, Any] | None:
        m = self.pattern.fullmatch(question.strip())
        if m is None:
            return None
        return {k: v if k in self.words or k in self.texts else value_of(v) for k, v in m.groupdict().items()}

    def solve(self, p: dict[str, Any]) -> tuple[list[Call], list[str], dict[str, str]]:
        """(every call, every result text, the kv end state) of the reference solution."""
        kv: dict[str, str] = {}
        calls, results = [], []
        for make in self.steps:
            for tool, args in make(p, [value_of(r) for r in results]):
                calls.append((tool, args))
                results.append(run_tool(tool, args, kv))
        return calls, results, kv

    def candidate(self, p: dict[str, Any]) -> dict[str, Any]:
        """The task as a generator writes it (the fields ``examples/prompts/task_fields.md`` asks for)."""
        _, results, kv = self.solve(p)
        state = []
        for tool, args in self.probes:
            args = {k: p[v[1:]] if isinstance(v, str) and v.startswith("$") else v for k, v in args.items()}
            state.append({"tool": tool, "arguments": args, "expected": run_tool(tool, args, dict(kv))})
        return {
            "question": self.text(p),
            "target_tools": list(self.tools),
            "answer": read_number(results[-1])
            if self.match == "number"
            else fmt(p[self.saved])
            if self.match
            else None,
            "answer_match": self.match,
            "state": state,
        }


def step(tool: str, **args: Any) -> Step:
    """One call; an argument is a constant, a parameter (``"$a"``), or ``f(params, result values)``."""

    def make(p: dict[str, Any], r: list[Any]) -> list[Call]:
        return [(tool, {k: _arg(v, p, r) for k, v in args.items()})]

    return make


def _arg(v: Any, p: dict[str, Any], r: list[Any]) -> Any:
    if callable(v):
        return v(p, r)
    return p[v[1:]] if isinstance(v, str) and v.startswith("$") else v


def together(*steps: Step) -> Step:
    """Calls made in one turn (in parallel)."""
    return lambda p, r: [c for s in steps for c in s(p, r)]


def last(p: dict[str, Any], r: list[Any]) -> Any:
    """The last tool result as a number (the first number in it; a model reads it so)."""
    return r[-1] if isinstance(r[-1], (int, float)) else next(iter(re.findall(NUMBER, str(r[-1]))), 0)


def last_text(p: dict[str, Any], r: list[Any]) -> str:
    return fmt(last(p, r))


def text_of(name: str) -> Callable[[dict[str, Any], list[Any]], str]:
    return lambda p, r: fmt(p[name])


def ints(r: random.Random, **ranges: tuple[int, int]) -> dict[str, int]:
    return {k: r.randint(lo, hi) for k, (lo, hi) in ranges.items()}


def half(r: random.Random, lo: int, hi: int) -> float:
    """A number with at most one decimal, half of them whole."""
    return r.randint(lo * 2, hi * 2) / 2 if r.random() < 0.5 else r.randint(lo, hi)


def divisible(r: random.Random) -> dict[str, int]:
    b = r.randint(2, 9)
    return {"a": b * r.randint(6, 90), "b": b}


KEYS = ("locker", "gate", "wifi", "alarm", "bike", "safe", "door", "garage", "office", "vault", "shed", "studio")
COLORS = ("blue", "green", "amber", "violet", "silver", "coral", "olive", "ivory", "teal", "crimson", "indigo")
NOTES = ("call mom", "buy milk", "pay rent", "water plants", "book dentist", "return library books")
T = Template
N = "The result is {x}."

TEMPLATES: tuple[Template, ...] = (
    # ---- calculator, one tool
    T(
        "lamp-rug",
        ("calculator",),
        "I paid {a} dollars for a lamp and {b} dollars for a rug. How much did I spend in total?",
        lambda r: ints(r, a=(12, 480), b=(12, 480)),
        (step("add", a="$a", b="$b"),),
        "You spent {x} dollars in total.",
    ),
    T(
        "two-halves",
        ("calculator",),
        "Our team scored {a} points in the first half and {b} in the second half. What was the final score?",
        lambda r: ints(r, a=(10, 70), b=(10, 70)),
        (step("add", a="$a", b="$b"),),
        "The final score was {x} points.",
    ),
    T(
        "budget-left",
        ("calculator",),
        "My monthly budget is {a} dollars and I have spent {b} so far. How much is left?",
        lambda r: ints(r, a=(300, 900), b=(20, 290)),
        (step("subtract", a="$a", b="$b"),),
        "You have {x} dollars left.",
    ),
    T(
        "tank-leak",
        ("calculator",),
        "A water tank held {a} liters and {b} liters leaked out overnight. How much water remains?",
        lambda r: ints(r, a=(200, 999), b=(10, 190)),
        (step("subtract", a="$a", b="$b"),),
        "{x} liters remain.",
    ),
    T(
        "crates",
        ("calculator",),
        "A crate holds {a} bottles. How many bottles are in {b} crates?",
        lambda r: ints(r, a=(6, 48), b=(3, 60)),
        (step("multiply", a="$a", b="$b"),),
        "There are {x} bottles.",
    ),
    T(
        "cinema",
        ("calculator",),
        "A cinema hall has {a} rows with {b} seats in each row. How many seats does it have?",
        lambda r: ints(r, a=(8, 40), b=(10, 36)),
        (step("multiply", a="$a", b="$b"),),
        "The hall has {x} seats.",
    ),
    T(
        "split-bill",
        ("calculator",),
        "We are {b} friends and split a restaurant bill of {a} dollars evenly. How much does each of us pay?",
        divisible,
        (step("divide", a="$a", b="$b"),),
        "Each of you pays {x} dollars.",
    ),
    T(
        "pin-codes",
        ("calculator",),
        "How many different codes of length {n} can be made from an alphabet of {k} symbols?",
        lambda r: ints(r, n=(2, 6), k=(2, 12)),
        (step("power", base="$k", exponent="$n"),),
        "There are {x} codes.",
    ),
    T(
        "patio-side",
        ("calculator",),
        "A square patio has an area of {a} square feet. How long is each side in feet?",
        lambda r: {"a": r.randint(4, 60) ** 2},
        (step("sqrt", x="$a"),),
        "Each side is {x} feet long.",
    ),
    T(
        "invoice",
        ("calculator",),
        "Check my invoice: {n} items at {p} dollars each plus {s} dollars for shipping. What is the total?",
        lambda r: ints(r, n=(2, 12), p=(5, 99), s=(3, 25)),
        (step("evaluate", expression=lambda p, r: f"{p['n']} * {p['p']} + {p['s']}"),),
        "The total is {x} dollars.",
    ),
    # ---- calculator, several tools
    T(
        "cans",
        ("calculator",),
        "A box holds {a} cans. I have {b} full boxes and {c} loose cans. How many cans do I have?",
        lambda r: ints(r, a=(6, 30), b=(2, 20), c=(1, 5)),
        (step("multiply", a="$a", b="$b"), step("add", a=last, b="$c")),
        "You have {x} cans.",
    ),
    T(
        "recipe-scale",
        ("calculator",),
        "A recipe for {p} people needs {g} grams of sugar. How many grams do I need for {q} people?",
        lambda r: {"p": r.choice((2, 4, 5)), "g": r.choice((100, 200, 300, 400, 500)), "q": r.randint(2, 20)},
        (step("multiply", a="$g", b="$q"), step("divide", a=last, b="$p")),
        "You need {x} grams of sugar.",
    ),
    T(
        "jacket-sale",
        ("calculator",),
        "A jacket costs {a} dollars and is reduced by {b} dollars. What do {n} jackets cost after the reduction?",
        lambda r: ints(r, a=(40, 200), b=(5, 35), n=(2, 9)),
        (step("subtract", a="$a", b="$b"), step("multiply", a=last, b="$n")),
        "{n} jackets cost {x} dollars.",
    ),
    T(
        "power-root",
        ("calculator",),
        "Raise {a} to the power of {b}, then take the square root of the result. What number do I get?",
        lambda r: {"a": r.randint(2, 30), "b": r.choice((2, 4, 6))},
        (step("power", base="$a", exponent="$b"), step("sqrt", x=last)),
        N,
    ),
    T(
        "shared-invoices",
        ("calculator",),
        "Two invoices of {a} and {b} dollars are shared equally by {n} flatmates. How much does each flatmate pay?",
        lambda r: {"n": r.choice((2, 4, 5)), **ints(r, a=(20, 400), b=(20, 400))},
        (step("add", a="$a", b="$b"), step("divide", a=last, b="$n")),
        "Each flatmate pays {x} dollars.",
    ),
    T(
        "fence-posts",
        ("calculator",),
        "A fence is {a} meters long with a post every {b} meters, plus one post at the start. How many posts are there?",
        divisible,
        (step("divide", a="$a", b="$b"), step("add", a=last, b=1)),
        "There are {x} posts.",
    ),
    # ---- units
    T(
        "run-meters",
        ("units",),
        "How many meters is a {v} km run?",
        lambda r: {"v": half(r, 2, 42)},
        (step("convert", value="$v", from_unit="km", to_unit="m"),),
        "It is {x} meters.",
    ),
    T(
        "flour-grams",
        ("units",),
        "How many grams are in {v} kg of flour?",
        lambda r: {"v": half(r, 1, 25)},
        (step("convert", value="$v", from_unit="kg", to_unit="g"),),
        "That is {x} grams.",
    ),
    T(
        "flight-minutes",
        ("units",),
        "A flight lasts {v} hours. How many minutes is that?",
        lambda r: {"v": half(r, 1, 14)},
        (step("convert", value="$v", from_unit="h", to_unit="min"),),
        "The flight lasts {x} minutes.",
    ),
    T(
        "oven-fahrenheit",
        ("units",),
        "The oven is set to {v} degrees Celsius. What is that in degrees Fahrenheit?",
        lambda r: {"v": r.randrange(150, 260, 5)},
        (step("convert", value="$v", from_unit="C", to_unit="F"),),
        "That is {x} degrees Fahrenheit.",
    ),
    T(
        "card-megabytes",
        ("units",),
        "My memory card holds {v} GB. How many MB is that?",
        lambda r: {"v": r.choice((1, 2, 4, 8, 16, 32, 64, 128, 256, 512))},
        (step("convert", value="$v", from_unit="GB", to_unit="MB"),),
        "It holds {x} MB.",
    ),
    T(
        "yards-feet",
        ("units",),
        "Check which length units are supported, then tell me how many feet are in {v} yards.",
        lambda r: {"v": r.randint(2, 90)},
        (step("list_units", quantity="length"), step("convert", value="$v", from_unit="yd", to_unit="ft")),
        "{v} yards are {x} feet.",
    ),
    T(
        "miles-back",
        ("units",),
        "Convert {v} km to miles, then convert that back to km to double-check. How many km do I get back?",
        lambda r: {"v": r.randint(3, 42)},
        (
            step("convert", value="$v", from_unit="km", to_unit="mi"),
            step("convert", value=last, from_unit="mi", to_unit="km"),
        ),
        "You get {x} km back.",
    ),
    # ---- kv
    T(
        "save-code",
        ("kv",),
        "Save my {key} code {code} under the key {key}.",
        lambda r: {"key": r.choice(KEYS), "code": r.randint(1000, 9999)},
        (step("set", key="$key", value=text_of("code")),),
        "Saved {code} under {key}.",
        match=None,
        probes=(("get", {"key": "$key"}),),
        saved="code",
        words=("key",),
    ),
    T(
        "save-read",
        ("kv",),
        "Store the color {color} under the key {key}, then read it back to confirm it was saved.",
        lambda r: {"color": r.choice(COLORS), "key": r.choice(("theme", "accent", "banner", "badge"))},
        (step("set", key="$key", value="$color"), step("get", key="$key")),
        "The key {key} holds {color}.",
        match="exact",
        probes=(("get", {"key": "$key"}),),
        saved="color",
        words=("color", "key"),
    ),
    T(
        "two-ports",
        ("kv",),
        "Save {a} under the key {k1} and {b} under the key {k2}, then show me all the keys.",
        lambda r: {
            **ints(r, a=(1024, 9999), b=(1024, 9999)),
            "k1": r.choice(("port", "web_port")),
            "k2": r.choice(("db_port", "cache_port")),
        },
        (
            together(step("set", key="$k1", value=text_of("a")), step("set", key="$k2", value=text_of("b"))),
            step("list_keys"),
        ),
        "Both ports are saved.",
        match=None,
        probes=(("list_keys", {}),),
        words=("k1", "k2"),
    ),
    T(
        "note-done",
        ("kv",),
        "Save the note {note} under the key todo, then remove it again because it is done.",
        lambda r: {"note": r.choice(NOTES)},
        (step("set", key="todo", value="$note"), step("delete", key="todo")),
        "The note was saved and removed.",
        match=None,
        probes=(("list_keys", {}),),
        texts=("note",),
    ),
    T(
        "pantry",
        ("kv",),
        "Save {fruit} under the key fruit and {veg} under the key veg, then show me everything in the store.",
        lambda r: {
            "fruit": r.choice(("apple", "pear", "plum", "cherry", "mango")),
            "veg": r.choice(("carrot", "leek", "kale", "onion")),
        },
        (together(step("set", key="fruit", value="$fruit"), step("set", key="veg", value="$veg")), step("dump")),
        "The store holds {fruit} and {veg}.",
        match=None,
        probes=(("dump", {}),),
        words=("fruit", "veg"),
    ),
    T(
        "overwrite",
        ("kv",),
        "Set the key {key} to {a}, then change it to {b}.",
        lambda r: {"key": r.choice(("volume", "limit", "quota", "level")), **ints(r, a=(1, 99), b=(100, 999))},
        (step("set", key="$key", value=text_of("a")), step("set", key="$key", value=text_of("b"))),
        "{key} is now {b}.",
        match=None,
        probes=(("get", {"key": "$key"}),),
        saved="b",
        words=("key",),
    ),
    # ---- two servers
    T(
        "product-saved",
        ("calculator", "kv"),
        "Multiply {a} by {b} and save the result under the key {key}.",
        lambda r: {**ints(r, a=(3, 99), b=(3, 99)), "key": r.choice(("total", "product", "result", "count"))},
        (step("multiply", a="$a", b="$b"), step("set", key="$key", value=last_text)),
        "Saved {x} under {key}.",
        match=None,
        probes=(("get", {"key": "$key"}),),
        saved="x",
        words=("key",),
    ),
    T(
        "change-saved",
        ("calculator", "kv"),
        "I had {a} dollars and spent {b}. Save what is left under the key {key} and tell me the amount.",
        lambda r: {**ints(r, a=(100, 999), b=(10, 99)), "key": r.choice(("wallet", "cash", "savings"))},
        (step("subtract", a="$a", b="$b"), step("set", key="$key", value=last_text)),
        "You have {x} dollars left, saved under {key}.",
        probes=(("get", {"key": "$key"}),),
        words=("key",),
    ),
    T(
        "expression-saved",
        ("calculator", "kv"),
        "Work out ({a} + {b}) * {c} and store the number under the key {key}.",
        lambda r: {**ints(r, a=(2, 60), b=(2, 60), c=(2, 9)), "key": r.choice(("calc", "answer", "sum"))},
        (
            step("evaluate", expression=lambda p, r: f"({p['a']} + {p['b']}) * {p['c']}"),
            step("set", key="$key", value=last_text),
        ),
        "Stored {x} under {key}.",
        match=None,
        probes=(("get", {"key": "$key"}),),
        saved="x",
        words=("key",),
    ),
    T(
        "hours-plus",
        ("units", "calculator"),
        "Convert {h} hours to minutes and then add {m} minutes. How many minutes is that in total?",
        lambda r: ints(r, h=(1, 12), m=(5, 55)),
        (step("convert", value="$h", from_unit="h", to_unit="min"), step("add", a=last, b="$m")),
        "That is {x} minutes.",
    ),
    T(
        "walk-meters",
        ("calculator", "units"),
        "I walked {a} km in the morning and {b} km in the evening. How many meters did I walk in total?",
        lambda r: ints(r, a=(1, 15), b=(1, 15)),
        (step("add", a="$a", b="$b"), step("convert", value=last, from_unit="km", to_unit="m")),
        "You walked {x} meters.",
    ),
    T(
        "laps",
        ("units", "calculator"),
        "One lap of the track is {v} km. How many meters are {n} laps?",
        lambda r: {"v": r.choice((0.4, 0.5, 0.8, 1.2, 1.5, 2.5)), "n": r.randint(2, 25)},
        (step("convert", value="$v", from_unit="km", to_unit="m"), step("multiply", a=last, b="$n")),
        "{n} laps are {x} meters.",
    ),
    T(
        "shelf-grams",
        ("calculator", "units"),
        "A shelf holds {n} boxes of {w} kg each. How many grams is that altogether?",
        lambda r: ints(r, n=(2, 30), w=(2, 25)),
        (step("multiply", a="$n", b="$w"), step("convert", value=last, from_unit="kg", to_unit="g")),
        "That is {x} grams.",
    ),
    T(
        "flour-saved",
        ("units", "kv"),
        "Convert {v} kg to grams and store the number under the key {key}.",
        lambda r: {"v": r.randint(1, 40), "key": r.choice(("flour", "sugar", "rice"))},
        (step("convert", value="$v", from_unit="kg", to_unit="g"), step("set", key="$key", value=last_text)),
        "Stored {x} under {key}.",
        match=None,
        probes=(("get", {"key": "$key"}),),
        saved="x",
        words=("key",),
    ),
    T(
        "fever-saved",
        ("units", "kv"),
        "My thermometer shows {v} degrees Celsius. Convert it to Fahrenheit, save it under the key {key}, and tell me the value.",
        lambda r: {"v": r.randint(35, 40), "key": r.choice(("temp", "fever", "reading"))},
        (step("convert", value="$v", from_unit="C", to_unit="F"), step("set", key="$key", value=last_text)),
        "It is {x} degrees Fahrenheit, saved under {key}.",
        probes=(("get", {"key": "$key"}),),
        words=("key",),
    ),
)
BY_KEY = {t.key: t for t in TEMPLATES}


def parse(question: str) -> tuple[Template, dict[str, Any]] | None:
    """The template and parameters of a world question, or None."""
    for t in TEMPLATES:
        p = t.parse(question)
        if p is not None:
            return t, p
    return None


# ---------------------------------------------------------------- the teacher: generator and agent
def unit(seed: str) -> float:
    """A number in [0, 1) from a string's hash."""
    return int.from_bytes(hashlib.sha256(seed.encode()).digest()[:8], "big") / 2**64


def label(question: str, seed: int | None) -> str:
    """The injected label of the episode of ``question`` sampled with ``seed`` (shares: ``LABELS``)."""
    u, total = unit(f"label\0{question.strip()}\0{seed}"), 0.0
    for name, share in LABELS:
        total += share
        if u < total:
            return name
    return LABELS[-1][0]


CONFUSABLE: dict[str, Callable[[dict[str, Any]], Call]] = {
    "add": lambda a: ("subtract", a),
    "subtract": lambda a: ("add", a),
    "multiply": lambda a: ("add", a),
    "divide": lambda a: ("multiply", a),
    "power": lambda a: ("multiply", {"a": a["base"], "b": a["exponent"]}),
    "sqrt": lambda a: ("divide", {"a": a["x"], "b": 2}),
    "evaluate": lambda a: ("add", dict(zip("ab", map(value_of, re.findall(NUMBER, a["expression"])[:2])))),
    "convert": lambda a: ("list_units", {"quantity": ""}),
    "set": lambda a: ("get", {"key": a["key"]}),
    "get": lambda a: ("list_keys", {}),
    "delete": lambda a: ("get", {"key": a["key"]}),
    "list_keys": lambda a: ("dump", {}),
    "dump": lambda a: ("list_keys", {}),
}
SWAPPED_UNITS = {"km": "mi", "m": "km", "kg": "lb", "g": "kg", "h": "s", "min": "h", "C": "K", "F": "C", "GB": "GiB"}


def wrong_arguments(tool: str, args: dict[str, Any], u: float) -> dict[str, Any]:
    """``args`` with one argument off: a number changed, a unit swapped, a key misspelt."""
    out = dict(args)
    if tool == "convert":
        if u < 0.5:
            out["to_unit"] = SWAPPED_UNITS.get(args["to_unit"], args["from_unit"])
        else:
            out["value"] = args["value"] * 10
        return out
    if tool == "evaluate":
        out["expression"] = re.sub(NUMBER, lambda m: fmt(value_of(m[0]) + 1), args["expression"], count=1)
        return out
    numeric = [k for k, v in args.items() if isinstance(v, (int, float)) and not isinstance(v, bool)]
    if numeric:
        k = numeric[int(u * len(numeric))]
        out[k] = args[k] + (1 if u < 0.5 else 10)
        return out
    strings = [k for k, v in args.items() if isinstance(v, str)]
    if strings:
        k = strings[int(u * len(strings))]
        out[k] = args[k] + "s" if not re.fullmatch(NUMBER, args[k]) else fmt(value_of(args[k]) + 1)
    return out


def wrong_type(args: dict[str, Any]) -> dict[str, Any]:
    """``args`` with one argument of the wrong JSON type: a number as text, a numeric text as a number,
    else a text in a list."""
    out = dict(args)
    for k, v in args.items():
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            out[k] = fmt(v)
            return out
    for k, v in args.items():
        if isinstance(v, str):
            out[k] = value_of(v) if re.fullmatch(NUMBER, v) else [v]
            return out
    return {"quantity": 0} if not args else out


@dataclass
class Plan:
    """How one episode departs from the reference solution."""

    label: str
    at: int  # the call (in solution order) the departure concerns
    u: float  # a second draw: which argument, which way


def plan_for(t: Template, p: dict[str, Any], question: str, seed: int | None, reference: bool) -> Plan:
    kind = "correct" if reference else label(question, seed)
    calls = t.solve(p)[0]
    u = unit(f"where\0{question}\0{seed}")
    eligible = list(range(len(calls)))
    if kind == "wrong_tool":
        eligible = [i for i, (tool, _) in enumerate(calls) if tool in CONFUSABLE] or eligible
    elif kind in ("wrong_arguments", "wrong_type"):
        eligible = [i for i, (_, args) in enumerate(calls) if args] or eligible
    elif kind == "ignores_result":
        eligible = eligible[:1]
    return Plan(kind, eligible[int(u * len(eligible))], unit(f"how\0{question}\0{seed}"))


def next_turn(t: Template, p: dict[str, Any], plan: Plan, seen: list[str]) -> list[Call] | None:
    """The calls of the episode's next turn, given the tool results seen so far; None when it is done."""
    if plan.label == "missing_call":
        return None
    clean = t.solve(p)[1]
    results: list[str] = []
    index = 0
    for make in t.steps:
        basis = clean[: len(results)] if plan.label == "ignores_result" and results else results
        turn = []
        for tool, args in make(p, [value_of(r) for r in basis]):
            if index == plan.at and plan.label == "wrong_tool":
                tool, args = CONFUSABLE[tool](args)
            elif index == plan.at and plan.label in ("wrong_arguments", "ignores_result"):
                args = wrong_arguments(tool, args, plan.u)
            elif index == plan.at and plan.label == "wrong_type":
                args = wrong_type(args)
            turn.append((tool, args))
            index += 1
        pending = [turn]
        if plan.label == "redundant_calls" and index - len(turn) <= plan.at < index:
            pending.append([turn[plan.at - (index - len(turn))]])
        for calls in pending:
            if len(seen) < len(results) + len(calls):
                return calls
            results.extend(seen[len(results) : len(results) + len(calls)])
    return None


def read_number(text: str) -> str | None:
    """The number a reader takes from a tool result: its last one."""
    found = re.findall(NUMBER, text or "")
    return fmt(value_of(found[-1])) if found else None


def final_answer(t: Template, p: dict[str, Any], plan: Plan, seen: list[str]) -> str:
    """The closing message: one sentence, then ``Answer: <value>``."""
    clean = read_number(t.solve(p)[1][-1])
    if plan.label == "missing_call":
        off = clean is not None and unit(f"memory\0{t.text(p)}") >= 0.5
        x = fmt(value_of(clean) + (1 if value_of(clean) < 100 else 10)) if off else clean
    elif plan.label == "ignores_result":
        x = clean
    else:
        x = read_number(seen[-1]) if seen else None
        x = x if x is not None else next(iter(re.findall(NUMBER, t.text(p))), "0")  # a guess: a number it saw
    params = {k: fmt(v) for k, v in p.items()}
    value = x if t.match == "number" or t.saved == "x" else params[t.saved] if t.saved else "done"
    return f"{t.reply.format(x=x, **params)}\nAnswer: {value}"


_BACKTICKS = re.compile(r"`([^`\n]+)`")
_SERVER_HEADER = re.compile(r"^### (\S+)", re.MULTILINE)
_K = re.compile(r"Generate (\d+) different tasks")


class Teacher:
    """``teacher(messages, tools, body)`` -> the reply, as ``ScriptedServer`` expects: the task generator,
    the agent and the judge of the bench, recognized by the request (tools offered: the agent)."""

    def __call__(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None, body: dict) -> dict | str:
        if tools:
            return agent(messages, body.get("seed"), body.get("model") == REFERENCE_MODEL)
        text = next((m.get("content") or "" for m in reversed(messages) if m.get("role") == "user"), "")
        if text.startswith("## Task\nWrite a"):
            return generator(text, body.get("seed"))
        if "Assess the quality of a **tool-use question**" in text:
            return ratings_xml(
                TASK_RATINGS, verdict_nonce(text)
            )  # every world task is a clear, realistic, checkable request
        if "Assess the **response quality**" in text:
            return trajectory_judgment(data_block(text, "Conversation"), verdict_nonce(text))
        return UNKNOWN


def generator(prompt: str, seed: int | None) -> str:
    """k candidates from the templates of the drawn servers that best fit the drawn tools, with probabilities;
    the request's seed draws the templates' parameters (and breaks ties between equally fitting templates)."""
    first = prompt.split("\n## ", 1)[0]
    drawn = {x.strip() for x in (_BACKTICKS.search(first) or [None, ""])[1].split(",") if x.strip()}
    servers = set(_SERVER_HEADER.findall(prompt))
    k = int(_K.search(prompt)[1]) if _K.search(prompt) else 1
    single = "**one tool**" in first
    pool = [t for t in TEMPLATES if set(t.servers) == servers]

    def fit(t: Template) -> tuple[float, float]:
        jaccard = len(drawn & set(t.tools)) / len(drawn | set(t.tools))
        return (jaccard + (0.5 if (len(t.tools) == 1) == single else 0.0), unit(f"{seed}\0{t.key}"))

    picked = sorted(pool, key=fit, reverse=True)[:k]
    out = []
    for i, t in enumerate(picked):
        p = t.draw(random.Random(f"{prompt}\0{seed}\0{i}"))
        out.append({**t.candidate(p), "probability": round(0.6 / (i + 1), 2)})
    return json.dumps({"responses": out}, ensure_ascii=False)


def agent(messages: list[dict[str, Any]], seed: int | None, reference: bool = False) -> dict | str:
    """The episode's next step: the next turn of calls, or the final answer."""
    at = max((i for i, m in enumerate(messages) if m.get("role") == "user"), default=-1)
    question = (messages[at].get("content") or "") if at >= 0 else ""
    found = parse(question)
    if found is None:
        return UNKNOWN
    t, p = found
    plan = plan_for(t, p, question.strip(), seed, reference)
    seen = [m.get("content") or "" for m in messages[at + 1 :] if m.get("role") == "tool"]
    calls = next_turn(t, p, plan, seen)
    if calls is None:
        return {"content": final_answer(t, p, plan, seen)}
    return {"content": "", "tool_calls": [{"name": n, "arguments": a} for n, a in calls]}


# ---------------------------------------------------------------- the judge
def trajectory_judgment(conversation: str, nonce: str) -> str:
    """Completeness from whether the final answer is grounded in the last tool result; conciseness from
    repeated calls. Reads the conversation text only; the verdict carries the call's nonce."""
    blocks = conversation.split("\n\n[")
    calls = re.findall(r"^-> call (\S+?\(.*\))$", conversation, re.MULTILINE)
    results = [b.split("\n", 1)[1] if "\n" in b else "" for b in blocks if b.startswith("tool result")]
    final = (
        blocks[-1].split("\n", 1)[1] if blocks[-1].startswith("assistant]") and "\n-> call" not in blocks[-1] else ""
    )
    answer = final.rsplit("Answer:", 1)[1].strip() if "Answer:" in final else final.strip()
    if not calls:
        completeness = ("very incomplete", "No tool was used; the answer is unsupported.")
    elif not answer:
        completeness = ("very incomplete", "The conversation ends without an answer.")
    elif results and results[-1].lstrip().startswith("Error"):
        completeness = ("incomplete", "The last tool call failed.")
    elif answer != "done" and results and answer not in results[-1] and read_number(results[-1]) != answer:
        completeness = ("incomplete", "The answer does not match what the tools returned.")
    else:
        completeness = ("fully complete", "The request was carried out and answered from the tool results.")
    repeated = len(calls) != len(set(calls))
    conciseness = ("redundant", "A call was repeated.") if repeated else ("very concise", "No unnecessary steps.")
    return ratings_xml({"completeness": completeness, "conciseness": conciseness}, nonce)
