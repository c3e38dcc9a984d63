//! The path authority: every file lathe touches for the model, the editor
//! delegation or the workspace's own files (instructions, commands) is
//! judged here on its *final* target, and touched here on the object that
//! was judged.
//!
//! # Judging
//!
//! [`Target::of`] resolves a path the way the kernel would, one component at
//! a time: symlinks are followed wherever they appear (chains of links,
//! relative link targets, up to [`MAX_LINK_HOPS`]), `..` is applied *after*
//! the links before it, and a dangling link is followed through its target's
//! nearest existing ancestor (`notes.md -> /elsewhere/newdir/x` leads to
//! `/elsewhere/newdir/x`, whatever exists of it). The result is the real
//! location (no link in any existing component), what is there now (a
//! regular file with its link count, a directory, a special file, nothing, or
//! a reason it cannot be resolved), and the identity (device and inode) of
//! the deepest existing directory on the way: the *anchor*.
//!
//! [`Target::is_inside`] says whether that real location lies inside the
//! session roots. A regular file with more than one hard link has no single
//! location: a write that changes it in place (the editor's, through
//! `fs/write_text_file`) would change every name of it, possibly outside the
//! roots, so such a write is judged outside. A local write replaces the name
//! by rename and leaves the other names alone, so it is judged by the name.
//!
//! # Touching
//!
//! Nothing here re-resolves a name through links at use time. The anchor is
//! opened without following any link (`openat2(RESOLVE_NO_SYMLINKS)` on
//! Linux, a component-by-component `O_NOFOLLOW` walk elsewhere) and its
//! identity compared with the one judged; missing directories below it are
//! created with `mkdirat` and opened the same way; the file itself is opened
//! (`O_NOFOLLOW | O_NONBLOCK`, checked to be a regular file on the open
//! descriptor, so a FIFO never blocks) or written atomically inside that
//! directory handle: a temporary file created there, flushed, renamed over
//! the name, the directory flushed. If anything on the way was swapped for a
//! link or another directory since it was judged, the operation fails with
//! [`GuardError::Changed`] and touches nothing.
//!
//! What cannot be promised: a delegated operation is done by the editor,
//! which opens the path by name; lathe checks the path again just before
//! asking (no link, same anchor, no new hard link) and sends the real
//! location, which leaves only the moment between that check and the
//! editor's own open. A directory moved elsewhere *after* it was opened still
//! receives the write (the handle follows the directory).
//!
//! The module knows nothing of tools, ACP or the model; its errors are kinds
//! the callers phrase for their readers.

use std::collections::VecDeque;
use std::ffi::{OsStr, OsString};
use std::fs::{File, Metadata};
use std::io::{Read, Write};
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};
use std::time::{Duration, SystemTime};

use rustix::fs::{AtFlags, FileType, Mode, OFlags, Stat};
use rustix::io::Errno;

/// Symlinks followed at most while resolving one path, as Linux's own limit;
/// more means a loop.
pub const MAX_LINK_HOPS: usize = 40;

/// Age at which a leftover temporary file of a killed write is removed. A
/// write in progress is done in seconds; and removing a temporary file still
/// in use would only make that write fail, never touch its target.
pub const STALE_TEMP_AGE: Duration = Duration::from_secs(10 * 60);

/// How temporary files of writes end, so they can be recognised.
pub const TEMP_SUFFIX: &str = ".lathe-tmp";

/// Random characters in a temporary file's name, between the prefix and the suffix.
const TEMP_RANDOM_CHARS: usize = 6;

/// A file system object's identity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FileId {
    dev: u64,
    ino: u64,
}

impl FileId {
    fn of(metadata: &Metadata) -> FileId {
        FileId { dev: metadata.dev(), ino: metadata.ino() }
    }
}

/// What a path leads to, as judged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Found {
    /// Nothing yet: writing creates it (and the missing directories above it).
    Missing,
    /// A regular file.
    File {
        /// Its identity.
        id: FileId,
        /// Its hard links (names).
        links: u64,
        /// Its size in bytes.
        size: u64,
    },
    /// A directory.
    Directory,
    /// A FIFO, socket or device: never opened. Says which, for messages.
    Special(&'static str),
    /// The path cannot lead anywhere: a loop of links, a file used as a
    /// directory, a directory that cannot be searched. Says why.
    Unresolvable(String),
}

/// The deepest existing directory on the way to a target, as judged.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Anchor {
    path: PathBuf,
    id: FileId,
}

/// A path judged on where it really leads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// The path as named: absolute, `.` and `..` removed lexically (for showing).
    pub named: PathBuf,
    /// Where it really leads: every link followed, `..` applied after links.
    pub real: PathBuf,
    /// What is there.
    pub found: Found,
    anchor: Option<Anchor>,
    in_place: bool,
}

