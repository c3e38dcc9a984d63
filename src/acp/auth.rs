//! Authentication over ACP: the methods `initialize` offers, `authenticate`,
//! `logout`, and the auth-required error (`-32000`) that `session/new`,
//! `session/load` and `session/resume` answer while no model is usable.
//!
//! For lathe, being authenticated is having a model to talk to: a config
//! (a file, the `OPENAI_*` variables, or the one model server found running
//! here, see [`crate::discover`]) whose default model has its key. Two
//! methods:
//!
//! - `lathe-setup` runs lathe's interactive setup (`lathe setup`) in a
//!   terminal. As the schema's `terminal` type (`args: ["setup"]`) only for a
//!   client that sent `clientCapabilities.auth.terminal: true`. A client that
//!   sent the older `clientCapabilities._meta["terminal-auth"]: true` instead
//!   (Zed before the typed method; the ACP registry's auth check) gets it
//!   as an `agent`-type method carrying `_meta["terminal-auth"]`, the launch
//!   description (`command`, `args`, `label`) such clients run; a client
//!   that sent both gets the typed method with that `_meta` too.
//! - `lathe-config` (type `agent`) when a working config is present, so a
//!   client that only knows that type still has a method: `authenticate`
//!   with it re-reads the config from disk (the user may just have written
//!   it) and checks that the default model's server answers and takes its
//!   key (`lathe doctor`'s first checks), then uses it.
//!
//! `authenticate` takes either id (the terminal one too, though clients
//! must not send it: it costs nothing to check). `logout` (advertised in
//! `agentCapabilities.auth.logout` when the config uses a key lathe stored)
//! forgets every key `lathe setup` stored ([`crate::credentials`]); keys in
//! environment variables are the user's and stay. Sessions already open go
//! on until their next request to the model, which then fails for want of
//! its key; new sessions answer auth-required.

use std::sync::Arc;

use agent_client_protocol_schema::v1::{
    AgentAuthCapabilities, AuthMethod, AuthMethodAgent, AuthMethodTerminal, AuthenticateRequest, AuthenticateResponse,
    ClientCapabilities, LogoutCapabilities, LogoutRequest, LogoutResponse,
};
use serde_json::{Value, json};

use super::{INTERNAL_ERROR, INVALID_PARAMS, RequestId, RpcError, Server, lock, parse_params};
use crate::config::{Config, ConfigError, ConfigOrigin, ConfigSource};

/// The method that checks (and re-reads) the config.
pub(super) const CONFIG_METHOD: &str = "lathe-config";
/// The method that runs `lathe setup` in a terminal.
pub(super) const SETUP_METHOD: &str = "lathe-setup";
/// ACP's "authentication required" (`ErrorCode::AuthRequired`).
pub(super) const AUTH_REQUIRED: i32 = -32000;
/// What the client runs for the terminal method, after lathe's own command.
const SETUP_ARGS: [&str; 1] = ["setup"];

impl Server {
    /// The methods `initialize` offers a client with these capabilities.
    pub(super) fn auth_methods(&self, client: &ClientCapabilities) -> Vec<AuthMethod> {
        let config = self.config();
        let mut methods = Vec::new();
        if config.unusable().is_none() {
            methods.push(AuthMethod::Agent(
                AuthMethodAgent::new(CONFIG_METHOD, "Use lathe's config")
                    .description("Check the model in lathe's config (read again from disk) and use it".to_owned()),
            ));
        }
        let legacy = legacy_terminal_auth(client).then(|| terminal_auth_meta(&config));
        let description = "Run `lathe setup` in a terminal: choose a model server and a model, give its key".to_owned();
        match (client.auth.terminal, legacy) {
            (true, legacy) => methods.push(AuthMethod::Terminal(
                AuthMethodTerminal::new(SETUP_METHOD, "Set up lathe")
                    .description(description)
                    .args(SETUP_ARGS.iter().map(|arg| (*arg).to_owned()).collect())
                    .meta(legacy),
            )),
            (false, Some(legacy)) => methods.push(AuthMethod::Agent(
                AuthMethodAgent::new(SETUP_METHOD, "Set up lathe").description(description).meta(legacy),
            )),
            (false, None) => {}
        }
        methods
    }

    /// `agentCapabilities.auth`: `logout` when there is a stored key to forget.
    pub(super) fn auth_capabilities(&self) -> AgentAuthCapabilities {
        let stored = self.config().models.values().any(|model| model.api_key_stored);
        AgentAuthCapabilities::new().logout(stored.then(LogoutCapabilities::new))
    }

    /// `Ok` when sessions can be set up, else the auth-required error.
    pub(super) fn auth_gate(&self) -> Result<(), RpcError> {
        match self.config().unusable() {
            None => Ok(()),
            Some(why) => Err(self.auth_required(&why)),
        }
    }

    /// The auth-required error: what is wrong, and (in `data`, which the
    /// schema leaves free) the ids of the methods this client was offered
    /// that would set it right.
    fn auth_required(&self, why: &str) -> RpcError {
        let client = self.client_capabilities.get().cloned().unwrap_or_default();
        let ids: Vec<String> = self.auth_methods(&client).iter().map(|method| method.id().0.to_string()).collect();
        RpcError::new(AUTH_REQUIRED, format!("Authentication required: {why}")).with_data(json!({"authMethods": ids}))
    }

