//! The path authority's touching half on Windows, on cap-std's directory
//! handles: a name beneath a handle is opened handle-relatively
//! (`NtCreateFile` with the handle as its root, `FILE_OPEN_REPARSE_POINT` so
//! no link or junction is followed), which std cannot do and which would
//! need `unsafe` here. The anchor is opened from its volume's root one
//! component at a time, refusing any reparse point on the way.
//!
//! What Windows does not promise that Unix does (*to verify there*: none of
//! this has run on real Windows yet; wine 8 makes no links at all):
//! cap-std creates directories, renames and removes by the handle's final
//! path plus the name, not through the handle, so a directory swapped
//! between the two is not caught; holding each directory of the chain open
//! without `FILE_SHARE_DELETE` (which forbids that swap) is the next
//! phase's. There is no directory flush: a rename is as durable as the
//! file system makes it.

use std::ffi::{OsStr, OsString};
use std::fs::{File, Metadata};
use std::path::{Component, Path, PathBuf};

use cap_fs_ext::{DirExt as _, FollowSymlinks, MetadataExt as _, OpenOptionsFollowExt as _};
use cap_std::ambient_authority;
use cap_std::fs::OpenOptions;

use super::{Facts, FileId, GuardError, Kind};

/// What a replacement keeps of the file it replaces: whether it is read-only
/// (its access list is the directory's, as for any new file).
pub(super) struct Kept(bool);

/// Gives `file` (a replacement's temporary file) what was kept.
pub(super) fn keep(file: &File, kept: &Kept) -> std::io::Result<()> {
    if kept.0 {
        let mut permissions = file.metadata()?.permissions();
        permissions.set_readonly(true);
        file.set_permissions(permissions)?;
    }
    Ok(())
}

/// Why a name would not name the file it spells (a device name, trailing
/// dots or spaces, a stream): see [`super::names`].
pub(super) fn name_trouble(name: &OsStr) -> Option<&'static str> {
    super::names::windows_trouble(name)
}

/// The one spelling of an existing path with no link in it: the volume's
/// (`GetFinalPathNameByHandleW`, through `std::fs::canonicalize`): the drive
/// letter in upper case, every component in its on-disk case, 8.3 short
/// names expanded; then without `\\?\` where the plain form names the same
/// (`dunce`'s rule: a drive path under 260 characters without reserved
/// names; UNC paths stay `\\?\UNC\...`, the same for roots and targets).
/// So `c:\PROJ\a`, `C:/proj/a` and `\\?\C:\proj\a` are one path, and the
/// boundary compares paths without folding case itself (no false "inside"
/// on a case-sensitive folder). As it was when it cannot be read.
pub(super) fn spelled(path: PathBuf) -> PathBuf {
    crate::platform::paths::canonical(&path).unwrap_or(path)
}

/// The identity of what `path` names, and its hard links, read from a handle
/// on it (std's metadata carries neither on stable Rust). If it cannot be
/// read, an identity no anchor has (so a later touch finds it changed) and
/// two links (so a write in place is judged shared, never less).
pub(super) fn identity(path: &Path, _metadata: &Metadata) -> (FileId, u64) {
    FileId::of_path(path).unwrap_or((FileId::default(), 2))
}

/// What a file that is neither a regular file nor a directory is, for
/// messages. Windows has no FIFOs or devices at drive paths.
pub fn special_kind(_metadata: &Metadata) -> &'static str {
    "a special file"
}

fn from_io(err: std::io::Error) -> GuardError {
    match err.kind() {
        std::io::ErrorKind::NotFound => GuardError::NotFound,
        _ => GuardError::Io(err),
    }
}

/// A directory handle: everything beneath it is reached through it.
pub(super) struct Dir(cap_std::fs::Dir);

impl Dir {
    /// Opens the directory at `path` (absolute, with no link in it), from its
    /// volume's root, failing with [`GuardError::Changed`] if any component
    /// is a link, a junction or not a directory.
    pub(super) fn open_nofollow(path: &Path) -> Result<Dir, GuardError> {
        let start: PathBuf = path
            .components()
            .take_while(|component| matches!(component, Component::Prefix(_) | Component::RootDir))
            .collect();
        if !start.has_root() {
            return Err(GuardError::Changed);
        }
        let mut dir = Dir(cap_std::fs::Dir::open_ambient_dir(&start, ambient_authority()).map_err(from_io)?);
        for component in path.components() {
            match component {
                Component::Prefix(_) | Component::RootDir => {}
                Component::Normal(step) => dir = dir.child(step, false).map_err(|err| swapped(step, err))?,
                Component::CurDir | Component::ParentDir => return Err(GuardError::Changed),
            }
        }
        Ok(dir)
    }

    /// Its identity.
    pub(super) fn id(&self) -> Result<FileId, GuardError> {
        let metadata = self.0.dir_metadata().map_err(from_io)?;
        Ok(FileId { dev: metadata.dev(), ino: metadata.ino() })
    }

