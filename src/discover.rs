//! With no configuration at all, lathe looks for a model server already
//! running on this machine, so that its first start serves a working agent
//! with no file written.
//!
//! It asks loopback (`127.0.0.1`) on the usual ports of the local servers
//! (Ollama 11434, LM Studio 1234, llama.cpp's server 8080, vLLM 8000), every
//! port with each kind's own metadata endpoint, and believes only a shape
//! no other server gives, never the port alone:
//!
//! | Server    | Identified by                                                                 |
//! |-----------|-------------------------------------------------------------------------------|
//! | Ollama    | `GET /api/version` → `{"version": "…"}` and `GET /api/tags` → `{"models": […]}` |
//! | LM Studio | `GET /api/v0/models` → `{"object": "list", "data": [{"type", "state", …}]}`     |
//! | llama.cpp | `GET /props` → `{"default_generation_settings": {…}, "total_slots" or "build_info"}` |
//! | vLLM      | `GET /v1/models` → `{"data": [{"owned_by": "vllm", "max_model_len", …}]}`      |
//!
//! Then which of its models take tools, where the server says: Ollama's
//! `POST /api/show` `capabilities` (`tools`), LM Studio's model `type`
//! (`llm` and `vlm` take tools: LM Studio formats tools for every model),
//! llama.cpp's `chat_template_caps` (`supports_tool_calls`). Where it does
//! not (vLLM, an older llama.cpp), one tiny request with a tool
//! (`max_tokens: 1`) shows whether the server takes tools: vLLM refuses
//! them with HTTP 400 unless started with `--enable-auto-tool-choice`.
//!
//! Bounded so start-up stays fast: every request has [`IDENTIFY_TIMEOUT`]
//! and each port all of [`BUDGET`], all ports at once. A port nothing
//! listens on is refused at once; one that accepts and never answers costs
//! one [`IDENTIFY_TIMEOUT`]. `LATHE_DISCOVER` changes where it looks: `off`,
//! or a comma-separated list of ports (then with the longer
//! [`EXPLICIT_IDENTIFY_TIMEOUT`] and [`EXPLICIT_BUDGET`]: a port someone
//! named is worth waiting for).
//!
//! Every byte from these servers is untrusted: bodies are capped at
//! [`MAX_BODY_BYTES`], and only names are taken from them.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use futures_util::future::join_all;
use serde_json::{Value, json};

use crate::config::{Config, ConfigError, ConfigOrigin, ConfigSource};

/// The environment variable that turns discovery off or points it elsewhere.
pub const DISCOVER_ENV: &str = "LATHE_DISCOVER";

/// Longest wait for one request on the usual ports.
pub const IDENTIFY_TIMEOUT: Duration = Duration::from_millis(300);
/// Longest one port's whole look (identify, list, capabilities) may take on
/// the usual ports; the ports are looked at together.
pub const BUDGET: Duration = Duration::from_millis(1500);
/// Longest wait for one request on a port `LATHE_DISCOVER` names.
pub const EXPLICIT_IDENTIFY_TIMEOUT: Duration = Duration::from_secs(3);
/// Longest look at a port `LATHE_DISCOVER` names.
pub const EXPLICIT_BUDGET: Duration = Duration::from_secs(8);
/// Largest answer read from a local server.
pub const MAX_BODY_BYTES: usize = 2 * 1024 * 1024;
/// Most models of one server whose capabilities are asked.
const MAX_MODELS_ASKED: usize = 16;

/// A kind of local model server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ServerKind {
    /// Ollama.
    Ollama,
    /// LM Studio's server.
    LmStudio,
    /// llama.cpp's `llama-server`.
    LlamaCpp,
    /// vLLM's OpenAI-compatible server.
    Vllm,
}

impl ServerKind {
    /// Every kind, in the order ports are listed.
    pub const ALL: [ServerKind; 4] = [ServerKind::Ollama, ServerKind::LmStudio, ServerKind::LlamaCpp, ServerKind::Vllm];

