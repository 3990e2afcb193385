//! `mpsrt info`: what this machine offers mpsrt.

use mpsrt::device;

#[derive(clap::Args)]
pub struct InfoArgs {
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
}

fn gib(b: u64) -> String {
    format!("{:.2} GiB", b as f64 / (1u64 << 30) as f64)
}

pub fn run(args: InfoArgs) -> mpsrt::Result<()> {
    let n = device::device_count();
    let mut devs = Vec::new();
    for i in 0..n {
        let d = device::gpu_device(i)?;
        devs.push((d.properties().clone(), d.memory_stats()));
    }
    if args.json {
        let list: Vec<_> = devs
            .iter()
            .map(|(p, m)| {
                serde_json::json!({
                    "index": p.index, "name": p.name, "backend": p.backend, "device_type": p.device_type,
                    "driver": p.driver, "total_memory": p.total_memory, "total_memory_source": p.total_memory_source,
                    "unified_memory": p.unified_memory, "shader_f16": p.shader_f16, "subgroups": p.subgroups,
                    "subgroup_size": [p.subgroup_min_size, p.subgroup_max_size],
                    "cooperative_matrix": p.coop_matrix.iter().map(|c| serde_json::json!({
                        "m": c.m, "n": c.n, "k": c.k, "ab": c.ab.to_string(), "cr": c.cr.to_string(),
                    })).collect::<Vec<_>>(),
                    "limits": {
                        "max_buffer_size": p.max_buffer_size,
                        "max_storage_buffer_binding_size": p.max_storage_buffer_binding_size,
                        "max_storage_buffers_per_shader_stage": p.max_storage_buffers_per_shader_stage,
                        "max_compute_workgroups_per_dimension": p.max_compute_workgroups_per_dimension,
                        "max_compute_invocations_per_workgroup": p.max_compute_invocations_per_workgroup,
                        "max_compute_workgroup_storage_size": p.max_compute_workgroup_storage_size,
                    },
                    "memory": {"allocated": m.allocated, "reserved": m.reserved, "limit": m.limit},
                })
            })
            .collect();
        println!(
            "{}",
            serde_json::json!({"version": env!("CARGO_PKG_VERSION"), "gpu_devices": list, "default_place": device::default_place().to_string()})
        );
        return Ok(());
    }
    println!("mpsrt {}", env!("CARGO_PKG_VERSION"));
    println!("default place: {}", device::default_place());
    if n == 0 {
        println!(
            "GPU: none available ({})",
            mpsrt::zeros(&[1], mpsrt::DType::F32, mpsrt::Place::Gpu(0))
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default()
        );
        return Ok(());
    }
    for (p, m) in &devs {
        println!("\nmps:{}  {}", p.index, p.display_name());
        println!("  type            {} (driver: {})", p.device_type, p.driver);
        println!(
            "  memory          {} ({}), limit {}",
            gib(p.total_memory),
            p.total_memory_source,
            gib(m.limit)
        );
        println!("  unified memory  {}", p.unified_memory);
        println!(
            "  features        shader-f16={} subgroups={} (size {}..{})",
            p.shader_f16, p.subgroups, p.subgroup_min_size, p.subgroup_max_size
        );
        let coop: Vec<String> = p.coop_matrix.iter().map(|c| c.to_string()).collect();
        println!(
            "  matrix units    {}",
            if coop.is_empty() { "none".to_string() } else { coop.join(", ") }
        );
        println!(
            "  max buffer      {} (storage binding {})",
            gib(p.max_buffer_size),
            gib(p.max_storage_buffer_binding_size)
        );
        println!(
            "  workgroups      {} per dim, {} invocations, {} KiB shared",
            p.max_compute_workgroups_per_dimension,
            p.max_compute_invocations_per_workgroup,
            p.max_compute_workgroup_storage_size / 1024
        );
        println!("  storage buffers {} per stage", p.max_storage_buffers_per_shader_stage);
        println!("  allocator       {} allocated, {} reserved", gib(m.allocated), gib(m.reserved));
    }
    Ok(())
}
