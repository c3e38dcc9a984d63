//! Checkpoints: what each turn changed in the session's files, so `/undo`
//! can put them back and `/redo` can apply them again.
//!
//! Before a turn's first change to a file (a `write_file` or `edit_file`
//! write, or a change a shell command made inside the roots) the file's
//! prior content, or its absence, is saved; when the turn ends, the content
//! it left is saved too. Contents are stored once per distinct content
//! (named by their SHA-256) in `checkpoints/blobs/` of the session's folder,
//! so they are deleted with the session; `checkpoints/index.json` lists the
//! undoable turns, the undone ones that can be redone and the turn being
//! recorded (so a turn cut short by lathe's death can still be undone), and
//! is replaced atomically whenever one of them changes: before a change to
//! a file, at once; when a turn ends, by [`Checkpoints::persist`], which
//! the front end calls once it has answered the turn.
//!
//! Shell commands: before a command runs, the roots are walked (ripgrep's
//! walker: `.gitignore`d files and `.git` are skipped, links are not
//! followed, at most [`SCAN_MAX_FILES`] files) and each file's size, times
//! and inode noted; a file not seen unchanged before is read and saved (a
//! session reads its workspace once, then only what changed). After the
//! command the roots are walked again, and every file whose stamp differs,
//! that appeared or that disappeared is a change of the turn. The copies
//! kept for this are bounded by [`SCAN_MAX_SAVED_BYTES`] and the session's
//! cap. A content-
//! addressed copy costs one read of the workspace's (non-ignored) files and
//! their bytes on disk, once per session; a metadata-only scan could tell a
//! file changed but not what it held.
//!
//! Restores and removals go through the path authority ([`crate::fs_guard`]):
//! atomic, never through a link, never outside the roots. A file is put
//! back only if it still holds what the turn left (unless forced).
//!
//! Storage is bounded by `[sessions] checkpoint_max_bytes`: when a turn ends
//! over it, the cached workspace copies go first, then the oldest turns'
//! checkpoints. Files over [`MAX_FILE_BYTES`] are not saved; `/undo` names
//! them.
//!
//! This module knows files, hashes and the conversation's messages; it knows
//! nothing of any front end or of how a turn runs ([`crate::undo`] calls it
//! where a turn starts and ends, [`RecordingHost`] where a tool changes a
//! file, for the editor's sessions and the terminal's alike).

use std::collections::{HashMap, HashSet};
use std::io::Write as _;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::fs_guard::{Found, GuardError, Target};
use crate::model::Message;

/// Why `/undo` left a file alone that was changed after the turn (the
/// reply's `--force` hint is given for this reason only).
pub const CHANGED_SINCE: &str = "it changed since the turn";

/// Largest file checkpointed (before or after a turn).
pub const MAX_FILE_BYTES: u64 = 10 * 1024 * 1024;

/// Most files one scan of the roots for a shell command looks at.
pub const SCAN_MAX_FILES: usize = 20_000;

/// Most bytes of workspace copies kept for shell commands (see the module
/// docs): beyond it, a file a command changes is named by `/undo`, not restored.
pub const SCAN_MAX_SAVED_BYTES: u64 = 64 * 1024 * 1024;

const INDEX_FILE: &str = "index.json";
const BLOBS_DIR: &str = "blobs";
const INDEX_VERSION: u32 = 1;

/// Saved content: its SHA-256 (hex) and its length.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Blob {
    /// SHA-256 of the bytes, lowercase hex: the file name in `blobs/`.
    pub sha256: String,
    /// Length in bytes.
    pub len: u64,
}

/// One file a turn changed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FileEntry {
    /// Its real location (no link in it).
    pub path: PathBuf,
    /// The file before the turn; `None` when it did not exist.
    #[serde(default)]
    pub before: Option<Blob>,
    /// The file as the turn left it; `None` when it did not exist.
    #[serde(default)]
    pub after: Option<Blob>,
    /// Why it cannot be restored (not saved: too large, outside the roots,
    /// over the storage cap); `None` when it can.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_saved: Option<String>,
}

/// One turn's checkpoint.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TurnRecord {
    /// Counts the session's checkpointed turns.
    pub number: u64,
    /// The start of the user's prompt, for lists.
    pub prompt: String,
    /// When the turn started (RFC 3339).
    pub started_at: String,
    /// Messages in the conversation before the turn; `None` when the turn
    /// compacted it (then it cannot be rewound exactly).
    pub messages_before: Option<usize>,
    /// Messages in the conversation when the turn ended.
    pub messages_after: usize,
    /// The files it changed, in the order it first changed them.
    pub files: Vec<FileEntry>,
}

/// An undone turn that `/redo` can apply again.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Undone {
    /// The turn.
    pub turn: TurnRecord,
    /// The messages the undo took out of the conversation.
    pub messages: Vec<Message>,
    /// Messages in the conversation right after the undo.
    pub messages_after_undo: usize,
    /// The files the undo restored (the only ones a redo changes).
    pub restored: Vec<PathBuf>,
}

#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Index {
    version: u32,
    next: u64,
    turns: Vec<TurnRecord>,
    undone: Vec<Undone>,
    /// The turn being recorded, saved as its changes come so that a turn
    /// cut short by lathe's death can still be undone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    recording: Option<TurnRecord>,
}

/// Why a checkpoint operation failed as a whole.
#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    /// There is no turn to undo.
    #[error("There is no turn to undo.")]
    NothingToUndo,
    /// There is no undone turn to redo.
    #[error("There is no undone turn to redo.")]
    NothingToRedo,
    /// Something changed since the undo, so a redo could lose it.
    #[error("{0}")]
    Diverged(String),
    /// The checkpoint index could not be written.
    #[error("cannot save the checkpoints in {path}: {source}")]
    Io {
        /// Where.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

/// A file an undo or redo changed: what it held and what it holds now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Changed {
    /// The file.
    pub path: PathBuf,
    /// Its text before the undo or redo (`None`: missing, or not text).
    pub old_text: Option<String>,
    /// Its text now (`None`: removed, or not text).
    pub new_text: Option<String>,
    /// Whether the file existed before the undo or redo.
    pub existed: bool,
    /// Whether the file exists now.
    pub exists: bool,
}

