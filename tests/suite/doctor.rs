//! `lathe doctor`, in process against the mock model server: all green on
//! a working setup; a dead port, a refused key and a server without tool
//! support each fail the right line with a reason a person can act on; no
//! secret is ever printed. The binary's own wiring (exit code, `--json`)
//! is checked once.

use std::path::Path;

use lathe::config::Config;
use lathe::doctor::{DoctorArgs, Report, Status};
use lathe::platform::sandbox::Enforcement;
use serde_json::{Value, json};

use crate::support::mcp_server::{Fixture, HttpMcpServer};
use crate::support::mock_openai::{MockOpenAi, Reply, refuses_tools_rule, text_reply, tool_call_reply};

const KEY: &str = "sk-doctor-secret-0123456789";

fn config(toml: &str) -> Config {
    let env = |name: &str| (name == "DOCTOR_TEST_KEY").then(|| KEY.to_owned());
    Config::from_toml_str(toml, Path::new("/test/config.toml"), &env).unwrap()
}

fn model_toml(base_url: &str) -> String {
    format!(
        "[models.mock]\nbase_url = {base_url:?}\nmodel = \"mock-model\"\napi_key_env = \"DOCTOR_TEST_KEY\"\n\
         context_window = 32768\n"
    )
}

async fn doctor(config: Config, data: &Path) -> Report {
    lathe::doctor::run(&DoctorArgs::default(), Ok(config), None, Some(data.to_path_buf())).await
}

fn status(report: &Report, check: &str) -> Status {
    report.find(check, Some("model mock")).unwrap_or_else(|| panic!("no {check} line in {report:?}")).status
}

fn detail<'a>(report: &'a Report, check: &str) -> &'a str {
    &report.find(check, Some("model mock")).unwrap().detail
}

fn text_of(report: &Report) -> String {
    let mut out = Vec::new();
    report.write(&mut out, false).unwrap();
    let mut json = Vec::new();
    report.write(&mut json, true).unwrap();
    String::from_utf8(out).unwrap() + &String::from_utf8(json).unwrap()
}

fn models_route(mock: &MockOpenAi) {
    mock.route("GET", "/v1/models", Reply::Json(json!({"object": "list", "data": [{"id": "mock-model"}]})));
}

/// Issue 25: the sandbox line says what is enforced and what a command in
/// it may do: no network, no credentials, read-only git hooks and config.
#[tokio::test]
async fn the_sandbox_line_says_what_it_enforces() {
    let data = tempfile::tempdir().unwrap();
    let mut config = config(&model_toml("http://127.0.0.1:9/v1"));
    config.children.supervisor = Some(std::path::PathBuf::from(env!("CARGO_BIN_EXE_lathe")));
    let report = doctor(config, data.path()).await;
    let line = report.find("sandbox", None).unwrap();
    let findings = lathe::platform::sandbox::probe(Path::new(env!("CARGO_BIN_EXE_lathe")));
    let status = findings.status(false);
    match status.enforcement {
        Enforcement::Full => {
            assert_eq!(line.status, Status::Ok, "{line:?}");
            for said in ["fully enforced", "no network", "`~/.ssh`", "`.git/hooks`", "seccomp"] {
                assert!(line.detail.contains(said), "{said}: {}", line.detail);
            }
        }
        Enforcement::Partial => {
            assert_eq!(line.status, Status::Warn, "{line:?}");
            assert!(line.detail.contains(&status.detail), "{}", line.detail);
            // What is said of the network is what holds: all of it off
            // with the filter, TCP alone with Landlock's rules only.
            let network = match (&findings.seccomp, &findings.landlock) {
                (Ok(()), _) => "no network",
                (Err(_), Ok(abi)) if *abi >= 4 => "TCP connections and listeners are refused",
                (Err(_), _) => "the network could not be turned off",
            };
            assert!(line.detail.contains(network), "{network}: {}", line.detail);
        }
        Enforcement::None => assert_eq!(line.status, Status::Warn, "{line:?}"),
    }
}

