//! `lathe sessions`: a session made over ACP (the real binary) is listed,
//! shown as Markdown, removed; old sessions are pruned and recent ones kept;
//! nothing a session holds reaches the terminal as an escape sequence (issue
//! 29); an empty or too short id names no session (issue 29). The commands
//! run in process on the same data directory, and through the binary for
//! its wiring.

use std::path::{Path, PathBuf};
use std::time::Duration;

use lathe::cli::sessions::{SessionsCommand, SessionsError, run};

use crate::support::acp_client::{handshake, prompt};
use crate::support::harness::Harness;
use crate::support::mock_openai::{
    Reply, ev_finish, ev_reasoning, ev_role, ev_tool_call_args, ev_tool_call_start, text_reply,
};

/// Where the harness's agent saves sessions.
fn data_dir(h: &Harness) -> PathBuf {
    h.home.path().join(".local/share/lathe")
}

/// The variable that moves the default data folder (`$XDG_DATA_HOME/lathe`,
/// on Windows `%LOCALAPPDATA%\lathe`) and its value that makes it
/// [`data_dir`], for the binary without `LATHE_DATA_DIR`.
fn default_data_home(h: &Harness) -> (&'static str, PathBuf) {
    (if cfg!(windows) { "LOCALAPPDATA" } else { "XDG_DATA_HOME" }, h.home.path().join(".local/share"))
}

async fn sessions(command: SessionsCommand, data: &Path) -> (Result<(), SessionsError>, String, String) {
    sessions_to(command, data, false).await
}

/// [`sessions`], saying whether the output is a terminal.
async fn sessions_to(
    command: SessionsCommand,
    data: &Path,
    terminal: bool,
) -> (Result<(), SessionsError>, String, String) {
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let result = run(command, Some(data), &mut out, terminal, &mut err).await;
    (result, String::from_utf8(out).unwrap(), String::from_utf8(err).unwrap())
}

/// A session with one prompt and its answer; returns its id.
async fn prompted_session(h: &mut Harness, said: &str, answer: &str) -> String {
    let session = h.session().await;
    h.mock.push(text_reply(answer));
    let id = prompt(&mut h.agent, &session, said).await;
    let (_, response) = h.agent.response(id).await;
    assert_eq!(response["result"]["stopReason"], "end_turn", "{response}");
    session
}

async fn stop(h: &mut Harness) {
    h.agent.close_stdin();
    h.agent.wait_exit(Duration::from_secs(10)).await.expect("lathe exits when stdin closes");
}

#[tokio::test]
async fn a_session_is_listed_shown_and_removed() {
    let mut h = Harness::start().await;
    let session = prompted_session(&mut h, "Explain the build", "It uses cargo.").await;
    stop(&mut h).await;
    let data = data_dir(&h);

    let (result, listed, _) = sessions(SessionsCommand::List { cwd: None, json: false }, &data).await;
    result.unwrap();
    let line = listed.lines().find(|line| line.starts_with(&session)).unwrap_or_else(|| panic!("{listed}"));
    assert!(line.contains(&h.project.display().to_string()) && line.contains("Explain the build"), "{line}");
    let elsewhere = SessionsCommand::List { cwd: Some(h.home.path().to_path_buf()), json: false };
    let (_, listed, _) = sessions(elsewhere, &data).await;
    assert_eq!(listed.trim(), "no sessions", "--cwd filters");
    let (_, json, _) = sessions(SessionsCommand::List { cwd: Some(h.project.clone()), json: true }, &data).await;
    let meta: serde_json::Value = serde_json::from_str(json.trim()).unwrap();
    assert_eq!(meta["sessionId"], session.as_str());

    // A unique prefix is enough.
    let (result, shown, _) = sessions(SessionsCommand::Show { id: session[..12].to_owned(), raw: false }, &data).await;
    result.unwrap();
    assert!(shown.starts_with("# Explain the build"), "{shown}");
    let asked = shown.find("## User\n\nExplain the build").unwrap_or_else(|| panic!("{shown}"));
    let answered = shown.find("## Assistant\n\nIt uses cargo.").unwrap_or_else(|| panic!("{shown}"));
    assert!(asked < answered);

    let (result, out, _) = sessions(SessionsCommand::Rm { ids: vec![session.clone()] }, &data).await;
    result.unwrap();
    assert_eq!(out.trim(), format!("removed {session}"));
    let (_, listed, _) = sessions(SessionsCommand::List { cwd: None, json: false }, &data).await;
    assert_eq!(listed.trim(), "no sessions");
    let (result, _, err) = sessions(SessionsCommand::Rm { ids: vec![session.clone()] }, &data).await;
    assert!(matches!(result, Err(SessionsError::Partly(1))), "{result:?}");
    assert!(err.contains("no stored session"), "{err}");
    let (result, _, _) = sessions(SessionsCommand::Show { id: session, raw: false }, &data).await;
    assert!(result.unwrap_err().to_string().contains("no stored session"));
}

