//! With no config at all, lathe looks for a model server running on
//! loopback (issue 28; `lathe::discover`): mock servers imitate each kind's
//! metadata endpoint (Ollama, LM Studio, llama.cpp, vLLM), and a server
//! that only looks like one (a generic OpenAI-style list, an HTML page)
//! on a port of its own is never taken. Exactly one server with a model
//! that takes tools is used (said in the greeting, by `lathe doctor` and
//! to the editor); two are not chosen between. A port that accepts and
//! never answers costs one request timeout. Every agent here has an empty
//! home, so no real config is read, and looks only at the mocks' ports.

use std::path::Path;
use std::sync::Arc;

use lathe::config::{ConfigOrigin, ConfigSource};
use lathe::discover::{Plan, ServerKind, discover, load_config};
use serde_json::json;

use crate::support::acp_client::{Agent, initialize, prompt};
use crate::support::mock_openai::{
    MockOpenAi, Reply, llamacpp_props, lmstudio_models, ollama_show, text_reply, vllm_models,
};

/// An Ollama: two chat models (the second loaded) and an embedding model.
pub(super) async fn ollama() -> MockOpenAi {
    let mock = MockOpenAi::start().await;
    mock.route("GET", "/api/version", Reply::Json(json!({"version": "0.12.3"})));
    let model = |name: &str| json!({"name": name, "model": name, "digest": "0123abcd", "details": {"family": "qwen3"}});
    mock.route("GET", "/api/tags", Reply::Json(json!({"models": [model("gemma3:4b"), model("qwen3:8b")]})));
    mock.route("GET", "/api/ps", Reply::Json(json!({"models": [{"name": "qwen3:8b", "model": "qwen3:8b"}]})));
    mock.route("POST", "/api/show", ollama_show(40960, None, &["completion", "tools"]));
    mock
}

pub(super) async fn lmstudio() -> MockOpenAi {
    let mock = MockOpenAi::start().await;
    mock.route("GET", "/api/v0/models", lmstudio_models("qwen/qwen3-coder-30b", 32768, Some(8192), false));
    mock
}

async fn llamacpp() -> MockOpenAi {
    let mock = MockOpenAi::start().await;
    mock.route("GET", "/props", llamacpp_props(8192, false));
    mock.route(
        "GET",
        "/v1/models",
        Reply::Json(
            json!({"object": "list", "data": [{"id": "qwen3-8b.gguf", "object": "model", "owned_by": "llamacpp"}]}),
        ),
    );
    mock
}

