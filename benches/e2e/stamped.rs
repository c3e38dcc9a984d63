//! A blocking ACP client for the timing-sensitive measurements: it spawns the
//! agent with piped stdio and a dedicated thread reads stdout, stamping each
//! line with `Instant::now()` the moment `read` returns it, before any parsing
//! or hand-over. The tests' `AgentProcess` parses each line into JSON and
//! hands it through a tokio channel before the test sees it; that costs
//! microseconds that would be charged to the agent in a latency figure.
//!
//! The environment is scrubbed the same way `AgentProcess::spawn` does it.

use std::io::{BufRead, BufReader, Read, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

/// A line the agent wrote, with the instant it was read.
pub type Stamped = (Instant, String);

/// The prefix of every `session/update` line lathe writes (its serializer
/// writes `jsonrpc`, then `method`). Lines with this prefix are never parsed
/// while waiting for a response; other lines are parsed in full, so a change
/// of field order costs speed, not correctness.
const UPDATE_PREFIX: &str = r#"{"jsonrpc":"2.0","method":"session/update""#;

/// A running agent and the client end of its stdio.
pub struct StampedAgent {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<Stamped>,
    stderr: Arc<Mutex<String>>,
    next_id: i64,
    /// Taken just before the process was spawned.
    pub spawned_at: Instant,
}

impl StampedAgent {
    /// Spawns `bin --config <config>` with `HOME` (and the working directory)
    /// at `home`, `LATHE_*`/`OPENAI_*` variables removed and loopback exempt
    /// from proxies.
    pub fn spawn(bin: &Path, config: &Path, home: &Path) -> StampedAgent {
        let mut command = Command::new(bin);
        command
            .arg("--config")
            .arg(config)
            .current_dir(home)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for (name, _) in std::env::vars_os() {
            let text = name.to_string_lossy();
            if text.starts_with("LATHE_") || text.starts_with("OPENAI_") {
                command.env_remove(&name);
            }
        }
        command
            .env("HOME", home)
            .env("XDG_CONFIG_HOME", home.join(".config"))
            .env("XDG_DATA_HOME", home.join(".local").join("share"))
            .env("NO_PROXY", "127.0.0.1,localhost,::1")
            .env("no_proxy", "127.0.0.1,localhost,::1");
        let spawned_at = Instant::now();
        let mut child = command.spawn().unwrap_or_else(|err| panic!("spawn {}: {err}", bin.display()));
        let stdin = child.stdin.take().expect("piped stdin");
        let stdout = child.stdout.take().expect("piped stdout");
        let stderr_pipe = child.stderr.take().expect("piped stderr");

        let (sender, lines) = mpsc::channel();
        std::thread::Builder::new()
            .name("bench-stdout".into())
            .spawn(move || {
                let mut reader = BufReader::with_capacity(256 * 1024, stdout);
                let mut buffer = String::new();
                loop {
                    buffer.clear();
                    match reader.read_line(&mut buffer) {
                        Ok(0) | Err(_) => return,
                        Ok(_) => {}
                    }
                    let at = Instant::now();
                    let line = buffer.trim_end_matches(['\n', '\r']).to_owned();
                    if sender.send((at, line)).is_err() {
                        return;
                    }
                }
            })
            .expect("spawn the stdout reader");
        let stderr = Arc::new(Mutex::new(String::new()));
        let sink = Arc::clone(&stderr);
        std::thread::Builder::new()
            .name("bench-stderr".into())
            .spawn(move || {
                let mut pipe = stderr_pipe;
                let mut chunk = [0u8; 8192];
                while let Ok(n) = pipe.read(&mut chunk) {
                    if n == 0 {
                        return;
                    }
                    let mut text = sink.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                    // Keep the tail only: a long run must not grow this forever.
                    if text.len() > 64 * 1024 {
                        let cut = text.len() - 32 * 1024;
                        let cut = (cut..text.len()).find(|&i| text.is_char_boundary(i)).unwrap_or(text.len());
                        text.drain(..cut);
                    }
                    text.push_str(&String::from_utf8_lossy(&chunk[..n]));
                }
            })
            .expect("spawn the stderr reader");
        StampedAgent { child, stdin: Some(stdin), lines, stderr, next_id: 0, spawned_at }
    }

    /// The agent's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// What the agent wrote on stderr (the tail).
    pub fn stderr(&self) -> String {
        self.stderr.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
    }

    /// Writes one message as a line; returns the instant just before the write.
    pub fn send(&mut self, message: &Value) -> Instant {
        let mut line = message.to_string().into_bytes();
        line.push(b'\n');
        let stdin = self.stdin.as_mut().expect("stdin is open");
        let at = Instant::now();
        if let Err(err) = stdin.write_all(&line).and_then(|()| stdin.flush()) {
            panic!("writing to the agent failed: {err}\n--- agent stderr ---\n{}", self.stderr());
        }
        at
    }

    /// Sends a request with the next id; returns the id and the write instant.
    pub fn request(&mut self, method: &str, params: Value) -> (i64, Instant) {
        self.next_id += 1;
        let id = self.next_id;
        let at = self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        (id, at)
    }

    /// The next line, or `None` after `timeout`.
    pub fn next_line(&self, timeout: Duration) -> Option<Stamped> {
        self.lines.recv_timeout(timeout).ok()
    }

    /// Reads lines until the response to `id`; every other line goes to
    /// `on_line` with its arrival instant. Returns the response's arrival
    /// instant and the response. Panics after `timeout` or on an error response.
    pub fn response(&self, id: i64, timeout: Duration, mut on_line: impl FnMut(Instant, &str)) -> (Instant, Value) {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let Some((at, line)) = self.next_line(left) else {
                panic!("no response to request {id} within {timeout:?}\n--- agent stderr ---\n{}", self.stderr());
            };
            if !line.starts_with(UPDATE_PREFIX)
                && let Ok(message) = serde_json::from_str::<Value>(&line)
                && message.get("method").is_none()
                && message["id"] == json!(id)
            {
                if message.get("error").is_some() {
                    panic!("request {id} failed: {message}\n--- agent stderr ---\n{}", self.stderr());
                }
                return (at, message);
            }
            on_line(at, &line);
        }
    }

    /// `initialize` then `session/new` in `cwd`; returns the session id.
    pub fn handshake(&mut self, cwd: &Path) -> String {
        self.initialize();
        self.new_session(cwd)
    }

    /// `initialize` with no client capabilities; returns the response's arrival.
    pub fn initialize(&mut self) -> Instant {
        self.initialize_with(&json!({}))
    }

    /// `initialize` with these client capabilities; returns the response's arrival.
    pub fn initialize_with(&mut self, capabilities: &Value) -> Instant {
        let (id, _) = self.request(
            "initialize",
            json!({"protocolVersion": 1, "clientCapabilities": capabilities,
                   "clientInfo": {"name": "lathe-bench", "version": "0"}}),
        );
        self.response(id, Duration::from_secs(10), |_, _| {}).0
    }

    /// `session/new` in `cwd`; returns the session id.
    pub fn new_session(&mut self, cwd: &Path) -> String {
        let (id, _) = self.request("session/new", json!({"cwd": cwd, "mcpServers": []}));
        let (_, response) = self.response(id, Duration::from_secs(10), |_, _| {});
        response["result"]["sessionId"].as_str().expect("a session id").to_owned()
    }

    /// Sends a one-text-block prompt; returns its request id.
    pub fn prompt(&mut self, session: &str, text: &str) -> (i64, Instant) {
        self.request("session/prompt", json!({"sessionId": session, "prompt": [{"type": "text", "text": text}]}))
    }
}

impl Drop for StampedAgent {
    fn drop(&mut self) {
        self.stdin = None;
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Every sequence number in the text of an `agent_message_chunk` line (the
/// firehose writes deltas as `t<seq> `), without parsing the JSON.
pub fn chunk_sequence_numbers(line: &str, out: &mut Vec<usize>) {
    if !line.contains(r#""sessionUpdate":"agent_message_chunk""#) {
        return;
    }
    let Some(start) = line.find(r#""text":""#) else {
        return;
    };
    let text = &line[start + 8..];
    let text = &text[..text.find('"').unwrap_or(text.len())];
    for word in text.split(' ') {
        if let Some(digits) = word.strip_prefix('t')
            && let Ok(seq) = digits.parse::<usize>()
        {
            out.push(seq);
        }
    }
}
