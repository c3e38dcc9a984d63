//! The local-disk [`Host`]: reading and writing files on this machine when the
//! editor does not serve `fs/*` itself.
//!
//! This module owns the text rules every local file read and write obeys:
//! files over [`MAX_FILE_BYTES`] and binary files are refused before
//! decoding, and errors are phrased for the model. The disk itself is
//! touched only through [`crate::platform::authority`], on the target the permission
//! policy judged: only regular files are opened (a FIFO, socket or device is
//! refused, checked on the open descriptor, so nothing blocks), and writes
//! are atomic (a temporary file in the target's directory, flushed to disk,
//! then renamed over it, all inside the directory handle that was judged)
//! and keep the existing file's permissions. It knows nothing of tools,
//! models or ACP.
//!
//! Atomic means a reader, or the user after lathe is killed at any instant,
//! finds either the old file or the new one, never a mix or a truncation. A
//! kill before the rename leaves the hidden temporary file
//! (`.<name>.<random>.lathe-tmp`) behind; the next write to the same file
//! removes such leftovers once they are [`STALE_TEMP_AGE`] old. Because the
//! new file replaces the old one by rename, a write through a hard link gives
//! that name a new file and leaves the other names (possibly outside the
//! project) with the old content; a write through a symlink rewrites the
//! link's target (where the judged target is) and keeps the link.

use std::path::Path;

use futures_util::future::BoxFuture;

use crate::platform::authority::{GuardError, Target};
pub use crate::platform::authority::{STALE_TEMP_AGE, special_kind};

use super::{Host, HostError, Terminals};

/// Largest file read from disk at all; a model has no use for more in one go.
pub const MAX_FILE_BYTES: u64 = 64 * 1024 * 1024;

/// Bytes inspected for a NUL byte when deciding whether a file is binary.
pub const BINARY_SNIFF_BYTES: usize = 8 * 1024;

/// Files and no terminals, straight on the local disk.
#[derive(Debug, Clone, Copy, Default)]
pub struct LocalHost;

impl Host for LocalHost {
    fn read_text_file<'a>(&'a self, target: &'a Target) -> BoxFuture<'a, Result<String, HostError>> {
        let target = target.clone();
        Box::pin(blocking(move || read_text_blocking(&target, MAX_FILE_BYTES)))
    }

    fn write_text_file<'a>(&'a self, target: &'a Target, content: &'a str) -> BoxFuture<'a, Result<(), HostError>> {
        let target = target.clone();
        let content = content.to_owned();
        // Once started, the blocking write runs to the end even if this future
        // is dropped; that is safe because the rename is the only visible step.
        Box::pin(blocking(move || write_text_blocking(&target, &content)))
    }

    fn reads_via_client(&self) -> bool {
        false
    }

    fn writes_in_place(&self) -> bool {
        false
    }

    fn write_finishes_once_started(&self) -> bool {
        true
    }

    fn terminals(&self) -> Option<&dyn Terminals> {
        None
    }
}

async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, HostError> + Send + 'static,
) -> Result<T, HostError> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|err| HostError::Other(format!("The file operation did not finish: {err}")))?
}

/// Reads the judged text file of at most `max_bytes`, synchronously. Refuses
/// directories, anything that is not a regular file, larger files, and
/// binary content (a NUL byte near the start, or invalid UTF-8).
pub fn read_text_blocking(target: &Target, max_bytes: u64) -> Result<String, HostError> {
    let path = &target.named;
    let bytes = target.read_all(max_bytes).map_err(|err| guard_error(Action::Read, path, err))?;
    let sniff = &bytes[..bytes.len().min(BINARY_SNIFF_BYTES)];
    if sniff.contains(&0) {
        return Err(binary(path, bytes.len() as u64));
    }
    String::from_utf8(bytes).map_err(|err| binary(path, err.as_bytes().len() as u64))
}

fn binary(path: &Path, size: u64) -> HostError {
    HostError::Other(format!("{} is a binary file ({}); only text files can be read.", path.display(), size_text(size)))
}

/// Writes `content` to the judged target atomically, synchronously: parent
/// directories are created, the text goes to a temporary file beside the
/// target, is flushed to disk and renamed over it. An existing file keeps its
/// permissions; a symlink keeps pointing at its (rewritten) target.
pub fn write_text_blocking(target: &Target, content: &str) -> Result<(), HostError> {
    target.write_atomic(content.as_bytes()).map_err(|err| guard_error(Action::Write, &target.named, err))
}

/// What was being done, for messages.
#[derive(Clone, Copy)]
pub enum Action {
    /// Reading a file.
    Read,
    /// Writing a file.
    Write,
}

