//! The path authority's touching half on Unix: directory handles are file
//! descriptors, every step beneath them a `*at` call through rustix that
//! follows no link (`openat2(RESOLVE_NO_SYMLINKS)` on Linux for the anchor,
//! a component-by-component `O_NOFOLLOW` walk elsewhere).

use std::ffi::{OsStr, OsString};
use std::fs::{File, Metadata};
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt as _;
use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
use std::path::{Component, Path, PathBuf};

use rustix::fs::{AtFlags, FileType, Mode, OFlags, Stat};
use rustix::io::Errno;

use super::{Facts, FileId, GuardError, Kind};

/// What a replacement keeps of the file it replaces: its permission bits.
pub(super) struct Kept(u32);

/// Gives `file` (a replacement's temporary file) what was kept.
pub(super) fn keep(file: &File, kept: &Kept) -> std::io::Result<()> {
    file.set_permissions(std::fs::Permissions::from_mode(kept.0))
}

/// Why a name would not name the file it spells: never, on Unix (see
/// [`super::names`] for Windows).
pub(super) fn name_trouble(_name: &OsStr) -> Option<&'static str> {
    None
}

/// The spelling of an existing path with no link in it: on Unix the walk's
/// own (every component is a real directory entry, so it is the only one).
pub(super) fn spelled(path: PathBuf) -> PathBuf {
    path
}

/// The identity of what `metadata` (of `_path`) describes, and its hard links.
pub(super) fn identity(_path: &Path, metadata: &Metadata) -> (FileId, u64) {
    (FileId { dev: metadata.dev(), ino: metadata.ino() }, metadata.nlink())
}

/// What a file that is neither a regular file nor a directory is, for
/// messages: "a named pipe (FIFO)", "a socket", "a device".
pub fn special_kind(metadata: &Metadata) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    let kind = metadata.file_type();
    if kind.is_fifo() {
        "a named pipe (FIFO)"
    } else if kind.is_socket() {
        "a socket"
    } else if kind.is_char_device() || kind.is_block_device() {
        "a device"
    } else {
        "a special file"
    }
}

fn from_errno(errno: Errno) -> GuardError {
    match errno {
        Errno::NOENT => GuardError::NotFound,
        // O_NOFOLLOW met a link, or RESOLVE_NO_SYMLINKS did.
        Errno::LOOP => GuardError::Changed,
        other => GuardError::Io(other.into()),
    }
}

fn kind_of(kind: FileType) -> Kind {
    match kind {
        FileType::RegularFile => Kind::Regular,
        FileType::Directory => Kind::Directory,
        FileType::Symlink => Kind::Symlink,
        FileType::Fifo => Kind::Special("a named pipe (FIFO)"),
        FileType::Socket => Kind::Special("a socket"),
        FileType::CharacterDevice | FileType::BlockDevice => Kind::Special("a device"),
        FileType::Unknown => Kind::Special("a special file"),
    }
}

// The field types of `struct stat` differ between platforms and architectures.
#[allow(clippy::unnecessary_cast, clippy::useless_conversion)]
fn facts(stat: &Stat) -> Facts {
    Facts {
        kind: kind_of(FileType::from_raw_mode(stat.st_mode)),
        links: stat.st_nlink as u64,
        kept: Kept((stat.st_mode as u32) & 0o7777),
    }
}

#[allow(clippy::unnecessary_cast, clippy::useless_conversion)]
fn stat_id(stat: &Stat) -> FileId {
    FileId { dev: stat.st_dev as u64, ino: stat.st_ino as u64 }
}

/// A directory handle: everything beneath it is reached through it.
pub(super) struct Dir(OwnedFd);

impl Dir {
    /// Opens the directory at `path` (absolute, with no link in it) for
    /// reading, failing if any component is a link.
    pub(super) fn open_nofollow(path: &Path) -> Result<Dir, GuardError> {
        open_with(path, OFlags::DIRECTORY | OFlags::RDONLY | OFlags::CLOEXEC).map(Dir)
    }

