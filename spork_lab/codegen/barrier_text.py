"""CUDA C++ text for split barriers and for the extra instructions of fences.

Each barrier memory names its lowering (`BarrierMemory.lowering`); `lowering(mem)`
gives the `BarrierText` that writes its CUDA (all methods return lists of lines;
`info` is the barrier's `BarrierInfo` from `analyze(p).barriers`, named for C; `p`
is the C expression of the flattened barrier position, 0 for a scalar barrier):

    prelude_lines()                              # device helpers, once per .cu file when some
                                                 # lowering has `device_helpers`
    text = lowering(info.mem)
    text.kernel_scope_lines(info)                # at kernel scope, every thread, before warp-specialized paths
    text.scope_begin_lines(info)                 # where the barrier is allocated (each task)
    text.scope_end_lines(info)                   # where its scope ends
    text.decl_lines(info, record_error)          # host barriers: where allocated in CPU code
    text.destroy_lines(info)                     #   and where their block ends
    text.check_arrive(info, spec, threads, srcinfo)   # CodegenError if the collective cannot arrive
    text.arrive_lines(info, spec, p, stream=..., record_error=...)  # Arrive / ReverseArrive
    text.await_lines(info, spec, p, stream=..., record_error=...)   # Await / ReverseAwait
  Fences (`spec` = sync_spec_of(stmt)), around the codegen's own collective barrier:
    fence_prologue_lines(spec), fence_epilogue_lines(spec)

Host barriers (events) take `stream`, the C expression of the stream, and
`record_error`, if given, names a C function `void f(int)` that receives each
CUDA call's error code.

Fence lowering: the code generator emits, for Fence(L1, L2) executed by a
collective, `fence_prologue_lines` (completes outstanding async instructions of
L1: cp.async.wait_all, wgmma.wait_group 0, cp.async.bulk.wait_group 0), then
the collective barrier (__syncwarp / named barrier / __syncthreads /
cluster barrier), then `fence_epilogue_lines` (fence.proxy.async when L2
reaches the async proxy, wgmma.fence when L2 feeds wgmma).

Mbarrier scheme: barrier position p owns `depth` consecutive mbarriers (one
ring per position; the reverse array likewise). Each thread counts the arrives
and awaits it executes on each position (the checker verifies that one queue
is always used by the same threads, so every thread's count is the queue's).
Arrive number a (0-based) uses slot a % depth; an await of lag L pairs with
arrive k = awaits - L (skipped while k < this scope's first arrive) and waits
for the phase of parity (k / depth) & 1 on slot k % depth. Counters live for
the whole kernel (tasks reuse the mbarriers), and a scope's end drains the last
L phases the awaiting threads skipped, so the next task starts even.
"""

from __future__ import annotations

from ..analysis.barriers import BarrierInfo
from ..core import timelines as tl
from ..core.sync_stmts import SyncSpec
from ..errors import CodegenError


def prelude_lines() -> list:
    """Device helpers used by the mbarrier lines (sm_80 and later; try_wait on sm_90)."""
    return [
        "__device__ __forceinline__ unsigned spork_smem_addr(const void *p) {",
        "  return (unsigned)__cvta_generic_to_shared(p);",
        "}",
        "__device__ __forceinline__ void spork_mbar_init(unsigned long long *bar, unsigned count) {",
        '  asm volatile("mbarrier.init.shared.b64 [%0], %1;" :: "r"(spork_smem_addr(bar)), "r"(count) : "memory");',
        "}",
        "__device__ __forceinline__ void spork_mbar_arrive(unsigned long long *bar) {",
        "  unsigned long long state;",
        '  asm volatile("mbarrier.arrive.shared.b64 %0, [%1];" : "=l"(state) : "r"(spork_smem_addr(bar)) : "memory");',
        "}",
        "__device__ __forceinline__ void spork_mbar_arrive_cp_async(unsigned long long *bar) {",
        '  asm volatile("cp.async.mbarrier.arrive.noinc.shared.b64 [%0];" :: "r"(spork_smem_addr(bar)) : "memory");',
        "}",
        "__device__ __forceinline__ void spork_mbar_wait(unsigned long long *bar, unsigned parity) {",
        "  unsigned done = 0;",
        "  while (!done) {",
        "#if __CUDA_ARCH__ >= 900",
        '    asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"',
        '                 : "=r"(done) : "r"(spork_smem_addr(bar)), "r"(parity) : "memory");',
        "#else",
        '    asm volatile("{ .reg .pred p; mbarrier.test_wait.parity.shared.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"',
        '                 : "=r"(done) : "r"(spork_smem_addr(bar)), "r"(parity) : "memory");',
        "#endif",
        "  }",
        "}",
    ]


def _asm(text: str) -> str:
    return f'asm volatile("{text}" ::: "memory");'


def _proxy_fence_after(second_tl: tl.SyncTl) -> list:
    """fence.proxy.async when the ordered accesses continue in the async proxy (seed 003)."""
    return [_asm("fence.proxy.async;")] if second_tl.instr_tls & tl.ASYNC_PROXY_INSTR_TLS else []