/// A refusal of the path authority, phrased for the model.
pub fn guard_error(action: Action, path: &Path, err: GuardError) -> HostError {
    let shown = path.display();
    let verb = match action {
        Action::Read => "read",
        Action::Write => "write",
    };
    match (err, action) {
        (GuardError::NotFound, _) => HostError::NotFound(shown.to_string()),
        (GuardError::IsDirectory, Action::Read) => HostError::Other(format!("{shown} is a directory, not a file.")),
        (GuardError::IsDirectory, Action::Write) => {
            HostError::Other(format!("{shown} is a directory; give the path of a file."))
        }
        (GuardError::Special(kind), Action::Read) => {
            HostError::Other(format!("{shown} is {kind}, not a regular file; only regular files can be read."))
        }
        (GuardError::Special(kind), Action::Write) => {
            HostError::Other(format!("{shown} is {kind}, not a regular file; refusing to replace it."))
        }
        (GuardError::TooLarge { size, limit }, _) => HostError::Other(format!(
            "{shown} is too large to read ({}); the limit is {}.",
            size_text(size),
            size_text(limit)
        )),
        (GuardError::Unresolvable(why), _) => HostError::Other(format!("Cannot {verb} {shown}: {why}.")),
        (GuardError::Changed, _) => HostError::Other(format!(
            "Cannot {verb} {shown}: it changed between the permission check and the {verb} (a link or directory \
             was swapped in), so nothing was done. Look at the path again before retrying."
        )),
        (GuardError::Io(err), _) if err.kind() == std::io::ErrorKind::NotFound => {
            HostError::NotFound(shown.to_string())
        }
        (GuardError::Io(err), _) if err.kind() == std::io::ErrorKind::PermissionDenied => {
            HostError::Other(format!("Cannot {verb} {shown}: permission denied."))
        }
        (GuardError::Io(err), _) => HostError::Other(format!("Cannot {verb} {shown}: {err}.")),
    }
}

/// A byte count as people read it: "812 bytes", "3.4 KiB", "2.0 MiB".
pub fn size_text(bytes: u64) -> String {
    const KIB: u64 = 1024;
    const MIB: u64 = 1024 * KIB;
    match bytes {
        b if b < KIB => format!("{b} bytes"),
        b if b < MIB => format!("{:.1} KiB", b as f64 / KIB as f64),
        b => format!("{:.1} MiB", b as f64 / MIB as f64),
    }
}

#[cfg(test)]
mod tests {
    use std::fs::File;
    use std::time::{Duration, SystemTime};

    use super::*;
    use crate::platform::testing;

    fn read(path: &Path) -> Result<String, HostError> {
        read_text_blocking(&Target::of(path), MAX_FILE_BYTES)
    }

    fn write(path: &Path, content: &str) -> Result<(), HostError> {
        write_text_blocking(&Target::of(path), content)
    }

    #[test]
    fn reads_text_and_refuses_what_is_not_text() {
        let dir = tempfile::tempdir().unwrap();
        let text = dir.path().join("a.txt");
        std::fs::write(&text, "héllo\n").unwrap();
        assert_eq!(read(&text).unwrap(), "héllo\n");

        // Not `nul.*`: a reserved device name on Windows.
        let nul = dir.path().join("zero.bin");
        std::fs::write(&nul, b"abc\0def").unwrap();
        let err = read(&nul).unwrap_err().to_string();
        assert!(err.contains("binary file (7 bytes)"), "{err}");

        let latin1 = dir.path().join("latin1.txt");
        std::fs::write(&latin1, b"caf\xe9\n").unwrap();
        let err = read(&latin1).unwrap_err().to_string();
        assert!(err.contains("binary file"), "{err}");

        let err = read(dir.path()).unwrap_err().to_string();
        assert!(err.contains("is a directory"), "{err}");

        assert!(matches!(read(&dir.path().join("missing")), Err(HostError::NotFound(_))));

        let big = dir.path().join("big.txt");
        std::fs::write(&big, "x".repeat(100)).unwrap();
        let err = read_text_blocking(&Target::of(&big), 10).unwrap_err().to_string();
        assert!(err.contains("too large"), "{err}");
    }

