//! Process trees: how lathe starts a process, the environment it gets, the
//! supervision that keeps it and everything it starts from outliving lathe,
//! the sandbox it may run in, and how it ended ([`Ending`]).
//!
//! A start ([`Launcher::spawn`]) gives a [`Spawned`]: the root process and
//! the tree below it, killed as one (on request, when it is dropped, and,
//! after the root exits, whatever it left behind). Unix (`unix.rs`): a
//! process group and lathe's trampoline, below. Windows (`windows.rs`): a
//! Job Object with kill-on-close (process-wrap), see *Windows* below.
//!
//! # Environment
//!
//! Every process lathe starts (shell commands, local MCP servers, commands
//! run in an editor terminal) gets lathe's environment minus:
//!
//! 1. the secrets lathe knows of, always: each model's `api_key_env`,
//!    `OPENAI_API_KEY`, each MCP server's `bearer_token_env`, and the names of
//!    every configured MCP server's `env` entries (a server still gets its own
//!    entries: they are set after the removal, for it alone);
//! 2. the names matching a `[child_env] remove` glob (`AWS_*`, `*_TOKEN`),
//!    except those matching a `[child_env] keep` glob.
//!
//! `keep` cannot bring back a secret of the first kind. Names are matched
//! case-sensitively.
//!
//! # Supervision (Unix)
//!
//! A process whose parent is killed with SIGKILL is not told, and neither is
//! anything it started in the background. So lathe starts each local child
//! through itself: `lathe sandbox-exec --parent <lathe's pid> -- <program>
//! <args>` in a new process group. The trampoline ([`sandbox_exec`]) blocks
//! the signals it waits for, asks the kernel to signal it when its parent
//! dies (`PR_SET_PDEATHSIG`), checks that its parent is still the one it was
//! given (it may have died already), starts the program in its group with
//! stdin, stdout and stderr inherited, and waits. When the program
//! exits, the trampoline exits with the same code (or dies of the same
//! signal), and lathe kills whatever the program left in the group, as it
//! always did. When lathe dies, the trampoline kills the whole group with
//! SIGKILL. SIGTERM, SIGINT, SIGHUP and SIGQUIT sent to the trampoline are
//! passed on to the program (a signal sent to the whole group reaches the
//! program directly, and the trampoline does not die of it, so lathe's
//! grace period after SIGTERM still holds). The program is started with
//! `posix_spawn`, which gives it an empty signal mask and default signal
//! actions: std's `Command` would pass the trampoline's blocked signals on.
//!
//! # Sandbox
//!
//! A process started sandboxed gets the session's [`SandboxPolicy`] as
//! trampoline arguments (`--sandbox --root <path>... --write <path>...
//! --home <path> [--deny-read <path>...] [--no-network] [--without
//! <part>...]`); the trampoline puts the sandbox on itself (a mount
//! namespace, Landlock, a seccomp filter: see `crate::platform::sandbox`) before it
//! starts the program, and refuses to start it when a part it was not told
//! to leave out cannot be put on, or when Landlock enforces nothing. The
//! restriction is inherited by the program and everything it starts. A
//! sandboxed process is never started another way: when the trampoline is
//! unknown or cannot be started, the start fails.
//!
//! `lathe sandbox-exec --probe` tries every part of the sandbox on itself
//! and prints what held (see `crate::platform::sandbox::probe`).
//!
//! Commands in an editor terminal go through the same trampoline without
//! `--parent`: it removes the secrets from the editor's environment and
//! `exec`s the command, so the editor sees (and kills) the command itself.
//! The editor, not lathe, owns those processes.
//!
//! Where no trampoline is known ([`Launcher::unsupervised`]: library tests,
//! whose executable is a test binary) children are started directly, with
//! the same environment rule and process group, but unsupervised.
//!
//! # Limits
//!
//! - A process that leaves the group (`setsid`, a daemon detaching itself)
//!   is out of reach; only a cgroup could contain it.
//! - The kernel reports the death of the *thread* that started the
//!   trampoline. lathe starts children from its runtime's worker threads,
//!   which live as long as lathe; should such a signal come while lathe
//!   lives, the trampoline sees that its parent is unchanged and goes on.
//!   On macOS (and the BSDs) there is no `PR_SET_PDEATHSIG`: the
//!   trampoline waits on a kqueue `EVFILT_PROC`/`NOTE_EXIT` for lathe's pid
//!   instead, registered before it looks at its parent, so no death slips
//!   by. It also looks at its parent once a second, which covers the
//!   systems with neither: there a child outlives lathe by up to a second.
//! - Between a program's exit and lathe's kill of its group, the group's
//!   leftovers (background jobs) are lathe's to kill; if lathe is killed in
//!   that instant they stay.
//!
//! # Windows
//!
//! Every child is created suspended, put in a new Job Object with
//! `JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE` and then resumed (process-wrap), so
//! nothing it starts can escape the job. lathe holds the job's handle: a
//! kill terminates the job (the whole tree), so does the root's exit for
//! what it left behind, and when lathe dies, even killed, the system closes
//! the handle and kills the tree. So lathe's own children need no
//! trampoline there. There is no polite signal for a windowless tree:
//! [`Spawned::terminate`] kills. Commands in an editor terminal go through
//! `lathe sandbox-exec` (no `exec` on Windows): it scrubs the environment,
//! starts the command in a kill-on-close job of its own and exits with its
//! code, so when the editor kills it the tree goes too. There is no command
//! sandbox on Windows (see `crate::platform::sandbox`): a sandboxed start fails.
//! Exit statuses have no signals there ([`Ending::Code`] only).
//!
//! This module knows processes and environment variables, nothing of ACP,
//! MCP, the model or the tools that use it.

