//! The `shell` tool: runs one command line in the shell (`sh -c` on Unix;
//! on Windows PowerShell or `cmd.exe`, see `crate::platform::shell`), started
//! through the process seam (`crate::platform::process`), and reports its exit
//! code and output, bounded in time and in bytes, and what the permission
//! policy's "always" answers for a command remember: a narrow
//! [`CommandRule`] for "always allow" (this exact command, or a known
//! read-only program kept inside the roots), the program and subcommand
//! ([`command_prefix`], [`matches_prefix`]) for "always reject".
//!
//! Where the command runs: in an editor terminal when the editor offers
//! `terminal/*` (the user watches it live in the tool call), otherwise as a
//! local child process. Either way this module owns the whole life of what it
//! started: an editor terminal is always released, and a local command runs
//! in its own process group that is killed as a whole — on timeout, on
//! cancellation, when the run future is dropped, and once the command exits
//! (so nothing it put in the background outlives it). At shutdown every turn
//! is cancelled, so the same kill runs for every command. A process that
//! leaves the group (`setsid`, a daemon detaching itself) is out of reach:
//! only a cgroup could contain it.
//!
//! The permission rules for commands live in `rules` (portable); this
//! module runs them.
//!
//! Local children get: `sh -c <command>` in the requested directory, stdin
//! from `/dev/null`, stdout and stderr piped to us (never our stdout, which
//! is the JSON-RPC channel), our environment without the secrets (see
//! `crate::platform::process`) plus non-interactive settings (see
//! `crate::platform::shell`: pagers
//! are `cat`, `TERM=dumb`, `NO_COLOR=1`, git never prompts and its editor is
//! `true`), started through lathe's supervising trampoline so that they die
//! with lathe even when it is killed. Editor terminals run the same
//! `sh -c <command>` in the editor's own environment, wrapped in the
//! trampoline (which removes the same secrets and `exec`s the shell): ACP
//! gives us no say there beyond the command, directory and output limit.
//!
//! This module knows nothing of ACP, the model API or permission decisions:
//! terminals come through [`Terminals`], and the policy only asks it how to
//! describe a call and how commands match a prefix.

use std::borrow::Cow;
use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Mutex;
use std::time::Duration;

use serde::Deserialize;
use serde_json::{Value, json};
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::process::Command;

use super::{
    Access, Description, DisplayContent, OutcomeStatus, Progress, Refusal, TerminalCommand, TerminalExit,
    TerminalOutput, Terminals, ToolContext, ToolLimits, ToolOutcome, paths, refused,
};
use crate::cancel::{Cancelled, OrCancel as _};
use crate::platform::process::Ending as Exit;
use crate::platform::sandbox::{NetworkCut, SandboxPolicy, suspected_denial, suspected_network_failure};

mod rules;

pub use rules::{
    CommandRule, READ_ONLY_COMMANDS, command_prefix, command_rule, exact_rule, matches_prefix, read_only_rule,
    reject_prefix,
};

/// How long a timed-out command gets between SIGTERM and SIGKILL, so it can
/// clean up (temporary files, its own children) before it is cut short.
const KILL_GRACE: Duration = Duration::from_secs(1);

/// How long we wait for a killed leader to be reaped before leaving it to
/// tokio's orphan reaper; SIGKILL normally takes effect in microseconds.
const REAP_TIMEOUT: Duration = Duration::from_millis(100);

/// How long we keep reading pipes after the command ended. A process that
/// left our group (e.g. via `setsid`) can hold them open forever; its output
/// after this is lost rather than hanging the turn.
const IO_DRAIN_TIMEOUT: Duration = Duration::from_secs(1);

/// How long a cancelled run still waits for `terminal/create` to answer, so
/// that the terminal it created can be freed rather than leaked.
const CREATE_GRACE: Duration = Duration::from_millis(100);

/// Characters of a command shown in a title before it is cut.
const TITLE_MAX_CHARS: usize = 80;

/// Bytes read from a pipe at a time.
const READ_CHUNK: usize = 8 * 1024;

/// Arguments of `shell`.
#[derive(Debug, Clone, Deserialize)]
pub struct ShellArgs {
    /// The command line, run with `sh -c`.
    pub command: String,
    /// Seconds before the command is killed; default and cap come from
    /// [`ToolLimits`]. A number, because models send `300.0` as often as `300`.
    #[serde(default, alias = "timeout_seconds")]
    pub timeout_secs: Option<f64>,
    /// Directory to run in, absolute or relative to the session cwd.
    #[serde(default, alias = "workdir", alias = "working_directory", alias = "dir")]
    pub cwd: Option<String>,
    /// The model's short label for the command. Accepted but not shown: the
    /// title shows the command itself, so the user judges what really runs.
    #[serde(default)]
    pub description: Option<String>,
    /// The model asks to run the command outside the sandbox (after the
    /// sandbox refused it); the user is always asked.
    #[serde(default, alias = "unsandboxed")]
    pub outside_sandbox: bool,
    /// Whether it runs in the session's sandbox: decided by the permission
    /// policy once the call is allowed, never by the model.
    #[serde(skip)]
    pub sandboxed: bool,
}

/// JSON schema of `shell`.
pub fn shell_schema() -> Value {
    // The definitions are built once for all sessions, so they state the
    // default limits; a call asking for more than the cap is capped.
    let limits = ToolLimits::default();
    let default = limits.shell_default_timeout.as_secs();
    let max = limits.shell_max_timeout.as_secs();
    json!({
        "type": "object",
        "properties": {
            "command": {
                "type": "string",
                "description": "The command line to run with `sh -c`, e.g. `cargo test --all`. No stdin: it must not wait for input."
            },
            "timeout_secs": {
                "type": "number",
                "minimum": 1,
                "description": format!("Seconds after which the command and everything it started are killed. Default {default}, at most {max}.")
            },
            "cwd": {
                "type": "string",
                "description": "Directory to run in, relative to the project directory or absolute. Default: the project directory."
            },
            "description": {
                "type": "string",
                "description": "What the command does, in a few words."
            },
            "outside_sandbox": {
                "type": "boolean",
                "description": "Run outside the sandbox (the user is asked), only after it blocked this command."
            }
        },
        "required": ["command"]
    })
}

/// Describes a `shell` call: "Run `cargo test`", kind execute, the command
/// with its resolved directory for the permission policy, and, for the
/// permission request, the whole command (every line) in a code block, with
/// the directory when it is not the session's.
pub fn describe_shell(args: &ShellArgs, cwd: &Path) -> Description {
    let dir = working_dir(args, cwd);
    let mut preview = fenced_as("sh", &args.command);
    if dir != paths::normalize(cwd) {
        preview.push_str(&format!("\nin {}", code_span(&paths::display(&dir, cwd))));
    }
    let mut title = title(&args.command);
    if args.outside_sandbox {
        title.push_str(" outside the sandbox");
    }
    Description {
        title,
        locations: Vec::new(),
        access: Access::Execute { command: args.command.clone(), cwd: dir, outside: args.outside_sandbox },
        preview: vec![DisplayContent::Text(preview)],
    }
}

