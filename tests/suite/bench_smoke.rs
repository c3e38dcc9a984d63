//! A smoke run of the end-to-end benchmark (`cargo bench --bench e2e`, see
//! BENCHMARKS.md): every measurement, a few iterations each, against the
//! debug binary, so the benchmark cannot rot. No timing budget is asserted
//! (shared machines are noisy): only that every measurement produced numbers
//! and that the correctness checks hold (every delta relayed, every cancel
//! answered `cancelled`, no process of a cancelled shell command left alive,
//! a byte-stable request prefix).

// The measurements are shared with the benchmark binary; the table and JSON
// rendering it also has are not used here.
#[allow(dead_code)]
#[path = "../../benches/e2e/measure.rs"]
mod measure;

/// The stress tier: seconds of release-style workloads against the debug
/// binary. `.ci/run` runs it as a step of its own.
#[test]
#[ignore = "stress tier: .ci/run runs it with `cargo test -- --ignored`"]
fn every_benchmark_measurement_runs() {
    let options = measure::Options::smoke(env!("CARGO_BIN_EXE_lathe").into());
    let started = std::time::Instant::now();
    // Shown only when the test fails: where the time went.
    let report =
        measure::run_all(&options, &mut |section| eprintln!("{:>6.2} s: {section}", started.elapsed().as_secs_f64()));
    eprintln!("{:>6.2} s: done", started.elapsed().as_secs_f64());
    for section in measure::SECTIONS {
        assert!(
            report.figures.iter().any(|figure| figure.key.starts_with(&format!("{section}."))),
            "no figure for {section}:\n{}",
            report.table()
        );
    }
    for figure in &report.figures {
        let summary = figure.summary();
        assert!(
            summary.runs > 0 && summary.median.is_finite() && summary.worst.is_finite(),
            "{} has no samples:\n{}",
            figure.key,
            report.table()
        );
    }
    for check in &report.checks {
        assert!(check.ok, "check {} failed: {}\n{}", check.key, check.detail, report.table());
    }
}
