"""`trajkit push` sends only files it can vouch for: regular files inside the run, of a type it reads,
every one scanned (PNG text chunks and inflated data, Parquet metadata, raw bytes). Anything else is
refused in one line before any request."""

from __future__ import annotations

import base64
import os
import struct
import zlib

import pyarrow.parquet as pq
import pytest

from tests.toy_stage import relist
from trajkit.data_cards.layout import RepoFile
from trajkit.data_cards.push import push, scan
from trajkit.errors import UserError
from trajkit.store import Store

HOST_TOKEN = "hf_" + "HostTokenFileContent0123456789ab"


def _chunk(kind: bytes, body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))


def _with_chunk(png: bytes, chunk: bytes) -> bytes:
    """A PNG with ``chunk`` inserted after IHDR (8-byte signature + 25-byte IHDR)."""
    return png[:33] + chunk + png[33:]


def _refused(run, hub, match: str) -> str:
    with pytest.raises(UserError, match=match) as err:
        push(run, "alice/tool-traj", endpoint=hub.url)
    assert hub.requests == [] and HOST_TOKEN not in str(err.value)
    assert len(str(err.value).splitlines()) == 1
    return str(err.value)


def _plot(run):
    return min((run / "card" / "plots").glob("*.png"))


def test_a_plot_linked_to_a_host_file_is_refused(run_copy, hub, tmp_path):
    host = tmp_path / "token"
    host.write_text(HOST_TOKEN)
    plot = _plot(run_copy)
    plot.unlink()
    plot.symlink_to(host)
    _refused(run_copy, hub, "is a symbolic link")
    plot.unlink()
    os.link(host, plot)  # a hard link: a regular file whose content is the host's
    _refused(run_copy, hub, "hard links")


def test_a_linked_folder_a_shard_link_and_other_file_types_are_refused(run_copy, hub, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "x.png").write_bytes(_plot(run_copy).read_bytes())
    (run_copy / "card" / "plots" / "more").symlink_to(outside, target_is_directory=True)
    _refused(run_copy, hub, "more is a symbolic link")
    (run_copy / "card" / "plots" / "more").unlink()
    (run_copy / "card" / "plots" / "notes.svg").write_text("<svg/>")
    _refused(run_copy, hub, "not a file push scans")
    (run_copy / "card" / "plots" / "notes.svg").unlink()
    shard = min((run_copy / "tasks").glob("*.parquet"))
    (outside / shard.name).write_bytes(shard.read_bytes())
    shard.unlink()
    shard.symlink_to(outside / shard.name)
    _refused(run_copy, hub, "is a symbolic link")


CHUNKS = {
    "tEXt": _chunk(b"tEXt", b"Comment\0" + HOST_TOKEN.encode()),
    "zTXt": _chunk(b"zTXt", b"Comment\0\0" + zlib.compress(HOST_TOKEN.encode())),
    "iTXt compressed": _chunk(b"iTXt", b"Comment\0\1\0en\0\0" + zlib.compress(HOST_TOKEN.encode())),
    "iTXt": _chunk(b"iTXt", b"Comment\0\0\0en\0Kommentar\0" + HOST_TOKEN.encode()),
}
UNREADABLE = {
    "unknown chunk": (lambda png: _with_chunk(png, _chunk(b"prVt", HOST_TOKEN.encode())), "chunk type 'prVt'"),
    "bad zlib": (lambda png: _with_chunk(png, _chunk(b"zTXt", b"Comment\0\0not zlib")), "does not inflate"),
    "bad utf-8": (lambda png: _with_chunk(png, _chunk(b"iTXt", b"C\0\0\0en\0\0\xff\xfe")), "cannot be decoded"),
    "bad crc": (lambda png: png[:40] + bytes([png[40] ^ 1]) + png[41:], "fails its CRC"),
    "trailing bytes": (lambda png: png + HOST_TOKEN.encode(), "bytes after IEND"),
    "not a png": (lambda png: b"GIF89a" + png[6:], "bad signature"),
}


def test_a_secret_in_a_png_text_chunk_is_refused(run_copy, hub):
    """Push refuses the first (end to end); the other chunk kinds through the same scan, one run for all."""
    plot = _plot(run_copy)
    original = plot.read_bytes()
    for i, (kind, chunk) in enumerate(CHUNKS.items()):
        plot.write_bytes(_with_chunk(original, chunk))
        if i == 0:
            message = _refused(run_copy, hub, "possible secret")
            assert f"plots/{plot.name}: Hugging Face token (PNG chunk" in message
        else:
            [found] = scan([RepoFile(plot, f"plots/{plot.name}", plot.stat().st_size)])
            assert (found.kind, found.preview[:9]) == ("Hugging Face token", "PNG chunk"), kind


def test_a_png_the_scan_cannot_read_is_refused(run_copy, hub):
    plot = _plot(run_copy)
    original = plot.read_bytes()
    for i, (kind, (change, reason)) in enumerate(UNREADABLE.items()):
        plot.write_bytes(change(original))
        if i == 0:
            _refused(run_copy, hub, "is a PNG the scan cannot read: .*" + reason)
            continue
        with pytest.raises(UserError, match="is a PNG the scan cannot read: .*" + reason):
            scan([RepoFile(plot, f"plots/{plot.name}", plot.stat().st_size)])


@pytest.mark.parametrize("encoded", [False, True], ids=["plain", "base64"])
def test_a_secret_in_parquet_metadata_is_found_in_the_raw_bytes(run_copy, hub, encoded):
    shard = min((run_copy / "tasks").glob("*.parquet"))
    table = pq.read_table(shard)
    note = base64.b64encode(HOST_TOKEN.encode()) if encoded else HOST_TOKEN.encode()  # (after a length byte)
    pq.write_table(table.replace_schema_metadata({**table.schema.metadata, b"note": note}), shard)
    relist(Store(run_copy), shard, "tasks")  # as a stage that wrote it would have listed it
    message = _refused(run_copy, hub, "possible secret")
    assert "Hugging Face token" + (" (decoded)" if encoded else "") + " (raw bytes near offset" in message