use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::OnceLock;

use globset::{Glob, GlobSet, GlobSetBuilder};
use tokio::process::{ChildStderr, ChildStdin, ChildStdout, Command};

use crate::platform::sandbox::{Confinement, SandboxPart, SandboxPolicy, SessionSandbox};
use crate::platform::settings::{ChildSettings, SandboxSettings};

#[cfg(unix)]
#[path = "unix.rs"]
mod sys;
#[cfg(windows)]
#[path = "windows.rs"]
mod sys;

/// The hidden subcommand of the `lathe` binary that runs [`sandbox_exec`].
pub use crate::platform::sandbox::TRAMPOLINE_SUBCOMMAND;

/// Secrets lathe always knows of, whatever the configuration.
const ALWAYS_SECRET: &str = "OPENAI_API_KEY";

/// Which variables a child does not inherit. See the module docs.
#[derive(Debug, Clone, Default)]
pub struct EnvRule {
    secrets: Vec<String>,
    remove_patterns: Vec<String>,
    keep_patterns: Vec<String>,
    remove: GlobSet,
    keep: GlobSet,
}

impl EnvRule {
    /// The rule removing `secrets` always and the names matching `remove`
    /// unless they match `keep`. Fails on a pattern that is not a glob.
    pub fn new(secrets: &[String], remove: &[String], keep: &[String]) -> Result<EnvRule, globset::Error> {
        let mut secrets: Vec<String> = secrets.iter().filter(|name| !name.is_empty()).cloned().collect();
        secrets.sort();
        secrets.dedup();
        Ok(EnvRule {
            secrets,
            remove_patterns: remove.to_vec(),
            keep_patterns: keep.to_vec(),
            remove: glob_set(remove)?,
            keep: glob_set(keep)?,
        })
    }

    /// Whether a child does not get the variable `name`.
    pub fn removes(&self, name: &OsStr) -> bool {
        let secret = name.to_str().is_some_and(|name| self.secrets.iter().any(|secret| secret == name));
        // An empty set matches nothing, but asking it still builds a match
        // candidate, whose first one has the memchr crate detect the CPU's
        // features (`cpuid`, slow in a virtual machine): about 30 µs of
        // every command's start in the trampoline, for no pattern (the
        // default). See BENCHMARKS.md.
        secret || (!self.remove.is_empty() && self.remove.is_match(name) && !self.keep.is_match(name))
    }

    /// The names of this process's environment that a child does not get.
    fn removed_here(&self) -> Vec<OsString> {
        std::env::vars_os().map(|(name, _)| name).filter(|name| self.removes(name)).collect()
    }

    /// The rule as trampoline arguments.
    fn as_args(&self) -> Vec<String> {
        let mut args = Vec::new();
        for (flag, values) in
            [("--secret", &self.secrets), ("--remove", &self.remove_patterns), ("--keep", &self.keep_patterns)]
        {
            for value in values {
                args.push(flag.to_owned());
                args.push(value.clone());
            }
        }
        args
    }
}

fn glob_set(patterns: &[String]) -> Result<GlobSet, globset::Error> {
    let mut builder = GlobSetBuilder::new();
    for pattern in patterns {
        builder.add(Glob::new(pattern)?);
    }
    builder.build()
}

