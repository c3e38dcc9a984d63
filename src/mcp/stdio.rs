//! Local MCP servers: the process lathe starts for a stdio server, the root
//! of a tree of its own, and what is left of it when it stops.
//!
//! It is started like every child of lathe (see `crate::platform::process`): through the
//! supervising trampoline, so it dies with lathe even when lathe is killed,
//! and with the secrets lathe knows of removed from its environment; the
//! server's own `env` entries are then added, for it alone.
//!
//! The child's stdin and stdout are the MCP pipes. Its stderr never reaches
//! lathe's stdout (which carries ACP): each line goes to lathe's log at debug
//! level, and the last few are kept to explain a failure ("exited with status
//! 1: cannot find config"). The whole tree (its process group, or its Job
//! Object on Windows) is killed when the [`ChildProcess`] is dropped
//! (session closed or deleted, EOF, a signal, a failed start), so helpers
//! the server started go too. This module knows
//! processes, not MCP.

use std::collections::VecDeque;
use std::path::Path;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{ChildStdin, ChildStdout, Command};
use tokio::task::JoinHandle;

use crate::platform::process::{CommandLine, Ending, Killer, Launcher};
use crate::sync::lock;

/// Lines of stderr kept to explain a failure.
const STDERR_LINES: usize = 5;

/// Characters of one stderr line kept.
const STDERR_LINE_CHARS: usize = 300;

/// A started server process. Dropping it kills its process tree.
pub(super) struct ChildProcess {
    killer: Killer,
    state: Arc<Mutex<ExitState>>,
    reaper: JoinHandle<()>,
    stderr: JoinHandle<()>,
}

/// What is known of how the process ended, and the last lines it wrote to stderr.
#[derive(Default)]
struct ExitState {
    status: Option<Ending>,
    stderr_tail: VecDeque<String>,
    /// Whether stderr was read to its end.
    stderr_done: bool,
}

impl ChildProcess {
    /// Starts `command` with `args` in `cwd`, with `env` added to lathe's
    /// scrubbed environment, in a new process group, through `launcher`,
    /// in the session's sandbox when `sandboxed` (`sandbox = true`; it does
    /// not start when the sandbox is not available). Returns the process and its
    /// stdout and stdin (the MCP pipes). `server` names it in the log.
    pub(super) fn spawn(
        server: &str,
        (command, args, env): (&str, &[String], &[(String, String)]),
        cwd: &Path,
        (launcher, sandboxed): (&Launcher, bool),
    ) -> std::io::Result<(ChildProcess, ChildStdout, ChildStdin)> {
        // A cwd that does not exist would fail the spawn; the server can do without it.
        let cwd = cwd.is_dir().then_some(cwd);
        // Its own variables go on top of the scrubbed environment, to it alone.
        let line = CommandLine::new(command, args);
        let mut child = launcher.spawn(&line, sandboxed, |cmd: &mut Command| {
            cmd.envs(env.iter().map(|(name, value)| (name, value)))
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped());
            if let Some(cwd) = cwd {
                cmd.current_dir(cwd);
            }
        })?;
        let killer = child.killer();
        let (Some(stdout), Some(stdin), stderr) = (child.take_stdout(), child.take_stdin(), child.take_stderr()) else {
            return Err(std::io::Error::other("the child's pipes were not set up"));
        };
        let state = Arc::new(Mutex::new(ExitState::default()));
        let stderr = tokio::spawn(read_stderr(server.to_owned(), stderr, Arc::clone(&state)));
        let reaper = {
            let state = Arc::clone(&state);
            let server = server.to_owned();
            tokio::spawn(async move {
                let status = child.wait().await;
                // The root is gone: whatever it left in its tree goes too.
                child.finish();
                match status {
                    Ok(status) => {
                        tracing::debug!(%server, status = %status.describe(), "MCP server process exited");
                        lock(&state).status = Some(status);
                    }
                    Err(err) => tracing::warn!(%server, %err, "cannot wait for the MCP server process"),
                }
            })
        };
        Ok((ChildProcess { killer, state, reaper, stderr }, stdout, stdin))
    }

    /// How the process ended, if it did, with its last stderr lines; waits
    /// up to `wait` for it to end (a server that closed its stdout is usually
    /// exiting). `None` when it still runs and said nothing.
    pub(super) async fn describe_exit(&self, wait: Duration) -> Option<String> {
        let deadline = tokio::time::Instant::now() + wait;
        // Until it exited and its last stderr lines are in (a helper it left
        // may hold stderr open: then until the deadline).
        loop {
            let done = {
                let state = lock(&self.state);
                state.status.is_some() && state.stderr_done
            };
            if done || tokio::time::Instant::now() >= deadline {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let state = lock(&self.state);
        let status = state.status.as_ref().map(Ending::describe);
        let tail = (!state.stderr_tail.is_empty())
            .then(|| state.stderr_tail.iter().map(String::as_str).collect::<Vec<_>>().join(" | "));
        match (status, tail) {
            (Some(status), Some(tail)) => Some(format!("{status}; stderr: {tail}")),
            (Some(status), None) => Some(status),
            (None, Some(tail)) => Some(format!("stderr: {tail}")),
            (None, None) => None,
        }
    }
}

impl Drop for ChildProcess {
    fn drop(&mut self) {
        self.killer.kill();
        self.reaper.abort();
        self.stderr.abort();
    }
}

async fn read_stderr(server: String, stderr: Option<tokio::process::ChildStderr>, state: Arc<Mutex<ExitState>>) {
    read_stderr_lines(&server, stderr, &state).await;
    lock(&state).stderr_done = true;
}

async fn read_stderr_lines(server: &str, stderr: Option<tokio::process::ChildStderr>, state: &Mutex<ExitState>) {
    let Some(stderr) = stderr else { return };
    let mut lines = BufReader::new(stderr).lines();
    loop {
        match lines.next_line().await {
            Ok(Some(line)) => {
                let line = line.trim_end();
                if line.is_empty() {
                    continue;
                }
                tracing::debug!(%server, "MCP server stderr: {line}");
                let kept: String = line.chars().take(STDERR_LINE_CHARS).collect();
                let mut state = lock(state);
                if state.stderr_tail.len() == STDERR_LINES {
                    state.stderr_tail.pop_front();
                }
                state.stderr_tail.push_back(kept);
            }
            // Not UTF-8 or a broken pipe: nothing more worth reading.
            Ok(None) | Err(_) => return,
        }
    }
}
