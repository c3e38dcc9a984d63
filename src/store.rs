//! Sessions on disk: one directory per session under the data directory,
//! holding `meta.json` (id, cwd, title, timestamps, model, mode) and
//! `log.jsonl`, an append-only journal of everything that happened, in
//! order: what the editor was sent (`session/update`s, with consecutive
//! streamed chunks of one message merged into one record) and each change to
//! the model transcript. The line formats, versioned, are in [`journal`];
//! the list of sessions is kept in an [`index`] beside the directory.
//!
//! Why JSON Lines and not SQLite: the log is append-only and read back whole,
//! in order, which is exactly what a line-per-record file does, with no
//! dependency, a format a person can read, and a simple failure mode. A crash
//! or kill can only tear the last line; a torn or unreadable line is skipped
//! with a warning on load and the rest of the log is kept.
//!
//! Every change goes through one background writer thread, in the order it
//! was asked for: appends (batched: whatever is queued is written with one
//! system call per log), session creation, metadata (replaced atomically:
//! temporary file, then rename), close and delete. So a turn never waits on
//! the disk, a kill loses at most what is still queued, and a reader that
//! first waits for [`Store::written`] sees every change asked for before it.
//! Streamed chunks are held by the writer until their message ends (the next
//! record of that session) or for at most [`CHUNK_FLUSH`], then written as
//! one record: a kill loses at most that much of an answer being streamed.
//! The streams of sub-agents running at once are held side by side, one
//! message each, so they are merged too.
//! Reads (load, list) block, and are for callers off the async threads.
//!
//! Honest about what it keeps: everything is private to the user (0700
//! directories, 0600 files); the writer holds at most [`MAX_OPEN_LOGS`] logs
//! open and closes one idle for [`IDLE_LOG`]; an append that fails (a full
//! disk) is cut off again so the log still ends on a whole line, and the
//! failure is reported once per session through the [`FailureSink`] the
//! store was opened with; and [`Store::open`] fails unless it can really
//! write, so a caller knows up front when nothing will be saved.
//!
//! This module knows the record shapes (opaque update JSON, merged chunk
//! text, [`Message`]s) but nothing of ACP semantics or the turn loop.

mod index;
mod journal;

use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::io::{BufReader, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant, SystemTime};

use serde::{Deserialize, Serialize};
use tokio::sync::oneshot;

use crate::model::Message;
pub use index::{ListKey, ListPage, SessionSummary};
pub use journal::VERSION as JOURNAL_VERSION;

/// What is kept about a session besides its log.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionMeta {
    /// The session id.
    pub session_id: String,
    /// The working directory it was last used with.
    pub cwd: PathBuf,
    /// Further roots it was last used with.
    #[serde(default)]
    pub additional_directories: Vec<PathBuf>,
    /// A title derived from the first prompt.
    #[serde(default)]
    pub title: Option<String>,
    /// When it was created (RFC 3339).
    pub created_at: String,
    /// When it last changed (RFC 3339).
    pub updated_at: String,
    /// The configured model it uses.
    #[serde(default)]
    pub model: Option<String>,
    /// Its mode id.
    #[serde(default)]
    pub mode: Option<String>,
    /// Its reasoning effort, when chosen.
    #[serde(default)]
    pub thought_level: Option<String>,
}

/// One record of a session log.
#[derive(Debug, Clone, PartialEq)]
pub enum Record {
    /// A `session/update` notification as sent: the whole JSON-RPC message,
    /// without its newline.
    Update(String),
    /// Streamed text of one message: consecutive chunks merged.
    Chunk(Chunk),
    /// A message appended to the model transcript.
    Message(Message),
    /// The transcript was replaced (compaction, `/clear`) by these messages.
    Reset(Vec<Message>),
    /// The transcript was cut back to its first this many messages (`/undo`).
    Rewind(usize),
    /// The steering messages waiting for the running turn's next model
    /// request, all of them (empty once they were taken): so none is lost
    /// when the process ends before they were read.
    Steers(Vec<Vec<crate::model::UserPart>>),
}

/// Whose streamed text a [`Chunk`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ChunkKind {
    /// The model's answer (`agent_message_chunk`).
    Agent,
    /// The model's reasoning (`agent_thought_chunk`).
    Thought,
    /// What the user typed (`user_message_chunk`).
    User,
}

/// Streamed plain text of one message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chunk {
    /// Whose text it is.
    pub kind: ChunkKind,
    /// The message it belongs to, when the chunks carried an id.
    pub message_id: Option<Arc<str>>,
    /// The text.
    pub text: String,
    /// The sub-agent's session it was sent in (`<session>.<task call id>`);
    /// `None`: the log's own session.
    pub session: Option<Arc<str>>,
}

/// Why a store operation failed.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// No stored session has this id.
    #[error("no stored session {0}")]
    NotFound(String),
    /// The disk said no.
    #[error("{action} {path}: {source}")]
    Io {
        /// What was being done.
        action: &'static str,
        /// Where.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The writer thread is gone (the store is shutting down).
    #[error("the session store has stopped")]
    Stopped,
    /// A file could not be understood.
    #[error("{path}: {message}")]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
}

/// A session loaded from disk: its metadata and its log, in order.
#[derive(Debug)]
pub struct StoredSession {
    /// The metadata.
    pub meta: SessionMeta,
    /// Every readable record, in order.
    pub records: Vec<Record>,
}

impl StoredSession {
    /// The model transcript the log describes.
    pub fn transcript(&self) -> Vec<Message> {
        let mut messages = Vec::new();
        for record in &self.records {
            match record {
                Record::Message(message) => messages.push(message.clone()),
                Record::Reset(replacement) => messages.clone_from(replacement),
                Record::Rewind(keep) => messages.truncate(*keep),
                Record::Update(_) | Record::Chunk(_) | Record::Steers(_) => {}
            }
        }
        messages
    }
}

/// Something the store could not save, for the user to hear of: the writer
/// reports at most one per session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SaveFailure {
    /// The session whose records or metadata were not saved.
    pub session_id: String,
    /// Why, as the operating system put it.
    pub error: String,
}

/// Where the writer thread reports a [`SaveFailure`]; called on that thread.
pub type FailureSink = Box<dyn Fn(SaveFailure) + Send>;

/// How the store treats old sessions.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Retention {
    /// Sessions not updated for this many days are deleted when the store
    /// opens; `None` keeps every session.
    pub keep_days: Option<u32>,
}

/// The sessions directory and its writer thread.
pub struct Store {
    root: PathBuf,
    writer: mpsc::Sender<WriterCommand>,
    index: Arc<index::Shared>,
}

enum WriterCommand {
    /// An update line as sent, with its newline.
    Append {
        dir: PathBuf,
        line: Vec<u8>,
    },
    /// Streamed text, merged with the chunks around it before it is written.
    Chunk {
        dir: PathBuf,
        chunk: Chunk,
    },
    /// A transcript change.
    Transcript {
        dir: PathBuf,
        record: Box<Record>,
    },
    /// The index changed outside the writer: save it in a while.
    IndexChanged,
    Create {
        meta: Box<SessionMeta>,
        dir: PathBuf,
        done: oneshot::Sender<Result<(), StoreError>>,
    },
    SaveMeta(Box<SessionMeta>, PathBuf),
    Close {
        dir: PathBuf,
        done: oneshot::Sender<()>,
    },
    Delete {
        dir: PathBuf,
        done: oneshot::Sender<Result<(), StoreError>>,
    },
    Written(oneshot::Sender<()>),
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store").field("root", &self.root).finish_non_exhaustive()
    }
}

/// Resolves once the writer has done everything queued before it was asked
/// for (or has stopped).
#[derive(Debug)]
pub struct Written(oneshot::Receiver<()>);

impl Written {
    /// Waits for it.
    pub async fn wait(self) {
        let _ = self.0.await;
    }
}

/// The data directory: `--data-dir`, else `LATHE_DATA_DIR`, else the
/// platform's (`$XDG_DATA_HOME/lathe`, `~/.local/share/lathe` on Linux; see
/// `platform::folders`).
pub fn default_data_dir(cli: Option<&Path>, env: &dyn Fn(&str) -> Option<String>) -> Option<PathBuf> {
    if let Some(path) = cli {
        return Some(path.to_path_buf());
    }
    if let Some(path) = env("LATHE_DATA_DIR").filter(|p| !p.is_empty()) {
        return Some(PathBuf::from(path));
    }
    crate::platform::folders::data_dir(env)
}

/// Now, as RFC 3339 with second precision.
pub fn now_rfc3339() -> String {
    humantime::format_rfc3339_seconds(SystemTime::now()).to_string()
}

