//! What the benchmark reads from `/proc`: a process's memory (`VmRSS`,
//! `VmHWM`), its CPU time, and the process table (to find the shell commands
//! an agent started and prove they are gone after a cancel).

use std::path::Path;

/// `/proc` reports CPU time in USER_HZ ticks, which is 100 on every Linux
/// architecture's user-space ABI.
pub const TICKS_PER_SECOND: f64 = 100.0;

/// A field of `/proc/<pid>/status` in KiB, e.g. `VmRSS` or `VmHWM`.
pub fn status_kib(pid: u32, field: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status.lines().find_map(|line| {
        let rest = line.strip_prefix(field)?.strip_prefix(':')?;
        rest.split_whitespace().next()?.parse().ok()
    })
}

/// Current and peak resident set size, in KiB.
#[derive(Debug, Clone, Copy)]
pub struct Rss {
    /// `VmRSS`.
    pub current_kib: u64,
    /// `VmHWM`: the peak since the process started.
    pub peak_kib: u64,
    /// `RssAnon`: the part of `VmRSS` that is the process's own memory (heap,
    /// stacks, relocated data).
    pub anon_kib: u64,
    /// `RssFile`: the part of `VmRSS` mapped from files (the binary's code and
    /// read-only data, shared libraries).
    pub file_kib: u64,
}

/// The memory of `pid` now; panics if the process is gone.
pub fn rss(pid: u32) -> Rss {
    let current_kib = status_kib(pid, "VmRSS").unwrap_or_else(|| panic!("no VmRSS for pid {pid}"));
    let peak_kib = status_kib(pid, "VmHWM").unwrap_or_else(|| panic!("no VmHWM for pid {pid}"));
    let anon_kib = status_kib(pid, "RssAnon").unwrap_or_else(|| panic!("no RssAnon for pid {pid}"));
    let file_kib = status_kib(pid, "RssFile").unwrap_or_else(|| panic!("no RssFile for pid {pid}"));
    Rss { current_kib, peak_kib, anon_kib, file_kib }
}

/// One process as `/proc/<pid>/stat` and `cmdline` describe it.
#[derive(Debug, Clone)]
pub struct Proc {
    /// Its id.
    pub pid: u32,
    /// Its parent.
    pub ppid: u32,
    /// Its process group.
    pub pgid: u32,
    /// `R`, `S`, `Z`, ... (`Z`: exited, not reaped: dead for our purposes).
    pub state: char,
    /// User plus system CPU time, in ticks.
    pub cpu_ticks: u64,
    /// Its argv.
    pub cmdline: Vec<String>,
}

impl Proc {
    /// Whether it still runs (a zombie has exited; in this sandbox PID 1 does
    /// not reap orphans, so killed orphans linger as zombies).
    pub fn alive(&self) -> bool {
        self.state != 'Z' && self.state != 'X'
    }
}

/// Reads one process; `None` if it is gone (or unreadable).
pub fn process(pid: u32) -> Option<Proc> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name is in parentheses and may itself contain spaces or ')'.
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let number = |index: usize| fields.get(index).and_then(|f| f.parse::<u64>().ok());
    let state = fields.first()?.chars().next()?;
    let ppid = u32::try_from(number(1)?).ok()?;
    let pgid = u32::try_from(number(2)?).ok()?;
    let cpu_ticks = number(11)? + number(12)?;
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|raw| {
            raw.split(|&b| b == 0).filter(|a| !a.is_empty()).map(|a| String::from_utf8_lossy(a).into_owned()).collect()
        })
        .unwrap_or_default();
    Some(Proc { pid, ppid, pgid, state, cpu_ticks, cmdline })
}

/// User plus system CPU time of `pid` (all its threads), in seconds.
pub fn cpu_seconds(pid: u32) -> f64 {
    let ticks = process(pid).unwrap_or_else(|| panic!("no /proc/{pid}/stat")).cpu_ticks;
    ticks as f64 / TICKS_PER_SECOND
}

/// Every process on the machine.
pub fn all_processes() -> Vec<Proc> {
    let Ok(entries) = std::fs::read_dir(Path::new("/proc")) else {
        return Vec::new();
    };
    entries
        .filter_map(Result::ok)
        .filter_map(|entry| entry.file_name().to_str().and_then(|name| name.parse::<u32>().ok()))
        .filter_map(process)
        .collect()
}

/// The processes descending from `ancestor` (not including it).
pub fn descendants(ancestor: u32, table: &[Proc]) -> Vec<Proc> {
    let mut found: Vec<Proc> = Vec::new();
    let mut frontier = vec![ancestor];
    while let Some(parent) = frontier.pop() {
        for proc in table.iter().filter(|p| p.ppid == parent) {
            if !found.iter().any(|f| f.pid == proc.pid) {
                frontier.push(proc.pid);
                found.push(proc.clone());
            }
        }
    }
    found
}

/// Live (non-zombie) processes whose process group is one of `groups`.
pub fn alive_in_groups(groups: &[u32]) -> Vec<Proc> {
    all_processes().into_iter().filter(|p| groups.contains(&p.pgid) && p.alive()).collect()
}

/// `nproc`, the CPU model, total memory and the load average, for the record.
pub fn machine() -> serde_json::Value {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let cpu = cpuinfo
        .lines()
        .find_map(|line| {
            line.strip_prefix("model name").map(|rest| rest.trim_start_matches([' ', '\t', ':']).to_owned())
        })
        .unwrap_or_else(|| "unknown".to_owned());
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let mem_kib = meminfo
        .lines()
        .find_map(|line| line.strip_prefix("MemTotal:").and_then(|r| r.split_whitespace().next()?.parse::<u64>().ok()))
        .unwrap_or(0);
    let cores = std::thread::available_parallelism().map_or(0, std::num::NonZero::get);
    serde_json::json!({
        "nproc": cores,
        "cpu": cpu,
        "mem_gib": (mem_kib as f64 / 1024.0 / 1024.0 * 10.0).round() / 10.0,
        "kernel": std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default().trim(),
        "loadavg": loadavg(),
    })
}

/// The 1-, 5- and 15-minute load averages.
pub fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|text| text.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}
