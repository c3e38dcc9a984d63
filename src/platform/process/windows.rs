//! Process trees on Windows: each child is the root of a Job Object with
//! `JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE` (process-wrap creates it suspended,
//! assigns it, then resumes it, so no grandchild escapes the job). Killing
//! terminates the job; dropping closes lathe's handle on it, and so does
//! lathe's death: the system then kills the whole tree. Each is started
//! with `CREATE_NO_WINDOW`: lathe has no console when an editor starts it,
//! and a console program started without the flag opens a window.

use std::ffi::OsString;
use std::process::ExitCode;
use std::sync::Arc;

use process_wrap::tokio::{ChildWrapper, CommandWrap, CreationFlags, JobObject, KillOnDrop};
use tokio::process::{ChildStderr, ChildStdin, ChildStdout, Command};
use tokio::sync::Notify;
use windows::Win32::System::Threading::CREATE_NO_WINDOW;

use super::{Ending, EnvRule, TrampolineError};

/// No trampoline for lathe's own children: the job's kill-on-close already
/// ties the tree to lathe's life.
pub(super) const SUPERVISED_BY_TRAMPOLINE: bool = false;

/// Nothing to do before the start: the job is made at `spawn`.
pub(super) fn prepare(_command: &mut Command) {}

/// Appended exactly as written: `cmd.exe` parses its own command line, by
/// rules std's quoting does not follow.
pub(super) fn raw_arg(command: &mut Command, text: &str) {
    command.raw_arg(text);
}

pub(super) fn spawn(command: Command) -> std::io::Result<Tree> {
    let mut wrapped = CommandWrap::from(command);
    wrapped.wrap(CreationFlags(CREATE_NO_WINDOW)).wrap(JobObject).wrap(KillOnDrop);
    let child = wrapped.spawn()?;
    Ok(Tree { child, kill: Arc::new(Notify::new()), finished: false })
}

/// The job's root process (inside process-wrap's job child, which holds the
/// job's handle), and the kill requests of [`Killer`]s.
pub(super) struct Tree {
    child: Box<dyn ChildWrapper>,
    kill: Arc<Notify>,
    finished: bool,
}

impl Tree {
    pub(super) fn take_stdio(&mut self) -> (Option<ChildStdin>, Option<ChildStdout>, Option<ChildStderr>) {
        (self.child.stdin().take(), self.child.stdout().take(), self.child.stderr().take())
    }

    pub(super) fn id(&self) -> Option<u32> {
        self.child.id()
    }

    /// The root's exit: process-wrap's own `wait` waits for every process
    /// in the job, which is not lathe's rule (what the root left behind is
    /// killed, not waited for), so this waits on the root inside it.
    pub(super) async fn wait(&mut self) -> std::io::Result<Ending> {
        loop {
            let requested = {
                let root = self.child.inner_mut().wait();
                tokio::select! {
                    status = root => return status.map(ending),
                    () = self.kill.notified() => true,
                }
            };
            if requested && !self.finished {
                let _ = self.child.start_kill();
            }
        }
    }

    /// No polite signal for a windowless tree: a kill.
    pub(super) fn terminate(&mut self) {
        self.kill();
    }

    pub(super) fn kill(&mut self) {
        if !self.finished {
            // An error means the job is gone already; nothing else to do.
            let _ = self.child.start_kill();
        }
    }

    pub(super) fn finish(&mut self) {
        self.kill();
        self.finished = true;
    }

    pub(super) fn killer(&self) -> Killer {
        Killer(Arc::clone(&self.kill))
    }
}

/// Asks the task waiting on a tree to kill it.
#[derive(Clone)]
pub(super) struct Killer(Arc<Notify>);

impl Killer {
    pub(super) fn kill(&self) {
        self.0.notify_one();
    }
}

/// Windows exit statuses are codes (a killed job's processes exit with 1).
pub(super) fn ending(status: std::process::ExitStatus) -> Ending {
    match status.code() {
        Some(code) => Ending::Code(code),
        None => Ending::Unknown(status.to_string()),
    }
}

