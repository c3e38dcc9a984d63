//! lathe's config and data folders, by each platform's convention.
//!
//! | | config | data (sessions, history, checkpoints) |
//! | --- | --- | --- |
//! | Linux, macOS, other Unix | `$XDG_CONFIG_HOME/lathe`, else `~/.config/lathe` | `$XDG_DATA_HOME/lathe`, else `~/.local/share/lathe` |
//! | Windows | `%APPDATA%\lathe` (Roaming: settings follow the user) | `%LOCALAPPDATA%\lathe` (Local: sessions are large and belong to the machine) |
//!
//! macOS keeps the XDG folders (what command-line tools started from an
//! editor use, and what lathe always used there). On Windows the variables
//! `%APPDATA%`, `%LOCALAPPDATA%` and `%USERPROFILE%` name the folders when set
//! to an absolute path (Windows sets them to the Known Folders at logon; a
//! user or a test may point them elsewhere, as `XDG_*` on Unix), else the
//! Known Folders themselves (`SHGetKnownFolderPath`, through the `dirs`
//! crate). `--config`/`LATHE_CONFIG` and `--data-dir`/`LATHE_DATA_DIR` win
//! everywhere; the callers apply them.
//!
//! This module imports nothing of lathe: `config::user_dir` and
//! `store::default_data_dir` ask it.

use std::path::PathBuf;

/// lathe's config folder (user-level `AGENTS.md`, slash commands, the
/// default `config.toml`); `None` when the system names none. `env` reads
/// an environment variable.
pub fn config_dir(env: &dyn Fn(&str) -> Option<String>) -> Option<PathBuf> {
    Some(sys::config_home(env)?.join("lathe"))
}

/// The default config file as the user would type it, for messages that
/// tell them to write one: `~/.config/lathe/config.toml`, on Windows
/// `%APPDATA%\lathe\config.toml`.
pub const CONFIG_FILE: &str = sys::CONFIG_FILE;

/// lathe's data folder (sessions, history, checkpoints) by convention;
/// `None` when the system names none.
pub fn data_dir(env: &dyn Fn(&str) -> Option<String>) -> Option<PathBuf> {
    Some(sys::data_home(env)?.join("lathe"))
}

/// The user's home folder, for `~`: `$HOME` on Unix (as the shell has it),
/// the profile folder on Windows (`FOLDERID_Profile`, `C:\Users\<name>`).
pub fn home() -> Option<PathBuf> {
    sys::home()
}

#[cfg(unix)]
mod sys {
    pub(super) const CONFIG_FILE: &str = "~/.config/lathe/config.toml";

    use std::path::{Path, PathBuf};

    pub(super) fn home() -> Option<PathBuf> {
        std::env::var_os("HOME").map(PathBuf::from)
    }

    /// An XDG base directory: `$<variable>`, else `$HOME/<fallback>`; `None`
    /// when neither is set (empty counts as unset).
    fn xdg_home(env: &dyn Fn(&str) -> Option<String>, variable: &str, fallback: &str) -> Option<PathBuf> {
        env(variable)
            .filter(|p| !p.is_empty())
            .map(PathBuf::from)
            .or_else(|| env("HOME").filter(|h| !h.is_empty()).map(|h| Path::new(&h).join(fallback)))
    }

    pub(super) fn config_home(env: &dyn Fn(&str) -> Option<String>) -> Option<PathBuf> {
        xdg_home(env, "XDG_CONFIG_HOME", ".config")
    }

    pub(super) fn data_home(env: &dyn Fn(&str) -> Option<String>) -> Option<PathBuf> {
        xdg_home(env, "XDG_DATA_HOME", ".local/share")
    }
}

#[cfg(windows)]
mod sys {
    pub(super) const CONFIG_FILE: &str = r"%APPDATA%\lathe\config.toml";

    use std::path::{Path, PathBuf};

    /// `%<variable>%` when it names an absolute path (empty or relative
    /// counts as unset), else the Known Folder `known` gives.
    fn named_or_known(value: Option<String>, known: fn() -> Option<PathBuf>) -> Option<PathBuf> {
        value.filter(|path| Path::new(path).is_absolute()).map(PathBuf::from).or_else(known)
    }

    /// `%USERPROFILE%` as Rust's `std::env::home_dir` reads it, else the
    /// profile Known Folder.
    pub(super) fn home() -> Option<PathBuf> {
        named_or_known(std::env::var("USERPROFILE").ok(), dirs::home_dir)
    }

    pub(super) fn config_home(env: &dyn Fn(&str) -> Option<String>) -> Option<PathBuf> {
        named_or_known(env("APPDATA"), dirs::config_dir)
    }

    pub(super) fn data_home(env: &dyn Fn(&str) -> Option<String>) -> Option<PathBuf> {
        named_or_known(env("LOCALAPPDATA"), dirs::data_local_dir)
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;

    #[test]
    #[cfg(unix)]
    fn the_xdg_folders_or_their_defaults() {
        let home_only = |name: &str| (name == "HOME").then(|| "/home/u".to_owned());
        assert_eq!(config_dir(&home_only), Some(PathBuf::from("/home/u/.config/lathe")));
        assert_eq!(data_dir(&home_only), Some(PathBuf::from("/home/u/.local/share/lathe")));
        let xdg = |name: &str| match name {
            "XDG_CONFIG_HOME" => Some("/xc".to_owned()),
            "XDG_DATA_HOME" => Some("/xd".to_owned()),
            "HOME" => Some("/home/u".to_owned()),
            _ => None,
        };
        assert_eq!(config_dir(&xdg), Some(PathBuf::from("/xc/lathe")));
        assert_eq!(data_dir(&xdg), Some(PathBuf::from("/xd/lathe")));
        let empty = |name: &str| (name == "XDG_DATA_HOME" || name == "HOME").then(String::new);
        assert_eq!(data_dir(&empty), None, "empty counts as unset");
    }

    /// `%APPDATA%` and `%LOCALAPPDATA%` move the folders when absolute;
    /// otherwise the Known Folders (which wine and Windows always have).
    #[test]
    #[cfg(windows)]
    fn the_app_data_variables_or_the_known_folders() {
        let named = |name: &str| match name {
            "APPDATA" => Some(r"D:\roaming".to_owned()),
            "LOCALAPPDATA" => Some(r"D:\local".to_owned()),
            _ => None,
        };
        assert_eq!(config_dir(&named), Some(PathBuf::from(r"D:\roaming\lathe")));
        assert_eq!(data_dir(&named), Some(PathBuf::from(r"D:\local\lathe")));
        let relative = |name: &str| (name == "APPDATA" || name == "LOCALAPPDATA").then(|| "rel".to_owned());
        assert_eq!(config_dir(&relative), dirs::config_dir().map(|dir| dir.join("lathe")), "relative counts as unset");
        assert_eq!(data_dir(&|_| None), dirs::data_local_dir().map(|dir| dir.join("lathe")));
    }
}
