"""A secret in another form is still found: behind JSON and URL escapes, in base64 runs (and base64 of an
escaped one), split across a trajectory's messages, an AWS secret key beside its id. The write-time
redactor replaces it and the push scan finds it; text that holds none is left as it was."""

from __future__ import annotations

import base64
import json
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
