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
from collections.abc import Iterable
from pathlib import Path
from types import SimpleNamespace
from typing import Optional, Sequence

from exo.API import Procedure
from exo.core.LoopIR import LoopIR
from exo.core.memory import MemGenError

from ..analysis import analyze
from ..core.dtypes import BF16_C_NAME, BF16_TYPEDEF_C, BF16_TYPEDEF_CUDA, cuda_source
from ..core.ir import walk_stmts
from ..errors import CodegenError, OutputPathError, SporkTypeError, user_facing, user_frame
from ..platforms.Sm90 import SM90_PRELUDE
from ._c_exprs import floor_helpers
from ._device import check_smem
from ._host import HostRewriter, device_function_owner
from ._host_c import host_c_to_strings
from .barrier_text import prelude_lines

_PRELUDE = """\
// Build with nvcc -fmad=false, as sl.build does: nvcc's default fuses a * b + c into one rounding, where this
// program (and what sl.sync_check proved of it) rounds the product and the sum each.
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

// Persistent grid: blocks_per_sm CTAs on every SM, whole clusters, no more clusters than tasks. Clusters:
// only as many as can be resident at once (a GPC may not fit a whole number of them), so none waits for a
// second wave. The resident count is computed once per kernel (*resident, a static of its launcher): the
// occupancy query costs tens of microseconds, too much to pay at every launch. The kernel's task counter, an int,
// steps past the last task by up to the grid: a task count above 2^31 - 1 - grid is refused (it overflowed), as
// the launcher refuses one above 2^31 - 1.
static cudaError_t exo_persistent_grid(int blocks_per_sm, int cluster, long long tasks, const void *kernel,
                                       cudaLaunchConfig_t *cfg, int *resident, int *grid)
{{
  if (*resident == 0) {{
    int dev = 0, sms = 0;
    cudaError_t err = cudaGetDevice(&dev);
    if (err == cudaSuccess) err = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
    if (err != cudaSuccess) return err;
    long long g = (long long) sms * blocks_per_sm / cluster * cluster;
    if (cluster > 1) {{
      int clusters = 0;
      cfg->gridDim = dim3(cluster);
      err = cudaOccupancyMaxActiveClusters(&clusters, kernel, cfg);
      if (err != cudaSuccess) return err;
      if (clusters > 0 && (long long) clusters * cluster < g) g = (long long) clusters * cluster;
    }}
    *resident = (int) (g < cluster ? cluster : g);
  }}
  long long g = *resident;
  if (g > tasks * cluster) g = tasks * cluster;
  if (g < cluster) g = cluster;
  if (tasks > 2147483647LL - g) return cudaErrorInvalidValue;
  *grid = (int) g;
  return cudaSuccess;
}}

{floor_helpers}
"""


# Host: a CUtensorMap for TMA, encoded with the driver's cuTensorMapEncodeTiled, reached through the runtime
# (cudaGetDriverEntryPointByVersion) so the library does not link libcuda. Dims, strides and box arrive
# row-major (the window's order); the driver wants the innermost dimension first and strides in bytes.
_TENSOR_MAP_ENCODER = r"""#include <cudaTypedefs.h>
static cudaError_t spork_encode_tensor_map(CUtensorMap *map, CUtensorMapDataType dtype, int rank, const void *ptr,
                                           const long long *dims, const long long *strides, const int *box,
                                           int elem_bytes, int swizzle)
{
  static PFN_cuTensorMapEncodeTiled_v12000 encode = NULL;
  if (!encode) {
    cudaDriverEntryPointQueryResult found;
    void *fn = NULL;
    cudaError_t err = cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &found);
    if (err != cudaSuccess) return err;
    if (found != cudaDriverEntryPointSuccess) return cudaErrorNotSupported;
    encode = (PFN_cuTensorMapEncodeTiled_v12000) fn;
  }
  if (strides[rank - 1] != 1) return cudaErrorInvalidValue;  // TMA reads rows of contiguous elements
  cuuint64_t gdim[5], gstride[4];
  cuuint32_t gbox[5], estride[5];
  for (int i = 0; i < rank; ++i) {
    gdim[i] = (cuuint64_t) dims[rank - 1 - i];
    gbox[i] = (cuuint32_t) box[rank - 1 - i];
    estride[i] = 1;
  }
  for (int i = 1; i < rank; ++i) gstride[i - 1] = (cuuint64_t) strides[rank - 1 - i] * elem_bytes;
  // the driver's rules for the global side, as an error the runtime explains (cudaErrorInvalidPitchValue)
  if ((uintptr_t) ptr % 16) return cudaErrorInvalidPitchValue;
  for (int i = 0; i + 1 < rank; ++i) if (gstride[i] % 16) return cudaErrorInvalidPitchValue;
  CUtensorMapSwizzle sw = swizzle == 128 ? CU_TENSOR_MAP_SWIZZLE_128B : swizzle == 64 ? CU_TENSOR_MAP_SWIZZLE_64B
                        : swizzle == 32 ? CU_TENSOR_MAP_SWIZZLE_32B : CU_TENSOR_MAP_SWIZZLE_NONE;
  CUresult r = encode(map, dtype, (cuuint32_t) rank, (void *) ptr, gdim, gstride, gbox, estride,
                      CU_TENSOR_MAP_INTERLEAVE_NONE, sw, CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  return r == CUDA_SUCCESS ? cudaSuccess : cudaErrorInvalidValue;
}"""