/// What an undo or a redo did.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    /// The turn.
    pub turn: TurnRecord,
    /// Files put back.
    pub changed: Vec<Changed>,
    /// Files left alone, with why.
    pub left: Vec<(PathBuf, String)>,
    /// For a redo: the messages to put back into the conversation.
    pub messages: Vec<Message>,
}

/// A file's stamp: what a change to it changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp {
    len: u64,
    mtime_ns: i128,
    ctime_ns: i128,
    ino: u64,
    dev: u64,
}

impl Stamp {
    fn of(metadata: &std::fs::Metadata) -> Stamp {
        Stamp {
            len: metadata.len(),
            mtime_ns: i128::from(metadata.mtime()) * 1_000_000_000 + i128::from(metadata.mtime_nsec()),
            ctime_ns: i128::from(metadata.ctime()) * 1_000_000_000 + i128::from(metadata.ctime_nsec()),
            ino: metadata.ino(),
            dev: metadata.dev(),
        }
    }
}

/// A file as a scan saw it: its stamp and its saved content (or why not).
#[derive(Debug, Clone)]
struct Seen {
    stamp: Stamp,
    saved: Result<Blob, String>,
}

/// The roots as one scan saw them.
#[derive(Debug, Default)]
struct Snapshot {
    files: HashMap<PathBuf, Seen>,
    /// Whether the walk saw every file (not cut at [`SCAN_MAX_FILES`]).
    complete: bool,
}

#[derive(Debug, Default)]
struct State {
    index: Option<Index>,
    /// Saved content of workspace files by stamp, from earlier scans.
    cache: HashMap<PathBuf, Seen>,
    before_command: Option<Snapshot>,
    /// The index in memory is newer than the one on disk: a turn ended and
    /// [`Checkpoints::persist`] has not saved it yet.
    unsaved: bool,
}

/// One session's checkpoints.
#[derive(Debug)]
pub struct Checkpoints {
    dir: PathBuf,
    /// Never walked by scans: lathe's own files (the sessions folder and
    /// its index), should a root contain them.
    excluded: Vec<PathBuf>,
    max_bytes: u64,
    state: Mutex<State>,
    /// The session was deleted: nothing is written any more (a write would
    /// bring its folder back). Set under the state lock, so no write is
    /// under way once [`Checkpoints::discard`] returns.
    discarded: AtomicBool,
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A summary of a prompt for lists: its first line, at most 60 characters.
pub fn summary(prompt: &str) -> String {
    let line = prompt.lines().map(str::trim).find(|line| !line.is_empty()).unwrap_or("");
    let mut cut: String = line.chars().take(60).collect();
    if line.chars().count() > 60 {
        cut.push('…');
    }
    cut
}

impl Checkpoints {
    /// Checkpoints kept in `dir` (created when first needed), at most
    /// `max_bytes` of saved content. What lies under `excluded` is never scanned.
    pub fn new(dir: PathBuf, excluded: Vec<PathBuf>, max_bytes: u64) -> Checkpoints {
        Checkpoints { dir, excluded, max_bytes, state: Mutex::new(State::default()), discarded: AtomicBool::new(false) }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        crate::sync::lock(&self.state)
    }

    /// The session is being deleted: from now on nothing is written, and
    /// a write under way has ended when this returns (it waits for the
    /// lock), so the folder can be deleted without coming back. Blocking.
    pub fn discard(&self) {
        let _state = self.lock();
        self.discarded.store(true, Ordering::Relaxed);
    }

    fn is_discarded(&self) -> bool {
        // Relaxed: set and read under the state lock, which orders them.
        self.discarded.load(Ordering::Relaxed)
    }

    fn file_cap(&self) -> u64 {
        MAX_FILE_BYTES.min(self.max_bytes)
    }

    fn blob_path(&self, blob: &Blob) -> PathBuf {
        self.dir.join(BLOBS_DIR).join(&blob.sha256)
    }

