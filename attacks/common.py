import os
import sys

sys.path.insert(0, "/work/wt/hostile17")
from trajkit.envs.config import ServerConfig
from trajkit.envs.discovery import discover
from trajkit.envs.env import ToolEnv

__all__ = ["EVIL", "ToolEnv", "cfg", "discover"]

HERE = os.path.dirname(os.path.abspath(__file__))
EVIL = os.path.join(HERE, "evil.py")


def cfg(**kw):
    kw.setdefault("env", {})
    return ServerConfig(command=sys.executable, args=[kw.pop("script", EVIL)], **kw)
