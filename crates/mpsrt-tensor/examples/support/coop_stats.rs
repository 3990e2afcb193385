//! The NVIDIA shader compiler's own statistics for cooperative-matrix GEMM kernels (issue 23):
//! registers per thread, and whatever else the driver reports through
//! `VK_KHR_pipeline_executable_properties` (wgpu does not enable that extension, so this
//! opens its own Vulkan device with ash). The kernel is the one the launcher would run for a
//! 4096³ f16 product with the tune given (same WGSL, naga's SPIR-V with wgpu's options for an
//! unchecked module); the driver's internal representations, if it offers any, are written
//! to `COOP_STATS_DIR`. Explains the family's cliffs (4×4 tiles at 186 TFLOP/s, the same with
//! two slabs or K 64 at 27–31: register spills or not).

use ash::vk;
use mpsrt_core::DType;
use mpsrt_kernels::{CoopConfig, CoopMatmulSpec, CoopVariant};
use std::ffi::CStr;

/// The spec the launcher builds for a 4096³ product of contiguous f16 operands; suffixes
/// `@f16out` (the f16 store through the row scratch) and `@bias` (`+ beta·C` with GELU, the
/// epilogue a fused BERT FFN would take).
fn spec_for(variant: &str) -> Result<CoopMatmulSpec, String> {
    let (variant, f16out) = variant.strip_suffix("@f16out").map_or((variant, false), |v| (v, true));
    let (variant, bias) = variant.strip_suffix("@bias").map_or((variant, false), |v| (v, true));
    let cfg = CoopConfig { m: 16, n: 16, k: 16, ab: DType::F16, cr: DType::F32 };
    let base = mpsrt_kernels::plan_coop_matmul(&[cfg], (32, 32), [4096; 3], 0)
        .map_err(|e| format!("{e:?}"))?;
    let v = match variant {
        "default" => mpsrt_kernels::default_coop_variant(16, [4096; 3]),
        t => CoopVariant::parse(t)?,
    };
    let epi = mpsrt_kernels::matmul_coop::CoopEpilogue {
        c: bias,
        act: if bias { mpsrt_kernels::MatmulAct::Gelu } else { mpsrt_kernels::MatmulAct::None },
        ..Default::default()
    };
    let base = CoopMatmulSpec { out_f16: f16out, epi, ..base };
    let mut s = base.with_variant_opts(v, 49152, true);
    (s.vec_a, s.vec_b) = (true, true);
    let t = s.tune;
    s.aligned = s.variant == 3
        && (t.fi || t.dg)
        && 4096 % s.block_m() == 0
        && 4096 % s.block_n() == 0
        && 4096 % t.aligned_k() == 0;
    if s.variant == 3 && !s.aligned {
        (s.tune.fi, s.tune.dg) = (false, false);
    }
    Ok(s)
}

/// SPIR-V words and the descriptor types of bindings 0.. (storage or uniform).
fn spirv(spec: &CoopMatmulSpec) -> Result<(Vec<u32>, Vec<vk::DescriptorType>), String> {
    spirv_of(&spec.render()?, spec.variant == 3 && spec.tune.uc)
}