/// The refusals of a `shell` call that do not depend on the user's answer
/// (see [`super::precheck`]): an empty command, a working directory that is
/// not one. Returns the working directory.
pub(super) async fn check_shell(args: &ShellArgs, ctx: &ToolContext<'_>) -> Result<PathBuf, Refusal> {
    if args.command.trim().is_empty() {
        return Err(refused("The command is empty. Pass the command line to run in `command`."));
    }
    let dir = working_dir(args, ctx.cwd);
    match tokio::fs::metadata(&dir).await {
        Ok(meta) if meta.is_dir() => Ok(dir),
        Ok(_) => Err(refused(format!("`{}` is not a directory.", paths::display(&dir, ctx.cwd)))),
        Err(err) => Err(refused(format!("Cannot run in `{}`: {err}.", paths::display(&dir, ctx.cwd)))),
    }
}

/// Runs `shell`: in an editor terminal when the editor offers one, else
/// locally. Non-zero exits and timeouts are [`OutcomeStatus::Failed`].
pub async fn shell(args: ShellArgs, ctx: &ToolContext<'_>) -> ToolOutcome {
    let dir = match check_shell(&args, ctx).await {
        Ok(dir) => dir,
        Err(refusal) => return *refusal,
    };
    let timeout = effective_timeout(args.timeout_secs, ctx.limits);
    let run = Run { command: &args.command, cwd: &dir, timeout, sandboxed: args.sandboxed };
    let mut outcome = match ctx.host.terminals() {
        Some(terminals) => run_in_terminal(terminals, &run, ctx).await,
        None => run_locally(&run, ctx).await,
    };
    if outcome.status != OutcomeStatus::Cancelled {
        report_sandbox(&mut outcome, &run, ctx);
    }
    outcome
}

/// One command to run, and how.
struct Run<'a> {
    command: &'a str,
    cwd: &'a Path,
    timeout: Duration,
    sandboxed: bool,
}

/// Says in the outcome whether the command ran in the sandbox, and, when a
/// sandboxed command failed with an access error in its output (or, with
/// the network off, a failed lookup or connection), that the sandbox may
/// have refused it (that it has no network) and how to ask to run it
/// outside. What was seen is quoted: it is a reading of the output, not a
/// certainty.
fn report_sandbox(outcome: &mut ToolOutcome, run: &Run<'_>, ctx: &ToolContext<'_>) {
    if !run.sandboxed {
        return;
    }
    let mut denial = None;
    let policy = ctx.host.launcher().sandbox().and_then(|sandbox| sandbox.policy().ok());
    let cut = policy.map_or(NetworkCut::On, SandboxPolicy::network_cut);
    let offline = matches!(cut, NetworkCut::Off | NetworkCut::TcpOnly);
    let network_failure = offline.then(|| suspected_network_failure(&outcome.for_model)).flatten();
    if outcome.status == OutcomeStatus::Failed
        && let Some(line) = network_failure.or_else(|| suspected_denial(&outcome.for_model))
    {
        let rules = policy.map(|policy| format!(": {}", policy.describe())).unwrap_or_default();
        let why = match cut {
            NetworkCut::Off => {
                "the sandbox may have refused it, and it has no network: a download, a package install or a name \
                 lookup fails in it"
            }
            NetworkCut::TcpOnly => {
                "the sandbox may have refused it, and it refuses TCP connections: a download or a package install \
                 fails in it"
            }
            NetworkCut::On | NetworkCut::Nothing => "the sandbox may have refused it",
        };
        outcome.for_model.push_str(&format!(
            "\n\n[lathe] This command ran in the sandbox{rules}. Its output says `{line}`: {why}. If it needs \
             that access, call shell again with the same command and `outside_sandbox: true`; the user will be asked."
        ));
        denial = Some(line);
    }
    let raw = outcome.raw_output.get_or_insert_with(|| json!({}));
    if let Some(fields) = raw.as_object_mut() {
        fields.insert("sandboxed".to_owned(), json!(true));
        if let Some(line) = denial {
            fields.insert("sandbox_denial_suspected".to_owned(), json!(line));
        }
    }
}

/// The directory a call runs in: `cwd` resolved against the session cwd.
fn working_dir(args: &ShellArgs, session_cwd: &Path) -> PathBuf {
    match args.cwd.as_deref().map(str::trim).filter(|dir| !dir.is_empty()) {
        Some(dir) => paths::resolve(session_cwd, dir),
        None => paths::normalize(session_cwd),
    }
}

/// The requested timeout, between one second and the cap; the default when
/// none (or nonsense) was given.
fn effective_timeout(requested: Option<f64>, limits: &ToolLimits) -> Duration {
    let max = limits.shell_max_timeout;
    let wanted = requested
        .filter(|secs| secs.is_finite() && *secs > 0.0)
        .and_then(|secs| Duration::try_from_secs_f64(secs.min(max.as_secs_f64())).ok())
        .unwrap_or(limits.shell_default_timeout);
    wanted.clamp(Duration::from_secs(1).min(max), max)
}

/// "Run `cmd`", showing only the first line, cut to [`TITLE_MAX_CHARS`],
/// and saying how many lines follow (the permission request shows them all).
fn title(command: &str) -> String {
    let command = command.trim();
    let mut lines = command.lines();
    let first = lines.next().unwrap_or_default().trim_end();
    let more = lines.count();
    let mut shown: String = first.chars().take(TITLE_MAX_CHARS).collect();
    if more > 0 || first.chars().count() > TITLE_MAX_CHARS {
        shown.truncate(shown.trim_end().len());
        shown.push('…');
    }
    if shown.is_empty() {
        return "Run an empty command".to_owned();
    }
    match more {
        0 => format!("Run {}", code_span(&shown)),
        1 => format!("Run {} (+1 more line)", code_span(&shown)),
        n => format!("Run {} (+{n} more lines)", code_span(&shown)),
    }
}

/// Markdown inline code that survives backticks inside the text.
pub(super) fn code_span(text: &str) -> String {
    let longest_run = text.split(|c| c != '`').map(str::len).max().unwrap_or(0);
    let fence = "`".repeat(longest_run + 1);
    if longest_run == 0 {
        format!("{fence}{text}{fence}")
    } else {
        // Spaces keep a leading or trailing backtick from merging with the fence.
        format!("{fence} {text} {fence}")
    }
}

/// How a command ended, for the report.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Ending {
    /// It exited (or a signal ended it) on its own.
    Exited { code: Option<i64>, signal: Option<String> },
    /// We killed it after this long.
    TimedOut(Duration),
}

impl Ending {
    fn succeeded(&self) -> bool {
        matches!(self, Ending::Exited { code: Some(0), .. })
    }