/// Session ids become directory names: only these characters are accepted.
fn valid_id(id: &str) -> bool {
    !id.is_empty() && id.len() <= 128 && id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

const META_FILE: &str = "meta.json";
const LOG_FILE: &str = "log.jsonl";

/// At most this many session logs are open at once; opening another closes
/// the one written longest ago.
pub const MAX_OPEN_LOGS: usize = 16;

/// A log not written for this long is closed (and reopened when needed).
pub const IDLE_LOG: Duration = Duration::from_secs(30);

/// Creates `dir` and any missing parents, each private (session data is the
/// user's conversation with their code: only they may read it). Whatever
/// else writes under a session's folder (its checkpoints) creates it through
/// this too: whoever comes first, the folder is private.
pub(crate) fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    crate::platform::private::create_dir(dir)
}

/// Like [`create_private_dir`], but only below `kept`, which must exist: a
/// write that comes late (a session's last save, a checkpoint) never makes
/// the sessions folder or anything above it again once it is gone. Whoever
/// removed it while lathe ran (the user clearing their history, a test's
/// temporary home at its end) meant it; the store made it at start-up.
pub(crate) fn create_private_dir_below(kept: &Path, dir: &Path) -> std::io::Result<()> {
    if !kept.is_dir() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::NotFound,
            format!("{} was removed while lathe ran: not made again", kept.display()),
        ));
    }
    create_private_dir(dir)
}

impl Store {
    /// Opens (creating if needed) the store under `data_dir/sessions`, after
    /// checking with a real write that sessions can be saved there. What the
    /// writer later fails to save goes to `failures`.
    /// The session index is loaded (and sessions older than
    /// `retention.keep_days` deleted) on a thread of its own: lists wait for
    /// it, nothing else does.
    pub fn open(data_dir: &Path, retention: Retention, failures: FailureSink) -> Result<Store, StoreError> {
        Store::open_on(data_dir, retention, RealDisk, failures)
    }

    fn open_on<D: Disk>(
        data_dir: &Path,
        retention: Retention,
        disk: D,
        failures: FailureSink,
    ) -> Result<Store, StoreError> {
        let root = data_dir.join("sessions");
        create_private_dir(&root).map_err(|source| StoreError::Io {
            action: "cannot create the sessions directory",
            path: root.clone(),
            source,
        })?;
        // A directory made by an older lathe (0755): what is inside it is private once it is.
        if let Err(err) = crate::platform::private::make_private(&root) {
            tracing::warn!(path = %root.display(), %err, "cannot make the sessions directory private");
        }
        probe(&root).map_err(|source| StoreError::Io { action: "cannot write in", path: root.clone(), source })?;
        let (writer, commands) = mpsc::channel();
        let index = Arc::new(index::Shared::default());
        let index_file = data_dir.join(index::INDEX_FILE);
        let thread = Writer {
            disk,
            logs: OpenLogs::new(MAX_OPEN_LOGS, IDLE_LOG),
            failures,
            reported: HashSet::new(),
            journals: HashMap::new(),
            index: Arc::clone(&index),
            index_file: index_file.clone(),
            index_due: None,
        };
        std::thread::Builder::new().name("lathe-store".to_owned()).spawn(move || thread.run(&commands)).map_err(
            |source| StoreError::Io { action: "cannot start the store writer for", path: root.clone(), source },
        )?;
        index.start_loading();
        let loader =
            IndexLoader { root: root.clone(), file: index_file, index: Arc::clone(&index), writer: writer.clone() };
        if let Err(err) =
            std::thread::Builder::new().name("lathe-index".to_owned()).spawn(move || loader.run(retention))
        {
            // Lists then read the folders themselves (an empty index resyncs with them).
            tracing::warn!(%err, "cannot start loading the session index");
            index.install(index::Index::default(), true);
            index.set_ready();
        }
        Ok(Store { root, writer, index })
    }

    fn dir(&self, id: &str) -> Result<PathBuf, StoreError> {
        if valid_id(id) { Ok(self.root.join(id)) } else { Err(StoreError::NotFound(id.to_owned())) }
    }

    fn send(&self, command: WriterCommand) {
        // The writer stops only when the store is dropped.
        let _ = self.writer.send(command);
    }

    /// Creates a session's directory and writes its metadata, on the writer
    /// thread: queued now, in order with everything else.
    pub fn create(&self, meta: &SessionMeta) -> impl Future<Output = Result<(), StoreError>> + Send + 'static {
        let (done, result) = oneshot::channel();
        match self.dir(&meta.session_id) {
            Ok(dir) => self.send(WriterCommand::Create { meta: Box::new(meta.clone()), dir, done }),
            Err(err) => {
                let _ = done.send(Err(err));
            }
        }
        async move { result.await.unwrap_or(Err(StoreError::Stopped)) }
    }

    /// Queues a record for appending to a session's log.
    pub fn append(&self, id: &str, record: &Record) {
        let Ok(dir) = self.dir(id) else { return };
        match record {
            Record::Update(sent) => self.append_line(dir, sent.clone().into_bytes()),
            Record::Chunk(chunk) => self.send(WriterCommand::Chunk { dir, chunk: chunk.clone() }),
            Record::Message(_) | Record::Reset(_) | Record::Rewind(_) | Record::Steers(_) => {
                self.send(WriterCommand::Transcript { dir, record: Box::new(record.clone()) });
            }
        }
    }

    /// Queues streamed text: merged with the chunks of the same message
    /// around it, written when the message ends or [`CHUNK_FLUSH`] after it
    /// began (whichever is first).
    pub fn append_chunk(&self, id: &str, chunk: Chunk) {
        if let Ok(dir) = self.dir(id) {
            self.send(WriterCommand::Chunk { dir, chunk });
        }
    }

    /// Queues one already-serialised update (the exact JSON-RPC line sent to the editor).
    pub fn append_raw_update(&self, id: &str, line: Vec<u8>) {
        if let Ok(dir) = self.dir(id) {
            self.append_line(dir, line);
        }
    }

    fn append_line(&self, dir: PathBuf, mut line: Vec<u8>) {
        line.push(b'\n');
        self.send(WriterCommand::Append { dir, line });
    }

    /// Queues a metadata update for the writer thread: callers (a turn
    /// answering its prompt, say) never wait on the disk.
    pub fn save_meta_later(&self, meta: SessionMeta) {
        if let Ok(dir) = self.dir(&meta.session_id) {
            self.send(WriterCommand::SaveMeta(Box::new(meta), dir));
        }
    }

    /// Everything queued so far, written: wait for this before reading
    /// back what was queued (a load, a list).
    pub fn written(&self) -> Written {
        let (done, written) = oneshot::channel();
        self.send(WriterCommand::Written(done));
        Written(written)
    }

    /// Writes what is queued for a session's log and closes the log (a later
    /// record opens it again). Resolves once it is closed.
    pub fn close(&self, id: &str) -> Written {
        let (done, written) = oneshot::channel();
        match self.dir(id) {
            Ok(dir) => self.send(WriterCommand::Close { dir, done }),
            Err(_) => {
                let _ = done.send(());
            }
        }
        Written(written)
    }

    /// Deletes a session from disk, on the writer thread (so nothing queued
    /// earlier lands after it); deleting a missing session succeeds.
    pub fn delete(&self, id: &str) -> impl Future<Output = Result<(), StoreError>> + Send + 'static {
        let (done, result) = oneshot::channel();
        match self.dir(id) {
            Ok(dir) => self.send(WriterCommand::Delete { dir, done }),
            Err(_) => {
                let _ = done.send(Ok(()));
            }
        }
        async move { result.await.unwrap_or(Err(StoreError::Stopped)) }
    }

    /// Reads a session's metadata only. Blocking: call it off the async
    /// threads, after [`Store::written`] if it must see what was queued.
    pub fn load_meta(&self, id: &str) -> Result<SessionMeta, StoreError> {
        let path = self.dir(id)?.join(META_FILE);
        let text = match std::fs::read_to_string(&path) {
            Ok(text) => text,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Err(StoreError::NotFound(id.to_owned())),
            Err(source) => return Err(StoreError::Io { action: "cannot read", path, source }),
        };
        serde_json::from_str(&text).map_err(|err| StoreError::Corrupt { path, message: err.to_string() })
    }

    /// Reads a session: its metadata, then every readable log record, each
    /// handed to `visit` as it is read. Blocking, like [`Store::load_meta`].
    pub fn read(&self, id: &str, visit: &mut dyn FnMut(Record)) -> Result<SessionMeta, StoreError> {
        let dir = self.dir(id)?;
        let meta = self.load_meta(id)?;
        let log_path = dir.join(LOG_FILE);
        match File::open(&log_path) {
            Ok(file) => journal::read(&log_path, BufReader::with_capacity(256 * 1024, file), visit),
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => {}
            Err(source) => return Err(StoreError::Io { action: "cannot read", path: log_path, source }),
        }
        Ok(meta)
    }

    /// Loads a session: metadata and every readable log record. Blocking,
    /// like [`Store::load_meta`].
    pub fn load(&self, id: &str) -> Result<StoredSession, StoreError> {
        let mut records = Vec::new();
        let meta = self.read(id, &mut |record| records.push(record))?;
        Ok(StoredSession { meta, records })
    }

    /// One page of the saved sessions, most recent first: those in `cwd`
    /// (all when `None`) after `after`, at most `limit`. From the index:
    /// blocks until it is loaded (at start-up), then costs no file reads
    /// unless another process created or deleted sessions meanwhile.
    pub fn list(&self, cwd: Option<&Path>, after: Option<&ListKey>, limit: usize) -> ListPage {
        self.index.read(&self.root, |index| index.page(cwd, after, limit))
    }

    /// The folder of a session's files (its log, metadata and checkpoints);
    /// deleted with the session. `None` for an id that cannot be a session's.
    pub fn session_dir(&self, id: &str) -> Option<PathBuf> {
        self.dir(id).ok()
    }

    /// The store's own files and folders (the sessions folder, the
    /// index): what a scan of the user's files must leave out.
    pub fn own_paths(&self) -> Vec<PathBuf> {
        let index = self.root.parent().map(|data_dir| data_dir.join(index::INDEX_FILE));
        std::iter::once(self.root.clone()).chain(index).collect()
    }

    /// Whether a session is saved (from the index). Blocking, like [`Store::list`].
    pub fn contains(&self, id: &str) -> bool {
        valid_id(id) && self.index.read(&self.root, |index| index.contains(id))
    }
}

