"""Find secrets (tokens, keys) in a card and in Parquet shards before they leave the machine.

Two kinds of evidence: well-known credential formats (Hugging Face, OpenAI and
Anthropic, AWS, GitHub, Google, Slack tokens, PEM private keys: ``redact.CREDENTIALS``,
the list the write-time redaction uses), and the
literal values of secret-looking environment variables (``*_TOKEN``,
``*_API_KEY``, ``*SECRET*``, ``*PASSWORD*``, ...). Rows are redacted when they are
written (``trajkit.redact``); this scan is the second look before anything leaves. Shards are streamed in
record batches; every string inside them, nested ones included (message
contents, tool-call arguments), is matched with Arrow's vectorized regex
kernels. Findings name the file, column and row, and never repeat the secret.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from trajkit.encodings import SUSPECT_RUN, UNREADABLE, base64_runs, decoded_views
from trajkit.redact import CREDENTIALS, INVISIBLE, Redactor, environment_secrets, is_messages

PATTERNS: dict[str, str] = {kind: pattern for kind, (pattern, _) in CREDENTIALS.items()}  # the redactor's list
_COMPILED = {kind: re.compile(p) for kind, p in PATTERNS.items()}
MAX_FINDINGS = 20
_VISIBLE = {ord(c): None for c in INVISIBLE}
_TEXT_ONLY = {"token split by an invisible character"}  # in bytes read as Latin-1, 0xAD is a soft hyphen by chance


@dataclass(frozen=True)
class Finding:
    where: str
    column: str | None
    row: int | None
    kind: str
    preview: str

    def __str__(self) -> str:
        place = (
            self.where
            + (f" column {self.column}" if self.column else "")
            + (f" row {self.row}" if self.row is not None else "")
        )
        return f"{place}: {self.kind} ({self.preview})"


def env_secrets(environ: dict[str, str] | None = None) -> dict[str, str]:
    """Values of environment variables whose names say they hold a secret: {name: value}
    (the rule the write-time redaction uses, ``trajkit.redact.environment_secrets``)."""
    return environment_secrets(environ)


def redact(value: str) -> str:
    return f"{value[:4]}… {len(value)} chars"


def _kind_of(text: str, literals: dict[str, str], raw: bool = False) -> tuple[str, str] | None:
    """The kind of the first secret in ``text`` or in a decoded form of it, with a preview that does not
    repeat it. ``raw`` (a binary file's bytes): base64 runs are decoded, escapes are not (``%`` and two hex
    digits occur by chance in compressed data), and invisible characters mean nothing."""
    views = [d for _, _, d in base64_runs(text)] if raw else list(decoded_views(text))
    for view in (text, *views):
        if view == UNREADABLE:
            return "compressed text in a binary payload that cannot be read (decoded)", "not shown"
        plain = view if raw else view.translate(_VISIBLE)
        for kind, rx in _COMPILED.items():
            m = None if raw and kind in _TEXT_ONLY else rx.search(view)
            if m:
                return kind + ("" if view is text else " (decoded)"), redact(m.group(0))
        for name, value in literals.items():
            if value in plain:
                return f"value of ${name}" + ("" if view is text else " (decoded)"), redact(value)
    return None


def scan_text(text: str, where: str, literals: dict[str, str] | None = None) -> list[Finding]:
    """Findings in a text file, one per line that holds a secret."""
    literals = env_secrets() if literals is None else literals
    out = []
    for i, line in enumerate(text.splitlines(), 1):
        hit = _kind_of(line, literals)
        if hit:
            out.append(Finding(where, None, None, hit[0], f"line {i}, {hit[1]}"))
    return out


def _string_leaves(arr: pa.Array, name: str, rows: pa.Array | None) -> Iterator[tuple[str, pa.Array, pa.Array | None]]:
    """Every string array inside ``arr`` with its dotted name and, per element, the batch row it came from."""
    t = arr.type
    if isinstance(t, pa.BaseExtensionType):  # JSON columns of the card's views: text underneath
        yield from _string_leaves(arr.storage, name, rows)
    elif pa.types.is_string(t) or pa.types.is_large_string(t):
        yield name, arr, rows
    elif pa.types.is_struct(t):
        for field, child in zip(t, arr.flatten()):
            yield from _string_leaves(child, f"{name}.{field.name}", rows)
    elif pa.types.is_list(t) or pa.types.is_large_list(t):
        parents = pc.list_parent_indices(arr)
        yield from _string_leaves(arr.flatten(), name, parents if rows is None else rows.take(parents))


def scan_parquet(
    path: Path, where: str, literals: dict[str, str] | None = None, batch_size: int = 65_536
) -> list[Finding]:
    """Findings in every string (nested ones too) of a Parquet file, streamed in record batches."""
    import pyarrow.parquet as pq

    literals = env_secrets() if literals is None else literals
    redactor = Redactor(literals, every_form=True)  # what it would change is what the scan finds
    out: list[Finding] = []
    offset = 0
    for batch in pq.ParquetFile(path).iter_batches(batch_size=batch_size):
        for col_name, column in zip(batch.schema.names, batch.columns):
            for leaf_name, leaf, rows in _string_leaves(column, col_name, None):
                _, hits = redactor.array(leaf)
                for idx in [] if hits is None else np.flatnonzero(hits)[:MAX_FINDINGS].tolist():
                    row = idx if rows is None else rows[idx].as_py()
                    kind, preview = _kind_of(leaf[idx].as_py(), literals) or ("secret", "")
                    out.append(Finding(where, leaf_name, offset + row, kind, preview))
            if not out and is_messages(column.type):  # a secret only the row's messages joined hold
                _, hits = redactor.joined(column)
                for idx in [] if hits is None else np.flatnonzero(hits)[:MAX_FINDINGS].tolist():
                    out.append(Finding(where, col_name, offset + idx, "secret split across messages", ""))
        offset += batch.num_rows
        if len(out) >= MAX_FINDINGS:
            break
    return out


RAW_CHUNK = 8 * 2**20
_RAW_ANY = "|".join(f"(?:{p})" for p in PATTERNS.values()) + "|" + SUSPECT_RUN


def scan_bytes(path: Path, where: str, literals: dict[str, str] | None = None) -> list[Finding]:
    """Findings in a file's raw bytes (read as Latin-1, in overlapping chunks): what a format's own reader
    does not show (Parquet metadata, bytes after a PNG's end) is looked at too. Chunks are picked with
    Arrow's RE2 kernel; only those that may hold a secret are decoded and read in Python."""
    literals = env_secrets() if literals is None else literals
    needles = [v.encode() for v in literals.values()]
    out: list[Finding] = []
    with open(path, "rb") as f:
        offset, tail = 0, b""
        while chunk := f.read(RAW_CHUNK):
            data = tail + chunk
            hit = _raw_kind(data, literals, needles)
            if hit:
                out.append(Finding(where, None, None, hit[0], f"raw bytes near offset {offset - len(tail)}, {hit[1]}"))
                break
            tail = data[-4096:]
            offset += len(chunk)
    return out


def _raw_kind(data: bytes, literals: dict[str, str], needles: list[bytes]) -> tuple[str, str] | None:
    """``_kind_of`` for binary data, read in Python only when Arrow's RE2 kernel (linear, fast) or a
    literal's bytes say it may hold a secret."""
    maybe = pc.match_substring_regex(pa.array([data], pa.binary()), _RAW_ANY)[0].as_py()
    if maybe or any(n in data for n in needles):
        return _kind_of(data.decode("latin-1"), literals, raw=True)
    return None


def scan_png(path: Path, where: str, literals: dict[str, str] | None = None) -> list[Finding]:
    """Findings in a PNG's text chunks and inflated data (``png.texts``); a PNG it cannot read raises
    ``png.UnreadablePng``."""
    from trajkit.data_cards.png import texts

    literals = env_secrets() if literals is None else literals
    out: list[Finding] = []
    needles = [v.encode() for v in literals.values()]
    for text, binary in texts(path.read_bytes()):
        hit = _raw_kind(text.encode("latin-1"), literals, needles) if binary else _kind_of(text, literals)
        if hit:
            out.append(Finding(where, None, None, hit[0], f"PNG chunk, {hit[1]}"))
    return out
