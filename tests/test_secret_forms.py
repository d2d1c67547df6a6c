"""A secret in another form is still found: behind JSON and URL escapes, in base64 runs (and base64 of an
escaped one), split across a trajectory's messages, an AWS secret key beside its id, inside a binary payload
(a PNG's text chunks, a gzip member, text in the clear). The write-time
redactor replaces it and the push scan finds it; text that holds none is left as it was."""

from __future__ import annotations

import base64
import gzip
import json
import struct
import zlib
from urllib.parse import quote

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from trajkit.data_cards.secret_scan import scan_parquet, scan_text
from trajkit.redact import REDACTED, Redactor
from trajkit.schema import MESSAGE

TOKEN = "hf_" + "AbCdEfGhIjKlMnOpQrStUvWxYz012345"
VALUE = "Sup3r-Secret-Value-77"  # a configured secret (env X_TOKEN)
AWS_ID, AWS_SECRET = "AKIAIOSFODNN7EXAMPLE", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
FORMS = {
    "base64": "token: " + base64.b64encode(TOKEN.encode()).decode() + " end",
    "base64, URL-safe": "x " + base64.urlsafe_b64encode(f"key={VALUE}??>>".encode()).decode(),
    "JSON escapes": json.dumps(TOKEN).replace("h", "\\u0068").replace("_", "\\u005f"),
    "\\x escapes": VALUE.replace("S", "\\x53").replace("-", "\\x2d"),
    "URL-encoded": "GET /?t=" + quote(TOKEN, safe="").replace("_", "%5F").replace("A", "%41"),
    "base64 of URL-encoded": base64.b64encode(quote(f"v={VALUE}", safe="").replace("-", "%2D").encode()).decode(),
    "base64, URL-safe, no padding": base64.urlsafe_b64encode(("k=" + TOKEN + "?>").encode()).decode().rstrip("="),
    "hex": "0x" + TOKEN.encode().hex(),
    "HTML character references": "".join(f"&#{ord(c)};" if i % 2 else f"&#x{ord(c):x};" for i, c in enumerate(TOKEN)),
    "AWS secret beside its id": f"id {AWS_ID}\nsecret: {AWS_SECRET}",
    "AWS secret before its id": f'{{"secret": "{AWS_SECRET}", "id": "{AWS_ID}"}}',
}
CLEAN = (
    "The quick brown fox, internationalization and QmFzZTY0IGlzIGZpbmU= (base64 of nothing secret)",
    "a%20b%20c and \\u00e9t\\u00e9 and 3f2a9c0d4b5e6f708192a3b4c5d6e7f8091a2b3c4d5e6f70",
    "https://example.com/a/b?c=d%2Fe sha1 da39a3ee5e6b4b0d3255bfef95601890afd80709",
)


@pytest.mark.parametrize("form", sorted(FORMS))
def test_each_form_is_redacted_and_found_by_the_scan(form):
    text = FORMS[form]
    redacted = Redactor({"X_TOKEN": VALUE}).text(text)
    assert REDACTED in redacted and TOKEN not in redacted and VALUE not in redacted and AWS_SECRET not in redacted
    found = scan_text(f"intro\n{text}\n", "README.md", literals={"X_TOKEN": VALUE})
    assert len(found) == 1 and "line 2" in found[0].preview and VALUE not in str(found[0])
    assert scan_text(redacted, "README.md", literals={"X_TOKEN": VALUE}) == []


def test_text_without_a_secret_is_unchanged_and_not_a_finding():
    for text in CLEAN:
        assert Redactor({"X_TOKEN": VALUE}).text(text) == text
        assert scan_text(text, "README.md", literals={"X_TOKEN": VALUE}) == []


def _message(role: str, content: str | None = None, **more) -> dict:
    return {"role": role, "content": content} | more