#[tokio::test]
async fn prune_removes_only_what_is_older() {
    let mut h = Harness::start().await;
    let old = prompted_session(&mut h, "Old question", "Old answer.").await;
    let recent = prompted_session(&mut h, "New question", "New answer.").await;
    stop(&mut h).await;
    let data = data_dir(&h);
    // Last used long ago (the store keeps this time in the session's metadata).
    let meta_path = data.join("sessions").join(&old).join("meta.json");
    let mut meta: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&meta_path).unwrap()).unwrap();
    meta["updatedAt"] = "2020-01-01T00:00:00Z".into();
    std::fs::write(&meta_path, meta.to_string()).unwrap();

    let month = Duration::from_secs(30 * 24 * 3600);
    let (result, out, _) = sessions(SessionsCommand::Prune { older_than: month, dry_run: true }, &data).await;
    result.unwrap();
    assert!(out.contains(&format!("would remove {old}")) && !out.contains(&recent), "{out}");
    assert!(meta_path.exists(), "a dry run removes nothing");

    let (result, out, _) = sessions(SessionsCommand::Prune { older_than: month, dry_run: false }, &data).await;
    result.unwrap();
    assert!(out.contains(&format!("removed {old}")) && out.contains("1 session removed"), "{out}");
    let (_, listed, _) = sessions(SessionsCommand::List { cwd: None, json: false }, &data).await;
    assert!(listed.contains(&recent) && !listed.contains(&old), "{listed}");
}

/// The binary: `lathe sessions list` and `show` on the default data directory.
#[tokio::test]
async fn the_binary_lists_and_shows() {
    let mut h = Harness::start().await;
    let session = prompted_session(&mut h, "Through the binary", "Yes.").await;
    stop(&mut h).await;
    let lathe = |args: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_lathe"))
            .args(args)
            .env("HOME", h.home.path())
            .env(default_data_home(&h).0, default_data_home(&h).1)
            .env_remove("LATHE_DATA_DIR")
            .env_remove("LATHE_TRACE")
            .output()
            .unwrap()
    };
    let listed = lathe(&["sessions", "list"]);
    assert!(listed.status.success(), "{}", String::from_utf8_lossy(&listed.stderr));
    assert!(String::from_utf8_lossy(&listed.stdout).contains(&session));
    let shown = lathe(&["sessions", "show", &session]);
    assert!(String::from_utf8_lossy(&shown.stdout).contains("Through the binary"));
    let missing = lathe(&["sessions", "show", "sess_nope"]);
    assert_eq!(missing.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&missing.stderr).contains("no stored session sess_nope"));
}

