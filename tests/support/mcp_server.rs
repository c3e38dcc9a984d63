//! A small MCP server built with rmcp, for the MCP tests: the same tools over
//! stdio (as `examples/mcp_fixture.rs`, which includes this file, so that
//! `cargo test` builds it next to the test binary) and over HTTP in-process
//! ([`HttpMcpServer`]: Streamable HTTP at `/mcp`, the older HTTP+SSE
//! transport at `/sse`).
//!
//! Tools:
//!
//! - `echo {text}`: read-only; answers `echo: <text>`.
//! - `note {text, link?}`: changes things (not read-only); answers `noted: <text>`.
//!   Its schema carries `$schema` and a `format: uri` that lathe must clean.
//! - `fail`: read-only; answers an `isError` result.
//! - `crash`: over stdio, the process exits with status 3 mid-call.
//! - `hang`: never answers; logs `cancelled:hang` when the client cancels it.
//! - `rich`: read-only; text, an image, an embedded resource and a resource link.
//! - `structured`: read-only; only `structuredContent`.
//! - `grow`: adds the tool `extra` and sends `notifications/tools/list_changed`.
//! - `dotted.name`: a name that needs sanitising.
//! - `env {text}`: read-only; for each space-separated name in `text`, a line
//!   `NAME=value` or `NAME unset` from the server's own environment.
//!
//! When `MCP_FIXTURE_LOG` names a file, the server appends one line per
//! event: `start:<pid>`, `call:<tool>`, `cancelled:<tool>`.

use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use rmcp::ServerHandler;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, EmbeddedResource, ErrorData, Implementation,
    ListToolsResult, PaginatedRequestParams, Resource, ResourceContents, ServerCapabilities, ServerConfig, Tool,
    ToolAnnotations,
};
use rmcp::service::{RequestContext, RoleServer};
use serde_json::{Map, Value, json};

/// The fixture server's state. Clones share it.
#[derive(Clone, Default)]
pub struct Fixture {
    grown: Arc<AtomicBool>,
    log: Option<PathBuf>,
    /// Whether `crash` may end the process (only for the stdio fixture).
    pub may_exit: bool,
}

impl Fixture {
    /// A fixture logging to `log`, if given.
    pub fn new(log: Option<PathBuf>) -> Fixture {
        Fixture { grown: Arc::new(AtomicBool::new(false)), log, may_exit: false }
    }

    /// Appends one line to the log file, if there is one.
    pub fn log(&self, line: &str) {
        if let Some(path) = &self.log
            && let Ok(mut file) = std::fs::OpenOptions::new().create(true).append(true).open(path)
        {
            let _ = writeln!(file, "{line}");
        }
    }

