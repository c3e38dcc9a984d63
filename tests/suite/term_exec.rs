//! `lathe exec` (issue 13): the real binary against the mock model. Exit
//! codes for each way a turn ends; the prompt from stdin; stdout carrying
//! only the answer; the non-TTY default mode refusing a write; `--json`
//! giving exactly the `session/update`s an ACP client gets for the same
//! scripted turn; sessions shared with the editor (made by exec and loaded
//! over ACP with their history, and an editor's session resumed); turns
//! undone, listed and redone by `/undo`, `/checkpoints` and `/redo`; SIGINT
//! during a turn giving 130 with the session saved and no child left.

use std::path::PathBuf;
use std::process::{Output, Stdio};
use std::time::Duration;

use serde_json::{Value, json};
use tempfile::TempDir;

use crate::support::acp_client::{AgentProcess, agent_text, handshake, initialize, prompt, updates_of_kind};
use crate::support::mock_openai::{
    MockOpenAi, Reply, Step, ev_finish, ev_reasoning, ev_role, ev_text, ev_usage, text_reply, tool_call_reply,
    tool_result,
};
use crate::support::write_config;

/// A temporary home and project, a config pointing at the mock, and the
/// lathe binary run in the project with that home.
pub(crate) struct Term {
    pub mock: MockOpenAi,
    pub project: PathBuf,
    pub config: PathBuf,
    pub home: TempDir,
}

impl Term {
    pub async fn start(extra_toml: &str) -> Term {
        let mock = MockOpenAi::start().await;
        let home = tempfile::tempdir().unwrap();
        let project = home.path().join("project");
        std::fs::create_dir_all(&project).unwrap();
        let project = lathe::platform::paths::canonical(&project).unwrap();
        let config = write_config(home.path(), &mock.base_url(), extra_toml);
        Term { mock, project, config, home }
    }

    /// `lathe --config <config> <args>` in the project, with the test home's
    /// environment (nothing of the developer's leaks in).
    pub fn std_command(&self, args: &[&str]) -> std::process::Command {
        let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_lathe"));
        command.arg("--config").arg(&self.config).args(args).current_dir(&self.project);
        for (name, _) in std::env::vars_os() {
            let text = name.to_string_lossy();
            if crate::support::agent_env::scrubbed(&text) || text == "NO_COLOR" {
                command.env_remove(&name);
            }
        }
        // The one description of an agent's environment (on Windows it also
        // moves %APPDATA%, %LOCALAPPDATA% and the sessions under the home).
        command.envs(crate::support::agent_env::environment(self.home.path(), &[]));
        command
    }

    /// Runs `lathe exec <args>` to the end, `stdin` piped in (or none).
    pub async fn exec(&self, args: &[&str], stdin: Option<&str>) -> Output {
        let mut command = tokio::process::Command::from(self.std_command(&[&["exec"], args].concat()));
        command.stdin(if stdin.is_some() { Stdio::piped() } else { Stdio::null() });
        command.stdout(Stdio::piped()).stderr(Stdio::piped()).kill_on_drop(true);
        let mut child = command.spawn().unwrap();
        if let Some(text) = stdin {
            use tokio::io::AsyncWriteExt;
            let mut pipe = child.stdin.take().unwrap();
            pipe.write_all(text.as_bytes()).await.unwrap();
            drop(pipe);
        }
        tokio::time::timeout(Duration::from_secs(60), child.wait_with_output())
            .await
            .expect("lathe exec finished")
            .unwrap()
    }