    /// The index, read from disk the first time. A turn still being
    /// recorded there was cut short by lathe's death: it becomes an undoable
    /// turn, with what its files hold now as what it left (its messages
    /// cannot be told apart any more, so it does not rewind them).
    fn index<'s>(&self, state: &'s mut State) -> &'s mut Index {
        if state.index.is_none() {
            let mut index = self.read_index();
            if let Some(mut leftover) = index.recording.take() {
                leftover.messages_before = None;
                self.settle(&mut leftover);
                index.turns.push(leftover);
                if let Err(err) = self.save_index(&index) {
                    tracing::warn!(%err, "cannot save the checkpoints");
                }
            }
            state.index = Some(index);
        }
        state.index.get_or_insert_with(Index::default)
    }

    fn read_index(&self) -> Index {
        let path = self.dir.join(INDEX_FILE);
        match std::fs::read(&path) {
            Ok(bytes) => match serde_json::from_slice::<Index>(&bytes) {
                Ok(index) if index.version <= INDEX_VERSION => index,
                Ok(_) => {
                    tracing::warn!(path = %path.display(), "checkpoints from a newer lathe: starting afresh");
                    Index { version: INDEX_VERSION, ..Index::default() }
                }
                Err(err) => {
                    tracing::warn!(path = %path.display(), %err, "unreadable checkpoint index: starting afresh");
                    Index { version: INDEX_VERSION, ..Index::default() }
                }
            },
            Err(err) => {
                if err.kind() != std::io::ErrorKind::NotFound {
                    tracing::warn!(path = %path.display(), %err, "cannot read the checkpoint index");
                }
                Index { version: INDEX_VERSION, ..Index::default() }
            }
        }
    }

    fn save_or_warn(&self, state: &mut State) {
        let Some(index) = &state.index else { return };
        match self.save_index(index) {
            Ok(()) => state.unsaved = false,
            Err(err) => tracing::warn!(%err, "cannot save the checkpoints"),
        }
    }

    /// Saves what a turn left in each file it changed.
    fn settle(&self, record: &mut TurnRecord) {
        for entry in &mut record.files {
            if entry.not_saved.is_some() {
                continue;
            }
            match self.save_current(&entry.path) {
                Ok(after) => entry.after = after,
                Err(why) => {
                    entry.not_saved = Some(format!("what the turn left could not be saved: {why}"));
                    entry.before = None;
                }
            }
        }
        // A file the turn changed and then put back as it was is no change.
        record.files.retain(|entry| entry.not_saved.is_some() || entry.before != entry.after);
    }

    fn save_index(&self, index: &Index) -> Result<(), CheckpointError> {
        if self.is_discarded() {
            return Ok(());
        }
        let io = |source| CheckpointError::Io { path: self.dir.clone(), source };
        std::fs::create_dir_all(&self.dir).map_err(io)?;
        let mut temp = tempfile::NamedTempFile::new_in(&self.dir).map_err(io)?;
        // Streamed, not encoded into one buffer first: the index grows with
        // the session and is saved after every turn, and a buffer of its size
        // per turn (100 KB at 1,000 turns) raised the allocator's high-water
        // mark turn after turn.
        let mut out = std::io::BufWriter::new(temp.as_file_mut());
        serde_json::to_writer(&mut out, index).map_err(|err| io(err.into()))?;
        out.flush().map_err(io)?;
        drop(out);
        temp.as_file().sync_all().map_err(io)?;
        temp.persist(self.dir.join(INDEX_FILE)).map_err(|err| io(err.error))?;
        Ok(())
    }

    /// Saves `bytes` (once per content) and names them.
    fn store(&self, bytes: &[u8]) -> std::io::Result<Blob> {
        if self.is_discarded() {
            return Err(std::io::Error::other("the session was deleted"));
        }
        let blob = Blob { sha256: hex(&Sha256::digest(bytes)), len: bytes.len() as u64 };
        let path = self.blob_path(&blob);
        if path.exists() {
            return Ok(blob);
        }
        let dir = self.dir.join(BLOBS_DIR);
        std::fs::create_dir_all(&dir)?;
        // Not flushed to the device one by one (a command's first scan may
        // save thousands): a copy a crash tore fails its hash check when
        // loaded, and is then named as not restored, never written back.
        let mut temp = tempfile::NamedTempFile::new_in(&dir)?;
        temp.write_all(bytes)?;
        temp.persist(&path).map_err(|err| err.error)?;
        Ok(blob)
    }

    fn load(&self, blob: &Blob) -> std::io::Result<Vec<u8>> {
        let bytes = std::fs::read(self.blob_path(blob))?;
        if bytes.len() as u64 != blob.len || hex(&Sha256::digest(&bytes)) != blob.sha256 {
            return Err(std::io::Error::other("the saved copy is damaged"));
        }
        Ok(bytes)
    }

    /// What a file holds now, read without following links: `Ok(None)` when
    /// there is nothing, its bytes when it is a regular file within the cap.
    fn read_current(&self, path: &Path) -> Result<Option<Vec<u8>>, String> {
        let target = Target::of(path);
        if target.real != path {
            return Err("a link now leads elsewhere from its path".to_owned());
        }
        match &target.found {
            Found::Missing => Ok(None),
            Found::File { .. } => match target.read_all(self.file_cap()) {
                Ok(bytes) => Ok(Some(bytes)),
                Err(GuardError::NotFound) => Ok(None),
                Err(GuardError::TooLarge { size, limit }) => {
                    Err(format!("it is {size} bytes, over the {limit}-byte checkpoint limit"))
                }
                Err(err) => Err(err.to_string()),
            },
            Found::Directory => Err("it is a directory now".to_owned()),
            Found::Special(kind) => Err(format!("it is {kind} now")),
            Found::Unresolvable(why) => Err(why.clone()),
        }
    }

    /// Saves what a file holds now: `Ok(None)` for no file.
    fn save_current(&self, path: &Path) -> Result<Option<Blob>, String> {
        match self.read_current(path)? {
            None => Ok(None),
            Some(bytes) => self.store(&bytes).map(Some).map_err(|err| format!("cannot save a copy: {err}")),
        }
    }

    /// A turn starts: its changes are recorded from now on. An undone turn
    /// can no longer be redone once another turn ran.
    pub fn begin_turn(&self, prompt: &str, messages_before: usize) {
        let mut state = self.lock();
        let index = self.index(&mut state);
        let number = index.next;
        index.next += 1;
        let had_undone = !index.undone.is_empty();
        index.undone.clear();
        index.recording = Some(TurnRecord {
            number,
            prompt: summary(prompt),
            started_at: crate::store::now_rfc3339(),
            messages_before: Some(messages_before),
            messages_after: messages_before,
            files: Vec::new(),
        });
        if had_undone {
            self.save_or_warn(&mut state);
        }
    }

    /// A tool is about to change the file at `path` (its real location):
    /// saves what it holds now, unless this turn already changed it.
    /// `inside` says whether it lies inside the session's roots.
    pub fn before_write(&self, path: &Path, inside: bool) {
        let mut state = self.lock();
        let Some(recording) = &self.index(&mut state).recording else { return };
        if recording.files.iter().any(|entry| entry.path == path) {
            return;
        }
        let entry = if inside {
            match self.save_current(path) {
                Ok(before) => FileEntry { path: path.to_path_buf(), before, after: None, not_saved: None },
                Err(why) => FileEntry { path: path.to_path_buf(), before: None, after: None, not_saved: Some(why) },
            }
        } else {
            FileEntry {
                path: path.to_path_buf(),
                before: None,
                after: None,
                not_saved: Some("it is outside the session's roots".to_owned()),
            }
        };
        if let Some(recording) = &mut self.index(&mut state).recording {
            recording.files.push(entry);
        }
        self.save_or_warn(&mut state);
    }

    /// A shell command is about to run: notes (and saves) the roots' files.
    pub fn before_command(&self, roots: &[PathBuf]) {
        let mut state = self.lock();
        if self.index(&mut state).recording.is_none() {
            return;
        }
        let snapshot = self.scan(&mut state, roots, true);
        state.before_command = Some(snapshot);
    }

    /// The shell command ended: every file it changed, created or removed
    /// inside the roots becomes a change of the turn.
    pub fn after_command(&self, roots: &[PathBuf]) {
        let mut state = self.lock();
        let Some(before) = state.before_command.take() else { return };
        let after = self.scan(&mut state, roots, false);
        let mut paths: Vec<&PathBuf> = before.files.keys().chain(after.files.keys()).collect();
        paths.sort();
        paths.dedup();
        let mut entries = Vec::new();
        for path in paths {
            let entry = match (before.files.get(path), after.files.get(path)) {
                (Some(was), Some(now)) if was.stamp == now.stamp => continue,
                (Some(was), _) => match &was.saved {
                    Ok(blob) => {
                        FileEntry { path: path.clone(), before: Some(blob.clone()), after: None, not_saved: None }
                    }
                    Err(why) => {
                        FileEntry { path: path.clone(), before: None, after: None, not_saved: Some(why.clone()) }
                    }
                },
                // New, if the first walk saw everything (else it may merely not have reached it).
                (None, Some(_)) if before.complete => {
                    FileEntry { path: path.clone(), before: None, after: None, not_saved: None }
                }
                (None, _) => continue,
            };
            entries.push(entry);
        }
        let Some(recording) = &mut self.index(&mut state).recording else { return };
        let mut added = false;
        for entry in entries {
            if !recording.files.iter().any(|known| known.path == entry.path) {
                recording.files.push(entry);
                added = true;
            }
        }
        if added {
            self.save_or_warn(&mut state);
        }
    }

    /// Walks the roots, noting each file's stamp and, when `save`, saving
    /// the content of the files not seen unchanged before.
    fn scan(&self, state: &mut State, roots: &[PathBuf], save: bool) -> Snapshot {
        let roots: Vec<PathBuf> = roots.iter().filter_map(|root| std::fs::canonicalize(root).ok()).collect();
        let Some((first, rest)) = roots.split_first() else { return Snapshot::default() };
        let mut builder = ignore::WalkBuilder::new(first);
        for root in rest {
            builder.add(root);
        }
        // Compared with the walk's real paths, so real paths too (the index file may not exist yet).
        let excluded: Vec<PathBuf> = self
            .excluded
            .iter()
            .map(|own| match (own.parent().and_then(|dir| std::fs::canonicalize(dir).ok()), own.file_name()) {
                (Some(dir), Some(name)) => dir.join(name),
                _ => own.clone(),
            })
            .collect();
        builder.hidden(false).follow_links(false).sort_by_file_name(std::cmp::Ord::cmp).filter_entry(move |entry| {
            entry.file_name() != ".git" && !excluded.iter().any(|own| entry.path().starts_with(own))
        });
        let cached: u64 = state.cache.values().filter_map(|seen| seen.saved.as_ref().ok()).map(|blob| blob.len).sum();
        let mut budget =
            self.max_bytes.saturating_sub(self.stored_bytes(state)).min(SCAN_MAX_SAVED_BYTES.saturating_sub(cached));
        let mut snapshot = Snapshot { files: HashMap::new(), complete: true };
        for entry in builder.build().flatten() {
            if !entry.file_type().is_some_and(|kind| kind.is_file()) {
                continue;
            }
            if snapshot.files.len() >= SCAN_MAX_FILES {
                snapshot.complete = false;
                tracing::debug!(limit = SCAN_MAX_FILES, "the roots have more files than a checkpoint scan looks at");
                break;
            }
            let Ok(metadata) = entry.metadata() else { continue };
            let stamp = Stamp::of(&metadata);
            let path = entry.into_path();
            let cached = state.cache.get(&path).filter(|seen| seen.stamp == stamp).cloned();
            let seen = match cached {
                Some(seen) => seen,
                None if !save => Seen { stamp, saved: Err("not saved".to_owned()) },
                None => {
                    let saved = if stamp.len > self.file_cap() {
                        Err(format!("it was {} bytes, over the {}-byte checkpoint limit", stamp.len, self.file_cap()))
                    } else if stamp.len > budget {
                        Err("the checkpoint storage cap was reached".to_owned())
                    } else {
                        match self.read_current(&path) {
                            Ok(Some(bytes)) => self.store(&bytes).map_err(|err| format!("cannot save a copy: {err}")),
                            Ok(None) => continue,
                            Err(why) => Err(why),
                        }
                    };
                    if let Ok(blob) = &saved {
                        budget = budget.saturating_sub(blob.len);
                    }
                    let seen = Seen { stamp, saved };
                    if seen.saved.is_ok() {
                        state.cache.insert(path.clone(), seen.clone());
                    }
                    seen
                }
            };
            snapshot.files.insert(path, seen);
        }
        snapshot
    }

    /// Bytes of saved content the index and the cache refer to.
    fn stored_bytes(&self, state: &mut State) -> u64 {
        let cache: Vec<Blob> = state.cache.values().filter_map(|seen| seen.saved.clone().ok()).collect();
        let index = self.index(state);
        let mut unique: HashMap<String, u64> = HashMap::new();
        for blob in referenced(index).into_iter().chain(cache) {
            unique.insert(blob.sha256, blob.len);
        }
        unique.values().sum()
    }

    /// The turn ended with `messages_after` messages in the conversation;
    /// `rewindable` says whether the messages before it are as they were
    /// when it started (not compacted). Saves what the turn left in each
    /// file it changed, keeps the record, enforces the cap; the index is
    /// written by [`Checkpoints::persist`], once the turn has been answered.
    ///
    /// The record is not written here because the index is flushed to the
    /// device, and the turn's answer (a cancel's `cancelled` above all) must
    /// not wait on the disk: an fsync took up to 5 ms here with 50 sessions
    /// streaming, and takes far longer on a disk busy with a build. What a
    /// death before the write loses is recoverable: a turn that changed
    /// files is on disk as the turn being recorded (saved before its first
    /// change) and is settled when the index is next read; a turn that
    /// changed nothing loses its record, as its journal may lose its end.
    pub fn finish_turn(&self, messages_after: usize, rewindable: bool) {
        let mut state = self.lock();
        state.before_command = None;
        let Some(mut record) = self.index(&mut state).recording.take() else { return };
        record.messages_after = messages_after;
        if !rewindable {
            record.messages_before = None;
        }
        self.settle(&mut record);
        self.index(&mut state).turns.push(record);
        self.enforce_cap(&mut state);
        state.unsaved = true;
    }

    /// Writes the index if a turn ended since it was last written, then
    /// deletes the saved contents it no longer names (after, so that a
    /// death in between leaves unused copies, never an index naming
    /// deleted ones).
    pub fn persist(&self) {
        let mut state = self.lock();
        if state.unsaved {
            self.save_or_warn(&mut state);
            if !state.unsaved {
                self.collect_garbage(&mut state);
            }
        }
    }

    /// The turn being recorded ends without a trace, when it changed no
    /// file (a turn the model never answered); whether it was dropped.
    pub fn abandon_turn(&self) -> bool {
        let mut state = self.lock();
        let index = self.index(&mut state);
        if index.recording.as_ref().is_some_and(|record| record.files.is_empty()) {
            index.recording = None;
            state.before_command = None;
            return true;
        }
        false
    }

    /// Drops what the cap does not allow, oldest first (in memory: the
    /// saved contents nothing refers to any more are deleted by
    /// [`Checkpoints::persist`], once the index no longer names them).
    fn enforce_cap(&self, state: &mut State) {
        if self.stored_bytes(state) > self.max_bytes {
            state.cache.clear();
        }
        while self.stored_bytes(state) > self.max_bytes {
            let index = self.index(state);
            if !index.undone.is_empty() {
                index.undone.remove(index.undone.len() - 1);
            } else if index.turns.len() > 1 {
                let dropped = index.turns.remove(0);
                tracing::debug!(turn = dropped.number, "dropped a checkpoint over the storage cap");
            } else if let Some(last) = index.turns.last_mut() {
                // The newest turn alone is over the cap: keep its place (its
                // conversation can still be rewound), not its files.
                for entry in &mut last.files {
                    if entry.not_saved.is_none() {
                        entry.not_saved = Some("the checkpoint storage cap was reached".to_owned());
                        entry.before = None;
                        entry.after = None;
                    }
                }
                break;
            } else {
                break;
            }
        }
    }

    fn collect_garbage(&self, state: &mut State) {
        let cache: Vec<Blob> = state.cache.values().filter_map(|seen| seen.saved.clone().ok()).collect();
        let index = self.index(state);
        let keep: HashSet<String> = referenced(index).into_iter().chain(cache).map(|blob| blob.sha256).collect();
        let Ok(entries) = std::fs::read_dir(self.dir.join(BLOBS_DIR)) else { return };
        for entry in entries.flatten() {
            let name = entry.file_name();
            if !name.to_str().is_some_and(|name| keep.contains(name))
                && let Err(err) = std::fs::remove_file(entry.path())
            {
                tracing::debug!(path = %entry.path().display(), %err, "cannot remove an unused checkpoint");
            }
        }
    }

    /// Gives `with` the undoable turns, oldest first, and whether an undone
    /// turn can be redone, without copying them (under the lock: keep it short).
    pub fn with_turns<T>(&self, with: impl FnOnce(&[TurnRecord], bool) -> T) -> T {
        let mut state = self.lock();
        let index = self.index(&mut state);
        with(&index.turns, !index.undone.is_empty())
    }

    /// The undoable turns, oldest first.
    pub fn turns(&self) -> Vec<TurnRecord> {
        let mut state = self.lock();
        self.index(&mut state).turns.clone()
    }

    /// Whether an undone turn can be redone.
    pub fn can_redo(&self) -> bool {
        let mut state = self.lock();
        !self.index(&mut state).undone.is_empty()
    }

    /// Undoes the last turn's file changes (see the module docs); `force`
    /// restores files changed since the turn too. The turn moves to the
    /// redo list once [`Checkpoints::undone`] is told what the conversation lost.
    pub fn undo(&self, roots: &[PathBuf], force: bool) -> Result<Outcome, CheckpointError> {
        let mut state = self.lock();
        let turn = self.index(&mut state).turns.pop().ok_or(CheckpointError::NothingToUndo)?;
        let mut changed = Vec::new();
        let mut left = Vec::new();
        for entry in turn.files.iter().rev() {
            if let Some(why) = &entry.not_saved {
                left.push((entry.path.clone(), format!("not restored: {why}")));
                continue;
            }
            match self.put_back(roots, &entry.path, entry.after.as_ref(), entry.before.as_ref(), force) {
                Ok(done) => changed.push(done),
                Err(why) => left.push((entry.path.clone(), why)),
            }
        }
        changed.reverse();
        left.reverse();
        Ok(Outcome { turn, changed, left, messages: Vec::new() })
    }

    /// Records an undo's result: `messages` left the conversation, which
    /// now has `messages_after_undo`.
    pub fn undone(&self, outcome: &Outcome, messages: Vec<Message>, messages_after_undo: usize) {
        let mut state = self.lock();
        let restored = outcome.changed.iter().map(|changed| changed.path.clone()).collect();
        self.index(&mut state).undone.push(Undone {
            turn: outcome.turn.clone(),
            messages,
            messages_after_undo,
            restored,
        });
        self.save_or_warn(&mut state);
    }

    /// Applies the last undone turn again, if nothing changed since the undo:
    /// the conversation still has `messages_now` messages and every file it
    /// restored still holds what the undo left.
    pub fn redo(&self, roots: &[PathBuf], messages_now: usize) -> Result<Outcome, CheckpointError> {
        let mut state = self.lock();
        let index = self.index(&mut state);
        let undone = index.undone.last().cloned().ok_or(CheckpointError::NothingToRedo)?;
        if undone.messages_after_undo != messages_now {
            return Err(CheckpointError::Diverged(
                "The conversation changed since the undo, so the undone turn cannot be redone.".to_owned(),
            ));
        }
        let entries: Vec<&FileEntry> =
            undone.turn.files.iter().filter(|entry| undone.restored.contains(&entry.path)).collect();
        for entry in &entries {
            let now = self.read_current(&entry.path).map(|bytes| bytes.map(|b| hex(&Sha256::digest(&b))));
            if now != Ok(entry.before.as_ref().map(|blob| blob.sha256.clone())) {
                return Err(CheckpointError::Diverged(format!(
                    "{} changed since the undo, so the undone turn cannot be redone (it would lose that change).",
                    entry.path.display()
                )));
            }
        }
        let mut changed = Vec::new();
        let mut left = Vec::new();
        for entry in entries {
            match self.put_back(roots, &entry.path, entry.before.as_ref(), entry.after.as_ref(), true) {
                Ok(done) => changed.push(done),
                Err(why) => left.push((entry.path.clone(), why)),
            }
        }
        let index = self.index(&mut state);
        index.undone.pop();
        index.turns.push(undone.turn.clone());
        if let Some(index) = &state.index {
            self.save_index(index)?;
            state.unsaved = false;
        }
        Ok(Outcome { turn: undone.turn, changed, left, messages: undone.messages })
    }

    /// Puts `path` in state `to`, if it is in state `from` (or `force`).
    fn put_back(
        &self,
        roots: &[PathBuf],
        path: &Path,
        from: Option<&Blob>,
        to: Option<&Blob>,
        force: bool,
    ) -> Result<Changed, String> {
        let target = Target::of(path);
        if target.real != path {
            return Err("left alone: a link now leads elsewhere from its path".to_owned());
        }
        if !target.is_inside(roots) {
            return Err("left alone: it is outside the session's roots".to_owned());
        }
        let current = self.read_current(path).map_err(|why| format!("left alone: {why}"))?;
        let current_hash = current.as_ref().map(|bytes| hex(&Sha256::digest(bytes)));
        if !force && current_hash != from.map(|blob| blob.sha256.clone()) {
            return Err(format!("left alone: {CHANGED_SINCE} (`/undo --force` restores it anyway)"));
        }
        let wanted = match to {
            Some(blob) => Some(self.load(blob).map_err(|err| format!("not restored: {err}"))?),
            None => None,
        };
        if current == wanted {
            let text = current.and_then(|bytes| String::from_utf8(bytes).ok());
            let exists = to.is_some();
            return Ok(Changed {
                path: path.to_path_buf(),
                old_text: text.clone(),
                new_text: text,
                existed: exists,
                exists,
            });
        }
        match &wanted {
            Some(bytes) => target.write_atomic(bytes),
            None => target.remove_file(),
        }
        .map_err(|err| format!("not restored: {err}"))?;
        Ok(Changed {
            path: path.to_path_buf(),
            existed: current.is_some(),
            old_text: current.and_then(|bytes| String::from_utf8(bytes).ok()),
            new_text: wanted.as_ref().and_then(|bytes| String::from_utf8(bytes.clone()).ok()),
            exists: wanted.is_some(),
        })
    }
}

