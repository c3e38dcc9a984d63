//! What a model server says about one of its models: the context window it
//! runs it with (and which answer said so), and, where the server tells,
//! whether the model takes tools and images.
//!
//! Asked only when the config gives no `context_window`. Every server
//! answers the OpenAI-style `GET {base}/models` (vLLM puts `max_model_len`
//! in it, OpenRouter `context_length`, supported parameters and input
//! modalities, llama.cpp `meta.n_ctx`). Over plain `http://` (where local
//! servers run) the local servers' own endpoints are asked too, at the
//! server's root: llama.cpp `GET /props` (`n_ctx` of the running model,
//! modalities), Ollama `POST /api/show` (the Modelfile's `num_ctx`, the
//! model's maximum, capabilities) and `GET /api/ps` (the context a loaded
//! model runs with), LM Studio `GET /api/v0/models` (the loaded or maximum
//! context, `vlm`). Cloud APIs are not sent requests for paths they do not
//! have.
//!
//! All requests go out at once, each bounded by [`PROBE_TIMEOUT`]; one that
//! fails, times out, or answers something unreadable says nothing. When no
//! answer gives a window, the result is [`DEFAULT_CONTEXT_WINDOW`] and says
//! so. Pure apart from the one `fetch` function it is given, so the
//! combining is tested without a network.

use std::future::Future;
use std::time::Duration;

use serde_json::{Value, json};

use crate::config::DEFAULT_CONTEXT_WINDOW;

/// Longest wait for any one probe request (they run at the same time).
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(5);

/// What is known about a model's limits, and from where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelInfo {
    /// The context window in tokens.
    pub context_window: u64,
    /// Where that figure came from.
    pub window_source: WindowSource,
    /// Whether the model takes tools, when the server says.
    pub tools: Option<bool>,
    /// Whether the model takes images, when the server says.
    pub vision: Option<bool>,
}

/// Where a context window figure came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WindowSource {
    /// `context_window` in the config (the server is not asked).
    Configured,
    /// A server's answer: which endpoint and field.
    Server(&'static str),
    /// Nothing said: lathe's default.
    Default,
}

impl std::fmt::Display for WindowSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            WindowSource::Configured => f.write_str("the config (context_window)"),
            WindowSource::Server(what) => f.write_str(what),
            WindowSource::Default => {
                write!(f, "lathe's default of {DEFAULT_CONTEXT_WINDOW} (no server answer gave one)")
            }
        }
    }
}

impl ModelInfo {
    /// A window the config gave.
    pub fn configured(context_window: u64) -> Self {
        ModelInfo { context_window, window_source: WindowSource::Configured, tools: None, vision: None }
    }
}

/// One request a probe makes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProbeRequest {
    /// `GET` (`None`) or `POST` with this JSON body.
    pub body: Option<Value>,
    /// The full URL.
    pub url: String,
}

/// The answers, by endpoint (each `None` when it did not answer usefully).
#[derive(Debug, Default)]
struct Answers {
    models: Option<Value>,
    props: Option<Value>,
    show: Option<Value>,
    ps: Option<Value>,
    lmstudio: Option<Value>,
}

/// Asks the server at `base_url` about `model`. `fetch` sends one request and
/// gives the JSON body of a successful answer; it is called with a
/// [`PROBE_TIMEOUT`] around it.
pub async fn probe<F, Fut>(base_url: &str, model: &str, fetch: F) -> ModelInfo
where
    F: Fn(ProbeRequest) -> Fut,
    Fut: Future<Output = Option<Value>>,
{
    let ask = |url: String, body: Option<Value>| {
        let answer = fetch(ProbeRequest { body, url });
        async move { tokio::time::timeout(PROBE_TIMEOUT, answer).await.ok().flatten() }
    };
    let base = base_url.trim_end_matches('/');
    let local = base.starts_with("http://");
    let root = base.strip_suffix("/v1").unwrap_or(base);
    let (models, props, show, ps, lmstudio) = futures_util::join!(
        ask(format!("{base}/models"), None),
        async { if local { ask(format!("{root}/props"), None).await } else { None } },
        async { if local { ask(format!("{root}/api/show"), Some(json!({"model": model}))).await } else { None } },
        async { if local { ask(format!("{root}/api/ps"), None).await } else { None } },
        async { if local { ask(format!("{root}/api/v0/models"), None).await } else { None } },
    );
    combine(model, &Answers { models, props, show, ps, lmstudio })
}