    /// `authenticate`: the config, read again, works; or an error saying
    /// what does not.
    pub(super) fn authenticate(self: &Arc<Self>, id: RequestId, params: Value) {
        let request: AuthenticateRequest = match parse_params(params) {
            Ok(request) => request,
            Err(error) => return self.outbox.respond_err(&id, &error),
        };
        let method = request.method_id.0.to_string();
        if method != CONFIG_METHOD && method != SETUP_METHOD {
            return self.outbox.respond_err(
                &id,
                &RpcError::new(
                    INVALID_PARAMS,
                    format!(
                        "Invalid params: methodId: lathe has no authentication method {method:?} (it has \
                         {CONFIG_METHOD} and {SETUP_METHOD})"
                    ),
                ),
            );
        }
        let server = Arc::clone(self);
        self.tasks.spawn(async move {
            let answer = server.check_config().await.map(|()| AuthenticateResponse::new());
            server.outbox.respond(&id, answer);
        });
    }

    /// Reads the config again and checks its default model; uses it when
    /// it answers.
    async fn check_config(&self) -> Result<(), RpcError> {
        let current = self.config();
        let mut fresh = reload(&current).await.map_err(|err| self.auth_required(&format!("{err}")))?;
        if let Some(why) = fresh.unusable() {
            return Err(self.auth_required(&why));
        }
        let report = crate::doctor::check_access(&fresh).await;
        if !report.passed() {
            let failed: Vec<String> = report
                .checks
                .iter()
                .filter(|check| check.status == crate::doctor::Status::Fail)
                .map(|check| format!("{}: {}", check.subject.as_deref().unwrap_or(&check.check), check.detail))
                .collect();
            return Err(self.auth_required(&format!(
                "{}. Fix the config (`lathe doctor` checks it) or run `lathe setup`",
                failed.join("; ")
            )));
        }
        // What the binary set, not the file.
        fresh.data_dir.clone_from(&current.data_dir);
        fresh.children.supervisor.clone_from(&current.children.supervisor);
        tracing::info!(config = %fresh.source, model = %fresh.default_model, "authenticated: using the config as read now");
        self.replace_config(fresh);
        Ok(())
    }

    /// `logout`: forgets the keys `lathe setup` stored.
    pub(super) fn logout(self: &Arc<Self>, id: RequestId, params: Value) {
        if let Err(error) = parse_params::<LogoutRequest>(params) {
            return self.outbox.respond_err(&id, &error);
        }
        let server = Arc::clone(self);
        self.tasks.spawn(async move {
            let config = server.config();
            let forgot = match config.user_dir.clone() {
                Some(dir) => tokio::task::spawn_blocking(move || crate::credentials::forget(&dir))
                    .await
                    .map_err(|err| err.to_string())
                    .and_then(|forgot| forgot.map_err(|err| err.to_string())),
                None => Ok(false),
            };
            match forgot {
                Ok(forgot) => {
                    let mut next = (*config).clone();
                    for model in next.models.values_mut().filter(|model| model.api_key_stored) {
                        model.api_key = None;
                    }
                    tracing::info!(forgot, "logout: the keys lathe stored are forgotten");
                    server.replace_config(next);
                    server.outbox.respond_ok(&id, &LogoutResponse::new());
                }
                Err(why) => server
                    .outbox
                    .respond_err(&id, &RpcError::new(INTERNAL_ERROR, format!("Cannot forget the stored keys: {why}"))),
            }
        });
    }

    /// From now on, this config: new sessions and every session's next
    /// request use it.
    fn replace_config(&self, config: Config) {
        *lock(&self.config) = Arc::new(config);
        lock(&self.models).clear();
    }

    /// Tells the editor, in a session just set up, that its model is the
    /// one model server found running here (no config file): an `info`
    /// notice where the client shows them, else an agent message.
    pub(super) fn tell_discovered(&self, session_id: &str) {
        let config = self.config();
        let ConfigSource::Discovered { server, base_url } = &config.source else { return };
        // The name is the found server's: shown escaped, as every title is.
        let model = config.default_model().map_or("", |model| model.model.as_str());
        let model = crate::present::text::shown(model, crate::present::text::Lines::One);
        self.warnings.inform(
            session_id,
            &format!("Using {server} on this machine"),
            &format!(
                "lathe has no config file, so it uses the model server it found running at {base_url}: {server}, \
                 model {model}. Run `lathe setup` in a terminal to keep this choice or make another."
            ),
        );
    }
}

/// Whether the client sent the pre-schema marker for terminal auth.
fn legacy_terminal_auth(client: &ClientCapabilities) -> bool {
    client.meta.as_ref().and_then(|meta| meta.get("terminal-auth")).and_then(Value::as_bool) == Some(true)
}

/// `_meta["terminal-auth"]`: the command line such clients run, lathe's own
/// executable with the config it was started with.
fn terminal_auth_meta(config: &Config) -> serde_json::Map<String, Value> {
    let command = std::env::current_exe().map_or_else(|_| "lathe".to_owned(), |path| path.display().to_string());
    let mut args: Vec<String> = Vec::new();
    if let Some(path) = config.origin.as_ref().and_then(|origin| origin.cli_path.as_ref()) {
        args.extend(["--config".to_owned(), path.display().to_string()]);
    }
    args.extend(SETUP_ARGS.iter().map(|arg| (*arg).to_owned()));
    let mut meta = serde_json::Map::new();
    meta.insert("terminal-auth".to_owned(), json!({"command": command, "args": args, "label": "lathe setup"}));
    meta
}

/// The config as it is now: loaded again the way it was first loaded, or
/// from the file it came from; the same config when it came from nowhere
/// that can be read again.
async fn reload(current: &Config) -> Result<Config, ConfigError> {
    if let Some(origin) = &current.origin {
        return crate::discover::load_config(origin).await;
    }
    match &current.source {
        ConfigSource::File(path) => crate::discover::load_config(&ConfigOrigin::process(Some(path.clone()))).await,
        ConfigSource::Environment | ConfigSource::Discovered { .. } | ConfigSource::Unconfigured => Ok(current.clone()),
    }
}