/// Loads the index at start-up (checked against the folders), installs it,
/// deletes the sessions retention no longer keeps, then lets lists read it.
struct IndexLoader {
    root: PathBuf,
    file: PathBuf,
    index: Arc<index::Shared>,
    writer: mpsc::Sender<WriterCommand>,
}

impl IndexLoader {
    fn run(self, retention: Retention) {
        let started = Instant::now();
        let (loaded, changed) = index::Index::load(&self.root, &self.file);
        let old = retention
            .keep_days
            .and_then(|days| SystemTime::now().checked_sub(Duration::from_secs(u64::from(days) * 86_400)))
            .map(|cutoff| loaded.older_than(cutoff))
            .unwrap_or_default();
        self.index.install(loaded, changed);
        let _ = self.writer.send(WriterCommand::IndexChanged);
        tracing::debug!(elapsed = ?started.elapsed(), "session index loaded");
        // Deleted by the writer, in order with everything else; lists wait for it.
        let mut deletions = Vec::new();
        for id in &old {
            let (done, deleted) = oneshot::channel();
            let _ = self.writer.send(WriterCommand::Delete { dir: self.root.join(id), done });
            deletions.push(deleted);
        }
        let mut pruned = 0usize;
        for deleted in deletions {
            match deleted.blocking_recv() {
                Ok(Ok(())) => pruned += 1,
                Ok(Err(err)) => tracing::warn!(%err, "cannot delete an old session"),
                Err(_) => {}
            }
        }
        if let Some(days) = retention.keep_days
            && pruned > 0
        {
            tracing::info!(pruned, days, "deleted sessions not updated for longer than [sessions] keep_days");
        }
        self.index.set_ready();
    }
}

/// Proves that files can be created and written in `root` (a directory can
/// exist and still refuse writes: a read-only mount, wrong ownership).
fn probe(root: &Path) -> std::io::Result<()> {
    let mut file = tempfile::Builder::new().prefix(".lathe-probe-").tempfile_in(root)?;
    file.write_all(b"lathe can write here\n")?;
    file.flush()
}

/// Replaces a session's metadata atomically (a private temporary file, then rename).
fn write_meta(dir: &Path, meta: &SessionMeta) -> std::io::Result<()> {
    let bytes = serde_json::to_vec_pretty(meta)?;
    // tempfile creates its files 0600, and the rename keeps that.
    let mut file = tempfile::NamedTempFile::new_in(dir)?;
    file.write_all(&bytes)?;
    file.persist(dir.join(META_FILE)).map_err(|err| err.error)?;
    Ok(())
}

/// The writer's file system, as far as session logs go: the real one, and in
/// tests one that runs out of space on cue.
trait Disk: Send + 'static {
    type Log: LogFile;
    /// Opens (creating, private) a log for appending.
    fn open_log(&self, path: &Path) -> std::io::Result<Self::Log>;
}

/// An open session log.
trait LogFile: Send {
    /// Its length in bytes.
    fn len(&self) -> std::io::Result<u64>;
    /// Whether its last byte (of `len`) is a newline.
    fn ends_with_newline(&self, len: u64) -> std::io::Result<bool>;
    /// Appends all of `bytes`, or fails having appended any part of them.
    fn append(&mut self, bytes: &[u8]) -> std::io::Result<()>;
    /// Cuts it back to `len` bytes.
    fn truncate(&mut self, len: u64) -> std::io::Result<()>;
}

struct RealDisk;

impl Disk for RealDisk {
    type Log = File;

    fn open_log(&self, path: &Path) -> std::io::Result<File> {
        // Readable too: whether an existing log ends on a line boundary is
        // read from it (`ends_with_newline`).
        // Private; a log written by an older lathe (0644) is made private.
        crate::platform::private::open_append(path)
    }
}

impl LogFile for File {
    fn len(&self) -> std::io::Result<u64> {
        Ok(self.metadata()?.len())
    }

    fn ends_with_newline(&self, len: u64) -> std::io::Result<bool> {
        let mut last = [0u8; 1];
        crate::platform::private::read_at(self, &mut last, len.saturating_sub(1))?;
        Ok(last[0] == b'\n')
    }

    fn append(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.write_all(bytes)
    }

    fn truncate(&mut self, len: u64) -> std::io::Result<()> {
        self.set_len(len)
    }
}

/// One open log and what the writer knows of it.
struct OpenLog<F> {
    dir: PathBuf,
    file: F,
    last_used: Instant,
    /// The file does not end with a newline (a tail torn by a crash, or by a
    /// failed append that could not be cut off): the next append starts a
    /// new line first, so its records are not glued to the torn one.
    torn: bool,
}

/// The logs the writer holds open: at most `capacity`, none idle longer than `idle`.
struct OpenLogs<F> {
    logs: Vec<OpenLog<F>>,
    capacity: usize,
    idle: Duration,
}

impl<F: LogFile> OpenLogs<F> {
    fn new(capacity: usize, idle: Duration) -> Self {
        Self { logs: Vec::new(), capacity: capacity.max(1), idle }
    }

    /// The log of session directory `dir`, opened with `open` if it is not open yet.
    fn get(
        &mut self,
        dir: &Path,
        now: Instant,
        open: impl FnOnce(&Path) -> std::io::Result<F>,
    ) -> std::io::Result<&mut OpenLog<F>> {
        let at = match self.logs.iter().position(|log| log.dir == dir) {
            Some(at) => at,
            None => {
                let file = open(&dir.join(LOG_FILE))?;
                // Unknown (unreadable) counts as torn: an extra newline costs one blank line.
                let torn = match file.len() {
                    Ok(0) => false,
                    Ok(len) => !file.ends_with_newline(len).unwrap_or(false),
                    Err(_) => true,
                };
                if self.logs.len() >= self.capacity
                    && let Some(oldest) =
                        self.logs.iter().enumerate().min_by_key(|(_, log)| log.last_used).map(|(i, _)| i)
                {
                    self.logs.swap_remove(oldest);
                }
                self.logs.push(OpenLog { dir: dir.to_path_buf(), file, last_used: now, torn });
                self.logs.len() - 1
            }
        };
        let log = &mut self.logs[at];
        log.last_used = now;
        Ok(log)
    }

    fn close(&mut self, dir: &Path) {
        self.logs.retain(|log| log.dir != dir);
    }

    fn close_idle(&mut self, now: Instant) {
        let idle = self.idle;
        self.logs.retain(|log| now.saturating_duration_since(log.last_used) < idle);
    }

    /// When the next log becomes idle, if any is open.
    fn next_idle(&self) -> Option<Instant> {
        self.logs.iter().map(|log| log.last_used + self.idle).min()
    }
}

/// Streamed chunks are held at most this long before they are written.
pub const CHUNK_FLUSH: Duration = Duration::from_millis(1000);

/// The index is saved at most this long after it changed.
const INDEX_SAVE: Duration = Duration::from_secs(2);

