//! `--trace FILE` / `LATHE_TRACE` through the real binary (the trace is a
//! process-wide switch): the file holds the JSON-RPC messages both ways and
//! the model traffic, one JSON object per line with a timestamp and a
//! direction, and the API key appears nowhere in it.

use std::time::Duration;

use serde_json::Value;

use crate::support::acp_client::{Agent, agent_text, initialize, prompt};
use crate::support::harness::Harness;
use crate::support::mock_openai::{MockOpenAi, content_reply, text_reply};

const KEY: &str = "sk-trace-secret-9876543210";

fn lines(path: &std::path::Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).unwrap();
    text.lines().map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"))).collect()
}

async fn finish(agent: &mut Agent) {
    agent.close_stdin();
    let status = agent.wait_exit(Duration::from_secs(10)).await.expect("lathe exits when stdin closes");
    assert!(status.success(), "{}", agent.stderr());
}

#[tokio::test]
async fn the_trace_holds_both_directions_and_the_model_traffic_without_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("trace.jsonl");
    let trace_env = trace.to_string_lossy().into_owned();
    let mut h =
        Harness::process("api_key_env = \"TRACE_TEST_KEY\"\n", &[("TRACE_TEST_KEY", KEY), ("LATHE_TRACE", &trace_env)])
            .await;
    let session = h.session().await;
    h.mock.push(text_reply("Traced answer."));
    let id = prompt(&mut h.agent, &session, "Say something traced").await;
    let (messages, response) = h.agent.response(id).await;
    assert_eq!(response["result"]["stopReason"], "end_turn", "{response}");
    assert_eq!(agent_text(&messages), "Traced answer.");
    finish(&mut h.agent).await;
    // The key really went to the server: the trace had something to hide.
    assert_eq!(h.mock.chat_requests()[0].header("authorization"), Some(format!("Bearer {KEY}").as_str()));

    let raw = std::fs::read_to_string(&trace).unwrap();
    assert!(!raw.contains(KEY), "the key leaked into the trace");
    let records = lines(&trace);
    for record in &records {
        assert!(record["ts"].as_str().is_some_and(|ts| ts.ends_with('Z')), "{record}");
    }
    let of = |dir: &str, kind: &str| -> Vec<&Value> {
        records.iter().filter(|r| r["dir"] == dir && r["type"] == kind).collect()
    };
    let from_client = of("client->lathe", "jsonrpc");
    let methods: Vec<&str> = from_client.iter().filter_map(|r| r["message"]["method"].as_str()).collect();
    assert_eq!(methods, ["initialize", "session/new", "session/prompt"]);
    let to_client = of("lathe->client", "jsonrpc");
    assert!(to_client.iter().any(|r| r["message"]["result"]["stopReason"] == "end_turn"), "the prompt's answer");
    assert!(to_client.iter().any(|r| r["message"]["params"]["update"]["sessionUpdate"] == "agent_message_chunk"));

    let requests = of("lathe->model", "http_request");
    let chat = requests
        .iter()
        .find(|r| r["url"].as_str().is_some_and(|url| url.ends_with("/chat/completions")))
        .expect("the chat request");
    assert_eq!(chat["method"], "POST");
    assert_eq!(chat["headers"]["authorization"], "[redacted]");
    assert_eq!(chat["body"]["messages"][1]["content"], "Say something traced");
    assert!(of("model->lathe", "http_response").iter().any(|r| r["status"] == 200));
    let events = of("model->lathe", "sse_event");
    let streamed: String = events.iter().filter_map(|r| r["data"]["choices"][0]["delta"]["content"].as_str()).collect();
    assert_eq!(streamed, "Traced answer.");
    assert!(events.iter().any(|r| r["data"] == "[DONE]"));
}

/// `--trace` works with the other commands too (here `doctor`, whose model
/// requests are traced), and the key stays out of it.
#[tokio::test]
async fn doctor_is_traced_too() {
    let mock = crate::support::mock_openai::MockOpenAi::start().await;
    let home = tempfile::tempdir().unwrap();
    let config = home.path().join("config.toml");
    std::fs::write(
        &config,
        format!(
            "[models.m]\nbase_url = {:?}\nmodel = \"m\"\napi_key_env = \"TRACE_TEST_KEY\"\ncontext_window = 1000\n",
            mock.base_url()
        ),
    )
    .unwrap();
    let trace = home.path().join("doctor.jsonl");
    let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_lathe"))
        .arg("doctor")
        .arg("--config")
        .arg(&config)
        .arg("--trace")
        .arg(&trace)
        .env("TRACE_TEST_KEY", KEY)
        .env("HOME", home.path())
        .env("XDG_DATA_HOME", home.path().join("data"))
        .env("NO_PROXY", "127.0.0.1")
        .env_remove("LATHE_TRACE")
        .output()
        .await
        .unwrap();
    // The mock lists nothing and scripts no answer: doctor fails, and says so.
    assert_eq!(output.status.code(), Some(1));
    let raw = std::fs::read_to_string(&trace).unwrap();
    assert!(!raw.contains(KEY));
    let records = lines(&trace);
    assert!(records.iter().any(|r| r["type"] == "http_request" && r["url"].as_str().unwrap().ends_with("/v1/models")));
    assert!(records.iter().any(|r| r["type"] == "http_error"));
}

