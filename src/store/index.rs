//! The session index: what `session/list` shows of every saved session, kept
//! in memory and in `sessions.index.json` beside the sessions directory, so a
//! list reads neither thousands of `meta.json` files nor any file at all.
//!
//! The index is a cache, never the truth: the session folders are. On disk
//! it is replaced atomically (a private temporary file, then rename) by the
//! store's writer thread, so a crash leaves the old index or the new one,
//! never a torn one. Each entry keeps the identity of the `meta.json` it was
//! read from (mtime, inode, size: a metadata write replaces the file, so its
//! inode changes); loading checks every entry against its folder and
//! re-reads what changed, so an index that is missing, unreadable or stale
//! (a crash before the writer saved it, an older lathe, another lathe
//! process, a folder deleted by hand) is rebuilt from the folders. While the
//! process runs, the writer updates the entries as it writes metadata; a
//! list also notices sessions another process created or deleted (the
//! sessions directory's mtime moved) and reads just those.

use std::collections::{HashMap, HashSet};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};

use super::{META_FILE, SessionMeta, valid_id};
use crate::platform::stamp::FileStamp;
use crate::sync::lock;

/// The index file's name, in the data directory (beside `sessions/`, so
/// saving it does not move the sessions directory's mtime).
pub const INDEX_FILE: &str = "sessions.index.json";
const INDEX_VERSION: u32 = 1;

/// What a list shows of one session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionSummary {
    /// The session id.
    pub session_id: String,
    /// Its working directory.
    pub cwd: PathBuf,
    /// Its further roots.
    pub additional_directories: Vec<PathBuf>,
    /// Its title.
    pub title: Option<String>,
    /// When it last changed (RFC 3339).
    pub updated_at: String,
}

/// A place in the list order (most recent first, then by id): a page starts
/// after it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListKey {
    /// `updatedAt` of the last session shown.
    pub updated_at: String,
    /// Its id.
    pub session_id: String,
}

/// One page of the list.
#[derive(Debug, Default)]
pub struct ListPage {
    /// The sessions, most recent first.
    pub sessions: Vec<SessionSummary>,
    /// Where the next page starts, when there is one.
    pub next: Option<ListKey>,
}

/// Which `meta.json` an entry was read from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stamp(i64, i64, u64, u64);

impl Stamp {
    fn of(metadata: &std::fs::Metadata) -> Stamp {
        let stamp = FileStamp::of(metadata);
        let seconds = i64::try_from(stamp.modified_ns.div_euclid(1_000_000_000)).unwrap_or(i64::MAX);
        let nanos = i64::try_from(stamp.modified_ns.rem_euclid(1_000_000_000)).unwrap_or(0);
        Stamp(seconds, nanos, stamp.id.ino, stamp.len)
    }

    /// The stamp of `dir/meta.json` now, if it exists.
    pub fn read(dir: &Path) -> Option<Stamp> {
        std::fs::metadata(dir.join(META_FILE)).ok().map(|m| Stamp::of(&m))
    }
}

/// One session in memory (its id is the map key; a cwd shared by many
/// sessions is stored once).
#[derive(Debug, Clone)]
pub struct Entry {
    cwd: Arc<Path>,
    additional_directories: Box<[PathBuf]>,
    title: Option<Box<str>>,
    updated_at: Box<str>,
    stamp: Stamp,
}

#[derive(Serialize, Deserialize)]
struct EntryFile<'a> {
    id: std::borrow::Cow<'a, str>,
    cwd: PathBuf,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    dirs: Vec<PathBuf>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    title: Option<std::borrow::Cow<'a, str>>,
    #[serde(rename = "updatedAt")]
    updated_at: std::borrow::Cow<'a, str>,
    stamp: Stamp,
}

#[derive(Serialize, Deserialize)]
struct IndexFile<'a> {
    version: u32,
    #[serde(borrow)]
    sessions: Vec<EntryFile<'a>>,
}

/// A change the writer made, for the index.
#[derive(Debug)]
pub enum Change {
    /// A session's metadata was written.
    Saved(Box<SessionMeta>, Stamp),
    /// A session was deleted.
    Removed(String),
}

