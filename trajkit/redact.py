"""Endpoints without credentials: what manifests and cards keep of a ``base_url``."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit, urlunsplit


def clean_endpoint(url: str) -> str:
    """An endpoint for display: no user, password, query string or fragment."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    netloc = f"[{host}]" if ":" in host else host
    if parts.port is not None:
        netloc += f":{parts.port}"
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def clean_endpoints(data: Any) -> Any:
    """A config (dicts and lists) with every ``base_url`` (a string or a list) cleaned."""
    if isinstance(data, dict):
        return {k: (_clean_url_value(v) if k == "base_url" else clean_endpoints(v)) for k, v in data.items()}
    if isinstance(data, list):
        return [clean_endpoints(v) for v in data]
    return data


def _clean_url_value(value: Any) -> Any:
    if isinstance(value, str):
        return clean_endpoint(value)
    if isinstance(value, list):
        return [clean_endpoint(v) if isinstance(v, str) else v for v in value]
    return value
