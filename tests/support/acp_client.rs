//! A scripted ACP client that drives the real `lathe` binary over stdio.
//!
//! [`AgentProcess`] spawns the binary with piped stdio. A background task
//! splits stdout into lines, records every raw line, and forwards each line
//! that parses as JSON to the test; another task accumulates stderr into a
//! shared buffer that is quoted in every timeout panic, so a failing test
//! shows what the agent logged.
//!
//! Requests, responses and notifications are plain `serde_json::Value`s: the
//! tests check the wire shapes themselves, not a typed view of them.

use std::path::Path;
use std::process::{ExitStatus, Stdio};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, Command};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// How long [`AgentProcess::response`] waits by default.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

/// Environment variables removed from the inherited environment so the
/// developer's own settings cannot leak into a test (a test may set them again
/// through `envs`).
const SCRUBBED_ENV_PREFIXES: &[&str] = &["LATHE_", "OPENAI_"];

/// Hosts that must bypass any proxy configured in the environment.
const LOOPBACK: &str = "127.0.0.1,localhost,::1";

/// A running agent process and the client end of its stdio.
pub struct AgentProcess {
    child: Child,
    pid: u32,
    stdin: Option<ChildStdin>,
    messages: mpsc::UnboundedReceiver<Value>,
    raw_lines: Arc<Mutex<Vec<String>>>,
    stderr: Arc<Mutex<String>>,
    stdout_task: Option<JoinHandle<()>>,
    stderr_task: Option<JoinHandle<()>>,
    next_id: i64,
    timeout: Duration,
}

/// How [`AgentProcess::response_answering`] answers a request from the agent.
#[derive(Debug, Clone)]
pub enum Answer {
    /// Reply with this `result`.
    Result(Value),
    /// Reply with a JSON-RPC error.
    Error {
        /// The JSON-RPC error code.
        code: i64,
        /// The error message.
        message: String,
    },
    /// Never answer.
    Ignore,
}

impl Answer {
    /// A JSON-RPC error answer.
    pub fn error(code: i64, message: &str) -> Answer {
        Answer::Error { code, message: message.to_owned() }
    }

    /// The standard "method not found" error (-32601).
    pub fn method_not_found() -> Answer {
        Answer::error(-32601, "Method not found")
    }
}

impl AgentProcess {
    /// Spawns the `lathe` binary with `args` and `envs`.
    ///
    /// The environment is inherited, except that `HOME` and `XDG_CONFIG_HOME`
    /// point at `home` (so no user config leaks in), variables starting with
    /// `LATHE_` or `OPENAI_` are removed, loopback is exempted from any proxy
    /// (`NO_PROXY`), `envs` is applied on top, and the working directory is
    /// `home`. The child is killed when the
    /// `AgentProcess` is dropped.
    pub fn spawn(args: &[&str], envs: &[(&str, &str)], home: &Path) -> AgentProcess {
        AgentProcess::spawn_via(&[], args, envs, home)
    }

    /// Like [`spawn`](Self::spawn), but started through `wrapper` (a program
    /// and its arguments, the lathe binary and `args` appended), e.g. `prlimit`.
    pub fn spawn_via(wrapper: &[&str], args: &[&str], envs: &[(&str, &str)], home: &Path) -> AgentProcess {
        let lathe = env!("CARGO_BIN_EXE_lathe");
        let mut command = match wrapper.split_first() {
            Some((program, wrapper_args)) => {
                let mut command = Command::new(program);
                command.args(wrapper_args).arg(lathe);
                command
            }
            None => Command::new(lathe),
        };
        command
            .args(args)
            .current_dir(home)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        for (name, _) in std::env::vars_os() {
            let text = name.to_string_lossy();
            if SCRUBBED_ENV_PREFIXES.iter().any(|p| text.starts_with(p)) {
                command.env_remove(&name);
            }
        }
        command
            .env("HOME", home)
            .env("XDG_CONFIG_HOME", home.join(".config"))
            // Sessions are saved under the temporary home, never the developer's.
            .env("XDG_DATA_HOME", home.join(".local").join("share"))
            // The mock model server is on loopback; never route it via a proxy.
            .env("NO_PROXY", LOOPBACK)
            .env("no_proxy", LOOPBACK);
        for (name, value) in envs {
            command.env(name, value);
        }

        let mut child = command.spawn().expect("spawn the lathe binary");
        let pid = child.id().expect("a freshly spawned child has a pid");
        let stdin = child.stdin.take().expect("piped stdin");
        let stdout = child.stdout.take().expect("piped stdout");
        let stderr_pipe = child.stderr.take().expect("piped stderr");

        let (sender, messages) = mpsc::unbounded_channel();
        let raw_lines = Arc::new(Mutex::new(Vec::new()));
        let stderr = Arc::new(Mutex::new(String::new()));
        let stdout_task = tokio::spawn(read_stdout(stdout, Arc::clone(&raw_lines), sender));
        let stderr_task = tokio::spawn(read_stderr(stderr_pipe, Arc::clone(&stderr)));

        AgentProcess {
            child,
            pid,
            stdin: Some(stdin),
            messages,
            raw_lines,
            stderr,
            stdout_task: Some(stdout_task),
            stderr_task: Some(stderr_task),
            next_id: 0,
            timeout: DEFAULT_TIMEOUT,
        }
    }

