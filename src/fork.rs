//! Forking a saved session: a new session, under a new id, whose log is a
//! copy of the source's (all of it, or up to one message), so that both go
//! on separately. The fork has its own journal and its own checkpoints
//! (none yet: `/undo` in the fork takes back its own turns only); the
//! source is only read. Both front ends use it: `session/fork` and `lathe
//! sessions fork`.
//!
//! The copy is of records, not bytes: the updates a log holds name their
//! session, so each is rewritten with the fork's id (the rest of the line
//! kept as it was); streamed text and transcript changes are written again
//! through the store, which merges them as usual. Steering messages still
//! waiting in the source stay there: they belong to its running turn.
//!
//! Cut at a message (`upto`, an id the editor saw on a message's chunks:
//! `msg_…` for an answer, `steer_…` for a steering message): the fork keeps
//! everything up to and including that message, and for an answer that
//! called tools, their results; what came after is left out.

use std::collections::HashSet;
use std::sync::Arc;

use serde_json::Value;

use crate::model::Message;
use crate::store::{ChunkKind, Record, SessionMeta, Store, StoreError, now_rfc3339};

/// Why a fork failed.
#[derive(Debug, thiserror::Error)]
pub enum ForkError {
    /// The source is not saved (or does not exist).
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The message to cut at is not in the source.
    #[error("the session has no message {0}")]
    NoSuchMessage(String),
    /// The copy could not be made.
    #[error("the fork could not be written: {0}")]
    Failed(String),
}

/// Forks session `source` of `store` into a new session `new_id` (see the
/// module doc); returns the fork's metadata once it is on disk.
pub async fn fork(
    store: &Arc<Store>,
    source: &str,
    new_id: &str,
    upto: Option<&str>,
) -> Result<SessionMeta, ForkError> {
    // What the source queued so far (its running turn's records) is on disk first.
    store.written().wait().await;
    let copying = {
        let (store, source, new_id, upto) =
            (Arc::clone(store), source.to_owned(), new_id.to_owned(), upto.map(str::to_owned));
        tokio::task::spawn_blocking(move || copy(&store, &source, &new_id, upto.as_deref()))
    };
    let (meta, records) = copying.await.map_err(|err| ForkError::Failed(err.to_string()))??;
    store.create(&meta).await?;
    for record in &records {
        store.append(new_id, record);
    }
    store.written().wait().await;
    Ok(meta)
}

/// Reads the source's log and returns the fork's metadata and records.
/// Blocking.
fn copy(
    store: &Store,
    source: &str,
    new_id: &str,
    upto: Option<&str>,
) -> Result<(SessionMeta, Vec<Record>), ForkError> {
    let mut records = Vec::new();
    let mut cut = upto.map(Cut::new);
    let meta = store.read(source, &mut |record| {
        if let Some(cut) = &mut cut
            && !cut.keeps(&record)
        {
            return;
        }
        match record {
            // Waiting steers are the source's running turn's.
            Record::Steers(_) => {}
            Record::Update(line) => records.push(Record::Update(renamed(&line, new_id))),
            other => records.push(other),
        }
    })?;
    if let (Some(cut), Some(upto)) = (&cut, upto)
        && !cut.found()
    {
        return Err(ForkError::NoSuchMessage(upto.to_owned()));
    }
    let now = now_rfc3339();
    let meta = SessionMeta { session_id: new_id.to_owned(), created_at: now.clone(), updated_at: now, ..meta };
    Ok((meta, records))
}

/// An update line with its session id replaced (a line that does not parse
/// is kept as it is: the replay sends it as it was logged).
fn renamed(line: &str, new_id: &str) -> String {
    let Ok(mut value) = serde_json::from_str::<Value>(line) else { return line.to_owned() };
    match value.pointer_mut("/params/sessionId") {
        Some(id) => *id = Value::String(new_id.to_owned()),
        None => return line.to_owned(),
    }
    serde_json::to_string(&value).unwrap_or_else(|_| line.to_owned())
}

/// Where a cut log stands.
enum Cut {
    /// The message is not reached yet.
    Looking(String),
    /// Its chunks were seen: its transcript message is next.
    Reached { user: bool },
    /// The answer is kept: the results of these calls still are.
    Answering(HashSet<String>),
    /// Everything from here on is left out.
    Done,
}

impl Cut {
    fn new(upto: &str) -> Cut {
        Cut::Looking(upto.to_owned())
    }

    fn found(&self) -> bool {
        !matches!(self, Cut::Looking(_))
    }