/// What the writer holds for one session's log between batches.
#[derive(Default)]
struct JournalSlot {
    state: journal::WriterState,
    /// Streamed text not written yet, and when its first chunk came: at
    /// most one message per session the log holds (its own and each
    /// sub-agent's, whose streams interleave when they run at once), in
    /// the order they began.
    pending: Vec<(Chunk, Instant)>,
}

/// The writer thread's state.
struct Writer<D: Disk> {
    disk: D,
    logs: OpenLogs<D::Log>,
    failures: FailureSink,
    /// Sessions whose failure has been reported: the user hears once.
    reported: HashSet<PathBuf>,
    /// Per session log: merging chunks, the lines written last.
    journals: HashMap<PathBuf, JournalSlot>,
    index: Arc<index::Shared>,
    index_file: PathBuf,
    /// When the changed index is to be saved.
    index_due: Option<Instant>,
}

/// Lines to append, per log, in the order their logs were first named.
#[derive(Default)]
struct Batches(Vec<(PathBuf, Vec<u8>)>);

impl Batches {
    fn of(&mut self, dir: &Path) -> &mut Vec<u8> {
        let at = match self.0.iter().position(|(d, _)| d == dir) {
            Some(at) => at,
            None => {
                self.0.push((dir.to_path_buf(), Vec::new()));
                self.0.len() - 1
            }
        };
        &mut self.0[at].1
    }

    fn take(&mut self, dir: &Path) -> Option<Vec<u8>> {
        let at = self.0.iter().position(|(d, _)| d == dir)?;
        Some(self.0.swap_remove(at).1)
    }
}

impl JournalSlot {
    /// Writes the held chunks, if any, into `out`.
    fn flush(&mut self, out: &mut Vec<u8>) {
        for (chunk, _) in std::mem::take(&mut self.pending) {
            self.state.chunk(out, &chunk);
        }
    }

    /// Holds a chunk: merged with the held text of its message, else in
    /// place of its session's held message, which is returned, to be
    /// written now.
    fn hold(&mut self, chunk: Chunk) -> Option<Chunk> {
        let Some(at) = self.pending.iter().position(|(held, _)| held.session == chunk.session) else {
            self.pending.push((chunk, Instant::now()));
            return None;
        };
        let held = &mut self.pending[at].0;
        if held.kind == chunk.kind && held.message_id == chunk.message_id {
            held.text.push_str(&chunk.text);
            return None;
        }
        let (done, _) = self.pending.remove(at);
        self.pending.push((chunk, Instant::now()));
        Some(done)
    }

    /// Whether a held chunk began at least [`CHUNK_FLUSH`] before `now`.
    fn due(&self, now: Instant) -> bool {
        self.pending.iter().any(|(_, since)| now.saturating_duration_since(*since) >= CHUNK_FLUSH)
    }

    /// Writes the held chunks begun at least [`CHUNK_FLUSH`] before `now`.
    fn flush_due(&mut self, out: &mut Vec<u8>, now: Instant) {
        for (chunk, since) in std::mem::take(&mut self.pending) {
            if now.saturating_duration_since(since) >= CHUNK_FLUSH {
                self.state.chunk(out, &chunk);
            } else {
                self.pending.push((chunk, since));
            }
        }
    }
}

impl<D: Disk> Writer<D> {
    /// Whatever is queued is taken in one go: lines for the same log are
    /// joined and written with one system call per log, other commands run
    /// in order as they come, then waiters are told. Streamed chunks wait
    /// for the end of their message (or [`CHUNK_FLUSH`]); logs idle too long
    /// are closed and the index saved as time passes.
    fn run(mut self, commands: &mpsc::Receiver<WriterCommand>) {
        let mut batches = Batches::default();
        loop {
            let wake = [self.logs.next_idle(), self.next_chunk_flush(), self.index_due].into_iter().flatten().min();
            let first = match wake {
                None => commands.recv().map_err(|_| mpsc::RecvTimeoutError::Disconnected),
                Some(at) => commands.recv_timeout(at.saturating_duration_since(Instant::now())),
            };
            let first = match first {
                Ok(command) => Some(command),
                Err(mpsc::RecvTimeoutError::Timeout) => None,
                Err(mpsc::RecvTimeoutError::Disconnected) => break,
            };
            let mut waiting = Vec::new();
            let mut next = first;
            while let Some(command) = next {
                self.handle(command, &mut batches, &mut waiting);
                next = commands.try_recv().ok();
            }
            let now = Instant::now();
            for (dir, slot) in &mut self.journals {
                if slot.due(now) {
                    slot.flush_due(batches.of(dir), now);
                }
            }
            for (dir, bytes) in std::mem::take(&mut batches.0) {
                self.append(&dir, &bytes);
            }
            self.logs.close_idle(Instant::now());
            for done in waiting {
                let _ = done.send(());
            }
            self.save_index(false);
        }
        // The store is gone: write what is held, save the index.
        for (dir, slot) in &mut self.journals {
            slot.flush(batches.of(dir));
        }
        for (dir, bytes) in std::mem::take(&mut batches.0) {
            self.append(&dir, &bytes);
        }
        self.save_index(true);
    }

    fn handle(&mut self, command: WriterCommand, batches: &mut Batches, waiting: &mut Vec<oneshot::Sender<()>>) {
        match command {
            WriterCommand::Append { dir, line } => {
                let out = batches.of(&dir);
                let slot = self.journals.entry(dir).or_default();
                slot.flush(out);
                slot.state.update(out, &line);
            }
            WriterCommand::Chunk { dir, chunk } => {
                let slot = self.journals.entry(dir.clone()).or_default();
                slot.state.recent.add(&chunk);
                if let Some(done) = slot.hold(chunk) {
                    slot.state.chunk(batches.of(&dir), &done);
                }
            }
            WriterCommand::Transcript { dir, record } => {
                let out = batches.of(&dir);
                let slot = self.journals.entry(dir).or_default();
                slot.flush(out);
                slot.state.transcript(out, &record);
            }
            WriterCommand::IndexChanged => {}
            WriterCommand::Create { meta, dir, done } => {
                let sessions = dir.parent().unwrap_or(&dir);
                let created = create_private_dir_below(sessions, &dir).and_then(|()| write_meta(&dir, &meta));
                if created.is_ok() {
                    self.indexed(&dir, meta);
                }
                let _ = done.send(created.map_err(|source| StoreError::Io {
                    action: "cannot create the session",
                    path: dir,
                    source,
                }));
            }
            WriterCommand::SaveMeta(meta, dir) => match write_meta(&dir, &meta) {
                Ok(()) => self.indexed(&dir, meta),
                // Deleted meanwhile.
                Err(err) if err.kind() == std::io::ErrorKind::NotFound && !dir.exists() => {}
                Err(err) => self.failed(&dir, "cannot save a session's metadata", &err),
            },
            WriterCommand::Close { dir, done } => {
                let mut bytes = batches.take(&dir).unwrap_or_default();
                if let Some(mut slot) = self.journals.remove(&dir) {
                    slot.flush(&mut bytes);
                }
                if !bytes.is_empty() {
                    self.append(&dir, &bytes);
                }
                self.logs.close(&dir);
                waiting.push(done);
            }
            WriterCommand::Delete { dir, done } => {
                batches.take(&dir);
                self.journals.remove(&dir);
                self.logs.close(&dir);
                let deleted = match std::fs::remove_dir_all(&dir) {
                    Err(err) if err.kind() != std::io::ErrorKind::NotFound => {
                        Err(StoreError::Io { action: "cannot delete", path: dir, source: err })
                    }
                    _ => {
                        if let Some(id) = dir.file_name().and_then(|name| name.to_str()) {
                            self.index.apply(index::Change::Removed(id.to_owned()));
                            self.index_changed();
                        }
                        Ok(())
                    }
                };
                let _ = done.send(deleted);
            }
            WriterCommand::Written(done) => {
                // Whoever waits for this reads the logs next: nothing may be held back.
                for (dir, slot) in &mut self.journals {
                    slot.flush(batches.of(dir));
                }
                waiting.push(done);
            }
        }
    }

    /// When the oldest held chunk is due.
    fn next_chunk_flush(&self) -> Option<Instant> {
        self.journals.values().flat_map(|slot| slot.pending.iter().map(|(_, since)| *since + CHUNK_FLUSH)).min()
    }

    /// Metadata was written: the index learns it.
    fn indexed(&mut self, dir: &Path, meta: Box<SessionMeta>) {
        if let Some(stamp) = index::Stamp::read(dir) {
            self.index.apply(index::Change::Saved(meta, stamp));
            self.index_changed();
        }
    }

    fn index_changed(&mut self) {
        if self.index_due.is_none() {
            self.index_due = Some(Instant::now() + INDEX_SAVE);
        }
    }

