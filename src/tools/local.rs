//! The local-disk [`Host`]: reading and writing files on this machine when the
//! editor does not serve `fs/*` itself.
//!
//! This module owns the disk-level rules every file read and write obeys: only
//! regular files are opened (a FIFO, socket or device is refused before it is
//! opened, so nothing blocks), files over [`MAX_FILE_BYTES`] and binary files
//! are refused before decoding, and writes are atomic (a temporary file in the
//! target's directory, flushed to disk, then renamed over it) and keep the
//! existing file's permissions. It knows nothing of tools, models or ACP; its
//! error messages are written for the model to read.
//!
//! Atomic means a reader, or the user after lathe is killed at any instant,
//! finds either the old file or the new one, never a mix or a truncation. A
//! kill before the rename leaves the hidden temporary file
//! (`.<name>.<random>.lathe-tmp`) behind; the next write to the same file
//! removes such leftovers once they are [`STALE_TEMP_AGE`] old. Because the
//! new file replaces the old one by rename, a write through a hard link gives
//! that name a new file and leaves the other names (possibly outside the
//! project) with the old content; a write through a symlink rewrites the
//! link's target and keeps the link.

use std::fs::{File, Metadata};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use futures_util::future::BoxFuture;

use super::{Host, HostError, Terminals};

/// Largest file read from disk at all; a model has no use for more in one go.
pub const MAX_FILE_BYTES: u64 = 64 * 1024 * 1024;

/// Bytes inspected for a NUL byte when deciding whether a file is binary.
pub const BINARY_SNIFF_BYTES: usize = 8 * 1024;

/// Age at which a leftover temporary file of a killed write is removed. A
/// write in progress is done in seconds; and removing a temporary file still
/// in use would only make that write fail, never touch its target.
pub const STALE_TEMP_AGE: Duration = Duration::from_secs(10 * 60);

/// How temporary files of writes end, so they can be recognised.
const TEMP_SUFFIX: &str = ".lathe-tmp";

/// Random characters in a temporary file's name, between the prefix and the suffix.
const TEMP_RANDOM_CHARS: usize = 6;

/// Files and no terminals, straight on the local disk.
#[derive(Debug, Clone, Copy, Default)]
pub struct LocalHost;

impl Host for LocalHost {
    fn read_text_file<'a>(&'a self, path: &'a Path) -> BoxFuture<'a, Result<String, HostError>> {
        let path = path.to_path_buf();
        Box::pin(blocking(move || read_text_blocking(&path, MAX_FILE_BYTES)))
    }

