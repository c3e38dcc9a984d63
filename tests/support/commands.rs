//! The command lines the tests give lathe (shell calls the mock model makes,
//! hooks), spelled for the shell they run in here: POSIX `sh` on Unix,
//! `cmd.exe` on Windows (what wine has; lathe picks it when there is no
//! PowerShell, see `platform::shell`). Each helper is one small action the
//! tests need (print a line, write or append one to a file, fail with a
//! code, sleep, ...), so a test checks the same guarantee on both systems
//! and its own text stays one spelling. Texts passed in are plain words:
//! no quotes or shell specials (`&|<>^%$`) of either language.
//!
//! Also the processes those commands leave: which live, by command line
//! ([`live_processes`]) or pid ([`alive`]), and their CPU time
//! ([`cpu_time`]): `/proc` on Linux, the system's process list on Windows.

use std::path::Path;
use std::time::Duration;

use super::testing::skipped;

/// The line end `echo` writes: `\n` in `sh`, `\r\n` in `cmd.exe`.
pub const NEWLINE: &str = if cfg!(windows) { "\r\n" } else { "\n" };

/// The program that prints a file (`cat`; `cmd.exe`'s `type`), as a
/// permission rule names it.
pub const READ_PROGRAM: &str = if cfg!(windows) { "type" } else { "cat" };

/// The program that deletes a file (`rm`; `cmd.exe`'s `del`).
pub const REMOVE_PROGRAM: &str = if cfg!(windows) { "del" } else { "rm" };

/// `text` and the line end `echo` gives it: what [`write`] leaves in a file.
pub fn line(text: &str) -> String {
    format!("{text}{NEWLINE}")
}

/// `first`, then `second` only if `first` succeeded (`&&` in both).
pub fn and(first: &str, second: &str) -> String {
    format!("{first} && {second}")
}

/// `first`, then `second` whatever `first` did (`;` in `sh`, `&` in `cmd.exe`).
pub fn then(first: &str, second: &str) -> String {
    if cfg!(windows) { format!("{first} & {second}") } else { format!("{first}; {second}") }
}

/// Prints `text` and a line end on stdout.
pub fn print(text: &str) -> String {
    if cfg!(windows) { format!("echo {text}") } else { format!("echo '{text}'") }
}

/// Prints `text` and a line end on stderr.
pub fn print_err(text: &str) -> String {
    if cfg!(windows) { format!(">&2 echo {text}") } else { format!("echo '{text}' >&2") }
}

/// Ends the command with exit code `code`.
pub fn exit(code: u8) -> String {
    format!("exit {code}")
}

