//! Sessions on disk: one directory per session under the data directory,
//! holding `meta.json` (id, cwd, title, timestamps, model, mode) and
//! `log.jsonl`, an append-only log of everything that happened, in order:
//! each `session/update` exactly as the editor received it, and each change
//! to the model transcript.
//!
//! Why JSON Lines and not SQLite: the log is append-only and read back whole,
//! in order, which is exactly what a line-per-record file does, with no
//! dependency, a format a person can read, and a simple failure mode. A crash
//! or kill can only tear the last line; a torn or unreadable line is skipped
//! with a warning on load and the rest of the log is kept.
//!
//! Appends go through one background writer thread, which batches whatever is
//! queued and flushes after each batch, so a turn never waits on the disk and
//! a kill loses at most the records still in the queue. `meta.json` is
//! replaced atomically (temporary file, then rename).
//!
//! This module knows the record shapes (opaque update JSON, [`Message`]s) but
//! nothing of ACP semantics or the turn loop.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::model::Message;

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

/// One line of a session log.
#[derive(Debug, Clone, PartialEq)]
pub enum Record {
    /// A `session/update` notification, as sent (the whole JSON-RPC message).
    Update(Value),
    /// A message appended to the model transcript.
    Message(Message),
    /// The transcript was replaced (compaction, `/clear`) by these messages.
    Reset(Vec<Message>),
}

#[derive(Serialize, Deserialize)]
#[serde(tag = "lathe", rename_all = "snake_case")]
enum TranscriptLine {
    Message { message: Message },
    Reset { messages: Vec<Message> },
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
                Record::Update(_) => {}
            }
        }
        messages
    }
}

/// The sessions directory and its writer thread.
pub struct Store {
    root: PathBuf,
    writer: mpsc::Sender<WriterCommand>,
}

enum WriterCommand {
    Append { dir: PathBuf, line: Vec<u8> },
    SaveMeta(Box<SessionMeta>, PathBuf),
    Close { dir: PathBuf },
    Flush(mpsc::Sender<()>),
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store").field("root", &self.root).finish_non_exhaustive()
    }
}