    fn write_text_file<'a>(&'a self, path: &'a Path, content: &'a str) -> BoxFuture<'a, Result<(), HostError>> {
        let path = path.to_path_buf();
        let content = content.to_owned();
        // Once started, the blocking write runs to the end even if this future
        // is dropped; that is safe because the rename is the only visible step.
        Box::pin(blocking(move || write_text_blocking(&path, &content)))
    }

    fn reads_via_client(&self) -> bool {
        false
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

/// Reads a text file of at most `max_bytes`, synchronously. Refuses
/// directories, anything that is not a regular file, larger files, and
/// binary content (a NUL byte near the start, or invalid UTF-8).
pub fn read_text_blocking(path: &Path, max_bytes: u64) -> Result<String, HostError> {
    let shown = path.display();
    let metadata = std::fs::metadata(path).map_err(|err| io_error("read", path, &err))?;
    check_readable(path, &metadata, max_bytes)?;
    let file = File::open(path).map_err(|err| io_error("read", path, &err))?;
    // The path may have been swapped between the check and the open.
    let opened = file.metadata().map_err(|err| io_error("read", path, &err))?;
    check_readable(path, &opened, max_bytes)?;

    let mut bytes = Vec::with_capacity(usize::try_from(opened.len()).unwrap_or(0));
    file.take(max_bytes.saturating_add(1)).read_to_end(&mut bytes).map_err(|err| io_error("read", path, &err))?;
    if bytes.len() as u64 > max_bytes {
        return Err(HostError::Other(format!(
            "{shown} is too large to read (over {}); the limit is {}.",
            size_text(bytes.len() as u64),
            size_text(max_bytes)
        )));
    }
    let sniff = &bytes[..bytes.len().min(BINARY_SNIFF_BYTES)];
    if sniff.contains(&0) {
        return Err(binary(path, bytes.len() as u64));
    }
    String::from_utf8(bytes).map_err(|err| binary(path, err.as_bytes().len() as u64))
}

fn check_readable(path: &Path, metadata: &Metadata, max_bytes: u64) -> Result<(), HostError> {
    let shown = path.display();
    if metadata.is_dir() {
        return Err(HostError::Other(format!("{shown} is a directory, not a file.")));
    }
    if !metadata.is_file() {
        return Err(HostError::Other(format!(
            "{shown} is {}, not a regular file; only regular files can be read.",
            special_kind(metadata)
        )));
    }
    if metadata.len() > max_bytes {
        return Err(HostError::Other(format!(
            "{shown} is too large to read ({}); the limit is {}.",
            size_text(metadata.len()),
            size_text(max_bytes)
        )));
    }
    Ok(())
}

fn binary(path: &Path, size: u64) -> HostError {
    HostError::Other(format!("{} is a binary file ({}); only text files can be read.", path.display(), size_text(size)))
}

/// What a file that is neither a regular file nor a directory is, for messages:
/// "a named pipe (FIFO)", "a socket", "a device".
#[cfg(unix)]
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

/// What a file that is neither a regular file nor a directory is, for messages.
#[cfg(not(unix))]
pub fn special_kind(_metadata: &Metadata) -> &'static str {
    "a special file"
}

/// Writes `content` to `path` atomically, synchronously: parent directories
/// are created, the text goes to a temporary file beside the target, is
/// flushed to disk and renamed over it. An existing file keeps its
/// permissions; a symlink keeps pointing at its (rewritten) target.
pub fn write_text_blocking(path: &Path, content: &str) -> Result<(), HostError> {
    let target = follow_symlink(path);
    let existing = match std::fs::metadata(&target) {
        Ok(metadata) if metadata.is_dir() => {
            return Err(HostError::Other(format!("{} is a directory; give the path of a file.", path.display())));
        }
        Ok(metadata) if !metadata.is_file() => {
            return Err(HostError::Other(format!(
                "{} is {}, not a regular file; refusing to replace it.",
                path.display(),
                special_kind(&metadata)
            )));
        }
        Ok(metadata) => Some(metadata),
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => None,
        Err(err) => return Err(io_error("write", path, &err)),
    };
    let dir = match target.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => return Err(HostError::Other(format!("Cannot write {}: it has no parent directory.", path.display()))),
    };
    std::fs::create_dir_all(dir).map_err(|err| io_error("create the directory for", path, &err))?;

    let name = target.file_name().map(|name| name.to_string_lossy().into_owned()).unwrap_or_default();
    // Hidden and suffixed, so file watchers and globs overlook it; the name is
    // shortened so the temporary name stays within the file system's limit.
    let prefix = format!(".{}.", name.chars().take(64).collect::<String>());
    let mut builder = tempfile::Builder::new();
    builder.prefix(&prefix).rand_bytes(TEMP_RANDOM_CHARS).suffix(TEMP_SUFFIX);
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        // A new file gets the usual 0666 minus umask rather than tempfile's 0600.
        builder.permissions(std::fs::Permissions::from_mode(0o666));
    }
    let mut temp = builder.tempfile_in(dir).map_err(|err| io_error("write", path, &err))?;
    temp.write_all(content.as_bytes()).map_err(|err| io_error("write", path, &err))?;
    if let Some(metadata) = &existing {
        temp.as_file().set_permissions(metadata.permissions()).map_err(|err| io_error("write", path, &err))?;
    }
    temp.as_file().sync_all().map_err(|err| io_error("write", path, &err))?;
    // On failure the temporary file is removed when the error is dropped.
    temp.persist(&target).map_err(|err| io_error("write", path, &err.error))?;
    sync_dir(dir);
    remove_stale_temps(dir, &prefix);
    Ok(())
}

