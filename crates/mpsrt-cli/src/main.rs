//! The `mpsrt` binary: argument parsing and output only; the work is in the library crates.

mod bench;
mod demo;
mod generate;
mod host_cpu;
mod info;
mod model_cmd;
mod npy;
mod perf;
mod serve;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};
use std::path::PathBuf;

#[derive(Parser)]
#[command(
    name = "mpsrt",
    version,
    about = "GPU deep-learning runtime for Apple Silicon (Metal) and any Vulkan GPU"
)]
struct Cli {
    /// Log level filter (error, warn, info, debug, trace); also RUST_LOG.
    #[arg(long, global = true, default_value = "warn", value_parser = parse_log)]
    log: String,
    #[command(subcommand)]
    command: Command,
}

/// `mpsrt bench MODEL.onnx [...]` or `mpsrt bench elementwise [...]`.
#[derive(clap::Args)]
#[command(args_conflicts_with_subcommands = true)]
struct BenchArgs {
    #[command(subcommand)]
    micro: Option<bench::BenchCommand>,
    /// ONNX model to benchmark end to end.
    model: Option<PathBuf>,
    #[command(flatten)]
    opts: model_cmd::ModelBenchArgs,
}

#[derive(Subcommand)]
enum Command {
    /// Show devices, backends, features, limits and memory.
    Info(info::InfoArgs),
    /// Create tensors on the GPU (CPU if none), run a few ops (add, multiply, exp, log, sqrt,
    /// relu, sigmoid), check each against the CPU reference and print the values and the device.
    Demo(demo::DemoArgs),
    /// Benchmark an ONNX model (latency percentiles), or a micro-benchmark subcommand.
    Bench(BenchArgs),
    /// Run an ONNX model on .npy/.npz inputs and write its outputs to .npz.
    Run(model_cmd::RunArgs),
    /// Greedy text generation with a decoder exported with past key/values (KV cache): the
    /// tokens and tokens/s.
    Generate(generate::GenerateArgs),
    /// Serve a Triton model repository over HTTP/gRPC (Triton-compatible).
    Serve(serve::ServeArgs),
    /// Load-test a running server (like Triton's perf_analyzer): throughput, latency
    /// percentiles, server-side times, and with --direct the server's overhead over the engine.
    Perf(perf::PerfArgs),
}

fn parse() -> Cli {
    let cmd = Cli::command().mut_subcommand("serve", |s| {
        s.mut_arg("model_repository", |a| {
            a.required(false).default_value("examples/model_repository")
        })
    });
    let matches = cmd.get_matches();
    Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit())
}

/// `--log`: a level, or tracing directives (`mpsrt_serve=debug,warn`). A bare word that is
/// not a level (`--log bogus`) would silently mean "everything from a target named bogus".
fn parse_log(s: &str) -> Result<String, String> {
    const LEVELS: [&str; 6] = ["off", "error", "warn", "info", "debug", "trace"];
    let ok = s.split(',').all(|d| {
        let level = d.rsplit('=').next().unwrap_or("").trim().to_ascii_lowercase();
        LEVELS.contains(&level.as_str())
    });
    if ok {
        Ok(s.to_string())
    } else {
        Err(format!("expected a level ({}) or target=level directives", LEVELS.join(", ")))
    }
}

fn main() {
    // Rust ignores SIGPIPE, so `println!` into a closed pipe (`mpsrt bench ... | head`) panicked
    // with "failed printing to stdout". Restore the default action: the process ends quietly
    // when its reader goes away, as `cat` or `grep` do.
    #[cfg(unix)]
    // SAFETY: called first thing in main, before any thread starts; SIG_DFL is a valid action.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    let mut cli = parse();
    let mut filter = std::env::var("RUST_LOG").unwrap_or(cli.log.clone());
    if let Command::Serve(a) = &mut cli.command {
        serve::apply_env(a, &mut filter);
    }
    tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).init();
    let result = match cli.command {
        Command::Info(a) => info::run(a),
        Command::Demo(a) => demo::run(a),
        Command::Bench(BenchArgs { micro: Some(c), .. }) => bench::run(c),
        Command::Bench(BenchArgs { micro: None, model: Some(m), opts }) => {
            model_cmd::bench(m, opts)
        }
        Command::Bench(BenchArgs { micro: None, model: None, .. }) => Err(mpsrt::Error::invalid(
            "bench",
            "give a model (mpsrt bench model.onnx) or a micro-benchmark (mpsrt bench elementwise)",
        )),
        Command::Run(a) => model_cmd::run(a),
        Command::Generate(a) => generate::run(a),
        Command::Serve(a) => serve::run(a),
        Command::Perf(a) => perf::run(a),
    };
    if let Err(e) = result {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}