# Host: global memory that CPU code allocates (`tmp: f32[n] @ CudaGmemLinear`, CudaGmemLinear.alloc/free), ordered on
# the library's stream like the launches that use it (no device-wide sync at the free); errors go to the error slot.
_GMEM_ALLOCATOR = """#include <cuda_runtime.h>
void *{lib}_stream(void);
void {lib}_record_error(int err);
static void *spork_cuda_malloc(size_t bytes)
{{
  void *ptr = NULL;
  cudaError_t err = cudaMallocAsync(&ptr, bytes, (cudaStream_t) {lib}_stream());
  {lib}_record_error((int) err);
  return err == cudaSuccess ? ptr : NULL;
}}
static void spork_cuda_free(void *ptr) {{ {lib}_record_error((int) cudaFreeAsync(ptr, (cudaStream_t) {lib}_stream())); }}
"""


def proc_list(procs: Sequence[Procedure], call: str) -> list:
    """The procs given to `call` (as the user writes it: "sl.build"), or a SporkTypeError at the user's call where
    they are not a list of procs."""
    name = call.removeprefix("sl.")
    if isinstance(procs, (Procedure, str)) or not isinstance(procs, Iterable):
        raise SporkTypeError(f"{name} takes a list of procs: write {call}([p], ...)", user_frame())
    procs = list(procs)
    if not procs:  # a library (or files) of nothing: a list the user meant to fill
        raise SporkTypeError(f"{name} takes a non-empty list of procs: write {call}([p], ...)", user_frame())
    other = next((p for p in procs if not isinstance(p, Procedure)), None)
    if other is not None:
        raise SporkTypeError(f"{name} takes a list of procs (made with @proc), and {other!r} is a "
                             f"{type(other).__name__}: give the proc itself", user_frame())
    return procs


def lib_name(basename: str) -> str:
    """The C identifier of the files `basename.*`, which prefixes their functions (`add_set_stream`) and names their
    header guards: `lib_` before a basename that starts with a digit (`01_add`), as no identifier may."""
    name = re.sub(r"\W", "_", basename, flags=re.ASCII)
    return f"lib_{name}" if name[:1].isdigit() else name


def compute_capability(arch: Optional[str]) -> Optional[int]:
    """90 for "sm_90" or "sm_90a"; None without an arch; CodegenError for anything else."""
    if arch is None:
        return None
    m = re.fullmatch(r"sm_([1-9]\d{1,2})a?", arch) if isinstance(arch, str) else None  # sm_7 is no target
    if m is None:
        raise CodegenError(f"arch must look like sm_80 or sm_90a, got {arch!r}", user_frame())
    return int(m[1])


def _runs_on(target: str, arch: str) -> bool:
    """An arch-specific target ("sm_90a": wgmma) runs only there; "sm_80" runs there and on every newer target."""
    return arch == target if target.endswith("a") else compute_capability(arch) >= compute_capability(target)


def _target_for_all(d) -> str:
    """The target that runs every instr of a device function: an arch-specific one if any needs it, else the
    newest named."""
    targets = [t for t, _, _ in d.instr_targets]
    return next((t for t in targets if t.endswith("a")), max(targets, key=compute_capability))


def _check_arch(code: list, arch: Optional[str]) -> None:
    """What the target cannot run, said here rather than by nvcc or at launch: instrs of a newer target (TMA,
    wgmma), thread block clusters (sm_90), and a CTA's shared memory over the target's limit (without `arch`,
    the most any target gives)."""
    cc = compute_capability(arch)
    for d in code:
        for target, name, srcinfo in d.instr_targets if arch is not None else ():
            if not _runs_on(target, arch):
                only = " (an arch-specific feature: no other target has it)" if target.endswith("a") else " or newer"
                raise CodegenError(f"{name} needs {target}{only}, but this is built for {arch}: build it for "
                                   f"{_target_for_all(d)}", srcinfo)
        if cc is not None and cc < 90 and d.cluster > 1:
            raise CodegenError(
                f"this device function uses clusterDim={d.cluster}, which needs sm_90 or newer; build it for "
                f"sm_90a, or use clusterDim=1 for {arch}",
                d.srcinfo,
            )
        check_smem(d, cc)