/// Removes the temporary files earlier writes to the same file left behind
/// when lathe was killed before renaming them. Best effort.
fn remove_stale_temps(dir: &Path, prefix: &str) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    let now = SystemTime::now();
    for entry in entries.flatten() {
        let name = entry.file_name();
        // Exactly this file's shape, so another file's name that merely starts alike is left alone.
        let ours = name.to_str().is_some_and(|name| {
            name.len() == prefix.len() + TEMP_RANDOM_CHARS + TEMP_SUFFIX.len()
                && name.starts_with(prefix)
                && name.ends_with(TEMP_SUFFIX)
        });
        if !ours {
            continue;
        }
        // Not following links: only a regular file this code could have made.
        let stale = entry
            .metadata()
            .ok()
            .filter(Metadata::is_file)
            .and_then(|metadata| metadata.modified().ok())
            .and_then(|modified| now.duration_since(modified).ok())
            .is_some_and(|age| age >= STALE_TEMP_AGE);
        if stale && let Err(err) = std::fs::remove_file(entry.path()) {
            tracing::debug!(path = %entry.path().display(), %err, "could not remove a stale temporary file");
        }
    }
}

/// Where a write to `path` should land: the target of a symlink, so the link
/// survives; the path itself otherwise.
fn follow_symlink(path: &Path) -> PathBuf {
    match std::fs::symlink_metadata(path) {
        Ok(metadata) if metadata.file_type().is_symlink() => match std::fs::canonicalize(path) {
            Ok(real) => real,
            // A dangling link: create the file it points at.
            Err(_) => match (std::fs::read_link(path), path.parent()) {
                (Ok(link), Some(parent)) => super::paths::normalize(&parent.join(link)),
                _ => path.to_path_buf(),
            },
        },
        _ => path.to_path_buf(),
    }
}

/// Makes the rename itself durable. Best effort: some file systems refuse it.
fn sync_dir(dir: &Path) {
    #[cfg(unix)]
    if let Err(err) = File::open(dir).and_then(|dir| dir.sync_all()) {
        tracing::debug!(dir = %dir.display(), %err, "could not sync directory after a write");
    }
    #[cfg(not(unix))]
    let _ = dir;
}

