//! The session log's line formats: how records are written and read back.
//!
//! A log is JSON Lines. Format 2 (this lathe) starts every log it creates
//! with `{"lathe":"journal","version":2}`; a log without that line is
//! format 1 (lathe before issue 16). Each line is one record, told apart by
//! its own shape, so one log may hold lines of both formats (a session saved
//! by an older lathe and continued by this one):
//!
//! - a `session/update` exactly as sent: the whole JSON-RPC line (formats 1
//!   and 2; format 1 also wrote every streamed chunk this way);
//! - `{"lathe":"chunk","kind":"agent"|"thought"|"user","id":…,"text":…}`:
//!   the text of consecutive streamed chunks of one message, merged (format
//!   2); `{"lathe":"more","text":…}` continues the chunk line just before it;
//! - `{"lathe":"subagent_chunk","session":…,"kind":…,"id":…,"text":…}`: the
//!   same for the streamed text of a sub-agent's session (`<session>.<task
//!   call id>`), never continued (an older lathe skips it with a warning);
//! - `{"lathe":"message","message":{…}}`: a message appended to the model
//!   transcript. In format 2 an assistant message whose text (or reasoning)
//!   is exactly the text of the chunk lines just written for message `id`
//!   carries `"text_of":id` (`"reasoning_of":id`) and an empty `text`
//!   instead of a second copy;
//! - `{"lathe":"reset","messages":[…]}`: the transcript was replaced.
//! - `{"lathe":"rewind","keep":n}`: the transcript was cut back to its
//!   first `n` messages (`/undo`); an older lathe skips it with a warning.
//! - `{"lathe":"steers","pending":[[part…]…]}`: the steering messages
//!   waiting for the running turn, all of them (`[]` once taken); an older
//!   lathe skips it with a warning.
//!
//! A reader skips, with a warning, a line it cannot parse (a tail torn by a
//! crash) or does not know (written by a newer lathe), and keeps the rest.

use std::borrow::Cow;
use std::io::BufRead;
use std::path::Path;
use std::sync::Arc;

use serde::de::IgnoredAny;
use serde::{Deserialize, Serialize};

use super::{Chunk, ChunkKind, Record};
use crate::model::Message;

/// The format this lathe writes.
pub const VERSION: u64 = 2;

#[derive(Serialize)]
#[serde(tag = "lathe", rename_all = "snake_case")]
enum LineOut<'a> {
    Journal {
        version: u64,
    },
    Chunk {
        kind: ChunkKind,
        #[serde(skip_serializing_if = "Option::is_none")]
        id: Option<&'a str>,
        text: &'a str,
    },
    More {
        text: &'a str,
    },
    SubagentChunk {
        session: &'a str,
        kind: ChunkKind,
        #[serde(skip_serializing_if = "Option::is_none")]
        id: Option<&'a str>,
        text: &'a str,
    },
    Message {
        message: &'a Message,
        #[serde(skip_serializing_if = "Option::is_none")]
        text_of: Option<&'a str>,
        #[serde(skip_serializing_if = "Option::is_none")]
        reasoning_of: Option<&'a str>,
    },
    Reset {
        messages: &'a [Message],
    },
    Rewind {
        keep: usize,
    },
    Steers {
        pending: &'a [Vec<crate::model::UserPart>],
    },
}

/// Every field any line may have: one pass over a line whatever its kind.
#[derive(Deserialize)]
struct LineIn<'a> {
    #[serde(borrow, default)]
    lathe: Option<Cow<'a, str>>,
    #[serde(default)]
    method: Option<IgnoredAny>,
    #[serde(default)]
    version: Option<u64>,
    #[serde(default)]
    kind: Option<ChunkKind>,
    #[serde(borrow, default)]
    id: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    session: Option<Cow<'a, str>>,
    #[serde(default)]
    text: Option<String>,
    #[serde(default)]
    message: Option<Message>,
    #[serde(default)]
    messages: Option<Vec<Message>>,
    #[serde(default)]
    keep: Option<usize>,
    #[serde(default)]
    pending: Option<Vec<Vec<crate::model::UserPart>>>,
    #[serde(borrow, default)]
    text_of: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    reasoning_of: Option<Cow<'a, str>>,
}

fn line(out: &mut Vec<u8>, value: &LineOut<'_>) {
    match serde_json::to_writer(&mut *out, value) {
        Ok(()) => out.push(b'\n'),
        // Our own types always serialise; nothing half-written is kept.
        Err(err) => tracing::error!(%err, "cannot serialise a session record"),
    }
}