/// Every saved content the index refers to.
fn referenced(index: &Index) -> Vec<Blob> {
    let turns = index.turns.iter().chain(index.undone.iter().map(|undone| &undone.turn)).chain(&index.recording);
    turns.flat_map(|turn| &turn.files).flat_map(|entry| [entry.before.clone(), entry.after.clone()]).flatten().collect()
}

/// The list editors get in `_meta`: the undoable turns, newest first, with
/// the files each changed. Serialised straight from the records it borrows
/// (no `serde_json::Value` tree, no copy of the records): it is sent after
/// every turn and grows with the session, and at 1,000 turns the tree and
/// the copy were 1.2 MB built and dropped per turn, which the allocator's
/// arenas kept as resident memory that grew turn after turn.
pub struct Described<'a> {
    /// The undoable turns, oldest first (as [`Checkpoints::turns`] gives them).
    pub turns: &'a [TurnRecord],
    /// The session's working directory, to show paths relative to it.
    pub cwd: &'a Path,
}

impl Serialize for Described<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.turns.iter().rev().map(|turn| DescribedTurn { turn, cwd: self.cwd }))
    }
}

/// One turn of [`Described`]: `{turn, prompt, startedAt, files}`.
struct DescribedTurn<'a> {
    turn: &'a TurnRecord,
    cwd: &'a Path,
}