/// SPIR-V words and binding types of WGSL source `src` (`unchecked`: no bounds checks, as
/// `pipeline_unchecked` compiles it). Also what a `wgsl:<file>` variant reads: a kernel
/// another launcher dumped (`MPSRT_COOP_CONV_DUMP`, the cooperative conv's).
fn spirv_of(src: &str, unchecked: bool) -> Result<(Vec<u32>, Vec<vk::DescriptorType>), String> {
    let module = naga::front::wgsl::parse_str(src).map_err(|e| e.emit_to_string(src))?;
    let info = naga::valid::Validator::new(
        naga::valid::ValidationFlags::all(),
        naga::valid::Capabilities::all(),
    )
    .validate(&module)
    .map_err(|e| format!("{e:?}"))?;
    let policy = if unchecked {
        naga::proc::BoundsCheckPolicy::Unchecked
    } else {
        naga::proc::BoundsCheckPolicy::Restrict
    };
    let opts = naga::back::spv::Options {
        lang_version: (1, 6),
        bounds_check_policies: naga::proc::BoundsCheckPolicies {
            index: policy,
            buffer: policy,
            image_load: policy,
            binding_array: naga::proc::BoundsCheckPolicy::Unchecked,
        },
        force_loop_bounding: !unchecked,
        ..Default::default()
    };
    let words =
        naga::back::spv::write_vec(&module, &info, &opts, None).map_err(|e| format!("{e}"))?;
    let mut binds: Vec<(u32, vk::DescriptorType)> = module
        .global_variables
        .iter()
        .filter_map(|(_, g)| {
            let b = g.binding.as_ref()?;
            let ty = match g.space {
                naga::AddressSpace::Uniform => vk::DescriptorType::UNIFORM_BUFFER,
                _ => vk::DescriptorType::STORAGE_BUFFER,
            };
            Some((b.binding, ty))
        })
        .collect();
    binds.sort_by_key(|b| b.0);
    Ok((words, binds.into_iter().map(|b| b.1).collect()))
}

fn cstr(chars: &[std::ffi::c_char]) -> String {
    // SAFETY: the driver NUL-terminates its fixed-size name/description arrays.
    unsafe { CStr::from_ptr(chars.as_ptr()) }.to_string_lossy().into_owned()
}