def _conversation(*results: str, then: dict | None = None) -> list[dict]:
    return (
        [_message("user", "go")]
        + [_message("tool", r, tool_call_id=f"c{i}", name="t") for i, r in enumerate(results)]
        + ([then] if then else [])
    )


def test_a_token_split_across_messages_is_redacted_in_each_part(tmp_path):
    """Across two tool results, and between a tool result and the assistant message after it (its reasoning,
    its content, its tool call's arguments)."""
    rows = [
        _conversation("the key is " + TOKEN[:12], TOKEN[12:] + " (keep it safe)"),
        _conversation("first half " + VALUE[:9], VALUE[9:]),
        _conversation(
            "aGZf" + base64.b64encode(TOKEN.encode()).decode()[4:20], base64.b64encode(TOKEN.encode()).decode()[20:]
        ),
        _conversation("the key is " + TOKEN[:12], then=_message("assistant", TOKEN[12:] + " it is")),
        _conversation("first half " + VALUE[:9], then=_message("assistant", "ok", reasoning_content=VALUE[9:])),
        _conversation(
            "key: " + TOKEN[:20],
            then=_message(
                "assistant",
                tool_calls=[
                    {"id": "a", "name": "t", "arguments": TOKEN[20:]},
                    {"id": "b", "name": "t", "arguments": "{}"},
                ],
            ),
        ),
        _conversation(
            "hf_", "is a prefix; nothing follows", then=_message("assistant", "AbCdEfGhIjKlMnOpQrStUvWxYz012345")
        ),
    ]
    messages = pa.array(rows, pa.list_(MESSAGE))
    table = pa.table({"messages": messages, "token_ids": [[1, 2]] * len(rows)})
    out = Redactor({"X_TOKEN": VALUE}).table(table).to_pylist()
    texts = [
        [
            t
            for m in r["messages"][1:]
            for t in [m["reasoning_content"], m["content"]] + [c["arguments"] for c in m["tool_calls"] or []]
            if t
        ]
        for r in out
    ]
    assert texts[0] == ["the key is " + REDACTED, REDACTED + " (keep it safe)"]
    assert texts[1] == ["first half " + REDACTED, REDACTED]
    assert all(REDACTED in p for p in texts[2])
    assert texts[3] == ["the key is " + REDACTED, REDACTED + " it is"]
    assert texts[4] == ["first half " + REDACTED, REDACTED, "ok"]
    assert texts[5] == ["key: " + REDACTED, REDACTED, "{}"]
    assert out[6] == table.to_pylist()[6]  # a row without a secret keeps its messages and its token ids
    assert [r["token_ids"] for r in out] == [None] * 6 + [[1, 2]]
    pq.write_table(table, tmp_path / "t.parquet")
    found = scan_parquet(tmp_path / "t.parquet", "t", literals={"X_TOKEN": VALUE})
    assert [(f.row, f.kind) for f in found] == [(i, "secret split across messages") for i in range(6)]


def test_the_scan_finds_encoded_forms_in_nested_strings(tmp_path):
    rows = [[{"role": "tool", "content": text}] for text in (*CLEAN, FORMS["base64"], FORMS["JSON escapes"])]
    pq.write_table(pa.table({"messages": rows}), tmp_path / "t.parquet")
    found = scan_parquet(tmp_path / "t.parquet", "t", literals={})
    assert [(f.column, f.row, f.kind) for f in found] == [
        ("messages.content", 3, "Hugging Face token (decoded)"),
        ("messages.content", 4, "Hugging Face token (decoded)"),
    ]


