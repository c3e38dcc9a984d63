//! A fake editor: answers the requests an agent sends to its client
//! (`session/request_permission`, `fs/*`, `terminal/*`) from a script, and
//! records every request so tests can check what was asked and in what order.
//!
//! Terminals run their command to completion at `terminal/create` (so
//! `terminal/wait_for_exit` can be answered at once), except commands
//! starting with `sleep`, which "run" until killed or released and whose
//! `wait_for_exit` is never answered.

use std::collections::{HashMap, VecDeque};
use std::path::PathBuf;

use serde_json::{Value, json};

use super::acp_client::Answer;

/// How to answer the next permission request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Permission {
    /// Select the option with this id (`allow_once`, `allow_always`, `reject_once`, `reject_always`).
    Select(&'static str),
    /// Answer `{"outcome":"cancelled"}`.
    Cancelled,
    /// Never answer.
    Ignore,
}

/// A scripted editor.
#[derive(Debug, Default)]
pub struct FakeEditor {
    /// Permission answers, in order; when empty, permission requests are ignored.
    pub permissions: VecDeque<Permission>,
    /// Unsaved buffers served by `fs/read_text_file` instead of the disk.
    pub buffers: HashMap<PathBuf, String>,
    /// Every request received, in order.
    pub requests: Vec<Value>,
    /// Variables added to the environment of the commands its terminals run
    /// (the editor's own environment).
    pub terminal_env: Vec<(String, String)>,
    terminals: HashMap<String, FakeTerminal>,
    next_terminal: u32,
}

#[derive(Debug)]
struct FakeTerminal {
    output: String,
    exit_code: Option<i32>,
    running: bool,
    released: bool,
}

impl FakeEditor {
    /// An editor that answers permissions with `permissions`, in order.
    pub fn answering(permissions: &[Permission]) -> FakeEditor {
        FakeEditor { permissions: permissions.iter().cloned().collect(), ..FakeEditor::default() }
    }

    /// The methods of the requests received, in order.
    pub fn methods(&self) -> Vec<String> {
        self.requests.iter().map(|r| r["method"].as_str().unwrap_or_default().to_owned()).collect()
    }

    /// The requests with this method.
    pub fn requests_for(&self, method: &str) -> Vec<&Value> {
        self.requests.iter().filter(|r| r["method"] == method).collect()
    }

    /// Answers one request from the agent.
    pub fn answer(&mut self, request: &Value) -> Answer {
        self.requests.push(request.clone());
        let params = &request["params"];
        match request["method"].as_str().unwrap_or_default() {
            "session/request_permission" => match self.permissions.pop_front() {
                Some(Permission::Select(id)) => {
                    let offered = params["options"].as_array().into_iter().flatten().any(|o| o["optionId"] == id);
                    assert!(offered, "the agent did not offer {id}: {params}");
                    Answer::Result(json!({"outcome": {"outcome": "selected", "optionId": id}}))
                }
                Some(Permission::Cancelled) => Answer::Result(json!({"outcome": {"outcome": "cancelled"}})),
                Some(Permission::Ignore) | None => Answer::Ignore,
            },
            "fs/read_text_file" => {
                let path = PathBuf::from(params["path"].as_str().unwrap_or_default());
                assert!(path.is_absolute(), "fs paths are absolute: {params}");
                let text = match self.buffers.get(&path) {
                    Some(text) => Ok(text.clone()),
                    None => std::fs::read_to_string(&path),
                };
                match text {
                    Ok(text) => Answer::Result(json!({"content": text})),
                    Err(_) => Answer::error(-32002, "Resource not found"),
                }
            }
            "fs/write_text_file" => {
                let path = PathBuf::from(params["path"].as_str().unwrap_or_default());
                assert!(path.is_absolute(), "fs paths are absolute: {params}");
                let content = params["content"].as_str().unwrap_or_default();
                match std::fs::write(&path, content) {
                    Ok(()) => Answer::Result(Value::Null),
                    Err(err) => Answer::error(-32603, &err.to_string()),
                }
            }
            "terminal/create" => {
                let command = params["command"].as_str().unwrap_or_default().to_owned();
                let args: Vec<String> = params["args"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|a| a.as_str().map(str::to_owned))
                    .collect();
                let cwd = params["cwd"].as_str().map(PathBuf::from);
                assert!(cwd.as_ref().is_none_or(|c| c.is_absolute()), "terminal cwd is absolute: {params}");
                let line = args.last().cloned().unwrap_or_default();
                let id = format!("term_{}", self.next_terminal);
                self.next_terminal += 1;
                let terminal = if line.starts_with("sleep") {
                    FakeTerminal { output: String::new(), exit_code: None, running: true, released: false }
                } else {
                    let mut process = std::process::Command::new(&command);
                    process.args(&args).envs(self.terminal_env.iter().map(|(name, value)| (name, value)));
                    if let Some(cwd) = cwd {
                        process.current_dir(cwd);
                    }
                    let output = process.output().expect("run the fake terminal's command");
                    let mut text = String::from_utf8_lossy(&output.stdout).into_owned();
                    text.push_str(&String::from_utf8_lossy(&output.stderr));
                    FakeTerminal { output: text, exit_code: output.status.code(), running: false, released: false }
                };
                self.terminals.insert(id.clone(), terminal);
                Answer::Result(json!({"terminalId": id}))
            }
            "terminal/wait_for_exit" => match self.terminal(params) {
                Some(t) if !t.running => Answer::Result(json!({"exitCode": t.exit_code})),
                Some(_) => Answer::Ignore,
                None => Answer::error(-32002, "unknown terminal"),
            },
            "terminal/output" => match self.terminal(params) {
                Some(t) => {
                    let exit = if t.running { Value::Null } else { json!({"exitCode": t.exit_code}) };
                    Answer::Result(json!({"output": t.output, "truncated": false, "exitStatus": exit}))
                }
                None => Answer::error(-32002, "unknown terminal"),
            },
            "terminal/kill" => match self.terminal_mut(params) {
                Some(t) => {
                    t.running = false;
                    Answer::Result(json!({}))
                }
                None => Answer::error(-32002, "unknown terminal"),
            },
            "terminal/release" => match self.terminal_mut(params) {
                Some(t) => {
                    t.running = false;
                    t.released = true;
                    Answer::Result(json!({}))
                }
                None => Answer::error(-32002, "unknown terminal"),
            },
            _ => Answer::method_not_found(),
        }
    }

    /// Whether every terminal created was released.
    pub fn all_terminals_released(&self) -> bool {
        self.terminals.values().all(|t| t.released)
    }

    fn terminal(&self, params: &Value) -> Option<&FakeTerminal> {
        self.terminals.get(params["terminalId"].as_str().unwrap_or_default())
    }

    fn terminal_mut(&mut self, params: &Value) -> Option<&mut FakeTerminal> {
        self.terminals.get_mut(params["terminalId"].as_str().unwrap_or_default())
    }
}
