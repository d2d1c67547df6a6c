"""The recording proxy's call log: an append-only journal of every call, kept in the run.

``RUN/_record/calls.log`` holds one record when a call arrives, written before
the call is forwarded (``start``: the request body as the agent sent it, the
path, the session header's value, the fields the proxy added to ask the
upstream for token ids), and one when it completes (``end``: the upstream's
status and body as received, the latency, or why there is none). A record is
a line of JSON (the header, with ``n``: the body's length) followed by the
body's bytes and a newline, so bodies are written as they came, never
re-encoded. Request headers are never written (the session header's value
aside): an agent's ``Authorization`` never reaches the disk. The log is the
raw journal, readable by its owner only; secrets in what the agent sent are
redacted where rows and cache entries are written from it (``curate traces``).

Durability: each record is one ``write`` made before the call goes on, so a
proxy killed at any point (SIGKILL) loses nothing the kernel holds. ``fsync``
chooses what a machine crash may take: ``always`` has each record on the disk
before the call goes on (calls in flight at once share one fsync, made on a
thread, so the event loop never waits on the disk); ``interval`` (the default)
flushes once a second from that thread, so a crash loses at most the last
second; ``never`` leaves it to the kernel. ``bench/proxy.py`` measures what
each costs.

On open, a torn last record (a write cut short by a crash) is moved aside
(``calls.log.torn-<offset>``), and the
calls a previous process started but never finished get a ``lost`` record:
they become rows with status ``aborted``. One process records into a log at a
time (an exclusive lock); a second is refused.
"""

from __future__ import annotations

import asyncio
import fcntl
import json
import os
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from trajkit.errors import UserError

LOG_DIR = "_record"
LOG_NAME = "calls.log"
FsyncPolicy = Literal["always", "interval", "never"]
FSYNC_POLICIES = ("always", "interval", "never")
INTERVAL_S = 1.0


@dataclass(frozen=True)
class Record:
    """One record of the log: its header (``e``: start, end or lost; ``id``; ``t``: wall time) and body."""

    header: dict[str, Any]
    body: bytes

    @property
    def event(self) -> str:
        return self.header["e"]

    @property
    def call_id(self) -> str:
        return self.header["id"]


def log_path(run: str | Path) -> Path:
    """Where a run's recording is."""
    return Path(run) / LOG_DIR / LOG_NAME


def read_log(path: str | Path) -> tuple[list[Record], int]:
    """Every whole record of a log, in order, and the byte offset where the whole records end (a torn last
    record, cut short by a crash, is left out)."""
    data = Path(path).read_bytes()
    records, pos = [], 0
    while (item := _record_at(data, pos)) is not None:
        record, pos = item
        records.append(record)
    return records, pos


def _record_at(data: bytes, pos: int) -> tuple[Record, int] | None:
    """The whole record at ``pos`` and the offset after it; None at the end or at a torn record."""
    eol = data.find(b"\n", pos)
    if eol < 0:
        return None
    try:
        header = json.loads(data[pos:eol])
        n = int(header["n"])
        header["e"], header["id"]
    except (ValueError, KeyError, TypeError):
        return None
    start, stop = eol + 1, eol + 1 + n
    if stop + 1 > len(data) or data[stop : stop + 1] != b"\n":
        return None
    return Record(header, data[start:stop]), stop + 1


def unfinished(records: list[Record]) -> list[str]:
    """The ids of calls started and neither ended nor marked lost, in start order."""
    open_ids: dict[str, None] = {}
    for r in records:
        if r.event == "start":
            open_ids[r.call_id] = None
        else:
            for call_id in r.header.get("ids") or [r.call_id]:
                open_ids.pop(call_id, None)
    return list(open_ids)


