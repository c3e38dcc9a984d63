//! The sandbox commands run in (issues 14, 25 and 26): one seam, one
//! implementation per system family. A session's policy
//! ([`SandboxPolicy`]), what this machine enforces of it ([`Status`],
//! [`Enforcement`]), what the permission policy is told ([`Confinement`],
//! [`SessionSandbox`]), how a command is started in it ([`launch_prefix`],
//! [`SandboxPolicy::as_args`]) and the reading of a failed command's output
//! are the same everywhere; putting it on differs:
//!
//! - Linux (`landlock`): lathe's trampoline (`lathe sandbox-exec`, see
//!   `crate::platform::process`) puts it on itself before it starts the command, so
//!   that it binds the command and everything it starts and can never be
//!   lifted;
//! - macOS ([`seatbelt`]): `/usr/bin/sandbox-exec` puts a generated
//!   Seatbelt profile on itself and then runs the trampoline, with the same
//!   policy;
//! - Windows and the rest ([`none`]): there is none, and the status says
//!   why, so `auto` mode asks before commands.
//!
//! On Linux, in the sandbox a command:
//!
//! - creates, changes, renames or removes files only beneath the session
//!   roots, the system temp directory, `/dev/shm`, the terminal and null
//!   devices and the configured `writable` paths (Landlock ABI 3's writes);
//! - reads everything except the credentials [`secrets`] lists and the
//!   `deny_read` paths, unless they lie inside a session root (Landlock's
//!   read rights, as an allow-list built around them; lathe works the list
//!   out once per session for the trampolines it starts, `grants`);
//! - with the network off (the default), makes no TCP connection or
//!   listener (Landlock ABI 4), and no socket but a Unix one: no UDP, so no
//!   DNS, no raw, packet or netlink socket (`seccomp`); and reaches no
//!   abstract Unix socket outside the sandbox (Landlock ABI 6's scope);
//! - signals no process outside the sandbox (Landlock ABI 6's scope);
//! - cannot change what makes git or lathe run something later: a root's
//!   `.git` hooks, config and info and `.lathe/` are mounted read-only in a
//!   mount namespace of its own ([`protected`] has the one list,
//!   `namespaces` the mounts);
//! - gains no privileges through set-user-id programs (`no_new_privs`).
//!
//! What this machine can enforce of it is found once per process by
//! running the trampoline in its probe mode ([`probe`]): each part is
//! tried for real (Landlock's ABI, the seccomp filter, a mount namespace)
//! and the [`Findings`] say what held. lathe reports exactly that
//! ([`Status`]: fully, partly, not enforced, and which part is missing) and
//! never claims more; the session's policy tells the trampoline to leave
//! out the parts found missing. `LATHE_SANDBOX_UNAVAILABLE` (a test switch,
//! see [`SandboxPart::forced_off`]) makes lathe act as if parts were missing.
//!
//! Limits, by design or by the kernel: Unix sockets named by a path stay
//! reachable (a local daemon's, Docker's or D-Bus's, acts for the command);
//! what was open or permitted before the restriction (inherited
//! descriptors) stays usable; a 32-bit x86 program is killed by the seccomp
//! filter when the network is off; listing the home directory, or `/`,
//! fails (only their entries are granted).
//!
//! Also here: the conservative reading of a failed command's output that
//! tells the model the sandbox may have refused it ([`suspected_denial`],
//! [`suspected_network_failure`]).
//!
//! This module knows Landlock, seccomp, namespaces, Seatbelt, paths and
//! text; nothing of ACP, permissions or how processes are supervised.

pub mod protected;
pub mod seatbelt;
pub mod secrets;

#[cfg(target_os = "linux")]
pub mod grants;
#[cfg(target_os = "linux")]
pub mod keeper;
#[cfg(target_os = "linux")]
mod landlock;
#[cfg(target_os = "linux")]
mod namespaces;
#[cfg(target_os = "linux")]
mod seccomp;

pub mod none;

#[cfg(target_os = "linux")]
use landlock as family;
#[cfg(not(any(target_os = "linux", target_os = "macos")))]
use none as family;
#[cfg(target_os = "macos")]
use seatbelt as family;

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::platform::settings::{SANDBOX_UNAVAILABLE_ENV, SandboxMode, SandboxSettings};
pub use family::{apply, probe_here};
#[cfg(target_os = "linux")]
pub use landlock::restrict_self;
pub use secrets::ReadDenials;