/// The best answer for each fact: the context a server runs the model
/// with first, its maximum after.
fn combine(model: &str, answers: &Answers) -> ModelInfo {
    let listed = answers.models.as_ref().and_then(|models| entry(models.get("data")?, "id", model));
    let lmstudio = answers.lmstudio.as_ref().and_then(|models| entry(models.get("data")?, "id", model));
    let loaded = answers.ps.as_ref().and_then(|ps| ollama_loaded(ps.get("models")?, model));
    let props = answers.props.as_ref().filter(|props| props.get("default_generation_settings").is_some());
    let show = answers.show.as_ref().filter(|show| show.get("model_info").is_some());

    let windows: [(Option<u64>, &'static str); 11] = [
        (
            props.and_then(|p| number(&p["default_generation_settings"]["n_ctx"]).or_else(|| number(&p["n_ctx"]))),
            "llama.cpp GET /props (n_ctx of the running model)",
        ),
        (show.and_then(ollama_num_ctx), "Ollama POST /api/show (num_ctx of the model's parameters)"),
        (loaded.and_then(|m| number(&m["context_length"])), "Ollama GET /api/ps (context of the loaded model)"),
        (
            show.and_then(ollama_max),
            "Ollama POST /api/show (the model's maximum; Ollama's own default context may be smaller)",
        ),
        (lmstudio.and_then(|m| number(&m["loaded_context_length"])), "LM Studio GET /api/v0/models (loaded context)"),
        (lmstudio.and_then(|m| number(&m["max_context_length"])), "LM Studio GET /api/v0/models (maximum context)"),
        (listed.and_then(|m| number(&m["max_model_len"])), "GET /models (max_model_len, vLLM)"),
        (
            listed.and_then(|m| number(&m["top_provider"]["context_length"])),
            "GET /models (top_provider.context_length)",
        ),
        (listed.and_then(|m| number(&m["context_length"])), "GET /models (context_length)"),
        (listed.and_then(|m| number(&m["meta"]["n_ctx"])), "GET /models (meta.n_ctx, llama.cpp)"),
        (listed.and_then(|m| number(&m["context_window"])), "GET /models (context_window)"),
    ];
    let (context_window, window_source) = windows
        .into_iter()
        .find_map(|(window, source)| Some((window.filter(|&w| w > 0)?, WindowSource::Server(source))))
        .unwrap_or((DEFAULT_CONTEXT_WINDOW, WindowSource::Default));

    let capabilities = show.and_then(|s| strings(&s["capabilities"]));
    let supported = listed.and_then(|m| strings(&m["supported_parameters"]));
    let tools = capabilities
        .as_ref()
        .map(|c| c.contains(&"tools"))
        .or_else(|| supported.as_ref().map(|p| p.contains(&"tools")));
    let vision = props
        .and_then(|p| p["modalities"]["vision"].as_bool())
        .or_else(|| capabilities.as_ref().map(|c| c.contains(&"vision")))
        .or_else(|| lmstudio.and_then(|m| m["type"].as_str()).map(|kind| kind == "vlm"))
        .or_else(|| listed.and_then(|m| strings(&m["architecture"]["input_modalities"])).map(|i| i.contains(&"image")));
    ModelInfo { context_window, window_source, tools, vision }
}

/// The object in the array `list` whose `key` is `model`.
fn entry<'a>(list: &'a Value, key: &str, model: &str) -> Option<&'a Value> {
    list.as_array()?.iter().find(|item| item[key].as_str() == Some(model))
}

/// Ollama's entry for `model` among its loaded models (`llama3` is `llama3:latest`).
fn ollama_loaded<'a>(models: &'a Value, model: &str) -> Option<&'a Value> {
    let tagged = if model.contains(':') { model.to_owned() } else { format!("{model}:latest") };
    models.as_array()?.iter().find(|item| {
        ["name", "model"].iter().any(|key| item[*key].as_str().is_some_and(|name| name == model || name == tagged))
    })
}

/// `num_ctx` from Ollama's `parameters` text (`num_ctx   8192`, one per line).
fn ollama_num_ctx(show: &Value) -> Option<u64> {
    show["parameters"].as_str()?.lines().find_map(|line| {
        let mut words = line.split_whitespace();
        (words.next()? == "num_ctx").then(|| words.next()?.parse().ok())?
    })
}

/// `<architecture>.context_length` from Ollama's `model_info`.
fn ollama_max(show: &Value) -> Option<u64> {
    let info = show["model_info"].as_object()?;
    let architecture = info.get("general.architecture").and_then(Value::as_str);
    match architecture.and_then(|arch| info.get(&format!("{arch}.context_length"))) {
        Some(value) => number(value),
        None => info.iter().find(|(key, _)| key.ends_with(".context_length")).and_then(|(_, value)| number(value)),
    }
}

fn number(value: &Value) -> Option<u64> {
    value.as_u64().or_else(|| value.as_f64().filter(|f| f.is_finite() && *f >= 1.0).map(|f| f as u64))
}

