"""Tensors larger than one GPU storage binding (lavapipe: 128 MiB): created, combined, reduced
and read back through binding windows (`crates/mpsrt-tensor/src/gpu/window.rs`). The lowered
limit (`MPSRT_MAX_BINDING_BYTES`, read when the device opens) runs in a subprocess."""
import os
import subprocess
import sys
import textwrap

import numpy as np

import mpsrt


def test_ones_past_the_binding_limit(gpu):
    n = 40_000_000  # 152.6 MiB of f32: failed with "[copy] ... exceeds max_storage_buffer_binding_size"
    x = mpsrt.ones([n], place=gpu)
    y = x * 3.0 + x
    assert y.shape == [n] or tuple(y.shape) == (n,)
    tail = y[n - 4:].numpy()
    np.testing.assert_array_equal(tail, np.full(4, 4.0, np.float32))
    assert mpsrt.sum(x).item() == float(n)


def test_ops_against_numpy_with_a_lowered_binding_limit(gpu):
    code = textwrap.dedent(
        """
        import numpy as np, mpsrt
        rng = np.random.default_rng(0)
        a = rng.standard_normal((300, 257)).astype(np.float32)   # 308 KB: 5+ windows of 64 KiB
        b = rng.standard_normal((257,)).astype(np.float32)
        ta, tb = mpsrt.to_tensor(a, place="mps"), mpsrt.to_tensor(b, place="mps")
        def check(name, got, want, tol=1e-5):
            np.testing.assert_allclose(got.numpy(), want, rtol=tol, atol=tol, err_msg=name)
        check("add broadcast", ta + tb, a + b)
        check("exp", mpsrt.exp(ta), np.exp(a))
        check("transpose copy", mpsrt.to_tensor(a[:, :60].copy(), place="mps").T.contiguous(), a[:, :60].T)
        check("sum rows", mpsrt.sum(ta, axis=1), a.sum(1), 1e-4)
        check("sum columns", mpsrt.sum(ta, axis=0), a.sum(0), 1e-4)
        check("sum all", mpsrt.sum(ta), a.sum(), 1e-3)
        e = np.exp(a - a.max(1, keepdims=True))
        check("softmax", mpsrt.nn.functional.softmax(ta, axis=1), e / e.sum(1, keepdims=True))
        check("concat", mpsrt.concat([ta, ta], axis=0), np.concatenate([a, a], 0))
        check("astype f16", ta.astype("float16").astype("float32"), a.astype(np.float16).astype(np.float32))
        print("ok")
        """
    )
    env = dict(os.environ, MPSRT_MAX_BINDING_BYTES="65536")
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=240)
    assert r.returncode == 0 and "ok" in r.stdout, r.stdout + r.stderr