/// A session whose prompt never reached a model is not kept (issue 13):
/// closed, or left when lathe exits, it leaves no folder, and neither does
/// one whose only prompt the endpoint refused. Until then it is a session
/// like any other in this process: listed, and loadable right after
/// `session/new`. One the model answered is kept.
#[tokio::test]
async fn a_session_never_prompted_leaves_nothing() {
    let mut h = Harness::start().await;
    let sessions_dir = data_dir(&h).join("sessions");
    let closed = h.session().await;
    let id = h.agent.request("session/new", serde_json::json!({"cwd": h.project, "mcpServers": []})).await;
    let left = h.agent.response(id).await.1["result"]["sessionId"].as_str().unwrap().to_owned();
    let kept = prompted_session_in(&mut h, "Keep me", "Kept.").await;
    let refused = h.session().await;
    h.mock.push(crate::support::mock_openai::Reply::error(401, "invalid api key"));
    let id = prompt(&mut h.agent, &refused, "Nobody will read this").await;
    let (_, response) = h.agent.response(id).await;
    assert!(response.get("error").is_some(), "the refused request fails the prompt: {response}");

    for session in [&closed, &refused] {
        let id = h.agent.request("session/close", serde_json::json!({"sessionId": session})).await;
        assert_eq!(h.agent.response(id).await.1["result"], serde_json::json!({}));
    }
    assert!(!sessions_dir.join(&closed).exists(), "closed without a prompt: nothing on disk");
    assert!(!sessions_dir.join(&refused).exists(), "its prompt never reached a model: nothing on disk");

    // Still open: listed, and loadable in this process (ACP's new then load).
    let id = h.agent.request("session/list", serde_json::json!({})).await;
    let (_, listed) = h.agent.response(id).await;
    let listed: Vec<&str> =
        listed["result"]["sessions"].as_array().unwrap().iter().map(|s| s["sessionId"].as_str().unwrap()).collect();
    assert!(listed.contains(&left.as_str()) && listed.contains(&kept.as_str()), "{listed:?}");
    assert!(!listed.contains(&closed.as_str()) && !listed.contains(&refused.as_str()), "{listed:?}");
    let params = serde_json::json!({"sessionId": left, "cwd": h.project, "mcpServers": []});
    let id = h.agent.request("session/load", params).await;
    let (_, loaded) = h.agent.response(id).await;
    assert!(loaded.get("result").is_some(), "{loaded}");
    assert!(!sessions_dir.join(&left).exists());

    stop(&mut h).await;
    assert!(!sessions_dir.join(&left).exists(), "left when lathe exited without a prompt: nothing on disk");
    assert!(sessions_dir.join(&kept).join("meta.json").exists(), "a prompted session is kept");
    let (_, listed, _) = sessions(SessionsCommand::List { cwd: None, json: false }, &data_dir(&h)).await;
    assert_eq!(listed.lines().count(), 1, "{listed}");
    assert!(listed.starts_with(&kept));
}

/// [`prompted_session`] on an agent already initialized.
async fn prompted_session_in(h: &mut Harness, said: &str, answer: &str) -> String {
    let id = h.agent.request("session/new", serde_json::json!({"cwd": h.project, "mcpServers": []})).await;
    let (_, response) = h.agent.response(id).await;
    let session = response["result"]["sessionId"].as_str().unwrap().to_owned();
    h.mock.push(text_reply(answer));
    let id = prompt(&mut h.agent, &session, said).await;
    let (_, response) = h.agent.response(id).await;
    assert_eq!(response["result"]["stopReason"], "end_turn", "{response}");
    session
}

/// `lathe completions <shell>` and `lathe man` print what clap_complete and
/// clap_mangen make of the real command line (every subcommand in it);
/// `lathe init` writes to `--config` once and refuses the second time.
#[test]
fn completions_man_and_init_through_the_binary() {
    let home = tempfile::tempdir().unwrap();
    let lathe = |args: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_lathe"))
            .args(args)
            .env("HOME", home.path())
            // The config folder's variable: `%APPDATA%` on Windows.
            .env(if cfg!(windows) { "APPDATA" } else { "XDG_CONFIG_HOME" }, home.path().join(".config"))
            .env_remove("LATHE_CONFIG")
            .env_remove("LATHE_TRACE")
            .output()
            .unwrap()
    };
    for shell in ["bash", "zsh", "fish"] {
        let script = lathe(&["completions", shell]);
        assert!(script.status.success(), "{shell}");
        let script = String::from_utf8(script.stdout).unwrap();
        for word in ["doctor", "sessions", "prune", "older-than", "preset"] {
            assert!(script.contains(word), "{shell} completion lacks {word}");
        }
    }
    let man = lathe(&["man"]);
    let man = String::from_utf8(man.stdout).unwrap();
    assert!(man.starts_with(".ie") && man.contains(".TH lathe 1") && man.contains("doctor"), "{man:.200}");

    let first = lathe(&["init", "--preset", "vllm"]);
    assert!(first.status.success(), "{}", String::from_utf8_lossy(&first.stderr));
    let written = home.path().join(".config").join("lathe").join("config.toml");
    assert!(String::from_utf8_lossy(&first.stdout).contains(&written.display().to_string()));
    assert!(std::fs::read_to_string(&written).unwrap().contains("default_model = \"vllm\""));
    let again = lathe(&["init", "--preset", "ollama"]);
    assert_eq!(again.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&again.stderr).contains("already exists"));
    assert!(std::fs::read_to_string(&written).unwrap().contains("default_model = \"vllm\""), "untouched");
    let unknown = lathe(&["init", "--preset", "nope", "--print"]);
    assert_eq!(unknown.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&unknown.stderr).contains("openrouter"));
}

