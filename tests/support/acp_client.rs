//! A scripted ACP client that drives lathe: by default in this process
//! (`lathe::serve` over in-memory pipes, the way the binary's `main` calls
//! it), or the real binary over stdio where only a process shows what is
//! tested (see the `suite` module doc).
//!
//! Both backends have one API. A background task splits the agent's output
//! into lines, records every raw line, and forwards each line that parses as
//! JSON to the test; what the agent logs is kept and quoted in every timeout
//! panic, so a failing test shows it: the binary's stderr, or for an
//! in-process agent the `tracing` output of the test's thread
//! ([`super::logs`]).
//!
//! Requests, responses and notifications are plain `serde_json::Value`s: the
//! tests check the wire shapes themselves, not a typed view of them. Every
//! wait is bounded in real time ([`super::clock::within`]), so a paused
//! clock cannot fire the bound early or hold it back.

use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;

pub use super::agent_env::{environment, scrubbed};
use super::clock::within;
use super::logs::{self, Capture};

/// How long [`Agent::response`] waits by default.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

/// Capacity of each in-memory pipe of an in-process agent (as a pipe's buffer).
const PIPE_BYTES: usize = 64 * 1024;

/// The benchmark's name for [`Agent`] (benches/e2e includes this file).
pub type AgentProcess = Agent;

/// A running agent and the client end of its input and output.
pub struct Agent {
    backend: Backend,
    input: Option<Box<dyn AsyncWrite + Send + Unpin>>,
    messages: mpsc::UnboundedReceiver<Value>,
    raw_lines: Arc<Mutex<Vec<String>>>,
    /// The binary's stderr, or the in-process agent's captured logs.
    logs: Arc<Mutex<String>>,
    output_task: Option<JoinHandle<()>>,
    next_id: i64,
    timeout: Duration,
}

enum Backend {
    /// The `lathe` binary, killed when the `Agent` is dropped.
    /// (Boxed: tokio's `Child` on Windows is several times the other variant.)
    Process { child: Box<Child>, pid: u32, stderr_task: Option<JoinHandle<()>> },
    /// `lathe::serve` as a task of the test's runtime.
    InProcess {
        served: Option<JoinHandle<std::io::Result<()>>>,
        /// What `served` came to, once awaited.
        ended: Option<Result<(), String>>,
        /// Resolves serve's `shutdown` future: what a signal does to the binary.
        shutdown: Option<oneshot::Sender<()>>,
        _capture: Capture,
    },
}

/// How an agent ended: the binary's exit status, or what `serve` returned.
#[derive(Debug, Clone)]
pub enum Exit {
    /// The binary exited.
    Process(ExitStatus),
    /// `serve` returned `Ok` or an error (or panicked).
    InProcess(Result<(), String>),
}

impl Exit {
    /// Exit status 0, or `serve` returned `Ok` (which `main` turns into 0).
    pub fn success(&self) -> bool {
        match self {
            Exit::Process(status) => status.success(),
            Exit::InProcess(result) => result.is_ok(),
        }
    }
}

/// How [`Agent::response_answering`] answers a request from the agent.
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

/// The command-line arguments an in-process agent understands (the ones
/// the tests pass to the binary).
struct Arguments {
    config: Option<PathBuf>,
    data_dir: Option<PathBuf>,
}

impl Arguments {
    fn parse(args: &[&str]) -> Arguments {
        let mut parsed = Arguments { config: None, data_dir: None };
        let mut args = args.iter();
        while let Some(arg) = args.next() {
            let mut value = || PathBuf::from(args.next().unwrap_or_else(|| panic!("{arg} needs a value")));
            match *arg {
                "--config" => parsed.config = Some(value()),
                "--data-dir" => parsed.data_dir = Some(value()),
                other => panic!("an in-process agent takes --config and --data-dir, not {other:?}"),
            }
        }
        parsed
    }
}