/// Why an operation on a target did not happen.
#[derive(Debug, thiserror::Error)]
pub enum GuardError {
    /// Nothing is there.
    #[error("no such file")]
    NotFound,
    /// A directory where a file is needed.
    #[error("it is a directory")]
    IsDirectory,
    /// A FIFO, socket or device.
    #[error("it is {0}, not a regular file")]
    Special(&'static str),
    /// Larger than the caller accepts.
    #[error("it is too large ({size} bytes; the limit is {limit})")]
    TooLarge {
        /// Its size.
        size: u64,
        /// The limit.
        limit: u64,
    },
    /// The path leads nowhere (see [`Found::Unresolvable`]).
    #[error("{0}")]
    Unresolvable(String),
    /// Something on the way was swapped (a link or another directory put in
    /// place) between judging and use; nothing was touched.
    #[error("it changed between the permission check and its use (a link or directory was swapped in)")]
    Changed,
    /// The operating system refused.
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

impl GuardError {
    fn from_errno(errno: Errno) -> GuardError {
        match errno {
            Errno::NOENT => GuardError::NotFound,
            // O_NOFOLLOW met a link, or RESOLVE_NO_SYMLINKS did.
            Errno::LOOP => GuardError::Changed,
            other => GuardError::Io(other.into()),
        }
    }
}

/// One step of a path still to resolve.
enum Part {
    Up,
    Name(OsString),
}

fn parts(path: &Path) -> Vec<Part> {
    path.components()
        .filter_map(|component| match component {
            Component::ParentDir => Some(Part::Up),
            Component::Normal(name) => Some(Part::Name(name.to_owned())),
            Component::RootDir | Component::CurDir | Component::Prefix(_) => None,
        })
        .collect()
}

/// The result of resolving a path.
struct Walk {
    real: PathBuf,
    found: Found,
    anchor: Option<Anchor>,
}

/// Resolves `path` (absolute; a relative one counts from `/`) as the kernel
/// would, following links, without needing the whole path to exist.
fn walk(path: &Path) -> Walk {
    let mut pending: VecDeque<Part> = parts(path).into();
    let mut real = PathBuf::from("/");
    let mut missing: Vec<OsString> = Vec::new();
    let mut hops = 0;
    let mut last: Option<Metadata> = None;
    let unresolvable = |real: &Path, missing: &[OsString], pending: &VecDeque<Part>, why: String| {
        let mut rest = real.to_path_buf();
        rest.extend(missing);
        for part in pending {
            match part {
                Part::Up => {
                    rest.pop();
                }
                Part::Name(name) => rest.push(name),
            }
        }
        Walk { real: rest, found: Found::Unresolvable(why), anchor: None }
    };
    while let Some(part) = pending.pop_front() {
        let name = match part {
            Part::Up => {
                // `..` inside what does not exist yet is lexical; else the real parent.
                if missing.pop().is_none() {
                    real.pop();
                    last = None;
                }
                continue;
            }
            Part::Name(name) => name,
        };
        if !missing.is_empty() {
            missing.push(name);
            continue;
        }
        let candidate = real.join(&name);
        match std::fs::symlink_metadata(&candidate) {
            Ok(metadata) if metadata.file_type().is_symlink() => {
                hops += 1;
                if hops > MAX_LINK_HOPS {
                    let why = format!("too many levels of symbolic links at {} (a loop?)", candidate.display());
                    return unresolvable(&real, &missing, &pending, why);
                }
                let link = match std::fs::read_link(&candidate) {
                    Ok(link) => link,
                    Err(err) => {
                        let why = format!("cannot read the link {}: {err}", candidate.display());
                        return unresolvable(&real, &missing, &pending, why);
                    }
                };
                if link.is_absolute() {
                    real = PathBuf::from("/");
                }
                for part in parts(&link).into_iter().rev() {
                    pending.push_front(part);
                }
                last = None;
            }
            Ok(metadata) if metadata.is_dir() => {
                real = candidate;
                last = Some(metadata);
            }
            Ok(metadata) => {
                if !pending.is_empty() {
                    let why = format!("{} is not a directory", candidate.display());
                    real = candidate;
                    return unresolvable(&real, &missing, &pending, why);
                }
                real = candidate;
                last = Some(metadata);
            }
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => missing.push(name),
            Err(err) => {
                let why = format!("cannot look at {}: {err}", candidate.display());
                return unresolvable(&real, &missing, &pending, why);
            }
        }
    }
    let anchor_of = |dir: &Path, metadata: Option<Metadata>| {
        let metadata = match metadata {
            Some(metadata) => Ok(metadata),
            None => std::fs::symlink_metadata(dir),
        };
        metadata
            .ok()
            .filter(Metadata::is_dir)
            .map(|metadata| Anchor { path: dir.to_path_buf(), id: FileId::of(&metadata) })
    };
    if !missing.is_empty() {
        let anchor = anchor_of(&real, last);
        let mut target = real;
        target.extend(&missing);
        return match anchor {
            Some(anchor) => Walk { real: target, found: Found::Missing, anchor: Some(anchor) },
            None => {
                Walk { real: target, found: Found::Unresolvable("a parent directory vanished".into()), anchor: None }
            }
        };
    }
    let metadata = match last {
        Some(metadata) => metadata,
        None => match std::fs::symlink_metadata(&real) {
            Ok(metadata) => metadata,
            Err(err) => {
                let why = format!("cannot look at {}: {err}", real.display());
                return Walk { real, found: Found::Unresolvable(why), anchor: None };
            }
        },
    };
    let found = if metadata.is_dir() {
        Found::Directory
    } else if metadata.is_file() {
        Found::File { id: FileId::of(&metadata), links: metadata.nlink(), size: metadata.len() }
    } else {
        Found::Special(special_kind(&metadata))
    };
    let anchor = real.parent().and_then(|parent| anchor_of(parent, None));
    Walk { real, found, anchor }
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

fn special_type(kind: FileType) -> &'static str {
    match kind {
        FileType::Fifo => "a named pipe (FIFO)",
        FileType::Socket => "a socket",
        FileType::CharacterDevice | FileType::BlockDevice => "a device",
        FileType::RegularFile | FileType::Directory | FileType::Symlink | FileType::Unknown => "a special file",
    }
}

/// The facts of a `stat` this module uses, in portable types.
struct Facts {
    kind: FileType,
    links: u64,
    mode: u32,
}

// The field types of `struct stat` differ between platforms and architectures.
#[allow(clippy::unnecessary_cast, clippy::useless_conversion)]
fn facts(stat: &Stat) -> Facts {
    Facts {
        kind: FileType::from_raw_mode(stat.st_mode),
        links: stat.st_nlink as u64,
        mode: (stat.st_mode as u32) & 0o7777,
    }
}

#[allow(clippy::unnecessary_cast, clippy::useless_conversion)]
fn stat_id(stat: &Stat) -> FileId {
    FileId { dev: stat.st_dev as u64, ino: stat.st_ino as u64 }
}

impl Target {
    /// Judges `path` (absolute).
    pub fn of(path: &Path) -> Target {
        let walk = walk(path);
        Target {
            named: crate::tools::paths::normalize(path),
            real: walk.real,
            found: walk.found,
            anchor: walk.anchor,
            in_place: false,
        }
    }

    /// Judges a path the model named: absolute as given, `~/` against the
    /// home directory, relative against `cwd`.
    pub fn resolve(cwd: &Path, asked: &str) -> Target {
        let home =
            asked.strip_prefix("~/").and_then(|rest| std::env::var_os("HOME").map(|home| Path::new(&home).join(rest)));
        let joined = match home {
            Some(path) => path,
            None if Path::new(asked).is_absolute() => PathBuf::from(asked),
            None => cwd.join(asked),
        };
        Target::of(&joined)
    }

    /// The same target, to be written in place (by the editor) rather than
    /// replaced by rename: a file with other hard links is then judged
    /// outside the roots.
    #[must_use]
    pub fn written_in_place(mut self, in_place: bool) -> Target {
        self.in_place = in_place;
        self
    }

    /// Whether the target lies inside one of `roots` (judged on their real
    /// locations too). See the module docs for hard links.
    pub fn is_inside(&self, roots: &[PathBuf]) -> bool {
        if self.in_place && matches!(self.found, Found::File { links, .. } if links > 1) {
            return false;
        }
        roots.iter().any(|root| self.real.starts_with(walk(root).real))
    }

    /// Whether following the path went anywhere but where its name says.
    pub fn leads_elsewhere(&self, cwd: &Path) -> bool {
        crate::tools::paths::display(&self.named, cwd) != crate::tools::paths::display(&self.real, &walk(cwd).real)
    }

    /// The target as the user reads it: the name relative to `cwd` and,
    /// when links lead elsewhere, `→` and the real location
    /// (`notes.md → /elsewhere/newdir/x`).
    pub fn shown(&self, cwd: &Path) -> String {
        let named = crate::tools::paths::display(&self.named, cwd);
        let real = crate::tools::paths::display(&self.real, &walk(cwd).real);
        if named == real { named } else { format!("{named} → {real}") }
    }

    fn usable(&self) -> Result<(), GuardError> {
        match &self.found {
            Found::Missing | Found::File { .. } => Ok(()),
            Found::Directory => Err(GuardError::IsDirectory),
            Found::Special(kind) => Err(GuardError::Special(kind)),
            Found::Unresolvable(why) => Err(GuardError::Unresolvable(why.clone())),
        }
    }

    /// Opens the directory that holds the target, beneath the judged anchor
    /// and without following links; creates the missing directories on the
    /// way when `create`.
    fn open_parent(&self, create: bool) -> Result<(OwnedFd, OsString), GuardError> {
        let anchor =
            self.anchor.as_ref().ok_or_else(|| GuardError::Unresolvable("it has no parent directory".into()))?;
        let (Some(parent), Some(name)) = (self.real.parent(), self.real.file_name()) else {
            return Err(GuardError::IsDirectory);
        };
        let mut dir = open_dir_nofollow(&anchor.path)?;
        if stat_id(&rustix::fs::fstat(&dir).map_err(GuardError::from_errno)?) != anchor.id {
            return Err(GuardError::Changed);
        }
        let below = parent.strip_prefix(&anchor.path).map_err(|_| GuardError::Changed)?;
        for component in below.components() {
            let Component::Normal(step) = component else { return Err(GuardError::Changed) };
            let flags = OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::RDONLY | OFlags::CLOEXEC;
            let next = match rustix::fs::openat(&dir, step, flags, Mode::empty()) {
                Err(Errno::NOENT) if create => {
                    match rustix::fs::mkdirat(&dir, step, Mode::RWXU | Mode::RWXG | Mode::RWXO) {
                        Ok(()) | Err(Errno::EXIST) => {}
                        Err(errno) => return Err(GuardError::from_errno(errno)),
                    }
                    rustix::fs::openat(&dir, step, flags, Mode::empty())
                }
                other => other,
            };
            dir = next.map_err(|errno| classify_open_error(&dir, step, errno))?;
        }
        Ok((dir, name.to_owned()))
    }

    /// What is at the target's name now, looked at inside `dir` without
    /// following a link; `None` when nothing is.
    fn look(dir: &OwnedFd, name: &OsStr) -> Result<Option<Facts>, GuardError> {
        match rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(stat) => Ok(Some(facts(&stat))),
            Err(Errno::NOENT) => Ok(None),
            Err(errno) => Err(GuardError::from_errno(errno)),
        }
    }

    /// Opens the judged file for reading: a regular file only, checked before
    /// and after opening (non-blocking, so a FIFO swapped in never blocks).
    /// Returns it with its size.
    pub fn open_regular(&self) -> Result<(File, u64), GuardError> {
        self.usable()?;
        let (dir, name) = self.open_parent(false)?;
        check_kind(Target::look(&dir, &name)?.ok_or(GuardError::NotFound)?.kind)?;
        let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC;
        let fd = rustix::fs::openat(&dir, &name, flags, Mode::empty()).map_err(GuardError::from_errno)?;
        let file = File::from(fd);
        let metadata = file.metadata()?;
        if !metadata.is_file() {
            return Err(if metadata.is_dir() {
                GuardError::IsDirectory
            } else {
                GuardError::Special(special_kind(&metadata))
            });
        }
        Ok((file, metadata.len()))
    }

    /// Reads the whole judged file, refusing one over `max_bytes` (by its
    /// size, and by what is read: at most `max_bytes + 1` bytes).
    pub fn read_all(&self, max_bytes: u64) -> Result<Vec<u8>, GuardError> {
        let (file, size) = self.open_regular()?;
        if size > max_bytes {
            return Err(GuardError::TooLarge { size, limit: max_bytes });
        }
        let mut bytes = Vec::with_capacity(usize::try_from(size).unwrap_or(0));
        file.take(max_bytes.saturating_add(1)).read_to_end(&mut bytes)?;
        if bytes.len() as u64 > max_bytes {
            return Err(GuardError::TooLarge { size: bytes.len() as u64, limit: max_bytes });
        }
        Ok(bytes)
    }

    /// Reads at most `cap` bytes from the start of the judged file; returns
    /// them with the file's size.
    pub fn read_prefix(&self, cap: u64) -> Result<(Vec<u8>, u64), GuardError> {
        let (file, size) = self.open_regular()?;
        let mut bytes = Vec::with_capacity(usize::try_from(size.min(cap)).unwrap_or(0));
        file.take(cap).read_to_end(&mut bytes)?;
        let size = size.max(bytes.len() as u64);
        Ok((bytes, size))
    }

    /// Writes `content` to the judged target atomically: missing directories
    /// are created beneath the judged anchor, a temporary file is written in
    /// the target's directory, flushed, and renamed over the name, all through
    /// the directory's handle. An existing file keeps its permissions; a new
    /// one gets 0666 less the umask.
    pub fn write_atomic(&self, content: &[u8]) -> Result<(), GuardError> {
        self.usable()?;
        let (dir, name) = self.open_parent(true)?;
        let mode = match Target::look(&dir, &name)? {
            None => None,
            Some(facts) => {
                check_kind(facts.kind)?;
                Some(facts.mode)
            }
        };
        let prefix = temp_prefix(&name);
        let (temp_name, temp) = create_temp(&dir, &prefix)?;
        let mut temp = TempGuard { dir: &dir, name: Some(temp_name), file: temp };
        temp.file.write_all(content)?;
        if let Some(mode) = mode {
            temp.file.set_permissions(std::fs::Permissions::from_mode(mode))?;
        }
        temp.file.sync_all()?;
        let temp_name = temp.name.take().unwrap_or_default();
        if let Err(errno) = rustix::fs::renameat(&dir, &temp_name, &dir, &name) {
            let _ = rustix::fs::unlinkat(&dir, &temp_name, AtFlags::empty());
            return Err(GuardError::from_errno(errno));
        }
        // Makes the rename itself durable. Best effort: some file systems refuse it.
        if let Err(err) = rustix::fs::fsync(&dir) {
            tracing::debug!(path = %self.real.display(), %err, "could not sync the directory after a write");
        }
        remove_stale_temps(&dir, &prefix);
        Ok(())
    }

    /// Removes the judged file (an undo of a file a turn created): reached
    /// without links from the judged anchor, and only a regular file (a link
    /// or directory put there since is left alone). Removing a missing file
    /// succeeds.
    pub fn remove_file(&self) -> Result<(), GuardError> {
        self.usable()?;
        let (dir, name) = match self.open_parent(false) {
            Err(GuardError::NotFound) => return Ok(()),
            other => other?,
        };
        match Target::look(&dir, &name)? {
            None => return Ok(()),
            Some(facts) => check_kind(facts.kind)?,
        }
        match rustix::fs::unlinkat(&dir, &name, AtFlags::empty()) {
            Ok(()) | Err(Errno::NOENT) => {}
            Err(errno) => return Err(GuardError::from_errno(errno)),
        }
        if let Err(err) = rustix::fs::fsync(&dir) {
            tracing::debug!(path = %self.real.display(), %err, "could not sync the directory after a removal");
        }
        Ok(())
    }

    /// Readies a write the editor will do in place (`fs/write_text_file`):
    /// checks the target again (no link, same anchor, no hard link that was
    /// not judged) and creates its missing directories beneath the anchor.
    pub fn prepare_in_place(&self) -> Result<(), GuardError> {
        self.usable()?;
        let (dir, name) = self.open_parent(true)?;
        let Some(facts) = Target::look(&dir, &name)? else { return Ok(()) };
        check_kind(facts.kind)?;
        let judged_shared = matches!(self.found, Found::File { links, .. } if links > 1);
        if facts.links > 1 && !judged_shared {
            return Err(GuardError::Changed);
        }
        Ok(())
    }

    /// Checks a read the editor will do (`fs/read_text_file`): the target is
    /// still reached without links from the judged anchor, and is a regular
    /// file, or nothing on disk (the editor may hold an unsaved buffer for it).
    pub fn check_readable(&self) -> Result<(), GuardError> {
        self.usable()?;
        let (dir, name) = match self.open_parent(false) {
            Err(GuardError::NotFound) => return Ok(()),
            other => other?,
        };
        match Target::look(&dir, &name)? {
            None => Ok(()),
            Some(facts) => check_kind(facts.kind),
        }
    }
}

fn check_kind(kind: FileType) -> Result<(), GuardError> {
    match kind {
        FileType::RegularFile => Ok(()),
        FileType::Directory => Err(GuardError::IsDirectory),
        FileType::Symlink => Err(GuardError::Changed),
        other => Err(GuardError::Special(special_type(other))),
    }
}

/// Why a directory step could not be opened: a link or a file swapped in is
/// a change; anything else as the system says.
fn classify_open_error(dir: &OwnedFd, step: &OsStr, errno: Errno) -> GuardError {
    match errno {
        Errno::LOOP | Errno::NOTDIR => match rustix::fs::statat(dir, step, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(stat) if facts(&stat).kind == FileType::Symlink => GuardError::Changed,
            Ok(_) if errno == Errno::NOTDIR => {
                GuardError::Unresolvable(format!("{} is not a directory", Path::new(step).display()))
            }
            _ => GuardError::Changed,
        },
        other => GuardError::from_errno(other),
    }
}

/// Opens the directory at `path` (absolute, with no link in it) for reading,
/// failing if any component is a link.
fn open_dir_nofollow(path: &Path) -> Result<OwnedFd, GuardError> {
    open_nofollow(path, OFlags::DIRECTORY | OFlags::RDONLY | OFlags::CLOEXEC)
}

/// Opens `path` (absolute, with no link in it) with `flags`, failing with
/// [`GuardError::Changed`] if any component is a link.
pub fn open_nofollow(path: &Path, flags: OFlags) -> Result<OwnedFd, GuardError> {
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

/// [`open_nofollow`] one component at a time with `O_NOFOLLOW`, for systems
/// without `openat2`.
fn open_nofollow_walk(path: &Path, flags: OFlags) -> Result<OwnedFd, GuardError> {
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
        other => GuardError::from_errno(other),
    }
}

/// Removes the temporary file of a write that failed before its rename.
struct TempGuard<'a> {
    dir: &'a OwnedFd,
    name: Option<OsString>,
    file: File,
}