def test_export_and_card_take_a_second_look_at_shards_an_older_trajkit_wrote(tmp_path, monkeypatch):
    from tests.data_cards.conftest import render_card
    from tests.test_cli import invoke
    from trajkit.schema import content_id
    from trajkit.store import Store

    encoded = FORMS["base64"]
    with monkeypatch.context() as m:
        m.setattr(Redactor, "table", lambda self, data: data)  # what a trajkit without these rules wrote
        store = Store(tmp_path / "run", create=True)
        store.write("tasks", "synth_tasks", [{"task_id": "t1", "question": f"Use {encoded}", "mode": "single_tool"}])
        msgs = _conversation("key " + TOKEN[:12], TOKEN[12:]) + [{"role": "assistant", "content": encoded}]
        row = {"traj_id": content_id("x"), "task_id": "t1", "messages": msgs, "status": "completed", "num_turns": 1}
        store.write("trajectories", "rollouts", [{**row, "roles": [m["role"] for m in msgs], "num_tool_calls": 0}])
    invoke("export", str(tmp_path / "out.jsonl"), "--run", str(tmp_path / "run"), "--all", "-f", "jsonl")
    exported = (tmp_path / "out.jsonl").read_text()
    render_card(tmp_path / "run", examples=1, task_examples=1)
    readme = (tmp_path / "run" / "card" / "README.md").read_text()
    for text in (exported, readme):
        assert REDACTED in text and encoded.split()[1] not in text and TOKEN[:12] not in text and TOKEN[12:] not in text


# ---------------------------------------------------------------- a secret inside a binary payload
def _chunk(kind: bytes, body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))


def _png(*chunks: bytes) -> bytes:
    """A 1x1 grey PNG with ``chunks`` between its header and its pixels."""
    header = _chunk(b"IHDR", struct.pack(">IIBBBBB", 1, 1, 8, 0, 0, 0, 0))
    return (
        b"\x89PNG\r\n\x1a\n"
        + header
        + b"".join(chunks)
        + _chunk(b"IDAT", zlib.compress(b"\0\x80"))
        + _chunk(b"IEND", b"")
    )


PLAIN_PNG = _png(_chunk(b"tEXt", b"Software\0trajkit"), _chunk(b"zTXt", b"Title\0\0" + zlib.compress(b"A plot")))
PAYLOADS = {  # a secret where binary holds text
    "PNG tEXt": _png(_chunk(b"tEXt", b"Comment\0key " + TOKEN.encode())),
    "PNG tEXt, bad CRC": _png(_chunk(b"tEXt", b"Comment\0key " + TOKEN.encode())[:-1] + b"!"),
    "PNG zTXt": _png(_chunk(b"zTXt", b"Comment\0\0" + zlib.compress(f"X_TOKEN={VALUE}".encode()))),
    "PNG iTXt, compressed": _png(_chunk(b"iTXt", b"Comment\0\1\0en\0\0" + zlib.compress(TOKEN.encode()))),
    "PNG iTXt holding base64": _png(_chunk(b"iTXt", b"C\0\0\0\0\0" + base64.b64encode(TOKEN.encode()))),
    "PNG zTXt bomb": _png(_chunk(b"zTXt", b"Comment\0\0" + zlib.compress(bytes(9 * 2**20)))),  # unreadable: refused
    "after a PNG's end": PLAIN_PNG + b"\0\xff " + TOKEN.encode(),
    "JPEG comment": b"\xff\xd8\xff\xfe\x00\x2d" + f"key {VALUE}".encode() + b"\xff\xd9" + bytes(range(256)),
    "gzip": gzip.compress(b"config:\n  token: " + TOKEN.encode() + b"\n" + bytes(range(256))),
}


@pytest.mark.parametrize("payload", sorted(PAYLOADS))
def test_a_secret_inside_binary_is_found_and_its_payload_redacted_whole(payload):
    """The token cannot be cut out of an image's bytes and leave an image: the whole base64 payload goes."""
    encoded = base64.b64encode(PAYLOADS[payload]).decode()
    text = f"see data:image/png;base64,{encoded} here"
    assert Redactor({"X_TOKEN": VALUE}).text(text) == f"see data:image/png;base64,{REDACTED} here"
    found = scan_text(text, "README.md", literals={"X_TOKEN": VALUE})
    assert len(found) == 1 and "(decoded)" in found[0].kind and VALUE not in str(found[0])
    plain = f"see data:image/png;base64,{base64.b64encode(PLAIN_PNG).decode()} here"
    assert Redactor({"X_TOKEN": VALUE}).text(plain) == plain
    assert scan_text(plain, "README.md", literals={"X_TOKEN": VALUE}) == []


