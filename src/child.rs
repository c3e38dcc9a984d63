//! How lathe starts a process: the environment it gets, the supervision
//! that keeps it from outliving lathe, and the sandbox it may run in.
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
//! # Supervision
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
//! namespace, Landlock, a seccomp filter: see `crate::sandbox`) before it
//! starts the program, and refuses to start it when a part it was not told
//! to leave out cannot be put on, or when Landlock enforces nothing. The
//! restriction is inherited by the program and everything it starts. A
//! sandboxed process is never started another way: when the trampoline is
//! unknown or cannot be started, the start fails.
//!
//! `lathe sandbox-exec --probe` tries every part of the sandbox on itself
//! and prints what held (see `crate::sandbox::probe`).
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
//!   It also looks at its parent once a second, which covers platforms
//!   without `PR_SET_PDEATHSIG` (everything but Linux): there a child
//!   outlives lathe by up to a second.
//! - Between a program's exit and lathe's kill of its group, the group's
//!   leftovers (background jobs) are lathe's to kill; if lathe is killed in
//!   that instant they stay.
//!
//! This module knows processes and environment variables, nothing of ACP,
//! MCP, the model or the tools that use it.

use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::OnceLock;
use std::time::Duration;

use globset::{Glob, GlobSet, GlobSetBuilder};
use tokio::process::{Child, Command};

use crate::config::{ChildSettings, SandboxSettings};
use crate::sandbox::{Confinement, SandboxPart, SandboxPolicy, SessionSandbox};

/// The hidden subcommand of the `lathe` binary that runs [`sandbox_exec`].
pub const TRAMPOLINE_SUBCOMMAND: &str = "sandbox-exec";

/// The signal the kernel sends the trampoline when lathe dies.
const DEATH_SIGNAL: nix::sys::signal::Signal = nix::sys::signal::Signal::SIGUSR1;

/// How often the trampoline looks at its parent, besides the kernel's signal.
const PARENT_POLL: Duration = Duration::from_secs(1);

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
        secret || (self.remove.is_match(name) && !self.keep.is_match(name))
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
}

impl Launcher {
    /// The launcher the configuration describes. A pattern that is not a
    /// glob (the config refuses them) is left out, with a warning.
    pub fn new(settings: &ChildSettings) -> Launcher {
        let env = EnvRule::new(&settings.secret_vars, &settings.remove_env, &settings.keep_env).unwrap_or_else(|err| {
            tracing::warn!(%err, "ignoring the [child_env] patterns");
            EnvRule::new(&settings.secret_vars, &[], &[]).unwrap_or_default()
        });
        Launcher { supervisor: settings.supervisor.clone(), env, sandbox: None }
    }

    /// The launcher for a session with these `roots`: as [`Launcher::new`],
    /// with the session's sandbox (see `crate::sandbox`).
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
    pub fn read_denials(&self) -> crate::sandbox::ReadDenials {
        self.sandbox.as_ref().map(|sandbox| sandbox.read_denials().clone()).unwrap_or_default()
    }

