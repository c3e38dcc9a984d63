//! A file's identity and change stamp: "is this the same file" and "has it
//! changed since I looked", for the session index (`store/index.rs`), the
//! checkpoints and the path authority.
//!
//! Unix: the device and inode number, the modification and status-change
//! times to the nanosecond. Windows: std gives no file index nor change time
//! from a [`Metadata`] on stable Rust, so a stamp taken from one has no
//! identity (zero) and its change time is its modification time: a file
//! replaced by another of the same length and modification time goes
//! unnoticed there (the checkpoints hash what they keep, so only their
//! cache is affected). An identity read from an open handle
//! ([`FileId::of_path`]) is exact on both: the volume serial number and the
//! file index on Windows, through cap-std's safe call.

use std::fs::Metadata;
use std::path::Path;

/// A file system object's identity: which volume, which object on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct FileId {
    /// The device (Unix) or volume serial number (Windows).
    pub dev: u64,
    /// The inode (Unix) or file index (Windows).
    pub ino: u64,
}

/// What a change to a file changes, as far as its metadata tells.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FileStamp {
    /// Its length in bytes.
    pub len: u64,
    /// Its modification time, in nanoseconds since the Unix epoch.
    pub modified_ns: i128,
    /// Its status-change time (Unix `ctime`), in nanoseconds since the Unix
    /// epoch; the modification time on Windows, which has none.
    pub changed_ns: i128,
    /// Its identity (zero on Windows: see the module docs).
    pub id: FileId,
}

impl FileStamp {
    /// The stamp of the file `metadata` describes.
    pub fn of(metadata: &Metadata) -> FileStamp {
        sys::stamp(metadata)
    }
}

impl FileId {
    /// The identity of what `metadata` describes (zero on Windows: see the
    /// module docs; use [`FileId::of_path`] there).
    pub fn of(metadata: &Metadata) -> FileId {
        sys::stamp(metadata).id
    }

    /// The identity of what `path` names, read from a handle opened on it
    /// without following a final link; with its number of hard links.
    pub fn of_path(path: &Path) -> std::io::Result<(FileId, u64)> {
        sys::of_path(path)
    }
}

#[cfg(unix)]
mod sys {
    use std::fs::Metadata;
    use std::os::unix::fs::MetadataExt;
    use std::path::Path;

    use super::{FileId, FileStamp};

    pub(super) fn stamp(metadata: &Metadata) -> FileStamp {
        FileStamp {
            len: metadata.len(),
            modified_ns: i128::from(metadata.mtime()) * 1_000_000_000 + i128::from(metadata.mtime_nsec()),
            changed_ns: i128::from(metadata.ctime()) * 1_000_000_000 + i128::from(metadata.ctime_nsec()),
            id: FileId { dev: metadata.dev(), ino: metadata.ino() },
        }
    }

    pub(super) fn of_path(path: &Path) -> std::io::Result<(FileId, u64)> {
        let metadata = std::fs::symlink_metadata(path)?;
        Ok((FileId { dev: metadata.dev(), ino: metadata.ino() }, metadata.nlink()))
    }
}

#[cfg(windows)]
mod sys {
    use std::fs::Metadata;
    use std::os::windows::fs::OpenOptionsExt as _;
    use std::path::Path;
    use std::time::SystemTime;

    use cap_fs_ext::MetadataExt as _;

    use super::{FileId, FileStamp};

    /// `FILE_FLAG_BACKUP_SEMANTICS` (directories open too) and
    /// `FILE_FLAG_OPEN_REPARSE_POINT` (a link is opened, not followed).
    const OPEN_AS_IS: u32 = 0x0200_0000 | 0x0020_0000;

    fn nanos(time: std::io::Result<SystemTime>) -> i128 {
        match time.map(|time| time.duration_since(SystemTime::UNIX_EPOCH)) {
            Ok(Ok(after)) => i128::try_from(after.as_nanos()).unwrap_or(i128::MAX),
            Ok(Err(before)) => -i128::try_from(before.duration().as_nanos()).unwrap_or(i128::MAX),
            Err(_) => 0,
        }
    }

    pub(super) fn stamp(metadata: &Metadata) -> FileStamp {
        let modified_ns = nanos(metadata.modified());
        FileStamp { len: metadata.len(), modified_ns, changed_ns: modified_ns, id: FileId::default() }
    }

    pub(super) fn of_path(path: &Path) -> std::io::Result<(FileId, u64)> {
        // No access rights: only the attributes are read, and no share mode is denied to others.
        let file = std::fs::OpenOptions::new().access_mode(0).custom_flags(OPEN_AS_IS).open(path)?;
        let metadata = cap_std::fs::Metadata::from_file(&file)?;
        Ok((FileId { dev: metadata.dev(), ino: metadata.ino() }, metadata.nlink()))
    }
}
