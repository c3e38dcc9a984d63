//! The usual test setup in one value: a mock model server, a temporary home
//! and project directory, a config pointing at the mock, and the real binary
//! started with it.

use std::path::PathBuf;

use serde_json::{Value, json};
use tempfile::TempDir;

use super::acp_client::{AgentProcess, handshake};
use super::mock_openai::MockOpenAi;
use super::write_config;

/// A running agent wired to a mock model.
pub struct Harness {
    /// The mock model server.
    pub mock: MockOpenAi,
    /// The agent process.
    pub agent: AgentProcess,
    /// The project directory (the session cwd).
    pub project: PathBuf,
    /// The temporary home; dropped last.
    pub home: TempDir,
}

impl Harness {
    /// Starts the mock and the agent with the default test config.
    pub async fn start() -> Harness {
        Harness::with_config("").await
    }

    /// Starts the mock and the agent, appending `extra_toml` to the config.
    pub async fn with_config(extra_toml: &str) -> Harness {
        Harness::with_config_and_env(extra_toml, &[]).await
    }

    /// Like [`Harness::with_config`], with extra environment variables.
    pub async fn with_config_and_env(extra_toml: &str, envs: &[(&str, &str)]) -> Harness {
        Harness::build(extra_toml, envs, true).await
    }

    /// Like [`Harness::with_config`], but the model has no `context_window`:
    /// lathe asks the (mock) server for it before the first request.
    pub async fn detecting_window(extra_toml: &str) -> Harness {
        Harness::build(extra_toml, &[], false).await
    }

    async fn build(extra_toml: &str, envs: &[(&str, &str)], configured_window: bool) -> Harness {
        let mock = MockOpenAi::start().await;
        let home = tempfile::tempdir().expect("temp home");
        let project = home.path().join("project");
        std::fs::create_dir_all(&project).expect("project dir");
        let project = project.canonicalize().expect("canonical project dir");
        let config = write_config(home.path(), &mock.base_url(), extra_toml);
        if !configured_window {
            let text = std::fs::read_to_string(&config).expect("read the test config");
            std::fs::write(&config, text.replace("context_window = 32768\n", "")).expect("rewrite the test config");
        }
        let config = config.to_string_lossy().into_owned();
        let agent = AgentProcess::spawn(&["--config", &config], envs, home.path());
        Harness { mock, agent, project, home }
    }

    /// Kills the agent hard (SIGKILL) and starts a new one on the same home,
    /// config and data directory.
    pub async fn restart(&mut self) {
        self.agent.kill_hard().await;
        let config = self.home.path().join("config.toml");
        let config = config.to_string_lossy().into_owned();
        self.agent = AgentProcess::spawn(&["--config", &config], &[], self.home.path());
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
