//! The sandbox commands run in (issue 14): a policy per session (read
//! anywhere; create, change, rename or remove files only beneath the session
//! roots, the system temp directory, `/dev/shm`, the terminal and null
//! devices and the configured `writable` paths; with `network = false`, no
//! TCP connect or bind), applied with Landlock.
//!
//! lathe's trampoline (`lathe sandbox-exec`, see `crate::child`) restricts
//! itself with [`restrict_self`] before it starts the command. A Landlock
//! domain is inherited across `fork` and `exec` and can never be left or
//! widened, so the restriction holds for the command and everything it
//! starts, and the crate needs no `pre_exec` (and no `unsafe`).
//!
//! The rights asked for are Landlock ABI 3's writes (make, remove, write,
//! truncate, link or rename across directories) and ABI 4's TCP bind and
//! connect. The crate downgrades what the running kernel lacks and says what
//! it enforced ([`Enforcement`], its `RulesetStatus`); lathe reports exactly
//! that and never claims more. [`probe`] finds it out once per process, on
//! a throwaway thread (Landlock restricts the calling thread only), so a
//! session knows before its first command.
//!
//! Limits, by design or by Landlock: reads are not restricted; UDP and Unix
//! sockets are not filtered (ABI 4 to 9 know TCP only); what was already
//! open or permitted before the restriction (inherited descriptors, a
//! server reached through an open socket) stays usable; `sudo` and other
//! set-user-id programs cannot gain privileges inside (`no_new_privs`).
//!
//! Also here: the conservative reading of a failed command's output that
//! tells the model the sandbox may have refused it ([`suspected_denial`]).
//!
//! This module knows Landlock, paths and text; nothing of ACP, permissions
//! or how processes are started.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use crate::config::{SANDBOX_UNAVAILABLE_ENV, SandboxMode, SandboxSettings};

/// Device files and scratch space every sandboxed command may write: output
/// thrown away, terminals, and the shared memory directory programs use
/// like the temp directory (POSIX semaphores, Python's multiprocessing).
const ALWAYS_WRITABLE: [&str; 7] =
    ["/dev/null", "/dev/zero", "/dev/full", "/dev/tty", "/dev/pts", "/dev/ptmx", "/dev/shm"];

/// The trampoline's flag that turns the sandbox on.
pub const SANDBOX_FLAG: &str = "--sandbox";
/// The trampoline's flag naming one writable path.
pub const WRITE_FLAG: &str = "--write";
/// The trampoline's flag that turns TCP off.
pub const NO_NETWORK_FLAG: &str = "--no-network";

/// What a sandboxed command may do: write beneath these paths (and
/// [`ALWAYS_WRITABLE`]), and use TCP or not.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SandboxPolicy {
    writable: Vec<PathBuf>,
    network: bool,
}

impl SandboxPolicy {
    /// Writes allowed beneath `writable`, TCP allowed when `network`.
    pub fn new(writable: Vec<PathBuf>, network: bool) -> SandboxPolicy {
        SandboxPolicy { writable, network }
    }

    /// A session's policy: its `roots`, the system temp directory and the
    /// configured `extra` paths writable.
    pub fn for_session(roots: &[PathBuf], extra: &[PathBuf], network: bool) -> SandboxPolicy {
        let mut writable: Vec<PathBuf> = roots.to_vec();
        writable.push(std::env::temp_dir());
        writable.extend(extra.iter().cloned());
        let mut seen = std::collections::HashSet::new();
        writable.retain(|path| seen.insert(path.clone()));
        SandboxPolicy { writable, network }
    }

    /// The writable paths, as given (the devices come on top).
    pub fn writable(&self) -> &[PathBuf] {
        &self.writable
    }

    /// Whether TCP is allowed.
    pub fn network(&self) -> bool {
        self.network
    }

    /// The policy as trampoline arguments (see `crate::child`).
    pub fn as_args(&self) -> Vec<OsString> {
        let mut args = vec![OsString::from(SANDBOX_FLAG)];
        for path in &self.writable {
            args.push(OsString::from(WRITE_FLAG));
            args.push(path.as_os_str().to_owned());
        }
        if !self.network {
            args.push(OsString::from(NO_NETWORK_FLAG));
        }
        args
    }

    /// One sentence for the model: where it may write and whether the network is on.
    pub fn describe(&self) -> String {
        let places: Vec<String> = self.writable.iter().map(|path| format!("`{}`", path.display())).collect();
        let network = if self.network { "network allowed" } else { "no network (TCP connect and bind are refused)" };
        format!("it may write only in {} (and /dev/null, /dev/shm); {network}", places.join(", "))
    }
}

