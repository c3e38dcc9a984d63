//! The shell commands run in: which program, how one command line is passed
//! to it, the variables that keep it from waiting for a human, and what the
//! system prompt says about it.
//!
//! Unix: POSIX `sh -c <line>` (not the user's `$SHELL`, so the same command
//! means the same thing on every machine). Windows, detected once per
//! process, in this order: `pwsh` (PowerShell 7), `powershell.exe`
//! (Windows PowerShell 5.1), `cmd.exe` (`%COMSPEC%`). A PowerShell counts
//! only if it answers a version probe with a number: wine's
//! `powershell.exe` is a stub that prints nothing and exits 0, and a shell
//! that silently does nothing would be worse than `cmd.exe`. `[shell]
//! program` in the config overrides the detection; its kind is read from
//! its name (`pwsh`, `powershell`, `cmd`, else a POSIX shell taking `-c`).
//!
//! `cmd.exe` parses its own command line by rules std's argument quoting
//! does not follow, so its line is passed verbatim (`/d /s /c "<line>"`).

use std::sync::OnceLock;
use std::time::Duration;

use super::process::CommandLine;

/// The shell every command line runs under on Unix.
#[cfg_attr(windows, allow(dead_code))]
const POSIX_SHELL: &str = "sh";

/// How long a candidate shell has to answer the version probe.
#[cfg_attr(not(windows), allow(dead_code))]
const PROBE_TIMEOUT: Duration = Duration::from_secs(5);

/// Environment set for commands on top of lathe's, so that nothing waits for
/// a human: pagers print straight through, colour and terminal tricks are
/// off (the model reads plain text), git neither asks for credentials nor
/// opens an editor (`true` accepts the prepared message unchanged).
const POSIX_ENV: [(&str, &str); 8] = [
    ("PAGER", "cat"),
    ("GIT_PAGER", "cat"),
    ("GH_PAGER", "cat"),
    ("MANPAGER", "cat"),
    ("TERM", "dumb"),
    ("NO_COLOR", "1"),
    ("GIT_TERMINAL_PROMPT", "0"),
    ("GIT_EDITOR", "true"),
];

/// The same for Windows shells, which have no `cat` or `true`: empty pagers
/// (git and gh then print straight through).
const WINDOWS_ENV: [(&str, &str); 6] = [
    ("PAGER", ""),
    ("GIT_PAGER", ""),
    ("GH_PAGER", ""),
    ("TERM", "dumb"),
    ("NO_COLOR", "1"),
    ("GIT_TERMINAL_PROMPT", "0"),
];

/// Which language a shell speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShellKind {
    /// `sh` and its kin: `<program> -c <line>`.
    Posix,
    /// PowerShell: `<program> -NoLogo -NoProfile -NonInteractive -Command <line>`.
    PowerShell,
    /// `cmd.exe`: `/d /s /c "<line>"`, verbatim.
    Cmd,
}

/// The shell commands run in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shell {
    program: String,
    kind: ShellKind,
    /// Whether it is the system's default (`sh` on Unix): the prompt says
    /// nothing of it then (the shell tool's description does).
    default: bool,
}

impl Shell {
    /// `[shell] program` when configured (`configured`), else the one
    /// detected on this system (once per process: on Windows that runs the
    /// candidates, so call it off the async runtime, or through
    /// [`Shell::resolve`]).
    pub fn for_config(configured: Option<&str>) -> Shell {
        match configured.map(str::trim).filter(|program| !program.is_empty()) {
            Some(program) => Shell::configured(program),
            None => detected().clone(),
        }
    }

    /// [`Shell::for_config`] without blocking the runtime: the first
    /// detection runs on a blocking thread.
    pub async fn resolve(configured: Option<&str>) -> Shell {
        if configured.is_some() || DETECTED.get().is_some() {
            return Shell::for_config(configured);
        }
        match tokio::task::spawn_blocking(|| detected().clone()).await {
            Ok(shell) => shell,
            Err(_) => Shell::for_config(configured),
        }
    }

    fn configured(program: &str) -> Shell {
        Shell { program: program.to_owned(), kind: kind_of(program), default: false }
    }

    /// The program.
    pub fn program(&self) -> &str {
        &self.program
    }

    /// Its language.
    pub fn kind(&self) -> ShellKind {
        self.kind
    }

