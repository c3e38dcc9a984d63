//! For tests: file system objects not every system can make (links, FIFOs,
//! Unix permission bits, names that are not Unicode), made where the system
//! can. Where it cannot, the helper says `skipped: <why>` on stderr and
//! returns `false`, and the test returns there: the rest of the suite stays
//! the same on every system, and what a system lacks is said, not hidden.

use std::path::{Path, PathBuf};

#[allow(clippy::print_stderr)]
fn skipped(what: &str, why: &str) -> bool {
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

/// Whether the system has device files at paths (`/dev/zero`,
/// `/dev/urandom`, `/dev/null`): Unix does, Windows does not.
pub fn devices() -> bool {
    sys::DEVICES || skipped("device files", "this system has none at paths")
}

/// An absolute path whose name is not valid Unicode (a byte 0xFF on Unix, an
/// unpaired surrogate on Windows).
pub fn non_unicode_path() -> PathBuf {
    std::env::temp_dir().join(sys::non_unicode_name())
}

#[cfg(unix)]
mod sys {
    use std::ffi::OsString;
    use std::os::unix::ffi::OsStringExt as _;
    use std::os::unix::fs::PermissionsExt as _;
    use std::path::Path;

    pub(super) const DEVICES: bool = true;

    pub(super) fn symlink(original: &Path, link: &Path) -> std::io::Result<()> {
        std::os::unix::fs::symlink(original, link)
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
}

#[cfg(windows)]
mod sys {
    use std::ffi::OsString;
    use std::os::windows::ffi::OsStringExt as _;
    use std::path::Path;

    pub(super) const DEVICES: bool = false;

    pub(super) fn symlink(original: &Path, link: &Path) -> std::io::Result<()> {
        let resolved = link.parent().map_or_else(|| original.to_path_buf(), |parent| parent.join(original));
        if resolved.is_dir() {
            std::os::windows::fs::symlink_dir(original, link)
        } else {
            std::os::windows::fs::symlink_file(original, link)
        }
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
}
