"""mpsrt as an ONNX backend (`onnx.backend.base.Backend`), so that ONNX's own conformance runner
`onnx.backend.test.BackendTest` — and any code written against the backend API — can drive it.

Devices follow ONNX's naming: `'CPU'` runs on the CPU; `'CUDA'` (the name the ONNX test runner
uses for "the GPU"), `'MPS'` and `'GPU'` run on the mpsrt GPU, each with an optional `':N'`.

>>> import onnx, numpy as np
>>> from mpsrt.onnx import backend
>>> rep = backend.prepare(onnx.load("model.onnx"), device="MPS")     # doctest: +SKIP
>>> (y,) = rep.run([np.ones((2, 3), np.float32)])                   # doctest: +SKIP
>>> backend.run_model(model, [x], device="CPU")                      # doctest: +SKIP

This module imports `onnx`; `import mpsrt` and `mpsrt.onnx.InferenceSession` do not need it.
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence, Tuple, Union

import numpy as np
import onnx
from onnx.backend.base import Backend, BackendRep, namedtupledict

from .. import mps
from . import InferenceSession

__all__ = ["MpsrtBackend", "MpsrtBackendRep", "prepare", "run_model", "supports_device",
           "place_of"]

_GPU_NAMES = {"CUDA", "MPS", "GPU"}


def place_of(device: str) -> str:
    """ONNX device string → mpsrt place: `'CPU'` → `'cpu'`, `'CUDA:1'` / `'MPS:1'` → `'mps:1'`."""
    kind, _, index = str(device).upper().partition(":")
    if kind == "CPU":
        return "cpu"
    if kind in _GPU_NAMES:
        return f"mps:{index}" if index else "mps"
    raise ValueError(f"[onnx] unknown device {device!r}: expected CPU, MPS, GPU or CUDA (':N')")


class MpsrtBackendRep(BackendRep):
    """A prepared model: `run(inputs)` takes a list of arrays (in graph input order) or a dict
    by name, and returns the outputs as a named tuple (index or name access)."""

    def __init__(self, session: InferenceSession) -> None:
        self.session = session
        self._input_names = [i.name for i in session.get_inputs()]
        self._output_names = [o.name for o in session.get_outputs()]

    def run(self, inputs: Union[Sequence[Any], Mapping[str, Any], Any], **kwargs: Any
            ) -> Tuple[np.ndarray, ...]:
        del kwargs
        if isinstance(inputs, Mapping):
            feeds = dict(inputs)
        else:
            if isinstance(inputs, np.ndarray):
                inputs = [inputs]
            inputs = list(inputs)
            if len(inputs) != len(self._input_names):
                raise ValueError(f"[onnx] the model takes {len(self._input_names)} input(s) "
                                 f"{self._input_names}, given {len(inputs)}")
            feeds = dict(zip(self._input_names, inputs))
        outs = self.session.run(None, feeds)
        return namedtupledict("Outputs", self._output_names)(*outs)


class MpsrtBackend(Backend):
    """The ONNX backend: `prepare` imports and compiles once, `run_model` is prepare + run."""

    @classmethod
    def prepare(cls, model: Any, device: str = "CPU", **kwargs: Any) -> MpsrtBackendRep:
        """Checks the model (ONNX checker, as reference backends do) and loads it on `device`.
        Extra keyword arguments (the test runner passes `rtol`/`atol`) are ignored."""
        if isinstance(model, onnx.ModelProto):
            super().prepare(model, device, **kwargs)
        return MpsrtBackendRep(InferenceSession(model, place=place_of(device)))

    @classmethod
    def run_model(cls, model: Any, inputs: Any, device: str = "CPU", **kwargs: Any
                  ) -> Tuple[np.ndarray, ...]:
        return cls.prepare(model, device, **kwargs).run(inputs)

    @classmethod
    def supports_device(cls, device: str) -> bool:
        """CPU always; a GPU device name when mpsrt sees a GPU adapter."""
        try:
            place = place_of(device)
        except ValueError:
            return False
        return place == "cpu" or mps.is_available()


prepare = MpsrtBackend.prepare
run_model = MpsrtBackend.run_model
run_node = MpsrtBackend.run_node
supports_device = MpsrtBackend.supports_device
