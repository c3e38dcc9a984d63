//! How an editor sees `/undo` and `/redo` (the work, shared with the
//! terminal, is [`crate::undo`]'s), and the list of undoable turns editors
//! get in `_meta`.
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

use agent_client_protocol_schema::v1::SessionId;
use serde::Serialize;

use super::Server;
use super::updates::SessionEvents;
use crate::agent::{AgentEvent, EventSink, ToolCallChange, ToolCallStatus};
use crate::checkpoint::{self, Outcome};
use crate::rpc::encode_notification;
use crate::session::{Session, TurnGuard};
use crate::tools::{DisplayContent, Location, ToolKind};
use crate::undo::{Done, blocking};

/// Largest text shown as a diff (as the file tools show theirs).
const DIFF_MAX_BYTES: usize = 1024 * 1024;

impl Server {
    /// `/undo [--force]` (the work is [`crate::undo::undo`]).
    pub(super) async fn undo_command(&self, turn: &mut TurnGuard, events: &SessionEvents, arguments: &str) -> String {
        let done = crate::undo::undo(turn, arguments).await;
        self.show_done(turn.session(), events, "Undo", done).await
    }

    /// `/redo` (the work is [`crate::undo::redo`]).
    pub(super) async fn redo_command(&self, turn: &mut TurnGuard, events: &SessionEvents) -> String {
        let done = crate::undo::redo(turn).await;
        self.show_done(turn.session(), events, "Redo", done).await
    }

    /// Shows what an undo or redo changed, and the new list; the reply.
    async fn show_done(&self, session: &Session, events: &SessionEvents, verb: &str, done: Done) -> String {
        if let Some(outcome) = &done.outcome {
            show(events, session, verb, outcome);
            self.send_checkpoints(session, events, false).await;
        }
        done.reply
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
                            lathe: CheckpointList {
                                checkpoints: checkpoint::Described { turns: newest(turns), cwd: &cwd },
                                total: turns.len(),
                                can_redo,
                            },
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
    /// Every undoable turn, listed or not.
    total: usize,
    can_redo: bool,
}

/// How many turns the list sent to the editor names: the newest. It is sent
/// after every turn, so the whole list would make a session's traffic grow
/// with the square of its turns (130 KB per turn at 1,000 turns); `/undo`
/// takes back one turn at a time, newest first, and `/checkpoints` lists
/// them all.
const CHECKPOINTS_SENT: usize = 50;

/// The newest [`CHECKPOINTS_SENT`] of `turns` (oldest first, as given).
fn newest(turns: &[checkpoint::TurnRecord]) -> &[checkpoint::TurnRecord] {
    &turns[turns.len().saturating_sub(CHECKPOINTS_SENT)..]
}

/// Shows an undo or redo as a tool call with a diff per file.
fn show(events: &SessionEvents, session: &Session, verb: &str, outcome: &Outcome) {
    let id = format!("{}_{}", verb.to_lowercase(), uuid::Uuid::new_v4().simple());
    let title = format!("{verb}: {}", outcome.turn.prompt);
    let name = verb.to_lowercase();
    events.emit(AgentEvent::ToolCallStarted { id: id.clone(), title, kind: ToolKind::Edit, name });
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

    use super::{CHECKPOINTS_SENT, CheckpointList, CheckpointsUpdate, InfoUpdate, LatheMeta, newest};
    use crate::checkpoint::{Blob, Described, FileEntry, TurnRecord};
    use crate::rpc::encode_notification;

    /// The list as it was built before it was serialised straight from the
    /// records: a `serde_json::Value` in a `SessionInfoUpdate`'s `_meta`.
    fn as_value(turns: &[TurnRecord], cwd: &Path, can_redo: bool) -> serde_json::Value {
        let list: Vec<serde_json::Value> = turns
            .iter()
            .rev()
            .take(CHECKPOINTS_SENT)
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
        json!({ "checkpoints": list, "total": turns.len(), "canRedo": can_redo })
    }

    #[test]
    fn the_checkpoint_list_is_the_json_it_was_as_a_value_with_the_newest_turns() {
        let blob = |n: u64| Some(Blob { sha256: format!("{n:064x}"), len: n });
        let entry = |path: &str, before, after, not_saved: Option<&str>| FileEntry {
            path: PathBuf::from(path),
            before,
            after,
            not_saved: not_saved.map(str::to_owned),
        };
        let mut turns = vec![
            TurnRecord {
                id: "t1".to_owned(),
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
                id: "t2".to_owned(),
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
        let many: Vec<TurnRecord> = (3..=CHECKPOINTS_SENT as u64 + 20)
            .map(|number| TurnRecord { number, prompt: format!("turn {number}"), ..turns[1].clone() })
            .collect();
        let short = turns.clone();
        turns.extend(many);
        for (turns, can_redo) in [(&short[..], true), (&short[..], false), (&short[..0], true), (&turns[..], false)] {
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
                    meta: LatheMeta {
                        lathe: CheckpointList {
                            checkpoints: Described { turns: newest(turns), cwd },
                            total: turns.len(),
                            can_redo,
                        },
                    },
                },
            };
            let now = encode_notification("session/update", &now).unwrap();
            assert_eq!(String::from_utf8(now).unwrap(), String::from_utf8(before).unwrap());
        }
    }
}