/// Every session, by id.
#[derive(Debug, Default)]
pub struct Index {
    entries: HashMap<Box<str>, Entry>,
    cwds: HashSet<Arc<Path>>,
    /// The sessions directory's mtime when its entries were last listed,
    /// if it can be trusted to move on the next change.
    synced: Option<SystemTime>,
}

/// A directory mtime this close to the time it was read may not move again
/// for a change made in the same clock tick: it is not trusted.
const RACY: Duration = Duration::from_millis(50);

fn dir_mtime(root: &Path) -> Option<SystemTime> {
    std::fs::metadata(root).and_then(|m| m.modified()).ok()
}

fn read_meta(dir: &Path) -> Option<(SessionMeta, Stamp)> {
    let path = dir.join(META_FILE);
    let text = std::fs::read(&path).ok()?;
    // The stamp after the read: if the file changed meanwhile, the next load re-reads it.
    let stamp = Stamp::read(dir)?;
    match serde_json::from_slice::<SessionMeta>(&text) {
        Ok(meta) => Some((meta, stamp)),
        Err(err) => {
            tracing::warn!(path = %path.display(), %err, "skipping an unreadable session");
            None
        }
    }
}

impl Index {
    fn intern(&mut self, cwd: PathBuf) -> Arc<Path> {
        if let Some(shared) = self.cwds.get(cwd.as_path()) {
            return Arc::clone(shared);
        }
        let shared: Arc<Path> = Arc::from(cwd);
        self.cwds.insert(Arc::clone(&shared));
        shared
    }

    fn insert(&mut self, meta: SessionMeta, stamp: Stamp) {
        let SessionMeta { session_id, cwd, additional_directories, title, updated_at, .. } = meta;
        let cwd = self.intern(cwd);
        let entry = Entry {
            cwd,
            additional_directories: additional_directories.into_boxed_slice(),
            title: title.map(String::into_boxed_str),
            updated_at: updated_at.into_boxed_str(),
            stamp,
        };
        self.entries.insert(session_id.into_boxed_str(), entry);
    }

    /// Applies a change the writer made.
    pub fn apply(&mut self, change: Change) {
        match change {
            Change::Saved(meta, stamp) => self.insert(*meta, stamp),
            Change::Removed(id) => {
                self.entries.remove(id.as_str());
            }
        }
    }