class BarrierText:
    """The CUDA text of one barrier mechanism; by default a mechanism needs no text outside its statements."""

    device_helpers = False  # its lines call prelude_lines()' helpers

    def kernel_scope_lines(self, info: BarrierInfo) -> list:
        return []

    def scope_begin_lines(self, info: BarrierInfo) -> list:
        return []

    def scope_end_lines(self, info: BarrierInfo) -> list:
        return []

    def decl_lines(self, info: BarrierInfo, record_error: str = "") -> list:
        return []

    def destroy_lines(self, info: BarrierInfo) -> list:
        return []

    def check_arrive(self, info: BarrierInfo, spec: SyncSpec, threads: int, srcinfo) -> None:
        """Raise CodegenError if a collective of `threads` threads cannot arrive on this barrier."""

    def arrive_lines(self, info: BarrierInfo, spec: SyncSpec, p: str = "0", stream: str = "0", record_error: str = "") -> list:
        raise NotImplementedError

    def await_lines(self, info: BarrierInfo, spec: SyncSpec, p: str = "0", stream: str = "0", record_error: str = "") -> list:
        raise NotImplementedError


class MbarrierText(BarrierText):
    """Shared-memory mbarrier rings with phase parity, and reverse rings (see the module docstring)."""

    device_helpers = True

    @staticmethod
    def _arrays(info: BarrierInfo):
        """(suffix, depth, arrivals) of the forward and (if used) reverse mbarrier arrays."""
        out = [("f", info.forward_depth, info.forward_arrivals)]
        if info.reverse_depth:
            out.append(("r", info.reverse_depth, info.reverse_arrivals))
        return out

    def kernel_scope_lines(self, info: BarrierInfo) -> list:
        """__shared__ arrays, their initialisation (thread 0, then the CTA waits), per-thread counters."""
        arrays = self._arrays(info)
        lines = [f"__shared__ unsigned long long {info.name}_{d}[{info.positions * depth}];" for d, depth, _ in arrays]
        lines.append("if (threadIdx.x == 0) {")
        for d, depth, count in arrays:
            n = info.positions * depth
            lines.append(f"  for (int i = 0; i < {n}; ++i) spork_mbar_init(&{info.name}_{d}[i], {count}u);")
        lines += [
            "#if __CUDA_ARCH__ >= 900",
            '  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");',
            "#endif",
            "}",
            "__syncthreads();",
        ]
        # Per-thread counters: arrives (a), awaits (w) and the scope's first arrive (b) per position.
        lines += [f"unsigned {info.name}_{d}{c}[{info.positions}] = {{0}};" for d, _, _ in arrays for c in ("a", "w", "b")]
        return lines

    def scope_begin_lines(self, info: BarrierInfo) -> list:
        """A new scope of the barrier: awaits pair with arrives from here on."""
        return [
            f"for (int i = 0; i < {info.positions}; ++i) {info.name}_{d}b[i] = {info.name}_{d}w[i];"
            for d, _, _ in self._arrays(info)
        ]

    def scope_end_lines(self, info: BarrierInfo) -> list:
        """Awaiting threads complete the phases their first `lag` awaits skipped, so counters stay in step."""
        lines = []
        for d, depth, _ in self._arrays(info):
            lag = info.reverse_lag if d == "r" else info.forward_lag
            if lag == 0:
                continue
            lines += [
                f"for (int i = 0; i < {info.positions}; ++i) {{",
                f"  const unsigned first = {info.name}_{d}w[i] - {info.name}_{d}b[i] < {lag}u"
                f" ? {info.name}_{d}b[i] : {info.name}_{d}w[i] - {lag}u;",
                f"  for (unsigned k = first; k < {info.name}_{d}w[i]; ++k)",
                f"    spork_mbar_wait(&{info.name}_{d}[i * {depth} + k % {depth}u], (k / {depth}u) & 1u);",
                "}",
            ]
        return lines

    def check_arrive(self, info: BarrierInfo, spec: SyncSpec, threads: int, srcinfo) -> None:
        """Every thread of an arriving collective arrives, so its size must be the mbarrier's arrival count
        (otherwise the phase would never complete)."""
        count = info.reverse_arrivals if spec.is_reverse else info.forward_arrivals
        if threads != count:
            raise CodegenError(
                f"{spec.source(info.name)} is executed by {threads} threads per collective, but {info.name}'s "
                f"mbarrier expects {count} arrivals per phase",
                srcinfo,
            )

    def arrive_lines(self, info: BarrierInfo, spec: SyncSpec, p: str = "0", stream: str = "0", record_error: str = "") -> list:
        d, depth = ("r", info.reverse_depth) if spec.is_reverse else ("f", info.forward_depth)
        cnt = f"{info.name}_{d}a[{p}]"
        fn = "spork_mbar_arrive"
        if tl.Sm80_cp_async_instr in spec.first_tl.instr_tls:
            fn = "spork_mbar_arrive_cp_async"  # completes once this thread's earlier cp.async have landed
        return [f"{fn}(&{info.name}_{d}[({p}) * {depth} + {cnt} % {depth}u]); ++{cnt};"]

    def await_lines(self, info: BarrierInfo, spec: SyncSpec, p: str = "0", stream: str = "0", record_error: str = "") -> list:
        d, depth = ("r", info.reverse_depth) if spec.is_reverse else ("f", info.forward_depth)
        lag = ~spec.N
        w, b = f"{info.name}_{d}w[{p}]", f"{info.name}_{d}b[{p}]"
        wait = f"spork_mbar_wait(&{info.name}_{d}[({p}) * {depth} + k % {depth}u], (k / {depth}u) & 1u);"
        if lag == 0:  # pairs with this thread's latest arrive count, never skipped
            lines = ["{", f"  const unsigned k = {w};", f"  {wait}", "}"]
        else:
            lines = [f"if ({w} - {b} >= {lag}u) {{", f"  const unsigned k = {w} - {lag}u;", f"  {wait}", "}"]
        return lines + [f"++{w};"] + _proxy_fence_after(spec.second_tl)


