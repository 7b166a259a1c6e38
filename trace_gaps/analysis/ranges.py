"""The NVTX range tree: normalised names, and each range's depth and parent on its thread."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from trace_gaps.analysis.families import family_names
from trace_gaps.model import (
    DOMAIN,
    DOMAIN_ID,
    END_NS,
    GLOBAL_TID,
    NAME,
    NVTX_RANGE_COLUMNS,
    START_NS,
    require_columns,
)

DEPTH = "depth"
PARENT = "parent"  # row position of the enclosing range in the returned frame, -1 at the top
IS_OP_RANGE = "is_op_range"  # a framework op range (PyTorch emit_nvtx), never a step

# PyTorch's emit_nvtx decorates op names: "aten::add, seq = 12, op_id = 316, sizes = [[2]]".
_EMIT_NVTX_DECORATION = re.compile(r",\s*(seq|op_id|sizes|input_op_ids)\s*=.*$", re.DOTALL)

DEFAULT_DOMAIN = 0
RAW_NAME = "raw_name"  # the range's name as recorded (normalised); NAME holds its family
UNNAMED_DOMAIN = "domain "  # the name given to a domain with no nvtxDomainCreate row
# Library-internal NVTX domains (lower case, matched on the name's start): their ranges are
# a library's inside view and never steps or stages. docs/definitions.md lists them.
LIBRARY_DOMAINS = (
    "nccl",
    "rccl",
    "cccl",
    "cub",
    "thrust",
    "libcudacxx",
    "cublas",
    "cudnn",
    "cufft",
    "cusparse",
    "cusolver",
    "curand",
    "cutensor",
    "nvshmem",
    "nvjpeg",
    "npp",
    "tsl",
    "xla",
    "tensorrt",
    "ucx",
    "mpi",
    "nvidia",
    "cupti",
    "nsight",
)

# Ranges PyTorch emits per operator (emit_nvtx, record_function): stages at most, never steps.
_OP_PREFIXES = ("aten::", "c10d::", "autograd::", "torch::")


def normalise_range_name(name: str) -> str:
    """Drop PyTorch emit_nvtx decorations so that one op is one stage name."""
    return _EMIT_NVTX_DECORATION.sub("", name).strip()


def build_range_tree(nvtx_ranges: pd.DataFrame, *, domain: str | None = None) -> pd.DataFrame:
    """Return the ranges of user domains sorted by (thread, start, longest first) with depth,
    parent, the family name (NAME) and the name as recorded (RAW_NAME).

    Ranges of library domains (CCCL's cub::*, NCCL, cuBLAS, ...: LIBRARY_DOMAINS) and of
    domains never named are left out: they never become steps or stages, and their time
    stays with the enclosing stage. domain: keep only that domain's ranges ("default" or ""
    for the default domain). Push/pop ranges nest properly on their thread; a start/end
    range that crosses a sibling is placed by its start.
    """
    require_columns(nvtx_ranges, NVTX_RANGE_COLUMNS)
    ranges = nvtx_ranges.loc[user_domains(nvtx_ranges, domain), list(NVTX_RANGE_COLUMNS)]
    raw, family, is_op_range = _name_facts(ranges[NAME])
    # Sort once with numpy (lexsort is stable; the last key is the primary one) and build the
    # frame once: no intermediate copies of a frame that can hold millions of ranges.
    order = np.lexsort(
        (-ranges[END_NS].to_numpy(), ranges[START_NS].to_numpy(), ranges[GLOBAL_TID].to_numpy())
    )
    columns = {name: ranges[name].to_numpy()[order] for name in NVTX_RANGE_COLUMNS}
    columns[NAME] = family[order]
    columns[RAW_NAME] = raw[order]
    columns[IS_OP_RANGE] = is_op_range[order]
    ranges = pd.DataFrame(columns)
    depth = np.zeros(len(ranges), dtype=np.int64)
    parent = np.full(len(ranges), -1, dtype=np.int64)
    tids = ranges[GLOBAL_TID].to_numpy()
    starts = ranges[START_NS].to_numpy()
    ends = ranges[END_NS].to_numpy()
    boundaries = np.flatnonzero(np.diff(tids)) + 1
    for lo, hi in zip(np.r_[0, boundaries], np.r_[boundaries, len(ranges)], strict=True):
        depth[lo:hi], parent[lo:hi] = _nest_one_thread(starts[lo:hi], ends[lo:hi])
        parent[lo:hi] = np.where(parent[lo:hi] >= 0, parent[lo:hi] + lo, -1)
    return ranges.assign(**{DEPTH: depth, PARENT: parent})


def user_domains(nvtx_ranges: pd.DataFrame, domain: str | None = None) -> np.ndarray:
    """Which ranges count for steps and stages: the default domain and every named domain
    that is not a library's (LIBRARY_DOMAINS), or only the domain asked for."""
    names = nvtx_ranges[DOMAIN].to_numpy()
    if domain is not None:
        wanted = "" if domain.lower() == "default" else domain
        picked: np.ndarray = names == wanted
        return picked
    ids = nvtx_ranges[DOMAIN_ID].to_numpy()
    distinct = pd.unique(names)
    library = {str(n) for n in distinct if is_library_domain(str(n))}
    unnamed = {str(n) for n in distinct if str(n).startswith(UNNAMED_DOMAIN)}
    kept: np.ndarray = (ids == DEFAULT_DOMAIN) | ~np.isin(names, list(library | unnamed))
    return kept


