//! What the command sandbox costs at start-up (issues 14 and 25): `cargo
//! bench --bench sandbox [-- RUNS]`.
//!
//! Starts `true` through the release `lathe` binary's trampoline the way
//! lathe starts a shell command (`lathe sandbox-exec --parent <pid> -- true`),
//! without and with the sandbox (the policy of a session with one root that
//! is a git repository: `--sandbox --root <dir> --write <temp> --home
//! <HOME>`, with the network on and off), and, for scale, `true` alone.
//! With `LATHE_BENCH_BASELINE=<path to another lathe>` (say, main's release
//! binary), that binary's trampoline is timed in the same rotation (both
//! binaries from copies in a temporary directory, made alike), with the
//! sandbox flags it knows (`--sandbox --write <dir> --write <temp>
//! [--no-network]`), so that before and after are measured on the same
//! machine at the same moment. The branch's sandboxed variants but one
//! take the read allow-list as lathe hands it to the trampolines it starts
//! (worked out once per session and checked before each start: the check
//! is timed with the start, its CPU time added to the start's); the one
//! left has the trampoline read it itself, as an editor's terminal does. Each run is a spawn and a wait, timed on the
//! wall clock, and the CPU time its processes used is taken from the
//! kernel's count for waited-for children (less sensitive to a loaded
//! machine than the wall clock); the variants take turns in a rotating order so that a change
//! in the machine's load falls on all of them alike. With the argument
//! `parts` (`cargo bench --bench sandbox -- parts`), the default sandbox is
//! also timed with one part left out at a time (the mount namespace, the
//! seccomp filter, the read allow-list around `$HOME`), so that what each
//! costs is its variant's distance from the whole. Prints the median and
//! quartiles of each (200 runs by default, after 5 unrecorded ones), the
//! median CPU time, and the load average before and after. BENCHMARKS.md has the method and the
//! figures.

// A benchmark fails loudly, and printing its table on stdout is its job.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// A variant: the program, its arguments before `-- true`, and the policy
/// whose `launch_args` lathe adds before each start, if it does.
type Variant = (PathBuf, Vec<OsString>, Option<lathe::platform::sandbox::SandboxPolicy>);

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}

/// A git directory as `git init` leaves it, enough for the sandbox to
/// protect its hooks, config and info.
fn git_repository(root: &std::path::Path) {
    for dir in [".git/hooks", ".git/info", ".git/objects", ".git/refs/heads"] {
        std::fs::create_dir_all(root.join(dir)).unwrap();
    }
    std::fs::write(root.join(".git/HEAD"), "ref: refs/heads/main\n").unwrap();
    std::fs::write(root.join(".git/config"), "[core]\n\trepositoryformatversion = 0\n").unwrap();
}

