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
    text.arrive_lines(info, spec, p, stream=..., record_error=..., use=..., ranks=...)  # Arrive / ReverseArrive
        (`use`: the statement's BarrierUse: arrival election, expect-tx bytes; `ranks` = (lo, hi): the CTAs
        a multicast arrive `>> bar[lo:hi]` lands on)
    text.await_lines(info, spec, p, stream=..., record_error=...)   # Await / ReverseAwait
  Fences (`spec` = sync_spec_of(stmt)), around the codegen's own collective barrier:
    fence_prologue_lines(spec), fence_epilogue_lines(spec, proxy_fence)

Host barriers (events) take `stream`, the C expression of the stream, and
`record_error`, if given, names a C function `void f(int)` that receives each
CUDA call's error code.

Fence lowering: the code generator emits, for Fence(L1, L2) executed by a
collective, `fence_prologue_lines` (completes outstanding async instructions of
L1: cp.async.wait_all, wgmma.wait_group 0, cp.async.bulk.wait_group 0), then
the collective barrier (__syncwarp / named barrier / __syncthreads /
cluster barrier), then `fence_epilogue_lines` (fence.proxy.async when L2
reaches the async proxy, wgmma.fence when L2 feeds wgmma). A proxy fence covers
shared memory only (`.shared::cta`, in clusters `.shared::cluster`) unless the
kernel's generic accesses reach global memory under a tensor map: the fence
over every state space waits like a GPU-scope membar.

