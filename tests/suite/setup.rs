//! `lathe setup` (issue 28) through a pseudo-terminal, as an editor's
//! Terminal Auth runs it: against the mock model server it writes a config
//! (mode 0600) that `lathe doctor` passes, the pasted key never echoed and
//! stored by lathe (0600), never in the config; with model servers
//! running, they are offered first; with no terminal it refuses. `lathe
//! logout` forgets the keys it stored. Every run has an empty home.

use std::path::Path;
use std::time::Duration;

use expectrl::process::unix::WaitStatus;
use expectrl::{Expect, Session};
use serde_json::json;

use super::discovery::{lmstudio, ollama};
use crate::support::mock_openai::{MockOpenAi, Reply, text_reply, tool_call_reply};

type Pty = expectrl::session::OsSession;

const KEY: &str = "sk-setup-secret-7f3a9c";

/// `lathe <args>` in the test environment (empty home, no inherited
/// `LATHE_*`, `envs` on top), on a pseudo-terminal of its own.
fn spawn(home: &Path, args: &[&str], envs: &[(&str, &str)]) -> Pty {
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_lathe"));
    command.args(args).current_dir(home);
    for (name, _) in std::env::vars_os() {
        if crate::support::agent_env::scrubbed(&name.to_string_lossy()) {
            command.env_remove(&name);
        }
    }
    command.envs(crate::support::agent_env::environment(home, envs));
    command.env("TERM", "xterm-256color").env("NO_COLOR", "1");
    let mut pty = Session::spawn(command).expect("spawn lathe on a pty");
    pty.set_expect_timeout(Some(Duration::from_secs(60)));
    pty
}

/// Waits for `text`; returns everything shown before it (and keeps it in `screen`).
fn expect(pty: &mut Pty, screen: &mut String, text: &str) -> String {
    let found = pty.expect(text).unwrap_or_else(|err| panic!("waiting for {text:?}: {err}\n--- so far ---\n{screen}"));
    let before = String::from_utf8_lossy(found.before()).into_owned();
    screen.push_str(&before);
    screen.push_str(text);
    before
}

fn exits_0(pty: &mut Pty, screen: &str) {
    let status = pty.get_process().wait().unwrap();
    assert!(matches!(status, WaitStatus::Exited(_, 0)), "{status:?}\n{screen}");
}

/// The number the menu gives the line containing `what`.
fn number_of(menu: &str, what: &str) -> String {
    let line = menu.lines().find(|line| line.contains(what)).unwrap_or_else(|| panic!("no {what:?} in {menu}"));
    line.trim().split('.').next().unwrap().trim().to_owned()
}

