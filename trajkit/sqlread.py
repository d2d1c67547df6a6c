"""A user's SQL over a run reads it and changes nothing: what `trajkit sql` (``Store.sql``) and the viewer's
SQL box share, so that no statement they run changes a file, a setting or the run.

Three layers, so that no single one is trusted: (b) and (c) hold if (a) misjudges a statement, and (a)
and (b) hold on a kernel without Landlock (tests/test_sqlread.py tests both pairs):

(a) ``check_read``: DuckDB's parser makes exactly one SELECT of the text (DESCRIBE, SHOW, SUMMARIZE, WITH,
    FROM and VALUES parse as SELECT), or an EXPLAIN (ANALYZE included) of one: one statement type allowed,
    not a list of types refused.
(b) ``lock``: the connection opens only the files or folders it is given (the shards a query reads), so no
    file is created anywhere (COPY, EXPORT, ATTACH, logs, profiles) and none outside them is read; no
    extension is installed or loaded, nothing is spilled to disk, and the configuration is locked (no
    statement turns logging or profiling on). What it leaves open, writing in place into a file it may
    read (``COPY ... TO`` a shard), only a COPY statement does, which (a) refuses.
(c) ``confine``: Landlock forbids the thread (and every thread it starts: DuckDB's workers, when it opens
    the connection) any write to the file system, TCP and signals outside: the kernel refuses what the
    other two would let through. ``confined`` runs a function in such a thread. Where the kernel has no
    Landlock, ``trajkit sql`` runs with (a) and (b); the viewer's SQL box runs nothing (``view/sqlbox.py``).

A statement (a) refuses costs a parse only: no connection is opened for it.
"""

from __future__ import annotations

import ctypes
import os
import sys
import threading
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from trajkit.errors import UserError

EXPLAIN_TOKENS = 1000  # the longest EXPLAIN whose inner statement is looked for (each token costs two parses)
READ_STATEMENTS = "SELECT, WITH, DESCRIBE, SHOW, SUMMARIZE, FROM, ..."

_SYS_CREATE_RULESET, _SYS_RESTRICT_SELF = 444, 446  # Linux's numbers on every architecture but alpha
_PR_SET_NO_NEW_PRIVS = 38
# Landlock's file rights that change the file system (ABI 1), then those later ABIs add:
# REFER (moving files between directories, 2), TRUNCATE (3), IOCTL_DEV (5)
_WRITES = {1: 0b1_1111_1111_0010, 2: 1 << 13, 3: 1 << 14, 5: 1 << 15}
_NET_TCP = 0b11  # bind and connect (ABI 4)
_SCOPES = 0b11  # abstract unix sockets and signals of processes outside the domain (ABI 6)

T = TypeVar("T")


class NotARead(UserError):
    """A statement ``check_read`` refuses; its message says why."""


# ------------------------------------------------------------------ (a) the parser's check
_parser: list[Any] = []  # a connection that only parses, made once
_parser_lock = threading.Lock()


def statement_types(sql: str) -> list[str]:
    """The type of each statement DuckDB's parser makes of ``sql`` (``UNKNOWN`` for a type the installed
    duckdb's Python enum cannot name: ``UPDATE EXTENSIONS`` in 2.0); duckdb.Error when it does not parse."""
    import duckdb

    with _parser_lock:
        if not _parser:
            _parser.append(duckdb.connect(config={"enable_external_access": False}))
        statements = _parser[0].extract_statements(sql)
    out = []
    for statement in statements:
        try:
            out.append(statement.type.name)
        except ValueError:
            out.append("UNKNOWN")
    return out


def check_read(sql: str) -> None:
    """DuckDB's parser makes exactly one statement of ``sql``, a SELECT or an EXPLAIN (ANALYZE
    included) of a SELECT; NotARead otherwise (with DuckDB's message when the text does not parse)."""
    import duckdb

    try:
        kinds = statement_types(sql)
    except duckdb.Error as e:
        raise NotARead(f"SQL error: {str(e).splitlines()[0]}") from None
    if not kinds:
        raise NotARead(f"no statement to run: give a query ({READ_STATEMENTS})")
    if len(kinds) != 1:
        raise NotARead(f"one statement at a time, got {len(kinds)}")
    if kinds[0] == "EXPLAIN":
        if len(duckdb.tokenize(sql)) > EXPLAIN_TOKENS:
            raise NotARead(f"EXPLAIN runs here for statements of up to {EXPLAIN_TOKENS} tokens: run the query itself")
        inner = explained(sql)
        if inner != {"SELECT"}:
            refused = ", ".join(sorted(inner - {"SELECT"})) or "a statement the parser cannot find"
            raise NotARead(f"EXPLAIN runs here only of a read statement ({READ_STATEMENTS}), not of {refused}")
    elif kinds[0] != "SELECT":
        raise NotARead(f"only read statements ({READ_STATEMENTS}) run here, not {kinds[0]}")


