//! Process trees on Unix: a process group per child, killed with `killpg`;
//! lathe's supervising trampoline (`lathe sandbox-exec`), which keeps the
//! group from outliving lathe: `PR_SET_PDEATHSIG` on Linux, a kqueue on
//! macOS, a poll elsewhere (see the parent module's docs).

use std::ffi::OsString;
use std::process::ExitCode;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::process::{Child, ChildStderr, ChildStdin, ChildStdout, Command};

use super::{Ending, EnvRule, TrampolineError};

/// Children start through the trampoline when lathe's executable is known.
pub(super) const SUPERVISED_BY_TRAMPOLINE: bool = true;

/// The signal the kernel sends the trampoline when lathe dies.
const DEATH_SIGNAL: Signal = Signal::SIGUSR1;

/// How often the trampoline looks at its parent, besides the kernel's signal.
const PARENT_POLL: Duration = Duration::from_secs(1);

/// Its own group, so that one signal reaches everything it starts.
pub(super) fn prepare(command: &mut Command) {
    command.process_group(0);
}

/// Unix has no quoting: one more argument.
pub(super) fn raw_arg(command: &mut Command, text: &str) {
    command.arg(text);
}

pub(super) fn spawn(mut command: Command) -> std::io::Result<Tree> {
    let child = command.spawn()?;
    // Never 0 or 1: killpg(0) would signal our own group.
    let pgid = child.id().and_then(|pid| i32::try_from(pid).ok()).filter(|pid| *pid > 1).map(Pid::from_raw);
    Ok(Tree { child, group: Arc::new(Mutex::new(pgid)) })
}

/// A child and its process group (started with `process_group(0)`, so its
/// pid is the group's id). The group is `None` once finished.
pub(super) struct Tree {
    child: Child,
    group: Arc<Mutex<Option<Pid>>>,
}

impl Tree {
    pub(super) fn take_stdio(&mut self) -> (Option<ChildStdin>, Option<ChildStdout>, Option<ChildStderr>) {
        (self.child.stdin.take(), self.child.stdout.take(), self.child.stderr.take())
    }

    pub(super) fn id(&self) -> Option<u32> {
        self.child.id()
    }

    pub(super) async fn wait(&mut self) -> std::io::Result<Ending> {
        self.child.wait().await.map(ending)
    }

    pub(super) fn terminate(&mut self) {
        signal(&self.group, Signal::SIGTERM);
    }

    pub(super) fn kill(&mut self) {
        signal(&self.group, Signal::SIGKILL);
    }

    pub(super) fn finish(&mut self) {
        let mut group = self.group.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(pgid) = group.take() {
            let _ = killpg(pgid, Signal::SIGKILL);
        }
    }

    pub(super) fn killer(&self) -> Killer {
        Killer(Arc::clone(&self.group))
    }
}

impl Drop for Tree {
    fn drop(&mut self) {
        signal(&self.group, Signal::SIGKILL);
    }
}

/// Kills a group from elsewhere, unless it was finished.
#[derive(Clone)]
pub(super) struct Killer(Arc<Mutex<Option<Pid>>>);

impl Killer {
    pub(super) fn kill(&self) {
        signal(&self.0, Signal::SIGKILL);
    }
}

fn signal(group: &Mutex<Option<Pid>>, signal: Signal) {
    if let Some(pgid) = *group.lock().unwrap_or_else(PoisonError::into_inner) {
        // ESRCH (everyone already gone) is the good case; nothing else
        // can be done about other errors.
        let _ = killpg(pgid, signal);
    }
}

/// How an exit status reads.
pub(super) fn ending(status: std::process::ExitStatus) -> Ending {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => Ending::Code(code),
        (None, Some(number)) => {
            let name = match Signal::try_from(number) {
                Ok(signal) => signal.as_str().to_owned(),
                Err(_) => number.to_string(),
            };
            Ending::Signal { number, name, status: status.to_string() }
        }
        (None, None) => Ending::Unknown(status.to_string()),
    }
}