    /// Its name, for people.
    pub fn name(self) -> &'static str {
        match self {
            ServerKind::Ollama => "Ollama",
            ServerKind::LmStudio => "LM Studio",
            ServerKind::LlamaCpp => "llama.cpp",
            ServerKind::Vllm => "vLLM",
        }
    }

    /// Its preset in config.example.toml, and the model key lathe uses for it.
    pub fn preset(self) -> &'static str {
        match self {
            ServerKind::Ollama => "ollama",
            ServerKind::LmStudio => "lmstudio",
            ServerKind::LlamaCpp => "llamacpp",
            ServerKind::Vllm => "vllm",
        }
    }

    /// The port it listens on unless told otherwise.
    pub fn usual_port(self) -> u16 {
        match self {
            ServerKind::Ollama => 11434,
            ServerKind::LmStudio => 1234,
            ServerKind::LlamaCpp => 8080,
            ServerKind::Vllm => 8000,
        }
    }
}

/// One model a local server offers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalModel {
    /// The name requests use.
    pub id: String,
    /// Whether it takes tools, when known.
    pub tools: Option<bool>,
    /// Whether it is loaded (answers without a wait to load it).
    pub loaded: bool,
}

/// A model server found running on this machine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalServer {
    /// What it is.
    pub kind: ServerKind,
    /// The loopback port it answered on.
    pub port: u16,
    /// Its OpenAI-compatible base URL (`http://127.0.0.1:<port>/v1`).
    pub base_url: String,
    /// Its models (embedding models left out), in the server's order.
    pub models: Vec<LocalModel>,
}

impl LocalServer {
    /// The model lathe would use: one that takes tools, a loaded one
    /// first, else the first the server lists.
    pub fn pick(&self) -> Option<&LocalModel> {
        let takes_tools = |m: &&LocalModel| m.tools == Some(true);
        self.models.iter().filter(takes_tools).find(|m| m.loaded).or_else(|| self.models.iter().find(takes_tools))
    }

    /// One line for people: what, where, and the model lathe would use.
    pub fn describe(&self) -> String {
        let at = format!("{} at http://127.0.0.1:{}", self.kind.name(), self.port);
        match (self.pick(), self.models.len()) {
            (Some(model), _) => format!("{at} ({} takes tools)", model.id),
            (None, 0) => format!("{at} (no model)"),
            (None, n) => format!("{at} ({n} model{}, none known to take tools)", if n == 1 { "" } else { "s" }),
        }
    }
}

/// Where and how long to look.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// Loopback ports, each asked as every kind.
    pub ports: Vec<u16>,
    /// Longest wait for one request.
    pub request_timeout: Duration,
    /// Longest look at one port.
    pub budget: Duration,
}

impl Plan {
    /// The usual ports of the four kinds, with the short limits.
    pub fn usual() -> Plan {
        Plan {
            ports: ServerKind::ALL.iter().map(|kind| kind.usual_port()).collect(),
            request_timeout: IDENTIFY_TIMEOUT,
            budget: BUDGET,
        }
    }

    /// What `LATHE_DISCOVER` asks for: unset or empty, the usual ports;
    /// `off` (or `0`, `false`, `no`), nothing (`None`); a comma-separated
    /// list of ports, those ports with the longer limits.
    pub fn from_env(env: &dyn Fn(&str) -> Option<String>) -> Result<Option<Plan>, String> {
        let Some(value) = env(DISCOVER_ENV).map(|v| v.trim().to_owned()).filter(|v| !v.is_empty()) else {
            return Ok(Some(Plan::usual()));
        };
        if ["off", "0", "false", "no"].contains(&value.to_ascii_lowercase().as_str()) {
            return Ok(None);
        }
        let ports = value
            .split(',')
            .map(|port| port.trim().parse::<u16>().ok().filter(|&port| port != 0))
            .collect::<Option<Vec<u16>>>()
            .ok_or_else(|| {
                format!("{DISCOVER_ENV}={value:?} is neither \"off\" nor a comma-separated list of ports")
            })?;
        Ok(Some(Plan { ports, request_timeout: EXPLICIT_IDENTIFY_TIMEOUT, budget: EXPLICIT_BUDGET }))
    }
}

/// What a look found.
#[derive(Debug, Clone, Default)]
pub struct Discovery {
    /// The servers that answered as one of the kinds, in port order.
    pub servers: Vec<LocalServer>,
    /// How long it took.
    pub elapsed: Duration,
}

