//! The end-to-end benchmark of issue 6: `cargo bench --bench e2e`.
//!
//! Spawns the release `lathe` binary against mock model servers on loopback,
//! drives it over stdio, prints a table of figures against the budgets and
//! writes the same figures as JSON to `target/bench/e2e.json`. See
//! BENCHMARKS.md for the method and the latest results.
//!
//! ```text
//! cargo bench --bench e2e                      # everything
//! cargo bench --bench e2e -- relay cancel      # some sections
//! cargo bench --bench e2e -- --smoke           # a few iterations (LATHE_BENCH_SMOKE=1 too)
//! LATHE_BENCH_TREE=/some/tree cargo bench --bench e2e -- search
//! ```
//!
//! The measurements live in `e2e/measure.rs`, which the smoke test
//! (`tests/suite/bench_smoke.rs`) includes too.

// A benchmark harness: failing loudly (unwrap/expect) is the right response to
// a broken setup, and printing the table on stdout is its job.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

// The integration tests' mock model server and scripted ACP client. Not every
// helper is used here.
#[allow(dead_code)]
#[path = "e2e/support.rs"]
mod support;

#[path = "e2e/measure.rs"]
mod measure;

use std::path::PathBuf;

fn main() {
    let mut smoke = std::env::var_os("LATHE_BENCH_SMOKE").is_some_and(|v| !v.is_empty() && v != "0");
    let mut sections = Vec::new();
    for arg in std::env::args().skip(1) {
        match arg.as_str() {
            // `cargo bench` passes `--bench` to every bench target.
            "--bench" => {}
            "--smoke" => smoke = true,
            section if measure::SECTIONS.contains(&section) => sections.push(section.to_owned()),
            other => {
                eprintln!("e2e: unknown argument {other:?}; sections: {}", measure::SECTIONS.join(", "));
                std::process::exit(2);
            }
        }
    }
    // LATHE_BENCH_BIN measures another build (or a wrapper that runs it under a
    // profiler, or the static release binary) in every section but tokens,
    // whose count of the prompt's tokens does not depend on the build.
    let bin =
        std::env::var_os("LATHE_BENCH_BIN").map_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_lathe")), PathBuf::from);
    let mut options = if smoke { measure::Options::smoke(bin) } else { measure::Options::full(bin) };
    options.sections = sections;

    let machine_before = measure::procfs::machine();
    eprintln!("e2e: measuring {} ({})", options.bin.display(), if smoke { "smoke" } else { "full" });
    eprintln!("e2e: machine {machine_before}");
    let started = std::time::Instant::now();
    let report = measure::run_all(&options, &mut |section| {
        eprintln!("e2e: {section} (load average {})", measure::procfs::loadavg());
    });
    let elapsed = started.elapsed();
    let load_after = measure::procfs::loadavg();

    println!("{}", report.table());
    println!(
        "Load average before: {}, after: {load_after}; took {:.0} s.",
        machine_before["loadavg"].as_str().unwrap_or_default(),
        elapsed.as_secs_f64()
    );

    let mut json = report.to_json();
    json["machine"] = machine_before;
    json["loadavg_after"] = load_after.into();
    json["smoke"] = smoke.into();
    json["seconds"] = elapsed.as_secs_f64().into();
    json["binary"] = options.bin.display().to_string().into();
    json["search_tree"] = options.search_tree.display().to_string().into();
    // target/release/deps/e2e-<hash> -> target/bench/e2e.json
    let out_dir = std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent()?.parent()?.parent().map(|target| target.join("bench")))
        .unwrap_or_else(|| PathBuf::from("target/bench"));
    let out = out_dir.join(if smoke { "e2e-smoke.json" } else { "e2e.json" });
    if let Err(err) = std::fs::create_dir_all(&out_dir)
        .and_then(|()| std::fs::write(&out, serde_json::to_string_pretty(&json).unwrap_or_default()))
    {
        eprintln!("e2e: cannot write {}: {err}", out.display());
    } else {
        println!("Wrote {}.", out.display());
    }
    let failed: Vec<&str> = report.checks.iter().filter(|c| !c.ok).map(|c| c.key.as_str()).collect();
    if !failed.is_empty() {
        eprintln!("e2e: failed checks: {}", failed.join(", "));
        std::process::exit(1);
    }
}