    /// Its identity.
    pub(super) fn id(&self) -> Result<FileId, GuardError> {
        Ok(stat_id(&rustix::fs::fstat(&self.0).map_err(from_errno)?))
    }

    /// The directory `step` beneath it, opened without following a link;
    /// created first when missing and `create`.
    pub(super) fn child(&self, step: &OsStr, create: bool) -> Result<Dir, GuardError> {
        let flags = OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::RDONLY | OFlags::CLOEXEC;
        let next = match rustix::fs::openat(&self.0, step, flags, Mode::empty()) {
            Err(Errno::NOENT) if create => {
                match rustix::fs::mkdirat(&self.0, step, Mode::RWXU | Mode::RWXG | Mode::RWXO) {
                    Ok(()) | Err(Errno::EXIST) => {}
                    Err(errno) => return Err(from_errno(errno)),
                }
                rustix::fs::openat(&self.0, step, flags, Mode::empty())
            }
            other => other,
        };
        next.map(Dir).map_err(|errno| self.classify_open_error(step, errno))
    }

    /// Why a directory step could not be opened: a link or a file swapped in is
    /// a change; anything else as the system says.
    fn classify_open_error(&self, step: &OsStr, errno: Errno) -> GuardError {
        match errno {
            Errno::LOOP | Errno::NOTDIR => match rustix::fs::statat(&self.0, step, AtFlags::SYMLINK_NOFOLLOW) {
                Ok(stat) if FileType::from_raw_mode(stat.st_mode) == FileType::Symlink => GuardError::Changed,
                Ok(_) if errno == Errno::NOTDIR => {
                    GuardError::Unresolvable(format!("{} is not a directory", Path::new(step).display()))
                }
                _ => GuardError::Changed,
            },
            other => from_errno(other),
        }
    }

    /// What is at `name` now, looked at without following a link; `None`
    /// when nothing is.
    pub(super) fn look(&self, name: &OsStr) -> Result<Option<Facts>, GuardError> {
        match rustix::fs::statat(&self.0, name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(stat) => Ok(Some(facts(&stat))),
            Err(Errno::NOENT) => Ok(None),
            Err(errno) => Err(from_errno(errno)),
        }
    }

    /// Opens `name` for reading: no link followed, never blocking (a FIFO
    /// swapped in does not hang the open).
    pub(super) fn open_read(&self, name: &OsStr) -> Result<File, GuardError> {
        let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC;
        rustix::fs::openat(&self.0, name, flags, Mode::empty()).map(File::from).map_err(from_errno)
    }

    /// Creates `name` for writing, 0666 less the umask like any new file;
    /// `None` when something is there already (a link included).
    pub(super) fn create_new(&self, name: &OsStr) -> Result<Option<File>, GuardError> {
        let flags = OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let mode = Mode::RUSR | Mode::WUSR | Mode::RGRP | Mode::WGRP | Mode::ROTH | Mode::WOTH;
        match rustix::fs::openat(&self.0, name, flags, mode) {
            Ok(fd) => Ok(Some(File::from(fd))),
            Err(Errno::EXIST) => Ok(None),
            Err(errno) => Err(from_errno(errno)),
        }
    }

    /// Renames `from` over `to`, both inside this directory.
    pub(super) fn rename(&self, from: &OsStr, to: &OsStr) -> Result<(), GuardError> {
        rustix::fs::renameat(&self.0, from, &self.0, to).map_err(from_errno)
    }

    /// Removes the file (or link) `name`; nothing there is fine.
    pub(super) fn remove(&self, name: &OsStr) -> Result<(), GuardError> {
        match rustix::fs::unlinkat(&self.0, name, AtFlags::empty()) {
            Ok(()) | Err(Errno::NOENT) => Ok(()),
            Err(errno) => Err(from_errno(errno)),
        }
    }

