//! What a client that advertises none of the newer ACP capabilities gets,
//! byte for byte: a representative session's stdout is compared with the
//! transcript in `tests/fixtures/transcripts/plain_client.txt`, recorded
//! before the schema crate moved from 1.17.0 to 1.20.0. A schema upgrade, or
//! a feature that is only meant for clients that ask for it (elicitation,
//! `plan`, `session.notices`, `session.compaction`, `subagents`, a system
//! prompt, ...), must leave it as it is.
//!
//! The session: `initialize` with what an editor offered before those
//! capabilities existed (`fs`, `terminal`), `session/new`, a turn with a
//! thought, text, a read, a plan, an edit and a command (each asked about
//! and allowed; files and the terminal through the editor), a mode set both
//! ways, `session/list`, a turn cancelled while the model streams, one
//! cancelled while a permission question is open (lathe withdraws it with
//! `$/cancel_request`), then a new process that loads the session (the
//! replay) and closes it.
//!
//! Only what differs from run to run is replaced before the comparison: the
//! session id, the temporary paths, the mock model's address, the test
//! binary's path, the random parts of ids (32 hex digits, numbered in order
//! of appearance), RFC 3339 timestamps and lathe's version. The command
//! sandbox is off (whether it can be enforced is the machine's business).
//! Everything else, key order and spacing included, is compared as written.
//! On Windows two spellings are written as Unix's first, so that one
//! transcript serves both: the `\` between the names after a temporary path
//! (ACP's paths are native) and the shell's arguments (`cmd.exe /d /s /c
//! "<line>"` with `--verbatim` for `sh -c <line>`; `platform::shell` and
//! `platform::process` test the Windows form).
//!
//! To record the transcript again after a change that is meant to alter what
//! such a client sees, run the test with `LATHE_BLESS_TRANSCRIPT=1` and say
//! why in the commit.

use std::path::{Path, PathBuf};

use serde_json::json;

use crate::support::acp_client::{Agent, DEFAULT_TIMEOUT, initialize, prompt};
use crate::support::editor::{FakeEditor, Permission};
use crate::support::harness::Harness;
use crate::support::mock_openai::{
    Reply, Step, ev_finish, ev_reasoning, ev_role, ev_text, ev_tool_call_args, ev_tool_call_start, ev_usage,
};

/// The recorded transcript.
fn golden_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/transcripts/plain_client.txt")
}

/// What an editor offered before the newer capabilities: files and terminals.
fn plain_capabilities() -> serde_json::Value {
    json!({"fs": {"readTextFile": true, "writeTextFile": true}, "terminal": true})
}

/// A streamed answer: a thought, some text, then one tool call; usage as reported.
fn step_reply(thought: &str, text: &str, call: Option<(&str, &str, serde_json::Value)>, usage: (u64, u64)) -> Reply {
    let mut steps = vec![ev_role()];
    if !thought.is_empty() {
        steps.push(ev_reasoning(thought));
    }
    if !text.is_empty() {
        steps.push(ev_text(text));
    }
    let finish = match call {
        Some((id, name, args)) => {
            steps.push(ev_tool_call_start(0, id, name));
            steps.push(ev_tool_call_args(0, &args.to_string()));
            "tool_calls"
        }
        None => "stop",
    };
    steps.push(ev_finish(finish));
    steps.push(ev_usage(usage.0, usage.1));
    steps.push(Step::Done);
    Reply::Sse(steps)
}

/// The transcript so far: the agent's stdout lines since `from`, under a heading.
struct Recorder {
    out: String,
    seen: usize,
}

impl Recorder {
    fn step(&mut self, agent: &Agent, heading: &str) {
        let lines = agent.raw_stdout_lines();
        self.out.push_str(&format!("## {heading}\n"));
        for line in &lines[self.seen..] {
            self.out.push_str(line);
            self.out.push('\n');
        }
        self.seen = lines.len();
    }

    /// A new agent process: its lines start from zero.
    fn new_agent(&mut self) {
        self.seen = 0;
    }
}

/// Replaces what differs from run to run (see the module doc).
fn normalize(text: &str, session: &str, project: &Path, home: &Path, mock_url: &str) -> String {
    let temp_dir = serde_json::to_string(&std::env::temp_dir()).unwrap();
    let text =
        if cfg!(windows) { unix_spelling(text, &[(project, "<project>"), (home, "<home>")]) } else { text.to_owned() };
    let text = text
        .replace(session, "<session>")
        .replace(project.to_str().unwrap(), "<project>")
        .replace(home.to_str().unwrap(), "<home>")
        .replace(env!("CARGO_BIN_EXE_lathe"), "<lathe>")
        .replace(mock_url, "<mock>")
        .replace(&temp_dir, "\"<temp>\"")
        .replace(&format!("\"version\":\"{}\"", env!("CARGO_PKG_VERSION")), "\"version\":\"<version>\"");
    let text = numbered_hex_ids(&text);
    timestamps(&text)
}