def explained(sql: str) -> set[str]:
    """The types DuckDB's parser gives the statement that an EXPLAIN (one statement, ``sql``) wraps.

    Each split of the text at a token start where the head followed by ``SELECT 1`` parses as one
    EXPLAIN and the rest parses as one statement gives the rest's type. The EXPLAIN's own head and
    its inner statement are such a split (the head's options do not depend on what it explains), so
    the real inner type is among the results; any other split found only adds types."""
    import duckdb

    kinds = set()
    for start, _ in duckdb.tokenize(sql)[1:]:
        try:
            rest = statement_types(sql[start:])
            if len(rest) == 1 and statement_types(sql[:start] + " SELECT 1") == ["EXPLAIN"]:
                kinds.add(rest[0])
        except duckdb.Error:
            continue
    return kinds


# ------------------------------------------------------------------ (b) the connection's locks
def lock(con: Any, files: Iterable[str] = (), folders: Iterable[str] = (), memory_limit: str | None = None) -> None:
    """Limit ``con`` to reading these files and the files under these folders (nothing else opens, no file
    is created), with extension installs and loads off, nothing spilled to disk, and its configuration
    locked, so that no later statement undoes any of it."""

    def listed(names: Iterable[str]) -> str:
        return "[" + ", ".join("'" + n.replace("'", "''") + "'" for n in names) + "]"

    stmts = [
        "SET temp_directory = ''",  # before external access is off, which forbids changing it
        f"SET allowed_paths = {listed(files)}",
        f"SET allowed_directories = {listed(f.rstrip('/') + '/' for f in folders)}",
        "SET enable_external_access = false",
        "SET autoinstall_known_extensions = false",
        "SET autoload_known_extensions = false",
    ]
    if memory_limit is not None:
        stmts.append(f"SET memory_limit = '{memory_limit}'")
    for stmt in [*stmts, "SET lock_configuration = true"]:
        con.execute(stmt)


# ------------------------------------------------------------------ (c) the kernel's
class _Ruleset(ctypes.Structure):
    _fields_ = [("fs", ctypes.c_uint64), ("net", ctypes.c_uint64), ("scoped", ctypes.c_uint64)]


def confine() -> int:
    """Forbid this thread, and every thread and process it starts later, any write to the file system,
    TCP, and signals to processes outside; returns the Landlock ABI version. OSError if the kernel
    has no Landlock (Linux before 5.13, or turned off)."""
    if sys.platform != "linux":
        raise OSError(f"Landlock is Linux's, this is {sys.platform}")
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]

    def check(result: int, what: str) -> int:
        if result < 0:
            err = ctypes.get_errno()
            raise OSError(err, f"Landlock {what}: {os.strerror(err)}")
        return result

    abi = check(libc.syscall(_SYS_CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_uint32(1)), "version")
    fs = sum(bits for version, bits in _WRITES.items() if abi >= version)
    rules = _Ruleset(fs, _NET_TCP if abi >= 4 else 0, _SCOPES if abi >= 6 else 0)
    size = 24 if abi >= 6 else 16 if abi >= 4 else 8  # the kernel reads the fields its ABI knows
    fd = check(
        libc.syscall(_SYS_CREATE_RULESET, ctypes.byref(rules), ctypes.c_size_t(size), ctypes.c_uint32(0)), "ruleset"
    )
    try:
        check(libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")
        check(libc.syscall(_SYS_RESTRICT_SELF, ctypes.c_int(fd), ctypes.c_uint32(0)), "restrict_self")
    finally:
        os.close(fd)
    return abi


def confined(work: Callable[[], T]) -> T:
    """``work()`` in a new thread confined by ``confine`` (unconfined where the kernel has no Landlock):
    its result, or the exception it raised. The calling thread stays free to write (an --output file)."""
    out: dict[str, Any] = {}

    def run() -> None:
        try:
            confine()
        except OSError:
            pass  # layers (a) and (b) still hold
        try:
            out["value"] = work()
        except BaseException as e:  # noqa: BLE001 (raised again in the calling thread)
            out["error"] = e

    thread = threading.Thread(target=run, name="trajkit-sql", daemon=True)
    thread.start()
    thread.join()
    if "error" in out:
        raise out["error"]
    return out["value"]