def _check_distinct_names(procs: list) -> None:
    """Each proc becomes a C function of its name: two different procs of one name (a proc and a scheduled
    version of it, before `rename`) would be one function twice. Versions of one def are said to be (their line
    is one: "the other is at line 16", at line 16)."""
    seen: dict = {}
    for p in procs:
        ir = p._loopir_proc
        other = seen.setdefault(ir.name, ir)
        if other is ir:
            continue
        one_def = (other.srcinfo.filename, other.srcinfo.lineno) == (ir.srcinfo.filename, ir.srcinfo.lineno)
        where = (", both made from the def at this line (a proc and a scheduled version of it)" if one_def
                 else f" (the other is at line {other.srcinfo.lineno})")
        raise CodegenError(f"two different procs are named {ir.name}{where}; each becomes a C "
                           f"function of its name: give one another, e.g. rename(p, \"{ir.name}_gpu\")", ir.srcinfo)
    for name, ir in seen.items():
        owner = device_function_owner(name)
        if owner in seen:
            raise CodegenError(f"'{name}' is a name the generated code gives a kernel or launcher of proc "
                               f"{owner}: rename this proc", ir.srcinfo)


# Names the generated C and CUDA C++ cannot declare: keywords of either language (that Python allows as names)
# and CUDA's built-in variables. exo writes the proc's own names into the code unchanged.
_RESERVED_NAMES = frozenset("""
    alignas alignof and_eq asm auto bitand bitor bool case catch char char16_t char32_t char8_t compl concept const
    const_cast consteval constexpr constinit co_await co_return co_yield decltype default delete do double
    dynamic_cast enum explicit export extern float friend goto inline int long mutable namespace new noexcept not_eq
    nullptr operator or_eq private protected public register reinterpret_cast requires restrict short signed sizeof
    static static_assert static_cast struct switch template this thread_local throw typedef typeid typename union
    unsigned using virtual void volatile wchar_t xor xor_eq threadIdx blockIdx blockDim gridDim warpSize
""".split())


# Names the standard C headers of the generated host code declare (stdio.h, stdlib.h, stdint.h, stdbool.h, and
# math.h where exo's externs are used): a proc of one of these names declares the function or macro again.
_MATH_FUNCTIONS = """
    acos asin atan atan2 cos sin tan acosh asinh atanh cosh sinh tanh exp exp2 expm1 frexp ilogb ldexp log log10
    log1p log2 logb modf scalbn scalbln cbrt fabs hypot pow sqrt erf erfc lgamma tgamma ceil floor nearbyint rint
    lrint llrint round lround llround trunc fmod remainder remquo copysign nan nextafter nexttoward fdim fmax fmin fma
""".split()
_C_HEADER_NAMES = frozenset(
    [f + suffix for f in _MATH_FUNCTIONS for suffix in ("", "f", "l")]  # double, float and long double
    + [f"{u}int{kind}{bits}_t" for u in ("", "u") for kind in ("", "_least", "_fast") for bits in (8, 16, 32, 64)]
    # math.h's macros and types; stdio.h's; stdlib.h's; the rest of stdint.h's and stdbool.h's
    + """
    fpclassify isfinite isinf isnan isnormal signbit isgreater isgreaterequal isless islessequal islessgreater
    isunordered float_t double_t HUGE_VAL HUGE_VALF HUGE_VALL INFINITY NAN math_errhandling

    remove rename tmpfile tmpnam fclose fflush fopen freopen setbuf setvbuf fprintf fscanf printf scanf snprintf
    sprintf sscanf vfprintf vfscanf vprintf vscanf vsnprintf vsprintf vsscanf fgetc fgets fputc fputs getc getchar
    gets putc putchar puts ungetc fread fwrite fgetpos fseek fsetpos ftell rewind clearerr feof ferror perror FILE
    fpos_t stdin stdout stderr EOF BUFSIZ FILENAME_MAX FOPEN_MAX TMP_MAX SEEK_SET SEEK_CUR SEEK_END size_t NULL

    atof atoi atol atoll strtod strtof strtold strtol strtoll strtoul strtoull rand srand aligned_alloc calloc free
    malloc realloc abort atexit at_quick_exit exit _Exit getenv quick_exit system bsearch qsort abs labs llabs div
    ldiv lldiv mblen mbtowc wctomb mbstowcs wcstombs div_t ldiv_t lldiv_t EXIT_FAILURE EXIT_SUCCESS RAND_MAX
    MB_CUR_MAX

    intptr_t uintptr_t intmax_t uintmax_t true false
    """.split()
)
# Functions the generated code calls in a proc's scope (a DRAM buffer's malloc and free, CUDA's vector constructors
# in kernels and launchers, the math exo's externs call inline) and the headers' macros that stand for values: a
# buffer, size or loop of one of these names hides the function from the code in its scope, or becomes the macro's
# value. Other names stay the user's: those the headers declare (`y0`, `j1`, `exp`, called by the sigmoid helper at
# file scope) and exo's extern names, whose helpers the code calls by other names (`_sigmoid_float`, `_relu_float`).
_CALLED_NAMES = frozenset("""
    malloc free dim3 make_float2 make_uint4 sin sqrt expf fmaxf
    true false NULL EOF INFINITY NAN HUGE_VAL HUGE_VALF HUGE_VALL EXIT_FAILURE EXIT_SUCCESS RAND_MAX
""".split())


