"""A read-only local web viewer for stored episodes and reports (``sotopia-env view``).

Needs the ``view`` extra (fastapi, uvicorn, jinja2). ``create_app(store)`` builds the app.
"""

from __future__ import annotations

from sotopia_env.server.viewer.app import create_app

__all__ = ["create_app"]
