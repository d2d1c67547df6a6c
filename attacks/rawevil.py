"""A raw JSON-RPC stdio server whose tools misbehave at the transport level (for the attacks)."""

import json
import os
import signal
import sys
import time

SCHEMAS = {
    "remote_ref": {"type": "object", "$ref": "http://127.0.0.1:9/schema.json"},
    "redos": {"type": "object", "properties": {"s": {"type": "string", "pattern": "^(a+)+$"}}},
    "bad_schema": {"type": "object", "properties": {"n": {"type": 12}}},
}
NAMES = ["noline", "closeout", "badutf", "stderrflood", "noread", "exit", "sigterm_ignored_stdout_closed", "echo"]
NAMES += list(SCHEMAS)
out = sys.stdout.buffer


def send(obj):
    out.write(json.dumps(obj).encode() + b"\n")
    out.flush()


def tools():
    result = []
    for name in NAMES:
        tool = {"name": name, "inputSchema": {"type": "object"}, "annotations": {"readOnlyHint": False}}
        if name in SCHEMAS:
            tool["outputSchema"] = SCHEMAS[name]
        result.append(tool)
    return result


def call(mid, name, args):
    if name == "noline":
        n = int(args.get("mb", 50))
        for _ in range(n):
            out.write(b"x" * (1 << 20))
        out.flush()
        time.sleep(3600)
    if name == "closeout":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        os.close(1)
        time.sleep(3600)
    if name == "badutf":
        out.write(
            b'{"jsonrpc":"2.0","id":%d,"result":{"content":[{"type":"text","text":"bad \xff\xfe here"}]}}\n' % mid
        )
        out.flush()
        return
    if name == "stderrflood":
        pid = os.fork()
        if pid == 0:
            os.setsid()
            block = b"e" * (1 << 20)
            while True:
                os.write(2, block)
    if name == "noread":
        time.sleep(3600)
    if name == "exit":
        os._exit(3)
    if name == "redos":
        send({"jsonrpc": "2.0", "id": mid, "result": {"content": [], "structuredContent": {"s": "a" * 30 + "!"}}})
        return
    if name in SCHEMAS:
        send({"jsonrpc": "2.0", "id": mid, "result": {"content": [], "structuredContent": {"n": 1}}})
        return
    send({"jsonrpc": "2.0", "id": mid, "result": {"content": [{"type": "text", "text": json.dumps(args)}]}})


def main():
    stop_reading = False
    for line in sys.stdin.buffer:
        msg = json.loads(line)
        method, mid = msg.get("method"), msg.get("id")
        if method == "initialize":
            send(
                {
                    "jsonrpc": "2.0",
                    "id": mid,
                    "result": {
                        "protocolVersion": msg["params"]["protocolVersion"],
                        "capabilities": {"tools": {}},
                        "serverInfo": {"name": "rawevil", "version": "1"},
                    },
                }
            )
        elif method == "tools/list":
            send({"jsonrpc": "2.0", "id": mid, "result": {"tools": tools()}})
        elif method == "tools/call":
            name = msg["params"]["name"]
            if name == "noread":
                stop_reading = True
            call(mid, name, msg["params"].get("arguments") or {})
        elif mid is not None:
            send({"jsonrpc": "2.0", "id": mid, "result": {}})
        if stop_reading:
            time.sleep(3600)


if __name__ == "__main__":
    main()
