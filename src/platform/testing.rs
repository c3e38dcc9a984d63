//! For tests: file system objects not every system can make (links, FIFOs,
//! Unix permission bits, names that are not Unicode), made where the system
//! can. Where it cannot, the helper says `skipped: <why>` on stderr and
//! returns `false`, and the test returns there: the rest of the suite stays
//! the same on every system, and what a system lacks is said, not hidden.

use std::path::{Path, PathBuf};

/// Says `skipped: <what>: <why>` on stderr; `false`, for `if !... { return }`.
#[allow(clippy::print_stderr)]
pub fn skipped(what: &str, why: &str) -> bool {
    eprintln!("skipped: {what}: {why}");
    false
}

/// Makes `link` a symbolic link to `original`; whether it did (Windows
/// without the right to make links, or wine, which makes none, skip).
pub fn symlink(original: impl AsRef<Path>, link: impl AsRef<Path>) -> bool {
    let (original, link) = (original.as_ref(), link.as_ref());
    match sys::symlink(original, link) {
        Ok(()) if std::fs::symlink_metadata(link).is_ok_and(|m| m.file_type().is_symlink()) => true,
        Ok(()) => skipped("a symbolic link", "the system reported one made, but there is none (wine)"),
        Err(err) => skipped("a symbolic link", &err.to_string()),
    }
}

/// Makes `link` a symbolic link to `original`, saying nothing when it
/// cannot: for loops that race with other writers (call [`symlink`] once
/// first to skip where the system makes none).
pub fn try_symlink(original: impl AsRef<Path>, link: impl AsRef<Path>) -> std::io::Result<()> {
    sys::symlink(original.as_ref(), link.as_ref())
}

/// Makes `link` a directory junction to `original` (Windows; a symbolic
/// link to the directory elsewhere); whether it did (wine 8 makes none).
pub fn junction(original: &Path, link: &Path) -> bool {
    match sys::junction(original, link) {
        Ok(()) if std::fs::symlink_metadata(link).is_ok_and(|m| m.file_type().is_symlink()) => true,
        Ok(()) => {
            skipped("a junction", "the system reported one made, but there is none (wine 8 makes no reparse points)")
        }
        Err(err) => skipped("a junction", &err.to_string()),
    }
}

/// The 8.3 short name of `path`'s last component, as `path`'s parent
/// joined with it, when the volume gives one (Windows with 8.3 names on,
/// and wine); else `None`, said as skipped.
pub fn short_name(path: &Path) -> Option<PathBuf> {
    match sys::short_name(path) {
        Ok(Some(short)) => Some(short),
        Ok(None) => {
            skipped("an 8.3 short name", "the volume gives none for this name (8.3 names are off)");
            None
        }
        Err(err) => {
            skipped("an 8.3 short name", &err.to_string());
            None
        }
    }
}

/// Makes a FIFO at `path`; whether it did (Windows has none at drive paths).
pub fn fifo(path: &Path) -> bool {
    match sys::fifo(path) {
        Ok(()) => true,
        Err(err) => skipped("a FIFO", &err.to_string()),
    }
}

/// Sets `path`'s Unix permission bits; whether it could (Windows has none).
pub fn set_mode(path: &Path, mode: u32) -> bool {
    match sys::set_mode(path, mode) {
        Ok(()) => true,
        Err(err) => skipped("permission bits", &err.to_string()),
    }
}

/// `path`'s Unix permission bits (`& 0o7777`); `None` on Windows.
pub fn mode(path: &Path) -> Option<u32> {
    sys::mode(path)
}

/// Whether files have Unix permission bits here (Windows has access lists).
pub fn modes() -> bool {
    sys::MODES || skipped("Unix permission bits", "Windows has none (SECURITY.md says what protects files there)")
}

/// Whether the system has device files at paths (`/dev/zero`,
/// `/dev/urandom`, `/dev/null`): Unix does, Windows does not.
pub fn devices() -> bool {
    sys::DEVICES || skipped("device files", "this system has none at paths")
}