    /// Loads the index of `root` from `file`, checked against the folders:
    /// entries whose `meta.json` changed are read again, folders missing from
    /// it are read, entries whose folder is gone are dropped. Returns the
    /// index and whether it differs from the file.
    pub fn load(root: &Path, file: &Path) -> (Index, bool) {
        let mut index = Index::default();
        let text = std::fs::read(file).unwrap_or_default();
        let mut known: HashMap<String, Entry> = HashMap::new();
        if !text.is_empty() {
            match serde_json::from_slice::<IndexFile<'_>>(&text) {
                Ok(parsed) if parsed.version == INDEX_VERSION => {
                    for entry in parsed.sessions {
                        let cwd = index.intern(entry.cwd);
                        known.insert(
                            entry.id.into_owned(),
                            Entry {
                                cwd,
                                additional_directories: entry.dirs.into_boxed_slice(),
                                title: entry.title.map(|t| t.into_owned().into_boxed_str()),
                                updated_at: entry.updated_at.into_owned().into_boxed_str(),
                                stamp: entry.stamp,
                            },
                        );
                    }
                }
                Ok(_) => tracing::info!(path = %file.display(), "rebuilding a session index of another version"),
                Err(err) => tracing::warn!(path = %file.display(), %err, "rebuilding an unreadable session index"),
            }
        }
        let listed = known.len();
        let mut changed = text.is_empty();
        let (synced, names) = list_dirs(root);
        index.synced = synced;
        let mut kept = 0usize;
        for name in names {
            let dir = root.join(&name);
            let current = Stamp::read(&dir);
            match (known.remove(&name), current) {
                (Some(entry), Some(stamp)) if entry.stamp == stamp => {
                    index.entries.insert(name.into_boxed_str(), entry);
                    kept += 1;
                }
                (_, Some(_)) => {
                    changed = true;
                    if let Some((meta, stamp)) = read_meta(&dir)
                        && meta.session_id == name
                    {
                        index.insert(meta, stamp);
                    }
                }
                // A folder without metadata (being created, or damaged).
                (_, None) => {}
            }
        }
        changed |= kept != listed;
        (index, changed)
    }

    /// Notices sessions created or deleted by someone else since the last
    /// look (the sessions directory's mtime moved): reads just those.
    /// Returns whether anything changed.
    pub fn resync(&mut self, root: &Path) -> bool {
        let now = dir_mtime(root);
        if now.is_some() && now == self.synced {
            return false;
        }
        let (synced, names) = list_dirs(root);
        self.synced = synced;
        let present: HashSet<&str> = names.iter().map(String::as_str).collect();
        let before = self.entries.len();
        self.entries.retain(|id, _| present.contains(&**id));
        let mut changed = self.entries.len() != before;
        let missing: Vec<String> =
            names.iter().filter(|name| !self.entries.contains_key(name.as_str())).cloned().collect();
        for name in missing {
            if let Some((meta, stamp)) = read_meta(&root.join(&name))
                && meta.session_id == name
            {
                self.insert(meta, stamp);
                changed = true;
            }
        }
        changed
    }

    /// The index as its file holds it.
    pub fn to_file(&self) -> Vec<u8> {
        let sessions = self
            .entries
            .iter()
            .map(|(id, entry)| EntryFile {
                id: std::borrow::Cow::Borrowed(id),
                cwd: entry.cwd.to_path_buf(),
                dirs: entry.additional_directories.to_vec(),
                title: entry.title.as_deref().map(std::borrow::Cow::Borrowed),
                updated_at: std::borrow::Cow::Borrowed(&entry.updated_at),
                stamp: entry.stamp,
            })
            .collect();
        serde_json::to_vec(&IndexFile { version: INDEX_VERSION, sessions }).unwrap_or_default()
    }

    /// Sessions updated before `cutoff` (RFC 3339 times that do not parse are kept).
    pub fn older_than(&self, cutoff: SystemTime) -> Vec<String> {
        self.entries
            .iter()
            .filter(|(_, entry)| humantime::parse_rfc3339_weak(&entry.updated_at).is_ok_and(|at| at < cutoff))
            .map(|(id, _)| id.to_string())
            .collect()
    }

    /// Whether a session is known.
    pub fn contains(&self, id: &str) -> bool {
        self.entries.contains_key(id)
    }

    /// Up to `limit` sessions in `cwd` (all when `None`), most recent first,
    /// after `after`.
    pub fn page(&self, cwd: Option<&Path>, after: Option<&ListKey>, limit: usize) -> ListPage {
        fn key_of<'e>((id, entry): &(&'e str, &'e Entry)) -> (std::cmp::Reverse<&'e str>, &'e str) {
            (std::cmp::Reverse(&entry.updated_at), id)
        }
        let mut matching: Vec<(&str, &Entry)> = self
            .entries
            .iter()
            .map(|(id, entry)| (&**id, entry))
            .filter(|(_, entry)| cwd.is_none_or(|cwd| *entry.cwd == *cwd))
            .filter(|item| {
                after.is_none_or(|after| {
                    key_of(item) > (std::cmp::Reverse(after.updated_at.as_str()), after.session_id.as_str())
                })
            })
            .collect();
        let more = matching.len() > limit;
        if more {
            matching.select_nth_unstable_by(limit, |a, b| key_of(a).cmp(&key_of(b)));
            matching.truncate(limit);
        }
        matching.sort_unstable_by(|a, b| key_of(a).cmp(&key_of(b)));
        let sessions: Vec<SessionSummary> = matching
            .into_iter()
            .map(|(id, entry)| SessionSummary {
                session_id: id.to_string(),
                cwd: entry.cwd.to_path_buf(),
                additional_directories: entry.additional_directories.to_vec(),
                title: entry.title.as_deref().map(str::to_owned),
                updated_at: entry.updated_at.to_string(),
            })
            .collect();
        let next = match (more, sessions.last()) {
            (true, Some(last)) => {
                Some(ListKey { updated_at: last.updated_at.clone(), session_id: last.session_id.clone() })
            }
            _ => None,
        };
        ListPage { sessions, next }
    }
}