/// Starts lathe's children: with the environment rule, in a process group of
/// their own, under the trampoline when lathe's executable is known.
#[derive(Debug, Clone, Default)]
pub struct Launcher {
    supervisor: Option<PathBuf>,
    env: EnvRule,
    sandbox: Option<SessionSandbox>,
    /// `[shell] program`, if configured.
    shell: Option<String>,
}

impl Launcher {
    /// The launcher the configuration describes. A pattern that is not a
    /// glob (the config refuses them) is left out, with a warning.
    pub fn new(settings: &ChildSettings) -> Launcher {
        let env = EnvRule::new(&settings.secret_vars, &settings.remove_env, &settings.keep_env).unwrap_or_else(|err| {
            tracing::warn!(%err, "ignoring the [child_env] patterns");
            EnvRule::new(&settings.secret_vars, &[], &[]).unwrap_or_default()
        });
        Launcher { supervisor: settings.supervisor.clone(), env, sandbox: None, shell: settings.shell.clone() }
    }

    /// The launcher for a session with these `roots`: as [`Launcher::new`],
    /// with the session's sandbox (see `crate::platform::sandbox`).
    pub fn for_session(children: &ChildSettings, sandbox: &SandboxSettings, roots: &[PathBuf]) -> Launcher {
        let mut launcher = Launcher::new(children);
        launcher.sandbox = Some(SessionSandbox::new(sandbox, roots, launcher.supervisor.as_deref()));
        launcher
    }

    /// The session's sandbox, if this launcher has one.
    pub fn sandbox(&self) -> Option<&SessionSandbox> {
        self.sandbox.as_ref()
    }

    /// How the session's commands relate to the sandbox.
    pub fn confinement(&self) -> Confinement {
        self.sandbox.as_ref().map_or(Confinement::Off, SessionSandbox::confinement)
    }

    /// What sandboxed commands may not read (nothing without a session sandbox).
    pub fn read_denials(&self) -> crate::platform::sandbox::ReadDenials {
        self.sandbox.as_ref().map(|sandbox| sandbox.read_denials().clone()).unwrap_or_default()
    }

    /// The policy a sandboxed start uses, with the trampoline that applies it.
    fn sandbox_policy(&self) -> std::io::Result<(&Path, &SandboxPolicy)> {
        let unavailable = |why: String| std::io::Error::other(why);
        let sandbox = self.sandbox.as_ref().ok_or_else(|| unavailable("this session has no sandbox".to_owned()))?;
        let policy = sandbox.policy().map_err(unavailable)?;
        let supervisor = self.supervisor.as_deref().ok_or_else(|| {
            unavailable("the sandbox is applied by lathe's own executable, which is unknown".to_owned())
        })?;
        Ok((supervisor, policy))
    }

