"""The Paddle MPS seed README's usage examples, with `paddle` replaced by `mpsrt`."""
import numpy as np

import mpsrt
from conftest import need_gpu


def test_basic_usage():
    need_gpu()
    # Check if MPS is available
    if mpsrt.is_compiled_with_mps() and mpsrt.mps.is_available():
        print(f"MPS available! Device count: {mpsrt.mps.device_count()}")

        # Set device
        mpsrt.mps.set_device(0)

        # Create tensors on MPS
        x = mpsrt.randn([2, 3], dtype='float32', place='mps')
        y = mpsrt.randn([2, 3], dtype='float32', place='mps')

        # Perform operations
        z = x + y
        w = mpsrt.exp(x)

        # Convert back to CPU for NumPy conversion
        result = z.numpy()
        print(result)
        np.testing.assert_allclose(result, x.numpy() + y.numpy(), rtol=1e-6)
        np.testing.assert_allclose(w.numpy(), np.exp(x.numpy()), rtol=1e-5)


def test_device_management():
    need_gpu()
    # Check MPS availability
    print(f"MPS compiled: {mpsrt.is_compiled_with_mps()}")
    print(f"MPS available: {mpsrt.mps.is_available()}")
    print(f"Device count: {mpsrt.mps.device_count()}")

    # Set current device
    mpsrt.mps.set_device(0)

    # Get current device
    current_device = mpsrt.mps.current_device()
    print(f"Current device: {current_device}")

    # Get device properties
    props = mpsrt.mps.get_device_properties()
    print(f"Device name: {mpsrt.mps.get_device_name()}")
    print(f"Total memory: {props.total_memory / (1024**3):.2f} GB")
    assert current_device == 0 and props.total_memory > 0


def test_memory_management():
    need_gpu()
    # Check memory usage
    allocated = mpsrt.mps.memory_allocated()
    reserved = mpsrt.mps.memory_reserved()
    print(f"Allocated: {allocated / (1024**2):.2f} MB")
    print(f"Reserved: {reserved / (1024**2):.2f} MB")

    # Clear cache
    mpsrt.mps.empty_cache()

    # Track peak memory
    max_allocated = mpsrt.mps.max_memory_allocated()
    print(f"Peak allocated: {max_allocated / (1024**2):.2f} MB")

    # Reset peak statistics
    mpsrt.mps.reset_max_memory_allocated()
    assert reserved >= allocated


def test_operator_examples():
    need_gpu()
    mpsrt.mps.set_device(0)

    # Elementwise operations
    x = mpsrt.to_tensor([1.0, 2.0, 3.0], place='mps')
    y = mpsrt.to_tensor([4.0, 5.0, 6.0], place='mps')

    # Addition
    z = mpsrt.add(x, y)  # or z = x + y

    # Multiplication
    w = mpsrt.multiply(x, y)  # or w = x * y

    # Unary operations
    abs_x = mpsrt.abs(x)
    exp_x = mpsrt.exp(x)
    log_x = mpsrt.log(x + 1.0)  # Add 1 to avoid log(0)
    sqrt_x = mpsrt.sqrt(x)

    # Activation functions
    relu_x = mpsrt.nn.functional.relu(x)
    sigmoid_x = mpsrt.nn.functional.sigmoid(x)

    a = np.array([1.0, 2.0, 3.0], np.float32)
    b = np.array([4.0, 5.0, 6.0], np.float32)
    for got, want in [(z, a + b), (x + y, a + b), (w, a * b), (x * y, a * b), (abs_x, a),
                      (exp_x, np.exp(a)), (log_x, np.log(a + 1)), (sqrt_x, np.sqrt(a)),
                      (relu_x, a), (sigmoid_x, 1 / (1 + np.exp(-a))),
                      (mpsrt.subtract(x, y), a - b), (mpsrt.divide(x, y), a / b)]:
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-5)