#[cfg(unix)]
fn mode(path: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

/// The checks `lathe doctor` makes of one model: two completions.
fn serve_checks(mock: &MockOpenAi) {
    mock.push(text_reply("ready"));
    mock.push(tool_call_reply(&[("call_1", "report_ready", json!({"ready": true}))]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn setup_through_a_terminal_writes_a_config_that_doctor_passes() {
    let mock = MockOpenAi::start().await;
    mock.route(
        "GET",
        "/v1/models",
        Reply::Json(json!({"object": "list", "data": [{"id": "mock-model"}, {"id": "other-model"}]})),
    );
    serve_checks(&mock); // setup's own check
    serve_checks(&mock); // `lathe doctor` afterwards
    let home = tempfile::tempdir().unwrap();
    let base_url = mock.base_url();
    let home_path = home.path().to_path_buf();
    let screen = tokio::task::spawn_blocking(move || {
        let mut screen = String::new();
        let mut pty = spawn(&home_path, &["setup"], &[]);
        let menu = expect(&mut pty, &mut screen, "Choose 1-");
        pty.send_line(number_of(&menu, "another OpenAI-compatible server")).unwrap();
        expect(&mut pty, &mut screen, "base URL");
        pty.send_line(&base_url).unwrap();
        expect(&mut pty, &mut screen, "API key: paste it");
        pty.send_line(KEY).unwrap();
        expect(&mut pty, &mut screen, "Key received.");
        let models = expect(&mut pty, &mut screen, "Model (number or name)");
        assert!(models.contains("1. mock-model") && models.contains("2. other-model"), "{models}");
        pty.send_line("1").unwrap();
        expect(&mut pty, &mut screen, "all checks passed");
        expect(&mut pty, &mut screen, "Done.");
        exits_0(&mut pty, &screen);
        screen
    })
    .await
    .unwrap();
    assert!(!screen.contains(KEY), "the key was shown:\n{screen}");

    let config = home.path().join(".config/lathe/config.toml");
    assert!(screen.contains(&format!("Wrote {}", config.display())), "{screen}");
    let text = std::fs::read_to_string(&config).unwrap();
    assert!(!text.contains(KEY), "the key is not in the config:\n{text}");
    assert!(text.contains("api_key_stored = true") && text.contains("model = \"mock-model\""), "{text}");
    let credentials = home.path().join(".config/lathe/credentials.toml");
    assert!(std::fs::read_to_string(&credentials).unwrap().contains(KEY));
    #[cfg(unix)]
    assert_eq!((mode(&config), mode(&credentials)), (0o600, 0o600));

    let doctor = tokio::process::Command::new(env!("CARGO_BIN_EXE_lathe"))
        .arg("doctor")
        .current_dir(home.path())
        .env_clear()
        .envs(crate::support::agent_env::environment(home.path(), &[]))
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .output()
        .await
        .unwrap();
    let report = String::from_utf8_lossy(&doctor.stdout);
    assert!(doctor.status.success(), "{report}\n{}", String::from_utf8_lossy(&doctor.stderr));
    assert!(report.contains("the key `lathe setup` stored was accepted") && !report.contains(KEY), "{report}");
    let chats = mock.chat_requests();
    assert_eq!(chats.len(), 4);
    assert!(chats.iter().all(|r| r.header("authorization") == Some(format!("Bearer {KEY}").as_str())));
}

/// Two servers running here: both offered before the presets; the first
/// taken with Enter, its model list saying which take tools.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn setup_offers_the_servers_running_here_first() {
    let (ollama, lmstudio) = (ollama().await, lmstudio().await);
    ollama.route("GET", "/v1/models", Reply::Json(json!({"object": "list", "data": [{"id": "qwen3:8b"}]})));
    serve_checks(&ollama);
    let home = tempfile::tempdir().unwrap();
    let ports = format!("{},{}", ollama.addr().port(), lmstudio.addr().port());
    let home_path = home.path().to_path_buf();
    let (screen, menu, models) = tokio::task::spawn_blocking(move || {
        let mut screen = String::new();
        let mut pty = spawn(&home_path, &["setup"], &[("LATHE_DISCOVER", &ports)]);
        let menu = expect(&mut pty, &mut screen, "Choose 1-");
        pty.send_line("").unwrap();
        expect(&mut pty, &mut screen, "press Enter for none");
        pty.send_line("").unwrap();
        expect(&mut pty, &mut screen, "No key.");
        let models = expect(&mut pty, &mut screen, "Model (number or name) [qwen3:8b]");
        pty.send_line("").unwrap();
        expect(&mut pty, &mut screen, "all checks passed");
        expect(&mut pty, &mut screen, "Done.");
        exits_0(&mut pty, &screen);
        (screen, menu, models)
    })
    .await
    .unwrap();
    let at = |what: &str| menu.find(what).unwrap_or_else(|| panic!("no {what:?} in {menu}"));
    let (first, second) = (at(&format!(" 1. Ollama at http://{}", ollama.addr())), at(" 2. LM Studio at"));
    assert!(first < second && second < at("ollama      http://127.0.0.1:11434/v1"), "{menu}");
    assert!(models.contains("gemma3:4b (takes tools)") && models.contains("qwen3:8b (takes tools)"), "{models}");
    let text = std::fs::read_to_string(home.path().join(".config/lathe/config.toml")).unwrap();
    assert!(text.contains("default_model = \"ollama\""), "{text}");
    assert!(
        text.contains(&format!("base_url = \"{}\"", ollama.base_url())) && text.contains("model = \"qwen3:8b\""),
        "{text}"
    );
    let keyed = text.lines().any(|line| line.starts_with("api_key"));
    assert!(!keyed, "no key for a local server:\n{text}\n{screen}");
}

/// `lathe <args>` with stdin not a terminal, in the test environment.
fn run_plain(home: &Path, args: &[&str]) -> std::process::Output {
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_lathe"));
    command.args(args).current_dir(home).stdin(std::process::Stdio::null());
    for (name, _) in std::env::vars_os() {
        if crate::support::agent_env::scrubbed(&name.to_string_lossy()) {
            command.env_remove(&name);
        }
    }
    command.envs(crate::support::agent_env::environment(home, &[]));
    command.output().expect("run lathe")
}

/// `lathe setup` asks questions: with no terminal it says what to use
/// instead (exit 2) and writes nothing.
#[test]
fn setup_without_a_terminal_refuses_and_writes_nothing() {
    let home = tempfile::tempdir().unwrap();
    let output = run_plain(home.path(), &["setup"]);
    assert_eq!(output.status.code(), Some(2), "{output:?}");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("runs on a terminal") && stderr.contains("lathe init"), "{stderr}");
    assert!(output.stdout.is_empty(), "{output:?}");
    assert!(!home.path().join(".config/lathe").exists(), "nothing written");
}

/// `lathe logout` on the command line deletes the keys `lathe setup`
/// stored and nothing else; with none stored it says so and succeeds.
#[test]
fn logout_on_the_command_line_forgets_the_stored_keys_only() {
    let home = tempfile::tempdir().unwrap();
    let user_dir = home.path().join(".config/lathe");
    lathe::credentials::store(&user_dir, "mock", &lathe::config::ApiKey::new(KEY)).unwrap();
    let config = "[models.mock]\nbase_url = \"http://127.0.0.1:9/v1\"\nmodel = \"m\"\napi_key_stored = true\n";
    std::fs::write(user_dir.join("config.toml"), config).unwrap();

    let output = run_plain(home.path(), &["logout"]);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{output:?}");
    assert!(stdout.contains("forgot the keys") && !stdout.contains(KEY), "{stdout}");
    assert!(!lathe::credentials::path(&user_dir).exists(), "the stored key is gone");
    assert_eq!(std::fs::read_to_string(user_dir.join("config.toml")).unwrap(), config, "the config stays");

    let again = run_plain(home.path(), &["logout"]);
    assert!(again.status.success(), "{again:?}");
    assert!(String::from_utf8_lossy(&again.stdout).contains("no stored key"), "{again:?}");
}

/// The server's model list is shown escaped: a name holding an escape
/// sequence (clear the screen, retitle the window) reaches the terminal
/// as text. Ctrl-D at the model question stops with nothing written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn model_names_from_the_server_are_shown_escaped() {
    let mock = MockOpenAi::start().await;
    let hostile = "evil\u{1b}[2J\u{1b}]0;pwned\u{7}-model";
    mock.route("GET", "/v1/models", Reply::Json(json!({"object": "list", "data": [{"id": hostile}]})));
    let home = tempfile::tempdir().unwrap();
    let (base_url, home_path) = (mock.base_url(), home.path().to_path_buf());
    let models = tokio::task::spawn_blocking(move || {
        let mut screen = String::new();
        let mut pty = spawn(&home_path, &["setup"], &[]);
        let menu = expect(&mut pty, &mut screen, "Choose 1-");
        pty.send_line(number_of(&menu, "another OpenAI-compatible server")).unwrap();
        expect(&mut pty, &mut screen, "base URL");
        pty.send_line(&base_url).unwrap();
        expect(&mut pty, &mut screen, "API key: paste it");
        pty.send_line("").unwrap();
        let models = expect(&mut pty, &mut screen, "Model (number or name)");
        pty.send("\u{4}").unwrap();
        let status = pty.get_process().wait().unwrap();
        assert!(matches!(status, WaitStatus::Exited(_, 1)), "{status:?}\n{screen}");
        models
    })
    .await
    .unwrap();
    assert!(!models.contains('\u{1b}') && !models.contains('\u{7}'), "raw escapes reached the terminal: {models:?}");
    assert!(models.contains("1. evil\\u{1b}[2J\\u{1b}]0;pwned\\u{7}-model"), "{models}");
    assert!(!home.path().join(".config/lathe/config.toml").exists(), "nothing written");
}
