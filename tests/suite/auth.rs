//! Authentication over ACP (issue 28): the methods `initialize` offers by
//! the client's capabilities (`lathe-config` of type `agent` when a working
//! config is present; `lathe-setup` of type `terminal` only with
//! `clientCapabilities.auth.terminal`, as an `agent` method carrying the
//! older `_meta["terminal-auth"]` for clients that sent that marker), the
//! auth-required error (-32000) of `session/new`, `session/load` and
//! `session/resume` while no model is usable, `authenticate` before and
//! after a config is written (read again from disk), and `logout`, which
//! forgets a key lathe stored and never one from the environment. Also the
//! ACP registry's auth check, as its CI runs it: an empty HOME, its exact
//! `initialize`, the first line of stdout.

use std::path::Path;

use serde_json::{Value, json};

use crate::support::acp_client::{Agent, handshake, initialize, prompt};
use crate::support::agent_env::config_dir;
use crate::support::harness::Harness;
use crate::support::mock_openai::{MockOpenAi, Reply, text_reply};

/// A client that runs terminal auth the way the schema says.
fn terminal_client() -> Value {
    json!({"fs": {"readTextFile": true, "writeTextFile": true}, "terminal": true, "auth": {"terminal": true}})
}

/// What the ACP registry's auth check sends (`.github/workflows/client.py`).
fn registry_client() -> Value {
    json!({
        "terminal": true,
        "fs": {"readTextFile": true, "writeTextFile": true},
        "_meta": {"terminal_output": true, "terminal-auth": true},
    })
}

fn ids(methods: &Value) -> Vec<&str> {
    methods.as_array().unwrap().iter().map(|m| m["id"].as_str().unwrap()).collect()
}

/// An in-process agent with no config at all: an empty home, nothing
/// looked for on the machine's ports.
fn unconfigured(home: &Path) -> Agent {
    Agent::in_process(&[], &[], home)
}

async fn new_session_error(agent: &mut Agent, cwd: &Path) -> Value {
    let id = agent.request("session/new", json!({"cwd": cwd, "mcpServers": []})).await;
    let (_, response) = agent.response(id).await;
    assert!(response.get("result").is_none(), "{response}");
    response["error"].clone()
}

/// The registry's rule: a method's type is its `type`, else a `_meta` key
/// `terminal-auth` or `agent-auth`, else `agent`; one must be `agent` or `terminal`.
fn registry_accepts(methods: &Value) -> bool {
    methods.as_array().is_some_and(|methods| {
        methods.iter().any(|m| {
            let kind = m["type"].as_str().map(str::to_owned).unwrap_or_else(|| {
                match (m["_meta"].get("terminal-auth"), m["_meta"].get("agent-auth")) {
                    (Some(_), _) => "terminal".to_owned(),
                    (None, Some(_)) => "agent".to_owned(),
                    (None, None) => "agent".to_owned(),
                }
            });
            kind == "agent" || kind == "terminal"
        })
    })
}

#[tokio::test]
async fn a_working_config_offers_the_agent_method_and_terminal_clients_the_setup() {
    let mut h = Harness::start().await;
    let plain = initialize(&mut h.agent, json!({"fs": {"readTextFile": true}, "terminal": true})).await;
    assert_eq!(
        plain["authMethods"],
        json!([{"id": "lathe-config", "name": "Use lathe's config",
            "description": "Check the model in lathe's config (read again from disk) and use it"}]),
        "{plain}"
    );
    assert_eq!(plain["agentCapabilities"]["auth"], json!({}), "no stored key, no logout");

    let mut agent = h.agent_with(&["--config", &h.home.path().join("config.toml").to_string_lossy()]);
    let terminal = initialize(&mut agent, terminal_client()).await;
    assert_eq!(ids(&terminal["authMethods"]), ["lathe-config", "lathe-setup"]);
    let setup = &terminal["authMethods"][1];
    assert_eq!(setup["type"], "terminal");
    assert_eq!(setup["args"], json!(["setup"]));
    assert!(setup.get("env").is_none() && setup.get("_meta").is_none(), "{setup}");
}

#[tokio::test]
async fn the_older_terminal_auth_marker_gets_the_launch_description() {
    let home = tempfile::tempdir().unwrap();
    let mut agent = unconfigured(home.path());
    let result = initialize(&mut agent, registry_client()).await;
    let methods = &result["authMethods"];
    assert_eq!(ids(methods), ["lathe-setup"], "no config: only the setup");
    let setup = &methods[0];
    assert!(setup.get("type").is_none(), "an agent method: this client never said auth.terminal: {setup}");
    let launch = &setup["_meta"]["terminal-auth"];
    assert_eq!(launch["args"], json!(["setup"]), "{setup}");
    assert_eq!(launch["label"], "lathe setup");
    assert!(Path::new(launch["command"].as_str().unwrap()).is_absolute(), "{launch}");
    assert!(registry_accepts(methods), "{methods}");

    // Both markers: the typed method, with the description for clients that only read it.
    let mut agent = unconfigured(home.path());
    let mut both = terminal_client();
    both["_meta"] = json!({"terminal-auth": true});
    let result = initialize(&mut agent, both).await;
    let setup = &result["authMethods"][0];
    assert_eq!(
        (setup["type"].as_str(), setup["_meta"]["terminal-auth"]["args"].clone()),
        (Some("terminal"), json!(["setup"]))
    );
}

