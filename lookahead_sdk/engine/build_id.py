"""What identifies a build of the embedded engine: the source edits and the cmake flags.

The binaries are cached per `BUILD_ID` (`paths.bin_dir`), so changing either builds new ones.
"""

from __future__ import annotations

import hashlib

from lookahead_sdk.engine.patches import PATCH_ID

# The UI flags are required: without them the build downloads web-UI assets.
# AMX is left out of `-march=native`: on hosts whose CPU reports AMX but whose kernel or
# hypervisor does not enable its tile state, llama-server dies at its first matmul
# (SIGSEGV on `ldtilecfg`, seen on 2-core Xeon VMs); a CPU-bound 135M model gains little from it.
NO_AMX = "-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
CMAKE_FLAGS: tuple[str, ...] = (
    "-DCMAKE_BUILD_TYPE=Release",
    "-DLLAMA_USE_PREBUILT_UI=OFF",
    "-DLLAMA_BUILD_UI=OFF",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DLLAMA_OPENSSL=OFF",
    "-DBUILD_SHARED_LIBS=OFF",
    f"-DCMAKE_C_FLAGS={NO_AMX}",
    f"-DCMAKE_CXX_FLAGS={NO_AMX}",
)


def build_id(patch_id: str, cmake_flags: tuple[str, ...]) -> str:
    text = "\0".join((patch_id, *cmake_flags))
    return hashlib.sha256(text.encode()).hexdigest()[:10]


BUILD_ID: str = build_id(PATCH_ID, CMAKE_FLAGS)
