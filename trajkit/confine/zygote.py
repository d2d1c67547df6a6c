"""What both of the jail's zygotes do: the sandbox worker's, which forks one confined child per program
(``program_zygote.py``), and a Python MCP server's, which imports the server once and forks its instances
(``server_zygote.py``).
"""

from __future__ import annotations

import sys


def forget() -> None:
    """Drop this package's modules from ``sys.modules`` (they run on): the code run next, a program or a server's
    body, finds none of them by name, nor a package of its own of the same name shadowed by this one."""
    for name in [n for n in sys.modules if n == __package__ or n.startswith(f"{__package__}.")]:
        del sys.modules[name]