/// A vLLM; whether it was started with tool calling on decides its answer
/// to the one request with a tool.
async fn vllm(takes_tools: bool) -> MockOpenAi {
    let mock = MockOpenAi::start().await;
    mock.route("GET", "/v1/models", vllm_models("Qwen/Qwen3-Coder-30B-A3B-Instruct", 40960));
    mock.push(match takes_tools {
        true => Reply::Json(json!({"id": "c", "object": "chat.completion", "choices": [
            {"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "length"}]})),
        false => Reply::error(
            400,
            "\"auto\" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set",
        ),
    });
    mock
}

/// Answers like an OpenAI-compatible proxy: a model list, no server's own
/// metadata (an HTML page where llama.cpp has `/props`).
async fn impostor() -> MockOpenAi {
    let mock = MockOpenAi::start().await;
    let list = json!({"object": "list", "data": [{"id": "gpt-x", "object": "model", "owned_by": "openai"}]});
    mock.route("GET", "/v1/models", Reply::Json(list.clone()));
    mock.route("GET", "/api/v0/models", Reply::Json(list));
    mock.route(
        "GET",
        "/props",
        Reply::Status {
            status: 200,
            body: "<html>props</html>".into(),
            headers: vec![("content-type".into(), "text/html".into())],
        },
    );
    mock.route("GET", "/api/version", Reply::Json(json!({"version": "1", "build": "proxy"})));
    mock
}

fn ports(mocks: &[&MockOpenAi]) -> Vec<u16> {
    mocks.iter().map(|mock| mock.addr().port()).collect()
}

/// The plan `LATHE_DISCOVER` gives for these ports.
fn plan(mocks: &[&MockOpenAi]) -> Plan {
    let list = ports(mocks).iter().map(u16::to_string).collect::<Vec<_>>().join(",");
    Plan::from_env(&|name: &str| (name == "LATHE_DISCOVER").then(|| list.clone())).unwrap().unwrap()
}

/// How a binary (or `load_config`) with an empty home and these mocks' ports is configured.
fn origin(home: &Path, mocks: &[&MockOpenAi]) -> ConfigOrigin {
    let vars = crate::support::agent_env::environment(home, &[("LATHE_DISCOVER", &discover_env(mocks))]);
    ConfigOrigin {
        cli_path: None,
        env: Arc::new(move |name: &str| vars.iter().rev().find(|(var, _)| var == name).map(|(_, value)| value.clone())),
    }
}

fn discover_env(mocks: &[&MockOpenAi]) -> String {
    ports(mocks).iter().map(u16::to_string).collect::<Vec<_>>().join(",")
}

#[tokio::test]
async fn each_kind_is_told_by_its_own_metadata_and_an_impostor_by_none() {
    let (ollama, lmstudio, llamacpp) = (ollama().await, lmstudio().await, llamacpp().await);
    let (vllm, impostor) = (vllm(true).await, impostor().await);
    let found = discover(&plan(&[&ollama, &lmstudio, &llamacpp, &vllm, &impostor])).await;
    let kinds: Vec<ServerKind> = found.servers.iter().map(|s| s.kind).collect();
    assert_eq!(kinds, [ServerKind::Ollama, ServerKind::LmStudio, ServerKind::LlamaCpp, ServerKind::Vllm]);
    let picks: Vec<&str> = found.servers.iter().map(|s| s.pick().unwrap().id.as_str()).collect();
    assert_eq!(picks, ["qwen3:8b", "qwen/qwen3-coder-30b", "qwen3-8b.gguf", "some-other-model"], "{found:#?}");
    assert_eq!(found.servers[0].base_url, ollama.base_url());
    assert!(found.choice().is_none(), "four servers: none is chosen");
    // vLLM was asked once, with a tool and one token; the impostor never.
    let asked = vllm.chat_requests();
    assert_eq!(asked.len(), 1);
    assert_eq!(
        (asked[0].body["max_tokens"].clone(), asked[0].body["tools"][0]["type"].clone()),
        (json!(1), json!("function"))
    );
    assert!(impostor.chat_requests().is_empty());
}

#[tokio::test]
async fn a_server_that_takes_no_tools_is_found_but_not_used() {
    let vllm = vllm(false).await;
    let home = tempfile::tempdir().unwrap();
    let config = load_config(&origin(home.path(), &[&vllm])).await.unwrap();
    assert_eq!(config.source, ConfigSource::Unconfigured);
    assert_eq!(config.local_servers.len(), 1);
    assert!(config.local_servers[0].contains("none known to take tools"), "{:?}", config.local_servers);
    assert!(config.unusable().unwrap().contains("vLLM"), "{:?}", config.unusable());
}

#[tokio::test]
async fn exactly_one_server_is_used_and_two_are_not_chosen_between() {
    let (ollama, lmstudio, impostor) = (ollama().await, lmstudio().await, impostor().await);
    let home = tempfile::tempdir().unwrap();
    let config = load_config(&origin(home.path(), &[&ollama, &impostor])).await.unwrap();
    assert_eq!(
        config.source,
        ConfigSource::Discovered { server: "Ollama".into(), base_url: ollama.base_url() },
        "{:?}",
        config.local_servers
    );
    let model = config.default_model().unwrap();
    assert_eq!((model.key.as_str(), model.model.as_str(), model.api_key.is_none()), ("ollama", "qwen3:8b", true));
    assert!(config.unusable().is_none());

    let config = load_config(&origin(home.path(), &[&ollama, &lmstudio])).await.unwrap();
    assert_eq!(config.source, ConfigSource::Unconfigured);
    assert_eq!(config.local_servers.len(), 2, "{:?}", config.local_servers);
    let why = config.unusable().unwrap();
    assert!(
        why.contains("model servers running here") && why.contains("LM Studio") && why.contains("lathe setup"),
        "{why}"
    );

    // A config file wins: nothing is looked for.
    let path = crate::support::agent_env::config_dir(home.path()).join("config.toml");
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(&path, "[models.m]\nbase_url = \"http://127.0.0.1:9/v1\"\nmodel = \"m\"\n").unwrap();
    let before = ollama.requests().len();
    let config = load_config(&origin(home.path(), &[&ollama])).await.unwrap();
    assert_eq!(config.source, ConfigSource::File(path));
    assert_eq!(ollama.requests().len(), before);
}

/// A port that accepts connections and never answers costs one request
/// timeout, all four identifications waiting at once; a closed port none.
#[tokio::test(start_paused = true)]
async fn a_silent_port_costs_one_request_timeout() {
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let plan = Plan { ports: vec![silent.local_addr().unwrap().port(), closed], ..Plan::usual() };
    let started = tokio::time::Instant::now();
    let found = discover(&plan).await;
    assert!(found.servers.is_empty());
    assert_eq!(started.elapsed(), lathe::discover::IDENTIFY_TIMEOUT, "not the budget, not more");
    assert!(lathe::discover::IDENTIFY_TIMEOUT < lathe::discover::BUDGET);
    drop(silent);
}

/// The binary with an empty home and an Ollama running: the editor gets a
/// working agent, told which server it uses (a notice, or an agent message
/// for a client without notices), `lathe doctor` says so, and the prompt
/// goes to the found model.
#[tokio::test]
async fn the_first_command_serves_the_found_model_and_says_so() {
    let ollama = ollama().await;
    let home = tempfile::tempdir().unwrap();
    let cwd = home.path().canonicalize().unwrap();
    let env = [("LATHE_DISCOVER", discover_env(&[&ollama]))];
    let envs: Vec<(&str, &str)> = env.iter().map(|(n, v)| (*n, v.as_str())).collect();

    let mut agent = Agent::spawn(&[], &envs, home.path());
    let result = initialize(&mut agent, json!({"session": {"notices": {}}})).await;
    assert_eq!(result["authMethods"][0]["id"], "lathe-config", "a working config: {result}");
    let id = agent.request("session/new", json!({"cwd": cwd, "mcpServers": []})).await;
    let (_, created) = agent.response(id).await;
    let session = created["result"]["sessionId"].as_str().unwrap_or_else(|| panic!("{created}")).to_owned();
    let (_, notice) = agent.until("the notice", |m| m["params"]["update"]["sessionUpdate"] == "notice").await;
    let update = &notice["params"]["update"];
    assert_eq!(
        (update["severity"].as_str(), update["title"].as_str()),
        (Some("info"), Some("Using Ollama on this machine"))
    );
    let description = update["description"].as_str().unwrap();
    assert!(description.contains(&ollama.base_url()) && description.contains("qwen3:8b"), "{description}");
    ollama.push(text_reply("found and used"));
    let id = prompt(&mut agent, &session, "hi").await;
    let (_, answer) = agent.response(id).await;
    assert_eq!(answer["result"]["stopReason"], "end_turn", "{answer}");
    assert_eq!(ollama.chat_requests()[0].body["model"], "qwen3:8b");

    // Without notices: an agent message.
    let mut plain = Agent::spawn(&[], &envs, home.path());
    initialize(&mut plain, json!({})).await;
    let id = plain.request("session/new", json!({"cwd": cwd, "mcpServers": []})).await;
    plain.response(id).await;
    let (_, note) = plain.until("the note", |m| m["params"]["update"]["sessionUpdate"] == "agent_message_chunk").await;
    let text = note["params"]["update"]["content"]["text"].as_str().unwrap();
    assert!(text.starts_with("Note: Using Ollama on this machine."), "{text}");

    let doctor = tokio::process::Command::from(doctor_command(home.path(), &envs)).output().await.unwrap();
    let report = String::from_utf8_lossy(&doctor.stdout);
    let line = report.lines().find(|line| line.contains(" config ")).unwrap_or_default();
    assert!(
        line.starts_with("ok") && line.contains(&format!("the Ollama server found running at {}", ollama.base_url())),
        "{report}"
    );
    assert!(line.contains("(model qwen3:8b)"), "{line}");
}

/// `lathe doctor` in the test's environment (no inherited `LATHE_*`).
fn doctor_command(home: &Path, envs: &[(&str, &str)]) -> std::process::Command {
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_lathe"));
    command.arg("doctor").current_dir(home);
    for (name, _) in std::env::vars_os() {
        if crate::support::agent_env::scrubbed(&name.to_string_lossy()) {
            command.env_remove(&name);
        }
    }
    command.envs(crate::support::agent_env::environment(home, envs));
    command
}

/// Started by hand on a terminal with no config and one server running,
/// the greeting names it, and the model's name (the server's bytes) is
/// shown escaped.
#[cfg(target_os = "linux")]
#[tokio::test]
async fn the_greeting_names_the_found_server() {
    let ollama = ollama().await;
    let hostile = "qwen3\u{1b}[8m:8b";
    ollama.route("GET", "/api/tags", Reply::Json(json!({"models": [{"name": hostile, "model": hostile}]})));
    ollama.route("GET", "/api/ps", Reply::Json(json!({"models": [{"name": hostile, "model": hostile}]})));
    let home = tempfile::tempdir().unwrap();
    let mut command = tokio::process::Command::new("script");
    command.args(["-qec", env!("CARGO_BIN_EXE_lathe"), "/dev/null"]).current_dir(home.path());
    for (name, _) in std::env::vars_os() {
        if crate::support::agent_env::scrubbed(&name.to_string_lossy()) {
            command.env_remove(&name);
        }
    }
    let port = discover_env(&[&ollama]);
    command.envs(crate::support::agent_env::environment(home.path(), &[("LATHE_DISCOVER", &port), ("NO_COLOR", "1")]));
    command
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let mut script = command.spawn().expect("util-linux `script` runs lathe on a pseudo-terminal");
    {
        use tokio::io::AsyncWriteExt as _;
        let mut keyboard = script.stdin.take().unwrap();
        // Ctrl-D at the start of a line: end of input, once lathe reads it.
        keyboard.write_all(b"\x04").await.unwrap();
    }
    let output =
        tokio::time::timeout(std::time::Duration::from_secs(30), script.wait_with_output()).await.unwrap().unwrap();
    let screen = String::from_utf8_lossy(&output.stdout);
    let greeting = format!("qwen3\\u{{1b}}[8m:8b at {}, found running here: Ollama", ollama.base_url());
    assert!(screen.contains(&greeting), "{screen}");
    assert!(!screen.contains(hostile), "the name reached the terminal raw (greeting or log): {screen:?}");
}
