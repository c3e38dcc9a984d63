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
//! Restores and removals go through the path authority ([`crate::platform::authority`]):
//! atomic, never through a link, never outside the roots. A file is put
//! back only if it still holds what the turn left (unless forced).
//!
//! Storage is bounded by `[sessions] checkpoint_max_bytes`, a budget each
//! copy is checked against before it is written: the copies of one turn
//! never pass it (a file past it is [`CAP_REACHED`]); when a turn ends over
//! it, the cached workspace copies go first, then the oldest turns'
//! checkpoints. Files over [`MAX_FILE_BYTES`], and sparse ones (whose copy
//! would take far more room than they do), are [`TOO_BIG`] and not saved;
//! `/undo` names them with the reason.
//!
//! Several front ends (processes) may record turns of one session: every
//! write of the index merges it with the file under a lock (see
//! [`Checkpoints`]), each front end's turn being recorded is kept under its
//! name, and one whose front end died (its file in `live/` unlocked) is
//! settled like a leftover. An index of a newer version is left alone and
//! checkpoints are off.
//!
//! This module knows files, hashes and the conversation's messages; it knows
//! nothing of any front end or of how a turn runs ([`crate::undo`] calls it
//! where a turn starts and ends, [`RecordingHost`] where a tool changes a
//! file, for the editor's sessions and the terminal's alike).

use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::io::{Read as _, Write as _};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::model::Message;
use crate::platform::authority::{Found, GuardError, Target};
use crate::platform::files;
use crate::platform::stamp::FileStamp;
use crate::store::create_private_dir_below;

/// Why `/undo` left a file alone that was changed after the turn (the
/// reply's `--force` hint is given for this reason only).
pub const CHANGED_SINCE: &str = "it changed since the turn";

/// Why a file was not saved because of what it is: over [`MAX_FILE_BYTES`]
/// (or the session's cap), or sparse (its copy would take far more room
/// than the file does). `/undo` names each such file with this reason.
pub const TOO_BIG: &str = "too big to keep";

/// Why a file was not saved because the turn's copies reached the cap.
pub const CAP_REACHED: &str = "the checkpoint storage cap was reached";

/// Largest file checkpointed (before or after a turn).
pub const MAX_FILE_BYTES: u64 = 10 * 1024 * 1024;

/// Most files one scan of the roots for a shell command looks at.
pub const SCAN_MAX_FILES: usize = 20_000;

/// Most bytes of workspace copies kept for shell commands (see the module
/// docs): beyond it, a file a command changes is named by `/undo`, not restored.
pub const SCAN_MAX_SAVED_BYTES: u64 = 64 * 1024 * 1024;

const INDEX_FILE: &str = "index.json";
/// Held (`flock`) while the index is read, merged and written.
const LOCK_FILE: &str = "index.lock";
/// One file per lathe front end using the checkpoints, locked for as long
/// as it does: a turn being recorded whose owner's file is not locked was
/// cut short by its process's death.
const LIVE_DIR: &str = "live";
const BLOBS_DIR: &str = "blobs";
/// The index format this lathe writes; an index of a higher version is
/// never written over (see [`Checkpoints`]).
const INDEX_VERSION: u64 = 1;

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
    /// Why it cannot be restored (not saved: too big to keep, outside the
    /// roots, over the storage cap); `None` when it can.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_saved: Option<String>,
}

/// One turn's checkpoint.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TurnRecord {
    /// Names the turn among those of every front end that recorded turns
    /// of the session (an editor and `lathe exec --resume`, say). Empty in
    /// an index written before there were ids; one is made up when it is read.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub id: String,
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

/// A turn being recorded, with the front end recording it.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Recording {
    /// The recording [`Checkpoints`]' id (its file in `live/`).
    owner: String,
    turn: TurnRecord,
}

/// The index as this front end sees it: the file's, merged with its own changes.
#[derive(Debug, Default)]
struct Index {
    next: u64,
    turns: Vec<TurnRecord>,
    undone: Vec<Undone>,
    /// This front end's turn being recorded, saved as its changes come so
    /// that a turn cut short by lathe's death can still be undone.
    recording: Option<TurnRecord>,
    /// Other front ends' turns being recorded, as the file last had them.
    others: Vec<Recording>,
}

/// `index.json` as read.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Stored {
    #[serde(default)]
    next: u64,
    #[serde(default)]
    turns: Vec<TurnRecord>,
    #[serde(default)]
    undone: Vec<Undone>,
    /// The one turn being recorded, as lathe wrote it before several front
    /// ends could record turns of one session (its owner unknown).
    #[serde(default)]
    recording: Option<TurnRecord>,
    #[serde(default)]
    recordings: Vec<Recording>,
}

/// `index.json` as written, borrowed from the [`Index`] (streamed, never
/// copied: the index grows with the session).
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct StoredRef<'a> {
    version: u64,
    next: u64,
    turns: &'a [TurnRecord],
    undone: &'a [Undone],
    #[serde(skip_serializing_if = "Vec::is_empty")]
    recordings: Vec<RecordingRef<'a>>,
}

