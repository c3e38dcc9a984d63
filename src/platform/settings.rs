//! The settings the platform layer is given: how commands are sandboxed
//! ([`SandboxSettings`]) and how children are started ([`ChildSettings`]).
//! `crate::config` builds them from the config file and the environment
//! (and names them as its own); they live here so that the platform layer,
//! the bottom floor, imports nothing of lathe.

use std::path::PathBuf;

use serde::Deserialize;

/// Environment variable that makes lathe act as if the sandbox were
/// unavailable on this machine (`1`), or some of its parts (`landlock`,
/// `seccomp`, `namespaces`, comma-separated). For tests of the fallbacks;
/// documented in the README.
pub const SANDBOX_UNAVAILABLE_ENV: &str = "LATHE_SANDBOX_UNAVAILABLE";

/// Whether lathe sandboxes the commands it runs (`[sandbox] mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SandboxMode {
    /// Sandbox commands where the machine allows it; where it does not, say
    /// so and ask before commands that would have run without asking.
    #[default]
    Auto,
    /// Never sandbox commands.
    Off,
    /// Run commands only in a fully enforced sandbox; refuse them otherwise.
    Required,
}

impl SandboxMode {
    /// The value as written in the config file.
    pub fn as_str(self) -> &'static str {
        match self {
            SandboxMode::Auto => "auto",
            SandboxMode::Off => "off",
            SandboxMode::Required => "required",
        }
    }
}

/// `[sandbox]`: the policy every session's commands run under.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SandboxSettings {
    /// Whether to sandbox at all.
    pub mode: SandboxMode,
    /// Whether sandboxed commands have the network (TCP, UDP, DNS, any
    /// socket but a Unix one). Off unless the config turns it on.
    pub network: bool,
    /// Paths writable besides the session roots and the temp directory,
    /// absolute (`~/` expanded at load).
    pub writable: Vec<PathBuf>,
    /// The temp directory sandboxed commands may write: `$TMPDIR` as the
    /// config was loaded with, else `/tmp`.
    pub temp_dir: PathBuf,
    /// The home directory whose credentials sandboxed commands cannot read
    /// (see `crate::platform::sandbox::secrets`); `None` when `HOME` is not set.
    pub home: Option<PathBuf>,
    /// More paths sandboxed commands cannot read, absolute: `[sandbox]
    /// deny_read`, lathe's own config and data folders, the config file.
    pub deny_read: Vec<PathBuf>,
    /// The value of [`SANDBOX_UNAVAILABLE_ENV`], when set: act as if the
    /// parts it names were missing (see [`SandboxSettings::forced_off`]).
    pub force_unavailable: Option<String>,
}

impl Default for SandboxSettings {
    fn default() -> Self {
        Self {
            mode: SandboxMode::Auto,
            network: false,
            writable: Vec::new(),
            temp_dir: PathBuf::from("/tmp"),
            home: None,
            deny_read: Vec::new(),
            force_unavailable: None,
        }
    }
}

/// How lathe starts processes: what they inherit and who supervises them
/// (see `crate::platform::process`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ChildSettings {
    /// lathe's own executable, which starts and watches every local child
    /// (`lathe sandbox-exec`). Set by the binary, never by the file; `None`
    /// starts children directly, unsupervised.
    pub supervisor: Option<PathBuf>,
    /// Variables holding secrets lathe knows of: each model's `api_key_env`,
    /// `OPENAI_API_KEY`, each MCP server's `bearer_token_env` and the names of
    /// every configured MCP server's `env` entries. Never passed to a child.
    pub secret_vars: Vec<String>,
    /// `[child_env] remove`: globs of further variables no child gets.
    pub remove_env: Vec<String>,
    /// `[child_env] keep`: globs of variables `remove` leaves alone.
    pub keep_env: Vec<String>,
    /// `[shell] program`: the shell commands run in, instead of the one
    /// detected (`sh` on Unix; PowerShell, else `cmd.exe`, on Windows).
    pub shell: Option<String>,
}