    /// Starts children directly (no trampoline), removing only the secret
    /// every configuration has (`OPENAI_API_KEY`). For hosts that have no
    /// configuration (tests).
    pub fn unsupervised() -> &'static Launcher {
        static LAUNCHER: OnceLock<Launcher> = OnceLock::new();
        LAUNCHER.get_or_init(|| Launcher {
            supervisor: None,
            env: EnvRule::new(&[ALWAYS_SECRET.to_owned()], &[], &[]).unwrap_or_default(),
            sandbox: None,
            shell: None,
        })
    }

    /// The shell commands run in (see `crate::platform::shell`).
    pub async fn shell(&self) -> crate::platform::shell::Shell {
        crate::platform::shell::Shell::resolve(self.shell.as_deref()).await
    }

    /// The environment rule.
    pub fn env_rule(&self) -> &EnvRule {
        &self.env
    }

    /// Starts `line`, supervised when possible: its environment scrubbed,
    /// the root of a tree that dies as one (a new process group on Unix, so
    /// its pid is the group's id; a kill-on-close Job Object on Windows),
    /// killed if the returned [`Spawned`] is dropped while it runs. `setup`
    /// sets the rest (directory, stdio, added variables, which win over the
    /// rule). On Unix, if the trampoline cannot be started (lathe's
    /// executable was removed, say), the program is started directly,
    /// unless it was to be `sandboxed`: that start fails instead, as it does
    /// when the session's sandbox is not available.
    pub fn spawn(&self, line: &CommandLine, sandboxed: bool, setup: impl Fn(&mut Command)) -> std::io::Result<Spawned> {
        if sandboxed {
            let (supervisor, policy) = self.sandbox_policy()?;
            let mut command = self.trampoline(supervisor, line, Some(policy));
            setup(&mut command);
            return sys::spawn(command).map(Spawned::new);
        }
        if sys::SUPERVISED_BY_TRAMPOLINE
            && let Some(supervisor) = &self.supervisor
        {
            let mut command = self.trampoline(supervisor, line, None);
            setup(&mut command);
            match sys::spawn(command) {
                Ok(tree) => return Ok(Spawned::new(tree)),
                Err(err) => {
                    tracing::warn!(supervisor = %supervisor.display(), %err, "cannot start lathe's trampoline; starting the process unsupervised");
                }
            }
        }
        let mut command = self.command(OsStr::new(&line.program));
        command.args(&line.args);
        if let Some(verbatim) = &line.verbatim {
            sys::raw_arg(&mut command, verbatim);
        }
        setup(&mut command);
        sys::spawn(command).map(Spawned::new)
    }

    /// `lathe sandbox-exec --parent <pid> [sandbox] -- program args`.
    fn trampoline(&self, supervisor: &Path, line: &CommandLine, sandbox: Option<&SandboxPolicy>) -> Command {
        // What starts the trampoline in the sandbox, where the system's
        // sandbox is put on before it (macOS); the trampoline itself else.
        let (start, prefix) = crate::platform::sandbox::launch_prefix(sandbox, supervisor);
        let mut command = self.command(&start);
        command.args(prefix).arg(TRAMPOLINE_SUBCOMMAND).arg("--parent").arg(std::process::id().to_string());
        if let Some(policy) = sandbox {
            command.args(policy.as_args());
            command.args(policy.launch_args());
        }
        if line.verbatim.is_some() {
            // Quoted as an argument to the trampoline, which gets it back
            // whole and writes it on the command's line as it is.
            command.arg("--verbatim");
        }
        command.arg("--").arg(&line.program).args(&line.args).args(&line.verbatim);
        command
    }

    /// The program and arguments to hand an editor terminal for `line`:
    /// through the trampoline (which removes the secrets from the editor's
    /// environment, applies the sandbox when `sandboxed`, and `exec`s it, or
    /// on Windows starts it in a job of its own) when lathe's executable is
    /// known. Fails when it was to be sandboxed and cannot be. ACP carries
    /// arguments as strings the editor quotes: a verbatim part becomes one
    /// more argument.
    pub fn for_terminal(&self, line: &CommandLine, sandboxed: bool) -> std::io::Result<(String, Vec<String>)> {
        let policy = if sandboxed { Some(self.sandbox_policy()?.1) } else { None };
        let mut command = vec![line.program.clone()];
        command.extend(line.args.iter().cloned());
        command.extend(line.verbatim.iter().cloned());
        match self.supervisor.as_deref().filter(|supervisor| supervisor.to_str().is_some()) {
            Some(supervisor) => {
                let (start, prefix) = crate::platform::sandbox::launch_prefix(policy, supervisor);
                // A path in it that is not UTF-8 cannot cross ACP: refused,
                // as dropping it could drop a denial.
                let text = |arg: &OsStr| {
                    arg.to_str().map(str::to_owned).ok_or_else(|| {
                        std::io::Error::other("a sandbox path is not UTF-8, which an editor terminal cannot be given")
                    })
                };
                let mut wrapped: Vec<String> = prefix.iter().map(|arg| text(arg)).collect::<Result<_, _>>()?;
                wrapped.push(TRAMPOLINE_SUBCOMMAND.to_owned());
                wrapped.extend(self.env.as_args());
                if let Some(policy) = policy {
                    // ACP carries arguments as strings: a path that is not
                    // UTF-8 becomes one that does not exist, so it is not
                    // writable (the sandbox only gets stricter).
                    wrapped.extend(policy.as_args().iter().map(|arg| arg.to_string_lossy().into_owned()));
                }
                if line.verbatim.is_some() {
                    // The editor quotes it as one argument; the trampoline
                    // gets it back whole and writes it on cmd.exe's line as
                    // it is (quoted twice, cmd.exe would run `"echo x"`).
                    wrapped.push("--verbatim".to_owned());
                }
                wrapped.push("--".to_owned());
                wrapped.extend(command);
                Ok((text(&start)?, wrapped))
            }
            None if sandboxed => {
                Err(std::io::Error::other("the sandbox is applied by lathe's own executable, which is unknown"))
            }
            None => {
                let program = command.remove(0);
                Ok((program, command))
            }
        }
    }

    fn command(&self, program: &OsStr) -> Command {
        let mut command = Command::new(program);
        for name in self.env.removed_here() {
            command.env_remove(name);
        }
        command.kill_on_drop(true);
        // Unix: its own group, so that one signal reaches everything it starts.
        sys::prepare(&mut command);
        command
    }
}