impl Agent {
    /// Serves ACP in this process: the configuration is loaded from `args`
    /// (`--config`, `--data-dir`) and the environment [`environment`]
    /// describes, exactly as the binary's `main` loads it, and
    /// `lathe::serve` runs as a task on the current runtime. The process
    /// environment itself is not changed (children lathe starts inherit the
    /// test's), and the working directory is the test's.
    pub fn in_process(args: &[&str], envs: &[(&str, &str)], home: &Path) -> Agent {
        let args = Arguments::parse(args);
        let vars = environment(home, envs);
        let env = move |name: &str| -> Option<String> {
            if let Some((_, value)) = vars.iter().rev().find(|(var, _)| var == name) {
                return Some(value.clone());
            }
            if scrubbed(name) { None } else { std::env::var(name).ok() }
        };
        refuse_a_proxy_for_loopback();
        let mut config = lathe::config::Config::load(args.config.as_deref(), &env)
            .unwrap_or_else(|err| panic!("the in-process agent's config: {err}"));
        // `authenticate` loads it again the same way (see lathe::discover::load_config).
        let env = std::sync::Arc::new(env);
        config.origin = Some(lathe::config::ConfigOrigin { cli_path: args.config.clone(), env: env.clone() });
        let env = |name: &str| env(name);
        config.data_dir = lathe::store::default_data_dir(args.data_dir.as_deref(), &env);
        as_the_binary_would(&mut config);
        let capture = Capture::start(env("RUST_LOG").as_deref().unwrap_or(logs::DEFAULT_FILTER));
        let logs = capture.text();

        let (client_input, agent_input) = tokio::io::duplex(PIPE_BYTES);
        let (agent_output, client_output) = tokio::io::duplex(PIPE_BYTES);
        let (shutdown, shutdown_requested) = oneshot::channel::<()>();
        let shutdown_requested = async move {
            // A dropped sender (the agent dropped) is a shutdown too.
            let _ = shutdown_requested.await;
        };
        let served = tokio::spawn(lathe::serve(config, agent_input, agent_output, shutdown_requested));
        let backend =
            Backend::InProcess { served: Some(served), ended: None, shutdown: Some(shutdown), _capture: capture };
        Agent::new(backend, Box::new(client_input), client_output, logs)
    }

    /// Spawns the `lathe` binary with `args`, in the environment
    /// [`environment`] describes (the inherited one with `LATHE_*` and
    /// `OPENAI_*` removed), its working directory `home`. The process is
    /// killed when the `Agent` is dropped.
    pub fn spawn(args: &[&str], envs: &[(&str, &str)], home: &Path) -> Agent {
        Agent::spawn_via(&[], args, envs, home)
    }

    /// Like [`spawn`](Self::spawn), but started through `wrapper` (a program
    /// and its arguments, the lathe binary and `args` appended), e.g. `prlimit`.
    pub fn spawn_via(wrapper: &[&str], args: &[&str], envs: &[(&str, &str)], home: &Path) -> Agent {
        Agent::spawn_command(Agent::command(wrapper, args, envs, home))
    }

