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
//! opened without following any link and its identity compared with the
//! one judged; missing directories below it are created inside the handle
//! and opened the same way; the file itself is opened (no link followed,
//! never blocking, checked to be a regular file on the open handle, so a
//! FIFO never blocks) or written atomically inside that directory handle: a
//! temporary file created there, flushed, renamed over the name, the
//! directory flushed. If anything on the way was swapped for a link or
//! another directory since it was judged, the operation fails with
//! [`GuardError::Changed`] and touches nothing.
//!
//! The judging is portable (std's `symlink_metadata` and `read_link`, which
//! on Windows report junctions as links too). The touching is one
//! implementation per family: `unix.rs` (`openat2(RESOLVE_NO_SYMLINKS)` on
//! Linux, a component-by-component `O_NOFOLLOW` walk elsewhere; `mkdirat`,
//! `renameat`, `unlinkat` through rustix) and `windows.rs` (cap-std's
//! handle-relative opens, see there for what Windows cannot promise).
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

mod names;
#[cfg(unix)]
#[path = "unix.rs"]
mod sys;
#[cfg(windows)]
#[path = "windows.rs"]
mod sys;

use std::collections::VecDeque;
use std::ffi::{OsStr, OsString};
use std::fs::{File, Metadata};
use std::io::{Read, Write};
use std::path::{Component, Path, PathBuf};
use std::time::{Duration, SystemTime};

pub use super::stamp::FileId;
pub use sys::special_kind;
use sys::{Dir, Kept};

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

/// Where a path's walk starts: its prefix and root (`/`; `C:\`,
/// `\\?\UNC\server\share\` on Windows), `/` for a relative one.
fn start_of(path: &Path) -> PathBuf {
    let start: PathBuf = path
        .components()
        .take_while(|component| matches!(component, Component::Prefix(_) | Component::RootDir))
        .collect();
    if start.has_root() { start } else { PathBuf::from(std::path::MAIN_SEPARATOR_STR) }
}

/// Resolves `path` (absolute; a relative one counts from `/`) as the kernel
/// would, following links, without needing the whole path to exist.
fn walk(path: &Path) -> Walk {
    let troubled = path.components().find_map(|component| match component {
        Component::Normal(name) => sys::name_trouble(name).map(|why| (name, why)),
        _ => None,
    });
    if let Some((name, why)) = troubled {
        let why = format!("{}: {why}", name.to_string_lossy());
        return Walk { real: path.to_path_buf(), found: Found::Unresolvable(why), anchor: None };
    }
    let mut pending: VecDeque<Part> = parts(path).into();
    let mut real = start_of(path);
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
                if link.has_root() {
                    real = start_of(&link);
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
            .map(|metadata| Anchor { path: dir.to_path_buf(), id: sys::identity(dir, &metadata).0 })
    };
    // One spelling for every name of the same place (Windows: case, 8.3
    // names, `\\?\`), so that `is_inside` compares like with like.
    let real = sys::spelled(real);
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
        let (id, links) = sys::identity(&real, &metadata);
        Found::File { id, links, size: metadata.len() }
    } else {
        Found::Special(special_kind(&metadata))
    };
    let anchor = real.parent().and_then(|parent| anchor_of(parent, None));
    Walk { real, found, anchor }
}

/// What is at a name inside a directory handle, looked at without following
/// a link.
#[derive(Debug)]
enum Kind {
    Regular,
    Directory,
    Symlink,
    /// A FIFO, socket or device: which, for messages.
    Special(&'static str),
}

/// The facts of a look at a name this module uses.
struct Facts {
    kind: Kind,
    links: u64,
    /// What a replacement carries over from the file (Unix: its mode;
    /// Windows: its read-only attribute).
    kept: Kept,
}

impl Target {
    /// Judges `path` (absolute).
    pub fn of(path: &Path) -> Target {
        let walk = walk(path);
        Target {
            named: super::paths::normalize(path),
            real: walk.real,
            found: walk.found,
            anchor: walk.anchor,
            in_place: false,
        }
    }

    /// Judges a path the model named: absolute as given, `~/` against the
    /// home folder, relative against `cwd` ([`paths::expand`](super::paths::expand)).
    pub fn resolve(cwd: &Path, asked: &str) -> Target {
        Target::of(&super::paths::expand(cwd, asked))
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
        super::paths::display(&self.named, cwd) != super::paths::display(&self.real, &walk(cwd).real)
    }

