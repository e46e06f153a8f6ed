"""Lowering text of barriers and fences: shape of the text, and that it compiles with nvcc."""

from __future__ import annotations

import shutil
import subprocess

import procs_sync as P
import pytest

from spork_lab.analysis import analyze
from spork_lab.codegen import barrier_text as low
from spork_lab.core.sync_stmts import SyncSpec
from spork_lab.core.timelines import (
    Sm80_generic,
    cuda_generic_and_async_proxy,
    cuda_in_order,
)


def _by_name(p):
    return {i.name: i for i in analyze(p).barriers.values()}


def _specs(info):
    return [u.spec for u in info.uses]


def test_ring_depths_from_lags():
    bar = _by_name(P.ring_copy)["bar"]
    assert (bar.forward_lag, bar.reverse_lag) == (0, 1)
    assert (bar.forward_depth, bar.reverse_depth) == (1, 2)
    assert (bar.forward_arrivals, bar.reverse_arrivals) == (1, 1)  # one per warp


def test_commit_group_text():
    cg = _by_name(P.cp_async_double_buffer)["cg"]
    arrive = next(s for s in _specs(cg) if s.is_arrive)
    awaits = sorted({s.N for s in _specs(cg) if s.is_await})
    assert low.lowering(cg.mem).arrive_lines(cg, arrive) == ['asm volatile("cp.async.commit_group;" ::: "memory");']
    assert awaits == [0, 1]
    wait1 = next(s for s in _specs(cg) if s.is_await and s.N == 1)
    assert low.lowering(cg.mem).await_lines(cg, wait1) == ['asm volatile("cp.async.wait_group 1;" ::: "memory");']


def test_fence_helpers():
    plain = SyncSpec("Fence", cuda_in_order, cuda_in_order)
    full = "fence.proxy.async;"
    assert low.fence_prologue_lines(plain) == [] and low.fence_epilogue_lines(plain, full) == []
    to_async = SyncSpec("Fence", Sm80_generic, cuda_generic_and_async_proxy)
    assert low.fence_prologue_lines(to_async) == ['asm volatile("cp.async.wait_all;" ::: "memory");']
    assert low.fence_epilogue_lines(to_async, full) == ['asm volatile("fence.proxy.async;" ::: "memory");']
    shared = "fence.proxy.async.shared::cta;"  # the device function's form where no generic access reaches TMA's global memory
    assert low.fence_epilogue_lines(to_async, shared) == [f'asm volatile("{shared}" ::: "memory");']


def _kernel_source() -> str:
    """A kernel exercising every device-side line: the ring's mbarriers, commit groups and fences."""
    bar = _by_name(P.ring_copy)["bar"]
    cg = _by_name(P.cp_async_double_buffer)["cg"]
    lines = ["#include <cuda_runtime.h>"] + low.prelude_lines()
    lines += ["__global__ void k(const float *src, float *dst, int n) {"]
    lines += ["__shared__ float buf[2][32];"]
    mbar, group = low.lowering(bar.mem), low.lowering(cg.mem)
    lines += mbar.kernel_scope_lines(bar)
    lines += ["for (int task = blockIdx.x; task < 4; task += gridDim.x) {"]
    lines += mbar.scope_begin_lines(bar)
    specs = {s.kind: s for s in _specs(bar)}
    lines += ["for (int it = 0; it < n / 32; ++it) {", "if (threadIdx.x < 32) {"]
    lines += mbar.await_lines(bar, specs["ReverseAwait"]) + ["buf[it % 2][threadIdx.x] = src[it * 32 + threadIdx.x];"]
    lines += mbar.arrive_lines(bar, specs["Arrive"]) + ["} else {"]
    lines += mbar.await_lines(bar, specs["Await"]) + ["dst[it * 32 + threadIdx.x - 32] = buf[it % 2][threadIdx.x - 32];"]
    lines += mbar.arrive_lines(bar, specs["ReverseArrive"]) + ["}", "}"]
    lines += mbar.scope_end_lines(bar) + ["__syncthreads();", "}"]
    for s in _specs(cg):
        lines += group.arrive_lines(cg, s) if s.is_arrive else group.await_lines(cg, s)
    fence = SyncSpec("Fence", Sm80_generic, cuda_generic_and_async_proxy)
    lines += low.fence_prologue_lines(fence) + ["__syncthreads();"] + low.fence_epilogue_lines(fence, "fence.proxy.async.shared::cta;")
    lines += ["}"]
    return "\n".join(lines) + "\n"


def test_ring_lowering_text():
    src = _kernel_source()
    assert "spork_bar_f[1]" in src and "spork_bar_r[2]" in src  # depths 1 and 2, one position
    assert "spork_mbar_init(&spork_bar_f[i], 1u)" in src
    assert "mbarrier.try_wait.parity" in src and "fence.mbarrier_init" in src


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
@pytest.mark.parametrize("arch", ["sm_90a", "sm_80"])
def test_lowering_compiles(tmp_path, arch):
    src = _kernel_source()
    if arch == "sm_80":
        src = src.replace('asm volatile("fence.proxy.async.shared::cta;" ::: "memory");', "")  # sm_90 PTX
    cu = tmp_path / "k.cu"
    cu.write_text(src)
    r = subprocess.run(["nvcc", "-c", f"-arch={arch}", str(cu), "-o", str(tmp_path / "k.o")], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr + "\n" + src


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_event_lowering_compiles(tmp_path):
    from spork_lab.analysis.barriers import BarrierInfo
    from spork_lab.core.timelines import cpu_in_order
    from spork_lab.platforms.cuda import CudaEvent

    ev = BarrierInfo("ev", None, CudaEvent, (2,), None)
    rec = SyncSpec("Arrive", first_tl=cuda_in_order, N=1, barrier_mem=CudaEvent, barrier_ndim=1)
    host_wait = SyncSpec("Await", second_tl=cpu_in_order, N=0, barrier_mem=CudaEvent, barrier_ndim=1)
    stream_wait = SyncSpec("Await", second_tl=cuda_in_order, N=0, barrier_mem=CudaEvent, barrier_ndim=1)
    text = low.lowering(CudaEvent)
    body = text.decl_lines(ev) + text.arrive_lines(ev, rec, "1", "s")
    body += text.await_lines(ev, stream_wait, "1", "s") + text.await_lines(ev, host_wait, "1") + text.destroy_lines(ev)
    assert "cudaEventSynchronize(ev[1]);" in body and "cudaStreamWaitEvent(s, ev[1], 0);" in body
    cu = tmp_path / "h.cu"
    cu.write_text("#include <cuda_runtime.h>\nvoid h(cudaStream_t s) {\n" + "\n".join(body) + "\n}\n")
    r = subprocess.run(["nvcc", "-c", "-arch=sm_90a", str(cu), "-o", str(tmp_path / "h.o")], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