# Prefixes of the names the generated code declares itself (its loop counters, instr locals, helpers).
_GENERATED_PREFIXES = ("exo_", "spork_", "sm80_", "sm90_")
_GENERATED_FUNCTION_PREFIXES = ("exo_", "spork_")  # of its functions beside the procs' (`spork_mbar_init`)


def _check_c_names(proc_ir) -> None:
    """A buffer, size or loop named like a C/C++ keyword (`new`, `int`), a CUDA built-in, or a name the generated
    code declares itself (`exo_thread`, or `spork_bar_f`, a barrier's mbarriers) would make code nvcc or gcc
    rejects, or code that reads the wrong variable: said at its declaration instead."""
    if proc_ir.name in _RESERVED_NAMES:
        raise CodegenError(f"'{proc_ir.name}' is a C/C++ keyword or a CUDA built-in, so it cannot name a proc: rename "
                           f"it (e.g. '{proc_ir.name}_')", proc_ir.srcinfo)
    if proc_ir.name in _C_HEADER_NAMES:
        raise CodegenError(f"'{proc_ir.name}' is a name the C library declares (stdio.h, stdlib.h, math.h, stdint.h, "
                           f"stdbool.h), which the generated code includes, so it cannot name a proc: rename it (e.g. "
                           f"'{proc_ir.name}_')", proc_ir.srcinfo)
    if proc_ir.name == "main" or proc_ir.name.startswith(_GENERATED_FUNCTION_PREFIXES):
        which = ("the C entry point's name" if proc_ir.name == "main"
                 else f"a name the generated code keeps for its functions ({', '.join(_GENERATED_FUNCTION_PREFIXES)}...)")
        raise CodegenError(f"'{proc_ir.name}' is {which}, so it cannot name a proc: rename it", proc_ir.srcinfo)
    declared = [(a.name, a.srcinfo) for a in proc_ir.args]
    for s in walk_stmts(proc_ir.body):
        if isinstance(s, (LoopIR.Alloc, LoopIR.WindowStmt)):
            declared.append((s.name, s.srcinfo))
        elif isinstance(s, LoopIR.For):
            declared.append((s.iter, s.srcinfo))
    for sym, srcinfo in declared:
        name = str(sym)
        if name in _RESERVED_NAMES:
            raise CodegenError(f"'{name}' is a C/C++ keyword or a CUDA built-in, so the generated code cannot use it "
                               f"as a name: rename it (e.g. '{name}_')", srcinfo)
        if name in _CALLED_NAMES:
            raise CodegenError(f"'{name}' is a function or value of the C library that the generated code uses, which "
                               f"this name would hide: rename it (e.g. '{name}_')", srcinfo)
        if name.startswith(_GENERATED_PREFIXES):
            raise CodegenError(f"'{name}' is a name the generated code declares itself (names beginning "
                               f"{', '.join(_GENERATED_PREFIXES)} are kept for it): rename it", srcinfo)


def _memory_error(e: MemGenError) -> CodegenError:
    """A memory's refusal to lower an allocation or window (shape, scope) as a CodegenError at the user's
    line: the memories (exo's interface) raise MemGenError with the user's `file:line:col: ` first."""
    where = re.match(r"(.+?):(\d+):\d+: (.*)", str(e), re.S)
    if where is None:
        return CodegenError(str(e))
    return CodegenError(where.group(3), SimpleNamespace(filename=where.group(1), lineno=int(where.group(2))))