/// The hidden subcommand of the `lathe` binary that is lathe's trampoline
/// (`lathe sandbox-exec`, see `crate::platform::process`): it supervises each command
/// and, on Linux, puts the sandbox on.
pub const TRAMPOLINE_SUBCOMMAND: &str = "sandbox-exec";

/// Why there is no sandbox when lathe's own executable is unknown (on
/// Linux and macOS, which start commands in it through the trampoline).
pub const UNKNOWN_TRAMPOLINE: &str = "lathe's own executable is unknown, and the sandbox is applied by it";

/// What `LATHE_SANDBOX_UNAVAILABLE` says, when it takes parts away.
pub fn forced_off_why(settings: &SandboxSettings) -> String {
    format!("{SANDBOX_UNAVAILABLE_ENV}={} is set", settings.force_unavailable.as_deref().unwrap_or_default())
}

/// The name of this process's keeper of mount namespaces (see `keeper`),
/// started on first use; `None` where there is none (systems without mount
/// namespaces, or it could not start).
pub fn namespace_keeper() -> Option<String> {
    family::namespace_keeper()
}

/// The program and the arguments to start lathe's `trampoline` with so
/// that it, and the command it runs, are confined by `policy` (none when
/// `None`): the trampoline itself where it puts the sandbox on (Linux);
/// `/usr/bin/sandbox-exec -p <profile> -D <NAME=path>... -- <trampoline>`
/// where the sandbox is put on before it starts (macOS). The launcher adds
/// the trampoline's own arguments, [`SandboxPolicy::as_args`] among them.
pub fn launch_prefix(policy: Option<&SandboxPolicy>, trampoline: &Path) -> (OsString, Vec<OsString>) {
    match policy {
        Some(policy) => family::launch_prefix(policy, trampoline),
        None => (trampoline.as_os_str().to_owned(), Vec::new()),
    }
}

/// The trampoline's flag that turns the sandbox on.
pub const SANDBOX_FLAG: &str = "--sandbox";
/// The trampoline's flag naming a session root: writable, readable, its
/// protected paths read-only.
pub const ROOT_FLAG: &str = "--root";
/// The trampoline's flag naming one writable path.
pub const WRITE_FLAG: &str = "--write";
/// The trampoline's flag naming the home directory whose credentials are unreadable.
pub const HOME_FLAG: &str = "--home";
/// The trampoline's flag naming one more unreadable path.
pub const DENY_READ_FLAG: &str = "--deny-read";
/// The trampoline's flag that turns the network off.
pub const NO_NETWORK_FLAG: &str = "--no-network";
/// The trampoline's flag naming a part to leave out (this machine lacks it).
pub const WITHOUT_FLAG: &str = "--without";
/// The trampoline's flag carrying the read allow-list lathe worked out
/// once for the session (see `grants`), instead of reading it itself.
pub const READ_GRANTS_FLAG: &str = "--read-grants";
/// The trampoline's flag naming the socket that keeps its mount namespace
/// (see `keeper`).
pub const NS_KEEPER_FLAG: &str = "--ns-keeper";

/// The parts of the sandbox a machine may lack.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum SandboxPart {
    /// Landlock: writes, reads, TCP, scopes. Without it there is no sandbox.
    Landlock,
    /// The seccomp filter: sockets other than Unix ones.
    Seccomp,
    /// The user and mount namespaces: the read-only git and lathe paths.
    Namespaces,
}

impl SandboxPart {
    /// Every part.
    pub const ALL: [SandboxPart; 3] = [SandboxPart::Landlock, SandboxPart::Seccomp, SandboxPart::Namespaces];

    /// The name used in flags and in `LATHE_SANDBOX_UNAVAILABLE`.
    pub fn name(self) -> &'static str {
        match self {
            SandboxPart::Landlock => "landlock",
            SandboxPart::Seccomp => "seccomp",
            SandboxPart::Namespaces => "namespaces",
        }
    }

    /// The parts lathe acts as if it lacked, as `settings` say
    /// (`LATHE_SANDBOX_UNAVAILABLE`, see [`SandboxPart::forced_off`]).
    pub fn forced_off_by(settings: &SandboxSettings) -> Vec<SandboxPart> {
        settings.force_unavailable.as_deref().map(SandboxPart::forced_off).unwrap_or_default()
    }

    /// The parts `LATHE_SANDBOX_UNAVAILABLE` turns off: `1` all of them,
    /// else a comma-separated list of their names (`seccomp,namespaces`);
    /// unknown names count for nothing.
    pub fn forced_off(value: &str) -> Vec<SandboxPart> {
        if value.trim() == "1" {
            return SandboxPart::ALL.to_vec();
        }
        let mut parts: Vec<SandboxPart> = value
            .split(',')
            .filter_map(|name| SandboxPart::ALL.into_iter().find(|part| part.name() == name.trim()))
            .collect();
        parts.sort();
        parts.dedup();
        parts
    }
}