/// Every family of terminal escape a hostile model, file or page can send:
/// OSC 52 (clipboard write), OSC 0 (window title), OSC 8 (hyperlink), CSI
/// (clear screen, cursor home and moves, colour, erase line), C1 controls
/// (CSI, OSC, ST, NEL as single characters), a bare ESC and ESC sequences
/// (save/restore cursor, full reset), BEL, backspace, carriage return, DEL,
/// a bidi override and zero-width characters.
const ESCAPES: &str = "osc52 \u{1b}]52;c;cHduZWQ=\u{7} osc0 \u{1b}]0;pwned title\u{7} \
                       osc8 \u{1b}]8;;https://evil.example/\u{1b}\\click\u{1b}]8;;\u{1b}\\ \
                       csi \u{1b}[2J\u{1b}[H\u{1b}[5A\u{1b}[10;10H\u{1b}[31mred\u{1b}[0m\u{1b}[2K \
                       c1 \u{9b}2J \u{9d}0;c1 title\u{9c} \u{85}nel \
                       bare \u{1b} esc7 \u{1b}7 esc8 \u{1b}8 reset \u{1b}c bel \u{7} bs x\u{8}\u{8} cr \rover \
                       del \u{7f} bidi \u{202e}gnp.exe zw a\u{200b}b\u{2060}c tag \u{e0041}";

/// A character a terminal would act on or hide rather than show (line
/// breaks and tabs aside).
fn hidden(c: char) -> bool {
    (c.is_control() && c != '\n' && c != '\t')
        || matches!(c, '\u{200b}'..='\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2060}'..='\u{2069}' | '\u{e0000}'..='\u{e007f}')
}

fn assert_nothing_hidden(what: &str, text: &str) {
    if let Some(c) = text.chars().find(|c| hidden(*c)) {
        panic!("{what} printed {c:?} raw: {text:?}");
    }
}

