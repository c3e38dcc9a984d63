//! `/undo`, `/redo` and `/checkpoints` (see [`crate::checkpoint`]), and the
//! list of undoable turns editors get in `_meta`.
//!
//! The list travels in a `session_info_update` whose `_meta` holds
//! `{"lathe": {"checkpoints": [...], "canRedo": bool}}`, sent after every
//! turn, undo and redo, and after `session/load` (not recorded: it is state,
//! not conversation). Each entry is `{turn, prompt, startedAt, files: [{path,
//! shown, change: created|modified|deleted|unrestorable, notSaved?}]}`,
//! newest first: the first entry is what `/undo` takes back.
//!
//! An undo or redo is shown as a tool call (kind `edit`) whose content is a
//! `diff` per file it changed and a line per file it left alone, followed by
//! a message saying what happened to the conversation; both are recorded, so
//! a `session/load` replays them.

use std::sync::Arc;

use agent_client_protocol_schema::v1::SessionId;
use serde::Serialize;

use super::Server;
use super::updates::SessionEvents;
use crate::agent::{AgentEvent, EventSink, ToolCallChange, ToolCallStatus};
use crate::checkpoint::{self, CheckpointError, Checkpoints, Outcome};
use crate::rpc::encode_notification;
use crate::session::{Session, TurnGuard};
use crate::tools::{DisplayContent, Location, ToolKind};

/// Largest text shown as a diff (as the file tools show theirs).
const DIFF_MAX_BYTES: usize = 1024 * 1024;

const NO_CHECKPOINTS: &str = "This session keeps no checkpoints: lathe saves them with the session, and sessions are \
                              not saved (no data directory).";

/// Runs blocking checkpoint work off the async threads.
async fn blocking<T: Send + 'static>(
    checkpoints: &Arc<Checkpoints>,
    work: impl FnOnce(&Checkpoints) -> T + Send + 'static,
) -> Option<T> {
    let checkpoints = Arc::clone(checkpoints);
    match tokio::task::spawn_blocking(move || work(&checkpoints)).await {
        Ok(value) => Some(value),
        Err(err) => {
            tracing::warn!(%err, "checkpoint work failed");
            None
        }
    }
}

impl Server {
    /// `/undo [--force]`.
    pub(super) async fn undo_command(&self, turn: &mut TurnGuard, events: &SessionEvents, arguments: &str) -> String {
        let session = Arc::clone(turn.session());
        let Some(checkpoints) = session.checkpoints().cloned() else { return NO_CHECKPOINTS.to_owned() };
        let force = match arguments.trim() {
            "" => false,
            "--force" | "-f" => true,
            other => return format!("`/undo` takes no argument but `--force` (got `{other}`)."),
        };
        let roots = session.roots();
        let Some(undone) = blocking(&checkpoints, move |c| c.undo(&roots, force)).await else {
            return "The undo failed; see lathe's log.".to_owned();
        };
        let outcome = match undone {
            Ok(outcome) => outcome,
            Err(error) => return error.to_string(),
        };
        let conversation = turn.conversation();
        let rewound = match outcome.turn.messages_before {
            Some(before) if conversation.messages().len() == outcome.turn.messages_after => {
                Some(conversation.rewind(before))
            }
            _ => None,
        };
        let messages_now = conversation.messages().len();
        let rewound_any = rewound.is_some();
        let record = outcome.clone();
        blocking(&checkpoints, move |c| c.undone(&record, rewound.unwrap_or_default(), messages_now)).await;
        remember_texts(&session, &outcome);
        show(events, &session, "Undo", &outcome);
        self.send_checkpoints(&session, events, false).await;
        let mut reply = format!("Undid the turn \"{}\": {}.", outcome.turn.prompt, files_summary(&outcome));
        if rewound_any {
            reply.push_str(" The model no longer sees that turn. `/redo` applies it again.");
        } else {
            reply.push_str(
                " The conversation was not rewound: it was compacted or cleared since, so the model still sees \
                 what it did.",
            );
        }
        if !outcome.left.is_empty() && !force {
            reply.push_str(
                " Files changed since the turn were left alone. To restore them as well, losing those changes:                  `/redo`, then `/undo --force`.",
            );
        }
        reply
    }

