"""Ready-made build recipes (:class:`abbench.server.git.Source`) for known servers."""

from __future__ import annotations

from abbench.server.git import Source

# The flags of scripts/realparts.sh: a static CPU build, AVX2/FMA/F16C, GGML_NATIVE off
# (native builds of this llama.cpp version crash on VMs that report AMX).
LLAMA_CPP_CPU_FLAGS = (
    "-DCMAKE_BUILD_TYPE=Release", "-DGGML_NATIVE=OFF",
    "-DGGML_AVX2=ON", "-DGGML_FMA=ON", "-DGGML_F16C=ON",
    "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_EXAMPLES=OFF", "-DLLAMA_CURL=OFF",
    "-DLLAMA_OPENSSL=OFF", "-DLLAMA_USE_PREBUILT_UI=OFF", "-DBUILD_SHARED_LIBS=OFF",
)
LLAMA_CPP_CUDA_FLAGS = (*LLAMA_CPP_CPU_FLAGS, "-DGGML_CUDA=ON",
                        "-DCMAKE_CUDA_ARCHITECTURES=90")


def llama_cpp(repo: str, *, name: str = "llama.cpp", flags: tuple[str, ...] = LLAMA_CPP_CPU_FLAGS,
              target: str = "llama-server") -> Source:
    """llama.cpp's ``target`` built with CMake (and ccache, when present), artifact
    ``bin/<target>``. The default flags are those of scripts/realparts.sh. A static build
    (``-DBUILD_SHARED_LIBS=OFF``) keeps only the binary (``prune``: ~88 MiB of objects and
    libraries less per build); a shared one keeps the whole build tree, libraries included."""
    launcher = ["-DCMAKE_C_COMPILER_LAUNCHER={ccache}", "-DCMAKE_CXX_COMPILER_LAUNCHER={ccache}"]
    if "-DGGML_CUDA=ON" in flags:
        launcher.append("-DCMAKE_CUDA_COMPILER_LAUNCHER={ccache}")
    return Source(
        name=name, repo=repo,
        steps=[["cmake", "-S", "{src}", "-B", "{build}", *flags, *launcher],
               ["cmake", "--build", "{build}", "--target", target, "-j", "{jobs}"]],
        artifacts={target: f"bin/{target}"}, prune="-DBUILD_SHARED_LIBS=OFF" in flags)
