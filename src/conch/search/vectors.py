"""Vector structures: faiss indexes built, serialised and searched, and the exact distances that
decide every result (`conch.search.query`).

Distances are "smaller is nearer" for every metric, as Lance reports them: `l2` is the squared
Euclidean distance, `cosine` is `1 - cos(q, v)` (vectors are normalised before they are indexed),
`dot` is `-q·v`. faiss is loaded lazily (`conch[search]`).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import pyarrow as pa

from conch.errors import InvalidArgumentError, SchemaError
from conch.model.deps import optional_import

METRICS = ("cosine", "l2", "dot")
# index structure → the faiss factory string (options fill it in) and its search knobs
STRUCTURES = {"flat": "Flat", "hnsw": "HNSW{m}", "ivf": "IVF{nlist},Flat"}
DEFAULTS: dict[str, dict[str, int]] = {
    "flat": {},
    "hnsw": {"m": 16, "ef_construction": 64, "ef_search": 64},
    "ivf": {"nlist": 256, "nprobe": 16},
}


# Below this many vectors built (or queries searched) faiss runs on one OpenMP thread: a team costs
# more than it saves, its threads spin-wait and contend on locks, worst on a loaded machine (HNSW
# over the 1,597 digits: 0.2-0.4 s on one thread, 1.0-2.3 s on two; 20k x 128: 3.4-4.1 s vs
# 5.9-8.9 s; 60k: 20 s vs 18-22 s; 2 cores at load 10).
TEAM_ROWS = 50_000
TEAM_QUERIES = 8


def faiss() -> Any:
    return optional_import("faiss")


def busy_cores() -> int:
    """Threads running now on the machine, this one excepted: the kernel's run queue
    (`/proc/loadavg`'s 4th field) where there is one. Not the one-minute load average: it still
    counts this process's own previous build for a minute, and sent a second index built right
    after a first to one thread (200k x 128, m=32: 32.7 s instead of ~21 s)."""
    try:
        with open("/proc/loadavg") as f:
            return max(0, int(f.read().split()[3].split("/")[0]) - 1)
    except (OSError, ValueError, IndexError):
        return int(os.getloadavg()[0])


@contextmanager
def omp_threads(work: int, team: int) -> Iterator[None]:
    """faiss's OpenMP threads for `work` items: one below `team` items, else as many as before but
    no more than the cores other threads leave idle now (at least one); restored afterwards."""
    fs = faiss()
    before = fs.omp_get_max_threads()
    idle = (os.cpu_count() or 1) - busy_cores()
    fs.omp_set_num_threads(1 if work < team else max(1, min(before, idle)))
    try:
        yield
    finally:
        fs.omp_set_num_threads(before)


def vector_dim(dtype: pa.DataType, column: str) -> int:
    """The dimension of a vector column: a `fixed_size_list` of floats."""
    if pa.types.is_fixed_size_list(dtype) and pa.types.is_floating(dtype.value_type):
        return int(dtype.list_size)
    raise SchemaError(
        f"column {column!r} has type {dtype}; a vector index needs fixed_size_list<float32|float64>[dim] "
        "(write embeddings as pa.FixedSizeListArray)"
    )


def options_for(structure: str, given: dict[str, Any]) -> dict[str, Any]:
    """The structure's options with defaults; unknown structures or options are typed errors."""
    if structure not in STRUCTURES:
        raise InvalidArgumentError(f"vector index {structure!r} is not one of {sorted(STRUCTURES)}")
    known = DEFAULTS[structure]
    bad = sorted(set(given) - set(known))
    if bad:
        raise InvalidArgumentError(f"index {structure!r} takes options {sorted(known)}, not {bad}")
    out: dict[str, Any] = {"index": structure, **known}
    for k, v in given.items():
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise InvalidArgumentError(f"index option {k}={v!r} must be a positive integer")
        out[k] = v
    return out


def as_matrix(values: pa.Array | pa.ChunkedArray, dim: int) -> np.ndarray:
    """The non-null vectors of a fixed-size-list array as an (n, dim) float32 matrix."""
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks() if values.num_chunks else pa.array([], values.type)
    flat = values.flatten().to_numpy(zero_copy_only=False)
    return np.ascontiguousarray(flat.reshape(-1, dim), dtype=np.float32)


def queries_matrix(query: Any, dim: int) -> tuple[np.ndarray, bool]:
    """The queries as an (nq, dim) float32 matrix, and whether one vector was given."""
    q = np.asarray(query.to_numpy(zero_copy_only=False) if isinstance(query, pa.Array) else query)
    if q.dtype == object:
        q = np.stack([np.asarray(v, dtype=np.float32) for v in q])
    single = q.ndim == 1
    q = np.atleast_2d(q).astype(np.float32)
    if q.ndim != 2 or q.shape[1] != dim:
        raise InvalidArgumentError(f"query has shape {np.shape(query)}; the index's vectors have {dim} dimensions")
    if not np.isfinite(q).all():
        raise InvalidArgumentError("query holds NaN or infinite values")
    return np.ascontiguousarray(q), single


def prepare(matrix: np.ndarray, metric: str) -> np.ndarray:
    """Vectors as the index holds them: unit length for cosine (zero vectors stay zero)."""
    if metric != "cosine":
        return matrix
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    return np.ascontiguousarray(matrix / np.where(norms == 0, 1, norms), dtype=np.float32)


def exact_distances(queries: np.ndarray, vectors: np.ndarray, metric: str) -> np.ndarray:
    """(nq, n) distances of prepared queries to raw vectors: the one formula results report."""
    v = prepare(vectors, metric)
    if metric == "l2":
        d = (queries * queries).sum(1)[:, None] - 2 * queries @ v.T + (v * v).sum(1)[None, :]
        return np.maximum(d, 0)
    ip = queries @ v.T
    return 1 - ip if metric == "cosine" else -ip


def empty(dim: int, metric: str, options: dict[str, Any], train_rows: int) -> Any:
    """An empty faiss index of the definition's structure (an IVF one still untrained, with no
    more lists than `train_rows` training vectors allow: 39 per list)."""
    fs = faiss()
    structure = options["index"]
    spec = STRUCTURES[structure].format(**options)
    if structure == "ivf":
        spec = f"IVF{max(1, min(options['nlist'], train_rows // 39))},Flat"
    kind = fs.METRIC_L2 if metric == "l2" else fs.METRIC_INNER_PRODUCT
    index = fs.index_factory(dim, spec, kind)
    if structure == "hnsw":
        index.hnsw.efConstruction = options["ef_construction"]
    return index


def bytes_per_vector(dim: int, options: dict[str, Any]) -> int:
    """Memory one added vector takes in a structure (what sizes a part of a build): its float32
    values, plus for HNSW its level-0 links (2·m int32), its level and offset, plus for IVF its
    int64 id in its list. Upper HNSW levels add about 1/m of the level-0 links: within the 16
    bytes of slack."""
    structure = options["index"]
    links = 8 * options["m"] + 16 if structure == "hnsw" else 8 if structure == "ivf" else 0
    return 4 * dim + links + 16


def tune(index: Any, options: dict[str, Any], k: int) -> None:
    """Set the search knobs (HNSW's beam is at least `k` wide)."""
    if options["index"] == "hnsw":
        index.hnsw.efSearch = max(options["ef_search"], k)
    elif options["index"] == "ivf":
        faiss().extract_index_ivf(index).nprobe = options["nprobe"]


def search(index: Any, queries: np.ndarray, k: int, metric: str) -> tuple[np.ndarray, np.ndarray]:
    """(distances, row ids) of the `k` nearest, as `exact_distances` scales them (-1: no row).
    A few queries run on one thread: faiss's OpenMP team costs more to wake than one query's work
    (measured 14× slower for one query over 20k vectors on a loaded 2-core machine)."""
    with omp_threads(len(queries), TEAM_QUERIES):
        raw, ids = index.search(queries, k)
    if metric == "l2":
        return raw, ids
    return (1 - raw if metric == "cosine" else -raw), ids


def serialize(index: Any) -> bytes:
    return bytes(faiss().serialize_index(index))


def deserialize(data: bytes | memoryview) -> Any:
    return faiss().deserialize_index(np.frombuffer(data, dtype=np.uint8))


def describe_options(options: str) -> str:
    d = json.loads(options)
    return ", ".join(f"{k}={v}" for k, v in d.items())


def json_options(definition: Any) -> dict[str, Any]:
    """The index structure and options of an `IndexDef`."""
    return dict(json.loads(definition.options))