/// No model: `session/new`, `session/load`, `session/resume` and
/// `session/fork` answer -32000 naming the method that fixes it; a plain client gets the same
/// error with no method to press, and the message says what to run.
#[tokio::test]
async fn no_model_means_auth_required_naming_the_method() {
    let home = tempfile::tempdir().unwrap();
    let cwd = home.path().canonicalize().unwrap();
    let mut agent = unconfigured(home.path());
    let result = initialize(&mut agent, terminal_client()).await;
    assert_eq!(ids(&result["authMethods"]), ["lathe-setup"]);
    let error = new_session_error(&mut agent, &cwd).await;
    assert_eq!(error["code"], -32000, "{error}");
    assert_eq!(error["data"]["authMethods"], json!(["lathe-setup"]));
    let message = error["message"].as_str().unwrap();
    assert!(message.starts_with("Authentication required: no model is configured"), "{message}");
    assert!(message.contains("lathe setup"), "{message}");
    for method in ["session/load", "session/resume", "session/fork"] {
        let id = agent.request(method, json!({"sessionId": "sess_x", "cwd": cwd, "mcpServers": []})).await;
        let (_, response) = agent.response(id).await;
        assert_eq!(response["error"]["code"], -32000, "{method}: {response}");
    }

    let mut plain = unconfigured(home.path());
    let result = initialize(&mut plain, json!({})).await;
    assert_eq!(result["authMethods"], json!([]), "nothing a plain client could run");
    let error = new_session_error(&mut plain, &cwd).await;
    assert_eq!((error["code"].clone(), error["data"]["authMethods"].clone()), (json!(-32000), json!([])));
}

/// `authenticate` re-reads the config from disk: before one is written it
/// says what is missing; with one whose server refuses the key, that; once
/// it works, `{}`, and sessions start. An unknown method is invalid params.
#[tokio::test]
async fn authenticate_before_and_after_a_config_is_written() {
    let mock = MockOpenAi::start().await;
    let home = tempfile::tempdir().unwrap();
    let cwd = home.path().canonicalize().unwrap();
    let mut agent = Agent::in_process(&[], &[("AUTH_TEST_KEY", "sk-auth-test-0123")], home.path());
    initialize(&mut agent, terminal_client()).await;
    let authenticate = |method: &'static str| json!({"methodId": method});

    let id = agent.request("authenticate", authenticate("lathe-config")).await;
    let (_, before) = agent.response(id).await;
    assert_eq!(before["error"]["code"], -32000, "{before}");
    assert!(before["error"]["message"].as_str().unwrap().contains("no model is configured"), "{before}");

    let id = agent.request("authenticate", authenticate("github-oauth")).await;
    let (_, unknown) = agent.response(id).await;
    assert_eq!(unknown["error"]["code"], -32602, "{unknown}");

    // A config written behind lathe's back, as `lathe setup` in a terminal would.
    let path = config_dir(home.path()).join("config.toml");
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let model = format!(
        "[models.mock]\nbase_url = {:?}\nmodel = \"mock-model\"\napi_key_env = \"AUTH_TEST_KEY\"\ncontext_window = 32768\n",
        mock.base_url()
    );
    std::fs::write(&path, &model).unwrap();
    mock.route("GET", "/v1/models", Reply::error(401, "Incorrect API key provided"));
    let id = agent.request("authenticate", authenticate("lathe-config")).await;
    let (_, refused) = agent.response(id).await;
    assert_eq!(refused["error"]["code"], -32000, "{refused}");
    let message = refused["error"]["message"].as_str().unwrap();
    assert!(message.contains("refused") && message.contains("lathe doctor"), "{message}");
    assert!(!refused.to_string().contains("sk-auth-test-0123"), "the key is never shown: {refused}");
    new_session_error(&mut agent, &cwd).await;

    mock.route("GET", "/v1/models", Reply::Json(json!({"object": "list", "data": [{"id": "mock-model"}]})));
    // The terminal method's id works too (a client should not send it; it costs nothing).
    for method in ["lathe-setup", "lathe-config"] {
        let id = agent.request("authenticate", authenticate(method)).await;
        let (_, answer) = agent.response(id).await;
        assert_eq!(answer["result"], json!({}), "{method}: {answer}");
    }
    let id = agent.request("session/new", json!({"cwd": cwd, "mcpServers": []})).await;
    let (_, created) = agent.response(id).await;
    let session = created["result"]["sessionId"].as_str().unwrap_or_else(|| panic!("{created}")).to_owned();
    mock.push(text_reply("configured"));
    let id = prompt(&mut agent, &session, "hi").await;
    let (_, answer) = agent.response(id).await;
    assert_eq!(answer["result"]["stopReason"], "end_turn", "{answer}");
    assert_eq!(mock.chat_requests()[0].header("authorization"), Some("Bearer sk-auth-test-0123"));
}