impl Discovery {
    /// The server and model to use when exactly one server has a model
    /// that takes tools.
    pub fn choice(&self) -> Option<(&LocalServer, &LocalModel)> {
        let mut usable = self.servers.iter().filter_map(|server| Some((server, server.pick()?)));
        let first = usable.next()?;
        usable.next().is_none().then_some(first)
    }
}

/// Looks at every port of `plan` at once.
pub async fn discover(plan: &Plan) -> Discovery {
    let started = Instant::now();
    // Plain http:// on loopback only: no root certificates to load.
    let client = match crate::http::client_builder()
        .tls_certs_only(Vec::new())
        .no_proxy()
        .connect_timeout(plan.request_timeout)
        .tcp_nodelay(true)
        .build()
    {
        Ok(client) => client,
        Err(err) => {
            tracing::warn!(%err, "cannot build an HTTP client to look for local model servers");
            return Discovery::default();
        }
    };
    tracing::debug!(elapsed = ?started.elapsed(), "discovery's HTTP client built");
    let http = Http { client, timeout: plan.request_timeout };
    let mut seen = HashSet::new();
    let ports: Vec<u16> = plan.ports.iter().copied().filter(|port| seen.insert(*port)).collect();
    let looks = ports.iter().map(|&port| {
        let http = &http;
        async move { tokio::time::timeout(plan.budget, look_at(http, port)).await.ok().flatten() }
    });
    let servers: Vec<LocalServer> = join_all(looks).await.into_iter().flatten().collect();
    let elapsed = started.elapsed();
    tracing::debug!(?elapsed, found = servers.len(), "looked for local model servers");
    Discovery { servers, elapsed }
}

/// The configuration as `origin` locates it ([`Config::load`]); when
/// there is none at all, the one model server found running here, if
/// exactly one has a model that takes tools ([`Config::discovered`]).
/// What was found is kept in [`Config::local_servers`] either way.
pub async fn load_config(origin: &ConfigOrigin) -> Result<Config, ConfigError> {
    let env = &*origin.env;
    let mut config = load_files(origin).await?;
    if config.source == ConfigSource::Unconfigured {
        let plan = Plan::from_env(env).unwrap_or_else(|why| {
            tracing::warn!("{why}; not looking for local model servers");
            None
        });
        if let Some(plan) = plan {
            let found = discover(&plan).await;
            if let Some((server, model)) = found.choice() {
                // `?`: the name is the server's, quoted and escaped in the log.
                tracing::info!(server = server.kind.name(), url = %server.base_url, model = ?model.id, "no config: using the model server found running here");
                config = Config::discovered(server.kind.name(), server.kind.preset(), &server.base_url, &model.id, env);
            }
            config.local_servers = found.servers.iter().map(LocalServer::describe).collect();
        }
    }
    config.origin = Some(origin.clone());
    Ok(config)
}

/// [`Config::load`] off the async threads: it reads files (the config,
/// lathe's credentials), and `authenticate` reloads while sessions run.
async fn load_files(origin: &ConfigOrigin) -> Result<Config, ConfigError> {
    let origin = origin.clone();
    tokio::task::spawn_blocking(move || Config::load(origin.cli_path.as_deref(), &*origin.env))
        .await
        .map_err(|err| ConfigError::Unfinished(err.to_string()))?
}

/// The client and the per-request limit.
struct Http {
    client: reqwest::Client,
    timeout: Duration,
}

impl Http {
    /// A JSON answer of 2xx, or `None` (refused, silent, an error, not JSON, too big).
    async fn json(&self, method: reqwest::Method, url: String, body: Option<&Value>) -> Option<Value> {
        let (status, bytes) = self.send(method, url, body).await?;
        if !status.is_success() {
            return None;
        }
        serde_json::from_slice(&bytes).ok()
    }

    async fn get(&self, url: String) -> Option<Value> {
        self.json(reqwest::Method::GET, url, None).await
    }

    /// The status and (capped) body of one request.
    async fn send(
        &self,
        method: reqwest::Method,
        url: String,
        body: Option<&Value>,
    ) -> Option<(reqwest::StatusCode, Vec<u8>)> {
        let mut request = self.client.request(method, url).timeout(self.timeout);
        if let Some(body) = body {
            request = request.json(body);
        }
        let mut response = request.send().await.ok()?;
        let status = response.status();
        let mut bytes = Vec::new();
        while let Some(chunk) = response.chunk().await.ok()? {
            if bytes.len() + chunk.len() > MAX_BODY_BYTES {
                return None;
            }
            bytes.extend_from_slice(&chunk);
        }
        Some((status, bytes))
    }
}