    /// How `command` is run in this shell.
    pub fn line(&self, command: &str) -> CommandLine {
        let program = self.program.clone();
        match self.kind {
            ShellKind::Posix => CommandLine::new(program, &["-c".to_owned(), command.to_owned()]),
            ShellKind::PowerShell => {
                let args = ["-NoLogo", "-NoProfile", "-NonInteractive", "-ExecutionPolicy", "Bypass", "-Command"];
                let mut args: Vec<String> = args.iter().map(|arg| (*arg).to_owned()).collect();
                // Its output to a pipe is in the OEM code page otherwise (5.1).
                args.push(format!("[Console]::OutputEncoding=[Text.Encoding]::UTF8; {command}"));
                CommandLine { program, args, verbatim: None }
            }
            ShellKind::Cmd => CommandLine {
                program,
                args: vec!["/d".to_owned(), "/s".to_owned(), "/c".to_owned()],
                // `/s`: cmd strips exactly the outer quotes and runs the rest as typed.
                verbatim: Some(format!("\"{command}\"")),
            },
        }
    }

    /// Variables set for commands on top of lathe's, so that nothing waits
    /// for a human.
    pub fn env(&self) -> &'static [(&'static str, &'static str)] {
        match self.kind {
            ShellKind::Posix if !cfg!(windows) => &POSIX_ENV,
            ShellKind::Posix | ShellKind::PowerShell | ShellKind::Cmd => &WINDOWS_ENV,
        }
    }

    /// What the system prompt says about the shell, when it is not the
    /// default one: "PowerShell 7 (`pwsh`)".
    pub fn for_prompt(&self) -> Option<String> {
        if self.default {
            return None;
        }
        let name = file_name(&self.program);
        Some(match self.kind {
            ShellKind::PowerShell if name.to_ascii_lowercase().starts_with("pwsh") => {
                format!("PowerShell 7 (`{name}`): write PowerShell")
            }
            ShellKind::PowerShell => format!("Windows PowerShell (`{name}`): write PowerShell"),
            ShellKind::Cmd => format!("`{name}`: write cmd syntax; there is no PowerShell on this machine"),
            ShellKind::Posix => format!("`{name} -c`: write POSIX shell syntax"),
        })
    }
}

/// A program's file name, with either separator (a Windows path is read the
/// same on every system).
fn file_name(program: &str) -> &str {
    program.rsplit(['/', '\\']).next().unwrap_or(program)
}

/// A shell's kind from its program's name.
fn kind_of(program: &str) -> ShellKind {
    let name = file_name(program).to_ascii_lowercase();
    match name.strip_suffix(".exe").unwrap_or(&name) {
        "pwsh" | "powershell" => ShellKind::PowerShell,
        "cmd" => ShellKind::Cmd,
        _ => ShellKind::Posix,
    }
}

static DETECTED: OnceLock<Shell> = OnceLock::new();

fn detected() -> &'static Shell {
    DETECTED.get_or_init(|| detect(&answers))
}

/// The shell of this system: `sh` on Unix.
#[cfg(not(windows))]
fn detect(_answers: &dyn Fn(&str, &[&str]) -> Option<String>) -> Shell {
    Shell { program: POSIX_SHELL.to_owned(), kind: ShellKind::Posix, default: true }
}

/// The first PowerShell that answers its version probe with a number, else
/// `cmd.exe` (`%COMSPEC%`).
#[cfg(windows)]
fn detect(answers: &dyn Fn(&str, &[&str]) -> Option<String>) -> Shell {
    windows_choice(answers, std::env::var("COMSPEC").ok())
}

/// The Windows choice, given how each candidate answers (a function, so the
/// rule is tested on every system).
#[cfg_attr(not(any(windows, test)), allow(dead_code))]
fn windows_choice(answers: &dyn Fn(&str, &[&str]) -> Option<String>, comspec: Option<String>) -> Shell {
    let probe = ["-NoLogo", "-NoProfile", "-NonInteractive", "-Command", "$PSVersionTable.PSVersion.Major"];
    for program in ["pwsh", "powershell.exe"] {
        let major = answers(program, &probe);
        if major.is_some_and(|text| !text.trim().is_empty() && text.trim().chars().all(|c| c.is_ascii_digit())) {
            return Shell { program: program.to_owned(), kind: ShellKind::PowerShell, default: false };
        }
        tracing::debug!(program, "not a working PowerShell: no version from it");
    }
    let cmd = comspec.filter(|path| !path.trim().is_empty()).unwrap_or_else(|| "cmd.exe".to_owned());
    Shell { program: cmd, kind: ShellKind::Cmd, default: false }
}

