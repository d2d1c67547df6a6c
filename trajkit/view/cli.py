"""`trajkit view`: serve the viewer for one run (registered at the top level by trajkit/cli.py)."""

from __future__ import annotations

import getpass
from pathlib import Path
from typing import Annotated

import typer

LOOPBACK = ("127.0.0.1", "localhost")


def view(
    run: Annotated[Path, typer.Option("--run", "-r", help="Run directory.")],
    port: Annotated[int, typer.Option("--port", "-p", help="Port (0 picks a free one).")] = 8765,
    host: Annotated[
        str, typer.Option("--host", help="Address to bind; anything but loopback requires the printed token.")
    ] = "127.0.0.1",
    reviewer: Annotated[str | None, typer.Option(help="Name recorded with reviews (default: your user name).")] = None,
) -> None:
    """Browse a run in a web browser (tasks, trajectories, token traces, SQL, model comparison) and review rows."""
    import secrets
    import socket
    import threading

    from trajkit.errors import UserError
    from trajkit.view.db import open_run

    if not 0 <= port <= 65535:
        raise UserError(f"--port must be 0-65535, not {port}")
    db = open_run(run)
    failed: list[BaseException] = []

    def opening() -> None:  # reads every shard's footer and checks its hash: beside the imports below
        try:
            db.connection()
        except BaseException as e:  # noqa: BLE001 (raised again below, in this thread)
            failed.append(e)

    opened = threading.Thread(target=opening, name="trajkit-view-open")
    opened.start()
    import uvicorn

    from trajkit.view.app import create_app

    opened.join()
    if failed:  # a broken shard is an error before anything listens
        raise failed[0]
    db.labels()  # and a bad labels.yaml
    loopback = host in LOOPBACK
    token = None if loopback else secrets.token_urlsafe(24)
    app = create_app(db, reviewer or getpass.getuser(), token=token, loopback=loopback)
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as e:
        raise UserError(f"cannot listen on {host}:{port}: {e.strerror}") from None
    sock.listen(128)  # before the address is printed: a client that connects at once waits in the backlog
    bound = sock.getsockname()[1]
    shown = f"[{host}]" if ":" in host else host
    url = f"http://{shown}:{bound}/" + (f"?token={token}" if token else "")
    typer.echo(f"trajkit view: {url}  (Ctrl-C stops)", err=True)
    config = uvicorn.Config(app, log_level="warning")
    uvicorn.Server(config).run(sockets=[sock])
