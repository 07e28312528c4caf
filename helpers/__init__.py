"""Shared code for the course notebooks.

`import helpers` is cheap (the SDKs load on first use), so a notebook can check its
parameters in its first cell and fail in a second, not after a minute of imports.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from helpers.errors import install_short_errors

if TYPE_CHECKING:
    from helpers.backend import Course

install_short_errors()


def connect(backend: str = "local") -> Course:
    """Check `backend`, start what it needs, and return clients, tokenizer, renderer and data.

    See `helpers.backend.connect`.
    """
    from helpers.backend import connect as connect_backend

    return connect_backend(backend)