/// What a sandboxed command may do (see the module docs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SandboxPolicy {
    roots: Vec<PathBuf>,
    writable: Vec<PathBuf>,
    home: Option<PathBuf>,
    deny_read: Vec<PathBuf>,
    network: bool,
    without: Vec<SandboxPart>,
    keeper: Option<String>,
    tcp_rules: bool,
    read_grants: Option<OsString>,
}

/// How much of the network a policy takes away, as this machine enforces it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NetworkCut {
    /// The network is on.
    On,
    /// No socket but a Unix one (the seccomp filter): no TCP, UDP, DNS.
    Off,
    /// TCP only (Landlock's rules; no seccomp filter here): UDP, DNS and
    /// other sockets still work.
    TcpOnly,
    /// Nothing: neither the filter nor Landlock's TCP rules are here.
    Nothing,
}

impl SandboxPolicy {
    /// Writes allowed beneath `writable`, the network on when `network`;
    /// no roots, every read allowed.
    pub fn new(writable: Vec<PathBuf>, network: bool) -> SandboxPolicy {
        SandboxPolicy {
            roots: Vec::new(),
            writable,
            home: None,
            deny_read: Vec::new(),
            network,
            without: Vec::new(),
            keeper: None,
            tcp_rules: true,
            read_grants: None,
        }
    }

    /// The same, saying whether Landlock refuses TCP on this machine (ABI 4
    /// or later; assumed until said otherwise). Only what the policy tells
    /// the model depends on it: the trampoline asks Landlock for TCP rules
    /// whatever this says.
    #[must_use]
    pub fn with_tcp_rules(mut self, tcp_rules: bool) -> SandboxPolicy {
        self.tcp_rules = tcp_rules;
        self
    }

    /// How much of the network this policy takes away, as enforced here.
    pub fn network_cut(&self) -> NetworkCut {
        if self.network {
            NetworkCut::On
        } else if self.applies(SandboxPart::Seccomp) {
            NetworkCut::Off
        } else if self.tcp_rules {
            NetworkCut::TcpOnly
        } else {
            NetworkCut::Nothing
        }
    }

    /// The same, with these session `roots` (writable, readable, their
    /// protected paths read-only).
    #[must_use]
    pub fn with_roots(mut self, roots: Vec<PathBuf>) -> SandboxPolicy {
        self.roots = roots;
        self
    }

    /// The same, with the credentials beneath `home` and the `deny_read`
    /// paths unreadable.
    #[must_use]
    pub fn denying_reads(mut self, home: Option<PathBuf>, deny_read: Vec<PathBuf>) -> SandboxPolicy {
        self.home = home;
        self.deny_read = deny_read;
        self
    }

    /// The same, leaving out `parts` (which this machine lacks).
    #[must_use]
    pub fn without(mut self, parts: &[SandboxPart]) -> SandboxPolicy {
        self.without = parts.to_vec();
        self.without.sort();
        self.without.dedup();
        self
    }

    /// The same, handing the mount namespace to the keeper socket `name`
    /// (see `keeper`).
    #[must_use]
    pub fn kept_by(mut self, name: Option<String>) -> SandboxPolicy {
        self.keeper = name;
        self
    }

    /// The same, with the read allow-list given (as `grants::current`
    /// encodes it) instead of read by the trampoline.
    #[must_use]
    pub fn with_read_grants(mut self, encoded: Option<OsString>) -> SandboxPolicy {
        self.read_grants = encoded;
        self
    }

    /// The trampoline arguments lathe adds when it starts the trampoline
    /// itself (not an editor's terminal, which keeps the trampoline reading
    /// the allow-list): the read allow-list worked out once per session and
    /// read again only when what it depends on changed (Linux, see
    /// `grants`); none where it cannot be kept. Called for every command,
    /// just before its start.
    pub fn launch_args(&self) -> Vec<OsString> {
        #[cfg(target_os = "linux")]
        if self.home.is_some() || !self.deny_read.is_empty() {
            let named = secrets::named(self.home.as_deref(), &self.deny_read);
            if let Some(list) = grants::current(&named) {
                return vec![OsString::from(READ_GRANTS_FLAG), list];
            }
        }
        Vec::new()
    }