impl Drop for TempGuard<'_> {
    fn drop(&mut self) {
        if let Some(name) = self.name.take() {
            let _ = rustix::fs::unlinkat(self.dir, &name, AtFlags::empty());
        }
    }
}

/// The start of the temporary file names of writes to `name`: hidden and
/// suffixed, so file watchers and globs overlook them; the name is shortened
/// so the temporary name stays within the file system's limit.
fn temp_prefix(name: &OsStr) -> String {
    format!(".{}.", name.to_string_lossy().chars().take(64).collect::<String>())
}

fn create_temp(dir: &OwnedFd, prefix: &str) -> Result<(OsString, File), GuardError> {
    let flags = OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    // 0666 less the umask, like any new file (the target's mode is copied after).
    let mode = Mode::RUSR | Mode::WUSR | Mode::RGRP | Mode::WGRP | Mode::ROTH | Mode::WOTH;
    let mut last = Errno::EXIST;
    for _ in 0..16 {
        let random: String = uuid::Uuid::new_v4().simple().to_string().chars().take(TEMP_RANDOM_CHARS).collect();
        let name = OsString::from(format!("{prefix}{random}{TEMP_SUFFIX}"));
        match rustix::fs::openat(dir, &name, flags, mode) {
            Ok(fd) => return Ok((name, File::from(fd))),
            Err(Errno::EXIST) => last = Errno::EXIST,
            Err(errno) => return Err(GuardError::from_errno(errno)),
        }
    }
    Err(GuardError::from_errno(last))
}