/// Windows' spellings written as Unix's (see the module doc): each path in
/// `paths` (as JSON writes it) becomes its placeholder, with `/` between the
/// names after it in the same string; the shell's arguments for the
/// transcript's command become `sh -c`'s.
fn unix_spelling(text: &str, paths: &[(&Path, &str)]) -> String {
    let command = "echo checked";
    let line = lathe::platform::shell::Shell::for_config(None).line(command);
    let native: Vec<&str> = [line.program.as_str()]
        .into_iter()
        .chain(line.args.iter().map(String::as_str))
        .chain(line.verbatim.as_deref())
        .collect();
    let native = serde_json::to_string(&native).unwrap();
    let verbatim = if line.verbatim.is_some() { "\"--verbatim\",\"--\"," } else { "\"--\"," };
    let mut text = text.replace(
        &format!("{verbatim}{}", &native[1..native.len() - 1]),
        &format!("\"--\",\"sh\",\"-c\",\"{command}\""),
    );
    for (path, placeholder) in paths {
        let written = serde_json::to_string(path).unwrap();
        let written = &written[1..written.len() - 1];
        let mut out = String::with_capacity(text.len());
        let mut rest = text.as_str();
        while let Some(at) = rest.find(written) {
            out.push_str(&rest[..at]);
            out.push_str(placeholder);
            rest = &rest[at + written.len()..];
            // The rest of this JSON string: `\\` (an escaped `\`) is a separator.
            let end = rest.find('"').unwrap_or(rest.len());
            out.push_str(&rest[..end].replace("\\\\", "/"));
            rest = &rest[end..];
        }
        out.push_str(rest);
        text = out;
    }
    text
}

/// Runs of exactly 32 lowercase hex digits (a simple UUID) -> `<idN>`, the
/// same run always the same N.
fn numbered_hex_ids(text: &str) -> String {
    let bytes = text.as_bytes();
    let is_hex = |b: u8| b.is_ascii_digit() || (b'a'..=b'f').contains(&b);
    let mut seen: Vec<&str> = Vec::new();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < bytes.len() {
        let run = bytes[i..].iter().take_while(|b| is_hex(**b)).count();
        let boundary_before = i == 0 || !bytes[i - 1].is_ascii_alphanumeric();
        let boundary_after = bytes.get(i + run).is_none_or(|b| !b.is_ascii_alphanumeric());
        if run == 32 && boundary_before && boundary_after {
            let id = &text[i..i + run];
            let n = seen.iter().position(|s| *s == id).unwrap_or_else(|| {
                seen.push(id);
                seen.len() - 1
            });
            out.push_str(&format!("<id{}>", n + 1));
            i += run;
        } else if run > 0 {
            out.push_str(&text[i..i + run]);
            i += run;
        } else {
            let c = text[i..].chars().next().unwrap();
            out.push(c);
            i += c.len_utf8();
        }
    }
    out
}

/// Quoted RFC 3339 timestamps (`"2026-12-04T14:07:29.123Z"`) -> `"<time>"`.
fn timestamps(text: &str) -> String {
    let looks_like_time = |s: &str| {
        let b = s.as_bytes();
        b.len() >= 20
            && b[..4].iter().all(u8::is_ascii_digit)
            && b[4] == b'-'
            && b[7] == b'-'
            && b[10] == b'T'
            && b[13] == b':'
            && !s.contains('\\')
    };
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(quote) = rest.find('"') {
        out.push_str(&rest[..=quote]);
        rest = &rest[quote + 1..];
        if let Some(end) = rest.find('"')
            && looks_like_time(&rest[..end])
        {
            out.push_str("<time>\"");
            rest = &rest[end + 1..];
        }
    }
    out.push_str(rest);
    out
}

