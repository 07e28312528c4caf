"""Placeholder: the loopback Tinker server (filled in by the Tinker-server work)."""

from __future__ import annotations

from aiohttp import web


def setup(app: web.Application, public_url: str) -> None:
    """Add the Tinker routes to the local stack's app. `public_url` is the stack's base URL."""