Mbarrier arrivals: a collective of whole warps arrives once per warp
(`__syncwarp`, then lane 0), others once per thread; cp.async arrives once per
thread. An Arrive closing a phase of TMA loads is `mbarrier.arrive.expect_tx`
with the phase's bytes (`mbarrier_address` gives the loads the slot of that
phase); a multicast arrive arrives on the barrier of every CTA of its slice
(mapa + `mbarrier.arrive.shared::cluster`). In clusters each CTA keeps its own
barriers, and the init is followed by a cluster barrier so no CTA signals a
barrier its peer has not initialised yet. An await is followed by
`fence.proxy.async` only when its second sync-tl reaches the async proxy and
its queue's arrives order generic-proxy accesses made by threads that access
shared memory, or global memory under a tensor map, through the generic proxy
somewhere in the kernel (`BarrierInfo.generic_async`; e.g. a GEMM's consumers
release a stage after their wgmma read it and store C, which no tensor map
reads, so the producer's next TMA load needs no proxy fence).

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
        "  [[maybe_unused]] unsigned long long state;",
        '  asm volatile("mbarrier.arrive.shared.b64 %0, [%1];" : "=l"(state) : "r"(spork_smem_addr(bar)) : "memory");',
        "}",
        "__device__ __forceinline__ void spork_mbar_arrive_expect_tx(unsigned long long *bar, unsigned bytes) {",
        '  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: "r"(spork_smem_addr(bar)), "r"(bytes) : "memory");',
        "}",
        "__device__ __forceinline__ void spork_mbar_arrive_remote(unsigned long long *bar, unsigned cta) {",
        '  asm volatile("{ .reg .b32 ra; mapa.shared::cluster.u32 ra, %0, %1; mbarrier.arrive.shared::cluster.b64 _, [ra]; }"',
        '               :: "r"(spork_smem_addr(bar)), "r"(cta) : "memory");',
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


def _proxy_fence_after(second_tl: tl.SyncTl, fence: str, first_tls: frozenset = None) -> list:
    """The proxy fence `fence` (analysis.barriers.ProxyFacts.fence) when generic-proxy accesses are ordered before
    async-proxy ones (seed 003). Without `first_tls` (what the paired arrives order), any async-proxy second
    sync-tl gets one.
    """
    generic = first_tls is None or bool(first_tls & {tl.cuda_in_order_instr, tl.Sm80_cp_async_instr})
    return [_asm(fence)] if generic and second_tl.instr_tls & tl.ASYNC_PROXY_INSTR_TLS else []


def _array(info: BarrierInfo, queue: str, counter: str = "") -> str:
    """A barrier's generated array: the mbarriers of its forward or reverse queue (`queue` "f" or "r"), or each
    thread's count of them (`counter`: "a" arrives, "w" awaits, "b" the scope's first await), under the reserved
    prefix and the barrier's C name (`spork_bar_1_fw`), which no buffer of the user's can take."""
    return f"spork_{info.name}_{queue}{counter}"


def mbarrier_address(info: BarrierInfo, p: str, reverse: bool = False) -> str:
    """`&bar[slot]` of the phase the next (Reverse)Arrive on position p closes (what TMA loads complete on)."""
    d, depth = ("r", info.reverse_depth) if reverse else ("f", info.forward_depth)
    return f"&{_array(info, d)}[({p}) * {depth} + {_array(info, d, 'a')}[{p}] % {depth}u]"


_CLUSTER_SYNC = 'asm volatile("barrier.cluster.arrive.release;\\n\\tbarrier.cluster.wait.acquire;" ::: "memory");'


class BarrierText:
    """The CUDA text of one barrier mechanism; by default a mechanism needs no text outside its statements."""

    device_helpers = False  # its lines call prelude_lines()' helpers

    def smem_bytes(self, info: BarrierInfo) -> int:
        """Static shared memory its kernel-scope lines declare, per CTA."""
        return 0

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

    def arrive_lines(self, info: BarrierInfo, spec: SyncSpec, p: str = "0", stream: str = "0", record_error: str = "",
                     use=None, ranks=None) -> list:
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

    def smem_bytes(self, info: BarrierInfo) -> int:
        return sum(8 * info.positions * depth for _, depth, _ in self._arrays(info))  # one u64 per mbarrier

    def kernel_scope_lines(self, info: BarrierInfo) -> list:
        """__shared__ arrays, their initialisation (thread 0, then the CTA waits), per-thread counters."""
        arrays = self._arrays(info)
        lines = [f"__shared__ unsigned long long {_array(info, d)}[{info.positions * depth}];" for d, depth, _ in arrays]
        lines.append("if (threadIdx.x == 0) {")
        for d, depth, count in arrays:
            n = info.positions * depth
            lines.append(f"  for (int i = 0; i < {n}; ++i) spork_mbar_init(&{_array(info, d)}[i], {count}u);")
        lines += [
            "#if __CUDA_ARCH__ >= 900",
            '  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");',
            "#endif",
            "}",
            _CLUSTER_SYNC if info.cluster_dim > 1 else "__syncthreads();",
        ]
        # Per-thread counters: arrives (a), awaits (w) and the scope's first arrive (b) per position.
        lines += [f"[[maybe_unused]] unsigned {_array(info, d, c)}[{info.positions}] = {{0}};"  # a role uses some
                  for d, _, _ in arrays for c in ("a", "w", "b")]
        return lines

    def scope_begin_lines(self, info: BarrierInfo) -> list:
        """A new scope of the barrier: awaits pair with arrives from here on."""
        return [
            f"for (int i = 0; i < {info.positions}; ++i) {_array(info, d, 'b')}[i] = {_array(info, d, 'w')}[i];"
            for d, _, _ in self._arrays(info)
        ]

    def scope_end_lines(self, info: BarrierInfo) -> list:
        """Awaiting threads complete the phases their first `lag` awaits skipped, so counters stay in step."""
        lines = []
        for d, depth, _ in self._arrays(info):
            lag = info.reverse_lag if d == "r" else info.forward_lag
            if lag == 0:
                continue
            w, b = f"{_array(info, d, 'w')}[spork_i]", f"{_array(info, d, 'b')}[spork_i]"
            lines += [
                f"for (int spork_i = 0; spork_i < {info.positions}; ++spork_i) {{",
                f"  const unsigned spork_first = {w} - {b} < {lag}u ? {b} : {w} - {lag}u;",
                f"  for (unsigned spork_k = spork_first; spork_k < {w}; ++spork_k)",
                f"    spork_mbar_wait(&{_array(info, d)}[spork_i * {depth} + spork_k % {depth}u], (spork_k / {depth}u) & 1u);",
                "}",
            ]
        return lines

    def arrive_lines(self, info: BarrierInfo, spec: SyncSpec, p: str = "0", stream: str = "0", record_error: str = "",
                     use=None, ranks=None) -> list:
        cnt = f"{_array(info, 'r' if spec.is_reverse else 'f', 'a')}[{p}]"
        bar = mbarrier_address(info, p, spec.is_reverse)
        if tl.Sm80_cp_async_instr in spec.first_tl.instr_tls:
            # completes once this thread's earlier cp.async have landed: every thread arrives
            return [f"spork_mbar_arrive_cp_async({bar}); ++{cnt};"]
        if ranks is not None:
            call = f"for (unsigned spork_c = {ranks[0]}; spork_c < {ranks[1]}; ++spork_c) spork_mbar_arrive_remote({bar}, spork_c);"
        elif use is not None and use.tx_bytes:
            call = f"spork_mbar_arrive_expect_tx({bar}, {use.tx_bytes}u);"
        else:
            call = f"spork_mbar_arrive({bar});"
        if use is not None and use.whole_warps:
            return ["__syncwarp();", f"if (threadIdx.x % 32 == 0) {{ {call} }}", f"++{cnt};"]
        return [f"{call} ++{cnt};"]

    def await_lines(self, info: BarrierInfo, spec: SyncSpec, p: str = "0", stream: str = "0", record_error: str = "") -> list:
        d, depth = ("r", info.reverse_depth) if spec.is_reverse else ("f", info.forward_depth)
        lag = ~spec.N
        w, b = f"{_array(info, d, 'w')}[{p}]", f"{_array(info, d, 'b')}[{p}]"
        # generated locals are spork_-prefixed: `p` may read the user's names (bar[k] in a loop over k)
        wait = f"spork_mbar_wait(&{_array(info, d)}[({p}) * {depth} + spork_k % {depth}u], (spork_k / {depth}u) & 1u);"
        if lag == 0:  # pairs with this thread's latest arrive count, never skipped
            lines = ["{", f"  const unsigned spork_k = {w};", f"  {wait}", "}"]
        else:
            lines = [f"if ({w} - {b} >= {lag}u) {{", f"  const unsigned spork_k = {w} - {lag}u;", f"  {wait}", "}"]
        arrives = frozenset().union(*(u.spec.first_tl.instr_tls for u in info.queue_uses(spec.is_reverse) if u.spec.is_arrive))
        if not info.generic_async[spec.is_reverse]:
            arrives = arrives - {tl.cuda_in_order_instr, tl.Sm80_cp_async_instr}  # no generic access the TMA may see
        return lines + [f"++{w};"] + _proxy_fence_after(spec.second_tl, info.proxy_fence, arrives)


class CommitGroupText(BarrierText):
    """cp.async / wgmma / cp.async.bulk commit_group and wait_group N (the flavour the analysis chose)."""

    _COMMIT = {
        "cp.async": ("cp.async.commit_group;", "cp.async.wait_group {N};"),
        "wgmma": ("wgmma.commit_group.sync.aligned;", "wgmma.wait_group.sync.aligned {N};"),
        "cp.async.bulk": ("cp.async.bulk.commit_group;", "cp.async.bulk.wait_group {N};"),
    }

    def arrive_lines(self, info: BarrierInfo, spec: SyncSpec, p: str = "0", stream: str = "0", record_error: str = "",
                     use=None, ranks=None) -> list:
        return [_asm(self._COMMIT[info.flavour][0])]

    def await_lines(self, info: BarrierInfo, spec: SyncSpec, p: str = "0", stream: str = "0", record_error: str = "") -> list:
        return [_asm(self._COMMIT[info.flavour][1].format(N=spec.N))] + _proxy_fence_after(spec.second_tl, info.proxy_fence)


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

    def arrive_lines(self, info: BarrierInfo, spec: SyncSpec, p: str = "0", stream: str = "0", record_error: str = "",
                     use=None, ranks=None) -> list:
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
    """Before the collective barrier: complete this thread's async instructions that L1 orders. A wait_group
    waits for committed groups only, so the instructions not yet committed are committed first (cp.async's
    wait_all does both); without it a wgmma or TMA store issued since the last commit was still running after
    the Fence (audit of session 27: a TMA store's rows read back as the NaN they replace, on an H200)."""
    first = spec.first_tl.instr_tls
    lines = []
    if tl.Sm80_cp_async_instr in first:
        lines.append(_asm("cp.async.wait_all;"))
    if tl.wgmma_async_instr in first:
        lines += [_asm("wgmma.commit_group.sync.aligned;"), _asm("wgmma.wait_group.sync.aligned 0;")]
    if tl.tma_to_gmem_async_instr in first:
        lines += [_asm("cp.async.bulk.commit_group;"), _asm("cp.async.bulk.wait_group 0;")]
    return lines


def fence_epilogue_lines(spec: SyncSpec, proxy_fence: str) -> list:
    """After the collective barrier: the proxy fence (analysis.barriers.ProxyFacts.fence) and wgmma.fence where L2
    needs them."""
    lines = []
    if tl.needs_proxy_fence(spec.first_tl, spec.second_tl):
        lines.append(_asm(proxy_fence))
    if tl.emits_wgmma_fence(spec.kind, spec.second_tl):
        lines.append(_asm("wgmma.fence.sync.aligned;"))
    return lines
