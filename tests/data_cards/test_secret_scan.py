"""The secret scanner on text and on nested Parquet strings: what it finds, where, and what it leaves alone."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from trajkit.data_cards.secret_scan import env_secrets, scan_parquet, scan_text

SECRETS = {
    "Hugging Face token": "hf_" + "aB3dE5gH7j" * 4,
    "OpenAI or Anthropic key": "sk-ant-api03-" + "Zx9Yw8Vu7T" * 3,
    "AWS access key id": "AKIA" + "ABCDEFGHIJ234567",
    "AWS secret access key": "aws_secret_access_key = " + "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
    "AWS secret access key beside its id": "AKIA" + "ABCDEFGHIJ234567" + " wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
    "AWS secret access key before its id": "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY," + "AKIA" + "ABCDEFGHIJ234567",
    "GitHub token": "ghp_" + "0123456789abcdefghij" * 2,
    "Google API key": "AIza" + "SyA1234567890abcdefghijklmnopqrstuv",
    "Slack token": "xoxb-1234567890-abcdefghij",
    "private key": "-----BEGIN OPENSSH PRIVATE KEY-----",
    "Bearer header": "Authorization: Bearer " + "eyJhbGciOiJIUzI1NiJ9xyz",
    "credentials in a URL": "postgres://app:" + "Pg-Passw0rd-4471" + "@db.internal/shop",
    "token split by an invisible character": "tok3n\u200bva1ue",
}


@pytest.mark.parametrize("kind", sorted(SECRETS))
def test_each_credential_format_is_found_and_never_repeated(kind):
    secret = SECRETS[kind]
    found = scan_text(f"intro\nconfig: {secret}\n", "README.md", literals={})
    assert [(f.kind, f.where) for f in found] == [(kind, "README.md")]
    assert "line 2" in found[0].preview and secret not in str(found[0])


def test_ordinary_text_is_not_a_secret():
    text = (
        "task-generation-with-a-very-long-identifier-0123456789\n"
        "the variable my_hf_token_path_setting_is_long_enough_really is a name\n"
        "sk-learn is not a key; ghp_short; AKIA1234\n"
    )
    assert scan_text(text, "README.md", literals={}) == []


def test_environment_values_of_secret_looking_names():
    env = {
        "HF_TOKEN": "hf_x" * 10,
        "MY_API_KEY": "k3y-value-123",
        "DB_PASSWORD": "hunter22",
        "HOME": "/root",
        "SHORT_TOKEN": "abc",
        "HF_TOKEN_PATH": "/root/.cache/huggingface/token",
        "PATH": "/usr/bin",
    }
    assert env_secrets(env) == {"HF_TOKEN": "hf_x" * 10, "MY_API_KEY": "k3y-value-123", "DB_PASSWORD": "hunter22"}


def test_parquet_scan_reaches_nested_strings_and_names_the_row(tmp_path):
    message = pa.struct(
        [
            ("role", pa.string()),
            ("content", pa.string()),
            ("tool_calls", pa.list_(pa.struct([("name", pa.string()), ("arguments", pa.string())]))),
        ]
    )
    rows = [[{"role": "user", "content": f"hello {i}", "tool_calls": None}] for i in range(300)]
    rows[123] = [
        {"role": "user", "content": "hi", "tool_calls": None},
        {"role": "assistant", "content": None, "tool_calls": [{"name": "login", "arguments": '{"pw": "hunter22"}'}]},
    ]
    rows[250][0]["content"] = "token " + SECRETS["GitHub token"]
    table = pa.table({"id": [str(i) for i in range(300)], "messages": pa.array(rows, pa.list_(message))})
    path = tmp_path / "t.parquet"
    pq.write_table(table, path, row_group_size=100)
    found = scan_parquet(path, "data/t.parquet", literals={"DB_PASSWORD": "hunter22"}, batch_size=64)
    assert [(f.column, f.row, f.kind) for f in found] == [
        ("messages.tool_calls.arguments", 123, "value of $DB_PASSWORD"),
        ("messages.content", 250, "GitHub token"),
    ]
    assert all("hunter22" not in str(f) and SECRETS["GitHub token"] not in str(f) for f in found)


def test_the_redactor_and_the_push_scan_share_one_list_of_credential_forms():
    """One list, ``redact.CREDENTIALS``: the push scan looks for every form in it, the write-time redactor
    rewrites the forms it redacts, and nothing the redactor wrote is a finding of the scan."""
    from trajkit.data_cards import secret_scan
    from trajkit.redact import CREDENTIALS, Redactor

    assert secret_scan.PATTERNS == {kind: pattern for kind, (pattern, _) in CREDENTIALS.items()}
    assert [p for p, _ in Redactor().rules] == [p for p, written in CREDENTIALS.values() if written is not None]
    assert set(SECRETS) == set(CREDENTIALS)  # every form has its example above, found as its kind
    for kind, (_, written) in CREDENTIALS.items():
        redacted = Redactor().text(f"config: {SECRETS[kind]}")
        if written is not None:
            assert redacted != f"config: {SECRETS[kind]}" and scan_text(redacted, "x", literals={}) == [], kind