    fn headline(&self) -> String {
        match self {
            Ending::Exited { code: Some(code), .. } => format!("Exit code: {code}"),
            Ending::Exited { code: None, signal: Some(signal) } => format!("Killed by signal {signal}."),
            Ending::Exited { code: None, signal: None } => "Exit code: unknown".to_owned(),
            Ending::TimedOut(after) => format!("Command timed out after {} and was killed.", seconds(*after)),
        }
    }

    fn raw_output(&self) -> Value {
        match self {
            Ending::Exited { code, .. } => json!({ "exit_code": code, "timed_out": false }),
            Ending::TimedOut(_) => json!({ "exit_code": null, "timed_out": true }),
        }
    }
}

fn seconds(duration: Duration) -> String {
    if duration.subsec_millis() == 0 {
        format!("{} s", duration.as_secs())
    } else {
        format!("{:.1} s", duration.as_secs_f64())
    }
}

/// The outcome of a command that ran to an end. A non-zero exit is reported
/// as failed: the call itself worked, but editors make a failed call stand
/// out, which is what a failing build or test deserves.
fn outcome(ending: &Ending, output: &str, content: Vec<DisplayContent>) -> ToolOutcome {
    let output = if output.trim().is_empty() { "(no output)" } else { output };
    ToolOutcome {
        status: if ending.succeeded() { OutcomeStatus::Completed } else { OutcomeStatus::Failed },
        for_model: format!("{}\n{output}", ending.headline()),
        content,
        locations: None,
        raw_output: Some(ending.raw_output()),
    }
}

// ---------------------------------------------------------------------------
// Editor terminals
// ---------------------------------------------------------------------------

async fn run_in_terminal(terminals: &dyn Terminals, run: &Run<'_>, ctx: &ToolContext<'_>) -> ToolOutcome {
    let (cwd, timeout) = (run.cwd, run.timeout);
    let line = ctx.host.launcher().shell().await.line(run.command);
    // Through lathe's trampoline when it is known, so the secrets lathe
    // knows of leave the editor's environment too, and the sandbox holds.
    let (program, args) = match ctx.host.launcher().for_terminal(&line, run.sandboxed) {
        Ok(wrapped) => wrapped,
        Err(err) => return ToolOutcome::failed(format!("Not run: {err}.")),
    };
    let request = TerminalCommand {
        command: &program,
        args: &args,
        cwd,
        output_byte_limit: u64::try_from(ctx.limits.shell_output_bytes).ok(),
    };
    let create = terminals.create(request);
    tokio::pin!(create);
    let created = match (&mut create).or_cancel(ctx.cancel).await {
        Ok(created) => created,
        Err(Cancelled) => {
            // The editor may already have started the command; give it a
            // moment to tell us which terminal so that it can be freed.
            if let Ok(Ok(id)) = tokio::time::timeout(CREATE_GRACE, create).await {
                terminals.abandon(&id);
            }
            return ToolOutcome::cancelled();
        }
    };
    let id = match created {
        Ok(id) => id,
        Err(err) => return ToolOutcome::failed(format!("The editor could not start the command: {err}")),
    };
    // At once, so the editor shows the command's output live in the call.
    (ctx.progress)(Progress::Terminal(id.clone()));

    // From here the terminal must be released on every path; cancellation
    // at any await hands it to `abandon`, which kills and releases without
    // waiting so the turn can answer at once.
    match terminal_session(terminals, &id, timeout, ctx).await {
        Some(outcome) => outcome,
        None => {
            terminals.abandon(&id);
            ToolOutcome::cancelled()
        }
    }
}

/// Waits for the command, collects its output and releases the terminal;
/// `None` when cancelled (the terminal is then not yet released).
async fn terminal_session(
    terminals: &dyn Terminals,
    id: &str,
    timeout: Duration,
    ctx: &ToolContext<'_>,
) -> Option<ToolOutcome> {
    let waited = tokio::time::timeout(timeout, terminals.wait_for_exit(id)).or_cancel(ctx.cancel).await.ok()?;
    let ending = match waited {
        Ok(Ok(exit)) => Ok(terminal_ending(&exit)),
        Ok(Err(err)) => Err(format!("The editor could not wait for the command: {err}")),
        Err(_elapsed) => {
            if let Err(err) = terminals.kill(id).or_cancel(ctx.cancel).await.ok()? {
                tracing::warn!(terminal = id, %err, "could not kill a timed-out terminal command");
            }
            Ok(Ending::TimedOut(timeout))
        }
    };
    let output = terminals.output(id).or_cancel(ctx.cancel).await.ok()?;
    let released = terminals.release(id).or_cancel(ctx.cancel).await.ok()?;
    if let Err(err) = released {
        tracing::warn!(terminal = id, %err, "could not release a terminal");
    }

    let text = match &output {
        Ok(output) => terminal_text(output, ctx.limits.shell_output_bytes),
        Err(err) => format!("(The output could not be read: {err})"),
    };
    let content = vec![DisplayContent::Terminal(id.to_owned())];
    Some(match ending {
        Ok(ending) => outcome(&ending, &text, content),
        Err(message) => {
            // The editor may still know how it ended, from the output call.
            match output.ok().and_then(|output| output.exit) {
                Some(exit) => outcome(&terminal_ending(&exit), &text, content),
                None => ToolOutcome {
                    status: OutcomeStatus::Failed,
                    for_model: format!("{message}\n{text}"),
                    content,
                    locations: None,
                    raw_output: None,
                },
            }
        }
    })
}

fn terminal_ending(exit: &TerminalExit) -> Ending {
    Ending::Exited { code: exit.exit_code.map(i64::from), signal: exit.signal.clone() }
}

/// The editor's output as the model reads it: plain text, still capped
/// (an editor may ignore our limit), with a note when the editor cut it.
fn terminal_text(output: &TerminalOutput, limit: usize) -> String {
    let mut capped = HeadTail::new(limit);
    capped.push(output.output.as_bytes());
    let text = clean(&capped.render());
    if output.truncated {
        // ACP editors cut from the beginning, keeping the end.
        format!("[... earlier output was cut by the editor ...]\n{text}")
    } else {
        text
    }
}

// ---------------------------------------------------------------------------
// Local processes
// ---------------------------------------------------------------------------

/// How the race between the command and its limits ended.
enum Race {
    Exited(std::io::Result<Exit>),
    TimedOut,
    Cancelled,
}

