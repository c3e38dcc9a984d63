//! Running one hook: `<command>` in the shell commands run in
//! (`crate::platform::shell`: `sh -c` on Unix, PowerShell or `cmd.exe` on
//! Windows), started the way lathe starts every command ([`start`], the one place a hook is started: through the
//! session's launcher, so the trampoline, the scrubbed environment and the
//! death with lathe are the commands'), its input on stdin, its output read
//! (capped), within its timeout. A cancel kills its whole process group at
//! once, and so does a timeout; what it left behind goes when it exits.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWriteExt as _};
use tokio::process::Command;
use tokio_util::sync::CancellationToken;

use super::Hook;
use crate::platform::process::{Ending, Spawned};
use crate::tools::Launcher;

/// Bytes of a hook's stdout, and of its stderr, kept; the rest is read and dropped.
const MAX_OUTPUT: usize = 64 * 1024;

/// How long the output of a hook that exited is still read (a process that
/// left the group may hold a pipe open).
const DRAIN: Duration = Duration::from_millis(500);

/// How long a killed hook is waited for.
const REAP: Duration = Duration::from_secs(2);

/// How a hook's run ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ran {
    /// It exited with this code.
    Exited {
        /// The exit code.
        code: i32,
        /// What it printed on stdout (capped).
        stdout: String,
        /// And on stderr.
        stderr: String,
    },
    /// It ended without an exit code (a signal, not lathe's timeout).
    Killed {
        /// How it ended, as the system says it (`signal: 9 (SIGKILL)`).
        status: String,
        /// What it printed on stderr.
        stderr: String,
    },
    /// It ran past its timeout and was killed.
    TimedOut(Duration),
    /// It could not be started, or was cancelled: why.
    NotStarted(String),
}

/// Where hooks run: the session's directory, and the project root their
/// environment names.
#[derive(Debug, Clone, Copy)]
pub struct Place<'a> {
    /// The working directory.
    pub cwd: &'a Path,
    /// `LATHE_PROJECT_DIR` and `CLAUDE_PROJECT_DIR`.
    pub project: &'a Path,
}

/// Starts `command` for a hook: the only place hooks are started.
async fn start(launcher: &Launcher, command: &str, place: Place<'_>) -> std::io::Result<Spawned> {
    let line = launcher.shell().await.line(command);
    launcher.spawn(&line, false, |cmd: &mut Command| {
        cmd.current_dir(place.cwd)
            .env("LATHE_PROJECT_DIR", place.project)
            .env("CLAUDE_PROJECT_DIR", place.project)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
    })
}

/// Runs `hook` with `input` on its stdin; see the module docs.
pub async fn run(hook: &Hook, input: &str, place: Place<'_>, launcher: &Launcher, cancel: &CancellationToken) -> Ran {
    let mut child = match start(launcher, &hook.spec.command, place).await {
        Ok(child) => child,
        Err(err) => return Ran::NotStarted(err.to_string()),
    };
    let stdin = child.take_stdin();
    let feed = async move {
        // A hook that reads nothing closes its end: that is fine.
        if let Some(mut stdin) = stdin {
            let _ = stdin.write_all(input.as_bytes()).await;
            let _ = stdin.shutdown().await;
        }
    };
    let (out, err) = (child.take_stdout(), child.take_stderr());
    let reading = async move { tokio::join!(read_capped(out), read_capped(err)) };
    let mut output = None;
    tokio::pin!(reading);
    tokio::pin!(feed);
    let (mut fed, mut read) = (false, false);
    let deadline = tokio::time::sleep(hook.spec.timeout);
    tokio::pin!(deadline);
    let status = loop {
        tokio::select! {
            biased;
            () = cancel.cancelled() => {
                stop(&mut child).await;
                return Ran::NotStarted("cancelled".to_owned());
            }
            () = &mut deadline => {
                stop(&mut child).await;
                return Ran::TimedOut(hook.spec.timeout);
            }
            status = child.wait() => break status,
            () = &mut feed, if !fed => fed = true,
            both = &mut reading, if !read => {
                read = true;
                output = Some(both);
            }
        }
    };
    // What it started in the background goes too: it would hold the pipes open.
    child.finish();
    if !read {
        tokio::select! {
            biased;
            () = cancel.cancelled() => return Ran::NotStarted("cancelled".to_owned()),
            drained = tokio::time::timeout(DRAIN, &mut reading) => output = drained.ok(),
        }
    }
    let (stdout, stderr) = output.unwrap_or_default();
    match status {
        Err(err) => Ran::NotStarted(format!("waiting for it failed: {err}")),
        Ok(ending) => match ending {
            Ending::Code(code) => Ran::Exited { code, stdout, stderr },
            Ending::Signal { .. } | Ending::Unknown(_) => Ran::Killed { status: ending.status(), stderr },
        },
    }
}

