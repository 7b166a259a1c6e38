"""Call categories and "no index" as the small codes the replay model's arrays hold."""

from __future__ import annotations

from trace_gaps.model import CallCategory

# Call categories as small codes in the model.
CATEGORIES = tuple(c.value for c in CallCategory)
CATEGORY_CODE = {name: code for code, name in enumerate(CATEGORIES)}
SYNC = CATEGORY_CODE[CallCategory.SYNC.value]
LAUNCH_GRAPH = CATEGORY_CODE[CallCategory.LAUNCH_GRAPH.value]
OTHER = CATEGORY_CODE[CallCategory.OTHER.value]
EAGER_LAUNCHES = frozenset(
    CATEGORY_CODE[c.value]
    for c in (CallCategory.LAUNCH_KERNEL, CallCategory.LAUNCH_MEMCPY, CallCategory.LAUNCH_MEMSET)
)
API = frozenset(
    CATEGORY_CODE[c.value]
    for c in (
        CallCategory.OTHER,
        CallCategory.ALLOC,
        CallCategory.MODULE_LOAD,
        CallCategory.GRAPH_SETUP,
        CallCategory.LOOKUP,
    )
)

# An index array's "none": no call (a host gap's item, an op launched elsewhere), no op.
NO_INDEX = -1