    /// Sets how long [`response`](Self::response) and
    /// [`response_answering`](Self::response_answering) wait before panicking.
    pub fn set_timeout(&mut self, timeout: Duration) {
        self.timeout = timeout;
    }

    /// Writes `msg` as compact JSON followed by `\n`.
    pub async fn send(&mut self, msg: Value) {
        let mut line = msg.to_string().into_bytes();
        line.push(b'\n');
        self.send_raw(&line).await;
    }

    /// Writes `line` verbatim (the caller includes the newline). Panics if the
    /// agent's stdin is closed.
    pub async fn send_raw(&mut self, line: &[u8]) {
        let Some(stdin) = self.stdin.as_mut() else {
            panic!("send after close_stdin");
        };
        let written = async {
            stdin.write_all(line).await?;
            stdin.flush().await
        }
        .await;
        if let Err(error) = written {
            panic!("writing to the agent's stdin failed: {error}\n--- agent stderr ---\n{}", self.stderr());
        }
    }

    /// Sends a request with the next numeric id and returns that id.
    pub async fn request(&mut self, method: &str, params: Value) -> i64 {
        self.next_id += 1;
        let id = self.next_id;
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})).await;
        id
    }

    /// Sends a notification.
    pub async fn notify(&mut self, method: &str, params: Value) {
        self.send(json!({"jsonrpc": "2.0", "method": method, "params": params})).await;
    }

    /// Replies to the agent's request `request_id` with `result`.
    pub async fn reply(&mut self, request_id: &Value, result: Value) {
        self.send(json!({"jsonrpc": "2.0", "id": request_id, "result": result})).await;
    }

    /// Replies to the agent's request `request_id` with a JSON-RPC error.
    pub async fn reply_error(&mut self, request_id: &Value, code: i64, message: &str) {
        self.send(json!({
            "jsonrpc": "2.0",
            "id": request_id,
            "error": {"code": code, "message": message},
        }))
        .await;
    }

    /// Reads messages until the response to `id` arrives; returns every
    /// message received before it, in order, and the response. Requests from
    /// the agent are recorded but never answered. Panics after the configured
    /// timeout, or if stdout closes first, quoting the agent's stderr.
    pub async fn response(&mut self, id: i64) -> (Vec<Value>, Value) {
        self.response_answering(id, |_| Answer::Ignore).await
    }

    /// Like [`response`](Self::response), but answers each request the agent
    /// sends on the way with `answer`. The agent's requests are included in
    /// the returned messages.
    pub async fn response_answering(
        &mut self,
        id: i64,
        mut answer: impl FnMut(&Value) -> Answer,
    ) -> (Vec<Value>, Value) {
        let deadline = Instant::now() + self.timeout;
        let mut before = Vec::new();
        loop {
            let message = match tokio::time::timeout_at(deadline, self.messages.recv()).await {
                Ok(Some(message)) => message,
                Ok(None) => self.fail(&format!("stdout closed before the response to id {id}"), &before),
                Err(_) => self.fail(&format!("no response to id {id} within {:?}", self.timeout), &before),
            };
            if is_response_to(&message, id) {
                return (before, message);
            }
            if is_request(&message) {
                let request_id = message["id"].clone();
                match answer(&message) {
                    Answer::Result(result) => self.reply(&request_id, result).await,
                    Answer::Error { code, message } => {
                        self.reply_error(&request_id, code, &message).await;
                    }
                    Answer::Ignore => {}
                }
            }
            before.push(message);
        }
    }

    /// The next JSON message from the agent, or `None` if none arrives within
    /// `timeout` (or stdout has closed).
    pub async fn next_message(&mut self, timeout: Duration) -> Option<Value> {
        tokio::time::timeout(timeout, self.messages.recv()).await.ok().flatten()
    }

    /// Closes the agent's stdin (it sees EOF).
    pub fn close_stdin(&mut self) {
        self.stdin = None;
    }

    /// Waits up to `timeout` for the agent to exit. After it exits, waits
    /// briefly for the stdout and stderr readers to drain, so `stderr()` and
    /// `raw_stdout_lines()` are complete.
    pub async fn wait_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let status = tokio::time::timeout(timeout, self.child.wait()).await.ok()?.expect("wait for the agent process");
        // A grandchild may still hold the pipes open; do not wait for it long.
        for task in [&mut self.stdout_task, &mut self.stderr_task] {
            if let Some(handle) = task.as_mut()
                && tokio::time::timeout(Duration::from_secs(1), handle).await.is_ok()
            {
                *task = None;
            }
        }
        Some(status)
    }

    /// Everything the agent wrote to stderr so far.
    pub fn stderr(&self) -> String {
        lock(&self.stderr).clone()
    }

    /// Kills the agent with SIGKILL (no chance to clean up) and waits for it.
    pub async fn kill_hard(&mut self) {
        self.child.kill().await.expect("kill the agent");
    }

    /// The agent's process id.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Every raw stdout line received so far (without the trailing newline),
    /// including lines that are not JSON.
    pub fn raw_stdout_lines(&self) -> Vec<String> {
        lock(&self.raw_lines).clone()
    }

    /// Asserts that every stdout line so far is a JSON-RPC 2.0 message.
    pub fn assert_stdout_is_only_jsonrpc(&self) {
        for line in self.raw_stdout_lines() {
            let parsed: Option<Value> = serde_json::from_str(&line).ok();
            assert!(
                parsed.as_ref().is_some_and(|v| v["jsonrpc"] == "2.0"),
                "agent wrote a non-JSON-RPC line to stdout: {line:?}\n--- agent stderr ---\n{}",
                self.stderr()
            );
        }
    }

    fn fail(&self, what: &str, before: &[Value]) -> ! {
        let received: Vec<String> = before.iter().map(Value::to_string).collect();
        panic!(
            "{what}\n--- messages received meanwhile ({}) ---\n{}\n--- agent stderr ---\n{}",
            received.len(),
            received.join("\n"),
            self.stderr()
        );
    }
}