#[tokio::test]
async fn a_working_setup_is_all_green() {
    let mock = MockOpenAi::start().await;
    models_route(&mock);
    mock.push(text_reply("ready"));
    mock.push(tool_call_reply(&[("call_1", "report_ready", json!({"ready": true}))]));
    let mcp = HttpMcpServer::start(Fixture::new(None)).await;
    let data = tempfile::tempdir().unwrap();
    let toml = format!("{}[mcp_servers.fx]\nurl = {:?}\n", model_toml(&mock.base_url()), mcp.url());
    let report = doctor(config(&toml), data.path()).await;

    assert!(report.passed(), "{}", text_of(&report));
    for check in ["endpoint", "auth", "listed", "streaming", "tools", "usage", "context window"] {
        assert_eq!(status(&report, check), Status::Ok, "{check}: {}", text_of(&report));
    }
    assert!(detail(&report, "context window").starts_with("32768 tokens"), "{}", detail(&report, "context window"));
    assert!(detail(&report, "usage").contains("10 prompt"), "{}", detail(&report, "usage"));
    let mcp_line = report.find("tools listed", Some("mcp fx")).unwrap();
    assert_eq!(mcp_line.status, Status::Ok, "{mcp_line:?}");
    assert_eq!(report.find("data dir", None).unwrap().status, Status::Ok);
    assert!(report.find("sandbox", None).is_some());
    // The key went to the server, and nowhere in the report.
    let chat = mock.chat_requests();
    assert_eq!(chat.len(), 2);
    assert_eq!(chat[0].header("authorization"), Some(format!("Bearer {KEY}").as_str()));
    assert!(chat[1].body["tools"][0]["function"]["name"] == "report_ready");
    assert!(!text_of(&report).contains(KEY));
}

/// Without `context_window`, the line says what the server reported and
/// where it came from (llama.cpp's `/props` here); an MCP server that cannot
/// start fails its own line with the reason, and only that line.
#[tokio::test]
async fn a_detected_window_and_a_broken_mcp_server_are_reported() {
    let mock = MockOpenAi::start().await;
    models_route(&mock);
    mock.route("GET", "/props", crate::support::mock_openai::llamacpp_props(8192, false));
    mock.push(text_reply("ready"));
    mock.push(tool_call_reply(&[("call_1", "report_ready", json!({"ready": true}))]));
    let data = tempfile::tempdir().unwrap();
    let without_window = model_toml(&mock.base_url()).replace("context_window = 32768\n", "");
    let toml = format!("{without_window}[mcp_servers.broken]\ncommand = \"/nonexistent/mcp-server\"\n");
    let report = doctor(config(&toml), data.path()).await;

    assert_eq!(status(&report, "context window"), Status::Ok, "{}", text_of(&report));
    let window = detail(&report, "context window");
    assert!(window.starts_with("8192 tokens") && window.contains("/props"), "{window}");
    let mcp_line = report.find("tools listed", Some("mcp broken")).unwrap();
    assert_eq!(mcp_line.status, Status::Fail, "{mcp_line:?}");
    assert!(!mcp_line.detail.is_empty(), "{mcp_line:?}");
    assert!(!report.passed());
    for check in ["endpoint", "auth", "streaming", "tools"] {
        assert_eq!(status(&report, check), Status::Ok, "{check}: {}", text_of(&report));
    }
}

#[tokio::test]
async fn a_dead_port_fails_the_endpoint_and_skips_the_rest() {
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let data = tempfile::tempdir().unwrap();
    let report = doctor(config(&model_toml(&format!("http://127.0.0.1:{port}/v1"))), data.path()).await;
    assert!(!report.passed());
    assert_eq!(status(&report, "endpoint"), Status::Fail);
    assert!(detail(&report, "endpoint").contains("unreachable"), "{}", detail(&report, "endpoint"));
    assert!(detail(&report, "endpoint").to_lowercase().contains("refused"), "{}", detail(&report, "endpoint"));
    for check in ["auth", "streaming", "tools"] {
        assert_eq!(status(&report, check), Status::Skip, "{check}");
    }
}

#[tokio::test]
async fn a_refused_key_fails_auth_without_printing_it() {
    let mock = MockOpenAi::start().await;
    // Providers echo (part of) the key back; the report must not.
    mock.route("GET", "/v1/models", Reply::error(401, &format!("Incorrect API key provided: {KEY}")));
    let data = tempfile::tempdir().unwrap();
    let report = doctor(config(&model_toml(&mock.base_url())), data.path()).await;
    assert!(!report.passed());
    assert_eq!(status(&report, "endpoint"), Status::Ok);
    assert_eq!(status(&report, "auth"), Status::Fail);
    let why = detail(&report, "auth");
    assert!(why.contains("$DOCTOR_TEST_KEY") && why.contains("refused") && why.contains("401"), "{why}");
    assert_eq!(status(&report, "streaming"), Status::Skip);
    assert!(mock.chat_requests().is_empty(), "nothing more is asked once the key is refused");
    let all = text_of(&report);
    assert!(!all.contains(KEY) && !all.contains("sk-doctor-secret"), "{all}");
}

