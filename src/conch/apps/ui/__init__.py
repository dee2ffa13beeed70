"""`conch ui`: a local, read-only web inspector of a warehouse (the `server` extra: Starlette via FastAPI, uvicorn).

Pages are rendered on the server (HTML, SVG) from files shipped in this package: no CDN, no
JavaScript framework. See `docs/ui.md`.
"""

from conch.apps.ui.app import create_app

__all__ = ["create_app"]
