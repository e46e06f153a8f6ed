"""CUDA C++ and host C generation for Exo-GPU procs.

Pipeline (order matters):
1. host rewrite: every `with CudaDeviceFunction` block becomes a call of a
   generated launch instr (spork_lab.codegen._host);
2. device code: each block becomes a persistent kernel plus launcher, its body
   compiled by exo's C compiler subclassed for CUDA (._device);
3. exo's C backend writes the host .c/.h from the rewritten procs;
4. the .cu gets a small runtime prelude (stream, error slot, grid sizing),
   plus spork_lab.codegen.barrier_text's mbarrier helpers when a kernel uses them.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Optional, Sequence

from exo.API import Procedure

from ..analysis import analyze
from ..errors import CodegenError, user_facing
from ._c_exprs import floor_helpers
from ._host import HostRewriter
from ._host_c import host_c_to_strings
from .barrier_text import prelude_lines

_PRELUDE = """\
#include <cuda_runtime.h>
#include <cooperative_groups.h>
#include <stdint.h>
#include "{cuh}"

static cudaStream_t exo_stream = 0;
static int exo_first_error = 0;

extern "C" void {lib}_set_stream(void *stream) {{ exo_stream = (cudaStream_t) stream; }}
extern "C" void *{lib}_stream(void) {{ return (void *) exo_stream; }}
extern "C" void {lib}_record_error(int err) {{ if (err && !exo_first_error) exo_first_error = err; }}
extern "C" int {lib}_take_error(void) {{ int err = exo_first_error; exo_first_error = 0; return err; }}
extern "C" int {lib}_last_error(void) {{ return (int) cudaGetLastError(); }}
extern "C" const char *{lib}_error_string(int err) {{ return cudaGetErrorString((cudaError_t) err); }}
extern "C" int {lib}_sizeof_int_fast32(void) {{ return (int) sizeof(int_fast32_t); }}

// Persistent grid: blocks_per_sm CTAs on every SM, whole clusters, no more clusters than tasks.
static cudaError_t exo_persistent_grid(int blocks_per_sm, int cluster, long long tasks, int *grid)
{{
  int dev = 0, sms = 0;
  cudaError_t err = cudaGetDevice(&dev);
  if (err == cudaSuccess) err = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
  if (err != cudaSuccess) return err;
  long long g = (long long) sms * blocks_per_sm / cluster * cluster;
  if (g > tasks * cluster) g = tasks * cluster;
  if (g < cluster) g = cluster;
  *grid = (int) g;
  return cudaSuccess;
}}

{floor_helpers}
"""


def lib_name(basename: str) -> str:
    return re.sub(r"\W", "_", basename)


def _check_arch(code: list, arch: Optional[str]) -> None:
    """Thread block clusters need sm_90: say so here rather than through nvcc's error on this_cluster()."""
    if arch is None:
        return
    m = re.fullmatch(r"sm_(\d+)a?", arch)
    if m is None:
        raise CodegenError(f"arch must look like sm_80 or sm_90a, got {arch!r}")
    for d in code:
        if int(m[1]) < 90 and d.cluster > 1:
            raise CodegenError(
                f"this device function uses clusterDim={d.cluster}, which needs sm_90 or newer; build it for "
                f"sm_90a, or use clusterDim=1 for {arch}",
                d.srcinfo,
            )


@user_facing
def compile_procs_to_strings(procs: Sequence[Procedure], basename: str = "spork_kernels", arch: Optional[str] = None) -> tuple:
    """(c, h, cu, cuh) source text for these procs; files are expected to be named basename.{c,h,cu,cuh}.

    With `arch` (e.g. "sm_80") device functions that target cannot run raise CodegenError.
    """
    procs = list(procs)
    if not all(isinstance(p, Procedure) for p in procs):
        raise TypeError("compile_procs_to_strings takes a list of procs (made with @proc)")
    for p in procs:
        analyze(p)  # the user's errors (scopes, collectives, timelines) before any lowering
    lib = lib_name(basename)
    rewriter = HostRewriter(lib)
    host = [rewriter.rewrite(p._loopir_proc) for p in procs]
    c, h = host_c_to_strings(host, f"{basename}.h")
    code = rewriter.device_code
    _check_arch(code, arch)
    helpers = prelude_lines() if any(d.uses_mbarriers for d in code) else []
    structs = sorted({w.definition for d in code for w in d.window_structs})
    cu = "\n\n".join(
        [
            _PRELUDE.format(lib=lib, cuh=f"{basename}.cuh", floor_helpers=floor_helpers("__host__ __device__ inline")),
            *(["\n".join(helpers)] if helpers else []),
            *structs,
            *(d.kernel for d in code),
            *(d.launcher for d in code),
        ]
    )
    guard = f"{lib.upper()}_CUH"
    cuh = "\n".join(
        [
            "#pragma once",
            f"#ifndef {guard}",
            f"#define {guard}",
            "#include <stdint.h>",
            "",
            *(d.launcher_decl for d in code),
            f'extern "C" void {lib}_set_stream(void *stream);',
            f'extern "C" void *{lib}_stream(void);',
            f'extern "C" void {lib}_record_error(int err);',
            f'extern "C" int {lib}_take_error(void);',
            f'extern "C" int {lib}_last_error(void);',
            f'extern "C" const char *{lib}_error_string(int err);',
            f'extern "C" int {lib}_sizeof_int_fast32(void);',
            f"#endif  // {guard}",
            "",
        ]
    )
    return c, h, cu + "\n", cuh


@user_facing
def compile_procs(procs: Sequence[Procedure], directory, basename: str, arch: Optional[str] = None) -> list:
    """Write basename.c, .h, .cu and .cuh into `directory`; returns their paths."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for ext, text in zip(("c", "h", "cu", "cuh"), compile_procs_to_strings(procs, basename, arch)):
        path = directory / f"{basename}.{ext}"
        path.write_text(text)
        paths.append(path)
    return paths


__all__ = ["compile_procs_to_strings", "compile_procs"]