    /// A session's policy: its `roots`, the system temp directory and the
    /// configured writable paths writable; the configured reads denied and
    /// network; leaving out the `missing` parts.
    pub fn for_session(roots: &[PathBuf], settings: &SandboxSettings, missing: &[SandboxPart]) -> SandboxPolicy {
        let mut writable = vec![settings.temp_dir.clone()];
        writable.extend(settings.writable.iter().cloned());
        writable.retain(|path| !roots.contains(path));
        let mut seen = std::collections::HashSet::new();
        writable.retain(|path| seen.insert(path.clone()));
        let mut roots = roots.to_vec();
        let mut seen = std::collections::HashSet::new();
        roots.retain(|path| seen.insert(path.clone()));
        let policy = SandboxPolicy::new(writable, settings.network)
            .with_roots(roots)
            .denying_reads(settings.home.clone(), settings.deny_read.clone())
            .without(missing);
        let keeper = policy.applies(SandboxPart::Namespaces).then(namespace_keeper).flatten();
        policy.kept_by(keeper)
    }

    /// The session roots.
    pub fn roots(&self) -> &[PathBuf] {
        &self.roots
    }

    /// The writable paths besides the roots, as given (the devices come on top).
    pub fn writable(&self) -> &[PathBuf] {
        &self.writable
    }

    /// Whether the network is on.
    pub fn network(&self) -> bool {
        self.network
    }

    /// Whether `part` is applied.
    pub fn applies(&self, part: SandboxPart) -> bool {
        !self.without.contains(&part)
    }

    /// What may not be read.
    pub fn read_denials(&self) -> ReadDenials {
        ReadDenials::new(self.home.as_deref(), &self.deny_read)
    }

    /// The policy as lathe's trampoline's arguments (see `crate::platform::process`):
    /// what the trampoline puts on itself before it starts the command
    /// (Linux); nothing where the sandbox is put on before the trampoline
    /// starts ([`launch_prefix`]: macOS).
    pub fn as_args(&self) -> Vec<OsString> {
        family::trampoline_args(self)
    }

    /// One sentence for the model: where it may write, what it may not
    /// read, what is read-only, whether the network is on.
    pub fn describe(&self) -> String {
        let places: Vec<String> =
            self.roots.iter().chain(&self.writable).map(|path| format!("`{}`", path.display())).collect();
        let mut secrets = vec!["`~/.ssh`", "`~/.aws`", "`~/.gnupg`", "other credentials", "lathe's own files"];
        if !self.deny_read.is_empty() {
            secrets.push("the paths the user denied");
        }
        let network = match self.network_cut() {
            NetworkCut::On => "the network is on",
            NetworkCut::Off => "there is no network (no TCP, UDP or DNS: downloads and package installs fail)",
            NetworkCut::TcpOnly => {
                "TCP connections and listeners are refused (downloads fail); UDP, DNS included, is not (no \
                 seccomp filter here)"
            }
            NetworkCut::Nothing => "the network could not be turned off on this machine",
        };
        let mut text = format!(
            "it may write only in {} (and /dev/null, /dev/shm); it cannot read {}",
            places.join(", "),
            secrets.join(", ")
        );
        if self.applies(SandboxPart::Namespaces) {
            text.push_str("; `.git/hooks`, `.git/config`, `.git/info` and `.lathe/` are read-only");
        }
        text.push_str(&format!("; {network}"));
        text
    }
}

/// How much of a policy the kernel enforces.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Enforcement {
    /// Everything asked for.
    Full,
    /// Part of it (an older kernel, a missing part): say which part is missing.
    Partial,
    /// Nothing: no Landlock here.
    None,
}

/// What the sandbox amounts to on this machine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Status {
    /// How much is enforced.
    pub enforcement: Enforcement,
    /// What was found, for people ("Landlock ABI 7, seccomp and a mount
    /// namespace: fully enforced"; a partial one says what is missing).
    pub detail: String,
    /// The parts this machine lacks, which the trampoline leaves out.
    pub missing: Vec<SandboxPart>,
}

