//! The usual test setup in one value: a mock model server, a temporary home
//! and project directory, a config pointing at the mock, and an agent
//! started with it: served in this process ([`Harness::start`] and the
//! others), or the real binary ([`Harness::process`]) for what only a
//! process shows.

use std::path::PathBuf;

use serde_json::{Value, json};
use tempfile::TempDir;

use super::acp_client::{Agent, handshake};
use super::mock_openai::MockOpenAi;
use super::write_config;

/// Where the harness's agents run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// `lathe::serve` on the test's runtime.
    InProcess,
    /// The `lathe` binary.
    Process,
}

/// A running agent wired to a mock model.
pub struct Harness {
    /// The mock model server.
    pub mock: MockOpenAi,
    /// The agent.
    pub agent: Agent,
    /// The project directory (the session cwd).
    pub project: PathBuf,
    /// The temporary home; dropped last.
    pub home: TempDir,
    backend: Backend,
    envs: Vec<(String, String)>,
}

impl Harness {
    /// Starts the mock and an in-process agent with the default test config.
    pub async fn start() -> Harness {
        Harness::with_config("").await
    }

    /// Starts the mock and an in-process agent, appending `extra_toml` to the
    /// config (where `$MOCK_BASE_URL` stands for the mock's base URL).
    pub async fn with_config(extra_toml: &str) -> Harness {
        Harness::with_config_and_env(extra_toml, &[]).await
    }

    /// Like [`Harness::with_config`], with extra environment variables (what
    /// the agent's configuration reads: `api_key_env`, `LATHE_DATA_DIR`, ...;
    /// an in-process agent cannot pass them to the processes it starts).
    pub async fn with_config_and_env(extra_toml: &str, envs: &[(&str, &str)]) -> Harness {
        Harness::build(Backend::InProcess, extra_toml, envs, true).await
    }

    /// Like [`Harness::with_config`], but the model has no `context_window`:
    /// lathe asks the (mock) server for it before the first request.
    pub async fn detecting_window(extra_toml: &str) -> Harness {
        Harness::build(Backend::InProcess, extra_toml, &[], false).await
    }

    /// The real binary, for what only a process shows (stdio, signals,
    /// process groups, its own fds, SIGKILL, its environment, its stderr).
    pub async fn process(extra_toml: &str, envs: &[(&str, &str)]) -> Harness {
        Harness::build(Backend::Process, extra_toml, envs, true).await
    }

    async fn build(backend: Backend, extra_toml: &str, envs: &[(&str, &str)], configured_window: bool) -> Harness {
        let mock = MockOpenAi::start().await;
        let home = tempfile::tempdir().expect("temp home");
        let project = home.path().join("project");
        std::fs::create_dir_all(&project).expect("project dir");
        // Spelt as an editor gives a cwd and as lathe gives real paths: on
        // Windows `C:\...`, not std's `\\?\C:\...`.
        let project = lathe::platform::paths::canonical(&project).expect("canonical project dir");
        let extra_toml = extra_toml.replace("$MOCK_BASE_URL", &mock.base_url());
        let config = write_config(home.path(), &mock.base_url(), &extra_toml);
        if !configured_window {
            let text = std::fs::read_to_string(&config).expect("read the test config");
            std::fs::write(&config, text.replace("context_window = 32768\n", "")).expect("rewrite the test config");
        }
        let envs: Vec<(String, String)> = envs.iter().map(|(n, v)| ((*n).to_owned(), (*v).to_owned())).collect();
        let config = config.to_string_lossy().into_owned();
        let agent = start_agent(backend, &["--config", &config], &envs, &home);
        Harness { mock, agent, project, home, backend, envs }
    }

    /// A new agent of this harness's kind in its home, with these arguments
    /// (and the harness's environment); the current one is left running.
    pub fn agent_with(&self, args: &[&str]) -> Agent {
        start_agent(self.backend, args, &self.envs, &self.home)
    }

    /// Stops the agent the way an editor does (closes its input and waits
    /// for it to end) and starts a new one on the same home, config and data
    /// directory: a new config file is read.
    pub async fn restart(&mut self) {
        self.agent.close_stdin();
        let exit = self.agent.wait_exit(super::acp_client::DEFAULT_TIMEOUT).await.expect("the agent ends on EOF");
        assert!(exit.success(), "{exit:?}\n{}", self.agent.stderr());
        self.agent = self.agent_with(&["--config", &self.config_path()]);
    }

    /// Kills the binary hard (SIGKILL) and starts a new one on the same home,
    /// config and data directory.
    pub async fn kill_and_restart(&mut self) {
        self.agent.kill_hard().await;
        self.agent = self.agent_with(&["--config", &self.config_path()]);
    }

    fn config_path(&self) -> String {
        self.home.path().join("config.toml").to_string_lossy().into_owned()
    }

    /// `initialize` with no client capabilities, then `session/new` in the project.
    pub async fn session(&mut self) -> String {
        self.session_with(json!({})).await
    }

    /// `initialize` with these client capabilities, then `session/new` in the project.
    pub async fn session_with(&mut self, client_capabilities: Value) -> String {
        handshake(&mut self.agent, client_capabilities, &self.project).await
    }
}

fn start_agent(backend: Backend, args: &[&str], envs: &[(String, String)], home: &TempDir) -> Agent {
    let envs: Vec<(&str, &str)> = envs.iter().map(|(n, v)| (n.as_str(), v.as_str())).collect();
    match backend {
        Backend::InProcess => Agent::in_process(args, &envs, home.path()),
        Backend::Process => Agent::spawn(args, &envs, home.path()),
    }
}