/// Secrets outside the key variable (issue 29): a password in `base_url`,
/// and the values of MCP servers' `env` and `headers` whatever their names
/// (the config's and the editor's), never reach the trace, the log, the model picker sent
/// to the editor, or `lathe doctor`; the URL is shown with `***`. A secret
/// the model streams in pieces, across deltas, is caught in the trace too.
#[tokio::test]
async fn secrets_outside_the_key_variable_are_never_written() {
    const URL_PASSWORD: &str = "url-pass-5150";
    const PAT: &str = "ghp_pat-value-31337";
    const DB_PASSWORD: &str = "db-pass-2718";
    const EDITOR_VALUE: &str = "editor-env-value-4242";
    const HEADER_VALUE: &str = "team-header-value-777";
    const EDITOR_HEADER: &str = "editor-header-value-8080";
    let mock = MockOpenAi::start().await;
    let home = tempfile::tempdir().unwrap();
    let base_url = mock.base_url().replacen("http://", &format!("http://lathe-user:{URL_PASSWORD}@"), 1);
    let config = home.path().join("config.toml");
    std::fs::write(
        &config,
        format!(
            "[models.m]\nbase_url = {base_url:?}\nmodel = \"m\"\ncontext_window = 32768\n\
             [mcp_servers.db]\ncommand = \"/nonexistent/db-mcp\"\n\
             env = {{ GH_PAT = {PAT:?}, DATABASE_URL = \"postgres://admin:{DB_PASSWORD}@db/app\" }}\n\
             [mcp_servers.web]\nurl = \"http://127.0.0.1:9/mcp\"\nheaders = {{ X-Team = {HEADER_VALUE:?} }}\n"
        ),
    )
    .unwrap();
    let trace = home.path().join("trace.jsonl");
    let (config_arg, trace_arg) = (config.to_string_lossy().into_owned(), trace.to_string_lossy().into_owned());
    let mut agent =
        Agent::spawn(&["--config", &config_arg, "--trace", &trace_arg, "--log-level", "debug"], &[], home.path());
    initialize(&mut agent, serde_json::json!({})).await;
    let cwd = home.path().to_string_lossy().into_owned();
    let editor_server = serde_json::json!({"name": "ed", "command": "/nonexistent/ed-mcp", "args": [],
        "env": [{"name": "PLAIN_NAME", "value": EDITOR_VALUE}]});
    let editor_web = serde_json::json!({"type": "http", "name": "edweb", "url": "http://127.0.0.1:9/mcp",
        "headers": [{"name": "X-Plain", "value": EDITOR_HEADER}]});
    let id =
        agent.request("session/new", serde_json::json!({"cwd": cwd, "mcpServers": [editor_server, editor_web]})).await;
    let (_, created) = agent.response(id).await;
    let session = created["result"]["sessionId"].as_str().expect("a session").to_owned();
    let picker = created["result"].to_string();
    assert!(picker.contains("m at http://***@127.0.0.1:"), "{picker}");
    // The model streams the PAT it read somewhere, in three pieces.
    mock.push(content_reply(&["The token is ghp_pat-", "value-", "31337, keep it safe."]));
    let id = prompt(&mut agent, &session, "what is the token?").await;
    let (messages, response) = agent.response(id).await;
    assert_eq!(response["result"]["stopReason"], "end_turn", "{response}");
    assert!(agent_text(&messages).contains(PAT), "the editor gets the answer as it is");
    finish(&mut agent).await;

    let doctor = tokio::process::Command::new(env!("CARGO_BIN_EXE_lathe"))
        .args(["doctor", "--config", &config_arg])
        .env("HOME", home.path())
        .env("XDG_DATA_HOME", home.path().join("data"))
        .env("NO_PROXY", "127.0.0.1")
        .env_remove("LATHE_TRACE")
        .output()
        .await
        .unwrap();
    let report = String::from_utf8_lossy(&doctor.stdout).into_owned();
    assert!(report.contains("http://***@127.0.0.1:"), "{report}");

    let config_secrets = [URL_PASSWORD, PAT, DB_PASSWORD, EDITOR_VALUE, HEADER_VALUE, EDITOR_HEADER];
    // The editor is shown the model's answer as it is; nothing else.
    let mut editor = agent.raw_stdout_lines().join("\n");
    for piece in ["The token is ghp_pat-", "value-", "31337, keep it safe."] {
        editor = editor.replace(piece, "");
    }
    let written = [
        ("the trace", std::fs::read_to_string(&trace).unwrap()),
        ("the log", agent.stderr()),
        ("the editor's messages", editor),
        ("doctor", format!("{report}{}", String::from_utf8_lossy(&doctor.stderr))),
    ];
    for (what, text) in &written {
        for secret in config_secrets.iter().chain(&["ghp_pat-", "value-31337"]) {
            assert!(!text.contains(secret), "{secret} is in {what}: {text}");
        }
    }
}