impl Status {
    /// No sandbox, for `reason` (which completes "the sandbox is unavailable: ...").
    pub fn unavailable(reason: impl Into<String>) -> Status {
        Status { enforcement: Enforcement::None, detail: reason.into(), missing: SandboxPart::ALL.to_vec() }
    }
}

/// What the trampoline's probe found of each part: `Ok` when it held (for
/// Landlock, the kernel's ABI), else why not.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Findings {
    /// Landlock: the ABI, or why there is none.
    pub landlock: Result<i32, String>,
    /// The seccomp filter.
    pub seccomp: Result<(), String>,
    /// The user and mount namespaces.
    pub namespaces: Result<(), String>,
}

impl Findings {
    /// The same findings with `parts` taken away, `why` said for each.
    #[must_use]
    pub fn forcing_off(mut self, parts: &[SandboxPart], why: &str) -> Findings {
        for part in parts {
            match part {
                SandboxPart::Landlock => self.landlock = Err(why.to_owned()),
                SandboxPart::Seccomp => self.seccomp = Err(why.to_owned()),
                SandboxPart::Namespaces => self.namespaces = Err(why.to_owned()),
            }
        }
        self
    }

    /// What a policy with the network on or off amounts to, given these findings.
    pub fn status(&self, network: bool) -> Status {
        let abi = match &self.landlock {
            Ok(abi) => *abi,
            Err(why) => return Status::unavailable(why.clone()),
        };
        let mut gaps: Vec<String> = Vec::new();
        let mut missing = Vec::new();
        if abi < 2 {
            gaps.push(
                "renames and links across directories are not restricted (Linux 5.19 or later restricts them)".into(),
            );
        }
        if abi < 3 {
            gaps.push("truncating files is not restricted (Linux 6.2 or later restricts it)".into());
        }
        if let Err(why) = &self.seccomp {
            missing.push(SandboxPart::Seccomp);
            if !network {
                gaps.push(if abi < 4 {
                    format!("the network is not off: TCP, UDP (DNS included) and other sockets stay usable (seccomp: {why}; Landlock restricts TCP from Linux 6.7)")
                } else {
                    format!("the network is only partly off: UDP (DNS included) and sockets other than TCP and Unix ones stay usable (seccomp: {why})")
                });
            }
        }
        if abi < 6 {
            gaps.push(
                "abstract Unix sockets and signals reach processes outside the sandbox (Linux 6.12 or later scopes \
                 them)"
                    .to_owned(),
            );
        }
        if let Err(why) = &self.namespaces {
            missing.push(SandboxPart::Namespaces);
            gaps.push(format!("`.git` hooks, config and info and `.lathe/` stay writable (no mount namespace: {why})"));
        }
        let mut used = vec![format!("Landlock ABI {abi}")];
        if !network && self.seccomp.is_ok() {
            used.push("seccomp".to_owned());
        }
        if self.namespaces.is_ok() {
            used.push("a mount namespace".to_owned());
        }
        let used = match used.split_last() {
            Some((last, [])) => last.clone(),
            Some((last, rest)) => format!("{} and {last}", rest.join(", ")),
            None => String::new(),
        };
        if gaps.is_empty() {
            Status { enforcement: Enforcement::Full, detail: format!("{used}: fully enforced"), missing }
        } else {
            Status {
                enforcement: Enforcement::Partial,
                detail: format!("{used}: partly enforced: {}", gaps.join("; ")),
                missing,
            }
        }
    }
}

/// Why the sandbox could not be put on.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    /// Landlock refused the ruleset (or a system call failed).
    #[error("Landlock: {0}")]
    Landlock(String),
    /// Landlock enforces nothing here.
    #[error("{0}")]
    Unavailable(String),
    /// The seccomp filter could not be installed.
    #[error("seccomp: {0}")]
    Seccomp(String),
    /// The mount namespace could not be set up.
    #[error("the mount namespace: {0}")]
    Namespaces(String),
    /// This system's sandbox is not put on by the trampoline (macOS:
    /// `sandbox-exec` puts it on before), or there is none: says which.
    #[error("{0}")]
    NotHere(&'static str),
}

