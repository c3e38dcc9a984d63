//! `lathe sessions`: the saved sessions from a terminal. `list` (optionally
//! for one directory), `show` (the conversation as Markdown), `rm` and
//! `prune --older-than`. Everything goes through [`Store`]: this module
//! reads no session file itself; it only decides what to show and what to
//! remove.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use crate::model::{Message, UserPart};
use crate::store::{Record, Retention, SessionSummary, Store, StoreError, StoredSession};

/// `lathe sessions` subcommands.
#[derive(Debug, clap::Subcommand)]
pub enum SessionsCommand {
    /// The saved sessions, most recent first.
    List {
        /// Only sessions whose working directory is DIR.
        #[arg(long, value_name = "DIR")]
        cwd: Option<PathBuf>,
        /// One JSON object per line (the stored metadata) instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// One session's conversation, as Markdown.
    Show {
        /// The session id (or a prefix that matches only one).
        id: String,
    },
    /// Remove sessions.
    #[command(visible_alias = "remove")]
    Rm {
        /// Session ids (or unique prefixes).
        #[arg(required = true)]
        ids: Vec<String>,
    },
    /// Remove the sessions not used for a while.
    Prune {
        /// How long unused: e.g. 30d, 12h, 2weeks.
        #[arg(long, value_name = "AGE", value_parser = humantime::parse_duration)]
        older_than: Duration,
        /// Say what would be removed, remove nothing.
        #[arg(long)]
        dry_run: bool,
    },
}

/// Why a sessions command failed.
#[derive(Debug, thiserror::Error)]
pub enum SessionsError {
    /// No data directory is known.
    #[error("no data directory (set --data-dir or LATHE_DATA_DIR)")]
    NoDataDir,
    /// The store said no.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// An id matched several sessions.
    #[error("{prefix:?} matches {} sessions: {}", .matches.len(), .matches.join(", "))]
    Ambiguous {
        /// What was given.
        prefix: String,
        /// What it matched.
        matches: Vec<String>,
    },
    /// Writing the answer failed.
    #[error("cannot write the output: {0}")]
    Output(#[from] std::io::Error),
    /// Some of several removals failed (each was reported already).
    #[error("{0} of the sessions could not be removed")]
    Partly(usize),
}

/// Runs one `lathe sessions` command against the store under `data_dir`.
pub async fn run(
    command: SessionsCommand,
    data_dir: Option<&Path>,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> Result<(), SessionsError> {
    let data_dir = data_dir.ok_or(SessionsError::NoDataDir)?;
    // Reading never creates the store: with none yet, there are no sessions.
    let exists = data_dir.join("sessions").is_dir();
    match command {
        SessionsCommand::List { cwd, json } => {
            let sessions = if exists { all(&open(data_dir)?, cwd.as_deref()) } else { Vec::new() };
            list(&sessions, json, out)
        }
        SessionsCommand::Show { id } => {
            if !exists {
                return Err(StoreError::NotFound(id).into());
            }
            let store = open(data_dir)?;
            let id = resolve(&store, &id)?;
            let stored = store.load(&id)?;
            out.write_all(markdown(&stored).as_bytes())?;
            Ok(())
        }
        SessionsCommand::Rm { ids } => {
            if !exists {
                return Err(StoreError::NotFound(ids.join(", ")).into());
            }
            let store = open(data_dir)?;
            let mut failed = 0;
            for given in ids {
                let removed = match resolve(&store, &given) {
                    Ok(id) => store.delete(&id).await.map(|()| id).map_err(SessionsError::from),
                    Err(why) => Err(why),
                };
                match removed {
                    Ok(id) => writeln!(out, "removed {id}")?,
                    Err(why) => {
                        failed += 1;
                        writeln!(err, "lathe: {why}")?;
                    }
                }
            }
            if failed > 0 { Err(SessionsError::Partly(failed)) } else { Ok(()) }
        }
        SessionsCommand::Prune { older_than, dry_run } => {
            if !exists {
                writeln!(out, "no sessions")?;
                return Ok(());
            }
            let store = open(data_dir)?;
            let cutoff = SystemTime::now().checked_sub(older_than).unwrap_or(SystemTime::UNIX_EPOCH);
            let mut removed = 0;
            for meta in all(&store, None) {
                let last_used = humantime::parse_rfc3339_weak(&meta.updated_at).ok();
                // A session whose time cannot be read is left alone.
                if last_used.is_none_or(|when| when >= cutoff) {
                    continue;
                }
                if !dry_run {
                    store.delete(&meta.session_id).await?;
                }
                removed += 1;
                let verb = if dry_run { "would remove" } else { "removed" };
                writeln!(out, "{verb} {} (last used {})", meta.session_id, meta.updated_at)?;
            }
            let verb = if dry_run { "would be removed" } else { "removed" };
            writeln!(out, "{removed} session{} {verb}", if removed == 1 { "" } else { "s" })?;
            Ok(())
        }
    }
}

/// The store, opened without its retention rule: listing or showing
/// sessions never deletes any.
fn open(data_dir: &Path) -> Result<Store, StoreError> {
    Store::open(
        data_dir,
        Retention::default(),
        Box::new(
            |failure: crate::store::SaveFailure| tracing::warn!(session = %failure.session_id, error = %failure.error, "not saved"),
        ),
    )
}

/// Every saved session (in `cwd`, when given), most recently used first.
fn all(store: &Store, cwd: Option<&Path>) -> Vec<SessionSummary> {
    let cwd = cwd.map(|dir| dir.canonicalize().unwrap_or_else(|_| dir.to_path_buf()));
    store.list(cwd.as_deref(), None, usize::MAX).sessions
}

/// The one session `given` names: its exact id, else the only id it begins.
fn resolve(store: &Store, given: &str) -> Result<String, SessionsError> {
    match store.load_meta(given) {
        Ok(meta) => return Ok(meta.session_id),
        Err(StoreError::NotFound(_)) => {}
        Err(other) => return Err(other.into()),
    }
    let mut matches: Vec<String> =
        all(store, None).into_iter().map(|meta| meta.session_id).filter(|id| id.starts_with(given)).collect();
    match matches.len() {
        0 => Err(StoreError::NotFound(given.to_owned()).into()),
        1 => Ok(matches.remove(0)),
        _ => {
            matches.sort();
            Err(SessionsError::Ambiguous { prefix: given.to_owned(), matches })
        }
    }
}

fn list(sessions: &[SessionSummary], json: bool, out: &mut dyn Write) -> Result<(), SessionsError> {
    if json {
        for summary in sessions {
            let line = serde_json::json!({
                "sessionId": summary.session_id,
                "cwd": summary.cwd,
                "additionalDirectories": summary.additional_directories,
                "title": summary.title,
                "updatedAt": summary.updated_at,
            });
            writeln!(out, "{line}")?;
        }
        return Ok(());
    }
    if sessions.is_empty() {
        writeln!(out, "no sessions")?;
        return Ok(());
    }
    for summary in sessions {
        let title = summary.title.as_deref().map(one_line).unwrap_or_else(|| "(untitled)".to_owned());
        writeln!(out, "{}  {}  {}  {}", summary.session_id, summary.updated_at, summary.cwd.display(), title)?;
    }
    Ok(())
}

/// A title or a line of text as one line of at most 80 characters.
fn one_line(text: &str) -> String {
    let line = text.split_whitespace().collect::<Vec<_>>().join(" ");
    match line.char_indices().nth(80) {
        Some((at, _)) => format!("{}…", &line[..at]),
        None => line,
    }
}

/// Longest tool result shown in full; longer ones keep their head.
const SHOWN_RESULT_CHARS: usize = 4000;

/// The conversation as Markdown: every message the log holds, in order,
/// including what came before a compaction (marked where it happened).
pub fn markdown(stored: &StoredSession) -> String {
    let meta = &stored.meta;
    let mut text =
        format!("# {}\n\n", meta.title.as_deref().map(one_line).unwrap_or_else(|| "Untitled session".into()));
    text.push_str(&format!("- id: `{}`\n- directory: `{}`\n", meta.session_id, meta.cwd.display()));
    text.push_str(&format!("- created: {}\n- last used: {}\n", meta.created_at, meta.updated_at));
    if let Some(model) = &meta.model {
        text.push_str(&format!("- model: {model}\n"));
    }
    if let Some(mode) = &meta.mode {
        text.push_str(&format!("- mode: {mode}\n"));
    }
    for record in &stored.records {
        match record {
            Record::Message(message) => message_markdown(message, &mut text),
            Record::Reset(messages) => {
                text.push_str("\n---\n\n*The conversation was compacted here; the model went on from this summary:*\n");
                for message in messages {
                    message_markdown(message, &mut text);
                }
                text.push_str("\n---\n");
            }
            Record::Rewind(keep) => {
                text.push_str(&format!(
                    "\n---\n\n*`/undo` took the conversation back here: the model went on from its first {keep} messages.*\n\n---\n"
                ));
            }
            Record::Update(_) | Record::Chunk(_) => {}
        }
    }
    text
}

fn message_markdown(message: &Message, text: &mut String) {
    match message {
        Message::User { parts } => {
            text.push_str("\n## User\n\n");
            for part in parts {
                match part {
                    UserPart::Text { text: said } => {
                        text.push_str(said.trim_end());
                        text.push('\n');
                    }
                    UserPart::Image { mime_type, .. } => text.push_str(&format!("*[an image, {mime_type}]*\n")),
                }
            }
        }
        Message::Assistant { text: said, reasoning, tool_calls, interrupted, .. } => {
            text.push_str("\n## Assistant\n\n");
            if !reasoning.trim().is_empty() {
                for line in reasoning.trim().lines() {
                    text.push_str(&format!("> {line}\n"));
                }
                text.push('\n');
            }
            if !said.trim().is_empty() {
                text.push_str(said.trim_end());
                text.push('\n');
            }
            for call in tool_calls {
                text.push_str(&format!("\n**Tool call** `{}` (`{}`)\n\n", call.name, call.id));
                text.push_str(&fenced(&call.arguments, "json"));
            }
            if *interrupted {
                text.push_str("\n*(cancelled by the user)*\n");
            }
        }
        Message::Tool { tool_call_id, content } => {
            text.push_str(&format!("\n**Tool result** (`{tool_call_id}`)\n\n"));
            let shown = match content.char_indices().nth(SHOWN_RESULT_CHARS) {
                Some((at, _)) => format!("{}\n… ({} more bytes)", &content[..at], content.len() - at),
                None => content.clone(),
            };
            text.push_str(&fenced(&shown, ""));
        }
    }
}

/// `body` in a code fence longer than any backtick run inside it.
fn fenced(body: &str, language: &str) -> String {
    let mut longest = 0;
    let mut run = 0;
    for c in body.chars() {
        run = if c == '`' { run + 1 } else { 0 };
        longest = longest.max(run);
    }
    let fence = "`".repeat((longest + 1).max(3));
    format!("{fence}{language}\n{}\n{fence}\n", body.trim_end())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ToolCallRequest;
    use crate::store::SessionMeta;

    #[test]
    fn markdown_keeps_everything_in_order_and_fences_safely() {
        let stored = StoredSession {
            meta: SessionMeta {
                session_id: "sess_1".into(),
                cwd: PathBuf::from("/p"),
                additional_directories: vec![],
                title: Some("Fix the build".into()),
                created_at: "2026-01-01T00:00:00Z".into(),
                updated_at: "2026-01-02T00:00:00Z".into(),
                model: Some("mock".into()),
                mode: Some("ask".into()),
                thought_level: None,
            },
            records: vec![
                Record::Message(Message::User { parts: vec![UserPart::Text { text: "fix it".into() }] }),
                Record::Message(Message::Assistant {
                    text: "Looking.".into(),
                    reasoning: "think".into(),
                    reasoning_field: None,
                    reasoning_details: None,
                    tool_calls: vec![ToolCallRequest {
                        id: "c1".into(),
                        name: "read_file".into(),
                        arguments: "{\"path\":\"a\"}".into(),
                    }],
                    interrupted: false,
                }),
                Record::Message(Message::Tool { tool_call_id: "c1".into(), content: "```inner```".into() }),
                Record::Reset(vec![Message::User { parts: vec![UserPart::Text { text: "summary".into() }] }]),
            ],
        };
        let text = markdown(&stored);
        let order =
            ["# Fix the build", "fix it", "> think", "Looking.", "`read_file`", "````\n```inner```\n````", "summary"];
        let mut at = 0;
        for needle in order {
            let found = text[at..].find(needle).unwrap_or_else(|| panic!("{needle} after {at} in\n{text}"));
            at += found + needle.len();
        }
    }
}