    /// Runs `lathe exec <args>` to the end in a session of its own (`setsid`),
    /// so it has no controlling terminal whatever the test's is: no one to ask.
    pub async fn exec_without_terminal(&self, args: &[&str]) -> Output {
        let inner = self.std_command(&[&["exec"], args].concat());
        // Windows has no controlling terminal to shed: with stdin not a
        // console, nobody can be asked.
        let mut command = if cfg!(windows) {
            tokio::process::Command::new(inner.get_program())
        } else {
            let mut setsid = tokio::process::Command::new("setsid");
            setsid.arg("-w").arg(inner.get_program());
            setsid
        };
        command.args(inner.get_args());
        for (name, value) in inner.get_envs() {
            match value {
                Some(value) => command.env(name, value),
                None => command.env_remove(name),
            };
        }
        if let Some(dir) = inner.get_current_dir() {
            command.current_dir(dir);
        }
        command.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).kill_on_drop(true);
        let child = command.spawn().unwrap();
        tokio::time::timeout(Duration::from_secs(60), child.wait_with_output())
            .await
            .expect("lathe exec finished")
            .unwrap()
    }

    /// The ids of the saved sessions.
    pub fn saved_sessions(&self) -> Vec<String> {
        let dir = self.home.path().join(".local/share/lathe/sessions");
        let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
        entries
            .flatten()
            .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect()
    }

    /// An ACP agent on the same home and config.
    pub fn agent(&self) -> AgentProcess {
        AgentProcess::spawn(&["--config", &self.config.to_string_lossy()], &[], self.home.path())
    }
}

fn code(output: &Output) -> i32 {
    output.status.code().unwrap_or_else(|| panic!("exited by a signal: {:?}", output.status))
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The user messages the model was sent in request `n`.
fn user_texts(mock: &MockOpenAi, n: usize) -> Vec<String> {
    let request = &mock.chat_requests()[n];
    request.body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "user")
        .map(|m| m["content"].as_str().map(str::to_owned).unwrap_or_else(|| m["content"].to_string()))
        .collect()
}