/// The data directory: `--data-dir`, else `LATHE_DATA_DIR`, else
/// `$XDG_DATA_HOME/lathe` (`~/.local/share/lathe`).
pub fn default_data_dir(cli: Option<&Path>, env: &dyn Fn(&str) -> Option<String>) -> Option<PathBuf> {
    if let Some(path) = cli {
        return Some(path.to_path_buf());
    }
    if let Some(path) = env("LATHE_DATA_DIR").filter(|p| !p.is_empty()) {
        return Some(PathBuf::from(path));
    }
    let data_home = env("XDG_DATA_HOME")
        .filter(|p| !p.is_empty())
        .map(PathBuf::from)
        .or_else(|| env("HOME").filter(|h| !h.is_empty()).map(|h| Path::new(&h).join(".local").join("share")))?;
    Some(data_home.join("lathe"))
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

impl Store {
    /// Opens (creating if needed) the store under `data_dir/sessions`.
    pub fn open(data_dir: &Path) -> Result<Store, StoreError> {
        let root = data_dir.join("sessions");
        std::fs::create_dir_all(&root).map_err(|source| StoreError::Io {
            action: "cannot create the sessions directory",
            path: root.clone(),
            source,
        })?;
        let (writer, commands) = mpsc::channel();
        std::thread::Builder::new().name("lathe-store".to_owned()).spawn(move || run_writer(&commands)).map_err(
            |source| StoreError::Io { action: "cannot start the store writer for", path: root.clone(), source },
        )?;
        Ok(Store { root, writer })
    }

    fn dir(&self, id: &str) -> Result<PathBuf, StoreError> {
        if valid_id(id) { Ok(self.root.join(id)) } else { Err(StoreError::NotFound(id.to_owned())) }
    }

    /// Creates a session's directory and writes its metadata.
    pub fn create(&self, meta: &SessionMeta) -> Result<(), StoreError> {
        let dir = self.dir(&meta.session_id)?;
        std::fs::create_dir_all(&dir).map_err(|source| StoreError::Io {
            action: "cannot create the session directory",
            path: dir.clone(),
            source,
        })?;
        self.save_meta(meta)
    }

    /// Replaces a session's metadata atomically.
    pub fn save_meta(&self, meta: &SessionMeta) -> Result<(), StoreError> {
        let dir = self.dir(&meta.session_id)?;
        let path = dir.join(META_FILE);
        let io = |action: &'static str| {
            let path = path.clone();
            move |source| StoreError::Io { action, path, source }
        };
        let mut file = tempfile::NamedTempFile::new_in(&dir).map_err(io("cannot write"))?;
        serde_json::to_writer_pretty(&mut file, meta).map_err(|err| StoreError::Io {
            action: "cannot write",
            path: path.clone(),
            source: err.into(),
        })?;
        file.persist(&path).map_err(|err| StoreError::Io {
            action: "cannot replace",
            path: path.clone(),
            source: err.error,
        })?;
        Ok(())
    }

    /// Queues records for appending to a session's log.
    pub fn append(&self, id: &str, record: &Record) {
        let Ok(dir) = self.dir(id) else { return };
        let line = match record {
            Record::Update(value) => serde_json::to_vec(value),
            Record::Message(message) => serde_json::to_vec(&TranscriptLine::Message { message: message.clone() }),
            Record::Reset(messages) => serde_json::to_vec(&TranscriptLine::Reset { messages: messages.clone() }),
        };
        match line {
            Ok(line) => self.append_line(dir, line),
            Err(err) => tracing::error!(%err, "cannot serialise a session record"),
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
        let _ = self.writer.send(WriterCommand::Append { dir, line });
    }

    /// Queues a metadata update for the writer thread: callers (a turn
    /// answering its prompt, say) never wait on the disk.
    pub fn save_meta_later(&self, meta: SessionMeta) {
        if let Ok(dir) = self.dir(&meta.session_id) {
            let _ = self.writer.send(WriterCommand::SaveMeta(Box::new(meta), dir));
        }
    }

    /// Waits (at most `timeout`) until everything queued so far is on disk.
    pub fn flush(&self, timeout: Duration) {
        let (done, wait) = mpsc::channel();
        if self.writer.send(WriterCommand::Flush(done)).is_ok() && wait.recv_timeout(timeout).is_err() {
            tracing::warn!("the session store did not finish writing in time");
        }
    }

    /// Reads a session's metadata only.
    pub fn load_meta(&self, id: &str) -> Result<SessionMeta, StoreError> {
        let path = self.dir(id)?.join(META_FILE);
        let text = match std::fs::read_to_string(&path) {
            Ok(text) => text,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Err(StoreError::NotFound(id.to_owned())),
            Err(source) => return Err(StoreError::Io { action: "cannot read", path, source }),
        };
        serde_json::from_str(&text).map_err(|err| StoreError::Corrupt { path, message: err.to_string() })
    }

    /// Loads a session: metadata and every readable log record.
    pub fn load(&self, id: &str) -> Result<StoredSession, StoreError> {
        let dir = self.dir(id)?;
        let meta = self.load_meta(id)?;
        // Everything queued for this session must be on disk before reading it back.
        self.flush(Duration::from_secs(2));
        let log_path = dir.join(LOG_FILE);
        let records = match File::open(&log_path) {
            Ok(file) => read_log(&log_path, file),
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(source) => return Err(StoreError::Io { action: "cannot read", path: log_path, source }),
        };
        Ok(StoredSession { meta, records })
    }

    /// Every stored session's metadata (unreadable ones are skipped with a warning).
    pub fn list(&self) -> Vec<SessionMeta> {
        let Ok(entries) = std::fs::read_dir(&self.root) else { return Vec::new() };
        let mut sessions = Vec::new();
        for entry in entries.flatten() {
            let path = entry.path().join(META_FILE);
            match std::fs::read_to_string(&path) {
                Ok(text) => match serde_json::from_str::<SessionMeta>(&text) {
                    Ok(meta) => sessions.push(meta),
                    Err(err) => tracing::warn!(path = %path.display(), %err, "skipping an unreadable session"),
                },
                Err(err) if err.kind() == std::io::ErrorKind::NotFound => {}
                Err(err) => tracing::warn!(path = %path.display(), %err, "skipping an unreadable session"),
            }
        }
        sessions
    }

    /// Deletes a session from disk; deleting a missing session succeeds.
    pub fn delete(&self, id: &str) -> Result<(), StoreError> {
        let Ok(dir) = self.dir(id) else { return Ok(()) };
        let (done, wait) = mpsc::channel();
        let _ = self.writer.send(WriterCommand::Close { dir: dir.clone() });
        // Let the writer drop its handle before the directory goes.
        if self.writer.send(WriterCommand::Flush(done)).is_ok() {
            let _ = wait.recv_timeout(Duration::from_secs(2));
        }
        match std::fs::remove_dir_all(&dir) {
            Ok(()) => Ok(()),
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(source) => Err(StoreError::Io { action: "cannot delete", path: dir, source }),
        }
    }
}

fn read_log(path: &Path, file: File) -> Vec<Record> {
    let mut records = Vec::new();
    for (number, line) in BufReader::new(file).split(b'\n').enumerate() {
        let line = match line {
            Ok(line) => line,
            Err(err) => {
                tracing::warn!(path = %path.display(), %err, "stopped reading a session log");
                break;
            }
        };
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let value: Value = match serde_json::from_slice(&line) {
            Ok(value) => value,
            Err(err) => {
                // A torn last line after a crash, or damage: keep everything else.
                tracing::warn!(path = %path.display(), line = number + 1, %err, "skipping a damaged session log line");
                continue;
            }
        };
        if value.get("method").is_some() {
            records.push(Record::Update(value));
            continue;
        }
        match serde_json::from_value::<TranscriptLine>(value) {
            Ok(TranscriptLine::Message { message }) => records.push(Record::Message(message)),
            Ok(TranscriptLine::Reset { messages }) => records.push(Record::Reset(messages)),
            Err(err) => {
                tracing::warn!(path = %path.display(), line = number + 1, %err, "skipping an unknown session log line")
            }
        }
    }
    records
}

fn write_meta(dir: &Path, meta: &SessionMeta) -> Result<(), StoreError> {
    let path = dir.join(META_FILE);
    let io = |action: &'static str| {
        let path = path.clone();
        move |source| StoreError::Io { action, path, source }
    };
    let bytes = serde_json::to_vec_pretty(meta).map_err(|err| io("cannot write")(err.into()))?;
    let mut file = tempfile::NamedTempFile::new_in(dir).map_err(io("cannot write"))?;
    file.write_all(&bytes).map_err(io("cannot write"))?;
    file.persist(&path).map_err(|err| io("cannot replace")(err.error))?;
    Ok(())
}

