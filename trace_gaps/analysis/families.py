"""Range families and step kinds: names that differ only in numbers and parameters are one.

Serving engines put the batch in the range name (`step[DECODE bs=4 tokens=4]`), number their
iterations (`Iteration 57`) and layers (`model.layers.12.mlp`). A *family* is the name with
its varying parts replaced by `*`: key=value values, bracketed number lists, hex ids and
numbers that are not part of a word (`fp8`, `sm90` and `bf16` stay). A family whose ranges
all carry one name is shown by that name.

A *phase word* (PREFILL, DECODE, MIXED, EXTEND, as a word of its own or joined by `_`)
tells the kind of a step: families that differ only in it are one step family of several
kinds (`step[* bs=* tokens=*]` of kinds DECODE and PREFILL).
"""

from __future__ import annotations

import fnmatch
import re

import numpy as np
import pandas as pd

WILDCARD = "*"

_VARYING = re.compile(
    r"""
      (?P<keyvalue>(?<==)\s*[^\s,;\]\)\}=]+)        # key=value -> key=*
    | (?P<shape>\[[\d\s,\[\]\.\-]*\d[\d\s,\[\]\.\-]*\])  # [2, 3], [[1, 4096]] -> [*]
    | (?P<hex>0x[0-9a-fA-F]+)                     # 0x7f3a... -> *
    | (?P<number>(?<![A-Za-z0-9])\d+(?:\.\d+)?)      # 57, .12., _3 -> *; fp8, sm90 stay
    """,
    re.VERBOSE,
)
_VALUE_WORD = re.compile(r"^[A-Za-z_]+$")
PHASE_WORDS = ("PREFILL", "DECODE", "MIXED", "EXTEND")
_PHASE = re.compile(r"(?<![A-Za-z])(prefill|decode|mixed|extend)(?![A-Za-z])", re.IGNORECASE)


def family_key(name: str) -> str:
    """The name with its varying parts replaced by WILDCARD (a key=value whose value is a
    plain word, such as mode=DECODE, keeps the word: it names a kind, not a count)."""

    def replace(match: re.Match[str]) -> str:
        if match.lastgroup == "keyvalue":
            value = match.group().lstrip()
            if _VALUE_WORD.match(value):
                return match.group()
            return match.group()[: len(match.group()) - len(value)] + WILDCARD
        if match.lastgroup == "shape":
            return f"[{WILDCARD}]"
        return WILDCARD

    return _VARYING.sub(replace, name)


def phase_of(name: str) -> str:
    """The phase word in a name, upper case, or "" when it has none."""
    match = _PHASE.search(name)
    return match.group(1).upper() if match else ""


def without_phase(family: str) -> str:
    """A family with its phase word replaced by WILDCARD: the step family of every kind."""
    return _PHASE.sub(WILDCARD, family, count=1)


def family_names(names: np.ndarray) -> np.ndarray:
    """Per distinct name (an array of str), the name of its family: the family key where the
    family has several distinct names, else the name itself."""
    keys = np.array([family_key(str(name)) for name in names], dtype=object)
    members = pd.Series(keys).map(pd.Series(keys).value_counts()).to_numpy()
    shown: np.ndarray = np.where(members > 1, keys, names)
    return shown


def matches(pattern: str, names: pd.Index) -> np.ndarray:
    """Which names a --step pattern picks: the exact name if one is, else every name whose
    family is the pattern, else a shell-style glob (`*`, `?`; a `[` without its `]` is itself)."""
    exact = np.asarray(names == pattern)
    if exact.any():
        return exact
    family = np.array([family_key(str(n)) == pattern for n in names], dtype=bool)
    if family.any():
        return family
    regex = re.compile(_glob_regex(pattern))
    return np.array([regex.fullmatch(str(n)) is not None for n in names], dtype=bool)


def _glob_regex(pattern: str) -> str:
    """fnmatch's translation, with a bracket that opens no class taken literally (range
    names hold brackets: `step[DECODE*` means the text `step[DECODE` and anything after)."""
    if "[" in pattern and not re.search(r"\[[^\]]*\]", pattern):
        pattern = pattern.replace("[", "[[]")
    return fnmatch.translate(pattern)