def domain_names(nvtx_ranges: pd.DataFrame) -> list[str]:
    """The NVTX domains the ranges come from, as --domain names them ('default' first)."""
    names = {str(n) for n in pd.unique(nvtx_ranges[DOMAIN].to_numpy())}
    return (["default"] if "" in names else []) + sorted(names - {""})


def is_library_domain(name: str) -> bool:
    """A library's own NVTX domain (matched case-insensitively on its start)."""
    return name.lower().startswith(LIBRARY_DOMAINS)


def _name_facts(names: pd.Series) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per row: the normalised name, its family (families.py), and whether it is a
    framework op range.

    One hash pass to find the distinct names and one regex search per distinct name, not
    per row (emit_nvtx names are nearly all distinct, so this is the cost that counts).
    """
    codes, uniques = pd.factorize(names, use_na_sentinel=False)
    normalised = np.empty(len(uniques), dtype=object)
    is_op = np.empty(len(uniques), dtype=bool)
    search = _EMIT_NVTX_DECORATION.search
    # Equal normalised names share one string object: less memory, and each hash is computed once.
    canonical: dict[str, str] = {}
    for i, raw in enumerate(uniques):
        name = str(raw)
        match = search(name)
        # Same as normalise_range_name: the first decoration runs to the end of the name.
        clean = (name[: match.start()] if match else name).strip()
        normalised[i] = canonical.setdefault(clean, clean)
        is_op[i] = match is not None or name.startswith(_OP_PREFIXES)
    clean_codes, cleans = pd.factorize(normalised, use_na_sentinel=False)
    families = family_names(np.asarray(cleans, dtype=object))[clean_codes]
    return normalised[codes], families[codes], is_op[codes]


def _nest_one_thread(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Depth and parent (thread-local positions) of ranges sorted by (start, -end)."""
    n = len(starts)
    order = np.arange(n)
    # Ranges already closed when range i opens: their end is <= start_i.
    closed_before = np.searchsorted(np.sort(ends), starts, side="right")
    # A zero-length range at start_i sorted after i would be counted as closed: exclude i itself.
    self_closed = ends <= starts
    depth = order - closed_before + self_closed.astype(np.int64)
    depth = np.maximum(depth, 0)
    parent = np.full(n, -1, dtype=np.int64)
    for level in range(1, int(depth.max(initial=0)) + 1):
        children = np.flatnonzero(depth == level)
        candidates = np.flatnonzero(depth == level - 1)
        if len(candidates) == 0:
            continue
        at = np.searchsorted(candidates, children, side="left") - 1
        valid = at >= 0
        parent[children[valid]] = candidates[at[valid]]
    return depth, parent


def open_range_path(range_tree: pd.DataFrame, global_tid: int, time_ns: int) -> list[str]:
    """Names of the ranges open on a thread at a time, outermost first (build_range_tree rows).

    For the few times a report explains (a capture, a long gap), not for every event.
    """
    tids = range_tree[GLOBAL_TID].to_numpy()
    lo, hi = np.searchsorted(tids, [global_tid, global_tid + 1])
    starts = range_tree[START_NS].to_numpy()[lo:hi]
    ends = range_tree[END_NS].to_numpy()[lo:hi]
    at = int(np.searchsorted(starts, time_ns, side="right")) - 1
    parents = range_tree[PARENT].to_numpy()
    names = range_tree[NAME].to_numpy()
    path = []
    # The last range opened at or before the time, then up its parents to one still open.
    row = lo + at if at >= 0 else -1
    while row >= 0:
        if ends[row - lo] > time_ns:
            path.append(str(names[row]))
        row = int(parents[row])
    return path[::-1]
