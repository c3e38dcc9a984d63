//! The systems lathe has no command sandbox for: Windows (and any other
//! system but Linux and macOS). Windows has nothing lathe could put on a
//! command without administrator rights (AppContainer needs the files'
//! ACLs changed; Windows Sandbox and Hyper-V are separate machines), so
//! the sandbox is reported unavailable with that reason: `auto` mode asks
//! before each command, `required` refuses them, `lathe doctor` says why,
//! exactly as on a Linux without Landlock.
//!
//! Compiled everywhere (its status is tested on every system); the seam
//! uses it only where no other family applies.

use std::ffi::OsString;
use std::path::Path;

use crate::platform::settings::SandboxSettings;

use super::{Findings, SandboxError, SandboxPolicy, Status};

/// Why there is no sandbox on this system.
pub const REASON: &str = if cfg!(windows) {
    "Windows has no sandbox lathe can apply without administrator rights"
} else {
    "this system has no sandbox lathe can apply (lathe sandboxes commands on Linux and macOS)"
};

/// No sandbox, whatever the settings and the trampoline.
pub fn status(_settings: &SandboxSettings, _trampoline: Option<&Path>) -> Status {
    Status::unavailable(REASON)
}

/// Landlock's TCP rules are Linux's: never here.
pub fn tcp_rules(_settings: &SandboxSettings, _trampoline: Option<&Path>) -> bool {
    false
}

/// No mount namespaces here.
pub fn namespace_keeper() -> Option<String> {
    None
}

/// Never asked for (the status says there is no sandbox); the trampoline
/// as it is.
pub fn launch_prefix(_policy: &SandboxPolicy, trampoline: &Path) -> (OsString, Vec<OsString>) {
    (trampoline.as_os_str().to_owned(), Vec::new())
}

/// Nothing for the trampoline to put on.
pub fn trampoline_args(_policy: &SandboxPolicy) -> Vec<OsString> {
    Vec::new()
}

/// The trampoline has no sandbox to put on here: the command does not run.
pub fn apply(_policy: &SandboxPolicy) -> Result<(), SandboxError> {
    Err(SandboxError::NotHere(REASON))
}

/// The trampoline's probe mode finds nothing here.
pub fn probe_here() -> Findings {
    Findings { landlock: Err(REASON.to_owned()), seccomp: Err(REASON.to_owned()), namespaces: Err(REASON.to_owned()) }
}