/// Asks one port what it is; then, for a kind it turned out to be, its models.
async fn look_at(http: &Http, port: u16) -> Option<LocalServer> {
    let root = format!("http://127.0.0.1:{port}");
    let (version, lmstudio, props, models) = futures_util::join!(
        http.get(format!("{root}/api/version")),
        http.get(format!("{root}/api/v0/models")),
        http.get(format!("{root}/props")),
        http.get(format!("{root}/v1/models")),
    );
    let base_url = format!("{root}/v1");
    let server = |kind, models| LocalServer { kind, port, base_url: base_url.clone(), models };
    if version.as_ref().is_some_and(is_ollama_version) {
        let tags = http.get(format!("{root}/api/tags")).await?;
        let names = ollama_names(&tags)?;
        return Some(server(ServerKind::Ollama, ollama_models(http, &root, names).await));
    }
    if let Some(list) = lmstudio.as_ref().and_then(lmstudio_models) {
        return Some(server(ServerKind::LmStudio, list));
    }
    if let Some(props) = props.filter(is_llamacpp_props) {
        let tools = llamacpp_tools(&props);
        let mut ids = models.as_ref().map(model_ids).unwrap_or_default();
        if ids.is_empty() {
            ids.push(props["model_alias"].as_str().unwrap_or("local").to_owned());
        }
        let tools = match tools {
            Some(tools) => Some(tools),
            None => takes_tools(http, &base_url, &ids[0]).await,
        };
        let list = ids.into_iter().map(|id| LocalModel { id, tools, loaded: true }).collect();
        return Some(server(ServerKind::LlamaCpp, list));
    }
    if let Some(models) = models.filter(is_vllm_models) {
        let ids = model_ids(&models);
        let mut list: Vec<LocalModel> =
            ids.into_iter().map(|id| LocalModel { id, tools: None, loaded: true }).collect();
        if let Some(first) = list.first_mut() {
            first.tools = takes_tools(http, &base_url, &first.id).await;
        }
        return Some(server(ServerKind::Vllm, list));
    }
    None
}

/// Ollama's `/api/version`: an object whose only business is a version string.
fn is_ollama_version(value: &Value) -> bool {
    value.as_object().is_some_and(|o| o.len() == 1 && o.get("version").is_some_and(Value::is_string))
}

/// The names in Ollama's `/api/tags` (`{"models": [{"name": …, "digest": …}]}`).
fn ollama_names(tags: &Value) -> Option<Vec<String>> {
    let models = tags.get("models")?.as_array()?;
    Some(
        models
            .iter()
            .filter_map(|m| m.get("name").or_else(|| m.get("model")).and_then(Value::as_str))
            .map(str::to_owned)
            .collect(),
    )
}

/// Ollama's models with their capabilities (`POST /api/show`) and whether
/// they are loaded (`GET /api/ps`); embedding-only models left out.
async fn ollama_models(http: &Http, root: &str, names: Vec<String>) -> Vec<LocalModel> {
    let asked = names.iter().take(MAX_MODELS_ASKED).map(|name| {
        let body = json!({"model": name});
        async move { http.json(reqwest::Method::POST, format!("{root}/api/show"), Some(&body)).await }
    });
    let (shown, ps) = futures_util::join!(join_all(asked), http.get(format!("{root}/api/ps")));
    let loaded: HashSet<&str> = ps
        .as_ref()
        .and_then(|ps| ps.get("models")?.as_array())
        .map(|models| models.iter().filter_map(|m| m.get("name").and_then(Value::as_str)).collect())
        .unwrap_or_default();
    names
        .iter()
        .enumerate()
        .filter_map(|(at, name)| ollama_model(name, shown.get(at).and_then(Option::as_ref), &loaded))
        .collect()
}