    /// Flushes the directory itself (a rename or removal made durable).
    pub(super) fn sync(&self) -> std::io::Result<()> {
        rustix::fs::fsync(&self.0).map_err(Into::into)
    }

    /// The names in it, best effort.
    pub(super) fn names(&self) -> Vec<OsString> {
        let Ok(entries) = rustix::fs::Dir::read_from(&self.0) else { return Vec::new() };
        entries.flatten().map(|entry| OsStr::from_bytes(entry.file_name().to_bytes()).to_owned()).collect()
    }
}

/// Opens `path` (absolute, with no link in it) read-only and without
/// blocking, failing with [`GuardError::Changed`] if any component is a link.
pub(super) fn open_nofollow(path: &Path) -> Result<File, GuardError> {
    open_with(path, OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC).map(File::from)
}

/// Opens `path` (absolute, with no link in it) with `flags`, failing with
/// [`GuardError::Changed`] if any component is a link.
fn open_with(path: &Path, flags: OFlags) -> Result<OwnedFd, GuardError> {
    #[cfg(any(target_os = "linux", target_os = "android"))]
    {
        use std::sync::atomic::{AtomicBool, Ordering};
        // Kernels before 5.6, or a seccomp filter, refuse openat2; then walk.
        static UNSUPPORTED: AtomicBool = AtomicBool::new(false);
        if !UNSUPPORTED.load(Ordering::Relaxed) {
            let resolve = rustix::fs::ResolveFlags::NO_SYMLINKS | rustix::fs::ResolveFlags::NO_MAGICLINKS;
            match rustix::fs::openat2(rustix::fs::CWD, path, flags | OFlags::NOFOLLOW, Mode::empty(), resolve) {
                Err(Errno::NOSYS | Errno::PERM) => UNSUPPORTED.store(true, Ordering::Relaxed),
                Err(Errno::AGAIN) => {}
                result => return result.map_err(swapped),
            }
        }
    }
    open_nofollow_walk(path, flags)
}

/// [`open_with`] one component at a time with `O_NOFOLLOW`, for systems
/// without `openat2`.
pub(super) fn open_nofollow_walk(path: &Path, flags: OFlags) -> Result<OwnedFd, GuardError> {
    let steps: Vec<&OsStr> = path
        .components()
        .map(|component| match component {
            Component::Normal(name) => Ok(name),
            Component::RootDir => Ok(OsStr::new("/")),
            Component::CurDir | Component::ParentDir | Component::Prefix(_) => Err(GuardError::Changed),
        })
        .collect::<Result<_, _>>()?;
    let Some((last, through)) = steps.split_last() else { return Err(GuardError::NotFound) };
    #[cfg(any(target_os = "linux", target_os = "android"))]
    let search = OFlags::PATH;
    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    let search = OFlags::RDONLY;
    let mut dir: Option<OwnedFd> = None;
    for step in through {
        let flags = OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC | search;
        let opened = match &dir {
            None => rustix::fs::openat(rustix::fs::CWD, *step, flags, Mode::empty()),
            Some(parent) => rustix::fs::openat(parent, *step, flags, Mode::empty()),
        };
        dir = Some(opened.map_err(swapped)?);
    }
    let opened = match &dir {
        None => rustix::fs::openat(rustix::fs::CWD, *last, flags | OFlags::NOFOLLOW, Mode::empty()),
        Some(parent) => rustix::fs::openat(parent, *last, flags | OFlags::NOFOLLOW, Mode::empty()),
    };
    opened.map_err(swapped)
}

/// An error opening a path judged to hold only real directories: a link
/// (`O_NOFOLLOW` gives `ELOOP`, or `ENOTDIR` with `O_DIRECTORY`) or a file
/// where a directory was means it changed since it was judged.
fn swapped(errno: Errno) -> GuardError {
    match errno {
        Errno::NOTDIR => GuardError::Changed,
        other => from_errno(other),
    }
}