class CallLog:
    """The writer of a run's call log (one process at a time)."""

    def __init__(self, run: str | Path, fsync: FsyncPolicy = "interval"):
        if fsync not in FSYNC_POLICIES:
            raise UserError(f"--fsync must be one of {', '.join(FSYNC_POLICIES)}, not {fsync!r}")
        self.path = log_path(run)
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(self.fd)
            raise UserError(f"{self.path}: another proxy is recording into this run; stop it or give another --run")
        self.fsync = fsync
        self.prefix = uuid.uuid4().hex[:12]  # call ids of this process: prefix-sequence
        self.seq = 0
        self.lost = self._recover()
        self.written = self.synced = 0  # records written by this process, and of them those on the disk
        self._cond = threading.Condition()
        self._waiters: list[tuple[int, asyncio.Future]] = []
        self._closed = False
        self._flusher = None
        if fsync != "never":
            self._flusher = threading.Thread(target=self._flush, name="calllog-fsync", daemon=True)
            self._flusher.start()

    def _recover(self) -> list[str]:
        """Cut a torn last record; mark the calls an earlier process left unfinished as lost."""
        records, end = read_log(self.path)
        size = os.fstat(self.fd).st_size
        if end != size:  # kept aside, never deleted: a damaged log is looked at, not lost
            torn = self.path.with_name(f"{LOG_NAME}.torn-{end}")
            torn.write_bytes(os.pread(self.fd, size - end, end))
            os.ftruncate(self.fd, end)
        lost = unfinished(records)
        if lost:
            self._append({"e": "lost", "id": lost[0], "ids": lost, "t": time.time()}, b"", sync=True)
        return lost

    def next_id(self) -> str:
        self.seq += 1
        return f"{self.prefix}-{self.seq:08d}"

    def start(self, call_id: str, body: bytes, **fields: Any) -> None:
        """Record that a call arrived (before it is forwarded)."""
        self._append({"e": "start", "id": call_id, "t": time.time(), **fields}, body)

    def end(self, call_id: str, body: bytes, **fields: Any) -> None:
        """Record how a call completed: the upstream's status and body, or an ``error``."""
        self._append({"e": "end", "id": call_id, "t": time.time(), **fields}, body)

    def _append(self, header: dict[str, Any], body: bytes, sync: bool = False) -> None:
        header["n"] = len(body)
        data = json.dumps(header, ensure_ascii=False, separators=(",", ":")).encode() + b"\n" + body + b"\n"
        view = memoryview(data)
        while view:
            view = view[os.write(self.fd, view) :]
        if sync:
            os.fsync(self.fd)
        else:
            self.written += 1

    async def durable(self) -> None:
        """With ``fsync="always"``, wait until the disk holds every record written so far (calls waiting at
        once share one fsync, made on the flusher thread); with the other policies, return at once."""
        if self.fsync != "always" or self.synced >= self.written:
            return
        future = asyncio.get_running_loop().create_future()
        with self._cond:
            self._waiters.append((self.written, future))
            self._cond.notify()
        await future

    def _flush(self) -> None:
        """The flusher thread: fsync what was written, once a second (``interval``) or as soon as a call waits
        (``always``), and wake the calls it covers."""
        while True:
            with self._cond:
                if self.fsync == "always":
                    self._cond.wait_for(lambda: self._closed or self._waiters)
                else:
                    self._cond.wait(INTERVAL_S)
                if self._closed:
                    return
                target = self.written
            if target > self.synced:
                os.fsync(self.fd)
                self.synced = target
            with self._cond:
                ready = [f for n, f in self._waiters if n <= target]
                self._waiters = [(n, f) for n, f in self._waiters if n > target]
            for future in ready:
                future.get_loop().call_soon_threadsafe(_resolve, future)

    def close(self) -> None:
        if self.fd < 0:
            return
        with self._cond:
            self._closed = True
            self._cond.notify()
        if self._flusher is not None:
            self._flusher.join()
        if self.fsync != "never":
            os.fsync(self.fd)
        os.close(self.fd)
        self.fd = -1


def _resolve(future: asyncio.Future) -> None:
    if not future.done():
        future.set_result(None)