/// One Ollama model from its `/api/show` answer (if any): whether it takes
/// tools (`capabilities`), whether it is loaded; `None` for an embedding
/// model.
fn ollama_model(name: &str, show: Option<&Value>, loaded: &HashSet<&str>) -> Option<LocalModel> {
    let capabilities: Option<Vec<&str>> = show
        .and_then(|show| show.get("capabilities")?.as_array())
        .map(|caps| caps.iter().filter_map(Value::as_str).collect());
    if capabilities.as_ref().is_some_and(|caps| !caps.contains(&"completion") && caps.contains(&"embedding")) {
        return None;
    }
    Some(LocalModel {
        id: name.to_owned(),
        tools: capabilities.map(|caps| caps.contains(&"tools")),
        loaded: loaded.contains(name),
    })
}

/// LM Studio's `/api/v0/models`: a list whose entries say their `type` and
/// `state`. Its language models (`llm`, `vlm`) all take tools.
fn lmstudio_models(value: &Value) -> Option<Vec<LocalModel>> {
    if value.get("object").and_then(Value::as_str) != Some("list") {
        return None;
    }
    let data = value.get("data")?.as_array()?;
    let is_entry =
        |m: &Value| m.get("type").is_some_and(Value::is_string) && m.get("state").is_some_and(Value::is_string);
    if !data.iter().all(is_entry) {
        return None;
    }
    Some(
        data.iter()
            .filter(|m| matches!(m["type"].as_str(), Some("llm" | "vlm")))
            .filter_map(|m| {
                Some(LocalModel {
                    id: m.get("id")?.as_str()?.to_owned(),
                    tools: Some(true),
                    loaded: m["state"].as_str() == Some("loaded"),
                })
            })
            .collect(),
    )
}

/// llama.cpp's `/props`: the running slot's settings and the server's own fields.
fn is_llamacpp_props(value: &Value) -> bool {
    value.get("default_generation_settings").is_some_and(Value::is_object)
        && (value.get("total_slots").is_some_and(Value::is_number)
            || value.get("build_info").is_some_and(Value::is_string))
}

/// What llama.cpp's chat template says of tool calls, when it says.
fn llamacpp_tools(props: &Value) -> Option<bool> {
    let caps = props.get("chat_template_caps")?;
    caps.get("supports_tool_calls").or_else(|| caps.get("supports_tools")).and_then(Value::as_bool)
}

/// vLLM's `/v1/models`: every entry owned by `vllm`, with its `max_model_len`.
fn is_vllm_models(value: &Value) -> bool {
    value.get("data").and_then(Value::as_array).is_some_and(|data| {
        !data.is_empty()
            && data.iter().all(|m| m.get("owned_by").and_then(Value::as_str) == Some("vllm"))
            && data.iter().all(|m| m.get("max_model_len").is_some_and(Value::is_number))
    })
}

/// The ids of an OpenAI-style model list.
fn model_ids(value: &Value) -> Vec<String> {
    value
        .get("data")
        .and_then(Value::as_array)
        .map(|data| data.iter().filter_map(|m| m.get("id")?.as_str()).map(str::to_owned).collect())
        .unwrap_or_default()
}