/// A program and its arguments, as lathe starts it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandLine {
    /// The program: a name looked up in `PATH`, or a path.
    pub program: String,
    /// Its arguments, each quoted as the system does (Windows: std's rules).
    pub args: Vec<String>,
    /// A last argument passed exactly as written, with no quoting: what
    /// `cmd.exe` needs for its command line on Windows (std's quoting rules
    /// are not cmd's). On Unix, one more argument.
    pub verbatim: Option<String>,
}

impl CommandLine {
    /// `program` with `args`, nothing verbatim.
    pub fn new(program: impl Into<String>, args: &[String]) -> CommandLine {
        CommandLine { program: program.into(), args: args.to_vec(), verbatim: None }
    }
}

/// A started process and the tree below it, which die as one. Dropping it
/// kills the whole tree (unless [`Spawned::finish`] already did).
pub struct Spawned {
    tree: sys::Tree,
    stdin: Option<ChildStdin>,
    stdout: Option<ChildStdout>,
    stderr: Option<ChildStderr>,
}

impl std::fmt::Debug for Spawned {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Spawned").field("id", &self.id()).finish_non_exhaustive()
    }
}

impl Spawned {
    fn new(mut tree: sys::Tree) -> Spawned {
        let (stdin, stdout, stderr) = tree.take_stdio();
        Spawned { tree, stdin, stdout, stderr }
    }

    /// The root process's id, while it runs.
    pub fn id(&self) -> Option<u32> {
        self.tree.id()
    }

    /// The root's stdin, when it was piped (once).
    pub fn take_stdin(&mut self) -> Option<ChildStdin> {
        self.stdin.take()
    }

    /// The root's stdout, when it was piped (once).
    pub fn take_stdout(&mut self) -> Option<ChildStdout> {
        self.stdout.take()
    }

    /// The root's stderr, when it was piped (once).
    pub fn take_stderr(&mut self) -> Option<ChildStderr> {
        self.stderr.take()
    }

    /// Waits for the root process to exit (not for the tree: see
    /// [`Spawned::finish`]).
    pub async fn wait(&mut self) -> std::io::Result<Ending> {
        self.tree.wait().await
    }

    /// Asks the whole tree to stop: SIGTERM to the group on Unix; on
    /// Windows, with no polite signal for a windowless tree, a kill.
    pub fn terminate(&mut self) {
        self.tree.terminate();
    }

    /// Kills the whole tree now (SIGKILL to the group, or the job terminated).
    pub fn kill(&mut self) {
        self.tree.kill();
    }

    /// Kills what the root left behind and forgets the tree. Called once
    /// the root has been reaped (on Unix the group id cannot be reused while
    /// any member lives, and once none does, reuse would need the pid
    /// counter to wrap around in the instant since the reap).
    pub fn finish(&mut self) {
        self.tree.finish();
    }

    /// A handle that kills the tree from elsewhere (while another task
    /// waits on this): at once on Unix; on Windows the waiting task kills
    /// it as soon as it runs, and the job's kill-on-close when this is
    /// dropped. Does nothing once the tree is finished.
    pub fn killer(&self) -> Killer {
        Killer(self.tree.killer())
    }
}

/// Kills a [`Spawned`] tree from another task (see [`Spawned::killer`]).
#[derive(Clone)]
pub struct Killer(sys::Killer);

impl Killer {
    /// Kills the whole tree, unless it is finished.
    pub fn kill(&self) {
        self.0.kill();
    }
}

/// How a process ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ending {
    /// It exited with this code.
    Code(i32),
    /// A signal ended it (Unix).
    Signal {
        /// The signal's number.
        number: i32,
        /// Its name (`SIGKILL`), or the number when the system has no name for it.
        name: String,
        /// How the system says it (`signal: 9 (SIGKILL)`, with `(core dumped)`).
        status: String,
    },
    /// Neither (the system's own description).
    Unknown(String),
}

impl Ending {
    /// The exit code, when it exited.
    pub fn code(&self) -> Option<i32> {
        match self {
            Ending::Code(code) => Some(*code),
            Ending::Signal { .. } | Ending::Unknown(_) => None,
        }
    }

    /// How the system says it ended (`exit status: 1`, `signal: 9 (SIGKILL)`).
    pub fn status(&self) -> String {
        match self {
            Ending::Code(code) => format!("exit status: {code}"),
            Ending::Signal { status, .. } | Ending::Unknown(status) => status.clone(),
        }
    }