fn finishing(reason: &str, text: &str) -> Reply {
    Reply::Sse(vec![ev_role(), ev_text(text), ev_finish(reason), ev_usage(10, 5), Step::Done])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exit_codes_follow_the_stop_reason() {
    let term = Term::start("[agent]\nmax_model_requests_per_turn = 1\n").await;

    term.mock.push(text_reply("All done."));
    let output = term.exec(&["say done"], None).await;
    assert_eq!(code(&output), 0, "end_turn: {}", text(&output.stderr));
    assert_eq!(text(&output.stdout), "All done.\n", "stdout is the answer and nothing else");

    term.mock.push(finishing("length", "cut sho"));
    let output = term.exec(&["write a lot"], None).await;
    assert_eq!(code(&output), 3, "max_tokens: {}", text(&output.stderr));
    assert!(text(&output.stdout).starts_with("cut sho"));
    assert!(text(&output.stderr).contains("output limit"), "{}", text(&output.stderr));

    term.mock.push(finishing("content_filter", ""));
    let output = term.exec(&["something bad"], None).await;
    assert_eq!(code(&output), 3, "refusal: {}", text(&output.stderr));

    // One model request per turn: a tool call uses it up.
    std::fs::write(term.project.join("a.txt"), "alpha\n").unwrap();
    term.mock.push(tool_call_reply(&[("call_r", "read_file", json!({"path": "a.txt"}))]));
    let output = term.exec(&["read a.txt"], None).await;
    assert_eq!(code(&output), 3, "max_turn_requests: {}", text(&output.stderr));
    assert!(text(&output.stderr).contains("max_turn_requests"), "{}", text(&output.stderr));

    term.mock.push(Reply::error(400, "bad request from the mock"));
    let output = term.exec(&["fail please"], None).await;
    assert_eq!(code(&output), 1, "error: {}", text(&output.stderr));
    assert!(text(&output.stderr).contains("bad request from the mock"), "{}", text(&output.stderr));
    assert!(output.stdout.is_empty(), "no answer on stdout: {}", text(&output.stdout));

    // Usage errors: an unknown model, an empty prompt, a mode that does not exist.
    let output = term.exec(&["--model", "nope", "hi"], None).await;
    assert_eq!(code(&output), 2, "{}", text(&output.stderr));
    assert!(text(&output.stderr).contains("nope") && text(&output.stderr).contains("mock"), "{}", text(&output.stderr));
    let output = term.exec(&[], Some("  \n")).await;
    assert_eq!(code(&output), 2, "{}", text(&output.stderr));
    let output = term.exec(&["--mode", "yolo", "hi"], None).await;
    assert_eq!(code(&output), 2, "{}", text(&output.stderr));
    assert_eq!(term.mock.chat_requests().len(), 5, "usage errors reach no model");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_prompt_comes_from_stdin_and_stdout_carries_only_the_answer() {
    let term = Term::start("").await;
    term.mock.push(Reply::Sse(vec![
        ev_role(),
        ev_reasoning("Let me think."),
        ev_text("The answer"),
        ev_text(" is 42."),
        ev_finish("stop"),
        Step::Done,
    ]));
    let output = term.exec(&[], Some("What is the answer?\nAsk nothing else.\n")).await;
    assert_eq!(code(&output), 0, "{}", text(&output.stderr));
    assert_eq!(user_texts(&term.mock, 0).last().unwrap(), "What is the answer?\nAsk nothing else.\n");
    assert_eq!(text(&output.stdout), "The answer is 42.\n");
    let stderr = text(&output.stderr);
    assert!(stderr.contains("Let me think."), "reasoning on stderr: {stderr}");
    assert!(!stderr.contains('\u{1b}'), "no colour when stderr is not a terminal: {stderr:?}");
}

/// Where a person reads stderr (`exec`, like `chat`), lathe's own info lines
/// are shown by default (issue 29; serving ACP logs warnings only);
/// `--log-level` and `RUST_LOG` still choose.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exec_logs_lathes_info_lines_by_default() {
    let term = Term::start("").await;
    let exec = |args: &[&str], rust_log: Option<&str>| {
        let mut command = term.std_command(&[&["exec"], args, &["say hi"]].concat());
        match rust_log {
            Some(filter) => command.env("RUST_LOG", filter),
            None => command.env_remove("RUST_LOG"),
        };
        let mut command = tokio::process::Command::from(command);
        command.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).kill_on_drop(true);
        async move {
            let output = tokio::time::timeout(Duration::from_secs(60), command.output()).await.unwrap().unwrap();
            assert_eq!(code(&output), 0, "{}", text(&output.stderr));
            text(&output.stderr)
        }
    };
    term.mock.push(text_reply("hi"));
    let stderr = exec(&[], None).await;
    assert!(stderr.contains(" INFO lathe"), "{stderr}");
    term.mock.push(text_reply("hi"));
    let stderr = exec(&["--log-level", "warn"], None).await;
    assert!(!stderr.contains("INFO"), "{stderr}");
    term.mock.push(text_reply("hi"));
    let stderr = exec(&[], Some("warn")).await;
    assert!(!stderr.contains("INFO"), "RUST_LOG: {stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_terminal_the_default_mode_refuses_a_write() {
    let term = Term::start("").await;
    term.mock.push(tool_call_reply(&[("call_w", "write_file", json!({"path": "new.txt", "content": "x\n"}))]));
    term.mock.push(text_reply("I could not write it."));
    let output = term.exec(&["create new.txt"], None).await;
    assert_eq!(code(&output), 0, "{}", text(&output.stderr));
    assert!(!term.project.join("new.txt").exists(), "nothing was written");
    let requests = term.mock.chat_requests();
    let result = tool_result(&requests[1].body, "call_w");
    assert!(result.to_lowercase().contains("read-only") || result.to_lowercase().contains("read only"), "{result}");
    assert!(text(&output.stderr).contains("▸ Create new.txt"), "the call is shown on stderr: {}", text(&output.stderr));

    // The same call in accept-edits mode writes.
    term.mock.push(tool_call_reply(&[("call_w2", "write_file", json!({"path": "new.txt", "content": "x\n"}))]));
    term.mock.push(text_reply("Written."));
    let output = term.exec(&["--mode", "accept-edits", "create new.txt"], None).await;
    assert_eq!(code(&output), 0, "{}", text(&output.stderr));
    assert_eq!(std::fs::read_to_string(term.project.join("new.txt")).unwrap(), "x\n");
    assert!(text(&output.stderr).contains("+1 -0"), "the diff is summed up: {}", text(&output.stderr));
}

/// Without a terminal there is no one to ask: `ask_user` fails at once and
/// the model hears so; `--mode plan` refuses a write without a question,
/// prints the plan on stdout and, with no one to approve it, stays in plan
/// mode (nothing is written).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_terminal_no_one_is_asked() {
    let term = Term::start("").await;
    let question = json!({"question": "Which file?", "choices": ["a.txt", "b.txt"]});
    term.mock.push(tool_call_reply(&[("call_q", "ask_user", question)]));
    term.mock.push(text_reply("I assumed a.txt."));
    let output = term.exec_without_terminal(&["pick a file"]).await;
    assert_eq!(code(&output), 0, "{}", text(&output.stderr));
    assert_eq!(text(&output.stdout), "I assumed a.txt.\n");
    let told = tool_result(&term.mock.chat_requests()[1].body, "call_q");
    assert!(told.starts_with("No one to ask"), "{told}");

    let plan = "# Plan\n\n1. Write notes.txt\n";
    term.mock.push(tool_call_reply(&[("call_w", "write_file", json!({"path": "notes.txt", "content": "x\n"}))]));
    term.mock.push(tool_call_reply(&[("call_x", "exit_plan_mode", json!({"plan": plan}))]));
    term.mock.push(text_reply("That is the plan."));
    let output = term.exec_without_terminal(&["--mode", "plan", "write the notes"]).await;
    assert_eq!(code(&output), 0, "{}", text(&output.stderr));
    assert!(text(&output.stdout).starts_with("# Plan\n\n1. Write notes.txt\n"), "{}", text(&output.stdout));
    assert!(!term.project.join("notes.txt").exists());
    let requests = term.mock.chat_requests();
    assert!(tool_result(&requests[3].body, "call_w").contains("plan mode"));
    let told = tool_result(&requests[4].body, "call_x");
    assert!(told.starts_with("No one can approve the plan here"), "{told}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_plan_is_a_checklist_on_stderr() {
    let term = Term::start("").await;
    let plan = json!({"plan": [
        {"content": "Read the parser", "status": "completed"},
        {"content": "Fix the off-by-one", "status": "in_progress"},
        {"content": "Add a test", "status": "pending"},
    ]});
    term.mock.push(tool_call_reply(&[("call_plan", "update_plan", plan)]));
    term.mock.push(text_reply("Working on it."));
    let output = term.exec(&["fix the parser"], None).await;
    assert_eq!(code(&output), 0, "{}", text(&output.stderr));
    let stderr = text(&output.stderr);
    assert!(stderr.contains("Plan:\n  [x] Read the parser\n  [~] Fix the off-by-one\n  [ ] Add a test\n"), "{stderr}");
    assert_eq!(text(&output.stdout), "Working on it.\n");
}

/// The same scripted turn, for exec --json and for an ACP client.
fn scripted_turn(mock: &MockOpenAi) {
    mock.push(Reply::Sse(vec![
        ev_role(),
        ev_reasoning("Reading first."),
        ev_text("Let me look."),
        crate::support::mock_openai::ev_tool_call_start(0, "call_read", "read_file"),
        crate::support::mock_openai::ev_tool_call_args(0, r#"{"path":"notes.txt"}"#),
        ev_finish("tool_calls"),
        ev_usage(100, 20),
        Step::Done,
    ]));
    mock.push(text_reply("The notes say hello."));
}

/// Fields that differ between two runs of the same turn: ids lathe makes
/// up, and times.
fn normalized(mut update: Value) -> Value {
    if let Some(object) = update.as_object_mut() {
        object.remove("messageId");
        object.remove("updatedAt");
    }
    update
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_events_are_what_an_acp_client_gets() {
    let term = Term::start("").await;
    std::fs::write(term.project.join("notes.txt"), "hello\n").unwrap();

    scripted_turn(&term.mock);
    let output = term.exec(&["--json", "--mode", "ask", "What do the notes say?"], None).await;
    assert_eq!(code(&output), 0, "{}", text(&output.stderr));
    let lines: Vec<Value> = text(&output.stdout)
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|err| panic!("not JSON ({err}): {line}")))
        .collect();
    let (last, events) = lines.split_last().unwrap();
    let session_id = last["sessionId"].as_str().unwrap();
    assert_eq!(last["stopReason"], "end_turn", "{last}");
    assert!(last["usage"]["inputTokens"].as_u64().is_some(), "{last}");
    for event in events {
        assert_eq!(event["sessionId"], session_id, "{event}");
    }
    let from_exec: Vec<Value> = events.iter().map(|e| normalized(e["update"].clone())).collect();

    let mut agent = term.agent();
    let acp_session = handshake(&mut agent, json!({}), &term.project).await;
    scripted_turn(&term.mock);
    let id = prompt(&mut agent, &acp_session, "What do the notes say?").await;
    let (messages, response) = agent.response(id).await;
    assert_eq!(response["result"]["stopReason"], "end_turn", "{response}");
    let from_acp: Vec<Value> = messages
        .iter()
        .filter(|m| m["method"] == "session/update")
        // The editor also gets the session's checkpoint list (`_meta` only):
        // state for its undo menu; the terminal keeps the checkpoints but has
        // no menu to send the list to.
        .filter(|m| m["params"]["update"]["_meta"]["lathe"]["checkpoints"].is_null())
        .map(|m| normalized(m["params"]["update"].clone()))
        .collect();
    pretty_assertions::assert_eq!(from_exec, from_acp);
    let kinds: Vec<&str> = from_exec.iter().filter_map(|u| u["sessionUpdate"].as_str()).collect();
    for kind in ["session_info_update", "agent_thought_chunk", "agent_message_chunk", "tool_call", "tool_call_update"] {
        assert!(kinds.contains(&kind), "{kind} among {kinds:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_from_exec_loads_in_an_editor_and_an_editors_session_resumes_in_exec() {
    let term = Term::start("").await;
    term.mock.push(text_reply("First answer from exec."));
    let output = term.exec(&["first question"], None).await;
    assert_eq!(code(&output), 0, "{}", text(&output.stderr));
    let sessions = term.saved_sessions();
    assert_eq!(sessions.len(), 1, "{sessions:?}");
    let from_exec = sessions[0].clone();

    // Listed and loaded over ACP, its history replayed.
    let mut agent = term.agent();
    initialize(&mut agent, json!({})).await;
    let id = agent.request("session/list", json!({"cwd": term.project})).await;
    let (_, listed) = agent.response(id).await;
    assert_eq!(listed["result"]["sessions"][0]["sessionId"], from_exec.as_str(), "{listed}");
    assert_eq!(listed["result"]["sessions"][0]["title"], "first question", "{listed}");
    let id =
        agent.request("session/load", json!({"sessionId": from_exec, "cwd": term.project, "mcpServers": []})).await;
    let (replay, loaded) = agent.response(id).await;
    assert!(loaded.get("result").is_some(), "{loaded}");
    assert_eq!(agent_text(&replay), "First answer from exec.");
    let user: Vec<&str> =
        updates_of_kind(&replay, "user_message_chunk").iter().filter_map(|u| u["content"]["text"].as_str()).collect();
    assert_eq!(user, ["first question"]);
    // The editor goes on with it: the model sees the exec turn.
    term.mock.push(text_reply("Second answer, in the editor."));
    let id = prompt(&mut agent, &from_exec, "second question").await;
    let (_, response) = agent.response(id).await;
    assert_eq!(response["result"]["stopReason"], "end_turn", "{response}");
    assert_eq!(user_texts(&term.mock, 1), ["first question", "second question"]);
    // The editor closes lathe's input and lathe ends, its journal written
    // (dropping the process killed it, and under load exec could then find
    // the second turn not yet on disk).
    agent.close_stdin();
    let exit = agent.wait_exit(std::time::Duration::from_secs(30)).await.expect("lathe ends on EOF");
    assert!(exit.success(), "{exit:?}");

    // And exec resumes the editor's session (--resume ID), and the last one here (--continue).
    term.mock.push(text_reply("Third."));
    let output = term.exec(&["--resume", &from_exec, "third question"], None).await;
    assert_eq!(code(&output), 0, "{}", text(&output.stderr));
    assert_eq!(user_texts(&term.mock, 2), ["first question", "second question", "third question"]);
    term.mock.push(text_reply("Fourth."));
    let output = term.exec(&["--continue", "fourth question"], None).await;
    assert_eq!(code(&output), 0, "{}", text(&output.stderr));
    assert_eq!(user_texts(&term.mock, 3).len(), 4, "--continue took the last session in this directory");
    assert_eq!(term.saved_sessions().len(), 1, "no new session was made");

    let output = term.exec(&["--resume", "sess_does_not_exist", "hi"], None).await;
    assert_eq!(code(&output), 2, "{}", text(&output.stderr));

    // `lathe sessions` shows it (exec's and the editor's turns, in order) and removes it.
    let sessions = |args: &[&str]| {
        let mut command = tokio::process::Command::from(term.std_command(&[&["sessions"], args].concat()));
        command.stdin(Stdio::null()).output()
    };
    let shown = sessions(&["show", &from_exec]).await.unwrap();
    assert_eq!(code(&shown), 0, "{}", text(&shown.stderr));
    let markdown = text(&shown.stdout);
    let order: Vec<usize> = ["first question", "First answer from exec.", "second question", "Fourth."]
        .iter()
        .map(|said| markdown.find(said).unwrap_or_else(|| panic!("{said:?} in {markdown}")))
        .collect();
    assert!(order.is_sorted(), "in the order said: {markdown}");
    let removed = sessions(&["rm", &from_exec]).await.unwrap();
    assert_eq!(code(&removed), 0, "{}", text(&removed.stderr));
    assert!(term.saved_sessions().is_empty(), "removed from the store");
    let listed = sessions(&["list"]).await.unwrap();
    assert!(!text(&listed.stdout).contains(&from_exec), "{}", text(&listed.stdout));
}

/// SIGINT mid-turn and no child left: a signal, `/proc` and `sh`'s `$$`, Unix's (Windows has no signals to send).
#[cfg(unix)]
pub(crate) mod sigint {
    use std::path::Path;

    use super::*;
    use crate::support::acp_client::DEFAULT_TIMEOUT;

    /// Whether `pid` is gone (or a zombie nobody reaped).
    pub(crate) fn dead(pid: i32) -> bool {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        stat.is_empty() || stat.rsplit(')').next().is_some_and(|rest| rest.trim_start().starts_with('Z'))
    }

    /// Waits (up to 10 s) for `pid` to die; whether it did. The kill is sent
    /// when the turn is cancelled; the kernel takes its moment to end the process.
    pub(crate) async fn dies(pid: i32) -> bool {
        crate::support::clock::eventually(Duration::from_secs(10), || dead(pid)).await
    }

    /// Waits until `path` holds a pid, then returns it.
    pub(crate) async fn wait_for_pid(path: &Path) -> i32 {
        let read = || std::fs::read_to_string(path).ok().and_then(|text| text.trim().parse().ok());
        crate::support::clock::poll_until(
            &format!("the command never started: {}", path.display()),
            Duration::from_secs(30),
            || read().is_some(),
        )
        .await;
        read().unwrap()
    }

    /// A shell call that writes its pid and sleeps for five minutes.
    pub(crate) fn sleeper(call_id: &str) -> Reply {
        let mut steps = vec![ev_role(), ev_text("Starting the long job.")];
        steps.push(crate::support::mock_openai::ev_tool_call_start(0, call_id, "shell"));
        let args = json!({"command": "echo $$ > sleeper.pid; exec sleep 300"}).to_string();
        steps.push(crate::support::mock_openai::ev_tool_call_args(0, &args));
        steps.extend([ev_finish("tool_calls"), Step::Done]);
        Reply::Sse(steps)
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn sigint_cancels_the_turn_saves_the_session_and_leaves_no_child() {
        let term = Term::start("").await;
        term.mock.push(sleeper("call_sleep"));
        let mut command = tokio::process::Command::from(term.std_command(&["exec", "--mode", "full-auto", "build it"]));
        command.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).kill_on_drop(true);
        let child = command.spawn().unwrap();
        let lathe = child.id().unwrap();
        let sleeper_pid = wait_for_pid(&term.project.join("sleeper.pid")).await;
        assert!(!dead(sleeper_pid));
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(lathe as i32), nix::sys::signal::Signal::SIGINT).unwrap();
        let output = tokio::time::timeout(Duration::from_secs(30), child.wait_with_output()).await.unwrap().unwrap();
        assert_eq!(code(&output), 130, "{}", text(&output.stderr));
        assert_eq!(text(&output.stdout), "Starting the long job.\n", "the partial answer was shown");
        assert!(dies(sleeper_pid).await, "the shell command was killed");
        assert!(text(&output.stderr).contains("cancelled"), "{}", text(&output.stderr));

        // The session is saved with the partial answer and the cancelled call.
        let sessions = term.saved_sessions();
        assert_eq!(sessions.len(), 1);
        let mut agent = term.agent();
        initialize(&mut agent, json!({})).await;
        let id = agent
            .request("session/load", json!({"sessionId": sessions[0], "cwd": term.project, "mcpServers": []}))
            .await;
        let (replay, loaded) = agent.response(id).await;
        assert!(loaded.get("result").is_some(), "{loaded}");
        assert_eq!(agent_text(&replay), "Starting the long job.");
        assert_eq!(crate::support::acp_client::final_status(&replay, "call_sleep"), "failed");
        // The model sees the interrupted turn next time.
        term.mock.push(text_reply("ok"));
        let id = prompt(&mut agent, &sessions[0], "go on").await;
        let (_, response) = agent.response(id).await;
        assert_eq!(response["result"]["stopReason"], "end_turn", "{response}");
        let body = &term.mock.chat_requests()[1].body;
        assert!(
            tool_result(body, "call_sleep").to_lowercase().contains("cancel"),
            "{}",
            tool_result(body, "call_sleep")
        );
        let _ = DEFAULT_TIMEOUT;
    }
}

/// `--trace` works with `exec` too: the model's request, response and
/// stream events are in the file; there is no JSON-RPC to trace.
#[tokio::test]
async fn exec_is_traced() {
    let term = Term::start("").await;
    term.mock.push(text_reply("Traced from the terminal."));
    let trace = term.home.path().join("exec-trace.jsonl");
    let trace_arg = trace.to_string_lossy().into_owned();
    let output = term.exec(&["--trace", &trace_arg, "say it"], None).await;
    assert_eq!(code(&output), 0, "{}", text(&output.stderr));
    assert_eq!(text(&output.stdout).trim(), "Traced from the terminal.");
    let records: Vec<Value> = std::fs::read_to_string(&trace)
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|err| panic!("{err}: {line}")))
        .collect();
    assert!(records.iter().all(|r| r["type"] != "jsonrpc"), "no JSON-RPC in a terminal session");
    let chat = records
        .iter()
        .find(|r| {
            r["type"] == "http_request" && r["url"].as_str().is_some_and(|url| url.ends_with("/chat/completions"))
        })
        .expect("the chat request is traced");
    assert_eq!(chat["dir"], "lathe->model");
    let streamed: String = records
        .iter()
        .filter(|r| r["type"] == "sse_event")
        .filter_map(|r| r["data"]["choices"][0]["delta"]["content"].as_str())
        .collect();
    assert_eq!(streamed, "Traced from the terminal.");
}