async fn run_locally(run: &Run<'_>, ctx: &ToolContext<'_>) -> ToolOutcome {
    let (cwd, timeout) = (run.cwd, run.timeout);
    let shell = ctx.host.launcher().shell().await;
    // The root of a tree of its own (a process group, led by the trampoline
    // when supervised; a Job Object on Windows), so that one kill reaches
    // everything it starts.
    let spawned = ctx.host.launcher().spawn(&shell.line(run.command), run.sandboxed, |cmd: &mut Command| {
        cmd.current_dir(cwd)
            .envs(shell.env().iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
    });
    let mut child = match spawned {
        Ok(child) => child,
        Err(err) => return ToolOutcome::failed(format!("Could not start `{}`: {err}", shell.program())),
    };

    let buffer = Mutex::new(HeadTail::new(ctx.limits.shell_output_bytes));
    let reading = read_both(child.take_stdout(), child.take_stderr(), &buffer);
    tokio::pin!(reading);
    let mut read_done = false;
    let deadline = tokio::time::sleep(timeout);
    tokio::pin!(deadline);

    // Reading comes last: under endless output it is always ready, and
    // tokio's cooperative budget then returns control so the others run.
    // Not a plain cancel race: the command's exit, its deadline and its
    // output are waited on together, with cancellation first.
    let race = loop {
        tokio::select! {
            biased;
            () = ctx.cancel.cancelled() => break Race::Cancelled,
            () = &mut deadline => break Race::TimedOut,
            status = child.wait() => break Race::Exited(status),
            () = &mut reading, if !read_done => read_done = true,
        }
    };

    let ending = match race {
        Race::Cancelled => {
            // Straight to SIGKILL: the turn must answer within milliseconds.
            child.kill();
            if tokio::time::timeout(REAP_TIMEOUT, child.wait()).await.is_ok() {
                child.finish();
            }
            return ToolOutcome::cancelled();
        }
        Race::Exited(Err(err)) => {
            // Our own wait failed; the drop of `child` kills its tree.
            return ToolOutcome::failed(format!("Could not wait for the command: {err}"));
        }
        Race::Exited(Ok(status)) => {
            // Whatever it left running in the background goes too: it would
            // hold our pipes open and outlive the call unseen.
            child.finish();
            exit_ending(&status)
        }
        Race::TimedOut => {
            child.terminate();
            let grace = tokio::time::sleep(KILL_GRACE);
            tokio::pin!(grace);
            // As above: the grace period, the exit and the output together.
            loop {
                tokio::select! {
                    biased;
                    () = ctx.cancel.cancelled() => {
                        child.kill();
                        return ToolOutcome::cancelled();
                    }
                    () = &mut grace => break,
                    _ = child.wait() => break,
                    () = &mut reading, if !read_done => read_done = true,
                }
            }
            child.kill();
            if tokio::time::timeout(REAP_TIMEOUT, child.wait()).await.is_ok() {
                child.finish();
            }
            Ending::TimedOut(timeout)
        }
    };

    if !read_done {
        // Bounded: a process that escaped the group may keep a pipe open.
        let drained = tokio::time::timeout(IO_DRAIN_TIMEOUT, &mut reading).or_cancel(ctx.cancel).await;
        if drained.is_err() {
            return ToolOutcome::cancelled();
        }
    }
    let output = match buffer.lock() {
        Ok(buffer) => clean(&buffer.render()),
        Err(poisoned) => clean(&poisoned.into_inner().render()),
    };
    let mut display = fenced(if output.trim().is_empty() { "(no output)" } else { &output });
    if !ending.succeeded() {
        display.push('\n');
        display.push_str(&ending.headline());
    }
    outcome(&ending, &output, vec![DisplayContent::Text(display)])
}

fn exit_ending(exit: &Exit) -> Ending {
    let signal = match exit {
        Exit::Signal { name, .. } => Some(name.clone()),
        Exit::Code(_) | Exit::Unknown(_) => None,
    };
    Ending::Exited { code: exit.code().map(i64::from), signal }
}

/// Reads stdout and stderr concurrently into one buffer, in arrival order.
async fn read_both(
    stdout: Option<impl AsyncRead + Unpin>,
    stderr: Option<impl AsyncRead + Unpin>,
    buffer: &Mutex<HeadTail>,
) {
    tokio::join!(pump(stdout, buffer), pump(stderr, buffer));
}

async fn pump(pipe: Option<impl AsyncRead + Unpin>, buffer: &Mutex<HeadTail>) {
    let Some(mut pipe) = pipe else { return };
    let mut chunk = vec![0u8; READ_CHUNK];
    loop {
        match pipe.read(&mut chunk).await {
            Ok(0) | Err(_) => return,
            Ok(read) => match buffer.lock() {
                Ok(mut buffer) => buffer.push(&chunk[..read]),
                Err(poisoned) => poisoned.into_inner().push(&chunk[..read]),
            },
        }
    }
}

/// Markdown code block that survives backtick fences inside the text.
fn fenced(text: &str) -> String {
    fenced_as("", text)
}

/// [`fenced`], with an info string naming the language.
fn fenced_as(language: &str, text: &str) -> String {
    let longest_run = text.split(|c| c != '`').map(str::len).max().unwrap_or(0);
    let fence = "`".repeat(longest_run.max(2) + 1);
    format!("{fence}{language}\n{text}\n{fence}")
}

// ---------------------------------------------------------------------------
// Output text
// ---------------------------------------------------------------------------

/// Output kept within a byte budget: the first half and the last half, and a
/// count of what fell between. Memory stays bounded however much arrives.
#[derive(Debug)]
struct HeadTail {
    head: Vec<u8>,
    tail: VecDeque<u8>,
    head_cap: usize,
    tail_cap: usize,
    total: usize,
}

impl HeadTail {
    fn new(limit: usize) -> Self {
        let head_cap = limit / 2;
        Self { head: Vec::new(), tail: VecDeque::new(), head_cap, tail_cap: limit - head_cap, total: 0 }
    }

    fn push(&mut self, bytes: &[u8]) {
        self.total = self.total.saturating_add(bytes.len());
        let to_head = bytes.len().min(self.head_cap - self.head.len());
        self.head.extend_from_slice(&bytes[..to_head]);
        let rest = &bytes[to_head..];
        if rest.len() >= self.tail_cap {
            self.tail.clear();
            self.tail.extend(&rest[rest.len() - self.tail_cap..]);
        } else {
            let overflow = (self.tail.len() + rest.len()).saturating_sub(self.tail_cap);
            self.tail.drain(..overflow);
            self.tail.extend(rest);
        }
    }

    fn render(&self) -> String {
        let tail: Vec<u8> = self.tail.iter().copied().collect();
        let omitted = self.total - self.head.len() - tail.len();
        if omitted == 0 {
            let mut all = self.head.clone();
            all.extend_from_slice(&tail);
            return String::from_utf8_lossy(&all).into_owned();
        }
        // The cuts may fall inside a character; drop its pieces rather than
        // show replacement characters.
        let head = String::from_utf8_lossy(without_cut_end(&self.head));
        let tail = String::from_utf8_lossy(without_cut_start(&tail));
        let newline = if head.ends_with('\n') || head.is_empty() { "" } else { "\n" };
        format!("{head}{newline}[... {omitted} bytes omitted ...]\n{tail}")
    }
}

/// `bytes` without an incomplete UTF-8 sequence at its end.
fn without_cut_end(bytes: &[u8]) -> &[u8] {
    for back in 1..=bytes.len().min(4) {
        let byte = bytes[bytes.len() - back];
        if byte & 0xC0 == 0x80 {
            continue; // a continuation byte: look further back for the lead
        }
        let needed = match byte {
            0xF0.. => 4,
            0xE0.. => 3,
            0xC0.. => 2,
            _ => 1,
        };
        return if needed > back { &bytes[..bytes.len() - back] } else { bytes };
    }
    bytes
}

/// `bytes` without continuation bytes of a character cut at its start.
fn without_cut_start(bytes: &[u8]) -> &[u8] {
    let skip = bytes.iter().take(3).take_while(|byte| *byte & 0xC0 == 0x80).count();
    &bytes[skip..]
}

/// Output as the model should read it: ANSI escape sequences removed, and
/// carriage-return overwrites (progress bars) resolved to what a terminal
/// would finally show, roughly: the text after a line's last `\r`.
fn clean(text: &str) -> String {
    let plain = strip_ansi(text);
    let mut out = String::with_capacity(plain.len());
    for (index, line) in plain.split('\n').enumerate() {
        if index > 0 {
            out.push('\n');
        }
        let line = line.strip_suffix('\r').unwrap_or(line);
        out.push_str(line.rsplit('\r').next().unwrap_or(line));
    }
    let trimmed = out.trim_end().len();
    out.truncate(trimmed);
    out
}

/// Removes ANSI escape sequences: CSI (`ESC [ … final`), OSC (`ESC ] … BEL`
/// or `ESC \`), charset selection (`ESC ( B`) and two-character escapes.
fn strip_ansi(text: &str) -> Cow<'_, str> {
    const ESC: char = '\u{1b}';
    if !text.contains(ESC) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c != ESC {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('[') => {
                for c in chars.by_ref() {
                    if ('@'..='~').contains(&c) {
                        break;
                    }
                }
            }
            Some(']') => {
                while let Some(c) = chars.next() {
                    if c == '\u{7}' {
                        break;
                    }
                    if c == ESC {
                        if chars.peek() == Some(&'\\') {
                            chars.next();
                        }
                        break;
                    }
                }
            }
            Some('(' | ')') => {
                chars.next();
            }
            Some(_) | None => {}
        }
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use futures_util::future::BoxFuture;
    use tokio_util::sync::CancellationToken;

    use super::super::{Host, HostError};
    use super::*;
    use crate::fs_guard::Target;
    use crate::test_support::clock::{FrozenClock, eventually, poll_until, within};

    /// A bound on the tests' own waits: a hang detector, in real time.
    const WAIT: Duration = Duration::from_secs(20);

    /// A host with no editor terminals: commands run locally.
    struct LocalHost;

    impl Host for LocalHost {
        fn read_text_file<'a>(&'a self, _: &'a Target) -> BoxFuture<'a, Result<String, HostError>> {
            Box::pin(async { Err(HostError::Other("not used".to_owned())) })
        }
        fn write_text_file<'a>(&'a self, _: &'a Target, _content: &'a str) -> BoxFuture<'a, Result<(), HostError>> {
            Box::pin(async { Err(HostError::Other("not used".to_owned())) })
        }
        fn writes_in_place(&self) -> bool {
            false
        }
        fn reads_via_client(&self) -> bool {
            false
        }
        fn terminals(&self) -> Option<&dyn Terminals> {
            None
        }
    }

    /// A host whose editor offers terminals.
    struct EditorHost(FakeTerminals);

    impl Host for EditorHost {
        fn read_text_file<'a>(&'a self, _: &'a Target) -> BoxFuture<'a, Result<String, HostError>> {
            Box::pin(async { Err(HostError::Other("not used".to_owned())) })
        }
        fn write_text_file<'a>(&'a self, _: &'a Target, _content: &'a str) -> BoxFuture<'a, Result<(), HostError>> {
            Box::pin(async { Err(HostError::Other("not used".to_owned())) })
        }
        fn writes_in_place(&self) -> bool {
            false
        }
        fn reads_via_client(&self) -> bool {
            true
        }
        fn terminals(&self) -> Option<&dyn Terminals> {
            Some(&self.0)
        }
    }

    /// How the fake editor's command behaves.
    #[derive(Clone)]
    enum Script {
        Exits(TerminalExit),
        Hangs,
        WaitFails,
    }

    /// In-memory editor terminals recording every call in order.
    struct FakeTerminals {
        calls: Arc<Mutex<Vec<String>>>,
        script: Script,
        output: Result<TerminalOutput, HostError>,
    }

    impl FakeTerminals {
        fn new(calls: &Arc<Mutex<Vec<String>>>, script: Script, output: Result<TerminalOutput, HostError>) -> Self {
            Self { calls: Arc::clone(calls), script, output }
        }
        fn record(&self, call: String) {
            self.calls.lock().unwrap().push(call);
        }
    }

    impl Terminals for FakeTerminals {
        fn create<'a>(&'a self, command: TerminalCommand<'a>) -> BoxFuture<'a, Result<String, HostError>> {
            self.record(format!(
                "create {} {} cwd={} limit={:?}",
                command.command,
                command.args.join(" "),
                command.cwd.display(),
                command.output_byte_limit
            ));
            Box::pin(async { Ok("term-1".to_owned()) })
        }
        fn wait_for_exit<'a>(&'a self, terminal_id: &'a str) -> BoxFuture<'a, Result<TerminalExit, HostError>> {
            self.record(format!("wait {terminal_id}"));
            let script = self.script.clone();
            Box::pin(async move {
                match script {
                    Script::Exits(exit) => Ok(exit),
                    Script::Hangs => std::future::pending().await,
                    Script::WaitFails => Err(HostError::Other("connection lost".to_owned())),
                }
            })
        }
        fn output<'a>(&'a self, terminal_id: &'a str) -> BoxFuture<'a, Result<TerminalOutput, HostError>> {
            self.record(format!("output {terminal_id}"));
            let output = self.output.clone();
            Box::pin(async move { output })
        }
        fn kill<'a>(&'a self, terminal_id: &'a str) -> BoxFuture<'a, Result<(), HostError>> {
            self.record(format!("kill {terminal_id}"));
            Box::pin(async { Ok(()) })
        }
        fn release<'a>(&'a self, terminal_id: &'a str) -> BoxFuture<'a, Result<(), HostError>> {
            self.record(format!("release {terminal_id}"));
            Box::pin(async { Ok(()) })
        }
        fn abandon(&self, terminal_id: &str) {
            self.record(format!("abandon {terminal_id}"));
        }
    }

    fn args(command: &str) -> ShellArgs {
        ShellArgs {
            command: command.to_owned(),
            timeout_secs: None,
            cwd: None,
            description: None,
            outside_sandbox: false,
            sandboxed: false,
        }
    }

    fn with_timeout(command: &str, secs: f64) -> ShellArgs {
        ShellArgs { timeout_secs: Some(secs), ..args(command) }
    }

    /// Runs `shell` locally in `dir` with default limits.
    async fn run_local(args: ShellArgs, dir: &Path, cancel: &CancellationToken) -> ToolOutcome {
        let limits = ToolLimits::default();
        let roots = vec![dir.to_path_buf()];
        let progress = |_: Progress| {};
        let seen = crate::tools::versions::FileVersions::default();
        let ctx = ToolContext {
            cwd: dir,
            roots: &roots,
            host: &LocalHost,
            cancel,
            limits: &limits,
            progress: &progress,
            seen: &seen,
        };
        shell(args, &ctx).await
    }

    /// Runs `shell` through fake editor terminals; progress is recorded in
    /// the same log as the terminal calls, and cancels the turn when asked.
    async fn run_editor(
        args: ShellArgs,
        script: Script,
        output: Result<TerminalOutput, HostError>,
        cancel_on_progress: bool,
    ) -> (ToolOutcome, Vec<String>) {
        let dir = tempfile::tempdir().unwrap();
        let calls = Arc::new(Mutex::new(Vec::new()));
        let host = EditorHost(FakeTerminals::new(&calls, script, output));
        let limits = ToolLimits::default();
        let roots = vec![dir.path().to_path_buf()];
        let cancel = CancellationToken::new();
        let progress = |progress: Progress| {
            if let Progress::Terminal(id) = progress {
                calls.lock().unwrap().push(format!("progress {id}"));
            }
            if cancel_on_progress {
                cancel.cancel();
            }
        };
        let ctx = ToolContext {
            cwd: dir.path(),
            roots: &roots,
            host: &host,
            cancel: &cancel,
            limits: &limits,
            progress: &progress,
            seen: &crate::tools::versions::FileVersions::default(),
        };
        let outcome = shell(args, &ctx).await;
        let calls = calls.lock().unwrap().clone();
        let calls = calls.into_iter().map(|call| call.replace(&dir.path().display().to_string(), "<dir>")).collect();
        (outcome, calls)
    }

    fn exited(code: u32, text: &str) -> Result<TerminalOutput, HostError> {
        Ok(TerminalOutput {
            output: text.to_owned(),
            truncated: false,
            exit: Some(TerminalExit { exit_code: Some(code), signal: None }),
        })
    }

    /// Whether any live (non-zombie) process remains in group `pgid`. This
    /// sandbox's init may never reap orphans, so ESRCH alone is too strict:
    /// killed grandchildren can linger as zombies, which are dead.
    fn group_alive(pgid: i32) -> bool {
        if !crate::platform::testing::process_group_exists(pgid) {
            return false;
        }
        let Ok(entries) = std::fs::read_dir("/proc") else { return true };
        entries.flatten().any(|entry| {
            let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else { return false };
            // Fields after the command name: state, ppid, pgrp, ...
            let Some((_, rest)) = stat.rsplit_once(") ") else { return false };
            let fields: Vec<&str> = rest.split_whitespace().collect();
            fields.len() > 2 && fields[2] == pgid.to_string() && fields[0] != "Z"
        })
    }

    /// Waits (in real time: the clock may be frozen) for group `pgid` to
    /// have no live process; the kernel says so, no event does.
    async fn assert_group_gone(pgid: i32) {
        poll_until(&format!("process group {pgid} is gone"), WAIT, || !group_alive(pgid)).await;
    }

    /// Waits (in real time) for the command to write its shell's pid (= its group id).
    async fn read_pgid(file: &Path) -> i32 {
        let read = || std::fs::read_to_string(file).ok().and_then(|text| text.trim().parse().ok());
        assert!(eventually(WAIT, || read().is_some()).await, "the command never wrote {}", file.display());
        read().unwrap()
    }

    /// A command that records its group id and leaves two grandchildren.
    const SLEEPERS: &str = "echo $$ > pgid.tmp; mv pgid.tmp pgid; echo started; sleep 300 & sleep 300 & wait";

    #[tokio::test]
    async fn reports_output_and_exit_code() {
        let dir = tempfile::tempdir().unwrap();
        let outcome = run_local(args("echo hello"), dir.path(), &CancellationToken::new()).await;
        assert_eq!(outcome.status, OutcomeStatus::Completed);
        assert_eq!(outcome.for_model, "Exit code: 0\nhello");
        assert_eq!(outcome.content, vec![DisplayContent::Text("```\nhello\n```".to_owned())]);
        assert_eq!(outcome.raw_output, Some(json!({"exit_code": 0, "timed_out": false})));
    }

    #[tokio::test]
    async fn non_zero_exit_fails_and_stderr_is_captured() {
        if !crate::platform::testing::posix_shell() {
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let outcome = run_local(args("echo out; echo err >&2; exit 3"), dir.path(), &CancellationToken::new()).await;
        assert_eq!(outcome.status, OutcomeStatus::Failed);
        assert!(outcome.for_model.starts_with("Exit code: 3\n"), "{}", outcome.for_model);
        assert!(outcome.for_model.contains("out") && outcome.for_model.contains("err"), "{}", outcome.for_model);
        assert_eq!(outcome.raw_output, Some(json!({"exit_code": 3, "timed_out": false})));
        let outcome = run_local(args("true"), dir.path(), &CancellationToken::new()).await;
        assert_eq!(outcome.for_model, "Exit code: 0\n(no output)");
    }

    #[tokio::test]
    async fn runs_in_the_requested_directory() {
        if !crate::platform::testing::posix_shell() {
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        std::fs::write(dir.path().join("file"), "").unwrap();
        let cancel = CancellationToken::new();
        let outcome = run_local(ShellArgs { cwd: Some("sub".to_owned()), ..args("pwd") }, dir.path(), &cancel).await;
        assert!(outcome.for_model.trim_end().ends_with("/sub"), "{}", outcome.for_model);
        let outcome = run_local(ShellArgs { cwd: Some("file".to_owned()), ..args("pwd") }, dir.path(), &cancel).await;
        assert_eq!(outcome.status, OutcomeStatus::Failed);
        assert!(outcome.for_model.contains("not a directory"), "{}", outcome.for_model);
        let outcome =
            run_local(ShellArgs { cwd: Some("missing".to_owned()), ..args("pwd") }, dir.path(), &cancel).await;
        assert_eq!(outcome.status, OutcomeStatus::Failed);
        assert!(outcome.for_model.contains("missing"), "{}", outcome.for_model);
        let outcome = run_local(args("  "), dir.path(), &cancel).await;
        assert_eq!(outcome.status, OutcomeStatus::Failed);
    }

    #[tokio::test]
    async fn children_run_non_interactively() {
        if !crate::platform::testing::posix_shell() {
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let command = "echo $PAGER $GIT_PAGER $TERM $GIT_TERMINAL_PROMPT; read line; echo \"read:$?:$line\"";
        let outcome = run_local(args(command), dir.path(), &CancellationToken::new()).await;
        // stdin is /dev/null: `read` sees end of input at once instead of hanging.
        assert_eq!(outcome.for_model, "Exit code: 0\ncat cat dumb 0\nread:1:");
    }

    #[tokio::test]
    async fn huge_output_keeps_head_and_tail() {
        if !crate::platform::testing::posix_shell() {
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let command = "printf start; head -c 5000000 /dev/zero | tr '\\0' a; printf end";
        let outcome = run_local(args(command), dir.path(), &CancellationToken::new()).await;
        let limit = ToolLimits::default().shell_output_bytes;
        let omitted = 5_000_008 - limit;
        assert!(
            outcome.for_model.contains(&format!("\n[... {omitted} bytes omitted ...]\n")),
            "{}",
            &outcome.for_model[..200]
        );
        assert!(outcome.for_model.starts_with("Exit code: 0\nstartaaa"));
        assert!(outcome.for_model.ends_with("aaaend"));
        assert!(outcome.for_model.len() < limit + 100, "{}", outcome.for_model.len());
    }

    #[tokio::test]
    async fn escapes_and_overwrites_are_cleaned() {
        if !crate::platform::testing::posix_shell() {
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let command = "printf '\\033[1;31mred\\033[0m \\033]0;title\\007ok\\n10%%\\r50%%\\r100%%\\r\\n'";
        let outcome = run_local(args(command), dir.path(), &CancellationToken::new()).await;
        assert_eq!(outcome.for_model, "Exit code: 0\nred ok\n100%");
    }

    /// Runs `args` locally in `dir` on a frozen clock, moving it on by the
    /// command's timeout once the command has written its pid to `pgid`
    /// (its deadline is set by then; what it wrote before is in the pipe):
    /// the timeout fires, in virtual time, and nothing else can.
    async fn run_local_until_its_timeout(args: ShellArgs, dir: &Path) -> ToolOutcome {
        let clock = FrozenClock::hold().await;
        let timeout = Duration::from_secs_f64(args.timeout_secs.unwrap());
        let cancel = CancellationToken::new();
        let run = run_local(args, dir, &cancel);
        let time_out = async {
            read_pgid(&dir.join("pgid")).await;
            clock.advance(timeout).await;
        };
        let (outcome, ()) =
            within(WAIT, async { tokio::join!(run, time_out) }).await.expect("the timeout ends the run");
        assert_eq!(clock.elapsed(), timeout, "the kill grace was not needed: SIGTERM ends these");
        outcome
    }

    #[tokio::test(start_paused = true)]
    async fn timeout_kills_the_whole_group() {
        if !crate::platform::testing::posix_shell() {
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        // SLEEPERS, but the pid file comes last: once it is there, the line
        // is in the pipe and both sleeps run, however slow the machine.
        let command = "echo started; sleep 300 & sleep 300 & echo $$ > pgid.tmp; mv pgid.tmp pgid; wait";
        let outcome = run_local_until_its_timeout(with_timeout(command, 1.0), dir.path()).await;
        assert_eq!(outcome.status, OutcomeStatus::Failed);
        assert_eq!(outcome.for_model, "Command timed out after 1 s and was killed.\nstarted");
        assert_eq!(outcome.raw_output, Some(json!({"exit_code": null, "timed_out": true})));
        assert_group_gone(read_pgid(&dir.path().join("pgid")).await).await;
    }

    #[tokio::test(start_paused = true)]
    async fn endless_output_times_out_with_bounded_memory() {
        if !crate::platform::testing::posix_shell() {
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        // Four times what is kept has been read before the pid file appears.
        let volume = 4 * ToolLimits::default().shell_output_bytes;
        let command = format!("yes | head -c {volume}; echo $$ > pgid; yes");
        let outcome = run_local_until_its_timeout(with_timeout(&command, 1.0), dir.path()).await;
        assert!(outcome.for_model.starts_with("Command timed out after 1 s"), "{}", &outcome.for_model[..100]);
        assert!(outcome.for_model.contains("bytes omitted"));
        assert!(outcome.for_model.len() < ToolLimits::default().shell_output_bytes + 200);
    }

    /// "At once": on a frozen clock, so the run ends without waiting out
    /// any timer (the kill grace, the command's timeout), or never.
    #[tokio::test(start_paused = true)]
    async fn cancel_kills_the_group_at_once() {
        if !crate::platform::testing::posix_shell() {
            return;
        }
        let _clock = FrozenClock::hold().await;
        let dir = tempfile::tempdir().unwrap();
        let cancel = CancellationToken::new();
        let run = run_local(args(SLEEPERS), dir.path(), &cancel);
        let control = async {
            let pgid = read_pgid(&dir.path().join("pgid")).await;
            cancel.cancel();
            pgid
        };
        let (outcome, pgid) =
            within(WAIT, async { tokio::join!(run, control) }).await.expect("the cancel waits out no timer");
        assert_eq!(outcome, ToolOutcome::cancelled());
        assert_group_gone(pgid).await;
    }

    #[tokio::test]
    async fn dropping_the_run_kills_the_group() {
        if !crate::platform::testing::posix_shell() {
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let cancel = CancellationToken::new();
        let run = Box::pin(run_local(args(SLEEPERS), dir.path(), &cancel));
        let pgid_file = dir.path().join("pgid");
        let pgid = tokio::select! {
            _ = run => panic!("the command ended on its own"),
            pgid = read_pgid(&pgid_file) => pgid,
        };
        assert_group_gone(pgid).await;
    }

    /// On a frozen clock: the run ends when the shell does, without
    /// waiting out the output drain's timeout for the `sleep` holding the pipe.
    #[tokio::test(start_paused = true)]
    async fn background_processes_do_not_outlive_the_command() {
        if !crate::platform::testing::posix_shell() {
            return;
        }
        let _clock = FrozenClock::hold().await;
        let dir = tempfile::tempdir().unwrap();
        let never = CancellationToken::new();
        let run = run_local(args("echo $$ > pgid; sleep 300 & echo done"), dir.path(), &never);
        let outcome = within(WAIT, run).await.expect("the run ends with the shell");
        assert_eq!(outcome.for_model, "Exit code: 0\ndone");
        assert_group_gone(read_pgid(&dir.path().join("pgid")).await).await;
    }

    #[tokio::test]
    async fn terminal_runs_create_progress_wait_output_release() {
        if !crate::platform::testing::posix_shell() {
            return;
        }
        let exit = TerminalExit { exit_code: Some(0), signal: None };
        let (outcome, calls) = run_editor(args("echo hi"), Script::Exits(exit), exited(0, "hi\n"), false).await;
        assert_eq!(
            calls,
            [
                "create sh -c echo hi cwd=<dir> limit=Some(32768)",
                "progress term-1",
                "wait term-1",
                "output term-1",
                "release term-1"
            ]
        );
        assert_eq!(outcome.status, OutcomeStatus::Completed);
        assert_eq!(outcome.for_model, "Exit code: 0\nhi");
        assert_eq!(outcome.content, vec![DisplayContent::Terminal("term-1".to_owned())]);
    }

    #[tokio::test]
    async fn terminal_failure_and_truncation_are_reported() {
        let exit = TerminalExit { exit_code: Some(2), signal: None };
        let output =
            Ok(TerminalOutput { output: "\u{1b}[31mtail of it\u{1b}[0m".to_owned(), truncated: true, exit: None });
        let (outcome, _) = run_editor(args("make"), Script::Exits(exit), output, false).await;
        assert_eq!(outcome.status, OutcomeStatus::Failed);
        assert_eq!(outcome.for_model, "Exit code: 2\n[... earlier output was cut by the editor ...]\ntail of it");
    }

    #[tokio::test]
    async fn terminal_timeout_kills_then_releases() {
        let (outcome, calls) =
            run_editor(with_timeout("sleep 300", 1.0), Script::Hangs, exited(137, "zz"), false).await;
        assert_eq!(calls[2..], ["wait term-1", "kill term-1", "output term-1", "release term-1"]);
        assert_eq!(outcome.status, OutcomeStatus::Failed);
        assert_eq!(outcome.for_model, "Command timed out after 1 s and was killed.\nzz");
        assert_eq!(outcome.raw_output, Some(json!({"exit_code": null, "timed_out": true})));
    }

    /// "At once": on a frozen clock, so without waiting out any timer.
    #[tokio::test(start_paused = true)]
    async fn terminal_cancel_abandons_at_once() {
        let _clock = FrozenClock::hold().await;
        let run = run_editor(args("sleep 300"), Script::Hangs, exited(0, ""), true);
        let (outcome, calls) = within(WAIT, run).await.expect("the cancel waits out no timer");
        assert_eq!(outcome, ToolOutcome::cancelled());
        assert_eq!(calls[1..], ["progress term-1", "wait term-1", "abandon term-1"]);
    }

    #[tokio::test]
    async fn terminal_errors_still_release() {
        let exit = TerminalExit { exit_code: Some(0), signal: None };
        let broken = Err(HostError::Other("editor went away".to_owned()));
        let (outcome, calls) = run_editor(args("ls"), Script::Exits(exit), broken.clone(), false).await;
        assert_eq!(calls.last().map(String::as_str), Some("release term-1"));
        assert!(outcome.for_model.contains("editor went away"), "{}", outcome.for_model);

        let (outcome, calls) = run_editor(args("ls"), Script::WaitFails, broken, false).await;
        assert_eq!(calls[2..], ["wait term-1", "output term-1", "release term-1"]);
        assert_eq!(outcome.status, OutcomeStatus::Failed);
        assert!(outcome.for_model.contains("connection lost"), "{}", outcome.for_model);
    }

    #[test]
    fn titles_show_the_first_line_cut_short() {
        let cwd = Path::new("/p");
        assert_eq!(describe_shell(&args("cargo test"), cwd).title, "Run `cargo test`");
        assert_eq!(describe_shell(&args("cat <<EOF\nx\nEOF"), cwd).title, "Run `cat <<EOF…` (+2 more lines)");
        assert_eq!(describe_shell(&args("git status\ntouch PWN"), cwd).title, "Run `git status…` (+1 more line)");
        let long = format!("echo {}", "x".repeat(100));
        assert_eq!(describe_shell(&args(&long), cwd).title, format!("Run `echo {}…`", "x".repeat(75)));
        assert_eq!(describe_shell(&args("echo `date`"), cwd).title, "Run `` echo `date` ``");
        let described = describe_shell(&ShellArgs { cwd: Some("sub/../web".to_owned()), ..args("ls") }, cwd);
        assert_eq!(
            described.access,
            Access::Execute { command: "ls".to_owned(), cwd: PathBuf::from("/p/web"), outside: false }
        );
        assert_eq!(described.preview, [DisplayContent::Text("```sh\nls\n```\nin `web`".to_owned())]);
        // Issue 11, defect 13: the permission request shows every line.
        let described = describe_shell(&args("git status\ntouch PWN"), cwd);
        assert_eq!(described.preview, [DisplayContent::Text("```sh\ngit status\ntouch PWN\n```".to_owned())]);
        let described = describe_shell(&args("ls"), cwd);
        assert_eq!(
            described.access,
            Access::Execute { command: "ls".to_owned(), cwd: PathBuf::from("/p"), outside: false }
        );
    }

    #[test]
    fn arguments_accept_common_spellings() {
        let parsed: ShellArgs =
            serde_json::from_value(json!({"command": "ls", "workdir": "src", "timeout_secs": 300.0})).unwrap();
        assert_eq!(parsed.cwd.as_deref(), Some("src"));
        assert_eq!(parsed.timeout_secs, Some(300.0));
        assert_eq!(shell_schema()["required"], json!(["command"]));
    }

    #[test]
    fn timeouts_default_and_cap() {
        let limits = ToolLimits::default();
        assert_eq!(effective_timeout(None, &limits), Duration::from_secs(120));
        assert_eq!(effective_timeout(Some(5.0), &limits), Duration::from_secs(5));
        assert_eq!(effective_timeout(Some(1e12), &limits), Duration::from_secs(1800));
        assert_eq!(effective_timeout(Some(0.01), &limits), Duration::from_secs(1));
        assert_eq!(effective_timeout(Some(-3.0), &limits), Duration::from_secs(120));
        assert_eq!(effective_timeout(Some(f64::NAN), &limits), Duration::from_secs(120));
    }

    #[test]
    fn head_tail_buffer_is_bounded_and_cuts_cleanly() {
        let mut small = HeadTail::new(10);
        small.push(b"0123");
        small.push(b"4567");
        assert_eq!(small.render(), "01234567");
        small.push(b"89abcdef");
        assert_eq!(small.render(), "01234\n[... 6 bytes omitted ...]\nbcdef");
        for _ in 0..1000 {
            small.push(&[b'z'; 100]);
        }
        assert!(small.head.len() + small.tail.len() <= 10);
        assert!(small.render().ends_with("\n[... 100006 bytes omitted ...]\nzzzzz"));

        // "é" is two bytes; cuts inside it drop its pieces.
        let mut utf8 = HeadTail::new(6);
        utf8.push("aaéxxxxébc".as_bytes());
        assert_eq!(utf8.render(), "aa\n[... 6 bytes omitted ...]\nbc");
        assert_eq!(without_cut_end("a€".as_bytes()), "a€".as_bytes());
        assert_eq!(without_cut_end(&"a€".as_bytes()[..3]), b"a");
        assert_eq!(without_cut_start(&"€a".as_bytes()[1..]), b"a");
    }

    #[test]
    fn fences_outlast_backticks_in_the_output() {
        assert_eq!(fenced("plain"), "```\nplain\n```");
        assert_eq!(fenced("a\n```\nb"), "````\na\n```\nb\n````");
    }
}