impl Serialize for DescribedTurn<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct as _;
        let files: Vec<DescribedFile<'_>> =
            self.turn.files.iter().map(|entry| DescribedFile { entry, cwd: self.cwd }).collect();
        let mut out = serializer.serialize_struct("Turn", 4)?;
        out.serialize_field("turn", &self.turn.number)?;
        out.serialize_field("prompt", &self.turn.prompt)?;
        out.serialize_field("startedAt", &self.turn.started_at)?;
        out.serialize_field("files", &files)?;
        out.end()
    }
}

/// One file of a [`DescribedTurn`]: `{change, notSaved?, path, shown}`.
struct DescribedFile<'a> {
    entry: &'a FileEntry,
    cwd: &'a Path,
}

impl Serialize for DescribedFile<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct as _;
        let entry = self.entry;
        let change = match (&entry.before, &entry.after, &entry.not_saved) {
            (_, _, Some(_)) => "unrestorable",
            (None, Some(_), None) => "created",
            (Some(_), None, None) => "deleted",
            _ => "modified",
        };
        let mut out = serializer.serialize_struct("File", 4)?;
        out.serialize_field("change", change)?;
        if let Some(why) = &entry.not_saved {
            out.serialize_field("notSaved", why)?;
        }
        out.serialize_field("path", &entry.path)?;
        out.serialize_field("shown", &crate::tools::paths::display(&entry.path, self.cwd))?;
        out.end()
    }
}