#[tokio::test]
async fn a_server_without_tool_support_fails_the_tools_line() {
    let mock = MockOpenAi::start().await;
    models_route(&mock);
    mock.rule(refuses_tools_rule("registry.ollama.ai/library/gemma:2b does not support tools"));
    mock.push(text_reply("ready"));
    mock.push(text_reply("I cannot call tools"));
    let data = tempfile::tempdir().unwrap();
    let report = doctor(config(&model_toml(&mock.base_url())), data.path()).await;
    assert!(!report.passed());
    assert_eq!(status(&report, "streaming"), Status::Ok);
    assert_eq!(status(&report, "tools"), Status::Fail);
    let why = detail(&report, "tools");
    assert!(why.contains("does not support tools") && why.contains("chat-only"), "{why}");
}

#[tokio::test]
async fn a_missing_config_and_an_unwritable_data_dir_fail() {
    let report = lathe::doctor::run(
        &DoctorArgs::default(),
        Ok(Config::from_env(&|_| None)),
        Some("/nowhere/lathe/config.toml".into()),
        Some("/proc/self/fdinfo/lathe".into()),
    )
    .await;
    let config = report.find("config", None).unwrap();
    assert_eq!(config.status, Status::Fail);
    assert!(config.detail.contains("/nowhere/lathe/config.toml") && config.detail.contains("lathe init"), "{config:?}");
    assert_eq!(report.find("data dir", None).unwrap().status, Status::Fail);
}

/// The binary: `--json` on stdout, exit 1 when a check fails, the key not printed.
#[tokio::test]
async fn the_binary_prints_json_and_exits_1_on_a_failure() {
    let mock = MockOpenAi::start().await;
    mock.route("GET", "/v1/models", Reply::error(401, &format!("bad key {KEY}")));
    let home = tempfile::tempdir().unwrap();
    let path = home.path().join("config.toml");
    std::fs::write(&path, model_toml(&mock.base_url())).unwrap();
    let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_lathe"))
        .args(["doctor", "--json", "--config"])
        .arg(&path)
        .env("DOCTOR_TEST_KEY", KEY)
        .env("HOME", home.path())
        .env("XDG_DATA_HOME", home.path().join("data"))
        .env("NO_PROXY", "127.0.0.1")
        .env_remove("LATHE_CONFIG")
        .env_remove("LATHE_TRACE")
        .output()
        .await
        .unwrap();
    assert_eq!(output.status.code(), Some(1), "{}", String::from_utf8_lossy(&output.stderr));
    let report: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(report["ok"], false);
    // What was run: the binary's own version, commit and target.
    assert_eq!(report["build"]["version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(report["build"]["commit"], lathe::build_info::COMMIT);
    assert_eq!(report["build"]["target"], lathe::build_info::TARGET);
    let auth = report["checks"].as_array().unwrap().iter().find(|c| c["check"] == "auth").unwrap();
    assert_eq!(auth["status"], "fail");
    assert!(!String::from_utf8_lossy(&output.stdout).contains(KEY));
    assert!(!String::from_utf8_lossy(&output.stderr).contains(KEY));
}

/// `--model` checks one model; a key that is not configured fails, naming those that are.
#[tokio::test]
async fn one_model_is_checked_with_model() {
    let mock = MockOpenAi::start().await;
    models_route(&mock);
    mock.push(text_reply("ready"));
    mock.push(tool_call_reply(&[("call_1", "report_ready", json!({"ready": true}))]));
    let data = tempfile::tempdir().unwrap();
    let toml = format!(
        "default_model = \"mock\"\n{}[models.dead]\nbase_url = \"http://127.0.0.1:9/v1\"\nmodel = \"x\"\n",
        model_toml(&mock.base_url())
    );
    let args = DoctorArgs { json: false, model: Some("mock".into()) };
    let report = lathe::doctor::run(&args, Ok(config(&toml)), None, Some(data.path().to_path_buf())).await;
    assert!(report.passed(), "{}", text_of(&report));
    assert!(report.find("endpoint", Some("model dead")).is_none(), "only --model is checked");
    let args = DoctorArgs { json: false, model: Some("nope".into()) };
    let report = lathe::doctor::run(&args, Ok(config(&toml)), None, Some(data.path().to_path_buf())).await;
    let line = report.find("model", Some("nope")).unwrap();
    assert_eq!(line.status, Status::Fail);
    assert!(line.detail.contains("dead, mock"), "{}", line.detail);
}