/// How much of a policy the kernel enforces: Landlock's `RulesetStatus`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Enforcement {
    /// Everything asked for.
    Full,
    /// Part of it (an older kernel): say which part is missing.
    Partial,
    /// Nothing: no Landlock here.
    None,
}

/// What the sandbox amounts to on this machine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Status {
    /// How much is enforced.
    pub enforcement: Enforcement,
    /// What was found, for people ("Landlock ABI 7: fully enforced").
    pub detail: String,
}

impl Status {
    /// No sandbox, for `reason` (which completes "the sandbox is unavailable: ...").
    pub fn unavailable(reason: impl Into<String>) -> Status {
        Status { enforcement: Enforcement::None, detail: reason.into() }
    }
}

/// Why the sandbox could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    /// Landlock refused the ruleset (or a system call failed).
    #[error("Landlock: {0}")]
    Landlock(String),
    /// Not a Linux kernel.
    #[error("Landlock exists only on Linux")]
    NotLinux,
}

/// Restricts the calling thread, and everything it starts from now on, to
/// `policy`. Returns what the kernel enforced, which may be nothing: the
/// caller decides whether to go on.
#[cfg(target_os = "linux")]
pub fn restrict_self(policy: &SandboxPolicy) -> Result<Status, SandboxError> {
    use landlock::{
        ABI, AccessFs, AccessNet, LandlockStatus, Ruleset, RulesetAttr, RulesetCreatedAttr, RulesetStatus,
        path_beneath_rules,
    };
    let failed = |err: landlock::RulesetError| SandboxError::Landlock(err.to_string());
    // ABI 3's writes: not ABI 5's device ioctls, which would break programs
    // that drive a GPU or a terminal and are no file writes.
    let writes = AccessFs::from_write(ABI::V3);
    let mut ruleset = Ruleset::default().handle_access(writes).map_err(failed)?;
    if !policy.network {
        ruleset = ruleset.handle_access(AccessNet::BindTcp | AccessNet::ConnectTcp).map_err(failed)?;
    }
    let paths = policy.writable.iter().map(PathBuf::as_path).chain(ALWAYS_WRITABLE.iter().map(Path::new));
    let status = ruleset
        .create()
        .map_err(failed)?
        .add_rules(path_beneath_rules(paths, writes))
        .map_err(failed)?
        .restrict_self()
        .map_err(failed)?;
    let abi = match status.landlock {
        LandlockStatus::Available { effective_abi, kernel_abi } => kernel_abi.unwrap_or(effective_abi as i32),
        LandlockStatus::NotEnabled => {
            return Ok(Status::unavailable(
                "this kernel has Landlock but it is not enabled (add `landlock` to the `lsm=` boot parameter)",
            ));
        }
        LandlockStatus::NotImplemented => {
            return Ok(Status::unavailable("this kernel has no Landlock (Linux 5.13 or later has it)"));
        }
    };
    Ok(match status.ruleset {
        RulesetStatus::FullyEnforced => {
            Status { enforcement: Enforcement::Full, detail: format!("Landlock ABI {abi}: fully enforced") }
        }
        RulesetStatus::PartiallyEnforced => {
            let missing = if abi < 2 {
                "renames and links across directories are not restricted (Linux 5.19 or later restricts them)"
            } else if abi < 3 {
                "truncating files is not restricted (Linux 6.2 or later restricts it)"
            } else {
                "TCP is not restricted, so `network = false` does not hold (Linux 6.7 or later restricts it)"
            };
            Status {
                enforcement: Enforcement::Partial,
                detail: format!("Landlock ABI {abi}: partly enforced: {missing}"),
            }
        }
        RulesetStatus::NotEnforced => Status::unavailable(format!("Landlock ABI {abi} enforced nothing")),
    })
}

/// Landlock exists only on Linux.
#[cfg(not(target_os = "linux"))]
pub fn restrict_self(_policy: &SandboxPolicy) -> Result<Status, SandboxError> {
    Err(SandboxError::NotLinux)
}

/// What restricting a process with a policy that has `network` (on or off)
/// would enforce here: found once per process, on a thread of its own that
/// restricts itself and ends (Landlock restricts only the calling thread).
pub fn probe(network: bool) -> Status {
    static PROBED: [std::sync::OnceLock<Status>; 2] = [const { std::sync::OnceLock::new() }; 2];
    PROBED[usize::from(network)]
        .get_or_init(|| {
            let policy = SandboxPolicy::new(Vec::new(), network);
            let probed = std::thread::Builder::new()
                .name("sandbox-probe".to_owned())
                .spawn(move || restrict_self(&policy))
                .map_err(|err| format!("cannot start a thread: {err}"))
                .and_then(|thread| thread.join().map_err(|_| "the probe panicked".to_owned()));
            match probed {
                Ok(Ok(status)) => status,
                Ok(Err(err)) => Status::unavailable(err.to_string()),
                Err(err) => Status::unavailable(err),
            }
        })
        .clone()
}