fn strings(value: &Value) -> Option<Vec<&str>> {
    Some(value.as_array()?.iter().filter_map(Value::as_str).collect())
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::sync::Mutex;

    use super::*;

    /// A fetch that answers from a table (URL -> body) and records what it was asked.
    type Asked = std::sync::Arc<Mutex<Vec<ProbeRequest>>>;

    fn table(answers: &[(&str, Value)]) -> (impl Fn(ProbeRequest) -> std::future::Ready<Option<Value>> + use<>, Asked) {
        let answers: HashMap<String, Value> =
            answers.iter().map(|(url, body)| ((*url).to_owned(), body.clone())).collect();
        let asked = std::sync::Arc::new(Mutex::new(Vec::new()));
        let log = std::sync::Arc::clone(&asked);
        let fetch = move |request: ProbeRequest| {
            let answer = answers.get(&request.url).cloned();
            log.lock().unwrap().push(request);
            std::future::ready(answer)
        };
        (fetch, asked)
    }

    #[tokio::test]
    async fn llamacpp_props_win_and_say_so() {
        let (fetch, _) = table(&[
            (
                "http://h:8080/props",
                json!({"default_generation_settings": {"n_ctx": 8192}, "modalities": {"vision": true}}),
            ),
            ("http://h:8080/v1/models", json!({"data": [{"id": "local", "meta": {"n_ctx_train": 131072}}]})),
        ]);
        let info = probe("http://h:8080/v1", "local", fetch).await;
        assert_eq!(info.context_window, 8192);
        assert_eq!(info.window_source, WindowSource::Server("llama.cpp GET /props (n_ctx of the running model)"));
        assert_eq!((info.tools, info.vision), (None, Some(true)));
    }

    #[tokio::test]
    async fn ollama_prefers_the_window_it_runs_with() {
        let show = json!({"parameters": "stop \"x\"", "capabilities": ["completion", "tools"],
            "model_info": {"general.architecture": "qwen2", "qwen2.context_length": 32768}});
        let ps = json!({"models": [{"name": "qwen:7b", "context_length": 4096}]});
        let (fetch, asked) = table(&[("http://h:11434/api/show", show.clone()), ("http://h:11434/api/ps", ps)]);
        let info = probe("http://h:11434/v1/", "qwen:7b", fetch).await;
        assert_eq!((info.context_window, info.tools, info.vision), (4096, Some(true), Some(false)));
        let show_request = asked.lock().unwrap().iter().find(|r| r.url.ends_with("/api/show")).cloned().unwrap();
        assert_eq!(show_request.body, Some(json!({"model": "qwen:7b"})));

        let mut with_num_ctx = show.clone();
        with_num_ctx["parameters"] = json!("num_ctx                        16384\nstop \"x\"");
        let (fetch, _) = table(&[("http://h:11434/api/show", with_num_ctx)]);
        assert_eq!(probe("http://h:11434/v1", "qwen:7b", fetch).await.context_window, 16384);

        let (fetch, _) = table(&[("http://h:11434/api/show", show)]);
        let info = probe("http://h:11434/v1", "qwen:7b", fetch).await;
        assert_eq!(info.context_window, 32768, "the maximum, when nothing better is known");
        assert!(matches!(info.window_source, WindowSource::Server(s) if s.contains("maximum")));
    }

    #[tokio::test]
    async fn cloud_apis_are_asked_only_for_models() {
        let list = json!({"data": [{"id": "qwen/coder", "context_length": 262144,
            "supported_parameters": ["temperature"], "architecture": {"input_modalities": ["text", "image"]}}]});
        let (fetch, asked) = table(&[("https://openrouter.ai/api/v1/models", list)]);
        let info = probe("https://openrouter.ai/api/v1", "qwen/coder", fetch).await;
        assert_eq!((info.context_window, info.tools, info.vision), (262144, Some(false), Some(true)));
        let urls: Vec<String> = asked.lock().unwrap().iter().map(|r| r.url.clone()).collect();
        assert_eq!(urls, ["https://openrouter.ai/api/v1/models"]);
    }

    #[tokio::test]
    async fn lmstudio_and_vllm() {
        let (fetch, _) = table(&[(
            "http://h:1234/api/v0/models",
            json!({"data": [{"id": "m", "type": "vlm", "max_context_length": 32768, "loaded_context_length": 8192}]}),
        )]);
        let info = probe("http://h:1234/v1", "m", fetch).await;
        assert_eq!((info.context_window, info.vision), (8192, Some(true)));
        let (fetch, _) = table(&[("http://h:8000/v1/models", json!({"data": [{"id": "m", "max_model_len": 40960}]}))]);
        assert_eq!(probe("http://h:8000/v1", "m", fetch).await.context_window, 40960);
    }

    #[tokio::test]
    async fn nothing_useful_is_the_default() {
        let (fetch, _) = table(&[("http://h/v1/models", json!({"data": [{"id": "other", "max_model_len": 4}]}))]);
        let info = probe("http://h/v1", "m", fetch).await;
        assert_eq!(
            info,
            ModelInfo {
                context_window: DEFAULT_CONTEXT_WINDOW,
                window_source: WindowSource::Default,
                tools: None,
                vision: None
            }
        );
    }

    /// A server that never answers costs one timeout, not a turn.
    #[tokio::test(start_paused = true)]
    async fn a_silent_server_times_out_to_the_default() {
        let started = tokio::time::Instant::now();
        let info = probe("http://h/v1", "m", |_| std::future::pending::<Option<Value>>()).await;
        assert_eq!(info.window_source, WindowSource::Default);
        assert_eq!(started.elapsed(), PROBE_TIMEOUT, "all probes wait at the same time");
    }
}
