"""A minimal MCP server speaking raw JSON-RPC over stdio, for tests: fast to start, and able to misbehave.

    python tests/envs/servers/raw.py [--hang-init] [--exit-init] [--junk-init] [--bad-tools] [--dup-tools]
                                     [--pages N] [--no-readonly] [--hang-init-while FILE] [--error-list]
                                     [--linger] [--optional-lists]

Tools: ``echo(text)``; ``sleep(seconds)`` returns the most calls it saw in flight
at once; ``big(n)`` returns n characters (with text ``stderr``: writes them to stderr, then answers ``ok``); ``count()`` increments a per-process
counter (state); ``pid()``; ``fail()`` reports a tool error (isError);
``reject()`` answers with a JSON-RPC error; ``crash()`` exits mid-call;
``hang()`` never answers; ``malformed()`` answers a result that is not a
CallToolResult; ``junk()`` prints a non-JSON line on stdout, then answers;
``shaped(text)`` declares an output schema (``{"n": integer, "s": string matching ^(a+)+$}``) and
answers structured content that fits it (text ``good``), does not (``bad``), takes the check's regex
seconds to find that it does not (``slow``), or none (``none``);
``lists()`` returns how many ``tools/list`` requests this process answered.
``--optional-lists`` declares resources and prompts: resources/list lists one,
resources/templates/list is not served (Method not found), prompts/list errs.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time

ARGS = set(sys.argv[1:])
PAGES = int(sys.argv[sys.argv.index("--pages") + 1]) if "--pages" in sys.argv else 1
READ_ONLY = {"readOnlyHint": True} if "--no-readonly" not in ARGS else {"readOnlyHint": False}
NAMES = [
    "echo",
    "sleep",
    "big",
    "count",
    "pid",
    "fail",
    "reject",
    "crash",
    "hang",
    "malformed",
    "junk",
    "shaped",
    "lists",
]
SHAPED = {
    "type": "object",
    "properties": {"n": {"type": "integer"}, "s": {"type": "string", "pattern": "^(a+)+$"}},
    "required": ["n"],
}

lock = threading.Lock()
state = {"count": 0, "in_flight": 0, "max_in_flight": 0, "lists": 0}


def send(obj: dict) -> None:
    with lock:
        sys.stdout.write(json.dumps(obj) + "\n")
        sys.stdout.flush()


def tools() -> list[dict]:
    out = []
    for name in NAMES:
        schema = {"type": "object", "properties": {"text": {"type": "string"}, "seconds": {"type": "number"}}}
        out.append({"name": name, "description": f"test tool {name}", "inputSchema": schema, "annotations": READ_ONLY})
    out[NAMES.index("shaped")]["outputSchema"] = SHAPED
    if "--bad-tools" in ARGS:
        out[0]["inputSchema"] = {"type": "object", "properties": {"x": {"type": 12}}}
    if "--dup-tools" in ARGS:
        out.append(dict(out[0]))
    return out


def text(value: str, is_error: bool = False) -> dict:
    return {"content": [{"type": "text", "text": value}], "isError": is_error}


def call(rid, name: str, args: dict) -> None:
    if name == "echo":
        send({"jsonrpc": "2.0", "id": rid, "result": text(str(args.get("text", "")))})
    elif name == "sleep":
        with lock:
            state["in_flight"] += 1
            state["max_in_flight"] = max(state["max_in_flight"], state["in_flight"])
        time.sleep(float(args.get("seconds", 0.2)))
        with lock:
            state["in_flight"] -= 1
            seen = state["max_in_flight"]
        send({"jsonrpc": "2.0", "id": rid, "result": text(str(seen))})
    elif name == "big" and args.get("text") == "stderr":
        sys.stderr.write("x" * int(args["seconds"]) + "\nwrote a lot\n")
        send({"jsonrpc": "2.0", "id": rid, "result": text("ok")})
    elif name == "big":
        send({"jsonrpc": "2.0", "id": rid, "result": text("x" * int(args.get("seconds", 10000)))})
    elif name == "count":
        with lock:
            state["count"] += 1
            n = state["count"]
        send({"jsonrpc": "2.0", "id": rid, "result": text(str(n))})
    elif name == "pid":
        send({"jsonrpc": "2.0", "id": rid, "result": text(str(os.getpid()))})
    elif name == "fail":
        send({"jsonrpc": "2.0", "id": rid, "result": text("Error: it failed on purpose", True)})
    elif name == "reject":
        send({"jsonrpc": "2.0", "id": rid, "error": {"code": -32602, "message": "rejected on purpose"}})
    elif name == "crash":
        print("crashing on purpose", file=sys.stderr, flush=True)
        os._exit(7)
    elif name == "hang":
        return
    elif name == "malformed":
        send({"jsonrpc": "2.0", "id": rid, "result": {"content": "not a list"}})
    elif name == "junk":
        with lock:
            sys.stdout.write("this is not JSON-RPC\n")
            sys.stdout.flush()
        send({"jsonrpc": "2.0", "id": rid, "result": text("after junk")})
    elif name == "shaped":
        shape = {"good": {"n": 1, "s": "aaa"}, "bad": {"n": "one"}, "slow": {"n": 1, "s": "a" * 28 + "!"}}
        shape = {k: {"structuredContent": v} for k, v in shape.items()}
        send({"jsonrpc": "2.0", "id": rid, "result": text("1") | shape.get(args.get("text"), {})})
    elif name == "nested":  # JSON nested deeper than any parser's recursion limit, on one line
        depth = int(args.get("depth", 100_000))
        with lock:
            nested = "[" * depth + "]" * depth
            sys.stdout.write(f'{{"jsonrpc": "2.0", "id": {json.dumps(rid)}, "result": {{"content": {nested}}}}}\n')
            sys.stdout.flush()
    elif name == "trickle":  # a line that never ends, a byte at a time
        while True:
            with lock:
                sys.stdout.write("x")
                sys.stdout.flush()
            time.sleep(0.01)
    elif name == "lists":
        send({"jsonrpc": "2.0", "id": rid, "result": text(str(state["lists"]))})


def handle(msg: dict) -> None:
    method, rid, params = msg.get("method"), msg.get("id"), msg.get("params") or {}
    if rid is None:
        return  # a notification
    if method == "initialize":
        if "--hang-init" in ARGS:
            return
        if "--hang-init-while" in ARGS and os.path.exists(sys.argv[sys.argv.index("--hang-init-while") + 1]):
            return
        if "--exit-init" in ARGS:
            print("refusing to initialize", file=sys.stderr, flush=True)
            os._exit(3)
        if "--junk-init" in ARGS:
            with lock:
                sys.stdout.write("Starting raw server v0 ... banner on stdout\n")
        result = {
            "protocolVersion": params.get("protocolVersion", "2025-11-25"),
            "capabilities": {"tools": {}} | ({"resources": {}, "prompts": {}} if "--optional-lists" in ARGS else {}),
            "serverInfo": {"name": "raw", "version": "0.1"},
        }
        send({"jsonrpc": "2.0", "id": rid, "result": result})
    elif method == "tools/list" and "--error-list" in ARGS:
        send({"jsonrpc": "2.0", "id": rid, "error": {"code": -32603, "message": "tools/list is broken here"}})
    elif method == "tools/list":
        state["lists"] += 1
        all_tools = tools()
        page = int(params.get("cursor") or 0)
        size = -(-len(all_tools) // PAGES)
        chunk = all_tools[page * size : (page + 1) * size]
        result = {"tools": chunk}
        if page + 1 < PAGES:
            result["nextCursor"] = str(page + 1)
        send({"jsonrpc": "2.0", "id": rid, "result": result})
    elif method == "resources/list":
        send({"jsonrpc": "2.0", "id": rid, "result": {"resources": [{"uri": "raw://one", "name": "one"}]}})
    elif method == "prompts/list":
        send({"jsonrpc": "2.0", "id": rid, "error": {"code": -32603, "message": "prompts/list is broken here"}})
    elif method == "tools/call":
        threading.Thread(
            target=call, args=(rid, params.get("name"), params.get("arguments") or {}), daemon=True
        ).start()
    elif method == "ping":
        send({"jsonrpc": "2.0", "id": rid, "result": {}})
    else:
        send({"jsonrpc": "2.0", "id": rid, "error": {"code": -32601, "message": f"no method {method}"}})


def main() -> None:
    for line in sys.stdin:
        if line.strip():
            handle(json.loads(line))
    if "--linger" in ARGS:  # a server that ignores its client's end (stdin closed) and lives on
        time.sleep(3600)


if __name__ == "__main__":
    main()