/// The writer thread. Whatever is queued is taken in one go: lines for the
/// same log are joined and written with one system call per log, then
/// pending metadata is saved, then waiters are told.
fn run_writer(commands: &mpsc::Receiver<WriterCommand>) {
    let mut files: HashMap<PathBuf, File> = HashMap::new();
    let mut batches: Vec<(PathBuf, Vec<u8>)> = Vec::new();
    while let Ok(first) = commands.recv() {
        let mut waiting = Vec::new();
        let mut next = Some(first);
        while let Some(command) = next {
            match command {
                WriterCommand::Append { dir, line } => match batches.iter_mut().find(|(d, _)| *d == dir) {
                    Some((_, batch)) => batch.extend_from_slice(&line),
                    None => batches.push((dir, line)),
                },
                WriterCommand::SaveMeta(meta, dir) => {
                    if let Err(err) = write_meta(&dir, &meta) {
                        tracing::warn!(%err, "cannot save a session's metadata");
                    }
                }
                WriterCommand::Close { dir } => {
                    write_batches(&mut files, &mut batches);
                    files.remove(&dir);
                }
                WriterCommand::Flush(done) => waiting.push(done),
            }
            next = commands.try_recv().ok();
        }
        write_batches(&mut files, &mut batches);
        for done in waiting {
            let _ = done.send(());
        }
    }
}

fn write_batches(files: &mut HashMap<PathBuf, File>, batches: &mut Vec<(PathBuf, Vec<u8>)>) {
    for (dir, bytes) in batches.drain(..) {
        let file = match files.entry(dir) {
            std::collections::hash_map::Entry::Occupied(entry) => entry.into_mut(),
            std::collections::hash_map::Entry::Vacant(entry) => {
                match OpenOptions::new().create(true).append(true).open(entry.key().join(LOG_FILE)) {
                    Ok(file) => entry.insert(file),
                    Err(err) => {
                        tracing::warn!(path = %entry.key().display(), %err, "cannot open a session log");
                        continue;
                    }
                }
            }
        };
        // Whole lines only: a kill can tear at most the last line of a batch.
        if let Err(err) = file.write_all(&bytes) {
            tracing::warn!(%err, "cannot append to a session log");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::UserPart;

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

    #[test]
    fn round_trip_with_a_damaged_tail() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        store.create(&meta("sess_a")).unwrap();
        let update = serde_json::json!({"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"sess_a"}});
        store.append("sess_a", &Record::Update(update.clone()));
        store.append("sess_a", &Record::Message(user("one")));
        store.append("sess_a", &Record::Reset(vec![user("summary")]));
        store.append("sess_a", &Record::Message(user("two")));
        store.flush(Duration::from_secs(2));
        // A torn last line, as a kill mid-write leaves it.
        let log = dir.path().join("sessions/sess_a/log.jsonl");
        let mut file = OpenOptions::new().append(true).open(&log).unwrap();
        file.write_all(b"{\"lathe\":\"message\",\"mess").unwrap();
        drop(file);

        let loaded = store.load("sess_a").unwrap();
        assert_eq!(loaded.meta, meta("sess_a").clone_with_times(&loaded.meta));
        assert_eq!(loaded.records.len(), 4);
        assert_eq!(loaded.records[0], Record::Update(update));
        assert_eq!(loaded.transcript(), vec![user("summary"), user("two")]);
    }

    #[test]
    fn list_and_delete() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        store.create(&meta("sess_1")).unwrap();
        store.create(&meta("sess_2")).unwrap();
        store.append("sess_2", &Record::Message(user("x")));
        let mut ids: Vec<String> = store.list().into_iter().map(|m| m.session_id).collect();
        ids.sort();
        assert_eq!(ids, ["sess_1", "sess_2"]);
        store.delete("sess_2").unwrap();
        store.delete("sess_2").unwrap();
        store.delete("never-existed").unwrap();
        assert_eq!(store.list().len(), 1);
        assert!(matches!(store.load("sess_2"), Err(StoreError::NotFound(_))));
        assert!(matches!(store.load("../etc"), Err(StoreError::NotFound(_))), "ids never escape the store");
    }

    #[test]
    fn data_dir_lookup() {
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

    impl SessionMeta {
        fn clone_with_times(&self, other: &SessionMeta) -> SessionMeta {
            SessionMeta { created_at: other.created_at.clone(), updated_at: other.updated_at.clone(), ..self.clone() }
        }
    }
}