/// Issue 29: a session whose directory name, title (from the prompt),
/// reasoning, answer and tool result (a file read from the workspace) hold
/// every escape family: `list`, `list --json`, `show`, `rm` and `prune`
/// print none of it raw, in process and through the binary. `show` shows
/// each as an escape (`\u{1b}]52;`) and keeps the text; `list --json` is the
/// same JSON value with `\u` escapes. `show --raw` writes it as it is to a
/// pipe and refuses a terminal.
#[tokio::test]
async fn no_escape_from_a_session_reaches_the_terminal() {
    let mut h = Harness::start().await;
    // Windows names hold no C0 controls (ESC, BEL): there the folder's name
    // carries C1 controls and a bidi override, which it allows.
    let (folder, folder_shown) = if cfg!(windows) {
        ("checkout \u{9d}0;dir\u{9c}\u{9b}2J\u{202e}", "\\u{9d}0;dir")
    } else {
        ("checkout \u{1b}]0;dir\u{7}\u{1b}[2J", "\\u{1b}]0;dir")
    };
    let project = h.project.join(folder);
    std::fs::create_dir_all(&project).unwrap();
    std::fs::write(project.join("notes.txt"), format!("notes: {ESCAPES}\n")).unwrap();
    let session = handshake(&mut h.agent, serde_json::json!({}), &project).await;
    h.mock.push(Reply::Sse(vec![
        ev_role(),
        ev_reasoning(&format!("thinking {ESCAPES}")),
        ev_tool_call_start(0, "call_r", "read_file"),
        ev_tool_call_args(0, &serde_json::json!({"path": "notes.txt"}).to_string()),
        ev_finish("tool_calls"),
    ]));
    h.mock.push(text_reply(&format!("answer {ESCAPES}")));
    let title = "\u{1b}]0;pwned\u{7}\u{1b}[2J\u{9b}31m\u{202e} fix it";
    let id = prompt(&mut h.agent, &session, &format!("{title}\nand also {ESCAPES}")).await;
    let (_, response) = h.agent.response(id).await;
    assert_eq!(response["result"]["stopReason"], "end_turn", "{response}");
    stop(&mut h).await;
    let data = data_dir(&h);

    let (result, listed, _) = sessions(SessionsCommand::List { cwd: None, json: false }, &data).await;
    result.unwrap();
    assert_nothing_hidden("list", &listed);
    assert!(listed.contains("\\u{1b}]0;pwned\\u{7}") && listed.contains(folder_shown), "{listed}");

    let (result, json, _) = sessions(SessionsCommand::List { cwd: None, json: true }, &data).await;
    result.unwrap();
    assert_nothing_hidden("list --json", &json);
    let meta: serde_json::Value = serde_json::from_str(json.trim()).unwrap();
    assert_eq!(meta["title"], title, "the same value, escaped as JSON");
    assert_eq!(meta["cwd"], project.to_str().unwrap());

    let show = || SessionsCommand::Show { id: session.clone(), raw: false };
    let (result, shown, _) = sessions(show(), &data).await;
    result.unwrap();
    assert_nothing_hidden("show", &shown);
    for said in ["thinking osc52", "answer osc52", "notes: osc52", "and also osc52"] {
        let at = shown.find(said).unwrap_or_else(|| panic!("{said:?} in {shown}"));
        assert!(shown[at..].starts_with(&format!("{said} \\u{{1b}}]52;c;cHduZWQ=\\u{{7}} osc0")), "{}", &shown[at..]);
    }
    // On a terminal too: `show` escapes wherever it writes.
    let (result, on_terminal, _) = sessions_to(show(), &data, true).await;
    result.unwrap();
    assert_eq!(on_terminal, shown);

    let raw = || SessionsCommand::Show { id: session.clone(), raw: true };
    let (result, piped, _) = sessions_to(raw(), &data, false).await;
    result.unwrap();
    assert!(piped.contains(&format!("answer {ESCAPES}")), "--raw to a pipe: as said");
    let (result, written, _) = sessions_to(raw(), &data, true).await;
    assert!(matches!(result, Err(SessionsError::RawToTerminal)), "{result:?}");
    assert!(written.is_empty(), "{written:?}");

    let month = Duration::from_secs(30 * 24 * 3600);
    let (result, pruned, _) = sessions(SessionsCommand::Prune { older_than: month, dry_run: true }, &data).await;
    result.unwrap();
    assert_nothing_hidden("prune", &pruned);

    // Through the binary: stdout is a pipe here, and it is escaped all the same.
    let lathe = |args: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_lathe"))
            .args(args)
            .env("HOME", h.home.path())
            .env(default_data_home(&h).0, default_data_home(&h).1)
            .env_remove("LATHE_DATA_DIR")
            .env_remove("LATHE_TRACE")
            .output()
            .unwrap()
    };
    for args in [&["sessions", "list"][..], &["sessions", "list", "--json"], &["sessions", "show", &session]] {
        let output = lathe(args);
        assert!(output.status.success(), "{args:?}: {}", String::from_utf8_lossy(&output.stderr));
        assert_nothing_hidden(&format!("{args:?}"), &String::from_utf8(output.stdout).unwrap());
    }
    let raw = lathe(&["sessions", "show", "--raw", &session]);
    assert!(String::from_utf8(raw.stdout).unwrap().contains(&format!("answer {ESCAPES}")));

    let (result, removed, err) = sessions(SessionsCommand::Rm { ids: vec![session.clone()] }, &data).await;
    result.unwrap();
    assert_nothing_hidden("rm", &(removed + &err));
}

/// Issue 29: an empty or blank id, and a prefix with fewer than 4
/// characters after `sess_`, name no session, for `rm` and `show` alike; the
/// only session there is stays. Four characters are enough.
#[tokio::test]
async fn an_empty_or_short_id_names_no_session() {
    let mut h = Harness::start().await;
    let session = prompted_session(&mut h, "The only one", "Yes.").await;
    stop(&mut h).await;
    let data = data_dir(&h);
    let short = &session[..8];
    for given in ["", " ", "\t\n", "s", "sess", "sess_", short] {
        let (result, out, err) = sessions(SessionsCommand::Rm { ids: vec![given.to_owned()] }, &data).await;
        assert!(matches!(result, Err(SessionsError::Partly(1))), "rm {given:?}: {result:?}");
        assert!(out.is_empty(), "rm {given:?}: {out}");
        assert!(err.contains("empty session id") || err.contains("too short"), "rm {given:?}: {err}");
        let (result, out, _) = sessions(SessionsCommand::Show { id: given.to_owned(), raw: false }, &data).await;
        let refused = matches!(result, Err(SessionsError::EmptyId | SessionsError::TooShort(_)));
        assert!(refused, "show {given:?}: {result:?}");
        assert!(out.is_empty(), "show {given:?}: {out}");
    }
    let (_, listed, _) = sessions(SessionsCommand::List { cwd: None, json: false }, &data).await;
    assert!(listed.starts_with(&session), "still there: {listed}");

    let (result, out, _) = sessions(SessionsCommand::Rm { ids: vec![session[..9].to_owned()] }, &data).await;
    result.unwrap();
    assert_eq!(out.trim(), format!("removed {session}"));
}