/// A turn's [`Host`](crate::tools::Host) that records its changes in the
/// session's checkpoints: every write first saves the file's prior content,
/// and shell commands are watched (see the module docs). Everything else is
/// the inner host's.
pub struct RecordingHost<'a> {
    inner: &'a dyn crate::tools::Host,
    checkpoints: std::sync::Arc<Checkpoints>,
    roots: Vec<PathBuf>,
}

impl<'a> RecordingHost<'a> {
    /// Wraps `inner`, recording into `checkpoints` for a session with `roots`.
    pub fn new(
        inner: &'a dyn crate::tools::Host,
        checkpoints: std::sync::Arc<Checkpoints>,
        roots: Vec<PathBuf>,
    ) -> Self {
        RecordingHost { inner, checkpoints, roots }
    }

    /// Runs checkpoint work (disk reads and writes) off the async threads.
    async fn blocking(&self, work: impl FnOnce(&Checkpoints, &[PathBuf]) + Send + 'static) {
        let checkpoints = std::sync::Arc::clone(&self.checkpoints);
        let roots = self.roots.clone();
        if let Err(err) = tokio::task::spawn_blocking(move || work(&checkpoints, &roots)).await {
            tracing::warn!(%err, "checkpoint work failed");
        }
    }
}

impl crate::tools::Host for RecordingHost<'_> {
    fn read_text_file<'a>(
        &'a self,
        target: &'a Target,
    ) -> futures_util::future::BoxFuture<'a, Result<String, crate::tools::HostError>> {
        self.inner.read_text_file(target)
    }

    fn write_text_file<'a>(
        &'a self,
        target: &'a Target,
        content: &'a str,
    ) -> futures_util::future::BoxFuture<'a, Result<(), crate::tools::HostError>> {
        Box::pin(async move {
            let path = target.real.clone();
            let inside = target.is_inside(&self.roots);
            self.blocking(move |checkpoints, _| checkpoints.before_write(&path, inside)).await;
            self.inner.write_text_file(target, content).await
        })
    }

    fn reads_via_client(&self) -> bool {
        self.inner.reads_via_client()
    }

    fn writes_in_place(&self) -> bool {
        self.inner.writes_in_place()
    }

    fn write_finishes_once_started(&self) -> bool {
        self.inner.write_finishes_once_started()
    }

    fn terminals(&self) -> Option<&dyn crate::tools::Terminals> {
        self.inner.terminals()
    }

    fn launcher(&self) -> &crate::tools::Launcher {
        self.inner.launcher()
    }

    fn command_watch(&self) -> Option<&dyn crate::tools::CommandWatch> {
        Some(self)
    }
}