#[tokio::test]
async fn a_plain_client_gets_the_recorded_transcript() {
    // The sandbox is the machine's (Landlock or not): off, so the transcript is not.
    let mut h = Harness::with_config("[sandbox]\nmode = \"off\"\n").await;
    std::fs::write(h.project.join("notes.txt"), "old line\n").unwrap();
    let mut rec = Recorder { out: String::new(), seen: 0 };

    initialize(&mut h.agent, plain_capabilities()).await;
    rec.step(&h.agent, "initialize");

    let id = h.agent.request("session/new", json!({"cwd": h.project, "mcpServers": []})).await;
    let (_, response) = h.agent.response(id).await;
    let session = response["result"]["sessionId"].as_str().unwrap().to_owned();
    h.agent.next_message(DEFAULT_TIMEOUT).await.expect("the slash commands follow session/new");
    rec.step(&h.agent, "session/new");

    // A turn with every kind of update a plain client sees.
    let plan = json!({"todos": [
        {"content": "Read the notes", "status": "completed"},
        {"content": "Fix the line", "status": "in_progress"},
        {"content": "Check with a command", "status": "pending"},
    ]});
    h.mock.push(step_reply(
        "Look first.",
        "Reading.",
        Some(("call_r", "read_file", json!({"path": "notes.txt"}))),
        (40, 8),
    ));
    h.mock.push(step_reply("", "", Some(("call_p", "update_plan", plan)), (60, 9)));
    let edit = json!({"path": "notes.txt", "old_string": "old line", "new_string": "new line"});
    h.mock.push(step_reply("", "Fixing.", Some(("call_e", "edit_file", edit)), (80, 10)));
    h.mock.push(step_reply("", "", Some(("call_s", "shell", json!({"command": "echo checked"}))), (100, 11)));
    h.mock.push(step_reply("All good.", "Done: the line is fixed.", None, (120, 12)));
    let mut editor = FakeEditor::answering(&[Permission::Select("allow_once"), Permission::Select("allow_once")]);
    let id = prompt(&mut h.agent, &session, "Fix the notes").await;
    let (_, response) = h.agent.response_answering(id, |request| editor.answer(request)).await;
    assert_eq!(response["result"]["stopReason"], "end_turn", "{response}");
    rec.step(&h.agent, "session/prompt: read, plan, edit, command");

    let id = h.agent.request("session/set_mode", json!({"sessionId": session, "modeId": "accept-edits"})).await;
    h.agent.response(id).await;
    rec.step(&h.agent, "session/set_mode");
    let id = h
        .agent
        .request("session/set_config_option", json!({"sessionId": session, "configId": "mode", "value": "ask"}))
        .await;
    h.agent.response(id).await;
    rec.step(&h.agent, "session/set_config_option");

    let id = h.agent.request("session/list", json!({})).await;
    h.agent.response(id).await;
    rec.step(&h.agent, "session/list");

    // Cancelled while the model streams.
    h.mock.push(Reply::Sse(vec![ev_role(), ev_text("partial"), Step::Stall]));
    let id = prompt(&mut h.agent, &session, "Write a long essay").await;
    h.agent.until("the first chunk", |m| m["params"]["update"]["sessionUpdate"] == "agent_message_chunk").await;
    h.agent.notify("session/cancel", json!({"sessionId": session})).await;
    let (_, response) = h.agent.response(id).await;
    assert_eq!(response["result"]["stopReason"], "cancelled", "{response}");
    rec.step(&h.agent, "session/prompt: cancelled while streaming");

    // Cancelled while a permission question is open.
    h.mock.push(step_reply("", "", Some(("call_x", "shell", json!({"command": "echo again"}))), (140, 5)));
    let id = prompt(&mut h.agent, &session, "Run it again").await;
    h.agent.until("the permission request", |m| m["method"] == "session/request_permission").await;
    h.agent.notify("session/cancel", json!({"sessionId": session})).await;
    let (_, response) = h.agent.response(id).await;
    assert_eq!(response["result"]["stopReason"], "cancelled", "{response}");
    h.agent.barrier().await;
    rec.step(&h.agent, "session/prompt: cancelled while asking");

    // A new process loads the session: the replay.
    h.restart().await;
    rec.new_agent();
    initialize(&mut h.agent, plain_capabilities()).await;
    rec.step(&h.agent, "initialize (a new process)");
    let id = h.agent.request("session/load", json!({"sessionId": session, "cwd": h.project, "mcpServers": []})).await;
    h.agent.response(id).await;
    // The checkpoints follow the answer, from the load's task.
    h.agent.until("the checkpoints", |m| m["params"]["update"]["sessionUpdate"] == "session_info_update").await;
    rec.step(&h.agent, "session/load");
    let id = h.agent.request("session/close", json!({"sessionId": session})).await;
    h.agent.response(id).await;
    rec.step(&h.agent, "session/close");

    let transcript = normalize(&rec.out, &session, &h.project, h.home.path(), &h.mock.base_url());
    let path = golden_path();
    if std::env::var_os("LATHE_BLESS_TRANSCRIPT").is_some() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, &transcript).unwrap();
        return;
    }
    let golden = std::fs::read_to_string(&path)
        .unwrap_or_else(|err| panic!("{}: {err} (record it with LATHE_BLESS_TRANSCRIPT=1)", path.display()));
    pretty_assertions::assert_eq!(golden, transcript, "the transcript differs from {}", path.display());
}

#[test]
fn the_normalizer_replaces_only_what_varies() {
    let hex = "0123456789abcdef0123456789abcdef";
    let other = "fedcba9876543210fedcba9876543210";
    let line = format!(
        r#"{{"a":"msg_{hex}","b":"{other}","c":"x{hex}","d":"{hex}","t":"2026-12-04T14:07:29.123Z","n":"2026"}}"#
    );
    assert_eq!(
        normalize(&line, "sess_none", Path::new("/nowhere/p"), Path::new("/nowhere"), "http://nowhere"),
        r#"{"a":"msg_<id1>","b":"<id2>","c":"x0123456789abcdef0123456789abcdef","d":"<id1>","t":"<time>","n":"2026"}"#
    );
}
