//! What differs per system about files beyond their names and rights: the
//! room a file takes on disk (sparse files, for the checkpoints' storage
//! cap), advisory locks (the checkpoint index and its live front ends, the
//! permission rule files), and opening a file without blocking on a FIFO.
//!
//! Unix: `st_blocks` and `SEEK_HOLE` (where the system has it); `flock`.
//! Windows: no allocation figure in std's metadata, so no file is taken
//! for sparse; locks are `LockFileEx` through `fd-lock`'s safe call, held,
//! like `flock`'s, until the file is closed.

use std::fs::File;
use std::path::Path;

/// Whether `file` (of `size` bytes) is sparse: it takes less than half its
/// length on disk and has a hole before its end (a compressing file system
/// also reports fewer blocks, but no hole). Returns the bytes it takes on
/// disk. Leaves the file's offset at 0.
pub fn sparse(file: &mut File, size: u64) -> Option<u64> {
    sys::sparse(file, size)
}

/// Takes `file`'s exclusive lock, waiting for it when `wait`; whether it
/// did. The lock lasts until the file is closed.
pub fn lock(file: &File, wait: bool) -> std::io::Result<bool> {
    sys::lock(file, wait)
}

/// Opens `path` for reading without waiting on what it is: a FIFO or a
/// device found there does not block the open (Unix: `O_NONBLOCK`; Windows
/// has no FIFOs at paths). The caller checks that it opened a regular file.
/// Links are followed: for lathe's own files (the rule files), not the
/// workspace's (those go through `super::authority`).
pub fn open_read_nonblocking(path: &Path) -> std::io::Result<File> {
    sys::open_read_nonblocking(path)
}

#[cfg(unix)]
mod sys {
    use std::fs::File;
    use std::os::unix::fs::{MetadataExt as _, OpenOptionsExt as _};
    use std::path::Path;

    pub(super) fn open_read_nonblocking(path: &Path) -> std::io::Result<File> {
        let nonblocking = rustix::fs::OFlags::NONBLOCK.bits().cast_signed();
        std::fs::OpenOptions::new().read(true).custom_flags(nonblocking).open(path)
    }

    pub(super) fn sparse(file: &mut File, size: u64) -> Option<u64> {
        let allocated = file.metadata().ok()?.blocks().saturating_mul(512);
        if allocated.saturating_mul(2) >= size {
            return None;
        }
        #[cfg(any(target_os = "linux", target_os = "android", target_os = "macos", target_os = "freebsd"))]
        {
            use std::io::Seek as _;
            let hole = rustix::fs::seek(&*file, rustix::fs::SeekFrom::Hole(0));
            let rewound = file.rewind();
            if rewound.is_err() || hole.is_ok_and(|at| at >= size) {
                return None;
            }
        }
        Some(allocated)
    }

    pub(super) fn lock(file: &File, wait: bool) -> std::io::Result<bool> {
        use rustix::fs::FlockOperation;
        let operation = if wait { FlockOperation::LockExclusive } else { FlockOperation::NonBlockingLockExclusive };
        match rustix::fs::flock(file, operation) {
            Ok(()) => Ok(true),
            Err(rustix::io::Errno::WOULDBLOCK) if !wait => Ok(false),
            Err(err) => Err(err.into()),
        }
    }
}

#[cfg(windows)]
mod sys {
    use std::fs::File;
    use std::path::Path;

    pub(super) fn open_read_nonblocking(path: &Path) -> std::io::Result<File> {
        File::open(path)
    }

    pub(super) fn sparse(_file: &mut File, _size: u64) -> Option<u64> {
        None
    }

    pub(super) fn lock(file: &File, wait: bool) -> std::io::Result<bool> {
        let mut lock = fd_lock::RwLock::new(file);
        let guard = if wait { lock.write() } else { lock.try_write() };
        match guard {
            // Kept until the file is closed, as `flock`'s: the guard's drop would unlock it now.
            Ok(guard) => {
                std::mem::forget(guard);
                Ok(true)
            }
            Err(err) if !wait && err.kind() == std::io::ErrorKind::WouldBlock => Ok(false),
            Err(err) => Err(err),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lock_is_exclusive_until_closed() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("lock");
        let first = super::super::private::open_rw(&path).unwrap();
        assert!(lock(&first, false).unwrap());
        let second = super::super::private::open_rw(&path).unwrap();
        assert!(!lock(&second, false).unwrap(), "held by the first");
        drop(first);
        assert!(lock(&second, false).unwrap(), "free once the first is closed");
    }

    /// A FIFO where a file was expected opens at once (and is then seen
    /// not to be a regular file) instead of waiting for a writer.
    #[test]
    fn a_fifo_opens_without_blocking() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("file");
        std::fs::write(&path, b"text").unwrap();
        assert_eq!(std::io::read_to_string(open_read_nonblocking(&path).unwrap()).unwrap(), "text");
        let fifo = dir.path().join("fifo");
        if !super::super::testing::fifo(&fifo) {
            return;
        }
        let opened = open_read_nonblocking(&fifo).unwrap();
        assert!(!opened.metadata().unwrap().is_file());
    }
}
