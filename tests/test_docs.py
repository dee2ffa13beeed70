"""The docs cannot rot: the nested walkthrough runs, the API reference builds from the docstrings,
and every file the docs and README name exists."""

from __future__ import annotations

import os
import re
import warnings
from pathlib import Path

import pytest

import conch

ROOT = Path(__file__).parents[1]
DOCS = [*sorted((ROOT / "docs").glob("*.md")), ROOT / "README.md"]


def python_blocks(path: Path) -> list[str]:
    return re.findall(r"```python\n(.*?)```", path.read_text(), flags=re.S)


def test_nested_walkthrough_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    blocks = python_blocks(ROOT / "docs" / "nested-walkthrough.md")
    assert len(blocks) >= 5
    scope: dict[str, object] = {}
    for i, block in enumerate(blocks):
        exec(compile(block, f"nested-walkthrough.md block {i + 1}", "exec"), scope)
    t = conch.connect("warehouse").table("recordings")
    assert t.scan(level="scenes").count() == 2


def test_api_reference_builds_and_documents_every_public_name(tmp_path: Path) -> None:
    import pdoc
    import pdoc.extract

    src = ROOT / "src"
    modules = sorted(
        ".".join(p.relative_to(src).with_suffix("").parts).removesuffix(".__init__")
        for p in (src / "conch").rglob("*.py")
        if not {"spark", "pipelines"} & set(p.parts) and p.name != "__main__.py"
    )
    # a package without `__all__` (conch.loaders) brings its submodules itself: naming them
    # again would add each twice (pdoc warns once per duplicate)
    specs: list[str] = []
    covered: set[str] = set()
    for m in modules:  # sorted: a package before its submodules
        if m not in covered:
            specs.append(m)
            covered.update(pdoc.extract.walk_specs([m]))
    # any pdoc warning (a duplicate, an unloadable module) fails. Recorded, not raised: the filters
    # are process-wide, and an error filter would kill the background settle thread of an earlier
    # test's table (its warning raised there), leaving later settles of this worker to hang
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        pdoc.pdoc(*specs, output_directory=tmp_path)
    pdoc_warnings = [str(w.message) for w in caught if "background compaction" not in str(w.message)]
    assert not pdoc_warnings, pdoc_warnings
    index = (tmp_path / "conch.html").read_text()
    missing = [name for name in conch.__all__ if name != "_" and f'id="{name}"' not in index]
    assert not missing, f"not in the API reference: {missing}"
    assert (tmp_path / "conch" / "expr" / "syntax.html").exists()
    assert "between" in (tmp_path / "conch" / "expr" / "syntax.html").read_text()


# Paths the docs may name that are made by running things, not kept in the repository.
GENERATED = ("bench/results", "demo-warehouse", "warehouse", ".venv", "out.parquet")
PATH_RE = re.compile(r"`((?:\.\./|\./)?(?:docs|src|tests|bench|\.ci|shared)/[\w./-]*\w)`")
LINK_RE = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


def named_paths(text: str) -> list[str]:
    out = [m for m in PATH_RE.findall(text)]
    out += [m for m in LINK_RE.findall(text) if "://" not in m and not m.startswith("mailto:")]
    return out


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_docs_name_only_files_that_exist(doc: Path) -> None:
    missing = []
    for ref in named_paths(doc.read_text()):
        if ref.startswith(GENERATED) or "*" in ref:
            continue
        candidates = [doc.parent / ref, ROOT / ref, ROOT.parent / ref.removeprefix("../")]
        if ref.startswith("shared/") or ref.startswith("../shared/"):
            shared = Path(os.environ.get("CONCH_SHARED", ROOT.parent / "shared"))
            if not shared.exists():
                continue  # the spec lives beside the repository, not in it
            candidates.append(shared / ref.split("shared/", 1)[1])
        if not any(c.exists() for c in candidates):
            missing.append(ref)
    assert not missing, f"{doc.name} names files that do not exist: {missing}"
