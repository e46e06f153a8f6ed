"""Launch one configuration of gemm_hand.so twice at 8192^3 (for ncu: profile the second launch).
Usage: python3 prof_hand.py DIR CONFIG_INDEX GROUP"""

from __future__ import annotations

import ctypes
import sys

import torch

lib = ctypes.CDLL(sys.argv[1] + "/gemm_hand.so")
i, grp, n = int(sys.argv[2]), int(sys.argv[3]), 8192
lib.config_name.restype = ctypes.c_char_p
dt = {"tf32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}[lib.config_name(i).decode().split()[0]]
A, B = (torch.randn(n, n, device="cuda").to(dt) for _ in range(2))
C = torch.empty(n, n, device="cuda")
grid = ctypes.c_int(0)
for _ in range(2):
    rc = lib.run_config(i, ctypes.c_void_p(A.data_ptr()), ctypes.c_void_p(B.data_ptr()), ctypes.c_void_p(C.data_ptr()),
                        n, n, n, grp, ctypes.c_void_p(torch.cuda.current_stream().cuda_stream), ctypes.byref(grid))
    torch.cuda.synchronize()
print("rc", rc, "grid", grid.value)
