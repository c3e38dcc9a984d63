//! What tolerance costs (issue 31): `cargo bench --bench edit_match [-- RUNS]`.
//!
//! Times `lathe::tools::edit_match::locate` on a 10,000-line file with a
//! 50-line `old_string`, once per level of the matcher's ladder (the
//! mistake each level recovers; see `edit_match/cases.rs`) and once for an
//! `old_string` no level finds (the whole ladder, then the closest-text
//! hint). Each case is checked to land as it should, then run 100 times by
//! default after 5 unrecorded runs; the cases take turns in a rotating
//! order. Prints the median, p90 and worst time of each in milliseconds and
//! the load average. BENCHMARKS.md has the figures; the budget is 5 ms at
//! the slowest level.

// A benchmark fails loudly, and printing its table on stdout is its job.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

use std::time::{Duration, Instant};

#[path = "edit_match/cases.rs"]
mod cases;

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}

fn main() {
    let runs: usize = std::env::args().skip(1).find_map(|arg| arg.parse().ok()).unwrap_or(100);
    let cases = cases::all();
    for case in &cases {
        let outcome = lathe::tools::edit_match::locate(&case.file, &case.old, &case.new, false);
        assert!((case.expect)(&outcome), "{}: {outcome:?}", case.name);
    }
    let load_before = loadavg();
    let mut samples: Vec<Vec<Duration>> = vec![Vec::with_capacity(runs); cases.len()];
    for round in 0..runs + 5 {
        for offset in 0..cases.len() {
            let index = (round + offset) % cases.len();
            let case = &cases[index];
            let started = Instant::now();
            let outcome = lathe::tools::edit_match::locate(&case.file, &case.old, &case.new, false);
            let elapsed = started.elapsed();
            let _ = std::hint::black_box(outcome);
            if round >= 5 {
                samples[index].push(elapsed);
            }
        }
    }
    let load_after = loadavg();
    let millis = |d: Duration| d.as_secs_f64() * 1e3;
    let quantile = |sorted: &[Duration], q: f64| sorted[((sorted.len() - 1) as f64 * q).round() as usize];
    println!(
        "| matching a {}-line old_string in a {}-line file ({runs} runs each) | median ms | p90 ms | worst ms |",
        cases::OLD_LINES,
        cases::FILE_LINES
    );
    println!("|---|---:|---:|---:|");
    for (case, sorted) in cases.iter().zip(samples.iter_mut()) {
        sorted.sort();
        println!(
            "| {} | {:.3} | {:.3} | {:.3} |",
            case.name,
            millis(quantile(sorted, 0.5)),
            millis(quantile(sorted, 0.9)),
            millis(sorted[sorted.len() - 1])
        );
    }
    println!(
        "load average before: {load_before}; after: {load_after}; {} cores",
        std::thread::available_parallelism().map(usize::from).unwrap_or(1)
    );
}
