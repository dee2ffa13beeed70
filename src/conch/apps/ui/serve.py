"""Run the inspector with uvicorn (`conch ui`)."""

from __future__ import annotations

from typing import Any

from conch.model.deps import optional_import


def serve(warehouse: str, host: str = "127.0.0.1", port: int = 8765, console: Any = None) -> None:
    """Serve `warehouse` read-only at http://host:port until interrupted."""
    uvicorn = optional_import("uvicorn")
    from conch.apps.ui.app import create_app

    app = create_app(warehouse)
    if console is not None:
        console.print(
            f"Conch inspector of {warehouse} at http://{host}:{port}/ (Ctrl-C to stop)", highlight=False, markup=False
        )
    uvicorn.run(app, host=host, port=port, log_level="warning")