/// Checkpoints in the terminal (issue 18): an exec turn's file change is
/// listed by `/checkpoints`, taken back by `/undo` (the file and the turn in
/// the conversation), applied again by `/redo`, each in a later
/// `exec --continue`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exec_turns_are_undone_and_redone() {
    let term = Term::start("").await;
    let notes = term.project.join("notes.txt");
    term.mock.push(tool_call_reply(&[("call_w", "write_file", json!({"path": "notes.txt", "content": "hello\n"}))]));
    term.mock.push(text_reply("Created."));
    let output = term.exec(&["--mode", "full-auto", "create notes"], None).await;
    assert_eq!(code(&output), 0, "{}", text(&output.stderr));
    assert_eq!(std::fs::read_to_string(&notes).unwrap(), "hello\n");

    let output = term.exec(&["--continue", "/checkpoints"], None).await;
    assert_eq!(code(&output), 0, "{}", text(&output.stderr));
    let listed = text(&output.stdout);
    assert!(listed.contains("\"create notes\"") && listed.contains("`notes.txt`: created"), "{listed}");

    let output = term.exec(&["--continue", "/undo"], None).await;
    assert_eq!(code(&output), 0, "{}", text(&output.stderr));
    assert!(!notes.exists(), "the file the turn created is gone");
    let reply = text(&output.stdout);
    assert!(reply.contains("Undid the turn \"create notes\": 1 file put back."), "{reply}");
    assert!(reply.contains("The model no longer sees that turn."), "{reply}");
    assert!(text(&output.stderr).contains("removed notes.txt"), "the file is named: {}", text(&output.stderr));

    let output = term.exec(&["--continue", "/checkpoints"], None).await;
    assert!(text(&output.stdout).contains("There is no turn to undo."), "{}", text(&output.stdout));

    let output = term.exec(&["--continue", "/redo"], None).await;
    assert_eq!(code(&output), 0, "{}", text(&output.stderr));
    assert!(text(&output.stdout).contains("Redid the turn \"create notes\""), "{}", text(&output.stdout));
    assert_eq!(std::fs::read_to_string(&notes).unwrap(), "hello\n", "the redo wrote it again");
    assert!(text(&output.stderr).contains("restored notes.txt"), "{}", text(&output.stderr));

    let output = term.exec(&["--continue", "/undo"], None).await;
    assert_eq!(code(&output), 0, "{}", text(&output.stderr));
    assert!(!notes.exists(), "undone again");

    // The model's next request has no trace of the undone turn.
    term.mock.push(text_reply("Nothing to do."));
    let output = term.exec(&["--continue", "what now"], None).await;
    assert_eq!(code(&output), 0, "{}", text(&output.stderr));
    let requests = term.mock.chat_requests();
    assert_eq!(requests.len(), 3, "the commands asked the model nothing");
    assert_eq!(user_texts(&term.mock, 2), ["what now"]);
    let sent = requests[2].body["messages"].to_string();
    assert!(!sent.contains("call_w") && !sent.contains("Created."), "the undone turn is gone: {sent}");
    assert_eq!(term.saved_sessions().len(), 1, "every command went on with the same session");
}