    /// One phrase for a report: "it exited with status 1", "it was killed
    /// by signal 9".
    pub fn describe(&self) -> String {
        match self {
            Ending::Code(code) => format!("it exited with status {code}"),
            Ending::Signal { number, .. } => format!("it was killed by signal {number}"),
            Ending::Unknown(status) => format!("it ended ({status})"),
        }
    }
}

/// The arguments of `lathe sandbox-exec` (hidden from `--help`).
#[derive(Debug, Clone, clap::Args)]
pub struct SandboxExecArgs {
    /// Stay as the command's parent and kill its whole process group when
    /// the process with this pid (lathe) is no longer this one's parent.
    /// Without it, the command replaces this process (`exec`).
    #[arg(long, value_name = "PID")]
    pub parent: Option<u32>,
    /// A variable to remove from the command's environment.
    #[arg(long = "secret", value_name = "NAME")]
    pub secrets: Vec<String>,
    /// A glob of variables to remove, unless they match a `--keep` glob.
    #[arg(long = "remove", value_name = "GLOB")]
    pub remove: Vec<String>,
    /// A glob of variables `--remove` leaves alone.
    #[arg(long = "keep", value_name = "GLOB")]
    pub keep: Vec<String>,
    /// Put the sandbox on this process and the command first (see
    /// `crate::platform::sandbox`); refuse to run when it cannot be put on.
    #[arg(long)]
    pub sandbox: bool,
    /// A session root: the sandboxed command may read and write beneath
    /// it, but not its git hooks, config and info, nor `.lathe/`.
    #[arg(long = "root", value_name = "PATH", requires = "sandbox")]
    pub roots: Vec<PathBuf>,
    /// A path the sandboxed command may write beneath.
    #[arg(long = "write", value_name = "PATH", requires = "sandbox")]
    pub writable: Vec<PathBuf>,
    /// The home directory whose credentials the sandboxed command may not read.
    #[arg(long, value_name = "PATH", requires = "sandbox")]
    pub home: Option<PathBuf>,
    /// One more path the sandboxed command may not read.
    #[arg(long = "deny-read", value_name = "PATH", requires = "sandbox")]
    pub deny_read: Vec<PathBuf>,
    /// No network for the sandboxed command: no socket but a Unix one.
    #[arg(long = "no-network", requires = "sandbox")]
    pub no_network: bool,
    /// A part of the sandbox to leave out (this machine lacks it).
    #[arg(long = "without", value_name = "PART", requires = "sandbox")]
    pub without: Vec<SandboxPart>,
    /// The abstract socket to hand the mount namespace to, so that this
    /// process's exit does not wait for its teardown (see `crate::platform::sandbox`).
    #[arg(long = "ns-keeper", value_name = "NAME", requires = "sandbox")]
    pub ns_keeper: Option<String>,
    /// The read allow-list lathe worked out for the session (one argument:
    /// per granted path `d` or `f`, the path, a newline), used instead of
    /// reading it here; the `--home` and `--deny-read` paths it was worked
    /// out around are given as well.
    #[arg(long = "read-grants", value_name = "LIST", requires = "sandbox")]
    pub read_grants: Option<OsString>,
    /// Try every part of the sandbox on this process, print what held (one
    /// line of JSON) and exit.
    #[arg(long, conflicts_with = "sandbox")]
    pub probe: bool,
    /// The command's last argument goes on its command line exactly as
    /// written, not quoted again: on Windows, cmd.exe's `"<line>"` after
    /// `/s /c`, which it parses by rules std's quoting does not follow (see
    /// `crate::platform::shell`). Elsewhere an argument like the others.
    #[arg(long)]
    pub verbatim: bool,
    /// The program and its arguments, after `--`.
    #[arg(last = true, required_unless_present = "probe", value_name = "COMMAND")]
    pub command: Vec<OsString>,
}