/// The session folders under `root`, and its mtime if it can be trusted.
fn list_dirs(root: &Path) -> (Option<SystemTime>, Vec<String>) {
    let before = dir_mtime(root);
    let mut names = Vec::new();
    if let Ok(entries) = std::fs::read_dir(root) {
        for entry in entries.flatten() {
            if !entry.file_type().is_ok_and(|kind| kind.is_dir()) {
                continue;
            }
            if let Ok(name) = entry.file_name().into_string()
                && valid_id(&name)
            {
                names.push(name);
            }
        }
    }
    let trusted = before.filter(|at| at.elapsed().is_ok_and(|age| age > RACY));
    (trusted, names)
}

/// Writes the index file atomically (a private temporary file, then rename).
pub fn save(file: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = file.parent().unwrap_or(Path::new("."));
    let mut temporary = tempfile::Builder::new().prefix(".sessions.index.").tempfile_in(dir)?;
    temporary.write_all(bytes)?;
    temporary.persist(file).map_err(|err| err.error)?;
    Ok(())
}

/// The index shared by the store (lists) and its writer (changes): empty
/// until loaded, changes made during the load applied after it.
#[derive(Debug, Default)]
pub struct Shared {
    state: Mutex<State>,
    ready: Condvar,
}

#[derive(Debug, Default)]
struct State {
    index: Option<Index>,
    loading: bool,
    /// Changes made while loading.
    pending: Vec<Change>,
    /// Loaded, and start-up pruning done: lists may read it.
    ready: bool,
    /// Changed since last saved.
    dirty: bool,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        lock(&self.state)
    }

    /// Marks the load as started: changes are kept for it from now on.
    pub fn start_loading(&self) {
        self.lock().loading = true;
    }

    /// Installs a loaded index and applies what changed meanwhile.
    pub fn install(&self, mut index: Index, changed: bool) {
        let mut state = self.lock();
        for change in std::mem::take(&mut state.pending) {
            index.apply(change);
        }
        state.index = Some(index);
        state.loading = false;
        state.dirty |= changed;
    }

    /// Lists may read it now.
    pub fn set_ready(&self) {
        self.lock().ready = true;
        self.ready.notify_all();
    }

    /// A change the writer made.
    pub fn apply(&self, change: Change) {
        let mut state = self.lock();
        if let Some(index) = &mut state.index {
            index.apply(change);
            state.dirty = true;
        } else if state.loading {
            state.pending.push(change);
        }
        // Not loaded and not loading: the next load reads the folders anyway.
    }

    /// Whether there are changes not yet saved.
    pub fn is_dirty(&self) -> bool {
        self.lock().dirty
    }

    /// The bytes to save, if anything changed; the index counts as saved.
    pub fn take_for_saving(&self) -> Option<Vec<u8>> {
        let mut state = self.lock();
        if !state.dirty {
            return None;
        }
        state.dirty = false;
        state.index.as_ref().map(Index::to_file)
    }

    /// Saving failed: try again later.
    pub fn save_failed(&self) {
        self.lock().dirty = true;
    }

    /// Waits until the index is ready, then runs `read` on it (after a resync
    /// with the folders of `root`).
    pub fn read<T>(&self, root: &Path, read: impl FnOnce(&Index) -> T) -> T {
        let mut state = self.lock();
        while !state.ready {
            state = self.ready.wait(state).unwrap_or_else(PoisonError::into_inner);
        }
        let state = &mut *state;
        let index = state.index.get_or_insert_with(Index::default);
        if index.resync(root) {
            state.dirty = true;
        }
        read(index)
    }
}