/// Creates `dir/<before><a character that is not Unicode><after>` holding
/// `content` (a Latin-1 byte on Unix, an unpaired surrogate on Windows) and
/// returns its path, when the file system keeps such a name as it is.
pub fn non_unicode_file(dir: &Path, before: &str, after: &str, content: &str) -> Option<PathBuf> {
    let path = dir.join(sys::non_unicode_between(before, after));
    let kept = std::fs::write(&path, content).is_ok()
        && std::fs::read_dir(dir)
            .map(|entries| entries.flatten().any(|entry| entry.file_name() == path.file_name().unwrap_or_default()))
            .unwrap_or(false);
    if kept {
        Some(path)
    } else {
        skipped("a file name that is not Unicode", "the file system does not keep it as it is");
        None
    }
}

/// Whether commands here run in a POSIX shell (`sh -c`), which a test's
/// command line is written for; Windows' are PowerShell or `cmd.exe`.
pub fn posix_shell() -> bool {
    cfg!(unix) || skipped("an sh command line", "the shell here is PowerShell or cmd.exe (platform::shell)")
}

/// Whether absolute Unix paths (`/home/u`) are absolute here, for tests
/// whose fixtures are written with them: on Windows a path needs a drive.
pub fn unix_paths() -> bool {
    cfg!(unix) || skipped("absolute Unix paths (`/home/u`)", "on Windows a path without a drive is not absolute")
}

/// Whether lathe's folders follow XDG (`$XDG_CONFIG_HOME`, `~/.config`);
/// Windows' are its Known Folders (platform::folders).
pub fn xdg_folders() -> bool {
    cfg!(unix) || skipped("the XDG folders", "Windows has its Known Folders (%APPDATA%, %LOCALAPPDATA%)")
}

/// Whether `File::set_len` past the end leaves a sparse file (Unix file
/// systems do; on Windows a file is sparse only once marked so).
pub fn sparse_files() -> bool {
    cfg!(unix)
        || skipped(
            "a sparse file",
            "Windows' set_len allocates: a file is sparse only once marked so (FSCTL_SET_SPARSE)",
        )
}

/// Kills the process `pid` at once (SIGKILL; `taskkill /F` on Windows).
pub fn kill(pid: u32) -> std::io::Result<()> {
    sys::kill(pid)
}

/// An absolute path whose name is not valid Unicode (a byte 0xFF on Unix, an
/// unpaired surrogate on Windows).
pub fn non_unicode_path() -> PathBuf {
    std::env::temp_dir().join(sys::non_unicode_name())
}

/// Whether the process group `pgid` has a member, zombies included
/// (`killpg(pgid, 0)`); Windows has no process groups: `false`.
pub fn process_group_exists(pgid: i32) -> bool {
    sys::process_group_exists(pgid)
}

#[cfg(unix)]
mod sys {
    use std::ffi::OsString;
    use std::os::unix::ffi::OsStringExt as _;
    use std::os::unix::fs::PermissionsExt as _;
    use std::path::Path;

    pub(super) const DEVICES: bool = true;
    pub(super) const MODES: bool = true;

    pub(super) fn symlink(original: &Path, link: &Path) -> std::io::Result<()> {
        std::os::unix::fs::symlink(original, link)
    }

    pub(super) fn junction(original: &Path, link: &Path) -> std::io::Result<()> {
        std::os::unix::fs::symlink(original, link)
    }

    pub(super) fn short_name(_path: &Path) -> std::io::Result<Option<std::path::PathBuf>> {
        Err(std::io::Error::new(std::io::ErrorKind::Unsupported, "8.3 short names are Windows'"))
    }

    /// Through the `mkfifo` program: rustix has no `mknodat` on macOS.
    pub(super) fn fifo(path: &Path) -> std::io::Result<()> {
        let status = std::process::Command::new("mkfifo").arg(path).status()?;
        if status.success() { Ok(()) } else { Err(std::io::Error::other(format!("mkfifo failed: {status}"))) }
    }

    pub(super) fn set_mode(path: &Path, mode: u32) -> std::io::Result<()> {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
    }

    pub(super) fn mode(path: &Path) -> Option<u32> {
        Some(std::fs::metadata(path).ok()?.permissions().mode() & 0o7777)
    }

    pub(super) fn non_unicode_name() -> OsString {
        OsString::from_vec(b"\xff".to_vec())
    }