/// Whether the server takes a request with a tool for `model`: one
/// completion of at most one token. `None` when the answer says neither.
async fn takes_tools(http: &Http, base_url: &str, model: &str) -> Option<bool> {
    let body = json!({
        "model": model,
        "messages": [{"role": "user", "content": "Reply with: ok"}],
        "tools": [{"type": "function", "function": {
            "name": "ping", "description": "Does nothing.", "parameters": {"type": "object", "properties": {}}}}],
        "max_tokens": 1,
        "stream": false,
    });
    let (status, bytes) = http.send(reqwest::Method::POST, format!("{base_url}/chat/completions"), Some(&body)).await?;
    if status.is_success() {
        return Some(true);
    }
    let said = String::from_utf8_lossy(&bytes).to_ascii_lowercase();
    (status.is_client_error() && said.contains("tool")).then_some(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn model(id: &str, tools: Option<bool>, loaded: bool) -> LocalModel {
        LocalModel { id: id.to_owned(), tools, loaded }
    }

    fn server(kind: ServerKind, models: Vec<LocalModel>) -> LocalServer {
        let port = kind.usual_port();
        LocalServer { kind, port, base_url: format!("http://127.0.0.1:{port}/v1"), models }
    }

    #[test]
    fn a_loaded_model_that_takes_tools_is_picked_first() {
        let ollama = server(
            ServerKind::Ollama,
            vec![model("a", Some(false), true), model("b", Some(true), false), model("c", Some(true), true)],
        );
        assert_eq!(ollama.pick().unwrap().id, "c");
        let cold = server(ServerKind::Ollama, vec![model("a", None, true), model("b", Some(true), false)]);
        assert_eq!(cold.pick().unwrap().id, "b");
        assert!(server(ServerKind::Vllm, vec![model("a", None, true)]).pick().is_none(), "unknown is not taken");
        assert_eq!(cold.describe(), "Ollama at http://127.0.0.1:11434 (b takes tools)");
    }

    #[test]
    fn exactly_one_usable_server_is_the_choice() {
        let usable = server(ServerKind::Ollama, vec![model("q", Some(true), true)]);
        let without = server(ServerKind::Vllm, vec![model("v", Some(false), true)]);
        let found = Discovery { servers: vec![usable.clone(), without], elapsed: Duration::ZERO };
        assert_eq!(found.choice().map(|(s, m)| (s.kind, m.id.as_str())), Some((ServerKind::Ollama, "q")));
        let other = server(ServerKind::LmStudio, vec![model("l", Some(true), false)]);
        let two = Discovery { servers: vec![usable, other], elapsed: Duration::ZERO };
        assert!(two.choice().is_none(), "two servers: lathe setup asks");
    }

    #[test]
    fn the_environment_turns_it_off_or_names_ports() {
        let with = |value: &'static str| move |name: &str| (name == DISCOVER_ENV).then(|| value.to_owned());
        assert_eq!(Plan::from_env(&|_| None), Ok(Some(Plan::usual())));
        assert_eq!(Plan::usual().ports, [11434, 1234, 8080, 8000]);
        assert_eq!(Plan::from_env(&with("off")), Ok(None));
        let named = Plan::from_env(&with("11500, 8001")).unwrap().unwrap();
        assert_eq!((named.ports, named.request_timeout), (vec![11500, 8001], EXPLICIT_IDENTIFY_TIMEOUT));
        assert!(Plan::from_env(&with("ollama")).unwrap_err().contains(DISCOVER_ENV));
    }

    #[test]
    fn ollama_models_say_what_they_take() {
        let loaded: HashSet<&str> = ["qwen3:8b"].into();
        let show = |caps: Value| json!({"capabilities": caps, "model_info": {}});
        let tools = show(json!(["completion", "tools"]));
        assert_eq!(ollama_model("qwen3:8b", Some(&tools), &loaded), Some(model("qwen3:8b", Some(true), true)));
        let chat = show(json!(["completion"]));
        assert_eq!(ollama_model("gemma", Some(&chat), &loaded), Some(model("gemma", Some(false), false)));
        assert_eq!(ollama_model("nomic", Some(&show(json!(["embedding"]))), &loaded), None, "embeddings are left out");
        assert_eq!(ollama_model("old", None, &loaded), Some(model("old", None, false)), "no answer: unknown");
    }

    #[test]
    fn shapes_are_told_apart() {
        assert!(is_ollama_version(&json!({"version": "0.9.0"})));
        assert!(!is_ollama_version(&json!({"version": "0.9.0", "name": "something else"})));
        let lmstudio = json!({"object": "list", "data": [
            {"id": "qwen", "type": "llm", "state": "loaded", "compatibility_type": "gguf"},
            {"id": "nomic", "type": "embeddings", "state": "not-loaded"}]});
        assert_eq!(lmstudio_models(&lmstudio).unwrap(), [model("qwen", Some(true), true)]);
        // An OpenAI-style list is not LM Studio's.
        assert!(lmstudio_models(&json!({"object": "list", "data": [{"id": "gpt", "owned_by": "openai"}]})).is_none());
        let props = json!({"default_generation_settings": {"n_ctx": 8192}, "total_slots": 1,
            "chat_template_caps": {"supports_tool_calls": true}});
        assert!(is_llamacpp_props(&props));
        assert_eq!(llamacpp_tools(&props), Some(true));
        assert!(!is_llamacpp_props(&json!({"default_generation_settings": "x"})));
        assert!(is_vllm_models(&json!({"data": [{"id": "m", "owned_by": "vllm", "max_model_len": 4096}]})));
        assert!(!is_vllm_models(&json!({"data": [{"id": "m", "owned_by": "llamacpp"}]})));
        assert!(!is_vllm_models(&json!({"data": []})));
    }
}