class CommitGroupText(BarrierText):
    """cp.async / wgmma / cp.async.bulk commit_group and wait_group N (the flavour the analysis chose)."""

    _COMMIT = {
        "cp.async": ("cp.async.commit_group;", "cp.async.wait_group {N};"),
        "wgmma": ("wgmma.commit_group.sync.aligned;", "wgmma.wait_group.sync.aligned {N};"),
        "cp.async.bulk": ("cp.async.bulk.commit_group;", "cp.async.bulk.wait_group {N};"),
    }

    def arrive_lines(self, info: BarrierInfo, spec: SyncSpec, p: str = "0", stream: str = "0", record_error: str = "") -> list:
        return [_asm(self._COMMIT[info.flavour][0])]

    def await_lines(self, info: BarrierInfo, spec: SyncSpec, p: str = "0", stream: str = "0", record_error: str = "") -> list:
        return [_asm(self._COMMIT[info.flavour][1].format(N=spec.N))] + _proxy_fence_after(spec.second_tl)


class EventText(BarrierText):
    """CUDA events, host side: record on the library's stream; the stream or the CPU waits."""

    @staticmethod
    def _call(call: str, record_error: str) -> str:
        return f"{record_error}((int) {call});" if record_error else f"{call};"

    def decl_lines(self, info: BarrierInfo, record_error: str = "") -> list:
        create = self._call(f"cudaEventCreateWithFlags(&{info.name}[i], cudaEventDisableTiming)", record_error)
        return [f"cudaEvent_t {info.name}[{info.positions}];", f"for (int i = 0; i < {info.positions}; ++i) {create}"]

    def destroy_lines(self, info: BarrierInfo) -> list:
        return [f"for (int i = 0; i < {info.positions}; ++i) cudaEventDestroy({info.name}[i]);"]

    def arrive_lines(self, info: BarrierInfo, spec: SyncSpec, p: str = "0", stream: str = "0", record_error: str = "") -> list:
        return [self._call(f"cudaEventRecord({info.name}[{p}], {stream})", record_error)]

    def await_lines(self, info: BarrierInfo, spec: SyncSpec, p: str = "0", stream: str = "0", record_error: str = "") -> list:
        if tl.cpu_in_order_instr in spec.second_tl.instr_tls:  # the CPU waits; else only the stream
            return [self._call(f"cudaEventSynchronize({info.name}[{p}])", record_error)]
        return [self._call(f"cudaStreamWaitEvent({stream}, {info.name}[{p}], 0)", record_error)]


LOWERINGS = {"mbarrier": MbarrierText(), "commit_group": CommitGroupText(), "event": EventText()}


def lowering(mem: type) -> BarrierText:
    """The CUDA text of barriers in memory `mem` (named by its `lowering` hook)."""
    text = LOWERINGS.get(mem.lowering)
    if text is None:
        raise CodegenError(f"no CUDA lowering for barriers @ {mem.name()} (lowering {mem.lowering!r})")
    return text


def fence_prologue_lines(spec: SyncSpec) -> list:
    """Before the collective barrier: complete this thread's async instructions that L1 orders."""
    first = spec.first_tl.instr_tls
    lines = []
    if tl.Sm80_cp_async_instr in first:
        lines.append(_asm("cp.async.wait_all;"))
    if tl.wgmma_async_instr in first:
        lines.append(_asm("wgmma.wait_group.sync.aligned 0;"))
    if tl.tma_to_gmem_async_instr in first:
        lines.append(_asm("cp.async.bulk.wait_group 0;"))
    return lines


def fence_epilogue_lines(spec: SyncSpec) -> list:
    """After the collective barrier: proxy fence and wgmma.fence where L2 needs them."""
    lines = []
    if tl.needs_proxy_fence(spec.first_tl, spec.second_tl):
        lines.append(_asm("fence.proxy.async;"))
    if tl.wgmma_async_instr in spec.second_tl.instr_tls and spec.second_tl.name.startswith("wgmma_fence"):
        lines.append(_asm("wgmma.fence.sync.aligned;"))
    return lines