/// Reads stdin to its end and drops it (a hook that does not need its input).
pub fn drain_stdin() -> String {
    if cfg!(windows) { r#"find /v "" >nul"#.to_owned() } else { "cat > /dev/null".to_owned() }
}

/// Writes `text` and a line end to `file` (relative to the command's
/// directory, `/`-separated, or absolute), replacing it. (In `cmd.exe` the
/// echo is in parentheses, or the space before a following `&` is written
/// too.)
pub fn write(text: &str, file: &str) -> String {
    if cfg!(windows) { format!(r#">"{}" (echo {text})"#, native(file)) } else { format!("echo '{text}' > '{file}'") }
}

/// Appends `text` and a line end to `file`.
pub fn append(text: &str, file: &str) -> String {
    if cfg!(windows) { format!(r#">>"{}" (echo {text})"#, native(file)) } else { format!("echo '{text}' >> '{file}'") }
}

/// Prints `file`.
pub fn read(file: &str) -> String {
    format!("{READ_PROGRAM} {}", native(file))
}

/// Deletes `file`.
pub fn remove(file: &str) -> String {
    format!("{REMOVE_PROGRAM} {}", native(file))
}

/// Makes `dir` and its missing parents (`cmd.exe`'s `mkdir` does that itself).
pub fn make_dirs(dir: &str) -> String {
    if cfg!(windows) { format!(r#"mkdir "{}""#, native(dir)) } else { format!("mkdir -p '{dir}'") }
}

/// Succeeds when stdin contains `text` (the text is then dropped). On
/// Windows through `find`: wine's `findstr` exits 0 whether it found or not.
pub fn stdin_contains(text: &str) -> String {
    if cfg!(windows) { format!(r#"find "{text}" >nul"#) } else { format!("grep -q '{text}'") }
}

/// `command` if stdin contains `text`, else nothing (exit code 0).
pub fn if_stdin_contains(text: &str, command: &str) -> String {
    if cfg!(windows) {
        format!("{} & if errorlevel 1 (exit 0) else ({command})", stdin_contains(text))
    } else {
        format!("{} || exit 0; {command}", stdin_contains(text))
    }
}

/// `command` unless `path` exists (then the command ends with code 0).
pub fn unless_exists(path: &str, command: &str) -> String {
    if cfg!(windows) {
        format!(r#"if not exist "{}" ({command})"#, native(path))
    } else {
        format!("[ -e '{path}' ] && exit 0; {command}")
    }
}

/// Prints the numbers 1 to `last`, one a line.
pub fn count_to(last: u32) -> String {
    if cfg!(windows) { format!("for /l %i in (1,1,{last}) do @echo %i") } else { format!("seq 1 {last}") }
}

/// Sleeps `seconds` seconds (`cmd.exe` has no sleep: `ping` waits a second
/// between its echoes).
pub fn sleep(seconds: u32) -> String {
    if cfg!(windows) { format!("ping -n {} 127.0.0.1 >nul", seconds + 1) } else { format!("sleep {seconds}") }
}

/// A command that sleeps about forever, and how its process is found
/// ([`live_processes`]): `sleep <tag>.<our pid>` on Unix, `ping -n
/// <tag><our pid> 127.0.0.1` on Windows (`cmd.exe` has no sleep; ping waits
/// a second between echoes), so two test runs never see each other's.
pub struct Sleeper {
    /// The command line.
    pub command: String,
    /// The start of the sleeping process's command line.
    pub process: String,
}

/// A [`Sleeper`] marked with `tag` (digits).
pub fn sleeper(tag: &str) -> Sleeper {
    let pid = std::process::id();
    if cfg!(windows) {
        let process = format!("ping -n {tag}{pid} ");
        Sleeper { command: format!("{process}127.0.0.1 >nul"), process }
    } else {
        let process = format!("sleep {tag}.{pid}");
        Sleeper { command: process.clone(), process }
    }
}

/// `sleeper` twice in one tree: one in the background, one waited for.
pub fn two_sleepers(sleeper: &Sleeper) -> String {
    let command = &sleeper.command;
    if cfg!(windows) { format!("start /b {command} & {command}") } else { format!("{command} & {command}; wait") }
}

/// `path` with the system's separators (`cmd.exe` reads `/` as a switch).
fn native(path: &str) -> String {
    if cfg!(windows) { path.replace('/', "\\") } else { path.to_owned() }
}

/// Pids of the live (not zombie) processes whose command line starts with
/// `prefix` (arguments joined by spaces, with a trailing space).
pub fn live_processes(prefix: &str) -> Vec<u32> {
    sys::live_processes(prefix)
}

/// Whether the process `pid` lives (a zombie does not).
pub fn alive(pid: u32) -> bool {
    sys::alive(pid)
}

/// Whether this Windows program runs under wine (whose system folder has
/// `winecfg.exe`, which Windows' never has); `false` elsewhere.
pub fn under_wine() -> bool {
    cfg!(windows)
        && std::env::var_os("SystemRoot")
            .is_some_and(|root| Path::new(&root).join("system32").join("winecfg.exe").exists())
}

/// Whether another process's CPU time ([`cpu_time`]) is kept up to date
/// here, for the tests that watch lathe's; skipped under wine.
pub fn live_cpu_time() -> bool {
    !under_wine()
        || skipped(
            "another process's CPU time",
            "wine does not keep it live: measured, lathe converting a page for 5 s showed under 0.3 s of CPU \
             time, then 0.5 to 1 s more at once, seconds after the conversion had stopped",
        )
}

/// The CPU time the process `pid` has used (user and system), if it lives.
pub fn cpu_time(pid: u32) -> Option<Duration> {
    sys::cpu_time(pid)
}

#[cfg(unix)]
mod sys {
    use std::time::Duration;

    pub(super) fn live_processes(prefix: &str) -> Vec<u32> {
        let mut found = Vec::new();
        let Ok(entries) = std::fs::read_dir("/proc") else { return found };
        for entry in entries.flatten() {
            let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else { continue };
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
            if cmdline.starts_with(prefix) && alive(pid) {
                found.push(pid);
            }
        }
        found
    }

    /// `/proc/<pid>/stat`'s fields after the command name.
    fn stat(pid: u32) -> Option<Vec<String>> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        Some(stat.rsplit(')').next()?.split_whitespace().map(str::to_owned).collect())
    }

    pub(super) fn alive(pid: u32) -> bool {
        // Zombies are dead; this sandbox's init does not always reap orphans.
        stat(pid).is_some_and(|fields| fields.first().is_some_and(|state| state != "Z"))
    }

    pub(super) fn cpu_time(pid: u32) -> Option<Duration> {
        let fields = stat(pid)?;
        // utime and stime, fields 14 and 15 of the whole line (11 and 12 here).
        let ticks: u64 = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
        // USER_HZ is 100 on every Linux lathe runs on.
        Some(Duration::from_millis(ticks * 10))
    }
}

#[cfg(windows)]
mod sys {
    use std::time::Duration;

    use sysinfo::{Pid, ProcessRefreshKind, ProcessesToUpdate, System, UpdateKind};

    /// In two steps: the processes named like `prefix`'s program (the
    /// system's process list gives names), then the command lines of those
    /// only (each is read from the process's memory, through a handle on it).
    pub(super) fn live_processes(prefix: &str) -> Vec<u32> {
        let program = prefix.split(' ').next().unwrap_or_default();
        let mut system = System::new();
        system.refresh_processes_specifics(ProcessesToUpdate::All, true, ProcessRefreshKind::nothing());
        let named: Vec<Pid> = system
            .processes()
            .iter()
            .filter(|(_, process)| {
                let name = process.name().to_string_lossy();
                name.strip_suffix(".exe").unwrap_or(&name).eq_ignore_ascii_case(program)
            })
            .map(|(pid, _)| *pid)
            .collect();
        if named.is_empty() {
            return Vec::new();
        }
        let what = ProcessRefreshKind::nothing().with_cmd(UpdateKind::Always);
        system.refresh_processes_specifics(ProcessesToUpdate::Some(&named), true, what);
        let mut found = Vec::new();
        for pid in named {
            let Some(process) = system.process(pid) else { continue };
            let mut cmdline = String::new();
            for arg in process.cmd() {
                cmdline.push_str(&arg.to_string_lossy());
                cmdline.push(' ');
            }
            // A program named by its path (`C:\windows\system32\ping.exe`) counts by its name.
            let cmdline = cmdline.trim_start();
            let shown = match cmdline.split_once(' ') {
                Some((program, rest)) => {
                    let name = program.rsplit(['\\', '/']).next().unwrap_or(program);
                    let name = name.strip_suffix(".exe").unwrap_or(name);
                    format!("{name} {rest}")
                }
                None => cmdline.to_owned(),
            };
            if shown.starts_with(prefix) {
                found.push(pid.as_u32());
            }
        }
        found
    }

    pub(super) fn alive(pid: u32) -> bool {
        let pid = Pid::from_u32(pid);
        let mut system = System::new();
        system.refresh_processes_specifics(ProcessesToUpdate::Some(&[pid]), true, ProcessRefreshKind::nothing());
        system.process(pid).is_some()
    }

    pub(super) fn cpu_time(pid: u32) -> Option<Duration> {
        let pid = Pid::from_u32(pid);
        let mut system = System::new();
        system.refresh_processes_specifics(
            ProcessesToUpdate::Some(&[pid]),
            true,
            ProcessRefreshKind::nothing().with_cpu(),
        );
        Some(Duration::from_millis(system.process(pid)?.accumulated_cpu_time()))
    }
}