/// What this machine can enforce, found once per process by running the
/// `trampoline` (lathe's own executable) in its probe mode.
pub fn probe(trampoline: &Path) -> Findings {
    static PROBED: std::sync::Mutex<Vec<(PathBuf, Findings)>> = std::sync::Mutex::new(Vec::new());
    let mut probed = PROBED.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some((_, findings)) = probed.iter().find(|(path, _)| path == trampoline) {
        return findings.clone();
    }
    let failed = |why: String| {
        let why = format!("the sandbox probe failed: {why}");
        Findings { landlock: Err(why.clone()), seccomp: Err(why.clone()), namespaces: Err(why) }
    };
    let findings = match std::process::Command::new(trampoline)
        .args([TRAMPOLINE_SUBCOMMAND, "--probe"])
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .output()
    {
        Ok(output) if output.status.success() => {
            serde_json::from_slice(&output.stdout).unwrap_or_else(|err| failed(format!("its answer: {err}")))
        }
        Ok(output) => failed(format!("it ended with {}", output.status)),
        Err(err) => failed(format!("cannot start {}: {err}", trampoline.display())),
    };
    probed.push((trampoline.to_path_buf(), findings.clone()));
    findings
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
    /// Partly enforced (an older kernel, a missing part): commands still
    /// run in it as above, but nothing runs unasked on its strength.
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
    denials: ReadDenials,
}

impl SessionSandbox {
    /// The sandbox for a session with these `roots`, applied by
    /// `trampoline` (lathe's own executable; without it nothing can be
    /// sandboxed). Probes the machine once per process.
    pub fn new(settings: &SandboxSettings, roots: &[PathBuf], trampoline: Option<&Path>) -> SessionSandbox {
        let status = if settings.mode == SandboxMode::Off {
            Status::unavailable("`[sandbox] mode = \"off\"`")
        } else {
            family::status(settings, trampoline)
        };
        let tcp_rules = settings.mode != SandboxMode::Off && family::tcp_rules(settings, trampoline);
        let mut sandbox = SessionSandbox::from_status(settings, roots, status);
        sandbox.policy = sandbox.policy.with_tcp_rules(tcp_rules);
        sandbox
    }