async fn read_stdout(
    stdout: impl AsyncRead + Unpin,
    raw_lines: Arc<Mutex<Vec<String>>>,
    sender: mpsc::UnboundedSender<Value>,
) {
    let mut reader = BufReader::new(stdout);
    let mut buffer = Vec::new();
    loop {
        buffer.clear();
        match reader.read_until(b'\n', &mut buffer).await {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        let line = String::from_utf8_lossy(&buffer);
        let line = line.strip_suffix('\n').unwrap_or(&line);
        let line = line.strip_suffix('\r').unwrap_or(line).to_owned();
        let parsed = serde_json::from_str::<Value>(&line).ok();
        lock(&raw_lines).push(line);
        if let Some(message) = parsed {
            // The test may have stopped listening; that is fine.
            let _ = sender.send(message);
        }
    }
}

async fn read_stderr(mut stderr: impl AsyncRead + Unpin, buffer: Arc<Mutex<String>>) {
    let mut chunk = vec![0u8; 8192];
    loop {
        match stderr.read(&mut chunk).await {
            Ok(0) | Err(_) => return,
            Ok(n) => lock(&buffer).push_str(&String::from_utf8_lossy(&chunk[..n])),
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn is_request(message: &Value) -> bool {
    message.get("method").is_some() && message.get("id").is_some_and(|id| !id.is_null())
}

fn is_response_to(message: &Value, id: i64) -> bool {
    message.get("method").is_none()
        && message["id"] == json!(id)
        && (message.get("result").is_some() || message.get("error").is_some())
}

/// Sends `initialize` (protocol version 1, `client_capabilities`) and then
/// `session/new` for `cwd` with no MCP servers; returns the session id.
/// Panics if either call fails.
pub async fn handshake(agent: &mut AgentProcess, client_capabilities: Value, cwd: &Path) -> String {
    let id = agent
        .request(
            "initialize",
            json!({
                "protocolVersion": 1,
                "clientCapabilities": client_capabilities,
                "clientInfo": {"name": "lathe-tests", "version": "0.0.0"},
            }),
        )
        .await;
    let (_, response) = agent.response(id).await;
    assert!(
        response.get("result").is_some(),
        "initialize failed: {response}\n--- agent stderr ---\n{}",
        agent.stderr()
    );

    let id = agent.request("session/new", json!({"cwd": cwd, "mcpServers": []})).await;
    let (_, response) = agent.response(id).await;
    let session_id = match response["result"]["sessionId"].as_str() {
        Some(session_id) => session_id.to_owned(),
        None => panic!("session/new failed: {response}\n--- agent stderr ---\n{}", agent.stderr()),
    };
    // The slash commands follow the response; take them so tests start clean.
    let commands = agent.next_message(DEFAULT_TIMEOUT).await;
    assert_eq!(
        commands.as_ref().map(|m| &m["params"]["update"]["sessionUpdate"]),
        Some(&json!("available_commands_update")),
        "session/new is followed by the slash commands: {commands:?}"
    );
    session_id
}

/// Sends `session/prompt` with a single text block and returns the request id.
pub async fn prompt(agent: &mut AgentProcess, session_id: &str, text: &str) -> i64 {
    agent
        .request(
            "session/prompt",
            json!({
                "sessionId": session_id,
                "prompt": [{"type": "text", "text": text}],
            }),
        )
        .await
}

/// The `update` objects (`params.update`) of the `session/update`
/// notifications among `messages` whose `sessionUpdate` is `kind`, in order.
pub fn updates_of_kind<'a>(messages: &'a [Value], kind: &str) -> Vec<&'a Value> {
    updates_where(messages, |u| u["sessionUpdate"] == kind)
}

/// The `update` objects of the `session/update` notifications among
/// `messages` that `keep` accepts, in order.
fn updates_where(messages: &[Value], keep: impl Fn(&Value) -> bool) -> Vec<&Value> {
    messages
        .iter()
        .filter(|m| m["method"] == "session/update")
        .map(|m| &m["params"]["update"])
        .filter(|u| keep(u))
        .collect()
}

/// The `update` objects of the `session/update` notifications about tool
/// call `call_id` (`tool_call` and `tool_call_update`), in order.
pub fn updates_for<'a>(messages: &'a [Value], call_id: &str) -> Vec<&'a Value> {
    updates_where(messages, |u| u["toolCallId"] == call_id)
}

/// The last status the editor was told for tool call `call_id`.
pub fn final_status(messages: &[Value], call_id: &str) -> String {
    updates_for(messages, call_id)
        .iter()
        .rev()
        .find_map(|u| u["status"].as_str())
        .unwrap_or_else(|| panic!("no status for {call_id}"))
        .to_owned()
}

/// The concatenated text of the `agent_message_chunk` updates.
pub fn agent_text(messages: &[Value]) -> String {
    chunk_text(messages, "agent_message_chunk")
}

/// The concatenated text of the `agent_thought_chunk` updates.
pub fn thought_text(messages: &[Value]) -> String {
    chunk_text(messages, "agent_thought_chunk")
}

fn chunk_text(messages: &[Value], kind: &str) -> String {
    updates_of_kind(messages, kind)
        .into_iter()
        .filter(|u| u["content"]["type"] == "text")
        .filter_map(|u| u["content"]["text"].as_str())
        .collect()
}