/// The trampoline after the sandbox: without a parent, `exec` the command
/// (the editor sees and kills it); with one, supervise it.
pub(super) fn run_trampoline(
    parent: Option<u32>,
    command: &[OsString],
    _verbatim: bool,
    rule: &EnvRule,
    start_error: impl Fn(std::io::Error) -> TrampolineError,
) -> Result<ExitCode, TrampolineError> {
    match parent {
        None => {
            let Some((program, rest)) = command.split_first() else {
                return Err(start_error(std::io::ErrorKind::InvalidInput.into()));
            };
            let mut exec = std::process::Command::new(program);
            exec.args(rest);
            for name in rule.removed_here() {
                exec.env_remove(name);
            }
            Err(start_error(self::exec(exec)))
        }
        Some(parent) => {
            let env = std::env::vars_os().filter(|(name, _)| !rule.removes(name)).collect();
            supervise::run(command, env, parent, start_error)
        }
    }
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

    use super::super::TrampolineError;
    use super::{DEATH_SIGNAL, PARENT_POLL};

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
        // Registered before the parent is looked at, so that no death slips by.
        let death = parent_death::Watch::new(parent).map_err(|err| failed("watching the parent", err))?;
        if getppid() != parent {
            orphaned(group, None);
        }
        let child = spawn(command, &env, &waited).map_err(start_error)?;
        // The thread inherits the blocked signals, so `wait` below gets them all.
        std::thread::Builder::new()
            .name("parent-watch".to_owned())
            .spawn(move || {
                loop {
                    death.wait();
                    if getppid() != parent || death.certain() {
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

    /// How the trampoline notices that lathe died, besides the signal
    /// Linux sends it.
    mod parent_death {
        use nix::unistd::Pid;

        /// A kqueue `EVFILT_PROC`/`NOTE_EXIT` registration for the parent:
        /// the kernel tells us the moment it exits.
        #[cfg(target_vendor = "apple")]
        pub(super) struct Watch(Option<nix::sys::event::Kqueue>);

        #[cfg(target_vendor = "apple")]
        impl Watch {
            /// Registers for the parent's exit. A parent already gone
            /// (`ESRCH`) leaves nothing to wait for: the caller's look at
            /// its parent sees it.
            pub(super) fn new(parent: Pid) -> nix::Result<Watch> {
                use nix::sys::event::{EvFlags, EventFilter, FilterFlag, KEvent, Kqueue};
                let queue = Kqueue::new()?;
                let Ok(ident) = usize::try_from(parent.as_raw()) else { return Ok(Watch(None)) };
                let exit = KEvent::new(ident, EventFilter::EVFILT_PROC, EvFlags::EV_ADD, FilterFlag::NOTE_EXIT, 0, 0);
                match queue.kevent(&[exit], &mut [], None) {
                    Ok(_) => Ok(Watch(Some(queue))),
                    Err(nix::errno::Errno::ESRCH) => Ok(Watch(None)),
                    Err(err) => Err(err),
                }
            }

            /// Returns when the parent has exited (or, should the queue
            /// fail, after a poll interval, as elsewhere).
            pub(super) fn wait(&self) {
                let mut events = [nix::sys::event::KEvent::new(
                    0,
                    nix::sys::event::EventFilter::EVFILT_PROC,
                    nix::sys::event::EvFlags::empty(),
                    nix::sys::event::FilterFlag::empty(),
                    0,
                    0,
                )];
                match &self.0 {
                    Some(queue) => match queue.kevent(&[], &mut events, None) {
                        Ok(n) if n > 0 => {}
                        Ok(_) | Err(_) => std::thread::sleep(super::PARENT_POLL),
                    },
                    None => std::thread::sleep(super::PARENT_POLL),
                }
            }

            /// Whether a return of [`Watch::wait`] means the parent is gone.
            pub(super) fn certain(&self) -> bool {
                self.0.is_some()
            }
        }

        /// Polling the parent: Linux (where `PR_SET_PDEATHSIG` does the
        /// prompt part) and the systems without kqueue.
        #[cfg(not(target_vendor = "apple"))]
        pub(super) struct Watch;

        #[cfg(not(target_vendor = "apple"))]
        impl Watch {
            pub(super) fn new(_parent: Pid) -> nix::Result<Watch> {
                Ok(Watch)
            }

            pub(super) fn wait(&self) {
                std::thread::sleep(super::PARENT_POLL);
            }

            pub(super) fn certain(&self) -> bool {
                false
            }
        }
    }
}