/// Print one line per variant: `stats,<variant>,<kernel>,<name>=<value>;...`.
pub fn run(variants: &[String], dir: Option<&str>) -> Result<(), String> {
    fn vkerr(what: &'static str) -> impl Fn(vk::Result) -> String {
        move |e| format!("{what}: {e:?}")
    }
    // SAFETY: plain Vulkan object creation and queries; every handle is created here and
    // destroyed before return (the process exits right after).
    unsafe {
        let entry = ash::Entry::load().map_err(|e| format!("Vulkan loader: {e}"))?;
        let app = vk::ApplicationInfo::default().api_version(vk::API_VERSION_1_3);
        let inst = entry
            .create_instance(&vk::InstanceCreateInfo::default().application_info(&app), None)
            .map_err(vkerr("create_instance"))?;
        // `COOP_STATS_ANY=1`: any device with the statistics extension (a smoke run of this
        // code on lavapipe, which has no cooperative matrices: its pipelines then fail).
        let any = std::env::var("COOP_STATS_ANY").is_ok_and(|v| v == "1");
        let want: &[&CStr] = if any {
            &[ash::khr::pipeline_executable_properties::NAME]
        } else {
            &[ash::khr::pipeline_executable_properties::NAME, ash::khr::cooperative_matrix::NAME]
        };
        let pd = inst
            .enumerate_physical_devices()
            .map_err(vkerr("enumerate_physical_devices"))?
            .into_iter()
            .find(|&pd| {
                let exts = inst.enumerate_device_extension_properties(pd).unwrap_or_default();
                want.iter().all(|w| exts.iter().any(|e| e.extension_name_as_c_str() == Ok(*w)))
            })
            .ok_or("no Vulkan device with pipeline executable properties + cooperative matrix")?;
        let props = inst.get_physical_device_properties(pd);
        println!("# device: {}", cstr(&props.device_name));
        let qf = inst
            .get_physical_device_queue_family_properties(pd)
            .iter()
            .position(|q| q.queue_flags.contains(vk::QueueFlags::COMPUTE))
            .ok_or("no compute queue")? as u32;
        // Enable every feature the device has in these structs (what the kernels need is a
        // subset: f16, 16-bit storage, memory model, cooperative matrices).
        let mut f11 = vk::PhysicalDeviceVulkan11Features::default();
        let mut f12 = vk::PhysicalDeviceVulkan12Features::default();
        let mut f13 = vk::PhysicalDeviceVulkan13Features::default();
        let mut fcm = vk::PhysicalDeviceCooperativeMatrixFeaturesKHR::default();
        let mut fpe = vk::PhysicalDevicePipelineExecutablePropertiesFeaturesKHR::default();
        // Robustness as wgpu asks for it (`COOP_STATS_ROBUST=2`, default: robustBufferAccess
        // and VK_EXT_robustness2 where present), core robustBufferAccess only (1), or none (0):
        // what the driver's bounds checks cost in registers.
        let robust: u32 =
            std::env::var("COOP_STATS_ROBUST").ok().and_then(|v| v.parse().ok()).unwrap_or(2);
        let r2 = ash::ext::robustness2::NAME;
        let has_r2 = robust == 2
            && inst
                .enumerate_device_extension_properties(pd)
                .unwrap_or_default()
                .iter()
                .any(|e| e.extension_name_as_c_str() == Ok(r2));
        let mut fr2 = vk::PhysicalDeviceRobustness2FeaturesEXT::default();
        let mut f2 = vk::PhysicalDeviceFeatures2::default()
            .push_next(&mut f11)
            .push_next(&mut f12)
            .push_next(&mut f13)
            .push_next(&mut fcm)
            .push_next(&mut fpe);
        if has_r2 {
            f2 = f2.push_next(&mut fr2);
        }
        inst.get_physical_device_features2(pd, &mut f2);
        if robust == 0 {
            f2.features.robust_buffer_access = vk::FALSE;
        }
        println!(
            "# robustness: robustBufferAccess {} robustness2 {has_r2}",
            f2.features.robust_buffer_access
        );
        let prio = [1.0f32];
        let qci =
            [vk::DeviceQueueCreateInfo::default().queue_family_index(qf).queue_priorities(&prio)];
        let mut ext_names: Vec<*const std::ffi::c_char> = want.iter().map(|n| n.as_ptr()).collect();
        if has_r2 {
            ext_names.push(r2.as_ptr());
        }
        let dci = vk::DeviceCreateInfo::default()
            .queue_create_infos(&qci)
            .enabled_extension_names(&ext_names)
            .push_next(&mut f2);
        let device = inst.create_device(pd, &dci, None).map_err(vkerr("create_device"))?;
        let pe = ash::khr::pipeline_executable_properties::Device::new(&inst, &device);
        for v in variants {
            let line = (|| -> Result<String, String> {
                let (name, (words, binds)) = match v.strip_prefix("wgsl:") {
                    Some(path) => {
                        let src =
                            std::fs::read_to_string(path).map_err(|e| format!("{path}: {e}"))?;
                        ("wgsl".to_string(), spirv_of(&src, true)?)
                    }
                    None => {
                        let spec = spec_for(v)?;
                        (spec.variant_name(), spirv(&spec)?)
                    }
                };
                let sm = device
                    .create_shader_module(&vk::ShaderModuleCreateInfo::default().code(&words), None)
                    .map_err(vkerr("create_shader_module"))?;
                let lb: Vec<_> = binds
                    .iter()
                    .enumerate()
                    .map(|(i, &t)| {
                        vk::DescriptorSetLayoutBinding::default()
                            .binding(i as u32)
                            .descriptor_type(t)
                            .descriptor_count(1)
                            .stage_flags(vk::ShaderStageFlags::COMPUTE)
                    })
                    .collect();
                let dsl = device
                    .create_descriptor_set_layout(
                        &vk::DescriptorSetLayoutCreateInfo::default().bindings(&lb),
                        None,
                    )
                    .map_err(vkerr("descriptor set layout"))?;
                let sets = [dsl];
                let pl = device
                    .create_pipeline_layout(
                        &vk::PipelineLayoutCreateInfo::default().set_layouts(&sets),
                        None,
                    )
                    .map_err(vkerr("pipeline layout"))?;
                let stage = vk::PipelineShaderStageCreateInfo::default()
                    .stage(vk::ShaderStageFlags::COMPUTE)
                    .module(sm)
                    .name(c"main");
                let ci = [vk::ComputePipelineCreateInfo::default().stage(stage).layout(pl).flags(
                    vk::PipelineCreateFlags::CAPTURE_STATISTICS_KHR
                        | vk::PipelineCreateFlags::CAPTURE_INTERNAL_REPRESENTATIONS_KHR,
                )];
                let p = device
                    .create_compute_pipelines(vk::PipelineCache::null(), &ci, None)
                    .map_err(|(_, e)| format!("create_compute_pipelines: {e:?}"))?[0];
                let mut out = Vec::new();
                let execs = pe
                    .get_pipeline_executable_properties(&vk::PipelineInfoKHR::default().pipeline(p))
                    .map_err(vkerr("executable properties"))?;
                for i in 0..execs.len() as u32 {
                    let ei =
                        vk::PipelineExecutableInfoKHR::default().pipeline(p).executable_index(i);
                    for s in pe.get_pipeline_executable_statistics(&ei).unwrap_or_default() {
                        let val = match s.format {
                            vk::PipelineExecutableStatisticFormatKHR::BOOL32 => {
                                format!("{}", s.value.b32)
                            }
                            vk::PipelineExecutableStatisticFormatKHR::INT64 => {
                                format!("{}", s.value.i64)
                            }
                            vk::PipelineExecutableStatisticFormatKHR::UINT64 => {
                                format!("{}", s.value.u64)
                            }
                            _ => format!("{}", s.value.f64),
                        };
                        out.push(format!("{}={val}", cstr(&s.name)).replace([',', ';'], " "));
                    }
                    if let Some(dir) = dir {
                        dump_reprs(&pe, &device, &ei, dir, v, i);
                    }
                }
                device.destroy_pipeline(p, None);
                device.destroy_pipeline_layout(pl, None);
                device.destroy_descriptor_set_layout(dsl, None);
                device.destroy_shader_module(sm, None);
                Ok(format!("{name},{}", out.join(";")))
            })();
            match line {
                Ok(l) => println!("stats,{v},{l}"),
                Err(e) => println!("stats,{v},error: {}", e.replace([',', '\n'], " ")),
            }
        }
        device.destroy_device(None);
        inst.destroy_instance(None);
    }
    Ok(())
}