/// The first line of a log lathe creates.
pub fn write_header(out: &mut Vec<u8>) {
    line(out, &LineOut::Journal { version: VERSION });
}

/// The text of the last streamed message of each kind that carries an id,
/// as far as chunk lines tell it: what a transcript message may refer to.
#[derive(Debug, Default)]
pub struct Recent {
    agent: Option<(Arc<str>, String)>,
    thought: Option<(Arc<str>, String)>,
}

impl Recent {
    /// Adds a chunk's text (a sub-agent's is no message of the transcript).
    pub fn add(&mut self, chunk: &Chunk) {
        if chunk.session.is_some() {
            return;
        }
        let slot = match chunk.kind {
            ChunkKind::Agent => &mut self.agent,
            ChunkKind::Thought => &mut self.thought,
            ChunkKind::User => return,
        };
        let Some(id) = &chunk.message_id else {
            *slot = None;
            return;
        };
        match slot {
            Some((current, text)) if current == id => text.push_str(&chunk.text),
            _ => *slot = Some((Arc::clone(id), chunk.text.clone())),
        }
    }

    /// Forgets everything (after a transcript message used it, or a failed write).
    pub fn clear(&mut self) {
        *self = Recent::default();
    }

    fn id_of(slot: &Option<(Arc<str>, String)>, text: &str) -> Option<Arc<str>> {
        slot.as_ref().filter(|(_, recent)| !text.is_empty() && recent == text).map(|(id, _)| Arc::clone(id))
    }

    fn text_of(slot: &mut Option<(Arc<str>, String)>, id: &str) -> Option<String> {
        match slot {
            Some((current, _)) if &**current == id => slot.take().map(|(_, text)| text),
            _ => None,
        }
    }
}

/// What the writer knows of one log between lines: the chunk line it could
/// continue and the text a transcript message may refer to.
#[derive(Debug, Default)]
pub struct WriterState {
    /// The last line written was a chunk line of this message.
    continues: Option<(ChunkKind, Option<Arc<str>>)>,
    /// Streamed text recently written.
    pub recent: Recent,
}

impl WriterState {
    /// Writes a merged chunk (as a continuation when the line before it is
    /// a chunk line of the same message).
    pub fn chunk(&mut self, out: &mut Vec<u8>, chunk: &Chunk) {
        if let Some(session) = &chunk.session {
            let (kind, id, text) = (chunk.kind, chunk.message_id.as_deref(), chunk.text.as_str());
            line(out, &LineOut::SubagentChunk { session, kind, id, text });
            self.continues = None;
            return;
        }
        let key = (chunk.kind, chunk.message_id.clone());
        if self.continues.as_ref() == Some(&key) {
            line(out, &LineOut::More { text: &chunk.text });
        } else {
            line(out, &LineOut::Chunk { kind: chunk.kind, id: chunk.message_id.as_deref(), text: &chunk.text });
        }
        self.continues = Some(key);
    }

    /// Writes an update line as sent (it ends with a newline).
    pub fn update(&mut self, out: &mut Vec<u8>, sent: &[u8]) {
        out.extend_from_slice(sent);
        self.continues = None;
    }

    /// Writes a transcript change; an assistant message refers to the
    /// streamed text it repeats instead of holding a second copy.
    pub fn transcript(&mut self, out: &mut Vec<u8>, record: &Record) {
        self.continues = None;
        match record {
            Record::Message(message @ Message::Assistant { text, reasoning, .. }) => {
                let text_of = Recent::id_of(&self.recent.agent, text);
                let reasoning_of = Recent::id_of(&self.recent.thought, reasoning);
                self.recent.clear();
                if text_of.is_none() && reasoning_of.is_none() {
                    return line(out, &LineOut::Message { message, text_of: None, reasoning_of: None });
                }
                let mut message = message.clone();
                if let Message::Assistant { text, reasoning, .. } = &mut message {
                    if text_of.is_some() {
                        text.clear();
                    }
                    if reasoning_of.is_some() {
                        reasoning.clear();
                    }
                }
                line(
                    out,
                    &LineOut::Message {
                        message: &message,
                        text_of: text_of.as_deref(),
                        reasoning_of: reasoning_of.as_deref(),
                    },
                );
            }
            Record::Message(message) => {
                line(out, &LineOut::Message { message, text_of: None, reasoning_of: None });
            }
            Record::Reset(messages) => {
                self.recent.clear();
                line(out, &LineOut::Reset { messages });
            }
            Record::Rewind(keep) => {
                self.recent.clear();
                line(out, &LineOut::Rewind { keep: *keep });
            }
            Record::Steers(pending) => line(out, &LineOut::Steers { pending }),
            Record::Update(sent) => {
                out.extend_from_slice(sent.as_bytes());
                out.push(b'\n');
            }
            Record::Chunk(chunk) => {
                self.recent.add(chunk);
                self.chunk(out, chunk);
            }
        }
    }

