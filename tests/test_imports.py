"""Import hygiene: `import conch` loads no optional dependency, and no heavy core one.

The list of modules that must stay unloaded is derived from pyproject.toml's optional
dependencies (each extra's distributions, mapped to the module they install), so a new extra is
covered the day it is added.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).parents[1]

# Distribution name -> importable module, where they differ.
MODULE_OF = {"pylance": "lance", "pillow": "PIL", "psycopg-pool": "psycopg_pool", "moto": "moto", "pyyaml": "yaml"}
# Tooling that is never imported by library code at all.
NOT_LIBRARIES = {"pytest", "pytest-xdist", "hypothesis", "ruff", "mypy", "schemathesis"}
# Core dependencies that are loaded lazily, on first use (the CLI's, and the fragment format's).
LAZY_CORE = ["vortex", "typer", "rich", "http.server", "requests"]


def optional_modules() -> list[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    names: set[str] = set()
    for deps in project["optional-dependencies"].values():
        for dep in deps:
            dist = re.split(r"[\[<>=!~ ;]", dep, maxsplit=1)[0].strip().lower()
            if dist in NOT_LIBRARIES or dist == "conch":
                continue
            names.add(MODULE_OF.get(dist, dist.replace("-", "_")))
    return sorted(names)


def test_the_optional_list_is_derived_from_pyproject() -> None:
    mods = optional_modules()
    assert {"pyspark", "pandas", "polars", "duckdb", "psycopg"} <= set(mods)


def test_import_conch_loads_no_optional_or_lazy_dependency() -> None:
    watched = optional_modules() + LAZY_CORE
    code = f"import sys, conch\nprint(','.join(m for m in {watched!r} if m in sys.modules))"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "", f"`import conch` loaded {proc.stdout.strip()}"