    #[tokio::test]
    async fn fifos_are_refused_without_blocking() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("pipe");
        if !testing::fifo(&fifo) {
            return;
        }
        let read =
            tokio::time::timeout(std::time::Duration::from_secs(5), LocalHost.read_text_file(&Target::of(&fifo)))
                .await
                .expect("reading a FIFO must not block");
        let err = read.unwrap_err().to_string();
        assert!(err.contains("named pipe"), "{err}");
        let write =
            tokio::time::timeout(std::time::Duration::from_secs(5), LocalHost.write_text_file(&Target::of(&fifo), "x"))
                .await
                .expect("writing a FIFO must not block");
        assert!(write.unwrap_err().to_string().contains("not a regular file"));
    }

    #[tokio::test]
    async fn writes_create_parents_and_leave_no_temporary_files() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a/b/c.txt");
        LocalHost.write_text_file(&Target::of(&path), "one\n").await.unwrap();
        LocalHost.write_text_file(&Target::of(&path), "two\n").await.unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "two\n");
        let names: Vec<_> =
            std::fs::read_dir(dir.path().join("a/b")).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(names, vec![std::ffi::OsString::from("c.txt")]);

        let err = LocalHost.write_text_file(&Target::of(dir.path()), "x").await.unwrap_err().to_string();
        assert!(err.contains("is a directory"), "{err}");
    }

    #[tokio::test]
    async fn overwrites_keep_mode_and_symlinks() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("secret.txt");
        std::fs::write(&path, "old").unwrap();
        if !testing::set_mode(&path, 0o640) {
            return;
        }
        LocalHost.write_text_file(&Target::of(&path), "new").await.unwrap();
        assert_eq!(testing::mode(&path), Some(0o640));

        let link = dir.path().join("link.txt");
        if !testing::symlink(&path, &link) {
            return;
        }
        LocalHost.write_text_file(&Target::of(&link), "via link").await.unwrap();
        assert!(std::fs::symlink_metadata(&link).unwrap().file_type().is_symlink());
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "via link");

        // A new file follows the umask like any other, not tempfile's private 0600.
        let reference = dir.path().join("reference.txt");
        std::fs::write(&reference, "x").unwrap();
        let fresh = dir.path().join("fresh.txt");
        LocalHost.write_text_file(&Target::of(&fresh), "x").await.unwrap();
        assert_eq!(testing::mode(&fresh), testing::mode(&reference));
    }

    #[tokio::test]
    async fn devices_are_refused_without_reading() {
        if !testing::devices() {
            return;
        }
        for device in ["/dev/zero", "/dev/urandom", "/dev/null"] {
            let path = Path::new(device);
            let read =
                tokio::time::timeout(std::time::Duration::from_secs(5), LocalHost.read_text_file(&Target::of(path)))
                    .await
                    .expect("reading a device must not block");
            let err = read.unwrap_err().to_string();
            assert!(err.contains("is a device, not a regular file"), "{device}: {err}");
        }
        let err = LocalHost.write_text_file(&Target::of(Path::new("/dev/null")), "x").await.unwrap_err().to_string();
        assert!(err.contains("a device, not a regular file; refusing"), "{err}");
    }

    #[test]
    fn files_over_the_limit_are_refused_before_reading() {
        let dir = tempfile::tempdir().unwrap();
        let huge = dir.path().join("huge.log");
        // Sparse: the size is real, the disk space is not.
        File::create(&huge).unwrap().set_len(MAX_FILE_BYTES + 1).unwrap();
        let err = read(&huge).unwrap_err().to_string();
        assert!(err.contains("too large to read (64.0 MiB); the limit is 64.0 MiB"), "{err}");
    }

    #[test]
    fn paths_with_nul_fail_cleanly() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a\0b");
        assert!(read(&path).is_err());
        assert!(write(&path, "x").is_err());
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0, "nothing was created");
    }

    #[test]
    fn symlink_loops_fail_without_hanging() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (dir.path().join("a"), dir.path().join("b"));
        if !(testing::symlink(&b, &a) && testing::symlink(&a, &b)) {
            return;
        }
        assert!(read(&a).is_err());
        let err = write(&a, "x").unwrap_err().to_string();
        assert!(err.contains("Cannot write"), "{err}");
    }

    /// Writes replace the file by rename, so a hard link planted in the
    /// project cannot be used to change the file it shares with a place
    /// outside; that name now has the new content, the other keeps the old.
    #[test]
    fn writes_through_a_hard_link_leave_the_other_name_alone() {
        let outside = tempfile::tempdir().unwrap();
        let project = tempfile::tempdir().unwrap();
        let original = outside.path().join("bashrc");
        std::fs::write(&original, "old\n").unwrap();
        let link = project.path().join("bashrc");
        std::fs::hard_link(&original, &link).unwrap();
        write(&link, "new\n").unwrap();
        assert_eq!(std::fs::read_to_string(&link).unwrap(), "new\n");
        assert_eq!(std::fs::read_to_string(&original).unwrap(), "old\n", "the file outside is untouched");
    }

    #[test]
    fn stale_temporary_files_are_removed_by_the_next_write() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("c.txt");
        let backdate = |name: &str, age: Duration| {
            let path = dir.path().join(name);
            let file = File::create(&path).unwrap();
            file.set_modified(SystemTime::now() - age).unwrap();
            path
        };
        let hour = Duration::from_secs(3600);
        let stale = backdate(".c.txt.Ab12Cd.lathe-tmp", hour);
        let in_use = backdate(".c.txt.Zz99Yy.lathe-tmp", Duration::ZERO);
        let other_file = backdate(".c.txt.old.Ab12Cd.lathe-tmp", hour);
        let not_ours = backdate(".c.txt.Ab12Cd.tmp", hour);
        write(&target, "x").unwrap();
        assert!(!stale.exists(), "a stale temporary file of this target is removed");
        assert!(in_use.exists(), "a recent one may belong to a write in progress");
        assert!(other_file.exists() && not_ours.exists(), "other files are left alone");
    }

    #[test]
    fn sizes_read_naturally() {
        assert_eq!(size_text(812), "812 bytes");
        assert_eq!(size_text(2048), "2.0 KiB");
        assert_eq!(size_text(3 * 1024 * 1024), "3.0 MiB");
    }
}
