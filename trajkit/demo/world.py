"""The demo's world: a fixed set of tool tasks over the demo's servers, with reference solutions.

Each ``WorldTask`` is what a careful task writer would produce for some tools
(a question, its target tools, an expected answer and end-state checks) and
what a careful agent would do with it (the tool calls, turn by turn, and a
final answer built from the last tool result), plus a follow-up question for
multi-turn extension. Every value is fixed, so the world is small enough for a
tiny model to learn, and every answer is checkable against the real servers:
the calculator, kv and units servers of ``trajkit.envs.servers`` and the
third-party ``mcp-server-sqlite`` (a fresh database per episode).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

Call = tuple[str, dict[str, Any]]


@dataclass(frozen=True)
class Exchange:
    """One user request and its reference solution: turns of (parallel) tool calls, then a reply.

    ``reply`` holds ``{result}``: the last tool result (its last number when
    ``numeric``), so the answer always comes from what the tools returned; it is
    the one ``Answer: ...`` line the agent's system prompt asks for.
    """

    question: str
    turns: tuple[tuple[Call, ...], ...]
    reply: str
    numeric: bool = True


@dataclass(frozen=True)
class WorldTask:
    key: str
    servers: tuple[str, ...]
    main: Exchange
    answer: str | None = None
    answer_match: str = "number"
    state: tuple[dict[str, Any], ...] = ()
    follow_up: Exchange | None = None
    tools: tuple[str, ...] = field(init=False)

    def __post_init__(self) -> None:
        names = [name for turn in self.main.turns for name, _ in turn]
        object.__setattr__(self, "tools", tuple(dict.fromkeys(names)))

    def candidate(self) -> dict[str, Any]:
        """The task as the generator writes it (the fields ``examples/prompts/task_fields.md`` asks for)."""
        return {
            "question": self.main.question,
            "target_tools": list(self.tools),
            "answer": self.answer,
            "answer_match": self.answer_match if self.answer is not None else None,
            "state": [dict(p) for p in self.state],
        }


def c(tool: str, **arguments: Any) -> Call:
    return (tool, arguments)


def ex(question: str, *turns: Call | tuple[Call, ...], reply: str, numeric: bool = True) -> Exchange:
    """An exchange; a turn is one call or a tuple of calls made together."""
    shaped = tuple(t if isinstance(t[0], tuple) else (t,) for t in turns)
    return Exchange(question, shaped, reply, numeric)


def probe(tool: str, expected: str, **arguments: Any) -> dict[str, Any]:
    return {"tool": tool, "arguments": arguments, "expected": expected}


REPLY = "Answer: {result}"  # the final reply: the line the outcome check reads (trajkit.envs.agent.ANSWER_FORMAT)


def w(key: str, servers: str, question: str, *turns: Call | tuple[Call, ...], **fields: Any) -> WorldTask:
    """A world task; an ``answer`` matched as a ``number`` means a numeric reply (the last number of the last
    tool result), any other the whole last result; ``follow=(question, *turns)`` a follow-up."""
    numeric = fields.get("answer_match", "number") == "number" and fields.get("answer") is not None
    follow = fields.pop("follow", None)
    main = ex(question, *turns, reply=REPLY, numeric=numeric)
    up = ex(follow[0], *follow[1:], reply=REPLY, numeric=numeric) if follow else None
    return WorldTask(key, tuple(servers.split("+")), main, follow_up=up, **fields)


CALCULATOR = (
    w(
        "calc-add",
        "calculator",
        "I paid 37 dollars for a lamp and 58 dollars for a rug. How much did I spend in total?",
        c("add", a=37, b=58),
        answer="95",
        follow=("What if the rug had cost 64 dollars instead?", c("add", a=37, b=64)),
    ),
    w(
        "calc-subtract",
        "calculator",
        "My monthly budget is 420 dollars and I have spent 165 so far. How much is left?",
        c("subtract", a=420, b=165),
        answer="255",
        follow=("And after spending another 80 dollars?", c("subtract", a=255, b=80)),
    ),
    w(
        "calc-multiply",
        "calculator",
        "A crate holds 24 bottles. How many bottles are in 13 crates?",
        c("multiply", a=24, b=13),
        answer="312",
        follow=("How many bottles would 20 crates hold?", c("multiply", a=24, b=20)),
    ),
    w(
        "calc-divide",
        "calculator",
        "Four friends split a restaurant bill of 156 dollars evenly. How much does each one pay?",
        c("divide", a=156, b=4),
        answer="39",
        follow=("What if six friends split it instead?", c("divide", a=156, b=6)),
    ),
    w(
        "calc-power",
        "calculator",
        "How many different 4-digit PIN codes can be made from the digits 0 to 9?",
        c("power", base=10, exponent=4),
        answer="10000",
        follow=("And how many 6-digit codes?", c("power", base=10, exponent=6)),
    ),
    w(
        "calc-sqrt",
        "calculator",
        "A square patio has an area of 196 square feet. How long is each side?",
        c("sqrt", x=196),
        answer="14",
        follow=("What about a square patio of 289 square feet?", c("sqrt", x=289)),
    ),
    w(
        "calc-evaluate",
        "calculator",
        "Check my invoice: 3 items at 45 dollars each plus 12 dollars shipping. What is the total?",
        c("evaluate", expression="3 * 45 + 12"),
        answer="147",
        follow=("And with 5 items instead of 3?", c("evaluate", expression="5 * 45 + 12")),
    ),
    w(
        "calc-cans",
        "calculator",
        "A box holds 24 cans. I have 7 full boxes and 9 loose cans. How many cans do I have?",
        c("multiply", a=24, b=7),
        c("add", a=168, b=9),
        answer="177",
    ),
    w(
        "calc-recipe",
        "calculator",
        "A recipe for 4 people needs 300 grams of flour. How much flour do I need for 10 people?",
        c("multiply", a=300, b=10),
        c("divide", a=3000, b=4),
        answer="750",
    ),
    w(
        "calc-jackets",
        "calculator",
        "A jacket costs 80 dollars and is reduced by 15 dollars. What do 3 jackets cost after the reduction?",
        c("subtract", a=80, b=15),
        c("multiply", a=65, b=3),
        answer="195",
    ),
    w(
        "calc-root",
        "calculator",
        "Raise 4 to the power of 5, then take the square root of the result. What do I get?",
        c("power", base=4, exponent=5),
        c("sqrt", x=1024),
        answer="32",
    ),
)

UNITS = (
    w(
        "units-run",
        "units",
        "How many meters is a 5 km run?",
        c("convert", value=5, from_unit="km", to_unit="m"),
        answer="5000",
        follow=("And a 21 km half marathon?", c("convert", value=21, from_unit="km", to_unit="m")),
    ),
    w(
        "units-flour",
        "units",
        "How many grams are in 2.5 kg of flour?",
        c("convert", value=2.5, from_unit="kg", to_unit="g"),
        answer="2500",
        follow=("And in 0.75 kg?", c("convert", value=0.75, from_unit="kg", to_unit="g")),
    ),
    w(
        "units-boil",
        "units",
        "Water boils at 100 degrees Celsius. What is that in Fahrenheit?",
        c("convert", value=100, from_unit="C", to_unit="F"),
        answer="212",
        follow=("What is 37 degrees Celsius in Fahrenheit?", c("convert", value=37, from_unit="C", to_unit="F")),
    ),
    w(
        "units-movie",
        "units",
        "A movie lasts 3 hours. How many minutes is that?",
        c("convert", value=3, from_unit="h", to_unit="min"),
        answer="180",
        follow=("And a 2 hour movie?", c("convert", value=2, from_unit="h", to_unit="min")),
    ),
    w(
        "units-mass",
        "units",
        "Which units of mass can you convert between?",
        c("list_units", quantity="mass"),
        answer='{"mass": ["mg", "g", "kg", "t", "oz", "lb"]}',  # the tool's JSON, compared as a value
        answer_match="exact",
        follow=("And which units of time?", c("list_units", quantity="time")),
    ),
    w(
        "units-yards",
        "units",
        "Check which length units are supported, then tell me how many feet are in 3 yards.",
        c("list_units", quantity="length"),
        c("convert", value=3, from_unit="yd", to_unit="ft"),
        answer="9",
    ),
)

KV = (
    w(
        "kv-locker",
        "kv",
        "Save my locker code 4821 under the key locker.",
        c("set", key="locker", value="4821"),
        state=(probe("get", "4821", key="locker"),),
        follow=("Also save my gym code 7730 under the key gym.", c("set", key="gym", value="7730")),
    ),
    w(
        "kv-empty",
        "kv",
        "Show me everything that is in the store right now.",
        c("dump"),
        answer="{}",
        answer_match="exact",
    ),
    w(
        "kv-theme",
        "kv",
        "Store the value blue under the key theme, then read it back to confirm it was saved.",
        c("set", key="theme", value="blue"),
        c("get", key="theme"),
        answer="blue",
        answer_match="exact",
        state=(probe("get", "blue", key="theme"),),
    ),
    w(
        "kv-ports",
        "kv",
        "Save 8080 under the key port and 5432 under the key db_port, then show me all the keys.",
        (c("set", key="port", value="8080"), c("set", key="db_port", value="5432")),
        c("list_keys"),
        state=(probe("list_keys", '["db_port", "port"]'),),
    ),
    w(
        "kv-todo",
        "kv",
        "Save the note call mom under the key todo, then remove it again because it is done.",
        c("set", key="todo", value="call mom"),
        c("delete", key="todo"),
        state=(probe("list_keys", "[]"),),
    ),
    w(
        "kv-pantry",
        "kv",
        "Save apple under the key fruit and carrot under the key veg, then show me everything in the store.",
        (c("set", key="fruit", value="apple"), c("set", key="veg", value="carrot")),
        c("dump"),
        state=(probe("dump", '{"fruit": "apple", "veg": "carrot"}'),),
    ),
)

SQLITE = (
    w(
        "sql-books",
        "sqlite",
        "Set up a table named books with a title text column and a year integer column.",
        c("create_table", query="CREATE TABLE books (title TEXT, year INTEGER)"),
        state=(probe("list_tables", "[{'name': 'books'}]"),),
        follow=(
            "Add the book Dune from 1965 to it.",
            c("write_query", query="INSERT INTO books (title, year) VALUES ('Dune', 1965)"),
        ),
    ),
    w(
        "sql-empty",
        "sqlite",
        "Does the new database contain any tables yet?",
        c("list_tables"),
        answer="[]",
        answer_match="exact",
    ),
    w(
        "sql-product",
        "sqlite",
        "Use the database to work out 17 times 23.",
        c("read_query", query="SELECT 17 * 23"),
        answer="391",
        follow=("And 19 times 21?", c("read_query", query="SELECT 19 * 21")),
    ),
    w(
        "sql-scores",
        "sqlite",
        "Create a table scores with an integer column points, insert rows with 12 and 30 points, then tell me the total.",
        c("create_table", query="CREATE TABLE scores (points INTEGER)"),
        c("write_query", query="INSERT INTO scores (points) VALUES (12), (30)"),
        c("read_query", query="SELECT SUM(points) FROM scores"),
        answer="42",
    ),
    w(
        "sql-orders",
        "sqlite",
        "Create a table named orders with an id integer column, then list the tables to confirm.",
        c("create_table", query="CREATE TABLE orders (id INTEGER)"),
        c("list_tables"),
        state=(probe("list_tables", "[{'name': 'orders'}]"),),
    ),
)

CROSS = (
    w(
        "x-total",
        "calculator+kv",
        "Multiply 12 by 9 and save the result under the key total.",
        c("multiply", a=12, b=9),
        c("set", key="total", value="108"),
        state=(probe("get", "108", key="total"),),
    ),
    w(
        "x-minutes",
        "units+calculator",
        "Convert 3 hours to minutes and then add 25 minutes. How many minutes is that?",
        c("convert", value=3, from_unit="h", to_unit="min"),
        c("add", a=180, b=25),
        answer="205",
    ),
    w(
        "x-flour",
        "units+kv",
        "Convert 2 kg to grams and store the number under the key flour.",
        c("convert", value=2, from_unit="kg", to_unit="g"),
        c("set", key="flour", value="2000"),
        state=(probe("get", "2000", key="flour"),),
    ),
    w(
        "x-square",
        "sqlite+calculator",
        "Ask the database for 144 divided by 12, then square the result.",
        c("read_query", query="SELECT 144 / 12"),
        c("power", base=12, exponent=2),
        answer="144",
    ),
    w(
        "x-logs",
        "sqlite+kv",
        "Create a table named logs with a message text column, and save the word ready under the key status.",
        (c("create_table", query="CREATE TABLE logs (message TEXT)"), c("set", key="status", value="ready")),
        state=(probe("get", "ready", key="status"), probe("list_tables", "[{'name': 'logs'}]")),
    ),
    w(
        "x-distance",
        "sqlite+units",
        "Use the database to add 250 and 750, then convert that many meters to kilometers.",
        c("read_query", query="SELECT 250 + 750"),
        c("convert", value=1000, from_unit="m", to_unit="km"),
        answer="1",
    ),
)

TASKS: tuple[WorldTask, ...] = CALCULATOR + UNITS + KV + SQLITE + CROSS
SERVERS = ("calculator", "kv", "units", "sqlite")


def exchanges() -> dict[str, tuple[WorldTask, Exchange]]:
    """Every question of the world (main and follow-up) -> its task and exchange."""
    out: dict[str, tuple[WorldTask, Exchange]] = {}
    for task in TASKS:
        for exchange in (task.main, task.follow_up):
            if exchange is not None:
                out[exchange.question] = (task, exchange)
    return out