    /// The target as the user reads it: the name relative to `cwd` and,
    /// when links lead elsewhere, `→` and the real location
    /// (`notes.md → /elsewhere/newdir/x`).
    pub fn shown(&self, cwd: &Path) -> String {
        let named = super::paths::display(&self.named, cwd);
        let real = super::paths::display(&self.real, &walk(cwd).real);
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
    fn open_parent(&self, create: bool) -> Result<(Dir, OsString), GuardError> {
        let anchor =
            self.anchor.as_ref().ok_or_else(|| GuardError::Unresolvable("it has no parent directory".into()))?;
        let (Some(parent), Some(name)) = (self.real.parent(), self.real.file_name()) else {
            return Err(GuardError::IsDirectory);
        };
        let mut dir = Dir::open_nofollow(&anchor.path)?;
        if dir.id()? != anchor.id {
            return Err(GuardError::Changed);
        }
        let below = parent.strip_prefix(&anchor.path).map_err(|_| GuardError::Changed)?;
        for component in below.components() {
            let Component::Normal(step) = component else { return Err(GuardError::Changed) };
            dir = dir.child(step, create)?;
        }
        Ok((dir, name.to_owned()))
    }

    /// Opens the judged file for reading: a regular file only, checked before
    /// and after opening (non-blocking, so a FIFO swapped in never blocks).
    /// Returns it with its size.
    pub fn open_regular(&self) -> Result<(File, u64), GuardError> {
        self.usable()?;
        let (dir, name) = self.open_parent(false)?;
        check_kind(dir.look(&name)?.ok_or(GuardError::NotFound)?.kind)?;
        let file = dir.open_read(&name)?;
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
        let kept = match dir.look(&name)? {
            None => None,
            Some(facts) => {
                check_kind(facts.kind)?;
                Some(facts.kept)
            }
        };
        let prefix = temp_prefix(&name);
        let (temp_name, temp) = create_temp(&dir, &prefix)?;
        let mut temp = TempGuard { dir: &dir, name: Some(temp_name), file: temp };
        temp.file.write_all(content)?;
        if let Some(kept) = &kept {
            sys::keep(&temp.file, kept)?;
        }
        temp.file.sync_all()?;
        let temp_name = temp.name.take().unwrap_or_default();
        if let Err(err) = dir.rename(&temp_name, &name) {
            let _ = dir.remove(&temp_name);
            return Err(err);
        }
        // Makes the rename itself durable. Best effort: some file systems refuse it.
        if let Err(err) = dir.sync() {
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
        match dir.look(&name)? {
            None => return Ok(()),
            Some(facts) => check_kind(facts.kind)?,
        }
        dir.remove(&name)?;
        if let Err(err) = dir.sync() {
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
        let Some(facts) = dir.look(&name)? else { return Ok(()) };
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
        match dir.look(&name)? {
            None => Ok(()),
            Some(facts) => check_kind(facts.kind),
        }
    }
}

fn check_kind(kind: Kind) -> Result<(), GuardError> {
    match kind {
        Kind::Regular => Ok(()),
        Kind::Directory => Err(GuardError::IsDirectory),
        Kind::Symlink => Err(GuardError::Changed),
        Kind::Special(kind) => Err(GuardError::Special(kind)),
    }
}

/// Opens a file a search found (`path` absolute, with no link in it): no
/// link followed anywhere on the way, never blocking, a regular file only.
pub fn open_searchable(path: &Path) -> std::io::Result<File> {
    let file = sys::open_nofollow(path).map_err(std::io::Error::other)?;
    if !file.metadata()?.is_file() {
        return Err(std::io::Error::other("not a regular file"));
    }
    Ok(file)
}

/// Removes the temporary file of a write that failed before its rename.
struct TempGuard<'a> {
    dir: &'a Dir,
    name: Option<OsString>,
    file: File,
}

impl Drop for TempGuard<'_> {
    fn drop(&mut self) {
        if let Some(name) = self.name.take() {
            let _ = self.dir.remove(&name);
        }
    }
}

/// The start of the temporary file names of writes to `name`: hidden and
/// suffixed, so file watchers and globs overlook them; the name is shortened
/// so the temporary name stays within the file system's limit.
fn temp_prefix(name: &OsStr) -> String {
    format!(".{}.", name.to_string_lossy().chars().take(64).collect::<String>())
}

fn create_temp(dir: &Dir, prefix: &str) -> Result<(OsString, File), GuardError> {
    for _ in 0..16 {
        let random: String = uuid::Uuid::new_v4().simple().to_string().chars().take(TEMP_RANDOM_CHARS).collect();
        let name = OsString::from(format!("{prefix}{random}{TEMP_SUFFIX}"));
        if let Some(file) = dir.create_new(&name)? {
            return Ok((name, file));
        }
    }
    Err(std::io::Error::from(std::io::ErrorKind::AlreadyExists).into())
}

/// Removes the temporary files earlier writes to the same file left behind
/// when lathe was killed before renaming them. Best effort.
fn remove_stale_temps(dir: &Dir, prefix: &str) {
    let now = SystemTime::now();
    for name in dir.names() {
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
        let stale = dir
            .open_read(&name)
            .ok()
            .and_then(|file| file.metadata().ok())
            .filter(Metadata::is_file)
            .and_then(|metadata| metadata.modified().ok())
            .and_then(|modified| now.duration_since(modified).ok())
            .is_some_and(|age| age >= STALE_TEMP_AGE);
        if stale && let Err(err) = dir.remove(&name) {
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
mod portable_tests;
#[cfg(test)]
#[cfg(unix)]
mod tests;
#[cfg(test)]
#[cfg(windows)]
mod windows_tests;