def _imaged(png: bytes) -> list[dict]:
    """A trajectory whose tool returned ``png`` as an image part."""
    part = {"type": "image", "mime_type": "image/png", "data": base64.b64encode(png).decode(), "size": len(png)}
    result = _message("tool", f"[image image/png, {len(png)} bytes, part 1]", tool_call_id="c0", name="shot")
    return [_message("user", "screenshot"), result | {"parts": [part]}, _message("assistant", "done")]


def test_a_token_in_a_tool_images_text_chunk_is_redacted_exported_clean_and_refused_by_push(tmp_path, monkeypatch):
    """Write time, ``export``'s second look (at a shard an older trajkit wrote) and push's scan of a shard."""
    from tests.test_cli import invoke
    from trajkit.schema import content_id
    from trajkit.store import Store

    tokened, plain = PAYLOADS["PNG tEXt"], PLAIN_PNG
    token_part = base64.b64encode(tokened).decode()

    def write(run, redacted: bool):
        store = Store(run, create=True)
        store.write("tasks", "synth_tasks", [{"task_id": "t1", "question": "Shoot", "mode": "single_tool"}])
        rows = []
        for i, png in enumerate((tokened, plain)):
            msgs = _imaged(png)
            row = {"traj_id": content_id(str(i)), "task_id": "t1", "messages": msgs, "status": "completed"}
            rows.append(row | {"num_turns": 1, "roles": [m["role"] for m in msgs], "num_tool_calls": 0})
        with monkeypatch.context() as m:
            if not redacted:
                m.setattr(Redactor, "table", lambda self, data: data)  # what a trajkit without these rules wrote
            store.write("trajectories", "rollouts", rows)
        return store

    written = write(tmp_path / "run", redacted=True).read("trajectories")
    parts = {r["traj_id"]: r["messages"][1]["parts"][0]["data"] for r in written.to_pylist()}
    assert parts == {content_id("0"): REDACTED, content_id("1"): base64.b64encode(plain).decode()}
    old = write(tmp_path / "old", redacted=False)
    raw = old.read("trajectories")
    assert token_part in str(raw.to_pylist())
    invoke("export", str(tmp_path / "out.jsonl"), "--run", str(tmp_path / "old"), "--all", "-f", "jsonl")
    exported = (tmp_path / "out.jsonl").read_text()
    assert token_part not in exported and REDACTED in exported and base64.b64encode(plain).decode() in exported
    pq.write_table(raw, tmp_path / "t.parquet")
    found = scan_parquet(tmp_path / "t.parquet", "data/t.parquet", literals={"X_TOKEN": VALUE})
    row = [r["traj_id"] for r in raw.to_pylist()].index(content_id("0"))
    assert [(f.column, f.row, f.kind) for f in found] == [("messages.parts.data", row, "Hugging Face token (decoded)")]


def test_a_redacted_image_is_not_sent_to_a_model_as_an_image():
    """A part whose payload was redacted is named in its tool message's text alone, like one over the size cap."""
    from trajkit.models.chat import with_tool_media

    messages = Redactor({}).table(pa.table({"messages": pa.array([_imaged(PAYLOADS["PNG tEXt"])], pa.list_(MESSAGE))}))
    sent = with_tool_media(messages.to_pylist()[0]["messages"])
    assert [m["role"] for m in sent] == ["user", "tool", "assistant"]
    plain = with_tool_media(_imaged(PLAIN_PNG))
    assert [m["role"] for m in plain] == ["user", "tool", "user", "assistant"]