    /// A write failed and was cut off: nothing written may be referred to
    /// or continued any more.
    pub fn forget(&mut self) {
        self.continues = None;
        self.recent.clear();
    }
}

/// Reads a log, handing each record to `visit` in order.
pub fn read(path: &Path, reader: impl BufRead, visit: &mut dyn FnMut(Record)) {
    let mut continues: Option<(ChunkKind, Option<Arc<str>>)> = None;
    let mut recent = Recent::default();
    let mut newer_seen = false;
    for (number, line) in reader.split(b'\n').enumerate() {
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
        let parsed: LineIn<'_> = match serde_json::from_slice(&line) {
            Ok(parsed) => parsed,
            Err(err) => {
                // A torn last line after a crash, or damage: keep everything else.
                tracing::warn!(path = %path.display(), line = number + 1, %err, "skipping a damaged session log line");
                continue;
            }
        };
        let skip = |what: &str| {
            tracing::warn!(path = %path.display(), line = number + 1, "skipping {what} in a session log");
        };
        if parsed.method.is_some() {
            continues = None;
            // Parsed above, so it is JSON; a line is UTF-8 once it parsed.
            match String::from_utf8(line) {
                Ok(sent) => visit(Record::Update(sent)),
                Err(_) => skip("a line that is not UTF-8"),
            }
            continue;
        }
        let LineIn {
            lathe,
            version,
            kind,
            id,
            session,
            text,
            message,
            messages,
            keep,
            pending,
            text_of,
            reasoning_of,
            ..
        } = parsed;
        match (lathe.as_deref(), kind, text) {
            (Some("journal"), ..) => {
                if version.is_some_and(|v| v > VERSION) && !newer_seen {
                    newer_seen = true;
                    tracing::warn!(path = %path.display(), ?version, "a session log from a newer lathe: reading what this one knows");
                }
            }
            (Some("subagent_chunk"), Some(kind), Some(text)) if session.is_some() => {
                continues = None;
                let session = session.map(|session| Arc::from(&*session));
                visit(Record::Chunk(Chunk { kind, message_id: id.map(|id| Arc::from(&*id)), text, session }));
            }
            (Some("chunk"), Some(kind), Some(text)) => {
                let chunk = Chunk { kind, message_id: id.map(|id| Arc::from(&*id)), text, session: None };
                recent.add(&chunk);
                continues = Some((chunk.kind, chunk.message_id.clone()));
                visit(Record::Chunk(chunk));
            }
            (Some("more"), _, Some(text)) => match &continues {
                Some((kind, message_id)) => {
                    let chunk = Chunk { kind: *kind, message_id: message_id.clone(), text, session: None };
                    recent.add(&chunk);
                    visit(Record::Chunk(chunk));
                }
                None => skip("a continuation with no chunk before it"),
            },
            (Some("message"), ..) if message.is_some() => {
                continues = None;
                let Some(mut message) = message else { continue };
                if let Message::Assistant { text, reasoning, .. } = &mut message {
                    if let Some(id) = text_of {
                        match Recent::text_of(&mut recent.agent, &id) {
                            Some(streamed) => *text = streamed,
                            None => skip("an answer's text (its streamed chunks are missing)"),
                        }
                    }
                    if let Some(id) = reasoning_of {
                        match Recent::text_of(&mut recent.thought, &id) {
                            Some(streamed) => *reasoning = streamed,
                            None => skip("an answer's reasoning (its streamed chunks are missing)"),
                        }
                    }
                    recent.clear();
                }
                visit(Record::Message(message));
            }
            (Some("reset"), ..) if messages.is_some() => {
                continues = None;
                recent.clear();
                visit(Record::Reset(messages.unwrap_or_default()));
            }
            (Some("rewind"), ..) if keep.is_some() => {
                continues = None;
                recent.clear();
                visit(Record::Rewind(keep.unwrap_or_default()));
            }
            (Some("steers"), ..) if pending.is_some() => {
                continues = None;
                visit(Record::Steers(pending.unwrap_or_default()));
            }
            _ => {
                continues = None;
                skip("an unknown line");
            }
        }
    }
}
