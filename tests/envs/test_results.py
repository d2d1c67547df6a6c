"""Tool results from a real server: resource links keep name and description; image and audio are typed parts."""

from __future__ import annotations

import asyncio
import base64
from pathlib import Path

from tests.envs.servers.gallery import PNG
from trajkit.envs.config import ServerConfig
from trajkit.envs.session import MAX_MEDIA_BYTES, Connection
from trajkit.models.chat import stored_message, to_openai
from trajkit.schema import to_batch

GALLERY = str(Path(__file__).parent / "servers" / "gallery.py")


async def _calls(**env: str) -> dict:
    conn = Connection("gallery", ServerConfig(command="python", args=[GALLERY], env=env))
    try:
        return {t: await conn.call(t, {}) for t in ("picture", "sound", "link")}
    finally:
        await conn.aclose()


def test_links_and_media_are_kept_typed_and_capped():
    out = asyncio.run(_calls())
    assert out["link"].text == "[resource readme: How to use the gallery <notes://readme>]" and not out["link"].parts
    (image,) = out["picture"].parts
    assert image == {
        "type": "image",
        "mime_type": "image/png",
        "data": base64.b64encode(PNG).decode(),
        "size": len(PNG),
    }
    assert out["picture"].text == f"[image image/png, {len(PNG)} bytes, part 1]"
    (audio,) = out["sound"].parts
    assert (
        audio["type"] == "audio"
        and audio["mime_type"] == "audio/wav"
        and base64.b64decode(audio["data"])[:4] == b"RIFF"
    )

    big = asyncio.run(_calls(GALLERY_BIG="1"))["picture"]
    assert big.parts[0]["data"] is None and big.parts[0]["size"] == len(PNG) + 1_100_000 > MAX_MEDIA_BYTES
    assert "not kept" in big.text

    # stored in the trajectories table as typed parts, never sent to a model
    msg = stored_message({"role": "tool", "content": out["picture"].text, "tool_call_id": "c1", "parts": [image]})
    assert "parts" not in to_openai([msg])[0]
    row = {"traj_id": "t", "task_id": "k", "status": "completed", "messages": [msg]}
    assert to_batch("trajectories", [row]).to_pylist()[0]["messages"][0]["parts"] == [image]