/// What `program args` prints on stdout, if it starts and exits within
/// [`PROBE_TIMEOUT`].
#[cfg_attr(not(windows), allow(dead_code))]
fn answers(program: &str, args: &[&str]) -> Option<String> {
    use std::process::{Command, Stdio};
    let mut child = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .ok()?;
    let deadline = std::time::Instant::now() + PROBE_TIMEOUT;
    loop {
        match child.try_wait() {
            Ok(Some(_)) => break,
            Ok(None) if std::time::Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
            Ok(None) | Err(_) => {
                let _ = child.kill();
                let _ = child.wait();
                return None;
            }
        }
    }
    let mut text = String::new();
    std::io::Read::read_to_string(&mut child.stdout.take()?, &mut text).ok()?;
    Some(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_powershell_that_prints_nothing_is_not_taken() {
        // wine: no pwsh, a powershell.exe stub that prints nothing.
        let wine = |program: &str, _: &[&str]| (program == "powershell.exe").then(String::new);
        let shell = windows_choice(&wine, Some("C:\\windows\\system32\\cmd.exe".to_owned()));
        assert_eq!(shell.kind(), ShellKind::Cmd);
        assert_eq!(shell.program(), "C:\\windows\\system32\\cmd.exe");
        // Text that is not a version does not count either.
        let noise = |program: &str, _: &[&str]| (program == "pwsh").then(|| "usage: ...".to_owned());
        assert_eq!(windows_choice(&noise, None).program(), "cmd.exe");
        // One that answers is taken, the first in order.
        let both = |_: &str, _: &[&str]| Some("7\r\n".to_owned());
        let shell = windows_choice(&both, None);
        assert_eq!((shell.program(), shell.kind()), ("pwsh", ShellKind::PowerShell));
        let only_51 = |program: &str, _: &[&str]| (program == "powershell.exe").then(|| "5\r\n".to_owned());
        assert_eq!(windows_choice(&only_51, None).program(), "powershell.exe");
    }

    #[test]
    fn lines_for_each_kind() {
        let sh = Shell::for_config(Some("sh"));
        assert_eq!(sh.line("echo hi"), CommandLine::new("sh", &["-c".to_owned(), "echo hi".to_owned()]));
        let cmd = Shell::for_config(Some("C:\\Windows\\System32\\CMD.EXE"));
        assert_eq!(cmd.kind(), ShellKind::Cmd);
        let line = cmd.line("echo \"a b\" & dir");
        assert_eq!(line.args, ["/d", "/s", "/c"]);
        assert_eq!(line.verbatim.as_deref(), Some("\"echo \"a b\" & dir\""));
        let pwsh = Shell::for_config(Some("pwsh"));
        assert_eq!(pwsh.kind(), ShellKind::PowerShell);
        assert!(pwsh.line("Get-ChildItem").args.last().unwrap().ends_with("; Get-ChildItem"));
        assert!(pwsh.for_prompt().unwrap().starts_with("PowerShell 7 (`pwsh`)"));
        assert!(Shell::for_config(Some("bash")).for_prompt().unwrap().starts_with("`bash -c`"));
    }

    /// The detected shell on Unix is `sh`, and the prompt says nothing of it.
    #[cfg(unix)]
    #[test]
    fn unix_runs_sh_and_says_nothing() {
        let shell = Shell::for_config(None);
        assert_eq!((shell.program(), shell.kind(), shell.for_prompt()), ("sh", ShellKind::Posix, None));
        assert_eq!(shell.env(), &POSIX_ENV);
    }

    /// Under wine this finds `cmd.exe`: its `powershell.exe` answers nothing.
    #[cfg(windows)]
    #[test]
    fn windows_detection_finds_a_shell_that_answers() {
        let shell = Shell::for_config(None);
        if shell.kind() == ShellKind::PowerShell {
            assert!(answers(shell.program(), &["-NoProfile", "-Command", "1"]).is_some_and(|text| text.trim() == "1"));
        } else {
            assert_eq!(shell.kind(), ShellKind::Cmd);
            let output = answers(shell.program(), &["/d", "/c", "echo ok"]).unwrap();
            assert_eq!(output.trim(), "ok");
        }
    }
}
