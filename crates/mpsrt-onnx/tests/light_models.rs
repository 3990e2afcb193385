//! The 9 ONNX "light" models shipped in the `onnx` wheel: each must import with no unsupported
//! ops, and shape inference + planning must reproduce the reference output shapes.
//!
//! The data is located through `MPSRT_ONNX_DATA` (the installed `onnx` package directory, i.e.
//! `python -c "import onnx, os; print(os.path.dirname(onnx.__file__))"`, or its
//! `backend/test/data` folder); without it the test asks `python3` and skips with a message when
//! the package is absent.

use mpsrt_graph::{CompiledGraph, PlanOptions, Storage};
use mpsrt_onnx::proto::TensorProto;
use prost::Message;
use std::path::PathBuf;

const MODELS: [&str; 9] = [
    "light_bvlc_alexnet",
    "light_densenet121",
    "light_inception_v1",
    "light_inception_v2",
    "light_resnet50",
    "light_shufflenet",
    "light_squeezenet",
    "light_vgg19",
    "light_zfnet512",
];

fn light_dir() -> Option<PathBuf> {
    let root = match std::env::var_os("MPSRT_ONNX_DATA") {
        Some(d) => PathBuf::from(d),
        None => {
            let py = std::env::var("MPSRT_PYTHON").unwrap_or_else(|_| "python3".into());
            let out = std::process::Command::new(py)
                .args(["-c", "import onnx, os; print(os.path.dirname(onnx.__file__))"])
                .output()
                .ok()?;
            if !out.status.success() {
                return None;
            }
            PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
        }
    };
    [root.join("backend/test/data/light"), root.join("light"), root.clone()]
        .into_iter()
        .find(|d| d.join("light_resnet50.onnx").exists())
}

#[test]
fn light_models_import_and_infer_reference_shapes() {
    let Some(dir) = light_dir() else {
        println!(
            "SKIPPED: onnx light models not found (set MPSRT_ONNX_DATA to the onnx package dir)"
        );
        return;
    };
    for name in MODELS {
        let model = mpsrt_onnx::load_path(dir.join(format!("{name}.onnx")))
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        let reference = std::fs::read(dir.join(format!("{name}_output_0.pb"))).unwrap();
        let reference = TensorProto::decode(reference.as_slice()).unwrap();
        let want: Vec<usize> = reference.dims.iter().map(|&d| d as usize).collect();

        let g = &model.graph;
        assert_eq!(g.inputs.len(), 1, "{name}: one runtime input (initializers are not inputs)");
        let input_shape =
            mpsrt_graph::concrete(g.value(g.inputs[0]).shape.as_ref().unwrap()).unwrap();
        assert_eq!(input_shape, vec![1, 3, 224, 224], "{name}");
        let out = g.value(g.outputs[0]).shape.clone().unwrap();
        assert_eq!(
            mpsrt_graph::concrete(&out),
            Some(want.clone()),
            "{name}: inferred output shape"
        );

        let compiled = CompiledGraph::new(model.graph, PlanOptions::default()).unwrap();
        let plan = compiled
            .plan(std::slice::from_ref(&input_shape))
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(plan.shape(plan.graph.outputs[0]), want, "{name}: planned output shape");
        assert_eq!(plan.storage[plan.graph.outputs[0].0], Storage::Output(0));
        let m = plan.memory;
        assert!(
            m.peak_with_reuse <= m.peak_without_reuse && m.live_peak <= m.peak_with_reuse,
            "{name}: {m:?}"
        );
        let unfused = CompiledGraph::new(
            compiled.graph().clone(),
            PlanOptions {
                fuse_elementwise: false,
                reuse_memory: false,
                fold_batchnorm: false,
                fuse_epilogues: false,
            },
        )
        .unwrap()
        .plan(&[input_shape])
        .unwrap();
        let fused = plan.steps.iter().filter(|s| matches!(s, mpsrt_graph::Step::Fused(_))).count();
        println!(
            "{name}: opset {} nodes {} steps {} (fused groups {fused}, unfused steps {}), epilogues {}, \
             init steps {}, persistent {} KiB, intermediates {} KiB with reuse vs {} KiB without (no fusion)",
            model.opset,
            plan.graph.nodes.len(),
            plan.steps.len(),
            unfused.steps.len(),
            plan.epilogues.len(),
            plan.init_steps.len(),
            m.persistent / 1024,
            m.peak_with_reuse / 1024,
            unfused.memory.peak_without_reuse / 1024,
        );
        println!("  {}", plan.summary());
        // Plans are cached per input shape.
        assert_eq!(compiled.cached_plans(), 1);
    }
}