    /// The sandbox for a session with these `roots`, given what this
    /// machine enforces (`status`, what [`SessionSandbox::new`] probes).
    pub fn from_status(settings: &SandboxSettings, roots: &[PathBuf], status: Status) -> SessionSandbox {
        let policy = SandboxPolicy::for_session(roots, settings, &status.missing).with_tcp_rules(false);
        let denials = policy.read_denials();
        SessionSandbox { mode: settings.mode, policy, status, denials }
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

    /// The paths sandboxed commands may not read: the file tools ask before
    /// reading them too (see `crate::permission`).
    pub fn read_denials(&self) -> &ReadDenials {
        &self.denials
    }

    /// What the system prompt says about the sandbox, in as few tokens as
    /// will do (the prefix has a token budget: BENCHMARKS.md, "Prompt
    /// profiles"): what a command cannot reach ("Shell sandbox: no network,
    /// credentials or git hooks."), or `None` when commands run without
    /// one. Where it writes and the rest are in the note a refused command
    /// gets ([`SandboxPolicy::describe`]).
    pub fn describe_for_model(&self) -> Option<String> {
        let policy = self.policy().ok()?;
        let mut kept = Vec::new();
        match policy.network_cut() {
            NetworkCut::Off => kept.push("network"),
            NetworkCut::TcpOnly => kept.push("TCP"),
            NetworkCut::On | NetworkCut::Nothing => {}
        }
        kept.push("credentials");
        if policy.applies(SandboxPart::Namespaces) {
            kept.push("git hooks");
        }
        let kept = match kept.split_last() {
            Some((last, [])) => (*last).to_owned(),
            Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
            None => String::new(),
        };
        Some(format!("Shell sandbox: no {kept}."))
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
/// denied", which Landlock gives for a write or read outside the policy and
/// the seccomp filter for a socket), EPERM ("Operation not permitted",
/// which some tools print for it), EROFS and EBUSY (a read-only git path,
/// a pinned directory). Matched without regard to case.
const DENIAL_PHRASES: [&str; 6] =
    ["permission denied", "operation not permitted", "eacces", "eperm", "read-only file system", "resource busy"];

/// Phrases a failure for lack of network shows up as, from curl, git,
/// cargo, pip, npm, getaddrinfo and the like. Matched without regard to case.
const NETWORK_PHRASES: [&str; 14] = [
    "could not resolve",
    "couldn't resolve",
    "failed to resolve",
    "name resolution",
    "name or service not known",
    "nodename nor servname",
    "no address associated",
    "network is unreachable",
    "getaddrinfo",
    "eai_again",
    "enotfound",
    "failed to connect",
    "unable to access",
    "spurious network error",
];

/// Characters of the output line quoted back to the model.
const QUOTED_CHARS: usize = 200;

/// The first line of `output` holding one of `phrases`, trimmed and cut.
fn quoted_line(output: &str, phrases: &[&str]) -> Option<String> {
    output
        .lines()
        .find(|line| {
            let lower = line.to_lowercase();
            phrases.iter().any(|phrase| lower.contains(phrase))
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

/// The line of a failed sandboxed command's output that suggests the sandbox
/// refused something, if one does. A heuristic, kept conservative: only an
/// access error counts, and the caller says what it saw, not that the sandbox
/// did it.
pub fn suspected_denial(output: &str) -> Option<String> {
    quoted_line(output, &DENIAL_PHRASES)
}

/// The line of a failed command's output that suggests it needed the
/// network (a name that did not resolve, a connection that failed), if one
/// does: with the sandbox's network off, the model is told so.
pub fn suspected_network_failure(output: &str) -> Option<String> {
    quoted_line(output, &NETWORK_PHRASES)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The model is told what is cut of the network on this machine, not
    /// more: everything but Unix sockets with the filter, TCP alone
    /// without it (Landlock's rules), nothing without either.
    #[test]
    fn the_network_cut_is_described_as_enforced() {
        let offline = SandboxPolicy::new(vec![PathBuf::from("/p")], false);
        let session = |policy: SandboxPolicy| SessionSandbox {
            mode: SandboxMode::Auto,
            policy,
            status: Status { enforcement: Enforcement::Full, detail: String::new(), missing: Vec::new() },
            denials: ReadDenials::default(),
        };
        let table = [
            (
                offline.clone(),
                NetworkCut::Off,
                "no network (no TCP, UDP or DNS",
                "no network, credentials or git hooks.",
            ),
            (
                offline.clone().without(&[SandboxPart::Seccomp]),
                NetworkCut::TcpOnly,
                "TCP connections and listeners are refused",
                "no TCP, credentials or git hooks.",
            ),
            (
                offline.clone().without(&[SandboxPart::Seccomp]).with_tcp_rules(false),
                NetworkCut::Nothing,
                "the network could not be turned off",
                "no credentials or git hooks.",
            ),
            (
                SandboxPolicy::new(vec![PathBuf::from("/p")], true),
                NetworkCut::On,
                "the network is on",
                "no credentials or git hooks.",
            ),
        ];
        for (policy, cut, described, told) in table {
            assert_eq!(policy.network_cut(), cut);
            let text = policy.describe();
            assert!(text.contains(described), "{cut:?}: {text}");
            assert_eq!(cut == NetworkCut::Off, text.contains("no network"), "{cut:?}: {text}");
            assert_eq!(session(policy).describe_for_model(), Some(format!("Shell sandbox: {told}")), "{cut:?}");
        }
    }

    #[test]
    fn denials_are_read_conservatively() {
        let table = [
            ("touch: cannot touch '/etc/x': Permission denied", true),
            ("PermissionError: [Errno 13] Permission denied: '/x'", true),
            ("rm: cannot remove 'f': Operation not permitted", true),
            ("sh: 1: cannot create .git/hooks/pre-commit: Read-only file system", true),
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
        let network = [
            ("curl: (6) Could not resolve host: example.com", true),
            ("fatal: unable to access 'https://github.com/x/y/': Could not resolve host: github.com", true),
            ("warning: spurious network error (3 tries remaining): [6] Couldn't resolve host name", true),
            ("npm error code EAI_AGAIN", true),
            ("socket.gaierror: [Errno -3] Temporary failure in name resolution", true),
            ("error[E0425]: cannot find value `x` in this scope", false),
        ];
        for (output, seen) in network {
            assert_eq!(suspected_network_failure(output).is_some(), seen, "{output}");
        }
    }

    /// The confinement and the once-per-session notice follow what the
    /// probe found, for each mode: full protection is claimed only when
    /// every part holds; partly enforced still sandboxes but says which part
    /// is missing (and auto then asks); nothing enforced runs unconfined in
    /// auto (and says so) and refuses in required.
    #[test]
    fn what_is_claimed_follows_the_enforcement_found() {
        let sandbox = |mode, enforcement| SessionSandbox {
            mode,
            policy: SandboxPolicy::new(vec![PathBuf::from("/p")], true),
            status: Status {
                enforcement,
                detail: "Landlock ABI 3: TCP rules unsupported".to_owned(),
                missing: Vec::new(),
            },
            denials: ReadDenials::default(),
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

    /// Issue 25: each part the probe finds missing (or the test switch takes
    /// away) makes the sandbox partial and is named; Landlock's absence
    /// leaves none; the network on needs no seccomp; older ABIs are named.
    #[test]
    fn every_missing_part_is_named() {
        let all = Findings { landlock: Ok(7), seccomp: Ok(()), namespaces: Ok(()) };
        let full = all.status(false);
        assert_eq!(full.enforcement, Enforcement::Full, "{}", full.detail);
        assert_eq!(full.detail, "Landlock ABI 7, seccomp and a mount namespace: fully enforced");
        let forced = |parts: &[SandboxPart], network| all.clone().forcing_off(parts, "switch is set").status(network);
        let no_seccomp = forced(&[SandboxPart::Seccomp], false);
        assert_eq!(no_seccomp.enforcement, Enforcement::Partial);
        assert!(no_seccomp.detail.contains("UDP (DNS included)") && no_seccomp.detail.contains("switch is set"));
        assert_eq!(no_seccomp.missing, [SandboxPart::Seccomp]);
        assert_eq!(forced(&[SandboxPart::Seccomp], true).enforcement, Enforcement::Full, "no filter needed");
        let no_namespaces = forced(&[SandboxPart::Namespaces], true);
        assert_eq!(no_namespaces.enforcement, Enforcement::Partial);
        assert!(no_namespaces.detail.contains("`.git` hooks"), "{}", no_namespaces.detail);
        let no_landlock = forced(&[SandboxPart::Landlock], false);
        assert_eq!(no_landlock.enforcement, Enforcement::None);
        assert_eq!(no_landlock.missing, SandboxPart::ALL);
        let old = Findings { landlock: Ok(4), ..all.clone() }.status(false);
        assert!(old.detail.contains("abstract Unix sockets and signals"), "{}", old.detail);
        assert_eq!(SandboxPart::forced_off("1"), SandboxPart::ALL);
        assert_eq!(
            SandboxPart::forced_off("namespaces, seccomp,bogus"),
            [SandboxPart::Seccomp, SandboxPart::Namespaces]
        );
        assert!(SandboxPart::forced_off("0").is_empty());
    }

    /// Issue 26: where there is no sandbox (Windows), the status says why;
    /// `auto` runs commands unconfined and so asks before each (the
    /// permission table has `Off` asking), telling the user once why;
    /// `required` refuses them; nothing is ever started in it.
    #[test]
    fn without_a_sandbox_auto_asks_and_says_why() {
        let auto = SandboxSettings::default();
        assert_eq!(auto.mode, SandboxMode::Auto);
        let status = none::status(&auto, Some(Path::new("/opt/lathe")));
        assert_eq!(status.enforcement, Enforcement::None);
        assert_eq!(status.detail, none::REASON);
        let sandbox = SessionSandbox::from_status(&auto, &[PathBuf::from("/p")], status.clone());
        assert_eq!(sandbox.confinement(), Confinement::Off);
        assert!(sandbox.policy().is_err());
        assert_eq!(sandbox.describe_for_model(), None, "the model is not told of a sandbox");
        let (title, body) = sandbox.notice().unwrap();
        assert_eq!(title, "Commands run without a sandbox");
        assert!(body.contains(none::REASON) && body.contains("each one asks first"), "{body}");
        let required = SandboxSettings { mode: SandboxMode::Required, ..SandboxSettings::default() };
        let sandbox = SessionSandbox::from_status(&required, &[PathBuf::from("/p")], status);
        assert_eq!(sandbox.confinement(), Confinement::Refused(none::REASON.to_owned()));
        // The trampoline there refuses to run a command it was to sandbox.
        assert!(none::apply(&SandboxPolicy::new(Vec::new(), false)).is_err());
    }

    /// On a system of the `none` family this is what every session gets.
    #[cfg(not(any(target_os = "linux", target_os = "macos")))]
    #[test]
    fn this_system_has_no_sandbox() {
        let sandbox =
            SessionSandbox::new(&SandboxSettings::default(), &[PathBuf::from("/p")], Some(Path::new("lathe")));
        assert_eq!(sandbox.status().detail, none::REASON);
        assert_eq!(sandbox.confinement(), Confinement::Off);
    }
}