    /// The directory `step` beneath it, opened without following a link;
    /// created first when missing and `create`.
    pub(super) fn child(&self, step: &OsStr, create: bool) -> Result<Dir, GuardError> {
        let opened = match self.0.open_dir_nofollow(step) {
            Err(err) if err.kind() == std::io::ErrorKind::NotFound && create => {
                match self.0.create_dir(step) {
                    Ok(()) => {}
                    Err(err) if err.kind() == std::io::ErrorKind::AlreadyExists => {}
                    Err(err) => return Err(from_io(err)),
                }
                self.0.open_dir_nofollow(step)
            }
            other => other,
        };
        let opened = opened.map_err(|err| self.classify_open_error(step, err))?;
        // A junction opened as itself is a directory handle too: refused like a link.
        if opened.dir_metadata().map_err(from_io)?.file_type().is_symlink() {
            return Err(GuardError::Changed);
        }
        Ok(Dir(opened))
    }

    /// Why a directory step could not be opened: a link swapped in is a
    /// change, a file is not a directory; anything else as the system says.
    fn classify_open_error(&self, step: &OsStr, err: std::io::Error) -> GuardError {
        if err.kind() == std::io::ErrorKind::NotFound {
            return GuardError::NotFound;
        }
        match self.0.symlink_metadata(step) {
            Ok(metadata) if metadata.file_type().is_symlink() => GuardError::Changed,
            Ok(metadata) if !metadata.is_dir() => {
                GuardError::Unresolvable(format!("{} is not a directory", Path::new(step).display()))
            }
            _ => GuardError::Io(err),
        }
    }

    /// What is at `name` now, looked at without following a link; `None`
    /// when nothing is.
    pub(super) fn look(&self, name: &OsStr) -> Result<Option<Facts>, GuardError> {
        let metadata = match self.0.symlink_metadata(name) {
            Ok(metadata) => metadata,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(err) => return Err(GuardError::Io(err)),
        };
        let kind = metadata.file_type();
        let kind = if kind.is_symlink() {
            Kind::Symlink
        } else if kind.is_dir() {
            Kind::Directory
        } else if kind.is_file() {
            Kind::Regular
        } else {
            Kind::Special("a special file")
        };
        Ok(Some(Facts { kind, links: metadata.nlink(), kept: Kept(metadata.permissions().readonly()) }))
    }

    /// Opens `name` for reading, following no link.
    pub(super) fn open_read(&self, name: &OsStr) -> Result<File, GuardError> {
        let mut options = OpenOptions::new();
        options.read(true).follow(FollowSymlinks::No);
        Ok(self.0.open_with(name, &options).map_err(from_io)?.into_std())
    }

    /// Creates `name` for writing; `None` when something is there already
    /// (a link included).
    pub(super) fn create_new(&self, name: &OsStr) -> Result<Option<File>, GuardError> {
        let mut options = OpenOptions::new();
        options.write(true).create_new(true).follow(FollowSymlinks::No);
        match self.0.open_with(name, &options) {
            Ok(file) => Ok(Some(file.into_std())),
            Err(err) if err.kind() == std::io::ErrorKind::AlreadyExists => Ok(None),
            Err(err) => Err(from_io(err)),
        }
    }

    /// Renames `from` over `to`, both inside this directory.
    pub(super) fn rename(&self, from: &OsStr, to: &OsStr) -> Result<(), GuardError> {
        self.0.rename(from, &self.0, to).map_err(from_io)
    }

    /// Removes the file `name`; nothing there is fine.
    pub(super) fn remove(&self, name: &OsStr) -> Result<(), GuardError> {
        match self.0.remove_file(name) {
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => Ok(()),
            other => other.map_err(GuardError::Io),
        }
    }

    /// Windows has no directory flush.
    pub(super) fn sync(&self) -> std::io::Result<()> {
        Ok(())
    }

    /// The names in it, best effort.
    pub(super) fn names(&self) -> Vec<OsString> {
        let Ok(entries) = self.0.entries() else { return Vec::new() };
        entries.flatten().map(|entry| entry.file_name()).collect()
    }
}

/// A step of a path judged to hold only real directories that could not be
/// opened: missing is missing, anything else means it changed.
fn swapped(_step: &OsStr, err: GuardError) -> GuardError {
    match err {
        GuardError::NotFound | GuardError::Io(_) => err,
        _ => GuardError::Changed,
    }
}

/// Opens `path` (absolute, with no link in it) for reading, failing with
/// [`GuardError::Changed`] if any component is a link.
pub(super) fn open_nofollow(path: &Path) -> Result<File, GuardError> {
    let (Some(parent), Some(name)) = (path.parent(), path.file_name()) else { return Err(GuardError::NotFound) };
    Dir::open_nofollow(parent)?.open_read(name)
}