@user_facing
def compile_procs_to_strings(procs: Sequence[Procedure], basename: str = "spork_kernels", arch: Optional[str] = None) -> tuple:
    """(c, h, cu, cuh) source text for these procs; files are expected to be named basename.{c,h,cu,cuh}.

    With `arch` (e.g. "sm_80") device functions that target cannot run raise CodegenError.
    """
    procs = proc_list(procs, "compile_procs_to_strings")
    if not isinstance(basename, str) or not basename or Path(basename).name != basename:
        raise SporkTypeError(f"the basename of the generated files is a file name without a folder, got {basename!r}: "
                             "give the folder as compile_procs' directory", user_frame())
    for p in procs:
        analyze(p)  # the user's errors (scopes, collectives, timelines) before any lowering
    _check_distinct_names(procs)
    for p in procs:
        _check_c_names(p._loopir_proc)
    lib = lib_name(basename)
    rewriter = HostRewriter(lib)
    try:
        host = [rewriter.rewrite(p._loopir_proc) for p in procs]
        c, h = host_c_to_strings(host, f"{basename}.h", lib)
    except MemGenError as e:
        raise _memory_error(e) from None
    if "spork_cuda_malloc(" in c:  # CPU code allocates global memory
        include = f'#include "{basename}.h"\n'
        c = c.replace(include, include + "\n" + _GMEM_ALLOCATOR.format(lib=lib), 1)
    if BF16_C_NAME in c or BF16_C_NAME in h:
        h = h.replace("#include <stdint.h>\n", f"#include <stdint.h>\n{BF16_TYPEDEF_C}\n", 1)
    code = rewriter.device_code
    _check_arch(code, arch)
    helpers = prelude_lines() if any(d.uses_mbarriers for d in code) else []
    structs = sorted({cuda_source(w.definition) for d in code for w in d.window_structs})
    half_types = any(t in d.kernel for d in code for t in ("__half", BF16_C_NAME))
    instr_globals = list(dict.fromkeys(g for d in code for g in d.cuda_globals))
    extern_globals = list(dict.fromkeys(g for d in code for g in d.extern_globals))
    sm90 = [SM90_PRELUDE] if instr_globals or any(d.uses_tensor_maps for d in code) else []
    maps = [_TENSOR_MAP_ENCODER] if any(d.uses_tensor_maps for d in code) else []
    cu = "\n\n".join(
        [
            _PRELUDE.format(lib=lib, cuh=f"{basename}.cuh", floor_helpers=floor_helpers("__host__ __device__ inline")),
            *(["\n".join(helpers)] if helpers else []),
            *sm90,
            *maps,
            *instr_globals,
            *extern_globals,
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
            *([BF16_TYPEDEF_CUDA] if half_types else []),
            "",
            *(cuda_source(d.launcher_decl) for d in code),
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


# The first line of each file compile_procs writes: a file there without it is the user's, never overwritten.
GENERATED = "// generated by spork_lab; edits are lost when it is generated again"


def _generated(path: Path) -> bool:
    """A file compile_procs wrote, which it may write again."""
    if not path.is_file():
        return False
    with path.open(errors="replace") as f:
        return f.readline().startswith(GENERATED)


@user_facing
def compile_procs(procs: Sequence[Procedure], directory, basename: str, arch: Optional[str] = None) -> list:
    """Write basename.c, .h, .cu and .cuh into `directory`; returns their paths. Nothing is written where a file of
    those names is not one spork_lab generated (the user's own `gemm.cu`): OutputPathError names it."""
    sources = compile_procs_to_strings(procs, basename, arch)
    directory = Path(directory)
    paths = [directory / f"{basename}.{ext}" for ext in ("c", "h", "cu", "cuh")]
    if directory.exists() and not directory.is_dir():
        raise OutputPathError(f"{directory} is a file, not a directory: give a directory for the generated files",
                              user_frame())
    try:
        theirs = next((p for p in paths if p.exists() and not _generated(p)), None)
        if theirs is not None:
            raise OutputPathError(f"{theirs} is not a file spork_lab generated (its first line is not "
                                  f"`{GENERATED}`), so it is not overwritten: move it, or write into another directory "
                                  "or under another basename", user_frame())
        directory.mkdir(parents=True, exist_ok=True)
        for path, text in zip(paths, sources):
            path.write_text(f"{GENERATED}\n{text}")
    except OSError as e:
        raise OutputPathError(f"cannot write the generated files into {directory}: {e.strerror}",
                              user_frame()) from None
    return paths


__all__ = ["compile_procs_to_strings", "compile_procs"]