fn io_error(action: &str, path: &Path, err: &std::io::Error) -> HostError {
    match err.kind() {
        std::io::ErrorKind::NotFound => HostError::NotFound(path.display().to_string()),
        std::io::ErrorKind::PermissionDenied => {
            HostError::Other(format!("Cannot {action} {}: permission denied.", path.display()))
        }
        _ => HostError::Other(format!("Cannot {action} {}: {err}.", path.display())),
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
    use super::*;

    fn read(path: &Path) -> Result<String, HostError> {
        read_text_blocking(path, MAX_FILE_BYTES)
    }

    #[test]
    fn reads_text_and_refuses_what_is_not_text() {
        let dir = tempfile::tempdir().unwrap();
        let text = dir.path().join("a.txt");
        std::fs::write(&text, "héllo\n").unwrap();
        assert_eq!(read(&text).unwrap(), "héllo\n");

        let nul = dir.path().join("nul.bin");
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
        let err = read_text_blocking(&big, 10).unwrap_err().to_string();
        assert!(err.contains("too large"), "{err}");
    }

    #[cfg(unix)]
    #[tokio::test]
    async fn fifos_are_refused_without_blocking() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("pipe");
        let status = std::process::Command::new("mkfifo").arg(&fifo).status().unwrap();
        assert!(status.success());
        let read = tokio::time::timeout(std::time::Duration::from_secs(5), LocalHost.read_text_file(&fifo))
            .await
            .expect("reading a FIFO must not block");
        let err = read.unwrap_err().to_string();
        assert!(err.contains("named pipe"), "{err}");
        let write = tokio::time::timeout(std::time::Duration::from_secs(5), LocalHost.write_text_file(&fifo, "x"))
            .await
            .expect("writing a FIFO must not block");
        assert!(write.unwrap_err().to_string().contains("not a regular file"));
    }

    #[tokio::test]
    async fn writes_create_parents_and_leave_no_temporary_files() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a/b/c.txt");
        LocalHost.write_text_file(&path, "one\n").await.unwrap();
        LocalHost.write_text_file(&path, "two\n").await.unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "two\n");
        let names: Vec<_> =
            std::fs::read_dir(dir.path().join("a/b")).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(names, vec![std::ffi::OsString::from("c.txt")]);

        let err = LocalHost.write_text_file(dir.path(), "x").await.unwrap_err().to_string();
        assert!(err.contains("is a directory"), "{err}");
    }

    #[cfg(unix)]
    #[tokio::test]
    async fn overwrites_keep_mode_and_symlinks() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("secret.txt");
        std::fs::write(&path, "old").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o640)).unwrap();
        LocalHost.write_text_file(&path, "new").await.unwrap();
        assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o7777, 0o640);

        let link = dir.path().join("link.txt");
        std::os::unix::fs::symlink(&path, &link).unwrap();
        LocalHost.write_text_file(&link, "via link").await.unwrap();
        assert!(std::fs::symlink_metadata(&link).unwrap().file_type().is_symlink());
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "via link");

        // A new file follows the umask like any other, not tempfile's private 0600.
        let reference = dir.path().join("reference.txt");
        std::fs::write(&reference, "x").unwrap();
        let fresh = dir.path().join("fresh.txt");
        LocalHost.write_text_file(&fresh, "x").await.unwrap();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&fresh), mode(&reference));
    }

    #[cfg(unix)]
    #[tokio::test]
    async fn devices_are_refused_without_reading() {
        for device in ["/dev/zero", "/dev/urandom", "/dev/null"] {
            let path = Path::new(device);
            let read = tokio::time::timeout(std::time::Duration::from_secs(5), LocalHost.read_text_file(path))
                .await
                .expect("reading a device must not block");
            let err = read.unwrap_err().to_string();
            assert!(err.contains("is a device, not a regular file"), "{device}: {err}");
        }
        let err = LocalHost.write_text_file(Path::new("/dev/null"), "x").await.unwrap_err().to_string();
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
        assert!(write_text_blocking(&path, "x").is_err());
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0, "nothing was created");
    }

    #[cfg(unix)]
    #[test]
    fn symlink_loops_fail_without_hanging() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (dir.path().join("a"), dir.path().join("b"));
        std::os::unix::fs::symlink(&b, &a).unwrap();
        std::os::unix::fs::symlink(&a, &b).unwrap();
        assert!(read(&a).is_err());
        let err = write_text_blocking(&a, "x").unwrap_err().to_string();
        assert!(err.contains("Cannot write"), "{err}");
    }

    /// Writes replace the file by rename, so a hard link planted in the
    /// project cannot be used to change the file it shares with a place
    /// outside; that name now has the new content, the other keeps the old.
    #[cfg(unix)]
    #[test]
    fn writes_through_a_hard_link_leave_the_other_name_alone() {
        let outside = tempfile::tempdir().unwrap();
        let project = tempfile::tempdir().unwrap();
        let original = outside.path().join("bashrc");
        std::fs::write(&original, "old\n").unwrap();
        let link = project.path().join("bashrc");
        std::fs::hard_link(&original, &link).unwrap();
        write_text_blocking(&link, "new\n").unwrap();
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
        write_text_blocking(&target, "x").unwrap();
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