fn main() {
    if cfg!(windows) {
        eprintln!("skipped: the sandbox bench: Windows has no command sandbox and no `sandbox-exec` trampoline");
        return;
    }
    let runs: usize = std::env::args().skip(1).find_map(|arg| arg.parse().ok()).unwrap_or(200);
    let parts = std::env::args().skip(1).any(|arg| arg == "parts");
    // Both binaries are timed from copies made the same way: an executable
    // as the linker wrote it starts slower than a copy of the same bytes (here
    // 0.3 to 0.5 ms of CPU more per start, with 15 more page faults), which
    // would be charged to whichever binary was not copied. Copies are what
    // users run (an install copies, an archive is written whole).
    let copies = tempfile::tempdir().unwrap();
    let copy = |from: &std::path::Path, name: &str| {
        let to = copies.path().join(format!("{name}{}", std::env::consts::EXE_SUFFIX));
        std::fs::copy(from, &to).unwrap();
        to
    };
    let lathe = copy(std::path::Path::new(env!("CARGO_BIN_EXE_lathe")), "lathe");
    let baseline =
        std::env::var_os("LATHE_BENCH_BASELINE").map(|path| copy(std::path::Path::new(&path), "lathe-before"));
    let root = tempfile::tempdir().unwrap();
    git_repository(root.path());
    let parent = std::process::id().to_string();
    // lathe's policy for the session, whose read allow-list lathe works out
    // once and hands each trampoline it starts (`launch_args`, see
    // src/platform/sandbox/grants.rs): a variant with it calls
    // `launch_args` before each start as lathe does, timed with the start.
    let home = std::env::var("HOME").unwrap_or_else(|_| "/nonexistent".to_owned());
    let session_policy = lathe::platform::sandbox::SandboxPolicy::new(Vec::new(), false)
        .denying_reads(Some(PathBuf::from(&home)), Vec::new());
    let trampoline = |binary: &PathBuf, sandbox: &[&str]| -> Variant {
        let mut args: Vec<OsString> = vec!["sandbox-exec".into(), "--parent".into(), parent.clone().into()];
        args.extend(sandbox.iter().map(OsString::from));
        (binary.clone(), args, None)
    };
    let launched = |binary: &PathBuf, sandbox: &[&str]| -> Variant {
        let (binary, args, _) = trampoline(binary, sandbox);
        (binary, args, Some(session_policy.clone()))
    };
    let root_arg = root.path().to_str().unwrap();
    let temp = std::env::temp_dir();
    let temp_arg = temp.to_str().unwrap();
    // As lathe runs them: with its keeper of mount namespaces (see src/platform/sandbox/keeper.rs).
    let keeper = lathe::platform::sandbox::namespace_keeper();
    let unkept = ["--sandbox", "--root", root_arg, "--write", temp_arg, "--home", &home, "--no-network"];
    let mut session: Vec<&str> = unkept[..unkept.len() - 1].to_vec();
    if let Some(keeper) = &keeper {
        session.extend(["--ns-keeper", keeper]);
    }
    let offline: Vec<&str> = session.iter().copied().chain(["--no-network"]).collect();
    let mut variants: Vec<(String, Variant)> = vec![
        ("true alone".into(), (PathBuf::from("true"), Vec::new(), None)),
        ("trampoline, no sandbox".into(), trampoline(&lathe, &[])),
        ("trampoline, sandbox, network on".into(), launched(&lathe, &session)),
        ("trampoline, sandbox, network off (the default)".into(), launched(&lathe, &offline)),
    ];
    variants.push(("trampoline, sandbox, network off, no keeper".into(), launched(&lathe, &unkept)));
    // As an editor's terminal starts it: the trampoline reads the allow-list.
    variants.push((
        "trampoline, sandbox, network off, the allow-list read by the trampoline".into(),
        trampoline(&lathe, &offline),
    ));
    if parts {
        // The default (network off, with the keeper) less one part each.
        let less = |part: &'static str| -> Vec<&str> { offline.iter().copied().chain(["--without", part]).collect() };
        let no_home: Vec<&str> = {
            let at = offline.iter().position(|arg| *arg == "--home").unwrap();
            offline[..at].iter().chain(&offline[at + 2..]).copied().collect()
        };
        for (name, args) in
            [("without the mount namespace", less("namespaces")), ("without the seccomp filter", less("seccomp"))]
        {
            variants.push((format!("trampoline, sandbox, network off, {name}"), launched(&lathe, &args)));
        }
        variants.push((
            "trampoline, sandbox, network off, without the read allow-list (no --home)".into(),
            trampoline(&lathe, &no_home),
        ));
    }
    if let Some(baseline) = &baseline {
        let old = ["--sandbox", "--write", root_arg, "--write", temp_arg];
        let old_offline: Vec<&str> = old.iter().copied().chain(["--no-network"]).collect();
        variants.push(("baseline: trampoline, no sandbox".into(), trampoline(baseline, &[])));
        variants.push(("baseline: trampoline, sandbox".into(), trampoline(baseline, &old)));
        variants.push(("baseline: trampoline, sandbox, no network".into(), trampoline(baseline, &old_offline)));
    }
    // Each run's wall-clock time and the CPU time (user and system) of the
    // processes it started: the CPU time says what the start costs even
    // when the machine is loaded, where the wall clock mostly measures the
    // wait for a core.
    let time = |(program, args, policy): &Variant| {
        let cpu_before = children_cpu();
        let started = Instant::now();
        // What lathe does for the command before it starts it, on its own CPU.
        let own_before = own_cpu();
        let launch_args = policy.as_ref().map(|policy| policy.launch_args()).unwrap_or_default();
        let own = own_cpu().saturating_sub(own_before);
        let status = Command::new(program)
            .args(args)
            .args(launch_args)
            .args(["--", "true"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .status()
            .unwrap();
        let elapsed = started.elapsed();
        assert!(status.success(), "{program:?} {args:?}: {status}");
        (elapsed, children_cpu().saturating_sub(cpu_before) + own)
    };
    let findings = lathe::platform::sandbox::probe(&lathe);
    eprintln!("sandbox: {}", findings.status(false).detail);
    let load_before = loadavg();
    let mut walls: Vec<Vec<Duration>> = vec![Vec::with_capacity(runs); variants.len()];
    let mut cpus: Vec<Vec<Duration>> = vec![Vec::with_capacity(runs); variants.len()];
    for round in 0..runs + 5 {
        for offset in 0..variants.len() {
            let index = (round + offset) % variants.len();
            let (wall, cpu) = time(&variants[index].1);
            if round >= 5 {
                walls[index].push(wall);
                cpus[index].push(cpu);
            }
        }
    }
    let load_after = loadavg();
    let micros = |d: Duration| d.as_secs_f64() * 1e6;
    let quantile = |sorted: &[Duration], q: f64| sorted[((sorted.len() - 1) as f64 * q).round() as usize];
    let median_of = |all: &mut Vec<Vec<Duration>>| -> Vec<f64> {
        all.iter_mut()
            .map(|s| {
                s.sort();
                micros(quantile(s, 0.5))
            })
            .collect()
    };
    let medians = median_of(&mut walls);
    let cpu_medians = median_of(&mut cpus);
    // Each sandboxed variant is compared with the trampoline of its own
    // binary, and with the baseline's sandbox when there is one.
    let position = |wanted: &str| variants.iter().position(|(name, _)| name == wanted);
    let unsandboxed = |name: &str| {
        let prefix = if name.starts_with("baseline: ") { "baseline: " } else { "" };
        position(&format!("{prefix}trampoline, no sandbox"))
    };
    let old_sandbox = position("baseline: trampoline, sandbox, no network");
    println!(
        "| start-up of `true` ({runs} runs each) | median µs | p25 µs | p75 µs | median added to the trampoline | \
         CPU median µs | CPU added to the baseline's sandbox |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|");
    for (index, (name, _)) in variants.iter().enumerate() {
        let sandboxed = name.contains(", sandbox");
        let added = match unsandboxed(name) {
            Some(base) if sandboxed => format!("{:+.0} µs", medians[index] - medians[base]),
            _ => String::new(),
        };
        let cpu_added = match old_sandbox {
            Some(old) if sandboxed && !name.starts_with("baseline: ") => {
                format!("{:+.0} µs", cpu_medians[index] - cpu_medians[old])
            }
            _ => String::new(),
        };
        println!(
            "| {name} | {:.0} | {:.0} | {:.0} | {added} | {:.0} | {cpu_added} |",
            medians[index],
            micros(quantile(&walls[index], 0.25)),
            micros(quantile(&walls[index], 0.75)),
            cpu_medians[index],
        );
    }
    println!("load average before: {load_before}; after: {load_after}; {} cores", num_cores());
}

/// The CPU time this thread has used so far.
#[cfg(unix)]
fn own_cpu() -> Duration {
    let now = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    Duration::new(now.tv_sec as u64, now.tv_nsec as u32)
}

#[cfg(not(unix))]
fn own_cpu() -> Duration {
    Duration::ZERO
}

/// The CPU time (user and system) of the children waited for so far.
#[cfg(unix)]
fn children_cpu() -> Duration {
    use nix::sys::resource::{UsageWho, getrusage};
    let usage = getrusage(UsageWho::RUSAGE_CHILDREN).unwrap();
    let time = |t: nix::sys::time::TimeVal| Duration::new(t.tv_sec() as u64, t.tv_usec() as u32 * 1000);
    time(usage.user_time()) + time(usage.system_time())
}

/// Windows keeps no such count; it has no command sandbox either, and
/// `main` stops before measuring.
#[cfg(not(unix))]
fn children_cpu() -> Duration {
    Duration::ZERO
}

fn num_cores() -> usize {
    std::thread::available_parallelism().map(usize::from).unwrap_or(1)
}