    /// Spawns `command` (any build of lathe, in whatever environment the
    /// caller gave it) with piped stdio, killed when the `Agent` is dropped.
    pub fn spawn_command(mut command: Command) -> Agent {
        command.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).kill_on_drop(true);
        let mut child = command.spawn().expect("spawn the lathe binary");
        let pid = child.id().expect("a freshly spawned child has a pid");
        let stdin = child.stdin.take().expect("piped stdin");
        let stdout = child.stdout.take().expect("piped stdout");
        let stderr_pipe = child.stderr.take().expect("piped stderr");
        let logs = Arc::new(Mutex::new(String::new()));
        let stderr_task = Some(tokio::spawn(read_stderr(stderr_pipe, Arc::clone(&logs))));
        Agent::new(Backend::Process { child: Box::new(child), pid, stderr_task }, Box::new(stdin), stdout, logs)
    }

    /// Like [`spawn`](Self::spawn), but another build of lathe: `lathe`
    /// (the bench's `LATHE_BENCH_BIN`, e.g. the static release binary).
    pub fn spawn_bin(lathe: &Path, args: &[&str], envs: &[(&str, &str)], home: &Path) -> Agent {
        Agent::spawn_command(Agent::command_for(lathe, &[], args, envs, home))
    }

    /// The command that starts the binary (through `wrapper`, if any) in the
    /// agent environment, stdio not yet set.
    pub fn command(wrapper: &[&str], args: &[&str], envs: &[(&str, &str)], home: &Path) -> Command {
        Agent::command_for(Path::new(env!("CARGO_BIN_EXE_lathe")), wrapper, args, envs, home)
    }

    /// [`command`](Self::command) for the lathe binary at `lathe`.
    pub fn command_for(lathe: &Path, wrapper: &[&str], args: &[&str], envs: &[(&str, &str)], home: &Path) -> Command {
        let mut command = match wrapper.split_first() {
            Some((program, wrapper_args)) => {
                let mut command = Command::new(program);
                command.args(wrapper_args).arg(lathe);
                command
            }
            None => Command::new(lathe),
        };
        command.args(args).current_dir(home);
        for (name, _) in std::env::vars_os() {
            if scrubbed(&name.to_string_lossy()) {
                command.env_remove(&name);
            }
        }
        command.envs(environment(home, envs));
        command
    }

    fn new(
        backend: Backend,
        input: Box<dyn AsyncWrite + Send + Unpin>,
        output: impl AsyncRead + Send + Unpin + 'static,
        logs: Arc<Mutex<String>>,
    ) -> Agent {
        let (sender, messages) = mpsc::unbounded_channel();
        let raw_lines = Arc::new(Mutex::new(Vec::new()));
        let output_task = tokio::spawn(read_output(output, Arc::clone(&raw_lines), sender));
        Agent {
            backend,
            input: Some(input),
            messages,
            raw_lines,
            logs,
            output_task: Some(output_task),
            next_id: 0,
            timeout: DEFAULT_TIMEOUT,
        }
    }

    /// Whether this agent is the binary (a process of its own).
    pub fn is_process(&self) -> bool {
        matches!(self.backend, Backend::Process { .. })
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
    /// agent's input is closed.
    pub async fn send_raw(&mut self, line: &[u8]) {
        let Some(input) = self.input.as_mut() else {
            panic!("send after close_stdin");
        };
        let written = async {
            input.write_all(line).await?;
            input.flush().await
        };
        match within(self.timeout, written).await {
            Some(Ok(())) => {}
            Some(Err(error)) => {
                panic!("writing to the agent's input failed: {error}\n--- agent stderr ---\n{}", self.stderr())
            }
            None => panic!(
                "the agent read none of our input for {:?}\n--- agent stderr ---\n{}",
                self.timeout,
                self.stderr()
            ),
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
    /// timeout, or if the output closes first, quoting the agent's logs.
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
        let deadline = std::time::Instant::now() + self.timeout;
        let mut before = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            let message = match within(left, self.messages.recv()).await {
                Some(Some(message)) => message,
                Some(None) => self.fail(&format!("the output closed before the response to id {id}"), &before),
                None => self.fail(&format!("no response to id {id} within {:?}", self.timeout), &before),
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
    /// `timeout` (or the output has closed).
    pub async fn next_message(&mut self, timeout: Duration) -> Option<Value> {
        within(timeout, self.messages.recv()).await.flatten()
    }

    /// The next JSON message, which must come within the configured timeout.
    pub async fn expect_message(&mut self, what: &str) -> Value {
        match self.next_message(self.timeout).await {
            Some(message) => message,
            None => self.fail(&format!("{what}: no message within {:?}", self.timeout), &[]),
        }
    }

    /// Reads messages until one satisfies `found`; returns those before it and it.
    pub async fn until(&mut self, what: &str, found: impl Fn(&Value) -> bool) -> (Vec<Value>, Value) {
        let deadline = std::time::Instant::now() + self.timeout;
        let mut before = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            let message = match within(left, self.messages.recv()).await {
                Some(Some(message)) => message,
                Some(None) => self.fail(&format!("the output closed before {what}"), &before),
                None => self.fail(&format!("no {what} within {:?}", self.timeout), &before),
            };
            if found(&message) {
                return (before, message);
            }
            before.push(message);
        }
    }

    /// Reads messages until every request in `ids` is answered, answering
    /// none of the agent's requests; returns all of them in arrival order
    /// (find the answers with [`answer_at`]).
    pub async fn until_answered(&mut self, ids: &[i64]) -> Vec<Value> {
        let deadline = std::time::Instant::now() + self.timeout;
        let mut messages = Vec::new();
        while !ids.iter().all(|id| answer_at(&messages, *id).is_some()) {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match within(left, self.messages.recv()).await {
                Some(Some(message)) => messages.push(message),
                Some(None) => self.fail(&format!("the output closed before answers to all of {ids:?}"), &messages),
                None => self.fail(&format!("no answers to all of {ids:?} within {:?}", self.timeout), &messages),
            }
        }
        messages
    }

    /// A round trip through the agent's reader: a request for a method no
    /// one serves, answered at once where it is read. Returns what the agent
    /// sent before that answer: everything it had to say by then (its
    /// output is written in order). Stands in for "wait a moment and see
    /// that nothing more comes".
    pub async fn barrier(&mut self) -> Vec<Value> {
        let id = self.request("_lathe_tests/barrier", json!({})).await;
        let (before, response) = self.response(id).await;
        assert_eq!(response["error"]["code"], -32601, "the barrier is an unknown method: {response}");
        before
    }

    /// Closes the agent's input (it sees EOF).
    pub fn close_stdin(&mut self) {
        self.input = None;
    }

    /// Stops reading the agent's output and closes our end of it: its next
    /// write fails (for the binary: EPIPE on stdout).
    pub fn stop_reading_output(&mut self) {
        if let Some(task) = self.output_task.take() {
            task.abort();
        }
    }

    /// Asks an in-process agent to shut down, as a signal asks the binary:
    /// serve's `shutdown` future resolves.
    pub fn shut_down(&mut self) {
        match &mut self.backend {
            Backend::InProcess { shutdown, .. } => {
                if let Some(shutdown) = shutdown.take() {
                    let _ = shutdown.send(());
                }
            }
            Backend::Process { .. } => panic!("send the binary a signal instead (Agent::pid)"),
        }
    }

    /// Waits up to `timeout` (real time) for the agent to end: the process
    /// to exit, or `serve` to return. Then waits briefly for the output (and
    /// stderr) readers to drain, so `stderr()` and `raw_stdout_lines()` are
    /// complete.
    pub async fn wait_exit(&mut self, timeout: Duration) -> Option<Exit> {
        let exit = match &mut self.backend {
            Backend::Process { child, .. } => {
                Exit::Process(within(timeout, child.wait()).await?.expect("wait for the agent process"))
            }
            Backend::InProcess { served, ended, .. } => {
                if let Some(handle) = served.as_mut() {
                    let joined = within(timeout, handle).await?;
                    *served = None;
                    *ended = Some(match joined {
                        Ok(Ok(())) => Ok(()),
                        Ok(Err(err)) => Err(format!("serve failed: {err}")),
                        Err(err) => Err(format!("serve did not finish: {err}")),
                    });
                }
                Exit::InProcess(ended.clone().expect("serve's outcome"))
            }
        };
        // A grandchild (or a task of the agent's) may still hold the output open; do not wait for it long.
        let stderr_task = match &mut self.backend {
            Backend::Process { stderr_task, .. } => stderr_task,
            Backend::InProcess { .. } => &mut None,
        };
        for task in [&mut self.output_task, stderr_task] {
            if let Some(handle) = task.as_mut()
                && within(Duration::from_secs(1), handle).await.is_some()
            {
                *task = None;
            }
        }
        Some(exit)
    }

    /// Everything the agent logged so far: the binary's stderr, or the
    /// in-process agent's captured `tracing` output (see [`super::logs`]).
    pub fn stderr(&self) -> String {
        lock(&self.logs).clone()
    }

    /// Kills the binary with SIGKILL (no chance to clean up) and waits for it.
    pub async fn kill_hard(&mut self) {
        match &mut self.backend {
            Backend::Process { child, .. } => child.kill().await.expect("kill the agent"),
            Backend::InProcess { .. } => panic!("an in-process agent cannot be SIGKILLed; use Harness::process"),
        }
    }

    /// The binary's process id.
    pub fn pid(&self) -> u32 {
        match &self.backend {
            Backend::Process { pid, .. } => *pid,
            Backend::InProcess { .. } => panic!("an in-process agent has no process of its own; use Harness::process"),
        }
    }

    /// Every raw output line received so far (without the trailing newline),
    /// including lines that are not JSON.
    pub fn raw_stdout_lines(&self) -> Vec<String> {
        lock(&self.raw_lines).clone()
    }

    /// Asserts that every output line so far is a JSON-RPC 2.0 message.
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

/// Where the in-process engine is given what the binary would know of
/// itself: the trampoline every child is started through (`lathe
/// sandbox-exec`, which supervises it and applies the sandbox) is the binary
/// this test build made, as `main` sets it to its own executable.
fn as_the_binary_would(config: &mut lathe::config::Config) {
    config.children.supervisor = Some(std::path::PathBuf::from(env!("CARGO_BIN_EXE_lathe")));
}

/// In-process agents reach the mock model with the test process's own
/// environment, whose proxy settings a test cannot change: a proxy that
/// would carry loopback traffic breaks every test, so say so plainly.
fn refuse_a_proxy_for_loopback() {
    let var = |name: &str| std::env::var(name).ok().filter(|value| !value.is_empty());
    let proxy = ["http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY"].into_iter().find_map(var);
    let exempt = ["no_proxy", "NO_PROXY"]
        .into_iter()
        .filter_map(var)
        .any(|list| list.split(',').any(|host| matches!(host.trim(), "127.0.0.1" | "*")));
    if let Some(proxy) = proxy
        && !exempt
    {
        panic!("the environment routes HTTP through {proxy}: set NO_PROXY=127.0.0.1 (the mock model is on loopback)");
    }
}

/// Windows has no command sandbox, so every session there opens with the
/// notice that commands run without one (SECURITY.md, and the sandbox's
/// own tests); the suites' exact update sequences are those of a system
/// with a sandbox, so on Windows the client leaves that notice out.
fn windows_sandbox_notice(message: &Value) -> bool {
    cfg!(windows)
        && message["method"] == "session/update"
        && message.to_string().contains("Commands run without a sandbox")
}

async fn read_output(
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
        if parsed.as_ref().is_some_and(windows_sandbox_notice) {
            continue;
        }
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

/// Where the response to request `id` is among `messages`.
pub fn answer_at(messages: &[Value], id: i64) -> Option<usize> {
    messages.iter().position(|m| is_response_to(m, id))
}

fn is_response_to(message: &Value, id: i64) -> bool {
    message.get("method").is_none()
        && message["id"] == json!(id)
        && (message.get("result").is_some() || message.get("error").is_some())
}

/// Sends `initialize` (protocol version 1, `client_capabilities`); returns
/// its result. Panics if it fails.
pub async fn initialize(agent: &mut Agent, client_capabilities: Value) -> Value {
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
    match response.get("result") {
        Some(result) => result.clone(),
        None => panic!("initialize failed: {response}\n--- agent stderr ---\n{}", agent.stderr()),
    }
}

/// Sends `initialize` (protocol version 1, `client_capabilities`) and then
/// `session/new` for `cwd` with no MCP servers; returns the session id.
/// Panics if either call fails.
pub async fn handshake(agent: &mut Agent, client_capabilities: Value, cwd: &Path) -> String {
    initialize(agent, client_capabilities).await;

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
pub async fn prompt(agent: &mut Agent, session_id: &str, text: &str) -> i64 {
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

/// The conversation-carrying updates of a transcript, text chunks of one
/// message joined: what a user would see, whatever the chunking.
pub fn seen(messages: &[Value]) -> Vec<Value> {
    let mut out: Vec<Value> = Vec::new();
    for message in messages.iter().filter(|m| m["method"] == "session/update") {
        let update = message["params"]["update"].clone();
        let kind = update["sessionUpdate"].as_str().unwrap_or_default().to_owned();
        if matches!(
            kind.as_str(),
            "available_commands_update"
                | "usage_update"
                | "session_info_update"
                | "config_option_update"
                | "current_mode_update"
        ) {
            continue;
        }
        if let Some(last) = out.last_mut()
            && kind.ends_with("_chunk")
            && last["sessionUpdate"] == kind
            && last["messageId"] == update["messageId"]
        {
            let joined =
                format!("{}{}", last["content"]["text"].as_str().unwrap(), update["content"]["text"].as_str().unwrap());
            last["content"]["text"] = json!(joined);
            continue;
        }
        out.push(update);
    }
    out
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
