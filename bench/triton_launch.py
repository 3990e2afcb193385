"""Launch overhead of the mpsrt `wgpu` Triton backend: tutorial 01's add kernel on a tiny vector
(1024 f32, one program), launched back to back.

  host_us_per_launch  CPU time of the launching thread per `add_kernel[grid](...)` (no sync in
                      the loop; Triton's own Python launch path + our launcher + recording).
                      Thread CPU time, not wall time: on lavapipe the device's work runs on
                      worker threads of the same CPU and would otherwise be counted.
  launches_per_s      launches per second including the device work (a sync every 100 launches)
  launcher_us         the same for our launcher alone (`kernel.run(...)`, Triton's run() skipped)

Usage: python3 bench/triton_launch.py [--n 20000]   (lavapipe or a real GPU)
"""
import argparse
import json
import os
import time

os.environ.setdefault("TRITON_DEFAULT_BACKEND", "wgpu")

import mpsrt  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402


@triton.jit
def add_kernel(x_ptr, y_ptr, output_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(axis=0)
    block_start = pid * BLOCK_SIZE
    offsets = block_start + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
    tl.store(output_ptr + offsets, x + y, mask=mask)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--n", type=int, default=20000, help="launches per measurement")
    args = p.parse_args()
    from triton.runtime import driver

    from mpsrt.triton_backend import driver as wd
    driver.set_active(wd.WgpuDriver())
    n = 1024
    x, y = mpsrt.rand([n], "float32", "mps"), mpsrt.rand([n], "float32", "mps")
    out = mpsrt.empty_like(x)
    grid = (1,)
    sync = mpsrt.mps.synchronize
    for _ in range(200):
        add_kernel[grid](x, y, out, n, BLOCK_SIZE=1024)
    sync()
    # Host cost per launch: launches recorded back to back; the runtime submits every 64.
    best = float("inf")
    for _ in range(3):
        t0 = time.thread_time()
        for _ in range(args.n):
            add_kernel[grid](x, y, out, n, BLOCK_SIZE=1024)
        t1 = time.thread_time()
        sync()
        best = min(best, (t1 - t0) / args.n)
    # Our launcher alone (Triton's run() excluded): time the launcher object directly.
    kernel = add_kernel.warmup(x, y, out, n, BLOCK_SIZE=1024, grid=grid)
    launcher = kernel.run
    meta = kernel.packed_metadata
    t0 = time.thread_time()
    for _ in range(args.n):
        launcher(1, 1, 1, 0, kernel.function, meta, None, None, None, x, y, out, n, 1024)
    t_launcher = (time.thread_time() - t0) / args.n
    sync()
    t0 = time.perf_counter()
    for k in range(args.n):
        add_kernel[grid](x, y, out, n, BLOCK_SIZE=1024)
        if k % 100 == 99:
            sync()
    sync()
    rate = args.n / (time.perf_counter() - t0)
    print(json.dumps({"device": mpsrt.mps.get_device_name(), "triton": triton.__version__,
                      "host_us_per_launch": round(best * 1e6, 2),
                      "launcher_us": round(t_launcher * 1e6, 2),
                      "launches_per_s": round(rate)}))


if __name__ == "__main__":
    main()