    pub(super) fn non_unicode_between(before: &str, after: &str) -> OsString {
        OsString::from_vec([before.as_bytes(), b"\xe9", after.as_bytes()].concat())
    }

    pub(super) fn kill(pid: u32) -> std::io::Result<()> {
        let pid = i32::try_from(pid).map_err(std::io::Error::other)?;
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL)
            .map_err(std::io::Error::from)
    }

    pub(super) fn process_group_exists(pgid: i32) -> bool {
        use nix::sys::signal::killpg;
        use nix::unistd::Pid;
        killpg(Pid::from_raw(pgid), None) != Err(nix::errno::Errno::ESRCH)
    }
}

#[cfg(windows)]
mod sys {
    use std::ffi::OsString;
    use std::os::windows::ffi::OsStringExt as _;
    use std::path::{Path, PathBuf};

    pub(super) const DEVICES: bool = false;
    pub(super) const MODES: bool = false;

    pub(super) fn symlink(original: &Path, link: &Path) -> std::io::Result<()> {
        let resolved = link.parent().map_or_else(|| original.to_path_buf(), |parent| parent.join(original));
        if resolved.is_dir() {
            std::os::windows::fs::symlink_dir(original, link)
        } else {
            std::os::windows::fs::symlink_file(original, link)
        }
    }

    /// Through `cmd /c mklink /J` (std's `junction_point` is unstable).
    pub(super) fn junction(original: &Path, link: &Path) -> std::io::Result<()> {
        let output =
            std::process::Command::new("cmd").arg("/c").arg("mklink").arg("/J").arg(link).arg(original).output()?;
        if output.status.success() {
            Ok(())
        } else {
            Err(std::io::Error::other(format!(
                "mklink /J failed: {}{}",
                String::from_utf8_lossy(&output.stdout).trim(),
                String::from_utf8_lossy(&output.stderr).trim()
            )))
        }
    }

    /// Read off `dir /x` (GetShortPathNameW needs `unsafe`): the column
    /// before the long name, when it is a short name.
    pub(super) fn short_name(path: &Path) -> std::io::Result<Option<PathBuf>> {
        let (Some(parent), Some(name)) = (path.parent(), path.file_name()) else { return Ok(None) };
        let shown = parent.to_string_lossy();
        let parent_plain = shown.strip_prefix(r"\\?\").unwrap_or(&shown);
        let output = std::process::Command::new("cmd").arg("/c").arg("dir").arg("/x").arg(parent_plain).output()?;
        let listing = String::from_utf8_lossy(&output.stdout);
        let name = name.to_string_lossy();
        let short = listing.lines().find_map(|line| {
            let before = line.trim_end().strip_suffix(name.as_ref())?;
            let short = before.split_whitespace().last()?;
            (short.contains('~') && short != name).then(|| short.to_owned())
        });
        Ok(short.map(|short| parent.join(short)))
    }

    pub(super) fn fifo(_path: &Path) -> std::io::Result<()> {
        Err(std::io::Error::new(std::io::ErrorKind::Unsupported, "Windows has no FIFOs at drive paths"))
    }

    pub(super) fn set_mode(_path: &Path, _mode: u32) -> std::io::Result<()> {
        Err(std::io::Error::new(std::io::ErrorKind::Unsupported, "Windows has no Unix permission bits"))
    }

    pub(super) fn mode(_path: &Path) -> Option<u32> {
        None
    }

    pub(super) fn non_unicode_name() -> OsString {
        OsString::from_wide(&[0xD800])
    }

    pub(super) fn non_unicode_between(before: &str, after: &str) -> OsString {
        let wide: Vec<u16> = before.encode_utf16().chain([0xD800]).chain(after.encode_utf16()).collect();
        OsString::from_wide(&wide)
    }

    pub(super) fn kill(pid: u32) -> std::io::Result<()> {
        let output = std::process::Command::new("taskkill").args(["/F", "/PID", &pid.to_string()]).output()?;
        if output.status.success() {
            Ok(())
        } else {
            Err(std::io::Error::other(format!("taskkill failed: {}", String::from_utf8_lossy(&output.stderr).trim())))
        }
    }

    pub(super) fn process_group_exists(_pgid: i32) -> bool {
        false
    }
}