/// The trampoline on Windows (editor terminals; lathe's own children never
/// use it): no `exec`, so the command is started in a kill-on-close job of
/// the trampoline's own, waited for, and its exit code returned. When the
/// editor kills the trampoline, the job's handle closes and the tree dies.
/// `--parent` needs nothing more: the job dies with the trampoline.
pub(super) fn run_trampoline(
    _parent: Option<u32>,
    command: &[OsString],
    verbatim: bool,
    rule: &EnvRule,
    start_error: impl Fn(std::io::Error) -> TrampolineError,
) -> Result<ExitCode, TrampolineError> {
    let Some((program, rest)) = command.split_first() else {
        return Err(start_error(std::io::ErrorKind::InvalidInput.into()));
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|err| TrampolineError::Supervise(format!("starting a runtime: {err}")))?;
    runtime.block_on(async {
        let mut exec = Command::new(program);
        match rest.split_last() {
            Some((last, before)) if verbatim => {
                exec.args(before);
                exec.raw_arg(last);
            }
            _ => {
                exec.args(rest);
            }
        }
        for name in rule.removed_here() {
            exec.env_remove(name);
        }
        let mut tree = spawn(exec).map_err(&start_error)?;
        let ending = tree.wait().await.map_err(|err| TrampolineError::Supervise(format!("waiting: {err}")))?;
        tree.finish();
        let code = ending.code().unwrap_or(1);
        match u8::try_from(code) {
            Ok(byte) => Ok(ExitCode::from(byte)),
            // `ExitCode` holds a byte; a Windows exit code is 32 bits (a
            // crash's NTSTATUS, 0xC0000005, comes as a negative i32), and
            // the editor must see it whole, not its low byte (which may be 0).
            // Nothing is left to drop: the tree is finished.
            Err(_) => std::process::exit(code),
        }
    })
}

#[cfg(test)]
mod tests {
    use std::path::Path;
    use std::process::Stdio;
    use std::time::{Duration, Instant};

    use crate::platform::process::{CommandLine, EnvRule, Launcher, Spawned, TrampolineError};

    /// A command whose child, started in the background and outliving it
    /// unless its tree is killed, appends to `beat.txt` as fast as it can,
    /// while the command itself spins. Returns once the child is writing.
    async fn a_command_with_a_busy_child(dir: &Path) -> Spawned {
        let line = CommandLine::new("cmd", &["/c".to_owned(), busy_scripts(dir).display().to_string()]);
        let child = Launcher::unsupervised()
            .spawn(&line, false, |command| {
                command.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null());
            })
            .unwrap();
        let started = Instant::now();
        while beat(dir) == 0 {
            assert!(started.elapsed() < Duration::from_secs(60), "the child never wrote");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        child
    }

    /// Writes the scripts of [`a_command_with_a_busy_child`] into `dir`;
    /// the one to run.
    fn busy_scripts(dir: &Path) -> std::path::PathBuf {
        std::fs::write(dir.join("beat.cmd"), "@echo off\r\n:loop\r\necho x>>\"%~dp0beat.txt\"\r\ngoto loop\r\n")
            .unwrap();
        std::fs::write(
            dir.join("root.cmd"),
            "@echo off\r\nstart \"\" /b cmd /c \"%~dp0beat.cmd\"\r\n:spin\r\ngoto spin\r\n",
        )
        .unwrap();
        dir.join("root.cmd")
    }

    fn beat(dir: &Path) -> u64 {
        std::fs::metadata(dir.join("beat.txt")).map(|meta| meta.len()).unwrap_or(0)
    }

    /// Whether anything still appends to `beat.txt`, once the kill has had
    /// a moment to land: its size stays the same over half a second.
    async fn still_beating(dir: &Path) -> bool {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let before = beat(dir);
        tokio::time::sleep(Duration::from_millis(500)).await;
        beat(dir) != before
    }

