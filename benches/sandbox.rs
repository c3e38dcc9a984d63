//! What the command sandbox costs at start-up (issue 14): `cargo bench
//! --bench sandbox [-- RUNS]`.
//!
//! Starts `true` through the release `lathe` binary's trampoline the way
//! lathe starts a shell command (`lathe sandbox-exec --parent <pid> -- true`),
//! without and with the sandbox (`--sandbox --write <dir>... [--no-network]`,
//! the policy of a session with one root), and, for scale, `true` alone. Each
//! run is a spawn and a wait, timed on the wall clock; the variants take
//! turns in a rotating order so that a change in the machine's load falls on
//! all of them alike. Prints the median and quartiles of each (100 runs by
//! default, after 5 unrecorded ones) and the load average before and after.
//! BENCHMARKS.md has the method and the figures.

// A benchmark fails loudly, and printing its table on stdout is its job.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

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
    let lathe = env!("CARGO_BIN_EXE_lathe");
    let root = tempfile::tempdir().unwrap();
    let parent = std::process::id().to_string();
    let trampoline = |sandbox: &[&str]| {
        let mut args: Vec<String> = vec!["sandbox-exec".into(), "--parent".into(), parent.clone()];
        args.extend(sandbox.iter().map(|arg| (*arg).to_owned()));
        args.extend(["--".into(), "true".into()]);
        (PathBuf::from(lathe), args)
    };
    let root_arg = root.path().to_str().unwrap();
    let temp = std::env::temp_dir();
    let temp_arg = temp.to_str().unwrap();
    let variants: Vec<(&str, (PathBuf, Vec<String>))> = vec![
        ("true alone", (PathBuf::from("true"), Vec::new())),
        ("trampoline, no sandbox", trampoline(&[])),
        ("trampoline, sandbox", trampoline(&["--sandbox", "--write", root_arg, "--write", temp_arg])),
        (
            "trampoline, sandbox, no network",
            trampoline(&["--sandbox", "--write", root_arg, "--write", temp_arg, "--no-network"]),
        ),
    ];
    let time = |(program, args): &(PathBuf, Vec<String>)| {
        let started = Instant::now();
        let status = Command::new(program)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .status()
            .unwrap();
        let elapsed = started.elapsed();
        assert!(status.success(), "{program:?} {args:?}: {status}");
        elapsed
    };
    let status = lathe::sandbox::probe(false);
    eprintln!("sandbox: {} ({:?})", status.detail, status.enforcement);
    let load_before = loadavg();
    let mut samples: Vec<Vec<Duration>> = vec![Vec::with_capacity(runs); variants.len()];
    for round in 0..runs + 5 {
        for offset in 0..variants.len() {
            let index = (round + offset) % variants.len();
            let elapsed = time(&variants[index].1);
            if round >= 5 {
                samples[index].push(elapsed);
            }
        }
    }
    let load_after = loadavg();
    let micros = |d: Duration| d.as_secs_f64() * 1e6;
    let quantile = |sorted: &[Duration], q: f64| sorted[((sorted.len() - 1) as f64 * q).round() as usize];
    let medians: Vec<f64> = samples
        .iter_mut()
        .map(|s| {
            s.sort();
            micros(quantile(s, 0.5))
        })
        .collect();
    println!(
        "| start-up of `true` ({runs} runs each) | median µs | p25 µs | p75 µs | median added to the trampoline |"
    );
    println!("|---|---:|---:|---:|---:|");
    for ((name, _), (sorted, median)) in variants.iter().zip(samples.iter().zip(&medians)) {
        let added = if name.starts_with("trampoline, sandbox") {
            format!("{:+.0} µs", median - medians[1])
        } else {
            String::new()
        };
        println!(
            "| {name} | {median:.0} | {:.0} | {:.0} | {added} |",
            micros(quantile(sorted, 0.25)),
            micros(quantile(sorted, 0.75))
        );
    }
    println!("load average before: {load_before}; after: {load_after}; {} cores", num_cores());
}

fn num_cores() -> usize {
    std::thread::available_parallelism().map(usize::from).unwrap_or(1)
}