impl crate::tools::CommandWatch for RecordingHost<'_> {
    fn before_command(&self) -> futures_util::future::BoxFuture<'_, ()> {
        Box::pin(self.blocking(|checkpoints, roots| checkpoints.before_command(roots)))
    }

    fn after_command(&self) -> futures_util::future::BoxFuture<'_, ()> {
        Box::pin(self.blocking(|checkpoints, roots| checkpoints.after_command(roots)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Fixture {
        _temp: tempfile::TempDir,
        root: PathBuf,
        store: PathBuf,
    }

    impl Fixture {
        fn new() -> Fixture {
            let temp = tempfile::tempdir().unwrap();
            let base = temp.path().canonicalize().unwrap();
            let root = base.join("project");
            std::fs::create_dir_all(&root).unwrap();
            Fixture { _temp: temp, root, store: base.join("sessions") }
        }

        fn checkpoints(&self, max_bytes: u64) -> Checkpoints {
            Checkpoints::new(self.store.join("s1/checkpoints"), vec![self.store.clone()], max_bytes)
        }

        fn roots(&self) -> Vec<PathBuf> {
            vec![self.root.clone()]
        }

        fn blobs(&self) -> usize {
            std::fs::read_dir(self.store.join("s1/checkpoints/blobs")).map_or(0, |entries| entries.count())
        }
    }

    /// A turn writing files as the file tools do: saved first, then written.
    fn write(checkpoints: &Checkpoints, path: &Path, content: &str) {
        checkpoints.before_write(path, true);
        std::fs::write(path, content).unwrap();
    }

    #[test]
    fn identical_contents_are_stored_once_and_the_index_outlives_the_process() {
        let fx = Fixture::new();
        let (a, b) = (fx.root.join("a.txt"), fx.root.join("b.txt"));
        std::fs::write(&a, "same\n").unwrap();
        std::fs::write(&b, "same\n").unwrap();
        let checkpoints = fx.checkpoints(1 << 20);
        checkpoints.begin_turn("write both", 0);
        write(&checkpoints, &a, "one\n");
        write(&checkpoints, &b, "one\n");
        checkpoints.finish_turn(3, true);
        checkpoints.persist();
        assert_eq!(fx.blobs(), 2, "\"same\" once, \"one\" once");

        let reopened = fx.checkpoints(1 << 20);
        let turns = reopened.turns();
        assert_eq!(turns.len(), 1);
        assert_eq!(turns[0].prompt, "write both");
        assert_eq!(turns[0].messages_before, Some(0), "the turn as it ended, not as a leftover");
        assert_eq!(turns[0].files.len(), 2);
        let outcome = reopened.undo(&fx.roots(), false).unwrap();
        assert_eq!(outcome.changed.len(), 2);
        assert_eq!(std::fs::read_to_string(&a).unwrap(), "same\n");
        assert_eq!(std::fs::read_to_string(&b).unwrap(), "same\n");
    }

    #[test]
    fn a_link_planted_at_a_path_is_never_followed_by_a_restore() {
        let fx = Fixture::new();
        let outside = fx.root.parent().unwrap().join("outside.txt");
        std::fs::write(&outside, "outside\n").unwrap();
        let path = fx.root.join("a.txt");
        std::fs::write(&path, "before\n").unwrap();
        let checkpoints = fx.checkpoints(1 << 20);
        checkpoints.begin_turn("edit", 0);
        write(&checkpoints, &path, "after\n");
        checkpoints.finish_turn(2, true);
        std::fs::remove_file(&path).unwrap();
        std::os::unix::fs::symlink(&outside, &path).unwrap();
        let outcome = checkpoints.undo(&fx.roots(), true).unwrap();
        assert!(outcome.changed.is_empty(), "{outcome:?}");
        assert!(outcome.left[0].1.contains("link"), "{:?}", outcome.left);
        assert_eq!(std::fs::read_to_string(&outside).unwrap(), "outside\n");
        assert!(std::fs::symlink_metadata(&path).unwrap().file_type().is_symlink());
    }

    #[test]
    fn commands_changes_are_found_by_scanning_and_ignored_files_are_not() {
        let fx = Fixture::new();
        std::fs::create_dir_all(fx.root.join(".git")).unwrap();
        std::fs::write(fx.root.join(".gitignore"), "build/\n").unwrap();
        std::fs::create_dir_all(fx.root.join("build")).unwrap();
        std::fs::write(fx.root.join("build/out.o"), "object").unwrap();
        std::fs::write(fx.root.join("kept.txt"), "kept").unwrap();
        std::fs::write(fx.root.join("changed.txt"), "old").unwrap();
        std::fs::write(fx.root.join("removed.txt"), "removed").unwrap();
        let checkpoints = fx.checkpoints(1 << 20);
        checkpoints.begin_turn("run", 0);
        checkpoints.before_command(&fx.roots());
        std::fs::write(fx.root.join("changed.txt"), "new and longer").unwrap();
        std::fs::remove_file(fx.root.join("removed.txt")).unwrap();
        std::fs::write(fx.root.join("created.txt"), "created").unwrap();
        std::fs::write(fx.root.join("build/out.o"), "rebuilt").unwrap();
        checkpoints.after_command(&fx.roots());
        checkpoints.finish_turn(2, true);
        let turn = checkpoints.turns().pop().unwrap();
        let mut names: Vec<String> =
            turn.files.iter().map(|f| f.path.file_name().unwrap().to_string_lossy().into_owned()).collect();
        names.sort();
        assert_eq!(names, ["changed.txt", "created.txt", "removed.txt"]);

        checkpoints.undo(&fx.roots(), false).unwrap();
        assert_eq!(std::fs::read_to_string(fx.root.join("changed.txt")).unwrap(), "old");
        assert_eq!(std::fs::read_to_string(fx.root.join("removed.txt")).unwrap(), "removed");
        assert!(!fx.root.join("created.txt").exists());
        assert_eq!(std::fs::read_to_string(fx.root.join("build/out.o")).unwrap(), "rebuilt", "ignored: untouched");
    }

    #[test]
    fn a_turn_cut_short_by_lathes_death_can_still_be_undone() {
        let fx = Fixture::new();
        let path = fx.root.join("a.txt");
        std::fs::write(&path, "before\n").unwrap();
        let checkpoints = fx.checkpoints(1 << 20);
        checkpoints.begin_turn("edit and die", 4);
        write(&checkpoints, &path, "after\n");
        drop(checkpoints); // no finish_turn: the process died

        let reopened = fx.checkpoints(1 << 20);
        let turns = reopened.turns();
        assert_eq!(turns.len(), 1);
        assert_eq!(turns[0].messages_before, None, "its messages cannot be told apart");
        let outcome = reopened.undo(&fx.roots(), false).unwrap();
        assert_eq!(outcome.changed.len(), 1);
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "before\n");
    }

    #[test]
    fn a_turns_end_reaches_the_disk_when_persisted_and_a_death_before_loses_no_change() {
        let fx = Fixture::new();
        let path = fx.root.join("a.txt");
        std::fs::write(&path, "before\n").unwrap();
        let checkpoints = fx.checkpoints(1 << 20);
        checkpoints.begin_turn("just talk", 0);
        checkpoints.finish_turn(2, true);
        assert_eq!(checkpoints.turns().len(), 1, "kept in memory at once");
        assert!(fx.checkpoints(1 << 20).turns().is_empty(), "not written before the answer");
        checkpoints.persist();
        assert_eq!(fx.checkpoints(1 << 20).turns().len(), 1);

        checkpoints.begin_turn("edit", 2);
        write(&checkpoints, &path, "after\n");
        checkpoints.finish_turn(4, true);
        // Dead before `persist`: the edit is on disk as the turn being
        // recorded, so it can still be undone (its messages cannot).
        let turns = fx.checkpoints(1 << 20).turns();
        assert_eq!((turns.len(), turns[1].messages_before), (2, None));
        checkpoints.persist();
        let reopened = fx.checkpoints(1 << 20);
        assert_eq!(reopened.turns()[1].messages_before, Some(2));
        reopened.undo(&fx.roots(), false).unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "before\n");
    }

    #[test]
    fn a_copy_is_deleted_only_once_the_saved_index_no_longer_names_it() {
        let fx = Fixture::new();
        let (small, large) = (fx.root.join("small.txt"), fx.root.join("large.txt"));
        std::fs::write(&small, "x").unwrap();
        std::fs::write(&large, vec![b'p'; 100]).unwrap();
        // Room for the second turn's 200 bytes, not for the first turn's 2 more.
        let checkpoints = fx.checkpoints(201);
        checkpoints.begin_turn("small", 0);
        write(&checkpoints, &small, "y");
        checkpoints.finish_turn(2, true);
        checkpoints.persist();
        checkpoints.begin_turn("large", 2);
        write(&checkpoints, &large, &"q".repeat(100));
        checkpoints.finish_turn(4, true);
        assert_eq!(checkpoints.turns().len(), 1, "the first turn is over the cap");
        assert_eq!(fx.blobs(), 4, "the index on disk still names the first turn's copies");
        checkpoints.persist();
        assert_eq!(fx.blobs(), 2);
        assert_eq!(fx.checkpoints(201).turns()[0].prompt, "large");
    }

    #[test]
    fn once_discarded_nothing_is_written_so_a_deleted_sessions_folder_stays_gone() {
        let fx = Fixture::new();
        let (a, b) = (fx.root.join("a.txt"), fx.root.join("b.txt"));
        std::fs::write(&a, "before\n").unwrap();
        let checkpoints = fx.checkpoints(1 << 20);
        checkpoints.begin_turn("edit", 0);
        write(&checkpoints, &a, "after\n");
        checkpoints.discard();
        std::fs::remove_dir_all(fx.store.join("s1")).unwrap();
        // The turn, still ending, changes one more file and ends.
        write(&checkpoints, &b, "new\n");
        checkpoints.finish_turn(2, true);
        checkpoints.persist();
        assert!(!fx.store.join("s1").exists());
    }

    #[test]
    fn lathes_own_files_inside_a_root_are_not_changes() {
        let fx = Fixture::new();
        let data = fx.root.join(".data");
        let sessions = data.join("sessions");
        let index = data.join("sessions.index.json");
        let checkpoints =
            Checkpoints::new(sessions.join("s1/checkpoints"), vec![sessions.clone(), index.clone()], 1 << 20);
        std::fs::write(fx.root.join("real.txt"), "real").unwrap();
        checkpoints.begin_turn("run", 0);
        checkpoints.before_command(&fx.roots());
        std::fs::create_dir_all(sessions.join("s1")).unwrap();
        std::fs::write(sessions.join("s1/log.jsonl"), "{}").unwrap();
        std::fs::write(&index, "{}").unwrap();
        std::fs::write(fx.root.join("real.txt"), "changed").unwrap();
        checkpoints.after_command(&fx.roots());
        checkpoints.finish_turn(2, true);
        let turn = checkpoints.turns().pop().unwrap();
        let paths: Vec<&Path> = turn.files.iter().map(|f| f.path.as_path()).collect();
        assert_eq!(paths, [fx.root.join("real.txt").as_path()]);
    }

    #[test]
    fn files_over_the_cap_are_named_not_saved() {
        let fx = Fixture::new();
        let big = fx.root.join("big.bin");
        std::fs::write(&big, vec![b'x'; 2000]).unwrap();
        let checkpoints = fx.checkpoints(1000);
        checkpoints.begin_turn("shrink", 0);
        write(&checkpoints, &big, "small");
        checkpoints.finish_turn(2, true);
        let outcome = checkpoints.undo(&fx.roots(), false).unwrap();
        assert!(outcome.changed.is_empty());
        assert!(outcome.left[0].1.contains("over the 1000-byte checkpoint limit"), "{:?}", outcome.left);
        assert_eq!(std::fs::read_to_string(&big).unwrap(), "small");
    }
}