    /// Tells a session's permission policy what the sandbox amounts to and
    /// what it keeps from commands.
    pub fn inform(&self, policy: &mut crate::permission::Policy) {
        policy.set_confinement(self.confinement());
        policy.set_read_denials(self.read_denials());
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
        })
    }

    /// The environment rule.
    pub fn env_rule(&self) -> &EnvRule {
        &self.env
    }

    /// Starts `program` with `args`, supervised when possible: its
    /// environment scrubbed, in a new process group (so its pid is the
    /// group's id), killed (SIGKILL) if the returned child is dropped while
    /// it runs. `setup` sets the rest (directory, stdio, added variables,
    /// which win over the rule). If the trampoline cannot be started (lathe's
    /// executable was removed, say), the program is started directly, unless
    /// it was to be `sandboxed`: that start fails instead, as it does when
    /// the session's sandbox is not available.
    pub fn spawn(
        &self,
        program: &str,
        args: &[String],
        sandboxed: bool,
        setup: impl Fn(&mut Command),
    ) -> std::io::Result<Child> {
        if sandboxed {
            let (supervisor, policy) = self.sandbox_policy()?;
            let mut command = self.trampoline(supervisor, program, args, Some(policy));
            setup(&mut command);
            return command.spawn();
        }
        if let Some(supervisor) = &self.supervisor {
            let mut command = self.trampoline(supervisor, program, args, None);
            setup(&mut command);
            match command.spawn() {
                Ok(child) => return Ok(child),
                Err(err) => {
                    tracing::warn!(supervisor = %supervisor.display(), %err, "cannot start lathe's trampoline; starting the process unsupervised");
                }
            }
        }
        let mut command = self.command(OsStr::new(program));
        command.args(args);
        setup(&mut command);
        command.spawn()
    }

    /// `lathe sandbox-exec --parent <pid> [sandbox] -- program args`.
    fn trampoline(
        &self,
        supervisor: &Path,
        program: &str,
        args: &[String],
        sandbox: Option<&SandboxPolicy>,
    ) -> Command {
        let mut command = self.command(supervisor.as_os_str());
        command.arg(TRAMPOLINE_SUBCOMMAND).arg("--parent").arg(std::process::id().to_string());
        if let Some(policy) = sandbox {
            command.args(policy.as_args());
        }
        command.arg("--").arg(program).args(args);
        command
    }

    /// The program and arguments to hand an editor terminal for `program
    /// args`: through the trampoline (which removes the secrets from the
    /// editor's environment, applies the sandbox when `sandboxed`, and
    /// `exec`s it) when lathe's executable is known. Fails when it was to be
    /// sandboxed and cannot be.
    pub fn for_terminal(
        &self,
        program: &str,
        args: &[String],
        sandboxed: bool,
    ) -> std::io::Result<(String, Vec<String>)> {
        let policy = if sandboxed { Some(self.sandbox_policy()?.1) } else { None };
        match self.supervisor.as_deref().and_then(Path::to_str) {
            Some(supervisor) => {
                let mut wrapped = vec![TRAMPOLINE_SUBCOMMAND.to_owned()];
                wrapped.extend(self.env.as_args());
                if let Some(policy) = policy {
                    // ACP carries arguments as strings: a path that is not
                    // UTF-8 becomes one that does not exist, so it is not
                    // writable (the sandbox only gets stricter).
                    wrapped.extend(policy.as_args().iter().map(|arg| arg.to_string_lossy().into_owned()));
                }
                wrapped.push("--".to_owned());
                wrapped.push(program.to_owned());
                wrapped.extend(args.iter().cloned());
                Ok((supervisor.to_owned(), wrapped))
            }
            None if sandboxed => {
                Err(std::io::Error::other("the sandbox is applied by lathe's own executable, which is unknown"))
            }
            None => Ok((program.to_owned(), args.to_vec())),
        }
    }

    fn command(&self, program: &OsStr) -> Command {
        let mut command = Command::new(program);
        for name in self.env.removed_here() {
            command.env_remove(name);
        }
        // Its own group, so that one signal reaches everything it starts.
        command.process_group(0).kill_on_drop(true);
        command
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
    /// `crate::sandbox`); refuse to run when it cannot be put on.
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
    /// process's exit does not wait for its teardown (see `crate::sandbox`).
    #[arg(long = "ns-keeper", value_name = "NAME", requires = "sandbox")]
    pub ns_keeper: Option<String>,
    /// Try every part of the sandbox on this process, print what held (one
    /// line of JSON) and exit.
    #[arg(long, conflicts_with = "sandbox")]
    pub probe: bool,
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
    let Some((program, rest)) = args.command.split_first() else {
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
            .kept_by(args.ns_keeper.clone());
        crate::sandbox::apply(&policy).map_err(|err| TrampolineError::Sandbox(err.to_string()))?;
    }
    match args.parent {
        None => {
            let mut command = std::process::Command::new(program);
            command.args(rest);
            for name in rule.removed_here() {
                command.env_remove(name);
            }
            Err(start_error(exec(command)))
        }
        Some(parent) => {
            let env = std::env::vars_os().filter(|(name, _)| !rule.removes(name)).collect();
            supervise::run(&args.command, env, parent, start_error)
        }
    }
}

/// `lathe sandbox-exec --probe`: what each part of the sandbox does on this
/// machine, as the one line of JSON `crate::sandbox::probe` reads. The
/// process must have a single thread, and exit afterwards.
pub fn sandbox_probe() -> String {
    serde_json::to_string(&crate::sandbox::probe_here()).unwrap_or_default()
}

/// Replaces this process by `command`; returns only if it could not.
fn exec(mut command: std::process::Command) -> std::io::Error {
    use std::os::unix::process::CommandExt;
    command.exec()
}