/// How a session's commands relate to the sandbox: what the permission
/// policy needs to know.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Confinement {
    /// `[sandbox] mode = "required"` and fully enforced: every command runs
    /// in the sandbox (full-auto too), and none may leave it.
    Required,
    /// Fully enforced: commands run in it, except in full-auto and when the
    /// user lets one out.
    Enforced,
    /// Partly enforced (an older kernel): commands still run in it as above,
    /// but nothing runs unasked on its strength.
    Partial,
    /// No sandbox: `[sandbox] mode = "off"`, or none is available here.
    Off,
    /// `required`, and the sandbox is not fully enforced: commands are
    /// refused. Says why.
    Refused(String),
}

impl Confinement {
    /// Whether commands run in a sandbox (all or some of them).
    pub fn in_use(&self) -> bool {
        match self {
            Confinement::Required | Confinement::Enforced | Confinement::Partial => true,
            Confinement::Off | Confinement::Refused(_) => false,
        }
    }
}

/// A session's sandbox: the configured mode, the policy for its roots, and
/// what this machine enforces of it.
#[derive(Debug, Clone)]
pub struct SessionSandbox {
    mode: SandboxMode,
    policy: SandboxPolicy,
    status: Status,
}

impl SessionSandbox {
    /// The sandbox for a session with these `roots`. `trampoline` says
    /// whether lathe's own executable is known (without it nothing can be
    /// sandboxed). Probes the kernel once per process.
    pub fn new(settings: &SandboxSettings, roots: &[PathBuf], trampoline: bool) -> SessionSandbox {
        let policy = SandboxPolicy::for_session(roots, &settings.writable, settings.network);
        let status = if settings.mode == SandboxMode::Off {
            Status::unavailable("`[sandbox] mode = \"off\"`")
        } else if settings.force_unavailable {
            Status::unavailable(format!("{SANDBOX_UNAVAILABLE_ENV}=1 is set"))
        } else if !trampoline {
            Status::unavailable("lathe's own executable is unknown, and the sandbox is applied by it")
        } else {
            probe(settings.network)
        };
        SessionSandbox { mode: settings.mode, policy, status }
    }

    /// What the permission policy needs to know.
    pub fn confinement(&self) -> Confinement {
        match (self.mode, self.status.enforcement) {
            (SandboxMode::Off, _) | (SandboxMode::Auto, Enforcement::None) => Confinement::Off,
            (SandboxMode::Auto, Enforcement::Full) => Confinement::Enforced,
            (SandboxMode::Auto, Enforcement::Partial) => Confinement::Partial,
            (SandboxMode::Required, Enforcement::Full) => Confinement::Required,
            (SandboxMode::Required, Enforcement::Partial | Enforcement::None) => {
                Confinement::Refused(self.status.detail.clone())
            }
        }
    }

    /// The policy to run a process under, or why none can be used.
    pub fn policy(&self) -> Result<&SandboxPolicy, String> {
        match self.confinement() {
            Confinement::Required | Confinement::Enforced | Confinement::Partial => Ok(&self.policy),
            Confinement::Off | Confinement::Refused(_) => {
                Err(format!("the sandbox is not available: {}", self.status.detail))
            }
        }
    }

    /// What the machine enforces.
    pub fn status(&self) -> &Status {
        &self.status
    }

    /// What the user should be told once per session: that the sandbox is
    /// weaker than asked for, and what lathe does about it. `None` when it
    /// is fully enforced or turned off.
    pub fn notice(&self) -> Option<(String, String)> {
        let detail = &self.status.detail;
        match self.confinement() {
            Confinement::Required | Confinement::Enforced | Confinement::Off => None,
            Confinement::Partial => Some((
                "The command sandbox is only partly enforced".to_owned(),
                format!(
                    "{detail}. Commands still run in it, but in auto mode each one asks first, as lathe cannot \
                     promise what the sandbox would not hold."
                ),
            )),
            Confinement::Refused(_) => Some((
                "Commands are refused: the sandbox is required but not available".to_owned(),
                format!(
                    "{detail}. With `[sandbox] mode = \"required\"`, lathe runs no shell command and starts no \
                     sandboxed MCP server without a fully enforced sandbox."
                ),
            )),
        }
        .or_else(|| {
            (self.mode == SandboxMode::Auto && self.status.enforcement == Enforcement::None).then(|| {
                (
                    "Commands run without a sandbox".to_owned(),
                    format!(
                        "The sandbox is not available: {detail}. Commands run unconfined, so in auto mode each one \
                         asks first; MCP servers marked `sandbox = true` do not start."
                    ),
                )
            })
        })
    }
}