/// Removes the temporary files earlier writes to the same file left behind
/// when lathe was killed before renaming them. Best effort.
fn remove_stale_temps(dir: &OwnedFd, prefix: &str) {
    let Ok(entries) = rustix::fs::Dir::read_from(dir) else { return };
    let now = SystemTime::now();
    for entry in entries.flatten() {
        let name = OsStr::from_bytes(entry.file_name().to_bytes());
        // Exactly this file's shape, so another file's name that merely starts alike is left alone.
        let ours = name.to_str().is_some_and(|name| {
            name.len() == prefix.len() + TEMP_RANDOM_CHARS + TEMP_SUFFIX.len()
                && name.starts_with(prefix)
                && name.ends_with(TEMP_SUFFIX)
        });
        if !ours {
            continue;
        }
        // Not following links, not blocking: only a regular file this code could have made.
        let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC;
        let stale = rustix::fs::openat(dir, name, flags, Mode::empty())
            .ok()
            .map(File::from)
            .and_then(|file| file.metadata().ok())
            .filter(Metadata::is_file)
            .and_then(|metadata| metadata.modified().ok())
            .and_then(|modified| now.duration_since(modified).ok())
            .is_some_and(|age| age >= STALE_TEMP_AGE);
        if stale && let Err(err) = rustix::fs::unlinkat(dir, name, AtFlags::empty()) {
            tracing::debug!(name = %name.to_string_lossy(), %err, "could not remove a stale temporary file");
        }
    }
}