#[derive(Serialize)]
struct RecordingRef<'a> {
    owner: &'a str,
    turn: &'a TurnRecord,
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
    /// Checkpoints are off for this session (an index of a newer lathe).
    #[error("{0}")]
    Off(String),
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
        let stamp = FileStamp::of(metadata);
        Stamp {
            len: stamp.len,
            mtime_ns: stamp.modified_ns,
            ctime_ns: stamp.changed_ns,
            ino: stamp.id.ino,
            dev: stamp.id.dev,
        }
    }

    /// The same file with the same content, as far as a stamp tells
    /// (the change time left out: a rename moves it).
    fn same_file(self, other: Stamp) -> bool {
        (self.dev, self.ino, self.len, self.mtime_ns) == (other.dev, other.ino, other.len, other.mtime_ns)
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

/// What the index file held when this front end last read or wrote it.
#[derive(Debug, Default)]
struct Synced {
    /// The file's stamp (`None`: none read or written yet).
    stamp: Option<Stamp>,
    turns: HashSet<String>,
    undone: HashSet<String>,
    /// The saved contents it referred to.
    blobs: HashSet<String>,
}

/// The copies this front end wrote.
#[derive(Debug, Default)]
struct Copies {
    /// This front end's file in `live/`, locked from its first write (a
    /// copy or the index) until the index it writes has no turn of its
    /// being recorded, so that no other front end takes it for dead and
    /// settles its turn or deletes its copies meanwhile. Not held between
    /// turns: a session left open holds no file open.
    live: Option<File>,
    /// Bytes of new copies since the turn being recorded began: never more
    /// than the session's cap.
    spent: u64,
    /// Every copy it wrote (the only ones it deletes while another front
    /// end uses the checkpoints).
    written: HashSet<String>,
}

#[derive(Debug, Default)]
struct State {
    /// `None` until the file is first read.
    index: Option<Index>,
    synced: Synced,
    copies: Copies,
    /// Saved content of workspace files by stamp, from earlier scans.
    cache: HashMap<PathBuf, Seen>,
    before_command: Option<Snapshot>,
    /// The index in memory is newer than the one on disk: a turn ended and
    /// [`Checkpoints::persist`] has not saved it yet.
    unsaved: bool,
    /// Why checkpoints are off for this session (an index of a newer lathe):
    /// nothing is recorded, written or deleted.
    off: Option<String>,
    /// Whether the user was told (see [`Checkpoints::take_notice`]).
    told: bool,
    /// Another front end wrote the index while this one held no file in
    /// `live/`: it may have deleted the copies of `cache`.
    stale_cache: bool,
    /// An unreadable index was reported.
    warned_unreadable: bool,
}

/// The index file, as [`Checkpoints::read_file`] found it.
enum OnDisk {
    /// As last read or written (same stamp).
    Unchanged,
    Missing,
    /// Not an index this lathe can read (it is replaced).
    Unreadable(String, Option<Stamp>),
    /// Written by a newer lathe, of this version: never touched.
    Newer(u64),
    Read(Box<Stored>, Stamp),
}

/// One session's checkpoints.
///
/// Several front ends may use one session's checkpoints at once (an editor
/// and `lathe exec --resume`, each a process): every write of the index
/// takes its lock, reads it again and merges (turns and undone turns by id:
/// each side's additions kept, each side's removals applied, every front
/// end's turn being recorded kept), so no one's checkpoints are lost; each
/// front end reads what the others wrote before it lists, undoes or starts
/// a turn. An index of a newer version (a newer lathe) is never written
/// over and its copies never deleted: checkpoints are off for the session.
#[derive(Debug)]
pub struct Checkpoints {
    dir: PathBuf,
    /// Never walked by scans: lathe's own files (the sessions folder and
    /// its index), should a root contain them.
    excluded: Vec<PathBuf>,
    max_bytes: u64,
    /// Names this front end's turns being recorded and its file in `live/`.
    owner: String,
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

/// Why a file of `size` bytes is not kept when the limit is `limit`.
fn too_big(size: u64, limit: u64) -> String {
    format!("{TOO_BIG}: it is {size} bytes, over the {limit}-byte checkpoint limit")
}

/// Whether `file` (of `size` bytes) is sparse; see [`files::sparse`].
fn sparse(file: &mut File, size: u64) -> Option<u64> {
    files::sparse(file, size)
}

/// Takes `file`'s lock, waiting for it when `wait`; whether it did.
fn flock(file: &File, wait: bool) -> std::io::Result<bool> {
    files::lock(file, wait)
}

/// Opens (creating it, private) a file lathe only locks.
fn lock_file(path: &Path) -> std::io::Result<File> {
    crate::platform::private::open_rw(path)
}

/// The ids of `turns`.
fn ids<'a>(turns: impl IntoIterator<Item = &'a TurnRecord>) -> HashSet<String> {
    turns.into_iter().map(|turn| turn.id.clone()).collect()
}

/// A turn of an index written before turns had ids gets one from what
/// names it there (the same in every front end that reads that index).
fn give_id(turn: &mut TurnRecord) {
    if turn.id.is_empty() {
        turn.id = format!("{}@{}", turn.number, turn.started_at);
    }
}

/// The order of turns of several front ends: by number (each front end
/// numbers its turn after the highest it has read), then start, then id.
fn turn_order(a: &TurnRecord, b: &TurnRecord) -> std::cmp::Ordering {
    (a.number, &a.started_at, &a.id).cmp(&(b.number, &b.started_at, &b.id))
}

/// Merges `theirs` (a list as the file has it now) into `mine`: what the
/// file had at the last sync (`synced`) and no longer has was removed by
/// another front end, what it has that was not there then was added by one.
/// Whether anything was added.
fn merge_list<T>(mine: &mut Vec<T>, theirs: Vec<T>, synced: &HashSet<String>, id: impl Fn(&T) -> &str) -> bool {
    let their_ids: HashSet<String> = theirs.iter().map(|item| id(item).to_owned()).collect();
    mine.retain(|item| !synced.contains(id(item)) || their_ids.contains(id(item)));
    let my_ids: HashSet<String> = mine.iter().map(|item| id(item).to_owned()).collect();
    let before = mine.len();
    mine.extend(theirs.into_iter().filter(|item| !synced.contains(id(item)) && !my_ids.contains(id(item))));
    mine.len() > before
}

impl Checkpoints {
    /// Creates `dir` (this session's checkpoints or a folder in them), and
    /// the session's folder if need be, but never the sessions folder above
    /// it: a checkpoint saved after that was removed makes nothing again.
    fn create_dir(&self, dir: &Path) -> std::io::Result<()> {
        let sessions = self.dir.parent().and_then(Path::parent).unwrap_or(&self.dir);
        create_private_dir_below(sessions, dir)
    }

    /// Checkpoints kept in `dir` (created when first needed), at most
    /// `max_bytes` of saved content. What lies under `excluded` is never scanned.
    pub fn new(dir: PathBuf, excluded: Vec<PathBuf>, max_bytes: u64) -> Checkpoints {
        Checkpoints {
            dir,
            excluded,
            max_bytes,
            owner: uuid::Uuid::new_v4().simple().to_string(),
            state: Mutex::new(State::default()),
            discarded: AtomicBool::new(false),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        crate::sync::lock(&self.state)
    }

    /// The session is being deleted: from now on nothing is written, and
    /// a write under way has ended when this returns (it waits for the
    /// lock), so the folder can be deleted without coming back. Blocking.
    pub fn discard(&self) {
        let mut state = self.lock();
        self.discarded.store(true, Ordering::Relaxed);
        // Its file in `live/` is closed too: Windows refuses to delete a
        // folder holding an open file.
        state.copies.live = None;
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

    /// Why checkpoints are off for this session, the first time it is asked
    /// (a front end tells the user once); `None` afterwards, or when they are on.
    pub fn take_notice(&self) -> Option<String> {
        let mut state = self.lock();
        self.refresh(&mut state);
        if state.told {
            return None;
        }
        let notice = state.off.clone()?;
        state.told = true;
        Some(notice)
    }

    /// Dies, as far as the other front ends can tell (its file in `live/`
    /// is no longer locked), while this one goes on.
    #[cfg(test)]
    fn die(&self) {
        self.lock().copies.live = None;
    }

    /// Why checkpoints are off for this session, if they are.
    pub fn off_reason(&self) -> Option<String> {
        let mut state = self.lock();
        self.refresh(&mut state);
        state.off.clone()
    }

    /// The index, read from the file the first time.
    fn index<'s>(&self, state: &'s mut State) -> &'s mut Index {
        if state.index.is_none() {
            self.refresh(state);
        }
        state.index.get_or_insert_with(Index::default)
    }

    /// Reads the index file if it changed since this front end last read or
    /// wrote it (another front end wrote it), and merges it in. A turn being
    /// recorded there whose front end died becomes an undoable turn (see
    /// [`Checkpoints::settle_dead`]), and the index is written.
    /// Whether it was read (another front end wrote it).
    fn refresh(&self, state: &mut State) -> bool {
        if state.off.is_some() {
            return false;
        }
        let mut read = false;
        match self.read_file(state.synced.stamp) {
            OnDisk::Unchanged | OnDisk::Missing => {}
            OnDisk::Unreadable(why, stamp) => self.unreadable(state, &why, stamp),
            OnDisk::Newer(version) => self.turn_off(state, version),
            OnDisk::Read(stored, stamp) => {
                // Another front end wrote, and may have deleted copies it did
                // not know were this one's (see `begin_turn`).
                if state.copies.live.is_none() {
                    state.stale_cache = true;
                }
                self.merge(state, *stored, stamp);
                read = true;
            }
        }
        if state.off.is_some() {
            return read;
        }
        let index = state.index.get_or_insert_with(Index::default);
        if index.others.iter().any(|other| !self.alive(&other.owner)) {
            self.save_or_warn(state);
        }
        read
    }

    fn unreadable(&self, state: &mut State, why: &str, stamp: Option<Stamp>) {
        if !state.warned_unreadable {
            tracing::warn!(path = %self.dir.join(INDEX_FILE).display(), %why, "unreadable checkpoint index: starting afresh");
            state.warned_unreadable = true;
        }
        state.synced.stamp = stamp;
    }

    fn turn_off(&self, state: &mut State, version: u64) {
        let path = self.dir.join(INDEX_FILE);
        tracing::warn!(path = %path.display(), version, "checkpoints from a newer lathe: left alone, checkpoints off");
        state.off = Some(format!(
            "This session's checkpoints were saved by a newer lathe (checkpoint index version {version}; this one \
             knows version {INDEX_VERSION} and older), so this lathe leaves them as they are and keeps none: `/undo` \
             and `/redo` are off for this session here. Use the newer lathe to undo its turns."
        ));
        state.index = Some(Index::default());
        state.before_command = None;
        state.unsaved = false;
        self.release_live(&mut state.copies);
    }

    /// The index file: unchanged since `known`, missing, unreadable, of a
    /// newer lathe, or read.
    fn read_file(&self, known: Option<Stamp>) -> OnDisk {
        let path = self.dir.join(INDEX_FILE);
        let mut file = match File::open(&path) {
            Ok(file) => file,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => return OnDisk::Missing,
            Err(err) => return OnDisk::Unreadable(err.to_string(), None),
        };
        let stamp = match file.metadata() {
            Ok(metadata) => Stamp::of(&metadata),
            Err(err) => return OnDisk::Unreadable(err.to_string(), None),
        };
        if known.is_some_and(|known| known.same_file(stamp)) {
            return OnDisk::Unchanged;
        }
        let mut bytes = Vec::new();
        if let Err(err) = file.read_to_end(&mut bytes) {
            return OnDisk::Unreadable(err.to_string(), None);
        }
        // The version first, on its own: a newer index may not parse as this
        // lathe's at all, and must not be taken for a damaged one.
        #[derive(Deserialize)]
        struct Version {
            version: u64,
        }
        match serde_json::from_slice::<Version>(&bytes) {
            Err(err) => OnDisk::Unreadable(err.to_string(), Some(stamp)),
            Ok(Version { version }) if version > INDEX_VERSION => OnDisk::Newer(version),
            Ok(_) => match serde_json::from_slice::<Stored>(&bytes) {
                Ok(stored) => OnDisk::Read(Box::new(stored), stamp),
                Err(err) => OnDisk::Unreadable(err.to_string(), Some(stamp)),
            },
        }
    }

    /// Merges the file's index (stamped `stamp`) into the one in memory.
    fn merge(&self, state: &mut State, mut stored: Stored, stamp: Stamp) {
        stored.turns.iter_mut().for_each(give_id);
        stored.undone.iter_mut().for_each(|undone| give_id(&mut undone.turn));
        let synced = Synced {
            stamp: Some(stamp),
            turns: ids(&stored.turns),
            undone: ids(stored.undone.iter().map(|undone| &undone.turn)),
            blobs: referenced_by(&stored).into_iter().map(|blob| blob.sha256).collect(),
        };
        let index = state.index.get_or_insert_with(Index::default);
        let added_turns = merge_list(&mut index.turns, stored.turns, &state.synced.turns, |turn| &turn.id);
        if added_turns {
            index.turns.sort_by(turn_order);
        }
        let added_undone = merge_list(&mut index.undone, stored.undone, &state.synced.undone, |undone| &undone.turn.id);
        if added_undone {
            // A stack: the last undone (the earliest turn) is redone first.
            index.undone.sort_by(|a, b| turn_order(&b.turn, &a.turn));
        }
        index.next = index.next.max(stored.next);
        let mut others: Vec<Recording> = stored.recordings.into_iter().filter(|r| r.owner != self.owner).collect();
        if let Some(mut legacy) = stored.recording {
            give_id(&mut legacy);
            others.push(Recording { owner: String::new(), turn: legacy });
        }
        // A turn another front end finished (or settled) is a turn, not a recording.
        let known: HashSet<&str> =
            index.turns.iter().chain(index.undone.iter().map(|u| &u.turn)).map(|t| t.id.as_str()).collect();
        others.retain(|other| !known.contains(other.turn.id.as_str()));
        index.others = others;
        state.synced = synced;
    }

    /// Whether the front end `owner` still runs: its file in `live/` is
    /// locked. A dead one's file is removed.
    fn alive(&self, owner: &str) -> bool {
        if owner.is_empty() || owner.contains(['/', '.']) {
            return false;
        }
        if owner == self.owner {
            return true;
        }
        let path = self.dir.join(LIVE_DIR).join(owner);
        let file = match File::open(&path) {
            Ok(file) => file,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => return false,
            // Cannot tell: taken as alive (its turn stays a recording).
            Err(_) => return true,
        };
        match flock(&file, false) {
            Ok(true) => {
                let _ = std::fs::remove_file(&path);
                false
            }
            Ok(false) | Err(_) => true,
        }
    }

    /// Whether no other front end uses these checkpoints now.
    fn alone(&self) -> bool {
        let Ok(entries) = std::fs::read_dir(self.dir.join(LIVE_DIR)) else { return true };
        // An entry that vanishes meanwhile is a front end that ended.
        entries
            .flatten()
            .all(|entry| entry.file_name().to_str().is_none_or(|owner| owner == self.owner || !self.alive(owner)))
    }

    /// Takes this front end's file in `live/` (once), so the others know it runs.
    fn go_live(&self, copies: &mut Copies) {
        if copies.live.is_some() {
            return;
        }
        let dir = self.dir.join(LIVE_DIR);
        let taken = self
            .create_dir(&dir)
            .and_then(|()| lock_file(&dir.join(&self.owner)))
            .and_then(|file| flock(&file, false).map(|locked| locked.then_some(file)));
        match taken {
            Ok(Some(file)) => copies.live = Some(file),
            Ok(None) => tracing::warn!("cannot lock this lathe's checkpoint file: it is locked already"),
            Err(err) => tracing::warn!(%err, "cannot lock this lathe's checkpoint file"),
        }
    }

    /// Gives up this front end's file in `live/` (removed, then unlocked).
    fn release_live(&self, copies: &mut Copies) {
        if let Some(live) = copies.live.take() {
            if !self.is_discarded() {
                let _ = std::fs::remove_file(self.dir.join(LIVE_DIR).join(&self.owner));
            }
            drop(live);
        }
    }

    /// The turns other front ends were recording when they died become
    /// undoable turns, with what their files hold now as what they left
    /// (their messages cannot be told apart any more, so they do not rewind them).
    fn settle_dead(&self, state: &mut State) {
        let Some(index) = state.index.as_mut() else { return };
        let (dead, alive): (Vec<Recording>, Vec<Recording>) =
            std::mem::take(&mut index.others).into_iter().partition(|other| !self.alive(&other.owner));
        index.others = alive;
        if dead.is_empty() {
            return;
        }
        let spent = std::mem::take(&mut state.copies.spent);
        let mut settled = Vec::new();
        for Recording { mut turn, .. } in dead {
            turn.messages_before = None;
            self.settle(&mut turn, &mut state.copies);
            settled.push(turn);
        }
        state.copies.spent = spent;
        let index = state.index.get_or_insert_with(Index::default);
        index.turns.extend(settled);
        index.turns.sort_by(turn_order);
    }

    fn save_or_warn(&self, state: &mut State) {
        match self.save(state) {
            Ok(()) => state.unsaved = false,
            Err(err) => tracing::warn!(%err, "cannot save the checkpoints"),
        }
    }

    /// Saves what a turn left in each file it changed.
    fn settle(&self, record: &mut TurnRecord, copies: &mut Copies) {
        for entry in &mut record.files {
            if entry.not_saved.is_some() {
                continue;
            }
            match self.save_current(&entry.path, copies) {
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

    /// Writes the index: under the index's lock, the file is read again and
    /// merged (what other front ends wrote since is kept), the turns of
    /// front ends that died are settled, and the result replaces the file
    /// atomically. Nothing is written once the session is deleted, nor over
    /// an index of a newer lathe.
    fn save(&self, state: &mut State) -> Result<(), CheckpointError> {
        if self.is_discarded() || state.off.is_some() {
            return Ok(());
        }
        let io = |source| CheckpointError::Io { path: self.dir.clone(), source };
        self.create_dir(&self.dir).map_err(io)?;
        // Live while the file holds this front end's turn being recorded
        // (and from its first copy, see `store`); not for a write without one.
        if state.index.as_ref().is_some_and(|index| index.recording.is_some()) {
            self.go_live(&mut state.copies);
        }
        let lock = lock_file(&self.dir.join(LOCK_FILE)).map_err(io)?;
        flock(&lock, true).map_err(io)?;
        match self.read_file(state.synced.stamp) {
            OnDisk::Unchanged | OnDisk::Missing => {}
            OnDisk::Unreadable(why, stamp) => self.unreadable(state, &why, stamp),
            OnDisk::Newer(version) => {
                self.turn_off(state, version);
                return Ok(());
            }
            OnDisk::Read(stored, stamp) => self.merge(state, *stored, stamp),
        }
        self.settle_dead(state);
        let index = state.index.get_or_insert_with(Index::default);
        let mut temp = tempfile::NamedTempFile::new_in(&self.dir).map_err(io)?;
        // Streamed, not encoded into one buffer first: the index grows with
        // the session and is saved after every turn, and a buffer of its size
        // per turn (100 KB at 1,000 turns) raised the allocator's high-water
        // mark turn after turn.
        let mut recordings: Vec<RecordingRef<'_>> =
            index.others.iter().map(|other| RecordingRef { owner: &other.owner, turn: &other.turn }).collect();
        if let Some(turn) = &index.recording {
            recordings.push(RecordingRef { owner: &self.owner, turn });
        }
        let stored = StoredRef {
            version: INDEX_VERSION,
            next: index.next,
            turns: &index.turns,
            undone: &index.undone,
            recordings,
        };
        let mut out = std::io::BufWriter::new(temp.as_file_mut());
        serde_json::to_writer(&mut out, &stored).map_err(|err| io(err.into()))?;
        out.flush().map_err(io)?;
        drop(out);
        temp.as_file().sync_all().map_err(io)?;
        let stamp = temp.as_file().metadata().map_err(io)?;
        temp.persist(self.dir.join(INDEX_FILE)).map_err(|err| io(err.error))?;
        state.synced = Synced {
            stamp: Some(Stamp::of(&stamp)),
            turns: ids(&index.turns),
            undone: ids(index.undone.iter().map(|undone| &undone.turn)),
            blobs: referenced(index).into_iter().map(|blob| blob.sha256).collect(),
        };
        if index.recording.is_none() {
            self.release_live(&mut state.copies);
        }
        drop(lock);
        Ok(())
    }

    /// Saves `bytes` (once per content) and names them, within the turn's
    /// share of the cap: a copy that would take the turn's copies past it is
    /// not written.
    fn store(&self, bytes: &[u8], copies: &mut Copies) -> Result<Blob, String> {
        if self.is_discarded() {
            return Err("the session was deleted".to_owned());
        }
        let blob = Blob { sha256: hex(&Sha256::digest(bytes)), len: bytes.len() as u64 };
        let path = self.blob_path(&blob);
        if path.exists() {
            return Ok(blob);
        }
        if copies.spent.saturating_add(blob.len) > self.max_bytes {
            return Err(CAP_REACHED.to_owned());
        }
        self.go_live(copies);
        let dir = self.dir.join(BLOBS_DIR);
        // Not flushed to the device one by one (a command's first scan may
        // save thousands): a copy a crash tore fails its hash check when
        // loaded, and is then named as not restored, never written back.
        let written = self.create_dir(&dir).and_then(|()| {
            let mut temp = tempfile::NamedTempFile::new_in(&dir)?;
            temp.write_all(bytes)?;
            temp.persist(&path).map_err(|err| err.error)
        });
        written.map_err(|err| format!("cannot save a copy: {err}"))?;
        copies.spent += blob.len;
        copies.written.insert(blob.sha256.clone());
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
                Err(GuardError::TooLarge { size, limit }) => Err(too_big(size, limit)),
                Err(err) => Err(err.to_string()),
            },
            Found::Directory => Err("it is a directory now".to_owned()),
            Found::Special(kind) => Err(format!("it is {kind} now")),
            Found::Unresolvable(why) => Err(why.clone()),
        }
    }

    /// Saves what a file holds now: `Ok(None)` for no file. A file over the
    /// size limit or sparse is [`TOO_BIG`]; one whose copy would take the
    /// turn's copies past the cap is [`CAP_REACHED`]. At most the limit is
    /// read, whatever the file does meanwhile.
    fn save_current(&self, path: &Path, copies: &mut Copies) -> Result<Option<Blob>, String> {
        let target = Target::of(path);
        if target.real != path {
            return Err("a link now leads elsewhere from its path".to_owned());
        }
        match &target.found {
            Found::Missing => Ok(None),
            Found::File { .. } => {
                let (mut file, size) = match target.open_regular() {
                    Ok(opened) => opened,
                    Err(GuardError::NotFound) => return Ok(None),
                    Err(err) => return Err(err.to_string()),
                };
                let cap = self.file_cap();
                if size > cap {
                    return Err(too_big(size, cap));
                }
                if let Some(allocated) = sparse(&mut file, size) {
                    return Err(format!(
                        "{TOO_BIG}: it is a sparse file of {size} bytes taking {allocated} on disk, and a copy would \
                         take them all"
                    ));
                }
                let mut bytes = Vec::with_capacity(usize::try_from(size).unwrap_or(0));
                file.take(cap.saturating_add(1)).read_to_end(&mut bytes).map_err(|err| err.to_string())?;
                if bytes.len() as u64 > cap {
                    return Err(too_big(bytes.len() as u64, cap));
                }
                self.store(&bytes, copies).map(Some)
            }
            Found::Directory => Err("it is a directory now".to_owned()),
            Found::Special(kind) => Err(format!("it is {kind} now")),
            Found::Unresolvable(why) => Err(why.clone()),
        }
    }

    /// A turn starts: its changes are recorded from now on. An undone turn
    /// can no longer be redone once another turn ran.
    pub fn begin_turn(&self, prompt: &str, messages_before: usize) {
        let mut state = self.lock();
        // Live first, then read: another front end's clean-up either came
        // before (its write is read now, and the workspace copies it may have
        // deleted are made again) or sees this one live and leaves its copies.
        // (Without a folder yet there is no copy, and none is made for a
        // session that may never be saved.)
        if self.dir.is_dir() {
            self.go_live(&mut state.copies);
        }
        let read = self.refresh(&mut state);
        if std::mem::take(&mut state.stale_cache) || read {
            state.cache.clear();
        }
        if state.off.is_some() {
            return;
        }
        state.copies.spent = 0;
        let index = self.index(&mut state);
        let number = index.next;
        index.next += 1;
        let had_undone = !index.undone.is_empty();
        index.undone.clear();
        index.recording = Some(TurnRecord {
            id: uuid::Uuid::new_v4().simple().to_string(),
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
            match self.save_current(path, &mut state.copies) {
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
        let roots: Vec<PathBuf> =
            roots.iter().filter_map(|root| crate::platform::paths::canonical(root).ok()).collect();
        let Some((first, rest)) = roots.split_first() else { return Snapshot::default() };
        let mut builder = ignore::WalkBuilder::new(first);
        for root in rest {
            builder.add(root);
        }
        // Compared with the walk's real paths, so real paths too (the index file may not exist yet).
        let excluded: Vec<PathBuf> = self
            .excluded
            .iter()
            .map(|own| {
                match (own.parent().and_then(|dir| crate::platform::paths::canonical(dir).ok()), own.file_name()) {
                    (Some(dir), Some(name)) => dir.join(name),
                    _ => own.clone(),
                }
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
                        Err(too_big(stamp.len, self.file_cap()))
                    } else if stamp.len > budget {
                        Err(CAP_REACHED.to_owned())
                    } else {
                        match self.save_current(&path, &mut state.copies) {
                            Ok(Some(blob)) => Ok(blob),
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
        self.settle(&mut record, &mut state.copies);
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
            // What the file named before this write, and what this front end wrote.
            let mut candidates = std::mem::take(&mut state.synced.blobs);
            candidates.extend(state.copies.written.iter().cloned());
            self.save_or_warn(&mut state);
            if !state.unsaved {
                self.collect_garbage(&mut state, &candidates);
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
            self.release_live(&mut state.copies);
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
                        entry.not_saved = Some(CAP_REACHED.to_owned());
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

    /// Deletes the saved contents the index (every front end's turns and
    /// recordings, as just written) and the cache no longer name. While
    /// another front end uses the checkpoints, only `candidates` (what the
    /// file named before, and this front end's own copies) are deleted:
    /// another's copies not yet in the file are left alone.
    fn collect_garbage(&self, state: &mut State, candidates: &HashSet<String>) {
        // Never a newer lathe's copies.
        if state.off.is_some() || self.is_discarded() {
            return;
        }
        let cache: Vec<Blob> = state.cache.values().filter_map(|seen| seen.saved.clone().ok()).collect();
        let index = self.index(state);
        let keep: HashSet<String> = referenced(index).into_iter().chain(cache).map(|blob| blob.sha256).collect();
        let alone = self.alone();
        let Ok(entries) = std::fs::read_dir(self.dir.join(BLOBS_DIR)) else { return };
        for entry in entries.flatten() {
            let name = entry.file_name();
            let Some(name) = name.to_str() else { continue };
            if keep.contains(name) || (!alone && !candidates.contains(name)) {
                continue;
            }
            match std::fs::remove_file(entry.path()) {
                Ok(()) => {
                    state.copies.written.remove(name);
                }
                Err(err) => tracing::debug!(path = %entry.path().display(), %err, "cannot remove an unused checkpoint"),
            }
        }
    }

    /// Gives `with` the undoable turns, oldest first, and whether an undone
    /// turn can be redone, without copying them (under the lock: keep it short).
    pub fn with_turns<T>(&self, with: impl FnOnce(&[TurnRecord], bool) -> T) -> T {
        let mut state = self.lock();
        self.refresh(&mut state);
        let index = self.index(&mut state);
        with(&index.turns, !index.undone.is_empty())
    }

    /// The undoable turns, oldest first.
    pub fn turns(&self) -> Vec<TurnRecord> {
        self.with_turns(|turns, _| turns.to_vec())
    }

    /// Whether an undone turn can be redone.
    pub fn can_redo(&self) -> bool {
        self.with_turns(|_, can_redo| can_redo)
    }

    /// Undoes the last turn's file changes (see the module docs); `force`
    /// restores files changed since the turn too. The turn moves to the
    /// redo list once [`Checkpoints::undone`] is told what the conversation lost.
    pub fn undo(&self, roots: &[PathBuf], force: bool) -> Result<Outcome, CheckpointError> {
        let mut state = self.lock();
        self.refresh(&mut state);
        if let Some(why) = &state.off {
            return Err(CheckpointError::Off(why.clone()));
        }
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
        self.refresh(&mut state);
        if let Some(why) = &state.off {
            return Err(CheckpointError::Off(why.clone()));
        }
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
        self.save(&mut state)?;
        state.unsaved = false;
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

impl Drop for Checkpoints {
    /// This front end ends: its file in `live/` goes (its lock with it), so
    /// the others know at once that it no longer records a turn.
    fn drop(&mut self) {
        let mut copies = std::mem::take(&mut self.state.get_mut().unwrap_or_else(PoisonError::into_inner).copies);
        self.release_live(&mut copies);
    }
}

/// Every saved content the index refers to (every front end's turns, undone
/// turns and turns being recorded).
fn referenced(index: &Index) -> Vec<Blob> {
    let turns = index
        .turns
        .iter()
        .chain(index.undone.iter().map(|undone| &undone.turn))
        .chain(&index.recording)
        .chain(index.others.iter().map(|other| &other.turn));
    blobs_of(turns)
}

/// Every saved content an index file refers to.
fn referenced_by(stored: &Stored) -> Vec<Blob> {
    let turns = stored
        .turns
        .iter()
        .chain(stored.undone.iter().map(|undone| &undone.turn))
        .chain(&stored.recording)
        .chain(stored.recordings.iter().map(|other| &other.turn));
    blobs_of(turns)
}

fn blobs_of<'a>(turns: impl Iterator<Item = &'a TurnRecord>) -> Vec<Blob> {
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
            let base = crate::platform::paths::canonical(temp.path()).unwrap();
            let root = base.join("project");
            std::fs::create_dir_all(&root).unwrap();
            // Made by the session store at its start (checkpoints never make it).
            std::fs::create_dir_all(base.join("sessions")).unwrap();
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

        /// Bytes in `blobs/` (a copy deleted while it is listed counts nothing).
        fn stored(&self) -> u64 {
            let Ok(entries) = std::fs::read_dir(self.store.join("s1/checkpoints/blobs")) else { return 0 };
            entries.flatten().filter_map(|entry| entry.metadata().ok()).map(|metadata| metadata.len()).sum()
        }

        fn index_file(&self) -> PathBuf {
            self.store.join("s1/checkpoints/index.json")
        }
    }

    fn prompts(checkpoints: &Checkpoints) -> Vec<String> {
        checkpoints.turns().into_iter().map(|turn| turn.prompt).collect()
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
        if !crate::platform::testing::symlink(&outside, &path) {
            return;
        }
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
        checkpoints.die();
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

    /// Checkpoints saved after the sessions folder was removed (a late save
    /// at the end of a test, the user clearing their history) make nothing
    /// again: neither the session's folder nor the sessions folder.
    #[test]
    fn a_removed_sessions_folder_is_not_made_again() {
        let fx = Fixture::new();
        let file = fx.root.join("a.txt");
        std::fs::write(&file, "before\n").unwrap();
        let checkpoints = fx.checkpoints(1 << 20);
        std::fs::remove_dir_all(&fx.store).unwrap();
        checkpoints.begin_turn("write", 0);
        write(&checkpoints, &file, "after\n");
        checkpoints.finish_turn(2, true);
        checkpoints.persist();
        assert!(!fx.store.exists());
    }

    /// The checkpoints of a turn can be written before the store creates the
    /// session's folder (its writer thread is behind): the folders they
    /// create, that one included, are private all the same (CI caught the
    /// session folder left 0755 under load).
    #[test]
    fn the_folders_checkpoints_create_are_private() {
        let fx = Fixture::new();
        let file = fx.root.join("a.txt");
        std::fs::write(&file, "before\n").unwrap();
        let checkpoints = fx.checkpoints(1 << 20);
        checkpoints.begin_turn("write", 0);
        write(&checkpoints, &file, "after\n");
        checkpoints.finish_turn(2, true);
        checkpoints.persist();
        for dir in ["s1", "s1/checkpoints", "s1/checkpoints/blobs", "s1/checkpoints/live"] {
            let Some(mode) = crate::platform::testing::mode(&fx.store.join(dir)) else { return };
            assert_eq!(mode & 0o777, 0o700, "{dir}");
        }
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

    /// Issue 29: the cap is a budget each copy is checked against before it
    /// is written: writes of one turn saving ten distinct 300-byte files
    /// under a 1000-byte cap never have more than 1000 bytes of copies on
    /// disk, at any step; the files past it are named as not saved.
    #[test]
    fn the_copies_of_one_turn_never_exceed_the_cap() {
        let fx = Fixture::new();
        let checkpoints = fx.checkpoints(1000);
        let paths: Vec<PathBuf> = (0..10).map(|n| fx.root.join(format!("f{n}.txt"))).collect();
        for (n, path) in paths.iter().enumerate() {
            std::fs::write(path, format!("{n}").repeat(300)).unwrap();
        }
        checkpoints.begin_turn("rewrite all", 0);
        for path in &paths {
            write(&checkpoints, path, "new");
            assert!(fx.stored() <= 1000, "{} bytes stored", fx.stored());
        }
        checkpoints.finish_turn(2, true);
        assert!(fx.stored() <= 1000, "{} bytes stored", fx.stored());
        checkpoints.persist();
        assert!(fx.stored() <= 1000, "{} bytes stored", fx.stored());
        let outcome = checkpoints.undo(&fx.roots(), false).unwrap();
        assert_eq!(outcome.changed.len(), 3, "three copies fit: {outcome:?}");
        assert_eq!(outcome.left.len(), 7);
        assert!(outcome.left.iter().all(|(_, why)| why.contains(CAP_REACHED)), "{:?}", outcome.left);
    }

    /// Issue 29: a command that makes sparse files (1 MiB each, nothing on
    /// disk) and rewrites more dense files than the cap holds: the copies
    /// never pass the 4 MiB cap (not even before the index is written and
    /// the unused ones deleted), the sparse files are "too big to keep",
    /// and `/undo` says so for each of them.
    #[test]
    fn sparse_files_are_too_big_to_keep_and_a_command_stays_within_the_cap() {
        if !crate::platform::testing::sparse_files() {
            return;
        }
        let fx = Fixture::new();
        let cap = 4 << 20;
        let dense: Vec<PathBuf> = (0..20).map(|n| fx.root.join(format!("dense{n:02}.bin"))).collect();
        for (n, path) in dense.iter().enumerate() {
            std::fs::write(path, vec![n as u8; 400 << 10]).unwrap();
        }
        let checkpoints = fx.checkpoints(cap);
        checkpoints.begin_turn("fill the disk", 0);
        checkpoints.before_command(&fx.roots());
        let sparse: Vec<PathBuf> = (0..10).map(|n| fx.root.join(format!("sparse{n}.img"))).collect();
        for path in &sparse {
            std::fs::File::create(path).unwrap().set_len(1 << 20).unwrap();
        }
        for (n, path) in dense.iter().enumerate() {
            std::fs::write(path, vec![n as u8 + 100; 400 << 10]).unwrap();
        }
        checkpoints.after_command(&fx.roots());
        checkpoints.finish_turn(2, true);
        assert!(fx.stored() <= cap, "{} bytes of copies, over the {cap}-byte cap", fx.stored());
        checkpoints.persist();
        assert!(fx.stored() <= cap, "{} bytes of copies", fx.stored());

        let outcome = checkpoints.undo(&fx.roots(), false).unwrap();
        for path in &sparse {
            let why = outcome.left.iter().find(|(left, _)| left == path).map(|(_, why)| why.as_str());
            assert!(why.is_some_and(|why| why.contains(TOO_BIG) && why.contains("sparse")), "{path:?}: {why:?}");
            assert!(path.exists(), "left as the turn left it");
        }
    }

    /// Issue 29: two front ends on one session (an editor and `lathe exec
    /// --resume`, here two `Checkpoints` on the same folder, as two
    /// processes have): each one's turns survive the other's writes, a turn
    /// one is still recording survives the other's write, each sees the
    /// other's turns, and `/undo` from either walks back through all of
    /// them (the copies of each are still there).
    #[test]
    fn two_front_ends_never_lose_each_others_checkpoints() {
        let fx = Fixture::new();
        let [a, b, c, d] = ["a", "b", "c", "d"].map(|name| fx.root.join(format!("{name}.txt")));
        for path in [&a, &b, &c] {
            std::fs::write(path, "before\n").unwrap();
        }
        let editor = fx.checkpoints(1 << 20);
        editor.begin_turn("editor one", 0);
        write(&editor, &a, "a after\n");
        editor.finish_turn(2, true);
        editor.persist();

        let exec = fx.checkpoints(1 << 20);
        exec.begin_turn("exec two", 2);
        write(&exec, &b, "b after\n");
        exec.finish_turn(4, true);
        exec.persist();

        // Exec records a turn, not finished yet, while the editor runs one.
        exec.begin_turn("exec three", 4);
        write(&exec, &d, "d made\n");
        editor.begin_turn("editor four", 4);
        write(&editor, &c, "c after\n");
        editor.finish_turn(6, true);
        editor.persist();
        assert_eq!(prompts(&fx.checkpoints(1 << 20)), ["editor one", "exec two", "editor four"]);
        let on_disk: serde_json::Value = serde_json::from_slice(&std::fs::read(fx.index_file()).unwrap()).unwrap();
        assert_eq!(on_disk["recordings"][0]["turn"]["prompt"], "exec three", "{on_disk}");

        exec.finish_turn(8, true);
        exec.persist();
        let all = ["editor one", "exec two", "exec three", "editor four"];
        assert_eq!(prompts(&editor), all);
        assert_eq!(prompts(&exec), all);
        assert_eq!(prompts(&fx.checkpoints(1 << 20)), all);

        for expected in all.iter().rev() {
            let outcome = editor.undo(&fx.roots(), false).unwrap();
            assert_eq!(outcome.turn.prompt, *expected);
            assert_eq!((outcome.changed.len(), outcome.left.len()), (1, 0), "{outcome:?}");
            editor.undone(&outcome, Vec::new(), 0);
        }
        for path in [&a, &b, &c] {
            assert_eq!(std::fs::read_to_string(path).unwrap(), "before\n");
        }
        assert!(!d.exists());
        assert!(exec.turns().is_empty(), "exec sees the editor's undos");
        assert!(exec.can_redo());
    }

    /// The workspace copies a front end keeps for its commands (not in the
    /// index) may be deleted by another front end's clean-up while the first
    /// runs no turn: the first makes them again before its next command, so
    /// what that command changes can still be undone.
    #[test]
    fn workspace_copies_another_front_end_cleaned_up_are_made_again() {
        let fx = Fixture::new();
        let (kept, other) = (fx.root.join("kept.txt"), fx.root.join("other.txt"));
        std::fs::write(&kept, "original\n").unwrap();
        let exec = fx.checkpoints(1 << 20);
        exec.begin_turn("look around", 0);
        exec.before_command(&fx.roots());
        exec.after_command(&fx.roots());
        exec.finish_turn(2, true);
        exec.persist();
        let editor = fx.checkpoints(1 << 20);
        editor.begin_turn("edit another", 2);
        write(&editor, &other, "new\n");
        editor.finish_turn(4, true);
        editor.persist();
        exec.begin_turn("change it", 4);
        exec.before_command(&fx.roots());
        std::fs::write(&kept, "changed\n").unwrap();
        exec.after_command(&fx.roots());
        exec.finish_turn(6, true);
        exec.persist();
        let outcome = exec.undo(&fx.roots(), false).unwrap();
        assert_eq!(outcome.turn.prompt, "change it");
        assert!(outcome.left.is_empty(), "{:?}", outcome.left);
        assert_eq!(std::fs::read_to_string(&kept).unwrap(), "original\n");
    }

    /// Issue 29: a front end that dies while recording a turn (its file in
    /// `live/` no longer locked) leaves a turn the other front end settles
    /// and can undo; one that runs keeps its turn as a recording.
    #[test]
    fn a_dead_front_ends_turn_is_settled_by_the_other() {
        let fx = Fixture::new();
        let path = fx.root.join("a.txt");
        std::fs::write(&path, "before\n").unwrap();
        let editor = fx.checkpoints(1 << 20);
        editor.begin_turn("editor one", 0);
        editor.finish_turn(2, true);
        editor.persist();
        let exec = fx.checkpoints(1 << 20);
        exec.begin_turn("exec dies", 2);
        write(&exec, &path, "after\n");
        assert_eq!(prompts(&editor), ["editor one"], "exec runs: its turn is still being recorded");
        drop(exec);
        assert_eq!(prompts(&editor), ["editor one", "exec dies"]);
        editor.undo(&fx.roots(), false).unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "before\n");
    }

    /// Issue 29: an index written by a newer lathe (a higher version, in a
    /// format this one cannot read) is never written over and its copies
    /// never deleted, whether it is there from the start or appears while
    /// the session runs; checkpoints are off and the user is told once.
    #[test]
    fn an_index_of_a_newer_lathe_is_left_alone() {
        let newer = br#"{"version": 2, "turns": {"a": "a format this lathe cannot read"}}"#;
        let fx = Fixture::new();
        let dir = fx.store.join("s1/checkpoints");
        std::fs::create_dir_all(dir.join("blobs")).unwrap();
        std::fs::write(dir.join("blobs/ffff"), "a newer lathe's copy").unwrap();
        std::fs::write(fx.index_file(), newer).unwrap();
        let path = fx.root.join("a.txt");
        std::fs::write(&path, "before\n").unwrap();

        let checkpoints = fx.checkpoints(1 << 20);
        checkpoints.begin_turn("edit", 0);
        write(&checkpoints, &path, "after\n");
        checkpoints.finish_turn(2, true);
        checkpoints.persist();
        assert_eq!(std::fs::read(fx.index_file()).unwrap(), newer);
        assert_eq!(fx.blobs(), 1, "its copy stays, and none is added");
        let notice = checkpoints.take_notice().unwrap();
        assert!(notice.contains("newer lathe") && notice.contains("version 2"), "{notice}");
        assert_eq!(checkpoints.take_notice(), None, "told once");
        assert!(checkpoints.turns().is_empty());
        assert!(matches!(checkpoints.undo(&fx.roots(), false), Err(CheckpointError::Off(_))));
        assert!(matches!(checkpoints.redo(&fx.roots(), 2), Err(CheckpointError::Off(_))));

        // A newer lathe writes the index of a session this one is using.
        let fx = Fixture::new();
        let path = fx.root.join("a.txt");
        std::fs::write(&path, "before\n").unwrap();
        let checkpoints = fx.checkpoints(1 << 20);
        checkpoints.begin_turn("edit", 0);
        write(&checkpoints, &path, "after\n");
        checkpoints.finish_turn(2, true);
        checkpoints.persist();
        assert_eq!(checkpoints.take_notice(), None, "on");
        std::fs::write(fx.index_file(), newer).unwrap();
        checkpoints.begin_turn("edit again", 2);
        write(&checkpoints, &path, "again\n");
        checkpoints.finish_turn(4, true);
        checkpoints.persist();
        assert_eq!(std::fs::read(fx.index_file()).unwrap(), newer);
        assert!(checkpoints.take_notice().is_some());
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