/// Phrases a refusal by the sandbox shows up as: EACCES ("Permission
/// denied", which Landlock gives for a write outside the policy and for a
/// refused connect) and EPERM ("Operation not permitted", which some tools
/// print for it). Matched without regard to case.
const DENIAL_PHRASES: [&str; 4] = ["permission denied", "operation not permitted", "eacces", "eperm"];

/// Characters of the output line quoted back to the model.
const QUOTED_CHARS: usize = 200;

/// The line of a failed sandboxed command's output that suggests the sandbox
/// refused something, if one does. A heuristic, kept conservative: only an
/// access error counts, and the caller says what it saw, not that the sandbox
/// did it.
pub fn suspected_denial(output: &str) -> Option<String> {
    output
        .lines()
        .find(|line| {
            let lower = line.to_lowercase();
            DENIAL_PHRASES.iter().any(|phrase| lower.contains(phrase))
        })
        .map(|line| {
            let line = line.trim();
            let mut quoted: String = line.chars().take(QUOTED_CHARS).collect();
            if line.chars().count() > QUOTED_CHARS {
                quoted.push('…');
            }
            quoted
        })
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    /// Runs `body` on a thread restricted to `policy` (Landlock restricts
    /// the calling thread only, so the test process stays free).
    #[allow(clippy::unwrap_used)]
    fn in_sandbox<T: Send + 'static>(policy: SandboxPolicy, body: impl FnOnce() -> T + Send + 'static) -> (Status, T) {
        std::thread::spawn(move || {
            let status = restrict_self(&policy).unwrap();
            (status, body())
        })
        .join()
        .unwrap()
    }

    /// The kernel must have Landlock for these tests to mean anything; where
    /// it has none, the test says so and checks that nothing is claimed.
    #[allow(clippy::print_stderr)]
    fn landlock_here() -> bool {
        let status = probe(true);
        if status.enforcement == Enforcement::None {
            eprintln!("NOTE: no Landlock on this kernel ({}); checking the fallback only", status.detail);
            return false;
        }
        true
    }

    #[test]
    fn writes_stay_inside_the_writable_paths() {
        let root = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("kept"), "original").unwrap();
        let policy = SandboxPolicy::new(vec![root.path().to_path_buf()], true);
        let (root_path, outside_path) = (root.path().to_path_buf(), outside.path().to_path_buf());
        let (status, results) = in_sandbox(policy, move || {
            [
                std::fs::write(root_path.join("x"), "ok").map_err(|e| e.kind()),
                std::fs::write(outside_path.join("x"), "no").map_err(|e| e.kind()),
                std::fs::remove_file(outside_path.join("kept")).map_err(|e| e.kind()),
                std::fs::write(outside_path.join("kept"), "changed").map_err(|e| e.kind()),
                std::fs::create_dir(outside_path.join("d")).map_err(|e| e.kind()),
                std::fs::write("/dev/null", "discarded").map_err(|e| e.kind()),
            ]
        });
        if !landlock_here() {
            assert_eq!(status.enforcement, Enforcement::None);
            return;
        }
        assert_eq!(status.enforcement, Enforcement::Full, "{}", status.detail);
        let denied = Err(std::io::ErrorKind::PermissionDenied);
        assert_eq!(results, [Ok(()), denied, denied, denied, denied, Ok(())]);
        assert_eq!(std::fs::read_to_string(outside.path().join("kept")).unwrap(), "original");
        assert!(!outside.path().join("x").exists());
        assert!(root.path().join("x").exists());
        // Reads are not restricted.
        let reader = outside.path().join("kept");
        let (_, read) = in_sandbox(SandboxPolicy::new(Vec::new(), true), move || std::fs::read_to_string(reader).ok());
        assert_eq!(read.as_deref(), Some("original"));
    }

    #[test]
    fn network_off_refuses_tcp() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let address = listener.local_addr().unwrap();
        let connect = move || std::net::TcpStream::connect(address).map(drop).map_err(|err| err.kind());
        let (_, allowed) = in_sandbox(SandboxPolicy::new(Vec::new(), true), connect);
        let (status, refused) = in_sandbox(SandboxPolicy::new(Vec::new(), false), connect);
        assert_eq!(allowed, Ok(()));
        if !landlock_here() {
            return;
        }
        match status.enforcement {
            Enforcement::Full => assert_eq!(refused, Err(std::io::ErrorKind::PermissionDenied)),
            Enforcement::Partial => eprintln!("NOTE: {}; TCP not checked", status.detail),
            Enforcement::None => unreachable!("landlock_here said otherwise"),
        }
    }

    #[test]
    fn the_policy_as_arguments() {
        let policy =
            SandboxPolicy::for_session(&[PathBuf::from("/p"), PathBuf::from("/p")], &[PathBuf::from("/c")], false);
        let temp = std::env::temp_dir();
        assert_eq!(policy.writable(), [PathBuf::from("/p"), temp.clone(), PathBuf::from("/c")]);
        let args: Vec<OsString> = policy.as_args();
        let expected: Vec<OsString> = ["--sandbox", "--write", "/p", "--write"]
            .into_iter()
            .map(OsString::from)
            .chain([temp.into_os_string()])
            .chain(["--write", "/c", "--no-network"].into_iter().map(OsString::from))
            .collect();
        assert_eq!(args, expected);
        assert!(policy.describe().contains("`/p`") && policy.describe().contains("no network"));
    }

    #[test]
    fn denials_are_read_conservatively() {
        let table = [
            ("touch: cannot touch '/etc/x': Permission denied", true),
            ("PermissionError: [Errno 13] Permission denied: '/x'", true),
            ("rm: cannot remove 'f': Operation not permitted", true),
            ("curl: (7) Failed to connect to 127.0.0.1 port 80: Connection refused", false),
            ("error[E0425]: cannot find value `x` in this scope", false),
            ("test result: FAILED. 1 passed; 2 failed", false),
        ];
        for (output, seen) in table {
            assert_eq!(suspected_denial(&format!("building\n{output}\n")).is_some(), seen, "{output}");
        }
        assert_eq!(suspected_denial("a\n  x: Permission denied  \n").as_deref(), Some("x: Permission denied"));
        let long = format!("{} permission denied", "p".repeat(300));
        assert_eq!(suspected_denial(&long).unwrap().chars().count(), QUOTED_CHARS + 1);
    }

    /// The confinement and the once-per-session notice follow the kernel's
    /// `RulesetStatus` as it is, for each mode: full protection is claimed
    /// only when fully enforced; partly enforced still sandboxes but says so
    /// (and auto then asks); nothing enforced runs unconfined in auto (and
    /// says so) and refuses in required (issue 14's honest fallback).
    #[test]
    fn what_is_claimed_follows_the_enforcement_found() {
        use crate::config::SandboxMode;
        let sandbox = |mode, enforcement| SessionSandbox {
            mode,
            policy: SandboxPolicy::new(vec![PathBuf::from("/p")], true),
            status: Status { enforcement, detail: "Landlock ABI 3: TCP rules unsupported".to_owned() },
        };
        let table = [
            (SandboxMode::Auto, Enforcement::Full, Confinement::Enforced, None),
            (SandboxMode::Auto, Enforcement::Partial, Confinement::Partial, Some("only partly enforced")),
            (SandboxMode::Auto, Enforcement::None, Confinement::Off, Some("without a sandbox")),
            (SandboxMode::Required, Enforcement::Full, Confinement::Required, None),
            (
                SandboxMode::Required,
                Enforcement::Partial,
                Confinement::Refused("Landlock ABI 3: TCP rules unsupported".to_owned()),
                Some("Commands are refused"),
            ),
            (
                SandboxMode::Required,
                Enforcement::None,
                Confinement::Refused("Landlock ABI 3: TCP rules unsupported".to_owned()),
                Some("Commands are refused"),
            ),
            (SandboxMode::Off, Enforcement::Full, Confinement::Off, None),
        ];
        for (mode, enforcement, confinement, notice) in table {
            let sandbox = sandbox(mode, enforcement);
            assert_eq!(sandbox.confinement(), confinement, "{mode:?} with {enforcement:?}");
            let told = sandbox.notice();
            match notice {
                None => assert_eq!(told, None, "{mode:?} with {enforcement:?}"),
                Some(phrase) => {
                    let (title, body) = told.unwrap_or_else(|| panic!("a notice for {mode:?} with {enforcement:?}"));
                    assert!(title.contains(phrase), "{title}");
                    assert!(body.contains("Landlock ABI 3"), "the kernel's own finding is quoted: {body}");
                }
            }
            let usable = matches!(confinement, Confinement::Enforced | Confinement::Partial | Confinement::Required);
            assert_eq!(sandbox.policy().is_ok(), usable, "{mode:?} with {enforcement:?}");
        }
    }
}