mod supervise {
    //! The supervising trampoline proper.
    //!
    //! The signals it waits for are blocked before the command starts, so
    //! none can end the trampoline early or slip by unseen; the command is
    //! started with `posix_spawn`, which gives it an empty signal mask and
    //! default dispositions (std's `Command` would pass our mask on, and
    //! Rust's ignored SIGPIPE with it).

    use std::ffi::{CString, OsString};
    use std::os::unix::ffi::OsStrExt;
    use std::process::ExitCode;

    use nix::spawn::{PosixSpawnAttr, PosixSpawnFileActions, PosixSpawnFlags, posix_spawnp};
    use nix::sys::signal::{SigSet, Signal, kill, killpg};
    use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
    use nix::unistd::{Pid, getpgrp, getpid, getppid};

    use super::{DEATH_SIGNAL, PARENT_POLL, TrampolineError};

    /// Signals the trampoline passes on to its command instead of dying of them.
    const PASSED_ON: [Signal; 4] = [Signal::SIGTERM, Signal::SIGINT, Signal::SIGHUP, Signal::SIGQUIT];

    pub(super) fn run(
        command: &[OsString],
        env: Vec<(OsString, OsString)>,
        parent: u32,
        start_error: impl Fn(std::io::Error) -> TrampolineError,
    ) -> Result<ExitCode, TrampolineError> {
        let failed = |what: &str, err: nix::Error| TrampolineError::Supervise(format!("{what}: {err}"));
        let parent = Pid::from_raw(i32::try_from(parent).unwrap_or(i32::MAX));
        // Only a trampoline leading its own group may kill the group.
        let group = (getpgrp() == getpid()).then(getpgrp);
        let mut waited: SigSet = PASSED_ON.into_iter().collect();
        waited.add(Signal::SIGCHLD);
        waited.add(DEATH_SIGNAL);
        waited.thread_block().map_err(|err| failed("blocking signals", err))?;
        // The death signal is held for `wait` from here, so asking for it
        // and then looking at the parent leaves no gap.
        #[cfg(target_os = "linux")]
        nix::sys::prctl::set_pdeathsig(DEATH_SIGNAL).map_err(|err| failed("PR_SET_PDEATHSIG", err))?;
        if getppid() != parent {
            orphaned(group, None);
        }
        let child = spawn(command, &env, &waited).map_err(start_error)?;
        // The thread inherits the blocked signals, so `wait` below gets them all.
        std::thread::Builder::new()
            .name("parent-watch".to_owned())
            .spawn(move || {
                loop {
                    std::thread::sleep(PARENT_POLL);
                    if getppid() != parent {
                        orphaned(group, Some(child));
                    }
                }
            })
            .map_err(|err| TrampolineError::Supervise(format!("starting a thread: {err}")))?;
        loop {
            match waitpid(child, Some(WaitPidFlag::WNOHANG)) {
                Ok(WaitStatus::Exited(_, code)) => return Ok(ExitCode::from(u8::try_from(code & 0xff).unwrap_or(1))),
                Ok(WaitStatus::Signaled(_, signal, _)) => return Ok(die_of(signal, &waited)),
                Ok(_) => {}
                Err(err) => return Err(failed("waiting for the command", err)),
            }
            let signal = waited.wait().map_err(|err| failed("waiting for a signal", err))?;
            if PASSED_ON.contains(&signal) {
                let _ = kill(child, signal);
            }
            // Whatever woke us (the death signal, or any other), the parent decides.
            if getppid() != parent {
                orphaned(group, Some(child));
            }
        }
    }