    /// `/redo`.
    pub(super) async fn redo_command(&self, turn: &mut TurnGuard, events: &SessionEvents) -> String {
        let session = Arc::clone(turn.session());
        let Some(checkpoints) = session.checkpoints().cloned() else { return NO_CHECKPOINTS.to_owned() };
        let roots = session.roots();
        let messages_now = turn.conversation().messages().len();
        let Some(redone) = blocking(&checkpoints, move |c| c.redo(&roots, messages_now)).await else {
            return "The redo failed; see lathe's log.".to_owned();
        };
        let mut outcome = match redone {
            Ok(outcome) => outcome,
            Err(error @ (CheckpointError::NothingToRedo | CheckpointError::Diverged(_))) => return error.to_string(),
            Err(error @ CheckpointError::Io { .. }) => return format!("The redo may be incomplete: {error}"),
            Err(error @ CheckpointError::NothingToUndo) => return error.to_string(),
        };
        let conversation = turn.conversation();
        for message in std::mem::take(&mut outcome.messages) {
            conversation.push(message);
        }
        remember_texts(&session, &outcome);
        show(events, &session, "Redo", &outcome);
        self.send_checkpoints(&session, events, false).await;
        format!("Redid the turn \"{}\": {}.", outcome.turn.prompt, files_summary(&outcome))
    }

    /// `/checkpoints`.
    pub(super) async fn checkpoints_command(&self, session: &Session) -> String {
        let Some(checkpoints) = session.checkpoints().cloned() else { return NO_CHECKPOINTS.to_owned() };
        let Some(turns) = blocking(&checkpoints, Checkpoints::turns).await else {
            return "The checkpoints could not be read; see lathe's log.".to_owned();
        };
        if turns.is_empty() {
            return "There is no turn to undo.".to_owned();
        }
        let cwd = &session.setup().cwd;
        let mut text = String::from("Turns `/undo` can take back, newest first:\n");
        for turn in turns.iter().rev() {
            text.push_str(&format!("\n- \"{}\" ({})", turn.prompt, turn.started_at));
            if turn.files.is_empty() {
                text.push_str(": no file changes");
            }
            for entry in &turn.files {
                let shown = crate::tools::paths::display(&entry.path, cwd);
                let change = match (&entry.before, &entry.after, &entry.not_saved) {
                    (_, _, Some(why)) => format!("cannot be restored: {why}"),
                    (None, Some(_), None) => "created".to_owned(),
                    (Some(_), None, None) => "deleted".to_owned(),
                    _ => "modified".to_owned(),
                };
                text.push_str(&format!("\n  - `{shown}`: {change}"));
            }
        }
        text
    }

    /// Tells the editor the undoable turns (see the module docs); when
    /// `only_if_any`, only if there are some (a session just loaded). The
    /// notification is encoded from the checkpoints' own records, under
    /// their lock, off the async threads: the list grows with the session.
    pub(super) async fn send_checkpoints(&self, session: &Session, events: &SessionEvents, only_if_any: bool) {
        let Some(checkpoints) = session.checkpoints().cloned() else { return };
        let cwd = session.setup().cwd.clone();
        let session_id = events.session_id.clone();
        let encoded = blocking(&checkpoints, move |c| {
            c.with_turns(|turns, can_redo| {
                if only_if_any && turns.is_empty() && !can_redo {
                    return None;
                }
                let update = CheckpointsUpdate {
                    session_id: &session_id,
                    update: InfoUpdate {
                        session_update: "session_info_update",
                        meta: LatheMeta {
                            lathe: CheckpointList { checkpoints: checkpoint::Described { turns, cwd: &cwd }, can_redo },
                        },
                    },
                };
                encode_notification("session/update", &update)
                    .inspect_err(|err| tracing::error!(%err, "cannot encode the checkpoint list"))
                    .ok()
            })
        })
        .await;
        if let Some(Some(line)) = encoded {
            events.outbox.send_encoded(line);
        }
    }
}