    /// Saves the index when it is due (or `now`), if it changed.
    fn save_index(&mut self, now: bool) {
        if self.index_due.is_none() && self.index.is_dirty() {
            self.index_changed();
        }
        let due = self.index_due.is_some_and(|at| at <= Instant::now());
        if !(now || due) {
            return;
        }
        self.index_due = None;
        if let Some(bytes) = self.index.take_for_saving()
            && let Err(err) = index::save(&self.index_file, &bytes)
        {
            // The folders stay the truth: the next start rebuilds what is missing.
            tracing::warn!(path = %self.index_file.display(), %err, "cannot save the session index");
            self.index.save_failed();
        }
    }

    /// Appends one batch of whole lines to a session's log. A batch that
    /// fails (a full disk) is cut off again, so the log still ends on a line
    /// boundary, and its lines are then tried one at a time: what fits is
    /// kept (a huge record does not take the small ones queued with it down).
    fn append(&mut self, dir: &Path, bytes: &[u8]) {
        let err = match self.append_whole(dir, bytes) {
            Ok(()) => return,
            Err(None) => return,
            Err(Some(err)) => err,
        };
        // What was cut off can be neither continued nor referred to.
        if let Some(slot) = self.journals.get_mut(dir) {
            slot.state.forget();
        }
        self.failed(dir, "cannot append to a session log", &err);
        let mut lost_chunk = false;
        for line in bytes.split_inclusive(|&b| b == b'\n') {
            // A continuation whose chunk line was lost would join another message.
            if lost_chunk && line.starts_with(br#"{"lathe":"more""#) {
                continue;
            }
            match self.append_whole(dir, line) {
                Ok(()) => lost_chunk = false,
                Err(None) => return,
                Err(Some(_)) => lost_chunk = line.starts_with(br#"{"lathe":"chunk""#) || lost_chunk,
            }
        }
    }

    /// Appends whole lines, or none of them (cut off again after a failure);
    /// `Err(None)`: the session is gone, or its log could not be opened (reported).
    fn append_whole(&mut self, dir: &Path, bytes: &[u8]) -> Result<(), Option<std::io::Error>> {
        let Self { disk, logs, .. } = self;
        let log = match logs.get(dir, Instant::now(), |path| disk.open_log(path)) {
            Ok(log) => log,
            // The session was deleted (records of a turn that was still ending).
            Err(err) if err.kind() == std::io::ErrorKind::NotFound && !dir.exists() => return Err(None),
            Err(err) => {
                self.failed(dir, "cannot open a session log", &err);
                return Err(None);
            }
        };
        let before = log.file.len();
        // A new log starts with its format's version; a torn tail is ended first.
        let header = matches!(before, Ok(0));
        let written = if log.torn || header {
            let mut separated = Vec::with_capacity(bytes.len() + 40);
            if log.torn {
                separated.push(b'\n');
            }
            if header {
                journal::write_header(&mut separated);
            }
            separated.extend_from_slice(bytes);
            log.file.append(&separated)
        } else {
            log.file.append(bytes)
        };
        match written {
            Ok(()) => {
                log.torn = false;
                Ok(())
            }
            Err(err) => {
                // Cut back to where the batch began; if even that fails,
                // the next batch starts on a line of its own.
                let cut = before.and_then(|len| log.file.truncate(len));
                if let Err(cut) = cut {
                    tracing::warn!(dir = %dir.display(), err = %cut, "cannot cut a failed append off a session log");
                    log.torn = true;
                }
                Err(Some(err))
            }
        }
    }

    /// Logs a failure and reports it, once per session.
    fn failed(&mut self, dir: &Path, what: &str, err: &std::io::Error) {
        tracing::warn!(dir = %dir.display(), %err, "{what}");
        if self.reported.insert(dir.to_path_buf()) {
            let session_id = dir.file_name().map(|name| name.to_string_lossy().into_owned()).unwrap_or_default();
            (self.failures)(SaveFailure { session_id, error: err.to_string() });
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
    use std::sync::{Arc, Mutex};

    use serde_json::Value;

    use super::*;
    use crate::model::UserPart;
    use crate::test_support::clock::poll_until;

    fn meta(id: &str) -> SessionMeta {
        SessionMeta {
            session_id: id.to_owned(),
            cwd: PathBuf::from("/p"),
            additional_directories: vec![],
            title: Some("t".into()),
            created_at: now_rfc3339(),
            updated_at: now_rfc3339(),
            model: None,
            mode: None,
            thought_level: None,
        }
    }

    fn user(text: &str) -> Message {
        Message::User { parts: vec![UserPart::Text { text: text.into() }] }
    }

    /// A sink that keeps what it was told.
    fn recording() -> (FailureSink, Arc<Mutex<Vec<SaveFailure>>>) {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let sink = Arc::clone(&seen);
        (Box::new(move |failure| sink.lock().unwrap().push(failure)), seen)
    }

    fn ignore() -> FailureSink {
        Box::new(|_| {})
    }

    fn mode(path: &Path) -> u32 {
        crate::platform::testing::mode(path).unwrap() & 0o777
    }

    /// A disk with a byte budget (what is left of it), where truncation can
    /// be made to fail, that counts its open logs.
    #[derive(Clone, Default)]
    struct TestDisk {
        budget: Arc<AtomicU64>,
        truncate_fails: Arc<AtomicBool>,
        open: Arc<AtomicUsize>,
    }

    struct TestLog {
        file: File,
        disk: TestDisk,
    }

    impl TestDisk {
        fn with_room() -> Self {
            let disk = TestDisk::default();
            disk.budget.store(u64::MAX, Ordering::SeqCst);
            disk
        }
    }

    impl Disk for TestDisk {
        type Log = TestLog;

        fn open_log(&self, path: &Path) -> std::io::Result<TestLog> {
            let file = RealDisk.open_log(path)?;
            self.open.fetch_add(1, Ordering::SeqCst);
            Ok(TestLog { file, disk: self.clone() })
        }
    }

    impl Drop for TestLog {
        fn drop(&mut self) {
            self.disk.open.fetch_sub(1, Ordering::SeqCst);
        }
    }

    impl LogFile for TestLog {
        fn len(&self) -> std::io::Result<u64> {
            self.file.len()
        }

        fn ends_with_newline(&self, len: u64) -> std::io::Result<bool> {
            self.file.ends_with_newline(len)
        }

        /// Writes what fits in the budget, as a full disk does, then fails.
        fn append(&mut self, bytes: &[u8]) -> std::io::Result<()> {
            let room = usize::try_from(self.disk.budget.load(Ordering::SeqCst)).unwrap_or(usize::MAX);
            let fits = bytes.len().min(room);
            self.file.write_all(&bytes[..fits])?;
            self.disk.budget.fetch_sub(fits as u64, Ordering::SeqCst);
            if fits < bytes.len() {
                return Err(std::io::Error::new(std::io::ErrorKind::StorageFull, "No space left on device"));
            }
            Ok(())
        }

        fn truncate(&mut self, len: u64) -> std::io::Result<()> {
            if self.disk.truncate_fails.load(Ordering::SeqCst) {
                return Err(std::io::Error::other("truncate refused"));
            }
            self.file.truncate(len)
        }
    }

    fn log_lines(dir: &Path, id: &str) -> Vec<String> {
        let text = std::fs::read_to_string(dir.join("sessions").join(id).join(LOG_FILE)).unwrap();
        text.lines().map(str::to_owned).collect()
    }

    /// A log closed on a whole line and opened again goes on with no blank
    /// line between (the check for a torn tail reads the log's last byte,
    /// which an append-only handle could not: every reopened log began with
    /// a blank line).
    #[tokio::test]
    async fn a_reopened_log_goes_on_without_a_blank_line() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), Retention::default(), ignore()).unwrap();
        store.create(&meta("sess_a")).await.unwrap();
        store.append("sess_a", &Record::Message(user("one")));
        store.close("sess_a").wait().await;
        store.append("sess_a", &Record::Message(user("two")));
        store.close("sess_a").wait().await;
        let lines = log_lines(dir.path(), "sess_a");
        assert_eq!(lines.len(), 3, "{lines:#?}");
        assert!(lines.iter().all(|line| !line.is_empty()), "{lines:#?}");
    }

    /// A data folder removed while lathe runs (the user clearing their
    /// history; a test's temporary home at its end) is not made again by a
    /// session created or saved after: the store made it at its start.
    #[tokio::test]
    async fn a_removed_data_folder_is_not_made_again() {
        let parent = tempfile::tempdir().unwrap();
        let data = parent.path().join("data");
        let store = Store::open(&data, Retention::default(), ignore()).unwrap();
        store.create(&meta("sess_a")).await.unwrap();
        std::fs::remove_dir_all(&data).unwrap();
        assert!(store.create(&meta("sess_b")).await.is_err());
        store.append("sess_a", &Record::Message(user("late")));
        store.close("sess_a").wait().await;
        assert!(!data.exists(), "made again: {:?}", std::fs::read_dir(&data).map(|d| d.count()));
    }