    fn tools(&self) -> Vec<Tool> {
        let object = |value: Value| -> Arc<Map<String, Value>> {
            match value {
                Value::Object(map) => Arc::new(map),
                _ => Arc::new(Map::new()),
            }
        };
        let text_arg =
            || object(json!({"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}));
        let empty = || object(json!({"type": "object", "properties": {}}));
        let read_only = || ToolAnnotations::new().read_only(true);
        let mut tools = vec![
            Tool::new("echo", "Repeats the text.", text_arg())
                .with_title("Echo")
                .with_annotations(ToolAnnotations::new().read_only(true)),
            Tool::new(
                "note",
                "Writes a note somewhere.",
                object(json!({
                    "$schema": "http://json-schema.org/draft-07/schema#",
                    "type": "object",
                    "properties": {"text": {"type": "string"}, "link": {"type": "string", "format": "uri"}},
                    "required": ["text"]
                })),
            )
            .with_annotations(ToolAnnotations::new().read_only(false).destructive(false)),
            Tool::new("fail", "Always fails.", empty()).with_annotations(read_only()),
            Tool::new("crash", "Kills the server.", empty()),
            Tool::new("hang", "Never answers.", empty()),
            Tool::new("rich", "Answers with every kind of content.", empty()).with_annotations(read_only()),
            Tool::new("structured", "Answers with structured content only.", empty()).with_annotations(read_only()),
            Tool::new("grow", "Adds a tool.", empty()),
            Tool::new("dotted.name", "Has a dot in its name.", empty()),
            Tool::new("env", "Shows environment variables.", text_arg()).with_annotations(read_only()),
        ];
        if self.grown.load(Ordering::SeqCst) {
            tools.push(Tool::new("extra", "Appears after grow.", empty()));
        }
        tools
    }
}

impl ServerHandler for Fixture {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().enable_tool_list_changed().build())
            .with_server_info(Implementation::new("mcp-fixture", "1.0.0"))
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(self.tools()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let name = request.name.to_string();
        self.log(&format!("call:{name}"));
        let text = request.arguments.as_ref().and_then(|a| a.get("text")).and_then(Value::as_str).unwrap_or("");
        let result = match name.as_str() {
            "echo" => CallToolResult::success(vec![ContentBlock::text(format!("echo: {text}"))]),
            "note" => CallToolResult::success(vec![ContentBlock::text(format!("noted: {text}"))]),
            "fail" => CallToolResult::error(vec![ContentBlock::text("the fixture failed on purpose")]),
            "crash" if self.may_exit => {
                eprintln!("fixture: crashing on purpose");
                std::process::exit(3);
            }
            "crash" => CallToolResult::error(vec![ContentBlock::text("crash only works over stdio")]),
            "hang" => {
                context.ct.cancelled().await;
                self.log("cancelled:hang");
                return Err(ErrorData::internal_error("cancelled", None));
            }
            "rich" => CallToolResult::success(vec![
                ContentBlock::text("a picture:"),
                ContentBlock::image("iVBORw0KGgo=", "image/png"),
                ContentBlock::Resource(EmbeddedResource::new(ResourceContents::text("file body", "file:///notes.txt"))),
                ContentBlock::resource_link(Resource::new("file:///report.pdf", "report.pdf")),
            ]),
            "structured" => {
                let mut result = CallToolResult::success(Vec::new());
                result.structured_content = Some(json!({"temperature": 21, "unit": "C"}));
                result
            }
            "grow" => {
                self.grown.store(true, Ordering::SeqCst);
                let _ = context.peer.notify_tool_list_changed().await;
                CallToolResult::success(vec![ContentBlock::text("grown")])
            }
            "extra" => CallToolResult::success(vec![ContentBlock::text("extra!")]),
            "dotted.name" => CallToolResult::success(vec![ContentBlock::text("dotted")]),
            "env" => {
                let lines: Vec<String> = text
                    .split_whitespace()
                    .map(|name| match std::env::var(name) {
                        Ok(value) => format!("{name}={value}"),
                        Err(_) => format!("{name} unset"),
                    })
                    .collect();
                CallToolResult::success(vec![ContentBlock::text(lines.join("\n"))])
            }
            other => return Err(ErrorData::invalid_params(format!("no tool named {other}"), None)),
        };
        Ok(result.into())
    }
}

pub use http::HttpMcpServer;

mod http {
    //! The fixture over HTTP, in the test process.

    use std::collections::HashMap;
    use std::convert::Infallible;
    use std::net::SocketAddr;
    use std::sync::{Arc, Mutex};

    use bytes::Bytes;
    use futures_util::StreamExt;
    use http_body_util::combinators::BoxBody;
    use http_body_util::{BodyExt, Full, StreamBody};
    use hyper::body::{Frame, Incoming};
    use hyper::server::conn::http1;
    use hyper::service::service_fn;
    use hyper::{Method, Request, Response, StatusCode};
    use hyper_util::rt::TokioIo;
    use rmcp::ServiceExt;
    use rmcp::transport::StreamableHttpService;
    use rmcp::transport::streamable_http_server::StreamableHttpServerConfig;
    use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, WriteHalf};
    use tokio::net::TcpListener;
    use tokio::sync::Mutex as AsyncMutex;
    use tokio::task::JoinHandle;

    use super::Fixture;

    type Body = BoxBody<Bytes, Infallible>;

    /// The fixture served on loopback: Streamable HTTP at `/mcp`, HTTP+SSE
    /// at `/sse` (messages POSTed to `/message?session=<id>`). Dropping it
    /// stops the server.
    pub struct HttpMcpServer {
        addr: SocketAddr,
        accept: JoinHandle<()>,
    }

    impl Drop for HttpMcpServer {
        fn drop(&mut self) {
            self.accept.abort();
        }
    }

    /// The pipes into each legacy SSE session's server.
    type Sessions = Arc<Mutex<HashMap<String, Arc<AsyncMutex<WriteHalf<tokio::io::DuplexStream>>>>>>;

    impl HttpMcpServer {
        /// Starts serving `fixture` on 127.0.0.1 (a free port).
        pub async fn start(fixture: Fixture) -> HttpMcpServer {
            let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind the MCP test server");
            let addr = listener.local_addr().expect("its address");
            let factory = fixture.clone();
            let streamable = StreamableHttpService::new(
                move || Ok(factory.clone()),
                Arc::new(LocalSessionManager::default()),
                StreamableHttpServerConfig::default(),
            );
            let sessions: Sessions = Arc::default();
            let accept = tokio::spawn(async move {
                let mut connections = tokio::task::JoinSet::new();
                loop {
                    let Ok((stream, _)) = listener.accept().await else { return };
                    let (streamable, sessions, fixture) = (streamable.clone(), Arc::clone(&sessions), fixture.clone());
                    connections.spawn(async move {
                        let service = service_fn(move |request: Request<Incoming>| {
                            let (streamable, sessions, fixture) =
                                (streamable.clone(), Arc::clone(&sessions), fixture.clone());
                            async move { Ok::<_, Infallible>(route(request, streamable, sessions, fixture).await) }
                        });
                        let _ = http1::Builder::new().serve_connection(TokioIo::new(stream), service).await;
                    });
                }
            });
            HttpMcpServer { addr, accept }
        }

        /// The Streamable HTTP endpoint.
        pub fn url(&self) -> String {
            format!("http://{}/mcp", self.addr)
        }

        /// The HTTP+SSE endpoint.
        pub fn sse_url(&self) -> String {
            format!("http://{}/sse", self.addr)
        }
    }

    async fn route(
        request: Request<Incoming>,
        streamable: StreamableHttpService<Fixture, LocalSessionManager>,
        sessions: Sessions,
        fixture: Fixture,
    ) -> Response<Body> {
        match (request.method(), request.uri().path()) {
            (_, "/mcp") => streamable.handle(request).await,
            (&Method::GET, "/sse") => open_sse(sessions, fixture),
            (&Method::POST, "/message") => post_message(request, sessions).await,
            _ => plain(StatusCode::NOT_FOUND, "not found"),
        }
    }

    fn plain(status: StatusCode, text: &'static str) -> Response<Body> {
        let mut response = Response::new(Full::new(Bytes::from(text)).boxed());
        *response.status_mut() = status;
        response
    }

    /// A legacy SSE session: an rmcp server over a byte pipe, its lines sent
    /// as `message` events after the `endpoint` event.
    fn open_sse(sessions: Sessions, fixture: Fixture) -> Response<Body> {
        let id = format!("s{}", sessions.lock().map(|s| s.len()).unwrap_or(0));
        let (ours, theirs) = tokio::io::duplex(256 * 1024);
        let (read, write) = tokio::io::split(ours);
        if let Ok(mut sessions) = sessions.lock() {
            sessions.insert(id.clone(), Arc::new(AsyncMutex::new(write)));
        }
        tokio::spawn(async move {
            let (server_read, server_write) = tokio::io::split(theirs);
            if let Ok(running) = fixture.serve((server_read, server_write)).await {
                let _ = running.waiting().await;
            }
        });
        let endpoint = format!("event: endpoint\ndata: /message?session={id}\n\n");
        let first = futures_util::stream::once(async move { Bytes::from(endpoint) });
        let lines = futures_util::stream::unfold(BufReader::new(read).lines(), |mut lines| async move {
            match lines.next_line().await {
                Ok(Some(line)) => Some((Bytes::from(format!("event: message\ndata: {line}\n\n")), lines)),
                _ => None,
            }
        });
        let body = StreamBody::new(first.chain(lines).map(|bytes| Ok::<_, Infallible>(Frame::data(bytes))));
        let mut response = Response::new(BodyExt::boxed(body));
        response.headers_mut().insert("content-type", hyper::header::HeaderValue::from_static("text/event-stream"));
        response
    }

    async fn post_message(request: Request<Incoming>, sessions: Sessions) -> Response<Body> {
        let id = request.uri().query().and_then(|q| q.strip_prefix("session=")).unwrap_or_default().to_owned();
        let pipe = sessions.lock().ok().and_then(|s| s.get(&id).cloned());
        let Some(pipe) = pipe else { return plain(StatusCode::NOT_FOUND, "no such session") };
        let Ok(body) = request.into_body().collect().await else {
            return plain(StatusCode::BAD_REQUEST, "unreadable body");
        };
        let mut line = body.to_bytes().to_vec();
        line.push(b'\n');
        if pipe.lock().await.write_all(&line).await.is_err() {
            return plain(StatusCode::GONE, "session closed");
        }
        plain(StatusCode::ACCEPTED, "accepted")
    }
}
