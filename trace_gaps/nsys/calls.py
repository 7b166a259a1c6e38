"""CUDA API names: strip nsys's version suffix and sort each call into a CallCategory."""

import re

from trace_gaps.model import CallCategory

_VERSION_SUFFIX = re.compile(r"_v\d+$")
# Every CUDA runtime and driver call, and NVRTC's, as nsys names them (checked on every
# sample, corpus and peer capture): a name of the CUDA API table unlike this ('', NULL, other
# text) is a damaged string table's, and the call it names counts as no known call.
_CUDA_CALL_NAME = re.compile(r"(cuda|cu|nvrtc)[A-Z]\w*")

# Order matters: the first pattern that matches a (suffix-free) name decides.
_CATEGORY_PATTERNS: tuple[tuple[CallCategory, re.Pattern[str]], ...] = (
    (CallCategory.LAUNCH_GRAPH, re.compile(r"^(cudaGraphLaunch|cuGraphLaunch)")),
    (
        CallCategory.LAUNCH_KERNEL,
        re.compile(
            r"^(cudaLaunchKernel|cudaLaunchCooperativeKernel|cuLaunchKernel|cuLaunchCooperativeKernel)"
        ),
    ),
    (CallCategory.LAUNCH_MEMCPY, re.compile(r"^(cudaMemcpy\w*Async|cuMemcpy\w*Async)")),
    (CallCategory.LAUNCH_MEMSET, re.compile(r"^(cudaMemset\w*Async|cuMemset\w*Async)")),
    (
        CallCategory.SYNC,
        re.compile(
            r"^(cuda\w*Synchronize|cu\w*Synchronize|cudaStreamWaitEvent|cuStreamWaitEvent"
            r"|cudaStreamQuery|cuStreamQuery|cudaEventQuery|cuEventQuery"
            r"|cudaMemcpy|cuMemcpy|cudaMemset|cuMemset)"
        ),
    ),
    # Loading, linking or building code: a real cost, and what makes an early step warm-up.
    (
        CallCategory.MODULE_LOAD,
        re.compile(r"^(cuModuleLoad|cuLibraryLoad|cudaLibraryLoad|cuLink|nvrtc)"),
    ),
    # Looking up a handle in code already loaded: cheap, and made in every step by recent
    # PyTorch, cuBLAS and NCCL. Never a load, never a warm-up reason.
    (
        CallCategory.LOOKUP,
        re.compile(
            r"^(cuModuleGet(Function|Global|TexRef|SurfRef)|cuLibraryGet|cudaLibraryGet"
            r"|cuKernelGet(Function|Name|Library)|cudaGetFuncBySymbol|cudaGetKernel"
            r"|cuGetProcAddress|cudaGetDriverEntryPoint)"
        ),
    ),
    (
        CallCategory.ALLOC,
        re.compile(
            r"^(cudaMalloc|cuMemAlloc|cudaHostAlloc|cuMemHostAlloc|cuMemCreate"
            r"|cudaMallocAsync|cuMemAllocAsync)"
        ),
    ),
    (
        CallCategory.GRAPH_SETUP,
        re.compile(
            r"^(cudaStreamBeginCapture|cudaStreamEndCapture|cudaGraphInstantiate"
            r"|cuGraphInstantiate|cuStreamBeginCapture|cuStreamEndCapture"
            r"|cudaGraphUpload|cuGraphUpload|cudaGraphExecUpdate|cuGraphExecUpdate)"
        ),
    ),
)


def strip_version_suffix(name: str) -> str:
    """Drop the `_vNNNN` suffix nsys appends to API names (any number of digits)."""
    return _VERSION_SUFFIX.sub("", name)


def classify_call(name: str) -> CallCategory:
    """Categorise one suffix-free CUDA runtime or driver API name."""
    for category, pattern in _CATEGORY_PATTERNS:
        if pattern.match(name):
            return category
    return CallCategory.OTHER


def is_cuda_call_name(name: str) -> bool:
    """Whether a (suffix-free) name is a CUDA runtime, driver or NVRTC call's."""
    return _CUDA_CALL_NAME.fullmatch(name) is not None