/// The `session/update` params [`Server::send_checkpoints`] sends: a
/// `session_info_update` with `_meta: {"lathe": {checkpoints, canRedo}}`,
/// the same JSON as a
/// [`SessionInfoUpdate`](agent_client_protocol_schema::v1::SessionInfoUpdate)
/// with that `_meta` built as a `serde_json::Value` (a test checks).
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct CheckpointsUpdate<'a> {
    session_id: &'a SessionId,
    update: InfoUpdate<'a>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct InfoUpdate<'a> {
    session_update: &'static str,
    #[serde(rename = "_meta")]
    meta: LatheMeta<'a>,
}

#[derive(Serialize)]
struct LatheMeta<'a> {
    lathe: CheckpointList<'a>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct CheckpointList<'a> {
    checkpoints: checkpoint::Described<'a>,
    can_redo: bool,
}

/// The model's next edit of a restored file must not be refused as a change
/// made behind its back: what it "saw" is what the file holds now.
fn remember_texts(session: &Session, outcome: &Outcome) {
    for changed in &outcome.changed {
        if let Some(text) = &changed.new_text {
            session.file_versions().record(&changed.path, text);
        }
    }
}

fn files_summary(outcome: &Outcome) -> String {
    let restored = outcome.changed.len();
    let left = outcome.left.len();
    let files = |n: usize| if n == 1 { "1 file".to_owned() } else { format!("{n} files") };
    match (restored, left) {
        (0, 0) => "it changed no file".to_owned(),
        (_, 0) => format!("{} put back", files(restored)),
        (_, _) => format!("{} put back, {} left as they are", files(restored), files(left)),
    }
}

/// Shows an undo or redo as a tool call with a diff per file.
fn show(events: &SessionEvents, session: &Session, verb: &str, outcome: &Outcome) {
    let id = format!("{}_{}", verb.to_lowercase(), uuid::Uuid::new_v4().simple());
    let title = format!("{verb}: {}", outcome.turn.prompt);
    events.emit(AgentEvent::ToolCallStarted { id: id.clone(), title, kind: ToolKind::Edit });
    let cwd = &session.setup().cwd;
    let mut content = Vec::new();
    for changed in &outcome.changed {
        let shown = crate::tools::paths::display(&changed.path, cwd);
        let too_big = |text: &Option<String>| text.as_ref().is_some_and(|text| text.len() > DIFF_MAX_BYTES);
        if too_big(&changed.old_text) || too_big(&changed.new_text) {
            let what = if changed.exists { "Restored" } else { "Removed" };
            content.push(DisplayContent::Text(format!("{what} {shown} (too large to show as a diff).")));
            continue;
        }
        match (&changed.old_text, &changed.new_text) {
            (old, Some(new)) if changed.existed == old.is_some() => content.push(DisplayContent::Diff {
                path: changed.path.clone(),
                old_text: old.clone(),
                new_text: new.clone(),
            }),
            (Some(old), None) if !changed.exists => content.push(DisplayContent::Diff {
                path: changed.path.clone(),
                old_text: Some(old.clone()),
                new_text: String::new(),
            }),
            _ if !changed.exists => content.push(DisplayContent::Text(format!("Removed {shown}."))),
            _ => content.push(DisplayContent::Text(format!("Restored {shown} (not text, no diff shown)."))),
        }
    }
    for (path, why) in &outcome.left {
        let shown = crate::tools::paths::display(path, cwd);
        content.push(DisplayContent::Text(format!("{shown}: {why}")));
    }
    let locations = outcome.changed.iter().map(|changed| Location { path: changed.path.clone(), line: None }).collect();
    events.emit(AgentEvent::ToolCallUpdated {
        id,
        change: ToolCallChange {
            status: Some(ToolCallStatus::Completed),
            content: Some(content),
            locations: Some(locations),
            ..ToolCallChange::default()
        },
    });
}

