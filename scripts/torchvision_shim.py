"""Let PyPI's CUDA-linked torchvision import beside the CPU torch (SGLang's venv only).

scripts/realparts-vllm.sh copies this file into the SGLang venv's site-packages as
``_abbench_torchvision_shim.py`` with a ``.pth`` line that imports it at start-up.
SGLang imports torchvision unconditionally (sglang/srt/multimodal/internvl_utils.py),
and PyPI's torchvision, built against CUDA torch, cannot load its operators
(torchvision/_C) beside ``torch==2.13.0+cpu``; its ``_meta_registrations.py`` then
fails on ``torch.library.register_fake("torchvision::nms")``: "operator
torchvision::nms does not exist". Defining the two schemas it registers without
checking first (``nms`` and ``qnms``) lets the import finish; the operators stay
unusable, which a text-only LLM server never calls.

Lazy: torch is imported only when something imports torchvision, not by every
Python start in the venv. Only for a torchvision whose operators cannot load: one
that can would fail to register its own nms over these.
"""

from __future__ import annotations

import importlib.abc
import sys

_LIB = None  # kept alive: a Library that is garbage-collected drops its schemas


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):  # type: ignore[no-untyped-def]
        if name != "torchvision":
            return None
        sys.meta_path.remove(self)
        _define_schemas()
        return None  # the normal finders import torchvision itself


def _define_schemas() -> None:
    global _LIB
    import torch

    lib = torch.library.Library("torchvision", "FRAGMENT")
    for op in ("nms", "qnms"):
        try:
            torch._C._dispatch_find_schema_or_throw(f"torchvision::{op}", "")
        except RuntimeError:
            lib.define(f"{op}(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
    _LIB = lib


if not any(isinstance(f, _Finder) for f in sys.meta_path):
    sys.meta_path.insert(0, _Finder())