/// Kills the hook's whole tree at once (its process group, SIGKILL) and
/// waits a bounded time for the hook itself.
async fn stop(child: &mut Spawned) {
    child.kill();
    if tokio::time::timeout(REAP, child.wait()).await.is_ok() {
        child.finish();
    }
}

/// Reads a pipe to its end, keeping its first [`MAX_OUTPUT`] bytes.
async fn read_capped(pipe: Option<impl AsyncRead + Unpin>) -> String {
    let Some(mut pipe) = pipe else { return String::new() };
    let mut kept = Vec::new();
    let mut chunk = vec![0u8; 8192];
    let mut dropped = 0usize;
    loop {
        match pipe.read(&mut chunk).await {
            Ok(0) | Err(_) => break,
            Ok(read) => {
                let room = MAX_OUTPUT.saturating_sub(kept.len()).min(read);
                kept.extend_from_slice(&chunk[..room]);
                dropped += read - room;
            }
        }
    }
    let mut text = String::from_utf8_lossy(&kept).into_owned();
    if dropped > 0 {
        text.push_str(&format!("\n[... {dropped} more bytes]"));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{HookEvent, HookSpec};
    use crate::hooks::Origin;

    fn hook(command: &str, timeout: Duration) -> Hook {
        let spec = HookSpec { event: HookEvent::PreToolUse, matcher: None, command: command.to_owned(), timeout };
        Hook::new(spec, Origin::User).unwrap()
    }

    fn place(dir: &Path) -> Place<'_> {
        Place { cwd: dir, project: dir }
    }

    #[tokio::test]
    async fn a_hook_gets_its_input_and_is_heard() {
        if !crate::platform::testing::posix_shell() {
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let cancel = CancellationToken::new();
        let echo =
            hook("cat; echo \" in $PWD for $CLAUDE_PROJECT_DIR\"; echo warn >&2; exit 3", Duration::from_secs(30));
        let ran = run(&echo, "{\"a\":1}", place(dir.path()), Launcher::unsupervised(), &cancel).await;
        let Ran::Exited { code: 3, stdout, stderr } = ran else { panic!("{ran:?}") };
        let here = dir.path().display();
        assert_eq!(stdout, format!("{{\"a\":1}} in {here} for {here}\n"));
        assert_eq!(stderr, "warn\n");
    }

    /// The hook runs in this system's shell (`sh`, or on Windows PowerShell
    /// or `cmd.exe`, where `/bin/sh` is not).
    #[tokio::test]
    async fn a_hook_runs_in_the_systems_shell() {
        let dir = tempfile::tempdir().unwrap();
        let echo = hook("echo hook-ran", Duration::from_secs(30));
        let ran = run(&echo, "", place(dir.path()), Launcher::unsupervised(), &CancellationToken::new()).await;
        let Ran::Exited { code: 0, stdout, .. } = ran else { panic!("{ran:?}") };
        assert_eq!(stdout.trim_end(), "hook-ran");
    }

    /// A hook that sleeps is killed on cancel, with everything it started,
    /// at once; one past its timeout is killed and reported.
    #[tokio::test]
    async fn a_sleeping_hook_is_killed_on_cancel_and_at_its_timeout() {
        if !crate::platform::testing::posix_shell() {
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let pid_file = dir.path().join("pid");
        let sleeper = hook(&format!("sleep 30 & echo $! > '{}'; wait", pid_file.display()), Duration::from_secs(60));
        let cancel = CancellationToken::new();
        let started = std::time::Instant::now();
        let canceller = {
            let (cancel, pid_file) = (cancel.clone(), pid_file.clone());
            tokio::spawn(async move {
                while !pid_file.exists() {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
                cancel.cancel();
            })
        };
        let ran = run(&sleeper, "{}", place(dir.path()), Launcher::unsupervised(), &cancel).await;
        canceller.await.unwrap();
        assert_eq!(ran, Ran::NotStarted("cancelled".to_owned()));
        assert!(started.elapsed() < Duration::from_secs(10), "{:?}", started.elapsed());
        let pid: i32 = std::fs::read_to_string(&pid_file).unwrap().trim().parse().unwrap();
        let gone = (0..200).any(|_| {
            let alive = std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .is_ok_and(|stat| !stat.rsplit_once(") ").is_some_and(|(_, rest)| rest.starts_with('Z')));
            if alive {
                std::thread::sleep(Duration::from_millis(10));
            }
            !alive
        });
        assert!(gone, "the background sleep was killed too");

        let slow = hook("sleep 30", Duration::from_millis(200));
        let ran = run(&slow, "{}", place(dir.path()), Launcher::unsupervised(), &CancellationToken::new()).await;
        assert_eq!(ran, Ran::TimedOut(Duration::from_millis(200)));
    }
}