/// `logout`, advertised when a key lathe stored is in use, deletes lathe's
/// credentials file; the config file and a key from the environment stay.
/// New sessions then need authentication again.
#[tokio::test]
async fn logout_forgets_the_stored_key_and_only_that() {
    let secret = "sk-stored-by-setup-4567";
    let mock = MockOpenAi::start().await;
    let home = tempfile::tempdir().unwrap();
    let cwd = home.path().canonicalize().unwrap();
    let user_dir = config_dir(home.path());
    lathe::credentials::store(&user_dir, "mock", &lathe::config::ApiKey::new(secret)).unwrap();
    let config = format!(
        "default_model = \"mock\"\n\
         [models.mock]\nbase_url = {url:?}\nmodel = \"mock-model\"\napi_key_stored = true\ncontext_window = 32768\n\
         [models.own]\nbase_url = {url:?}\nmodel = \"own-model\"\napi_key_env = \"OWN_KEY\"\ncontext_window = 32768\n",
        url = mock.base_url()
    );
    std::fs::write(user_dir.join("config.toml"), &config).unwrap();
    let mut agent = Agent::in_process(&[], &[("OWN_KEY", "sk-own-env-89")], home.path());
    let result = initialize(&mut agent, terminal_client()).await;
    assert_eq!(result["agentCapabilities"]["auth"], json!({"logout": {}}), "{result}");
    let id = agent.request("session/new", json!({"cwd": cwd, "mcpServers": []})).await;
    let (_, created) = agent.response(id).await;
    let session = created["result"]["sessionId"].as_str().unwrap().to_owned();
    mock.push(text_reply("with the stored key"));
    let id = prompt(&mut agent, &session, "hi").await;
    agent.response(id).await;
    assert_eq!(mock.chat_requests()[0].header("authorization"), Some(format!("Bearer {secret}").as_str()));

    let id = agent.request("logout", json!({})).await;
    let (_, answer) = agent.response(id).await;
    assert_eq!(answer["result"], json!({}), "{answer}");
    assert!(!lathe::credentials::path(&user_dir).exists(), "the stored key is gone");
    assert_eq!(std::fs::read_to_string(user_dir.join("config.toml")).unwrap(), config, "the config is the user's");
    let error = new_session_error(&mut agent, &cwd).await;
    assert_eq!(error["code"], -32000);
    assert!(error["message"].as_str().unwrap().contains("forgotten"), "{error}");
    // The open session's next request goes out with no key, or not at all.
    let id = prompt(&mut agent, &session, "again").await;
    let (_, after) = agent.response(id).await;
    assert!(after["error"]["message"].as_str().unwrap_or_default().contains("lathe setup"), "{after}");
    assert_eq!(mock.chat_requests().len(), 1);

    // The environment's key was never lathe's to forget.
    let restarted_env = [("OWN_KEY", "sk-own-env-89")];
    let mut again = Agent::in_process(&[], &restarted_env, home.path());
    let result = initialize(&mut again, json!({})).await;
    assert_eq!(result["agentCapabilities"]["auth"], json!({"logout": {}}), "the config still says stored");
    let text = again.raw_stdout_lines().join("\n") + &agent.raw_stdout_lines().join("\n");
    assert!(!text.contains(secret) && !text.contains("sk-own-env-89"), "no key on the wire");
}

/// The registry's CI, as its client.py runs it: the binary, an empty HOME,
/// `TERM=dumb`, its `initialize`, and the first line of stdout must be a
/// response whose `authMethods` passes its rule.
#[tokio::test]
async fn the_registry_auth_check_passes_with_an_empty_home() {
    let home = tempfile::tempdir().unwrap();
    let mut agent = Agent::spawn(&[], &[("TERM", "dumb")], home.path());
    let id = agent
        .request(
            "initialize",
            json!({
                "protocolVersion": 1,
                "clientInfo": {"name": "ACP Registry Validator", "version": "1.0.0"},
                "clientCapabilities": registry_client(),
            }),
        )
        .await;
    let (_, response) = agent.response(id).await;
    let first = agent.raw_stdout_lines().first().cloned().unwrap_or_default();
    let first: Value = serde_json::from_str(&first).unwrap();
    assert_eq!(first, response, "the first line of stdout is the response");
    assert!(response.get("error").is_none(), "{response}");
    assert!(registry_accepts(&response["result"]["authMethods"]), "{response}");
}

/// With a config, a client that runs terminal auth still gets a session
/// at once (the gate is only for no model).
#[tokio::test]
async fn a_configured_agent_needs_no_authentication() {
    let mut h = Harness::start().await;
    let project = h.project.clone();
    handshake(&mut h.agent, terminal_client(), &project).await;
}
