"""An MCP server that declares one of everything: titled tools with output schemas, media and link
results, resources, a resource template and a prompt (for harvest and tool-result tests)."""

from __future__ import annotations

import base64
import os
from typing import Literal

from mcp.server import MCPServer
from mcp.server.mcpserver import Audio, Image
from mcp.types import ResourceLink, ToolAnnotations
from pydantic import BaseModel

from trajkit.envs.servers import serve

server = MCPServer("gallery", version="2.0", log_level="WARNING", instructions="Shapes, pictures and notes.")
# a 1x1 PNG; with GALLERY_BIG=1 the picture tool pads it to 1.1 MB, past the size cap of tool results
PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
)
BIG = os.environ.get("GALLERY_BIG") == "1"


class Area(BaseModel):
    shape: str
    area: float


@server.tool(title="Shape area", annotations=ToolAnnotations(read_only_hint=True))
def area(shape: Literal["square", "circle"], size: float, unit: str = "cm") -> Area:
    """Area of a square (side) or circle (radius)."""
    return Area(shape=shape, area=size * size if shape == "square" else 3.14159 * size * size)


@server.tool(title="A picture")
def picture() -> Image:
    """A tiny PNG image."""
    return Image(data=PNG + (b"\0" * 1_100_000 if BIG else b""), format="png")


@server.tool()
def sound() -> Audio:
    """A short WAV clip."""
    return Audio(data=b"RIFF\x24\0\0\0WAVEfmt ", format="wav")


@server.tool()
def link() -> ResourceLink:
    """A link to the readme note."""
    return ResourceLink(type="resource_link", uri="notes://readme", name="readme", description="How to use the gallery")


@server.resource("notes://readme", name="readme", title="Read me", description="How to use the gallery")
def readme() -> str:
    return "Ask for a shape's area."


@server.resource("notes://{topic}", name="note", description="A note on a topic", mime_type="text/plain")
def note(topic: str) -> str:
    return f"A note on {topic}."


@server.prompt(title="Summarize", description="Summarize a note")
def summarize(topic: str, style: str = "short") -> str:
    return f"Summarize the note on {topic} in a {style} style."


if __name__ == "__main__":
    serve(server)