/// Why the trampoline could not run the command.
#[derive(Debug, thiserror::Error)]
pub enum TrampolineError {
    /// A `--remove` or `--keep` pattern is not a glob.
    #[error("{0}")]
    Pattern(#[from] globset::Error),
    /// The program could not be started.
    #[error("cannot start `{program}`: {source}")]
    Start {
        /// The program.
        program: String,
        /// Why.
        source: std::io::Error,
    },
    /// A system call the supervision needs failed.
    #[error("cannot supervise the command: {0}")]
    Supervise(String),
    /// The sandbox could not be put on; the command did not run.
    #[error("cannot sandbox the command, so it was not run: {0}")]
    Sandbox(String),
}

/// `lathe sandbox-exec`: runs the command with the environment rule of its
/// arguments, supervised when `--parent` is given (see the module docs).
/// Returns the command's exit code; dies of the signal that killed the
/// command, if one did.
pub fn sandbox_exec(args: SandboxExecArgs) -> Result<ExitCode, TrampolineError> {
    let rule = EnvRule::new(&args.secrets, &args.remove, &args.keep)?;
    let Some(program) = args.command.first() else {
        return Err(TrampolineError::Start { program: String::new(), source: std::io::ErrorKind::InvalidInput.into() });
    };
    let start_error = |source| TrampolineError::Start { program: program.to_string_lossy().into_owned(), source };
    if args.sandbox {
        // Before any thread is started: a mount namespace can only be
        // entered by a single-threaded process, and Landlock and seccomp
        // restrict the calling thread and what it starts from then on.
        let policy = SandboxPolicy::new(args.writable.clone(), !args.no_network)
            .with_roots(args.roots.clone())
            .denying_reads(args.home.clone(), args.deny_read.clone())
            .without(&args.without)
            .kept_by(args.ns_keeper.clone())
            .with_read_grants(args.read_grants.clone());
        crate::platform::sandbox::apply(&policy).map_err(|err| TrampolineError::Sandbox(err.to_string()))?;
    }
    sys::run_trampoline(args.parent, &args.command, args.verbatim, &rule, start_error)
}

/// `lathe sandbox-exec --probe`: what each part of the sandbox does on this
/// machine, as the one line of JSON `crate::platform::sandbox::probe` reads. The
/// process must have a single thread, and exit afterwards.
pub fn sandbox_probe() -> String {
    serde_json::to_string(&crate::platform::sandbox::probe_here()).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(secrets: &[&str], remove: &[&str], keep: &[&str]) -> EnvRule {
        let owned = |names: &[&str]| names.iter().map(|name| (*name).to_owned()).collect::<Vec<_>>();
        EnvRule::new(&owned(secrets), &owned(remove), &owned(keep)).unwrap()
    }

    #[test]
    fn the_environment_rule() {
        let rule = rule(&["OPENAI_API_KEY", "DOCS_TOKEN"], &["AWS_*", "*_TOKEN"], &["GH_TOKEN", "DOCS_*"]);
        let table = [
            ("OPENAI_API_KEY", true),
            // A secret stays removed even when a keep pattern matches it.
            ("DOCS_TOKEN", true),
            ("AWS_SECRET_ACCESS_KEY", true),
            ("NPM_TOKEN", true),
            ("GH_TOKEN", false),
            ("DOCS_URL", false),
            ("PATH", false),
            ("openai_api_key", false),
            ("OPENAI_API_KEY_2", false),
        ];
        for (name, removed) in table {
            assert_eq!(rule.removes(OsStr::new(name)), removed, "{name}");
        }
        assert!(EnvRule::new(&[], &["[".to_owned()], &[]).is_err());
        // Without patterns, only the secrets go.
        let plain = self::rule(&["OPENAI_API_KEY"], &[], &["GH_TOKEN"]);
        assert!(plain.removes(OsStr::new("OPENAI_API_KEY")));
        assert!(!plain.removes(OsStr::new("NPM_TOKEN")) && !plain.removes(OsStr::new("PATH")));
    }

    #[test]
    fn terminal_commands_carry_the_rule_through_the_trampoline() {
        let settings = ChildSettings {
            supervisor: Some(PathBuf::from("/opt/lathe")),
            secret_vars: vec!["OPENAI_API_KEY".to_owned()],
            remove_env: vec!["*_TOKEN".to_owned()],
            keep_env: vec!["GH_TOKEN".to_owned()],
            shell: None,
        };
        let args = ["-c".to_owned(), "echo hi".to_owned()];
        let line = CommandLine::new("sh", &args);
        let (program, wrapped) = Launcher::new(&settings).for_terminal(&line, false).unwrap();
        assert_eq!(program, "/opt/lathe");
        assert_eq!(
            wrapped,
            [
                "sandbox-exec",
                "--secret",
                "OPENAI_API_KEY",
                "--remove",
                "*_TOKEN",
                "--keep",
                "GH_TOKEN",
                "--",
                "sh",
                "-c",
                "echo hi"
            ]
        );
        let (program, plain) = Launcher::unsupervised().for_terminal(&line, false).unwrap();
        assert_eq!((program.as_str(), plain.as_slice()), ("sh", &args[..]));

        // cmd.exe's verbatim line: one argument the trampoline is told to
        // write as it is (the editor quotes it; std would quote it again).
        let cmd = CommandLine {
            program: "cmd.exe".to_owned(),
            args: vec!["/d".to_owned(), "/s".to_owned(), "/c".to_owned()],
            verbatim: Some("\"echo \"a b\"\"".to_owned()),
        };
        let (_, wrapped) = Launcher::new(&settings).for_terminal(&cmd, false).unwrap();
        let dashes = wrapped.iter().position(|arg| arg == "--").unwrap();
        assert_eq!(wrapped[dashes - 1], "--verbatim");
        assert_eq!(wrapped[dashes + 1..], ["cmd.exe", "/d", "/s", "/c", "\"echo \"a b\"\""]);

        // Sandboxed: the session's policy follows the rule, before the command.
        let sandbox = SandboxSettings { network: false, ..SandboxSettings::default() };
        let launcher = Launcher::for_session(&settings, &sandbox, &[PathBuf::from("/work/p")]);
        let Ok(policy) = launcher.sandbox().unwrap().policy() else {
            eprintln!("NOTE: no sandbox on this machine; checking that a sandboxed terminal is refused");
            assert!(launcher.for_terminal(&line, true).is_err());
            return;
        };
        let (_, wrapped) = launcher.for_terminal(&line, true).unwrap();
        let policy_args: Vec<String> = policy.as_args().iter().map(|a| a.to_string_lossy().into_owned()).collect();
        assert_eq!(policy_args[..3], ["--sandbox", "--write", "/work/p"]);
        assert_eq!(policy_args.last().map(String::as_str), Some("--no-network"));
        let dashes = wrapped.iter().position(|arg| arg == "--").unwrap();
        assert_eq!(wrapped[dashes - policy_args.len()..dashes], policy_args[..]);
        assert_eq!(wrapped[dashes + 1..], ["sh", "-c", "echo hi"]);
        // Without a trampoline nothing is sandboxed, and nothing says it is.
        let unsupervised = ChildSettings { supervisor: None, ..settings };
        let launcher = Launcher::for_session(&unsupervised, &sandbox, &[PathBuf::from("/work/p")]);
        assert_eq!(launcher.confinement(), Confinement::Off);
        assert!(launcher.for_terminal(&line, true).is_err());
    }

    /// Unsupervised children still lose the secrets and lead their own group.
    #[cfg(unix)]
    #[tokio::test]
    async fn unsupervised_children_get_the_rule_and_a_group() {
        // A variable of ours that the shell does not set by itself.
        let shell_sets = ["PATH", "PWD", "OLDPWD", "SHLVL", "IFS", "PPID", "OPTIND", "PS1", "PS2", "PS4", "_"];
        let secret = std::env::vars()
            .map(|(name, _)| name)
            .find(|name| {
                !shell_sets.contains(&name.as_str())
                    && name.chars().all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
            })
            .expect("the test process has an environment variable");
        let settings = ChildSettings {
            supervisor: None,
            secret_vars: vec![secret.clone()],
            remove_env: Vec::new(),
            keep_env: Vec::new(),
            shell: None,
        };
        let launcher = Launcher::new(&settings);
        // It waits for its stdin to close, so that its group can be looked at.
        let script = format!("echo \"secret=${{{secret}-unset}} added=$ADDED\"; read line");
        let line = CommandLine::new("/bin/sh", &["-c".to_owned(), script]);
        let mut child = launcher
            .spawn(&line, false, |command| {
                command.env("ADDED", "yes").stdin(std::process::Stdio::piped()).stdout(std::process::Stdio::piped());
            })
            .unwrap();
        let pid = child.id().unwrap();
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
        let fields: Vec<&str> = stat.rsplit_once(") ").unwrap().1.split_whitespace().collect();
        assert_eq!(fields[2], pid.to_string(), "it leads its own group: {stat}");
        drop(child.take_stdin());
        let mut stdout = child.take_stdout().unwrap();
        let mut output = String::new();
        tokio::io::AsyncReadExt::read_to_string(&mut stdout, &mut output).await.unwrap();
        // `read` finds the end of its input: status 1.
        assert_eq!(child.wait().await.unwrap(), Ending::Code(1));
        assert_eq!(output, "secret=unset added=yes\n");
    }

    #[test]
    fn endings_describe_themselves() {
        assert_eq!(Ending::Code(3).describe(), "it exited with status 3");
        let killed = Ending::Signal { number: 9, name: "SIGKILL".to_owned(), status: "signal: 9 (SIGKILL)".to_owned() };
        assert_eq!(killed.describe(), "it was killed by signal 9");
        assert_eq!(killed.code(), None);
    }
}