/// Issue 29: an editor and `lathe exec --resume` on the same session, both
/// running: the editor's turn after the exec's does not lose the exec's
/// checkpoint. `/checkpoints` lists every turn in both front ends, and
/// `/undo` in the editor walks back through all of them, the exec's too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_editor_and_exec_on_one_session_keep_each_others_checkpoints() {
    let term = Term::start("").await;
    let write = |id: &str, path: &str| tool_call_reply(&[(id, "write_file", json!({"path": path, "content": "x\n"}))]);
    let mut editor = term.agent();
    let session = handshake(&mut editor, json!({}), &term.project).await;
    let id = editor.request("session/set_mode", json!({"sessionId": session, "modeId": "full-auto"})).await;
    assert!(editor.response(id).await.1.get("result").is_some());
    let turn = async |editor: &mut AgentProcess, said: &str| {
        let id = prompt(editor, &session, said).await;
        let (messages, response) = editor.response(id).await;
        assert_eq!(response["result"]["stopReason"], "end_turn", "{response}");
        agent_text(&messages)
    };

    term.mock.push(write("call_a", "a.txt"));
    term.mock.push(text_reply("Wrote a."));
    turn(&mut editor, "editor writes a").await;
    let meta = term.home.path().join(".local/share/lathe/sessions").join(&session).join("meta.json");
    crate::support::clock::poll_until("the session is saved", Duration::from_secs(10), || meta.exists()).await;

    term.mock.push(write("call_b", "b.txt"));
    term.mock.push(text_reply("Wrote b."));
    let output = term.exec(&["--resume", &session, "--mode", "full-auto", "exec writes b"], None).await;
    assert_eq!(code(&output), 0, "{}", text(&output.stderr));

    term.mock.push(write("call_c", "c.txt"));
    term.mock.push(text_reply("Wrote c."));
    turn(&mut editor, "editor writes c").await;

    let prompts = ["\"editor writes a\"", "\"exec writes b\"", "\"editor writes c\""];
    let listed = turn(&mut editor, "/checkpoints").await;
    assert!(prompts.iter().all(|said| listed.contains(said)), "the editor lists every turn: {listed}");
    let output = term.exec(&["--resume", &session, "/checkpoints"], None).await;
    let listed = text(&output.stdout);
    assert!(prompts.iter().all(|said| listed.contains(said)), "exec lists every turn: {listed}");

    for (said, path) in [("editor writes c", "c.txt"), ("exec writes b", "b.txt"), ("editor writes a", "a.txt")] {
        let reply = turn(&mut editor, "/undo").await;
        assert!(reply.contains(&format!("Undid the turn \"{said}\": 1 file put back")), "{reply}");
        assert!(!term.project.join(path).exists(), "{path} removed");
    }
}