    #[tokio::test]
    async fn round_trip_with_a_damaged_tail() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), Retention::default(), ignore()).unwrap();
        store.create(&meta("sess_a")).await.unwrap();
        let update = serde_json::json!({"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"sess_a"}});
        store.append("sess_a", &Record::Update(update.to_string()));
        store.append("sess_a", &Record::Message(user("one")));
        store.append("sess_a", &Record::Reset(vec![user("summary")]));
        store.append("sess_a", &Record::Message(user("two")));
        store.close("sess_a").wait().await;
        // A torn last line, as a kill mid-write leaves it.
        let log = dir.path().join("sessions/sess_a/log.jsonl");
        let mut file = std::fs::OpenOptions::new().append(true).open(&log).unwrap();
        file.write_all(b"{\"lathe\":\"message\",\"mess").unwrap();
        drop(file);

        let loaded = store.load("sess_a").unwrap();
        assert_eq!(loaded.meta, meta("sess_a").clone_with_times(&loaded.meta));
        assert_eq!(loaded.records.len(), 4);
        assert_eq!(loaded.records[0], Record::Update(update.to_string()));
        assert_eq!(loaded.transcript(), vec![user("summary"), user("two")]);

        // The next process appends after the torn line, not onto it.
        store.append("sess_a", &Record::Message(user("three")));
        store.written().wait().await;
        let loaded = store.load("sess_a").unwrap();
        assert_eq!(loaded.transcript(), vec![user("summary"), user("two"), user("three")]);
    }

    #[tokio::test]
    async fn list_and_delete() {
        let dir = tempfile::tempdir().unwrap();
        let (failures, seen) = recording();
        let store = Store::open(dir.path(), Retention::default(), failures).unwrap();
        store.create(&meta("sess_1")).await.unwrap();
        store.create(&meta("sess_2")).await.unwrap();
        store.append("sess_2", &Record::Message(user("x")));
        let ids: Vec<String> = store.list(None, None, 10).sessions.into_iter().map(|m| m.session_id).collect();
        assert_eq!(ids, ["sess_1", "sess_2"]);
        store.delete("sess_2").await.unwrap();
        store.delete("sess_2").await.unwrap();
        store.delete("never-existed").await.unwrap();
        // A record of a turn still ending after the delete neither recreates
        // the session nor counts as a failure.
        store.append("sess_2", &Record::Message(user("late")));
        store.written().wait().await;
        assert!(seen.lock().unwrap().is_empty());
        assert_eq!(store.list(None, None, 10).sessions.len(), 1);
        assert!(matches!(store.load("sess_2"), Err(StoreError::NotFound(_))));
        assert!(matches!(store.load("../etc"), Err(StoreError::NotFound(_))), "ids never escape the store");
    }

    /// Issue 11 defect 14: directories 0700, files 0600, an older 0755
    /// sessions directory and 0644 log tightened.
    #[tokio::test]
    async fn session_files_are_private() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        let old = data.join("sessions/sess_old");
        std::fs::create_dir_all(&old).unwrap();
        std::fs::write(old.join(LOG_FILE), b"").unwrap();
        if !crate::platform::testing::set_mode(&data.join("sessions"), 0o755) {
            return;
        }
        assert!(crate::platform::testing::set_mode(&old.join(LOG_FILE), 0o644));

        let store = Store::open(&data, Retention::default(), ignore()).unwrap();
        store.create(&meta("sess_new")).await.unwrap();
        store.append("sess_new", &Record::Message(user("secret")));
        store.append("sess_old", &Record::Message(user("secret")));
        store.save_meta_later(meta("sess_new"));
        store.written().wait().await;
        assert_eq!(mode(&data.join("sessions")), 0o700);
        assert_eq!(mode(&data.join("sessions/sess_new")), 0o700);
        assert_eq!(mode(&data.join("sessions/sess_new").join(LOG_FILE)), 0o600);
        assert_eq!(mode(&data.join("sessions/sess_new").join(META_FILE)), 0o600);
        assert_eq!(mode(&old.join(LOG_FILE)), 0o600);

        let fresh = dir.path().join("fresh/lathe");
        Store::open(&fresh, Retention::default(), ignore()).unwrap();
        assert_eq!(mode(&fresh), 0o700, "a data directory lathe creates");
    }

    /// Issue 11 defect 15: a sessions directory that exists but takes no
    /// writes (here, one in procfs, which refuses root too) fails to open.
    #[test]
    fn a_directory_that_takes_no_writes_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        if !crate::platform::testing::symlink("/proc/self/fdinfo", dir.path().join("sessions")) {
            return;
        }
        let err = Store::open(dir.path(), Retention::default(), ignore()).unwrap_err();
        assert!(err.to_string().starts_with("cannot write in"), "{err}");
    }

    /// Issue 11 defect 12: a batch that fails part-way is cut off again, so
    /// the next one is read back whole; the failure is reported once.
    #[tokio::test]
    async fn a_failed_append_is_cut_off_and_reported_once() {
        let dir = tempfile::tempdir().unwrap();
        let disk = TestDisk::with_room();
        let (failures, seen) = recording();
        let store = Store::open_on(dir.path(), Retention::default(), disk.clone(), failures).unwrap();
        store.create(&meta("sess_f")).await.unwrap();
        store.append("sess_f", &Record::Message(user("one")));
        store.written().wait().await;

        // The disk fills up in the middle of a record, and stays full for another.
        disk.budget.store(10, Ordering::SeqCst);
        store.append("sess_f", &Record::Message(user("lost")));
        store.written().wait().await;
        store.append("sess_f", &Record::Message(user("lost too")));
        store.written().wait().await;
        // Space again.
        disk.budget.store(u64::MAX, Ordering::SeqCst);
        store.append("sess_f", &Record::Message(user("two")));
        store.written().wait().await;

        for line in log_lines(dir.path(), "sess_f") {
            assert!(serde_json::from_str::<Value>(&line).is_ok(), "a damaged line: {line}");
        }
        assert_eq!(store.load("sess_f").unwrap().transcript(), vec![user("one"), user("two")]);
        let seen = seen.lock().unwrap();
        assert_eq!(seen.len(), 1, "{seen:?}");
        assert_eq!(seen[0].session_id, "sess_f");
        assert!(seen[0].error.contains("No space left"), "{}", seen[0].error);
    }

    /// When the torn tail cannot even be cut off, the next batch starts on a
    /// line of its own: the torn line is skipped on load, the next kept.
    #[tokio::test]
    async fn a_tail_that_cannot_be_cut_starts_a_new_line() {
        let dir = tempfile::tempdir().unwrap();
        let disk = TestDisk::with_room();
        let store = Store::open_on(dir.path(), Retention::default(), disk.clone(), ignore()).unwrap();
        store.create(&meta("sess_t")).await.unwrap();
        store.append("sess_t", &Record::Message(user("one")));
        store.written().wait().await;
        disk.budget.store(10, Ordering::SeqCst);
        disk.truncate_fails.store(true, Ordering::SeqCst);
        store.append("sess_t", &Record::Message(user("lost")));
        store.written().wait().await;
        disk.budget.store(u64::MAX, Ordering::SeqCst);
        store.append("sess_t", &Record::Message(user("two")));
        store.written().wait().await;
        assert_eq!(log_lines(dir.path(), "sess_t").len(), 4, "version, one, the torn fragment, two");
        assert_eq!(store.load("sess_t").unwrap().transcript(), vec![user("one"), user("two")]);
    }

    /// Issue 11 defect 4: closing a session closes its log; deleting too.
    #[tokio::test]
    async fn close_and_delete_release_the_log() {
        let dir = tempfile::tempdir().unwrap();
        let disk = TestDisk::with_room();
        let store = Store::open_on(dir.path(), Retention::default(), disk.clone(), ignore()).unwrap();
        for id in ["sess_1", "sess_2", "sess_3"] {
            store.create(&meta(id)).await.unwrap();
            store.append(id, &Record::Message(user("x")));
        }
        store.written().wait().await;
        assert_eq!(disk.open.load(Ordering::SeqCst), 3);
        store.append("sess_1", &Record::Message(user("y")));
        store.close("sess_1").wait().await;
        assert_eq!(disk.open.load(Ordering::SeqCst), 2);
        assert_eq!(store.load("sess_1").unwrap().transcript(), vec![user("x"), user("y")], "written before closing");
        store.delete("sess_2").await.unwrap();
        assert_eq!(disk.open.load(Ordering::SeqCst), 1);
    }

    /// Sessions left open hold at most `capacity` logs (the least recently
    /// written goes first), and none longer than `idle` after its last write.
    #[test]
    fn open_logs_are_bounded_and_idle_ones_closed() {
        let dir = tempfile::tempdir().unwrap();
        let disk = TestDisk::with_room();
        let idle = Duration::from_secs(30);
        let mut logs = OpenLogs::new(2, idle);
        let start = Instant::now();
        let at = |secs: u64| start + Duration::from_secs(secs);
        let session = |name: &str| {
            let path = dir.path().join(name);
            std::fs::create_dir_all(&path).unwrap();
            path
        };
        let (a, b, c) = (session("a"), session("b"), session("c"));
        logs.get(&a, at(0), |p| disk.open_log(p)).unwrap();
        logs.get(&b, at(1), |p| disk.open_log(p)).unwrap();
        logs.get(&a, at(2), |p| disk.open_log(p)).unwrap();
        logs.get(&c, at(3), |p| disk.open_log(p)).unwrap();
        assert_eq!(disk.open.load(Ordering::SeqCst), 2);
        let open: Vec<&Path> = logs.logs.iter().map(|log| log.dir.as_path()).collect();
        assert!(open.contains(&a.as_path()) && open.contains(&c.as_path()), "b was written longest ago");
        assert_eq!(logs.next_idle(), Some(at(2) + idle));
        logs.close_idle(at(2) + idle);
        assert_eq!(logs.logs.len(), 1, "a went idle");
        logs.close_idle(at(3) + idle);
        assert_eq!(logs.logs.len(), 0);
        assert_eq!(logs.next_idle(), None);
        assert_eq!(disk.open.load(Ordering::SeqCst), 0);
    }

    #[test]
    fn data_dir_lookup() {
        if !crate::platform::testing::xdg_folders() {
            return;
        }
        let env = |name: &str| match name {
            "HOME" => Some("/home/u".to_owned()),
            _ => None,
        };
        assert_eq!(default_data_dir(None, &env), Some(PathBuf::from("/home/u/.local/share/lathe")));
        let xdg = |name: &str| (name == "XDG_DATA_HOME").then(|| "/xdg".to_owned());
        assert_eq!(default_data_dir(None, &xdg), Some(PathBuf::from("/xdg/lathe")));
        let explicit = |name: &str| (name == "LATHE_DATA_DIR").then(|| "/d".to_owned());
        assert_eq!(default_data_dir(None, &explicit), Some(PathBuf::from("/d")));
        assert_eq!(default_data_dir(Some(Path::new("/cli")), &explicit), Some(PathBuf::from("/cli")));
    }

    fn chunk(kind: ChunkKind, id: Option<&str>, text: &str) -> Record {
        Record::Chunk(Chunk { kind, message_id: id.map(Arc::from), text: text.to_owned(), session: None })
    }

    fn answer(text: &str, reasoning: &str) -> Message {
        Message::Assistant {
            text: text.into(),
            reasoning: reasoning.into(),
            reasoning_field: None,
            reasoning_details: None,
            tool_calls: vec![],
            interrupted: false,
        }
    }

    fn log_text(dir: &Path, id: &str) -> String {
        std::fs::read_to_string(dir.join("sessions").join(id).join(LOG_FILE)).unwrap()
    }

    /// Issue 16: consecutive chunks of one message become one record, the
    /// transcript message refers to the streamed text instead of repeating
    /// it, and reading gives back the same text, in the same order.
    #[tokio::test]
    async fn chunks_are_merged_and_the_answer_is_stored_once() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), Retention::default(), ignore()).unwrap();
        store.create(&meta("sess_c")).await.unwrap();
        store.append("sess_c", &chunk(ChunkKind::User, None, "question"));
        store.append("sess_c", &Record::Message(user("question")));
        let mut answer_text = String::new();
        for n in 0..1000 {
            store.append("sess_c", &chunk(ChunkKind::Thought, Some("thought_1"), "hm "));
            let _ = n;
        }
        for n in 0..1000 {
            let piece = format!("t{n} \"q\" ü\n");
            answer_text.push_str(&piece);
            store.append("sess_c", &chunk(ChunkKind::Agent, Some("msg_1"), &piece));
        }
        let tool = r#"{"jsonrpc":"2.0","method":"session/update","params":{"update":{"sessionUpdate":"tool_call"}}}"#;
        store.append("sess_c", &Record::Update(tool.to_owned()));
        store.append("sess_c", &Record::Message(answer(&answer_text, &"hm ".repeat(1000))));
        store.written().wait().await;

        let text = log_text(dir.path(), "sess_c");
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], r#"{"lathe":"journal","version":2}"#, "a new log starts with its version");
        assert_eq!(lines.len(), 7, "version, user chunk, user message, thought, answer, tool call, message:\n{text}");
        assert_eq!(text.matches("t999").count(), 1, "the answer is stored once");
        // The texts as JSON strings (quotes and newlines escaped), plus a few short lines.
        let escaped = serde_json::to_string(&answer_text).unwrap().len() + "hm ".repeat(1000).len();
        assert!(text.len() < escaped + 600, "{} bytes for {escaped} of text", text.len());

        let loaded = store.load("sess_c").unwrap();
        assert_eq!(
            loaded.records,
            vec![
                chunk(ChunkKind::User, None, "question"),
                Record::Message(user("question")),
                chunk(ChunkKind::Thought, Some("thought_1"), &"hm ".repeat(1000)),
                chunk(ChunkKind::Agent, Some("msg_1"), &answer_text),
                Record::Update(tool.to_owned()),
                Record::Message(answer(&answer_text, &"hm ".repeat(1000))),
            ]
        );
    }

    /// Issue 27: sub-agents streaming at once (their chunks interleaved)
    /// are merged too, one record per message of each, written before the
    /// next other record; the answer after them still refers to its own
    /// streamed text, which theirs never stand for.
    #[tokio::test]
    async fn interleaved_subagent_streams_are_merged_per_session() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), Retention::default(), ignore()).unwrap();
        store.create(&meta("sess_s")).await.unwrap();
        let of = |session: &str, id: &str, text: &str| {
            Record::Chunk(Chunk {
                kind: ChunkKind::Agent,
                message_id: Some(Arc::from(id)),
                text: text.to_owned(),
                session: Some(Arc::from(session)),
            })
        };
        let mut texts = [String::new(), String::new(), String::new(), String::new()];
        for n in 0..500 {
            for (k, text) in texts.iter_mut().enumerate() {
                let piece = format!("t{n} ");
                text.push_str(&piece);
                store.append("sess_s", &of(&format!("sess_s.call_{k}"), "msg_c", &piece));
            }
        }
        let tool = r#"{"jsonrpc":"2.0","method":"session/update","params":{"update":{"sessionUpdate":"tool_call"}}}"#;
        store.append("sess_s", &Record::Update(tool.to_owned()));
        store.append("sess_s", &of("sess_s.call_0", "msg_d", "after"));
        store.append("sess_s", &chunk(ChunkKind::Agent, Some("msg_p"), "t0 "));
        store.append("sess_s", &Record::Message(answer("t0 ", "")));
        store.written().wait().await;

        let text = log_text(dir.path(), "sess_s");
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 9, "version, 4 merged streams, tool call, a 5th, the answer and its message:\n{text}");
        assert!(lines[1].starts_with(r#"{"lathe":"subagent_chunk","session":"sess_s.call_0","kind":"agent""#));
        assert!(text.contains(r#""text_of":"msg_p""#), "{text}");
        let loaded = store.load("sess_s").unwrap();
        let mut expected: Vec<Record> =
            texts.iter().enumerate().map(|(k, text)| of(&format!("sess_s.call_{k}"), "msg_c", text)).collect();
        expected.push(Record::Update(tool.to_owned()));
        expected.push(of("sess_s.call_0", "msg_d", "after"));
        expected.push(chunk(ChunkKind::Agent, Some("msg_p"), "t0 "));
        expected.push(Record::Message(answer("t0 ", "")));
        assert_eq!(loaded.records, expected);
    }

    /// A message streamed for longer than the flush interval is written in
    /// pieces (a kill loses at most that much); they read back as one text.
    #[tokio::test]
    async fn a_long_message_is_written_as_it_streams() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), Retention::default(), ignore()).unwrap();
        store.create(&meta("sess_l")).await.unwrap();
        store.append("sess_l", &chunk(ChunkKind::Agent, Some("msg_1"), "first "));
        // Nothing asks for it: the writer (a thread of its own, on real
        // time) writes it once it has been held long enough; the file is the
        // only sign.
        let log = dir.path().join("sessions/sess_l").join(LOG_FILE);
        poll_until("a held chunk is written", Duration::from_secs(20), || {
            std::fs::read_to_string(&log).is_ok_and(|text| text.contains("first"))
        })
        .await;
        store.append("sess_l", &chunk(ChunkKind::Agent, Some("msg_1"), "second"));
        store.append("sess_l", &Record::Message(answer("first second", "")));
        store.written().wait().await;
        let text = log_text(dir.path(), "sess_l");
        assert!(text.contains(r#"{"lathe":"more","text":"second"}"#), "{text}");
        let loaded = store.load("sess_l").unwrap();
        let texts: Vec<&str> = loaded
            .records
            .iter()
            .filter_map(|r| match r {
                Record::Chunk(c) => Some(c.text.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(texts, ["first ", "second"]);
        assert_eq!(loaded.transcript(), vec![answer("first second", "")]);
    }

    /// After a failed append is cut off, the answer is not written as a
    /// reference to streamed text that is no longer on disk.
    #[tokio::test]
    async fn a_failed_chunk_write_is_not_referred_to() {
        let dir = tempfile::tempdir().unwrap();
        let disk = TestDisk::with_room();
        let store = Store::open_on(dir.path(), Retention::default(), disk.clone(), ignore()).unwrap();
        store.create(&meta("sess_r")).await.unwrap();
        store.append("sess_r", &chunk(ChunkKind::Agent, Some("msg_1"), "one "));
        store.written().wait().await;
        disk.budget.store(5, Ordering::SeqCst);
        store.append("sess_r", &chunk(ChunkKind::Agent, Some("msg_1"), "two "));
        store.written().wait().await;
        disk.budget.store(u64::MAX, Ordering::SeqCst);
        store.append("sess_r", &Record::Message(answer("one two ", "")));
        store.written().wait().await;
        assert_eq!(store.load("sess_r").unwrap().transcript(), vec![answer("one two ", "")]);
    }

    fn summary_ids(page: &ListPage) -> Vec<&str> {
        page.sessions.iter().map(|s| s.session_id.as_str()).collect()
    }

    fn meta_at(id: &str, cwd: &str, updated_at: &str) -> SessionMeta {
        SessionMeta { cwd: PathBuf::from(cwd), updated_at: updated_at.to_owned(), ..meta(id) }
    }

    /// Pages follow each other by cursor (the last session shown), most
    /// recent first, even when a session is updated between two pages; the
    /// cwd filter applies before paging.
    #[tokio::test]
    async fn lists_page_by_cursor_and_filter_by_cwd() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), Retention::default(), ignore()).unwrap();
        for n in 0..7 {
            let cwd = if n % 2 == 0 { "/even" } else { "/odd" };
            store.create(&meta_at(&format!("sess_{n}"), cwd, &format!("2026-01-0{}T00:00:00Z", n + 1))).await.unwrap();
        }
        store.written().wait().await;
        let first = store.list(None, None, 3);
        assert_eq!(summary_ids(&first), ["sess_6", "sess_5", "sess_4"]);
        // sess_0 moves to the top meanwhile: the next page neither repeats nor skips.
        store.save_meta_later(meta_at("sess_0", "/even", "2026-02-01T00:00:00Z"));
        store.written().wait().await;
        let second = store.list(None, first.next.as_ref(), 3);
        assert_eq!(summary_ids(&second), ["sess_3", "sess_2", "sess_1"], "sess_0 is now first, before the cursor");
        assert!(second.next.is_none());
        assert_eq!(summary_ids(&store.list(None, None, 2)), ["sess_0", "sess_6"]);
        let even = store.list(Some(Path::new("/even")), None, 10);
        assert_eq!(summary_ids(&even), ["sess_0", "sess_6", "sess_4", "sess_2"]);
        assert!(even.next.is_none());
    }

    /// Issue 16: the index is a cache of the folders. Missing, unreadable or
    /// stale (a crash before it was saved, another process, a folder removed
    /// by hand), it is rebuilt from them when the store opens.
    #[tokio::test]
    async fn the_index_is_rebuilt_from_the_folders_when_missing_or_stale() {
        let dir = tempfile::tempdir().unwrap();
        let index_file = dir.path().join(index::INDEX_FILE);
        let ids = |store: &Store| -> Vec<(String, Option<String>)> {
            store.list(None, None, 100).sessions.into_iter().map(|s| (s.session_id, s.title)).collect()
        };
        {
            let store = Store::open(dir.path(), Retention::default(), ignore()).unwrap();
            for (n, id) in ["sess_a", "sess_b", "sess_c"].iter().enumerate() {
                store.create(&meta_at(id, "/p", &format!("2026-01-0{}T00:00:00Z", n + 1))).await.unwrap();
            }
            store.written().wait().await;
        }
        // The writer thread saves the index when the store goes away; the file is the only sign.
        poll_until("the index is saved", Duration::from_secs(20), || index_file.exists()).await;
        let saved = std::fs::read(&index_file).unwrap();
        // Stale: behind the index's back, a title changes, a folder goes, one appears.
        let sessions = dir.path().join("sessions");
        let changed = SessionMeta { title: Some("renamed".into()), ..meta_at("sess_a", "/p", "2026-01-01T00:00:00Z") };
        write_meta(&sessions.join("sess_a"), &changed).unwrap();
        std::fs::remove_dir_all(sessions.join("sess_b")).unwrap();
        create_private_dir(&sessions.join("sess_d")).unwrap();
        write_meta(&sessions.join("sess_d"), &meta_at("sess_d", "/p", "2026-01-04T00:00:00Z")).unwrap();
        let expected = vec![
            ("sess_d".to_owned(), Some("t".to_owned())),
            ("sess_c".to_owned(), Some("t".to_owned())),
            ("sess_a".to_owned(), Some("renamed".to_owned())),
        ];
        let store = Store::open(dir.path(), Retention::default(), ignore()).unwrap();
        assert_eq!(ids(&store), expected, "a stale index");
        drop(store);
        // Missing.
        std::fs::remove_file(&index_file).ok();
        let store = Store::open(dir.path(), Retention::default(), ignore()).unwrap();
        assert_eq!(ids(&store), expected, "no index");
        drop(store);
        // Torn (a crash cannot do this, but a full disk or a person can).
        std::fs::write(&index_file, &saved[..saved.len() / 2]).unwrap();
        let store = Store::open(dir.path(), Retention::default(), ignore()).unwrap();
        assert_eq!(ids(&store), expected, "a damaged index");
        // A session another process creates while this one runs.
        create_private_dir(&sessions.join("sess_e")).unwrap();
        write_meta(&sessions.join("sess_e"), &meta_at("sess_e", "/p", "2026-01-05T00:00:00Z")).unwrap();
        // The directory's mtime is not trusted right after a change: wait out the racy window.
        std::thread::sleep(Duration::from_millis(60));
        assert_eq!(ids(&store)[0].0, "sess_e", "a session created by another process");
    }

    /// `[sessions] keep_days`: sessions not updated for longer are deleted
    /// when the store opens, before any list answers.
    #[tokio::test]
    async fn old_sessions_are_pruned_when_the_store_opens() {
        let dir = tempfile::tempdir().unwrap();
        let sessions = dir.path().join("sessions");
        let old = humantime::format_rfc3339_seconds(SystemTime::now() - Duration::from_secs(40 * 86_400)).to_string();
        let recent =
            humantime::format_rfc3339_seconds(SystemTime::now() - Duration::from_secs(10 * 86_400)).to_string();
        for (id, at) in [("sess_old", &old), ("sess_recent", &recent), ("sess_now", &now_rfc3339())] {
            create_private_dir(&sessions.join(id)).unwrap();
            write_meta(&sessions.join(id), &meta_at(id, "/p", at)).unwrap();
        }
        let store = Store::open(dir.path(), Retention { keep_days: None }, ignore()).unwrap();
        assert_eq!(store.list(None, None, 10).sessions.len(), 3, "kept by default");
        drop(store);
        let store = Store::open(dir.path(), Retention { keep_days: Some(30) }, ignore()).unwrap();
        let ids: Vec<String> = store.list(None, None, 10).sessions.into_iter().map(|s| s.session_id).collect();
        assert_eq!(ids, ["sess_now", "sess_recent"]);
        assert!(!sessions.join("sess_old").exists(), "its folder is gone");
        assert!(matches!(store.load("sess_old"), Err(StoreError::NotFound(_))));
    }

    impl SessionMeta {
        fn clone_with_times(&self, other: &SessionMeta) -> SessionMeta {
            SessionMeta { created_at: other.created_at.clone(), updated_at: other.updated_at.clone(), ..self.clone() }
        }
    }
}
