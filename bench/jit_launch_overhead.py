"""Host cost of one launch: the tutorial's `add_kernel` launched into a preallocated output,
mpsrt's built-in `x + y`, and the tutorial's `add()` (allocates its output), 1M f32 elements,
1000 back-to-back calls after 50 warm-up calls; then a cProfile of the jit launch path.
Usage (repo root, mpsrt importable): python3 bench/jit_launch_overhead.py"""
import sys, types, time, importlib.util, cProfile, pstats
import mpsrt
sys.modules["torch"] = types.SimpleNamespace(Tensor=mpsrt.Tensor, empty_like=mpsrt.empty_like)
spec = importlib.util.spec_from_file_location("va", __import__("pathlib").Path(__file__).resolve().parents[1] / "crates/mpsrt-jit/tests/kernels/01_vector_add.py")
va = importlib.util.module_from_spec(spec); spec.loader.exec_module(va)
n = 1 << 20
x = mpsrt.rand([n], "float32", "gpu"); y = mpsrt.rand([n], "float32", "gpu"); out = mpsrt.empty_like(x)
k = va.add_kernel
def launch(): k[(n // 1024,)](x, y, out, n, BLOCK_SIZE=1024)
for f, name in ((launch, "jit launch"), (lambda: x + y, "builtin"), (lambda: va.add(x, y), "tutorial add")):
    for _ in range(50): f()
    mpsrt.mps.synchronize()
    t0 = time.perf_counter()
    for _ in range(1000): f()
    t1 = time.perf_counter(); mpsrt.mps.synchronize(); t2 = time.perf_counter()
    print(name, round((t1 - t0) / 1000 * 1e6, 1), "us host per call;", round((t2 - t0) / 1000 * 1e6, 1), "us incl. sync")
cProfile.run("for _ in range(1000): launch()", "/tmp/jit_launch.prof")
pstats.Stats("/tmp/jit_launch.prof").sort_stats("tottime").print_stats(6)
