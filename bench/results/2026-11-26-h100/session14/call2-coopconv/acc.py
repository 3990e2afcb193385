import json, os, sys, numpy as np
R = "/tmp/models/resnet50.onnx"; G = os.environ["G"]
x = np.random.default_rng(1).standard_normal((32, 3, 224, 224), dtype=np.float32)
if sys.argv[1] == "ref":
    import onnxruntime as ort
    np.save(G + "/ref.npy", ort.InferenceSession(R, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0])
    sys.exit(0)
import mpsrt.onnx
ref = np.load(G + "/ref.npy"); scale = float(np.abs(ref).max())
for side in sys.argv[1:]:
    os.environ["MPSRT_COOP_CONV_SGBAR"] = "1" if side == "sg" else "0"  # read per conv call
    os.environ["MPSRT_COOP_CONV_OC64"] = "1" if side == "oc64" else "0"
    y = mpsrt.onnx.InferenceSession(R, place="gpu", precision="f16").run(None, {"x": x})[0].astype(np.float32)
    print(json.dumps({"side": side, "max_err_over_max_ref": float(np.abs(y - ref).max()) / scale,
                      "mean_abs_err": float(np.abs(y - ref).mean()), "ref_max": scale,
                      "top1_agree": float((y.argmax(1) == ref.argmax(1)).mean()),
                      "finite": bool(np.isfinite(y).all())}), flush=True)