    /// Whether `record` is kept, moving on as the log goes.
    fn keeps(&mut self, record: &Record) -> bool {
        match self {
            Cut::Looking(upto) => {
                if let Some(user) = names(record, upto) {
                    *self = Cut::Reached { user };
                }
                true
            }
            Cut::Reached { user } => {
                match record {
                    Record::Message(Message::Assistant { tool_calls, .. }) if !*user => {
                        *self = if tool_calls.is_empty() {
                            Cut::Done
                        } else {
                            Cut::Answering(tool_calls.iter().map(|call| call.id.clone()).collect())
                        };
                    }
                    Record::Message(Message::User { .. }) if *user => *self = Cut::Done,
                    _ => {}
                }
                true
            }
            Cut::Answering(waiting) => match record {
                Record::Message(Message::Tool { tool_call_id, .. }) => {
                    waiting.remove(tool_call_id);
                    if waiting.is_empty() {
                        *self = Cut::Done;
                    }
                    true
                }
                Record::Message(_) | Record::Reset(_) | Record::Rewind(_) => {
                    *self = Cut::Done;
                    false
                }
                Record::Update(_) | Record::Chunk(_) | Record::Steers(_) => true,
            },
            Cut::Done => false,
        }
    }
}

/// Whether `record` carries message `id` (a streamed chunk of it, or an
/// update line naming it); `Some(true)` for the user's message.
fn names(record: &Record, id: &str) -> Option<bool> {
    match record {
        Record::Chunk(chunk) if chunk.message_id.as_deref() == Some(id) => Some(chunk.kind == ChunkKind::User),
        Record::Update(line) if line.contains(id) => {
            let value: Value = serde_json::from_str(line).ok()?;
            let update = value.pointer("/params/update")?;
            (update["messageId"] == id).then(|| update["sessionUpdate"] == "user_message_chunk")
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{ToolCallRequest, UserPart};
    use crate::store::Chunk;

    fn user(text: &str) -> Record {
        Record::Message(Message::User { parts: vec![UserPart::Text { text: text.into() }] })
    }

    fn answer(id: &str, text: &str, calls: &[&str]) -> Vec<Record> {
        let chunk = Record::Chunk(Chunk {
            kind: ChunkKind::Agent,
            message_id: Some(Arc::from(id)),
            text: text.into(),
            session: None,
        });
        let message = Record::Message(Message::Assistant {
            text: text.into(),
            reasoning: String::new(),
            reasoning_field: None,
            reasoning_details: None,
            tool_calls: calls
                .iter()
                .map(|call| ToolCallRequest { id: (*call).into(), name: "read_file".into(), arguments: "{}".into() })
                .collect(),
            interrupted: false,
        });
        vec![chunk, message]
    }

    fn result(call: &str) -> Record {
        Record::Message(Message::Tool { tool_call_id: call.into(), content: "ok".into() })
    }

    fn log() -> Vec<Record> {
        let mut log = vec![user("first")];
        log.extend(answer("msg_1", "reading", &["c1", "c2"]));
        log.push(Record::Update(r#"{"method":"session/update","params":{"sessionId":"s","update":{}}}"#.into()));
        log.push(result("c1"));
        log.push(result("c2"));
        log.extend(answer("msg_2", "done", &[]));
        log.push(user("second"));
        log.extend(answer("msg_3", "again", &[]));
        log
    }

    fn cut_at(upto: &str) -> Vec<Record> {
        let mut cut = Cut::new(upto);
        log().into_iter().filter(|record| cut.keeps(record)).collect()
    }

    /// Cut at an answer that called tools: the answer and every result are
    /// kept, nothing after.
    #[test]
    fn a_cut_keeps_the_message_and_its_tool_results() {
        let kept = cut_at("msg_1");
        assert_eq!(kept, log()[..6].to_vec());
        let kept = cut_at("msg_2");
        assert_eq!(kept, log()[..8].to_vec());
        assert_eq!(cut_at("msg_3"), log());
        let mut missing = Cut::new("msg_9");
        assert!(log().iter().all(|record| missing.keeps(record)));
        assert!(!missing.found());
    }

    #[test]
    fn update_lines_are_renamed_and_otherwise_kept() {
        let line = r#"{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"old","update":{"sessionUpdate":"plan","entries":[]}}}"#;
        assert_eq!(
            renamed(line, "new"),
            r#"{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"new","update":{"sessionUpdate":"plan","entries":[]}}}"#
        );
        assert_eq!(renamed("not json", "new"), "not json");
    }
}