/// Where a workspace file may lead for [`read_workspace_file`].
#[derive(Debug, Clone, Copy)]
pub enum Area<'a> {
    /// The user's own file (lathe's config directory): it may lead anywhere,
    /// but is still type- and size-checked.
    Trusted,
    /// A file of the workspace: its final target must lie inside one of these.
    Within(&'a [PathBuf]),
}

/// A workspace file's text, as read by [`read_workspace_file`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkspaceText {
    /// Its first `cap` bytes, decoded (invalid UTF-8 replaced).
    pub text: String,
    /// Bytes of the file left out after the first `cap`.
    pub omitted: u64,
}

/// Why a workspace file was not read.
#[derive(Debug, thiserror::Error)]
pub enum Refusal {
    /// It leads outside the allowed area.
    #[error("it leads outside the project, to {0}")]
    Outside(PathBuf),
    /// It is not a regular file, or cannot be read.
    #[error("{0}")]
    Unreadable(GuardError),
}

/// The one reader for files the workspace supplies that lathe reads on its
/// own (instruction files, command files): regular files only (checked on
/// the opened descriptor, opened without blocking), final target inside
/// `area`, at most `cap` bytes read. `Ok(None)` when there is no such file.
pub fn read_workspace_file(path: &Path, area: Area<'_>, cap: u64) -> Result<Option<WorkspaceText>, Refusal> {
    let target = Target::of(path);
    if target.found == Found::Missing {
        return Ok(None);
    }
    if let Area::Within(roots) = area
        && !target.is_inside(roots)
    {
        return Err(Refusal::Outside(target.real));
    }
    match target.read_prefix(cap) {
        Ok((bytes, size)) => Ok(Some(WorkspaceText {
            text: String::from_utf8_lossy(&bytes).into_owned(),
            omitted: size.saturating_sub(bytes.len() as u64),
        })),
        Err(GuardError::NotFound) => Ok(None),
        Err(err) => Err(Refusal::Unreadable(err)),
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::symlink;

    use super::*;

    struct Tree {
        _dir: tempfile::TempDir,
        root: PathBuf,
        project: PathBuf,
        outside: PathBuf,
    }

    /// `<tmp>/project` (the root) and `<tmp>/outside`, canonical.
    fn tree() -> Tree {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        let project = root.join("project");
        let outside = root.join("outside");
        std::fs::create_dir_all(project.join("src")).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(project.join("src/lib.rs"), "lib").unwrap();
        std::fs::write(outside.join("secret.txt"), "secret").unwrap();
        Tree { _dir: dir, root, project, outside }
    }

    fn mkfifo(path: &Path) {
        rustix::fs::mknodat(rustix::fs::CWD, path, FileType::Fifo, Mode::RUSR | Mode::WUSR, 0).unwrap();
    }

    #[derive(Debug, Clone, Copy, PartialEq)]
    enum Kind {
        Missing,
        File,
        Dir,
        Special,
        Unresolvable,
    }

    fn kind(found: &Found) -> Kind {
        match found {
            Found::Missing => Kind::Missing,
            Found::File { .. } => Kind::File,
            Found::Directory => Kind::Dir,
            Found::Special(_) => Kind::Special,
            Found::Unresolvable(_) => Kind::Unresolvable,
        }
    }

    /// The resolver, table-tested: each path names where it really leads,
    /// what is there, and whether that is inside the project.
    #[test]
    fn the_resolver_table() {
        let t = tree();
        let (p, o) = (&t.project, &t.outside);
        symlink(o.join("secret.txt"), p.join("to_secret")).unwrap();
        symlink(o.join("newdir/x"), p.join("dangling")).unwrap();
        symlink("src/lib.rs", p.join("relative")).unwrap();
        symlink("relative", p.join("chain")).unwrap();
        symlink("chain", p.join("chain2")).unwrap();
        symlink(o, p.join("out_dir")).unwrap();
        symlink("../outside", p.join("up_dir")).unwrap();
        symlink("loop_b", p.join("loop_a")).unwrap();
        symlink("loop_a", p.join("loop_b")).unwrap();
        symlink("src", p.join("src_link")).unwrap();
        std::fs::create_dir_all(o.join("deep/er")).unwrap();
        symlink(o.join("deep/er"), p.join("deeper")).unwrap();
        symlink("/proc/self/environ", p.join("environ")).unwrap();
        mkfifo(&p.join("fifo"));
        symlink("/dev/zero", p.join("zero")).unwrap();
        let cases: &[(&str, Option<PathBuf>, Kind, bool)] = &[
            ("src/lib.rs", Some(p.join("src/lib.rs")), Kind::File, true),
            ("src/new/deeper/file.rs", Some(p.join("src/new/deeper/file.rs")), Kind::Missing, true),
            ("src/../src/lib.rs", Some(p.join("src/lib.rs")), Kind::File, true),
            ("../outside/secret.txt", Some(o.join("secret.txt")), Kind::File, false),
            ("to_secret", Some(o.join("secret.txt")), Kind::File, false),
            // A dangling link leads to its target, through its nearest existing ancestor.
            ("dangling", Some(o.join("newdir/x")), Kind::Missing, false),
            ("relative", Some(p.join("src/lib.rs")), Kind::File, true),
            ("chain2", Some(p.join("src/lib.rs")), Kind::File, true),
            ("out_dir/secret.txt", Some(o.join("secret.txt")), Kind::File, false),
            ("out_dir/new/file", Some(o.join("new/file")), Kind::Missing, false),
            ("up_dir/secret.txt", Some(o.join("secret.txt")), Kind::File, false),
            // `..` after a link climbs from where the link leads, not from its name.
            ("deeper/../secret.txt", Some(o.join("deep/secret.txt")), Kind::Missing, false),
            ("src_link/../src/lib.rs", Some(p.join("src/lib.rs")), Kind::File, true),
            // `..` inside what does not exist yet is lexical.
            ("src/new/../lib.rs", Some(p.join("src/lib.rs")), Kind::File, true),
            ("loop_a", None, Kind::Unresolvable, true),
            ("src/lib.rs/x", None, Kind::Unresolvable, true),
            ("fifo", Some(p.join("fifo")), Kind::Special, true),
            ("zero", Some(PathBuf::from("/dev/zero")), Kind::Special, false),
            ("environ", None, Kind::File, false),
            ("/etc/../etc/passwd", Some(PathBuf::from("/etc/passwd")), Kind::File, false),
        ];
        let roots = vec![p.clone()];
        for (asked, real, expected_kind, inside) in cases {
            let target = Target::resolve(p, asked);
            if let Some(real) = real {
                assert_eq!(&target.real, real, "{asked}");
            }
            assert_eq!(kind(&target.found), *expected_kind, "{asked}: {:?}", target.found);
            if *expected_kind != Kind::Unresolvable || *inside {
                assert_eq!(target.is_inside(&roots), *inside, "{asked} -> {}", target.real.display());
            }
        }
        // The root itself may be reached through a link.
        let link_root = t.root.join("project_link");
        symlink(p, &link_root).unwrap();
        assert!(Target::of(&p.join("src/lib.rs")).is_inside(std::slice::from_ref(&link_root)));
        assert!(Target::resolve(&link_root, "src/lib.rs").is_inside(&roots));
    }

    /// Hard links: inside by name for a write by rename; outside for a write
    /// in place, which would change the other names too.
    #[test]
    fn hard_links_are_outside_for_writes_in_place() {
        let t = tree();
        std::fs::hard_link(t.outside.join("secret.txt"), t.project.join("shared")).unwrap();
        let roots = vec![t.project.clone()];
        let target = Target::resolve(&t.project, "shared");
        assert!(matches!(target.found, Found::File { links: 2, .. }));
        assert!(target.is_inside(&roots));
        assert!(!target.clone().written_in_place(true).is_inside(&roots));
        let single = Target::resolve(&t.project, "src/lib.rs").written_in_place(true);
        assert!(single.is_inside(&roots));
    }

    #[test]
    fn the_name_shown_says_where_a_link_leads() {
        let t = tree();
        symlink(t.outside.join("newdir/x"), t.project.join("notes.md")).unwrap();
        symlink("src/lib.rs", t.project.join("lib_link")).unwrap();
        let shown = |asked: &str| Target::resolve(&t.project, asked).shown(&t.project);
        assert_eq!(shown("notes.md"), format!("notes.md → {}", t.outside.join("newdir/x").display()));
        assert_eq!(shown("lib_link"), "lib_link → src/lib.rs");
        assert_eq!(shown("src/lib.rs"), "src/lib.rs");
        assert_eq!(shown("src/../src/lib.rs"), "src/lib.rs");
        assert!(!Target::resolve(&t.project, "src/lib.rs").leads_elsewhere(&t.project));
    }

    /// Swapping a name between judging and use never makes a write land
    /// outside: the table covers each swap an attacker can make.
    #[test]
    fn swaps_between_judge_and_use_never_write_outside() {
        type Swap = fn(&Tree);
        let swaps: &[(&str, &str, Swap)] = &[
            // Absent when judged, a link to outside when written.
            ("notes.md", "a new file becomes a link", |t| {
                symlink(t.outside.join("notes.md"), t.project.join("notes.md")).unwrap()
            }),
            ("notes.md", "a new file becomes a dangling link", |t| {
                symlink(t.outside.join("newdir/x"), t.project.join("notes.md")).unwrap()
            }),
            // A directory on the way becomes a link to outside.
            ("src/new.rs", "a directory becomes a link", |t| {
                std::fs::rename(t.project.join("src"), t.root.join("moved")).unwrap();
                symlink(&t.outside, t.project.join("src")).unwrap();
            }),
            ("src/a/b/new.rs", "the anchor becomes a link", |t| {
                std::fs::rename(t.project.join("src"), t.root.join("moved")).unwrap();
                symlink(&t.outside, t.project.join("src")).unwrap();
            }),
            // A missing directory appears as a link to outside.
            ("src/a/new.rs", "a missing directory appears as a link", |t| {
                symlink(&t.outside, t.project.join("src/a")).unwrap()
            }),
            // An existing file becomes a link to outside.
            ("src/lib.rs", "a file becomes a link", |t| {
                std::fs::remove_file(t.project.join("src/lib.rs")).unwrap();
                symlink(t.outside.join("secret.txt"), t.project.join("src/lib.rs")).unwrap();
            }),
            // A directory is replaced by another real directory.
            ("src/new.rs", "a directory is replaced", |t| {
                std::fs::rename(t.project.join("src"), t.root.join("moved")).unwrap();
                std::fs::create_dir(t.project.join("src")).unwrap();
            }),
        ];
        for (asked, what, swap) in swaps {
            let t = tree();
            let roots = vec![t.project.clone()];
            let target = Target::resolve(&t.project, asked);
            assert!(target.is_inside(&roots), "{what}: judged inside");
            swap(&t);
            let before = listing(&t.outside);
            let written = target.write_atomic(b"pwned");
            assert_eq!(listing(&t.outside), before, "{what}: nothing outside changed ({written:?})");
            assert_eq!(std::fs::read_to_string(t.outside.join("secret.txt")).unwrap(), "secret", "{what}");
            if let Err(err) = written {
                assert!(matches!(err, GuardError::Changed | GuardError::NotFound), "{what}: {err:?}");
            }
            // The editor's in-place write is refused or stays inside too.
            let t = tree();
            let target = Target::resolve(&t.project, asked).written_in_place(true);
            swap(&t);
            let before = listing(&t.outside);
            let _ = target.prepare_in_place();
            assert_eq!(listing(&t.outside), before, "{what}: no directory created outside");
        }
    }

    /// Every file below `dir` with its content.
    fn listing(dir: &Path) -> Vec<(PathBuf, Option<Vec<u8>>)> {
        let mut found = Vec::new();
        let mut pending = vec![dir.to_path_buf()];
        while let Some(dir) = pending.pop() {
            for entry in std::fs::read_dir(&dir).unwrap() {
                let path = entry.unwrap().path();
                if path.is_dir() {
                    pending.push(path.clone());
                    found.push((path, None));
                } else {
                    found.push((path.clone(), std::fs::read(&path).ok()));
                }
            }
        }
        found.sort();
        found
    }

    #[test]
    fn writes_are_atomic_keep_modes_and_create_directories() {
        let t = tree();
        let target = Target::resolve(&t.project, "a/b/c.txt");
        target.write_atomic(b"one").unwrap();
        assert_eq!(std::fs::read_to_string(t.project.join("a/b/c.txt")).unwrap(), "one");
        let names: Vec<_> = std::fs::read_dir(t.project.join("a/b")).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(names, vec![OsString::from("c.txt")], "no temporary file is left");

        let lib = t.project.join("src/lib.rs");
        std::fs::set_permissions(&lib, std::fs::Permissions::from_mode(0o640)).unwrap();
        Target::resolve(&t.project, "src/lib.rs").write_atomic(b"new").unwrap();
        assert_eq!(std::fs::metadata(&lib).unwrap().permissions().mode() & 0o7777, 0o640);

        // Through a link inside: the link stays and its target is rewritten.
        symlink("src/lib.rs", t.project.join("lib_link")).unwrap();
        Target::resolve(&t.project, "lib_link").write_atomic(b"via link").unwrap();
        assert!(std::fs::symlink_metadata(t.project.join("lib_link")).unwrap().file_type().is_symlink());
        assert_eq!(std::fs::read_to_string(&lib).unwrap(), "via link");
    }

    /// A write the user allowed outside the roots works, on the object judged.
    #[test]
    fn allowed_writes_outside_the_roots_work() {
        let t = tree();
        symlink(t.outside.join("newdir/x"), t.project.join("notes.md")).unwrap();
        let target = Target::resolve(&t.project, "notes.md");
        assert!(!target.is_inside(std::slice::from_ref(&t.project)));
        target.write_atomic(b"allowed").unwrap();
        assert_eq!(std::fs::read_to_string(t.outside.join("newdir/x")).unwrap(), "allowed");
        assert!(std::fs::symlink_metadata(t.project.join("notes.md")).unwrap().file_type().is_symlink());
    }

    #[test]
    fn special_files_are_refused_without_blocking() {
        let t = tree();
        mkfifo(&t.project.join("fifo"));
        let fifo = Target::resolve(&t.project, "fifo");
        assert!(matches!(fifo.read_all(10), Err(GuardError::Special("a named pipe (FIFO)"))));
        assert!(matches!(fifo.write_atomic(b"x"), Err(GuardError::Special(_))));
        // A FIFO swapped in after judging is refused on the open descriptor, without blocking.
        let judged = Target::resolve(&t.project, "src/lib.rs");
        std::fs::remove_file(t.project.join("src/lib.rs")).unwrap();
        mkfifo(&t.project.join("src/lib.rs"));
        assert!(matches!(judged.read_all(10), Err(GuardError::Special(_))));
        assert!(matches!(Target::of(Path::new("/dev/zero")).read_all(10), Err(GuardError::Special("a device"))));
    }

    /// Before the editor is asked to read: nothing on disk is fine (it may
    /// hold an unsaved buffer), a link or FIFO swapped in is not.
    #[test]
    fn editor_reads_are_checked_again() {
        let t = tree();
        assert!(Target::resolve(&t.project, "new/unsaved.md").check_readable().is_ok());
        assert!(Target::resolve(&t.project, "src/lib.rs").check_readable().is_ok());
        let judged = Target::resolve(&t.project, "src/lib.rs");
        std::fs::remove_file(t.project.join("src/lib.rs")).unwrap();
        symlink(t.outside.join("secret.txt"), t.project.join("src/lib.rs")).unwrap();
        assert!(matches!(judged.check_readable(), Err(GuardError::Changed)));
        let judged = Target::resolve(&t.project, "pipe");
        mkfifo(&t.project.join("pipe"));
        assert!(matches!(judged.check_readable(), Err(GuardError::Special(_))));
    }

    #[test]
    fn the_walk_without_openat2_refuses_links_too() {
        let t = tree();
        symlink(&t.outside, t.project.join("out")).unwrap();
        let flags = OFlags::DIRECTORY | OFlags::RDONLY | OFlags::CLOEXEC;
        assert!(open_nofollow_walk(&t.project.join("src"), flags).is_ok());
        assert!(matches!(open_nofollow_walk(&t.project.join("out"), flags), Err(GuardError::Changed)));
        let through = open_nofollow_walk(&t.project.join("out/secret.txt"), OFlags::RDONLY | OFlags::CLOEXEC);
        assert!(through.is_err(), "a link in the middle is refused too");
        assert!(matches!(open_nofollow(&t.project.join("out/secret.txt"), OFlags::RDONLY), Err(GuardError::Changed)));
    }

    #[test]
    fn workspace_files_stay_inside_and_small() {
        let t = tree();
        let roots = vec![t.project.clone()];
        let area = Area::Within(&roots);
        std::fs::write(t.project.join("AGENTS.md"), "x".repeat(100)).unwrap();
        let read = read_workspace_file(&t.project.join("AGENTS.md"), area, 10).unwrap().unwrap();
        assert_eq!((read.text.as_str(), read.omitted), ("xxxxxxxxxx", 90));
        assert_eq!(read_workspace_file(&t.project.join("missing.md"), area, 10).unwrap(), None);
        symlink("/proc/self/environ", t.project.join("environ.md")).unwrap();
        assert!(matches!(read_workspace_file(&t.project.join("environ.md"), area, 10), Err(Refusal::Outside(_))));
        symlink(t.outside.join("secret.txt"), t.project.join("secret.md")).unwrap();
        assert!(matches!(read_workspace_file(&t.project.join("secret.md"), area, 10), Err(Refusal::Outside(_))));
        // The user's own files may lead anywhere, but are still checked.
        let trusted = read_workspace_file(&t.project.join("secret.md"), Area::Trusted, 10).unwrap().unwrap();
        assert_eq!(trusted.text, "secret");
        symlink("/dev/zero", t.project.join("zero.md")).unwrap();
        assert!(matches!(
            read_workspace_file(&t.project.join("zero.md"), Area::Trusted, 10),
            Err(Refusal::Unreadable(_))
        ));
        mkfifo(&t.project.join("fifo.md"));
        assert!(matches!(read_workspace_file(&t.project.join("fifo.md"), area, 10), Err(Refusal::Unreadable(_))));
    }
}