/// The driver's internal representations of executable `i` (text ones), one file each.
unsafe fn dump_reprs(
    pe: &ash::khr::pipeline_executable_properties::Device,
    device: &ash::Device,
    ei: &vk::PipelineExecutableInfoKHR,
    dir: &str,
    variant: &str,
    i: u32,
) {
    // SAFETY: valid pipeline and executable index (the caller's); the second query writes at
    // most `n` entries, each into a buffer of the size the first query reported.
    let mut reps =
        unsafe { pe.get_pipeline_executable_internal_representations(ei) }.unwrap_or_default();
    let mut bufs: Vec<Vec<u8>> = reps.iter().map(|r| vec![0u8; r.data_size]).collect();
    for (r, b) in reps.iter_mut().zip(bufs.iter_mut()) {
        r.p_data = b.as_mut_ptr().cast();
    }
    let mut n = reps.len() as u32;
    let fp = pe.fp().get_pipeline_executable_internal_representations_khr;
    if n == 0
        || unsafe { fp(device.handle(), ei, &mut n, reps.as_mut_ptr()) } != vk::Result::SUCCESS
    {
        return;
    }
    for (k, (r, b)) in reps.iter().zip(&bufs).enumerate() {
        let name: String = cstr(&r.name).chars().filter(|c| c.is_ascii_alphanumeric()).collect();
        let safe: String =
            variant.chars().filter(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
        let path =
            format!("{dir}/{safe}.{i}.{k}.{name}.{}", if r.is_text != 0 { "txt" } else { "bin" });
        let _ = std::fs::write(path, b);
    }
}