#[cfg(test)]
mod tests {
    use std::path::{Path, PathBuf};

    use agent_client_protocol_schema::v1::{SessionId, SessionInfoUpdate, SessionNotification, SessionUpdate};
    use serde_json::json;

    use super::{CheckpointList, CheckpointsUpdate, InfoUpdate, LatheMeta};
    use crate::checkpoint::{Blob, Described, FileEntry, TurnRecord};
    use crate::rpc::encode_notification;

    /// The list as it was built before it was serialised straight from the
    /// records: a `serde_json::Value` in a `SessionInfoUpdate`'s `_meta`.
    fn as_value(turns: &[TurnRecord], cwd: &Path, can_redo: bool) -> serde_json::Value {
        let list: Vec<serde_json::Value> = turns
            .iter()
            .rev()
            .map(|turn| {
                let files: Vec<serde_json::Value> = turn
                    .files
                    .iter()
                    .map(|entry| {
                        let change = match (&entry.before, &entry.after, &entry.not_saved) {
                            (_, _, Some(_)) => "unrestorable",
                            (None, Some(_), None) => "created",
                            (Some(_), None, None) => "deleted",
                            _ => "modified",
                        };
                        let mut file = std::collections::BTreeMap::new();
                        file.insert("path", json!(entry.path));
                        file.insert("shown", json!(crate::tools::paths::display(&entry.path, cwd)));
                        file.insert("change", json!(change));
                        if let Some(why) = &entry.not_saved {
                            file.insert("notSaved", json!(why));
                        }
                        json!(file)
                    })
                    .collect();
                json!({"turn": turn.number, "prompt": turn.prompt, "startedAt": turn.started_at, "files": files})
            })
            .collect();
        json!({ "checkpoints": list, "canRedo": can_redo })
    }

    #[test]
    fn the_checkpoint_list_is_the_json_it_was_as_a_value() {
        let blob = |n: u64| Some(Blob { sha256: format!("{n:064x}"), len: n });
        let entry = |path: &str, before, after, not_saved: Option<&str>| FileEntry {
            path: PathBuf::from(path),
            before,
            after,
            not_saved: not_saved.map(str::to_owned),
        };
        let turns = [
            TurnRecord {
                number: 1,
                prompt: "first \"quoted\"".to_owned(),
                started_at: "2026-12-03T18:00:00Z".to_owned(),
                messages_before: Some(0),
                messages_after: 2,
                files: vec![
                    entry("/w/a.rs", None, blob(1), None),
                    entry("/w/sub/b.rs", blob(2), blob(3), None),
                    entry("/elsewhere/c", blob(4), None, None),
                    entry("/w/big", None, None, Some("over the cap")),
                ],
            },
            TurnRecord {
                number: 2,
                prompt: "second".to_owned(),
                started_at: "2026-12-03T18:01:00Z".to_owned(),
                messages_before: None,
                messages_after: 4,
                files: Vec::new(),
            },
        ];
        let cwd = Path::new("/w");
        let session_id = SessionId::new("s1");
        for (turns, can_redo) in [(&turns[..], true), (&turns[..], false), (&turns[..0], true)] {
            let serde_json::Value::Object(meta) = json!({ "lathe": as_value(turns, cwd, can_redo) }) else {
                unreachable!("an object")
            };
            let update = SessionUpdate::SessionInfoUpdate(SessionInfoUpdate::new().meta(meta));
            let before =
                encode_notification("session/update", &SessionNotification::new(session_id.clone(), update)).unwrap();
            let now = CheckpointsUpdate {
                session_id: &session_id,
                update: InfoUpdate {
                    session_update: "session_info_update",
                    meta: LatheMeta { lathe: CheckpointList { checkpoints: Described { turns, cwd }, can_redo } },
                },
            };
            let now = encode_notification("session/update", &now).unwrap();
            assert_eq!(String::from_utf8(now).unwrap(), String::from_utf8(before).unwrap());
        }
    }
}