    /// Issue 26: a killed command takes the processes it started with it
    /// (the job is terminated, not only its root), and so does dropping it
    /// (lathe's cancel paths). Without the Job Object the background child
    /// goes on writing. Runs under wine on Linux (`.ci/run`).
    #[tokio::test]
    async fn a_killed_or_dropped_command_leaves_no_process_behind() {
        let dir = tempfile::tempdir().unwrap();
        let mut child = a_command_with_a_busy_child(dir.path()).await;
        child.kill();
        let ending = tokio::time::timeout(Duration::from_secs(10), child.wait()).await.unwrap().unwrap();
        assert!(!still_beating(dir.path()).await, "a child outlived the kill ({})", ending.describe());

        let dir = tempfile::tempdir().unwrap();
        let child = a_command_with_a_busy_child(dir.path()).await;
        drop(child);
        assert!(!still_beating(dir.path()).await, "a child outlived the drop");
    }

    /// Issue 26: the cmd.exe line an editor terminal's trampoline is given
    /// with `--verbatim` runs as written, inner quotes and all. Quoted
    /// again by std (`"\"echo ...\""`), cmd.exe would look for a program
    /// named `"echo ..."` and fail with 9009. Runs under wine.
    #[test]
    fn the_trampoline_writes_a_verbatim_line_as_it_is() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("out.txt");
        let line = format!("\"echo \"a b\">\"{}\"\"", out.display());
        let command: Vec<std::ffi::OsString> = ["cmd.exe", "/d", "/s", "/c", line.as_str()].map(Into::into).into();
        let rule = EnvRule::new(&[], &[], &[]).unwrap();
        let start_error = |source| TrampolineError::Start { program: "cmd.exe".to_owned(), source };
        super::run_trampoline(None, &command, true, &rule, start_error).unwrap();
        assert_eq!(std::fs::read_to_string(&out).unwrap().trim_end(), "\"a b\"", "{line}");
    }

    /// Set in the process the next test starts: that process is the trampoline.
    const TRAMPOLINE_PROCESS: &str = "LATHE_TEST_TRAMPOLINE_PROCESS";

    /// Issue 26: a lathe killed mid-command leaves no process behind. The
    /// test starts itself again as a process that runs the trampoline (its
    /// Job Object, kill-on-close, as lathe's own children have) around the
    /// busy command, then kills that process outright (`TerminateProcess`:
    /// no destructor runs, as when lathe is killed); the system closes its
    /// handle on the job, which kills the tree. Without kill-on-close the
    /// child goes on writing.
    #[tokio::test]
    async fn a_killed_trampoline_leaves_no_process_behind() {
        if let Some(dir) = std::env::var_os(TRAMPOLINE_PROCESS) {
            let root = busy_scripts(Path::new(&dir));
            let command = ["cmd".into(), "/c".into(), root.into_os_string()];
            let rule = EnvRule::new(&[], &[], &[]).unwrap();
            let start_error = |source| TrampolineError::Start { program: "cmd".to_owned(), source };
            // A runtime of its own, as in `lathe sandbox-exec`.
            let _ = std::thread::spawn(move || super::run_trampoline(None, &command, false, &rule, start_error)).join();
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let name = "platform::process::sys::tests::a_killed_trampoline_leaves_no_process_behind";
        let mut trampoline = tokio::process::Command::new(std::env::current_exe().unwrap())
            .args(["--exact", name, "--test-threads=1"])
            .env(TRAMPOLINE_PROCESS, dir.path())
            .kill_on_drop(true)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let started = Instant::now();
        while beat(dir.path()) == 0 {
            assert!(started.elapsed() < Duration::from_secs(60), "the child never wrote");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        trampoline.start_kill().unwrap();
        trampoline.wait().await.unwrap();
        assert!(!still_beating(dir.path()).await, "a child outlived the killed trampoline");
    }
}
