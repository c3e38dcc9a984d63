//! Files and folders only the user may read: the session store, the
//! checkpoints, the trace file.
//!
//! Unix: folders are created 0700 and files 0600 (the umask can only take
//! more away), and what an older lathe made readable to others is made
//! private when found. Windows: no access list is written. Files under the
//! data folder (`%LOCALAPPDATA%\lathe`, see [`super::folders`]) inherit the
//! user profile's access list (the user, SYSTEM and Administrators; no other
//! user), which is the platform's own "owner only" for per-user data; a data
//! folder set elsewhere gets that folder's list. SECURITY.md says so. (A
//! list of our own would need `SetNamedSecurityInfoW`, i.e. `unsafe`, and no
//! maintained safe crate does it.)

use std::fs::File;
use std::path::Path;

/// Creates `dir` and any missing parents, each private.
pub fn create_dir(dir: &Path) -> std::io::Result<()> {
    sys::create_dir(dir)
}

/// Takes other users' access away from `path` (a folder or a file) if it
/// has any.
pub fn make_private(path: &Path) -> std::io::Result<()> {
    sys::make_private(path)
}

/// Whether others than the user may read `path` (Unix: any group or other
/// permission bit; Windows: never said, see the module docs).
pub fn readable_by_others(path: &Path) -> bool {
    sys::readable_by_others(path)
}

/// Opens `path` for reading and appending, creating it private; an existing
/// file others could read (an older lathe's) is made private.
pub fn open_append(path: &Path) -> std::io::Result<File> {
    let file = sys::options().create(true).read(true).append(true).open(path)?;
    sys::make_file_private(&file)?;
    Ok(file)
}

/// Opens `path` for reading and writing, creating it private; never truncates.
pub fn open_rw(path: &Path) -> std::io::Result<File> {
    sys::options().read(true).write(true).create(true).truncate(false).open(path)
}

/// Fills `buf` from `file` at `offset`. On Windows the file's cursor moves
/// (a file opened for appending still writes at its end).
pub fn read_at(file: &File, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
    sys::read_at(file, buf, offset)
}

#[cfg(unix)]
mod sys {
    use std::fs::{File, OpenOptions};
    use std::os::unix::fs::{DirBuilderExt as _, FileExt as _, OpenOptionsExt as _, PermissionsExt as _};
    use std::path::Path;

    const PRIVATE_DIR: u32 = 0o700;
    const PRIVATE_FILE: u32 = 0o600;

    pub(super) fn create_dir(dir: &Path) -> std::io::Result<()> {
        std::fs::DirBuilder::new().recursive(true).mode(PRIVATE_DIR).create(dir)
    }

    pub(super) fn make_private(path: &Path) -> std::io::Result<()> {
        let metadata = std::fs::metadata(path)?;
        if metadata.permissions().mode() & 0o077 != 0 {
            let mode = if metadata.is_dir() { PRIVATE_DIR } else { PRIVATE_FILE };
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))?;
        }
        Ok(())
    }

    pub(super) fn readable_by_others(path: &Path) -> bool {
        std::fs::metadata(path).is_ok_and(|metadata| metadata.permissions().mode() & 0o077 != 0)
    }

    pub(super) fn make_file_private(file: &File) -> std::io::Result<()> {
        if file.metadata()?.permissions().mode() & 0o077 != 0 {
            file.set_permissions(std::fs::Permissions::from_mode(PRIVATE_FILE))?;
        }
        Ok(())
    }

    pub(super) fn options() -> OpenOptions {
        let mut options = OpenOptions::new();
        options.mode(PRIVATE_FILE);
        options
    }

    pub(super) fn read_at(file: &File, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
        file.read_exact_at(buf, offset)
    }
}

#[cfg(windows)]
mod sys {
    use std::fs::{File, OpenOptions};
    use std::os::windows::fs::FileExt as _;
    use std::path::Path;

    pub(super) fn create_dir(dir: &Path) -> std::io::Result<()> {
        std::fs::create_dir_all(dir)
    }

    pub(super) fn make_private(_path: &Path) -> std::io::Result<()> {
        Ok(())
    }

    pub(super) fn readable_by_others(_path: &Path) -> bool {
        false
    }

    pub(super) fn make_file_private(_file: &File) -> std::io::Result<()> {
        Ok(())
    }

    pub(super) fn options() -> OpenOptions {
        OpenOptions::new()
    }

    pub(super) fn read_at(file: &File, mut buf: &mut [u8], mut offset: u64) -> std::io::Result<()> {
        while !buf.is_empty() {
            match file.seek_read(buf, offset) {
                Ok(0) => return Err(std::io::ErrorKind::UnexpectedEof.into()),
                Ok(read) => {
                    buf = &mut buf[read..];
                    offset += read as u64;
                }
                Err(err) if err.kind() == std::io::ErrorKind::Interrupted => {}
                Err(err) => return Err(err),
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_is_created_is_private() {
        let dir = tempfile::tempdir().unwrap();
        let folder = dir.path().join("a").join("b");
        create_dir(&folder).unwrap();
        let path = folder.join("log");
        let mut file = open_append(&path).unwrap();
        std::io::Write::write_all(&mut file, b"one\ntwo\n").unwrap();
        let mut last = [0u8; 4];
        read_at(&file, &mut last, 4).unwrap();
        assert_eq!(&last, b"two\n");
        assert!(read_at(&file, &mut last, 6).is_err(), "past the end");
        make_private(&folder).unwrap();
        make_private(&path).unwrap();
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            let mode = |path: &Path| std::fs::metadata(path).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode(&folder), 0o700);
            assert_eq!(mode(&dir.path().join("a")), 0o700);
            assert_eq!(mode(&path), 0o600);
            assert!(!readable_by_others(&path));
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
            std::fs::set_permissions(&folder, std::fs::Permissions::from_mode(0o755)).unwrap();
            assert!(readable_by_others(&path));
            drop(open_append(&path).unwrap());
            make_private(&folder).unwrap();
            assert_eq!((mode(&folder), mode(&path)), (0o700, 0o600), "made private when found open");
            let other = folder.join("other");
            std::fs::write(&other, b"").unwrap();
            std::fs::set_permissions(&other, std::fs::Permissions::from_mode(0o644)).unwrap();
            make_private(&other).unwrap();
            assert_eq!(mode(&other), 0o600);
        }
    }
}