    /// Starts the command in our group, with an empty signal mask and the
    /// default action for every signal we wait for (and SIGPIPE, which Rust
    /// ignores).
    fn spawn(command: &[OsString], env: &[(OsString, OsString)], waited: &SigSet) -> std::io::Result<Pid> {
        let c_string = |bytes: &[u8]| {
            CString::new(bytes).map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidInput, "a NUL byte"))
        };
        let argv = command.iter().map(|arg| c_string(arg.as_bytes())).collect::<Result<Vec<_>, _>>()?;
        let Some(program) = argv.first() else { return Err(std::io::ErrorKind::InvalidInput.into()) };
        let envp = env
            .iter()
            .map(|(name, value)| c_string(&[name.as_bytes(), b"=", value.as_bytes()].concat()))
            .collect::<Result<Vec<_>, _>>()?;
        let mut defaults = *waited;
        defaults.add(Signal::SIGPIPE);
        let mut attr = PosixSpawnAttr::init()?;
        attr.set_sigmask(&SigSet::empty())?;
        attr.set_sigdefault(&defaults)?;
        attr.set_flags(PosixSpawnFlags::POSIX_SPAWN_SETSIGMASK | PosixSpawnFlags::POSIX_SPAWN_SETSIGDEF)?;
        let actions = PosixSpawnFileActions::init()?;
        Ok(posix_spawnp(program, &actions, &attr, &argv, &envp)?)
    }

    /// lathe is gone: everything in the group goes, this process included.
    fn orphaned(group: Option<Pid>, child: Option<Pid>) -> ! {
        match (group, child) {
            (Some(group), _) => {
                let _ = killpg(group, Signal::SIGKILL);
            }
            (None, Some(child)) => {
                let _ = kill(child, Signal::SIGKILL);
            }
            (None, None) => {}
        }
        std::process::exit(137)
    }

    /// Ends this process by `signal`, as the command ended, without a core
    /// dump of the trampoline. Where that cannot be (SIGPIPE, which Rust
    /// ignores; a signal whose default is not to terminate), the exit code
    /// a shell would give: 128 + the signal's number.
    fn die_of(signal: Signal, waited: &SigSet) -> ExitCode {
        use nix::sys::resource::{Resource, getrlimit, setrlimit};
        if let Ok((_, hard)) = getrlimit(Resource::RLIMIT_CORE) {
            let _ = setrlimit(Resource::RLIMIT_CORE, 0, hard);
        }
        if waited.contains(signal) {
            let _ = SigSet::from(signal).thread_unblock();
        }
        // Twice: std's stack-overflow handler takes a first SIGSEGV or
        // SIGBUS that is not an overflow, restores the default and returns.
        for _ in 0..2 {
            let _ = nix::sys::signal::raise(signal);
        }
        ExitCode::from(u8::try_from(128 + signal as i32).unwrap_or(255))
    }
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
    }

    #[test]
    fn terminal_commands_carry_the_rule_through_the_trampoline() {
        let settings = ChildSettings {
            supervisor: Some(PathBuf::from("/opt/lathe")),
            secret_vars: vec!["OPENAI_API_KEY".to_owned()],
            remove_env: vec!["*_TOKEN".to_owned()],
            keep_env: vec!["GH_TOKEN".to_owned()],
        };
        let args = ["-c".to_owned(), "echo hi".to_owned()];
        let (program, wrapped) = Launcher::new(&settings).for_terminal("sh", &args, false).unwrap();
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
        let (program, plain) = Launcher::unsupervised().for_terminal("sh", &args, false).unwrap();
        assert_eq!((program.as_str(), plain.as_slice()), ("sh", &args[..]));

        // Sandboxed: the session's policy follows the rule, before the command.
        let sandbox = SandboxSettings { network: false, ..SandboxSettings::default() };
        let launcher = Launcher::for_session(&settings, &sandbox, &[PathBuf::from("/work/p")]);
        let Ok(policy) = launcher.sandbox().unwrap().policy() else {
            eprintln!("NOTE: no sandbox on this machine; checking that a sandboxed terminal is refused");
            assert!(launcher.for_terminal("sh", &args, true).is_err());
            return;
        };
        let (_, wrapped) = launcher.for_terminal("sh", &args, true).unwrap();
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
        assert!(launcher.for_terminal("sh", &args, true).is_err());
    }

    /// Unsupervised children still lose the secrets and lead their own group.
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
        };
        let launcher = Launcher::new(&settings);
        // It waits for its stdin to close, so that its group can be looked at.
        let script = format!("echo \"secret=${{{secret}-unset}} added=$ADDED\"; read line");
        let mut child = launcher
            .spawn("/bin/sh", &["-c".to_owned(), script], false, |command| {
                command.env("ADDED", "yes").stdin(std::process::Stdio::piped()).stdout(std::process::Stdio::piped());
            })
            .unwrap();
        let pid = child.id().unwrap();
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
        let fields: Vec<&str> = stat.rsplit_once(") ").unwrap().1.split_whitespace().collect();
        assert_eq!(fields[2], pid.to_string(), "it leads its own group: {stat}");
        drop(child.stdin.take());
        let output = child.wait_with_output().await.unwrap();
        assert_eq!(String::from_utf8(output.stdout).unwrap(), "secret=unset added=yes\n");
    }
}
