//! A small web server for the `fetch` tests: real HTTP/1.1 over loopback
//! (`127.0.0.1:0`), serving the [`Route`]s a test sets up by path, recording
//! every request, and counting what each response body handed to the socket
//! and whether it was cut off (the client went away before the end).

use std::collections::HashMap;
use std::convert::Infallible;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use hyper::body::{Body, Frame, Incoming, SizeHint};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;
use tokio::task::{JoinHandle, JoinSet};

/// What the server answers on one path.
#[derive(Debug, Clone)]
pub enum Route {
    /// This status, these headers, this body (sent with a length).
    Page {
        /// The status code.
        status: u16,
        /// Response headers.
        headers: Vec<(String, String)>,
        /// The body.
        body: Bytes,
    },
    /// `200` with this type and `size` bytes of `fill` (repeated), produced
    /// as hyper asks for them, sent chunked.
    Generated {
        /// The content type.
        content_type: String,
        /// Total bytes.
        size: usize,
        /// The bytes repeated to fill the body.
        fill: Bytes,
    },
    /// `200` with this type: `head` is sent, then nothing more, ever, until
    /// the client goes away.
    Stalls {
        /// The content type.
        content_type: String,
        /// What is sent before the stall.
        head: Bytes,
    },
}

impl Route {
    /// `200` with this content type and body.
    pub fn ok(content_type: &str, body: impl Into<Bytes>) -> Route {
        Route::Page { status: 200, headers: vec![("content-type".into(), content_type.into())], body: body.into() }
    }

    /// `status` with a plain-text body.
    pub fn status(status: u16, body: &str) -> Route {
        Route::Page {
            status,
            headers: vec![("content-type".into(), "text/plain".into())],
            body: Bytes::copy_from_slice(body.as_bytes()),
        }
    }

    /// A `302` to `location`.
    pub fn redirect(location: &str) -> Route {
        Route::Page { status: 302, headers: vec![("location".into(), location.into())], body: Bytes::new() }
    }
}

/// What became of one response body.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Sent {
    /// The request path.
    pub path: String,
    /// Bytes handed to hyper.
    pub bytes: usize,
    /// Whether the body ended; `false` with `closed` means the client left first.
    pub finished: bool,
    /// Whether the response is over (finished or cut off).
    pub closed: bool,
}

#[derive(Default)]
struct State {
    routes: HashMap<String, Route>,
    requests: Vec<String>,
    sent: Vec<Sent>,
}

struct Shared {
    state: Mutex<State>,
    changed: Notify,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// A running server; dropping it stops it and closes every connection.
pub struct WebServer {
    addr: SocketAddr,
    shared: Arc<Shared>,
    accept_loop: JoinHandle<()>,
}

impl WebServer {
    /// Binds `127.0.0.1:0` and serves on the current runtime.
    pub async fn start() -> WebServer {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("web: bind");
        let addr = listener.local_addr().expect("web: local_addr");
        let shared = Arc::new(Shared { state: Mutex::new(State::default()), changed: Notify::new() });
        let accept_loop = tokio::spawn(accept_loop(listener, Arc::clone(&shared)));
        WebServer { addr, shared, accept_loop }
    }

    /// The port it listens on.
    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// `http://localhost:<port><path>`.
    pub fn url(&self, path: &str) -> String {
        format!("http://localhost:{}{path}", self.port())
    }

    /// Serves `route` on `path` (the path and query as requested).
    pub fn route(&self, path: &str, route: Route) {
        self.shared.lock().routes.insert(path.to_owned(), route);
    }

    /// Every path requested, in order.
    pub fn requests(&self) -> Vec<String> {
        self.shared.lock().requests.clone()
    }

    /// What became of each response body so far.
    pub fn sent(&self) -> Vec<Sent> {
        self.shared.lock().sent.clone()
    }

    /// Waits until `check` holds for the bodies sent so far, at most `timeout`.
    pub async fn wait_for(&self, timeout: Duration, check: impl Fn(&[Sent]) -> bool) -> Vec<Sent> {
        let deadline = std::time::Instant::now() + timeout;
        loop {
            let notified = self.shared.changed.notified();
            let mut notified = std::pin::pin!(notified);
            notified.as_mut().enable();
            let sent = self.sent();
            if check(&sent) {
                return sent;
            }
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if super::clock::within(left, notified).await.is_none() {
                panic!("web: condition not met within {timeout:?}; bodies: {sent:?}; requests: {:?}", self.requests());
            }
        }
    }
}

impl Drop for WebServer {
    fn drop(&mut self) {
        self.accept_loop.abort();
    }
}

async fn accept_loop(listener: TcpListener, shared: Arc<Shared>) {
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let Ok((stream, _)) = accepted else { continue };
                connections.spawn(serve_connection(stream, Arc::clone(&shared)));
            }
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
}

async fn serve_connection(stream: TcpStream, shared: Arc<Shared>) {
    let service = service_fn(move |request| handle(request, Arc::clone(&shared)));
    let _ = http1::Builder::new().serve_connection(TokioIo::new(stream), service).await;
}

async fn handle(request: Request<Incoming>, shared: Arc<Shared>) -> Result<Response<WebBody>, Infallible> {
    let path = request.uri().path_and_query().map_or_else(|| request.uri().path().to_owned(), |pq| pq.to_string());
    let (route, index) = {
        let mut state = shared.lock();
        state.requests.push(path.clone());
        let route = state.routes.get(&path).cloned().unwrap_or_else(|| Route::status(404, "web: no such route"));
        state.sent.push(Sent { path, ..Sent::default() });
        (route, state.sent.len() - 1)
    };
    shared.changed.notify_waiters();
    let tracker = Tracker { shared, index };
    let response = match route {
        Route::Page { status, headers, body } => {
            let mut builder = Response::builder().status(status);
            for (name, value) in headers {
                builder = builder.header(name, value);
            }
            builder.body(WebBody { source: Source::Whole(Some(body)), tracker })
        }
        Route::Generated { content_type, size, fill } => Response::builder()
            .header("content-type", content_type)
            .body(WebBody { source: Source::Generated { left: size, fill }, tracker }),
        Route::Stalls { content_type, head } => Response::builder()
            .header("content-type", content_type)
            .body(WebBody { source: Source::Stalls(Some(head)), tracker }),
    };
    Ok(response.expect("web: build response"))
}

/// Records what a body handed over, and whether it got to its end.
struct Tracker {
    shared: Arc<Shared>,
    index: usize,
}

impl Tracker {
    fn sent(&self, bytes: usize) {
        self.shared.lock().sent[self.index].bytes += bytes;
        self.shared.changed.notify_waiters();
    }

    fn finish(&self) {
        self.shared.lock().sent[self.index].finished = true;
    }
}

impl Drop for Tracker {
    fn drop(&mut self) {
        self.shared.lock().sent[self.index].closed = true;
        self.shared.changed.notify_waiters();
    }
}

enum Source {
    Whole(Option<Bytes>),
    Generated { left: usize, fill: Bytes },
    Stalls(Option<Bytes>),
}

struct WebBody {
    source: Source,
    tracker: Tracker,
}

impl Body for WebBody {
    type Data = Bytes;
    type Error = io::Error;

    fn poll_frame(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, io::Error>>> {
        let this = self.get_mut();
        let data = match &mut this.source {
            Source::Whole(body) => body.take(),
            Source::Generated { left, fill } => {
                let n = (*left).min(fill.len());
                *left -= n;
                (n > 0).then(|| fill.slice(..n))
            }
            // Never woken again: hyper drops the body when the client leaves.
            Source::Stalls(head) => match head.take() {
                Some(head) => Some(head),
                None => return Poll::Pending,
            },
        };
        match data {
            Some(data) => {
                this.tracker.sent(data.len());
                Poll::Ready(Some(Ok(Frame::data(data))))
            }
            None => {
                this.tracker.finish();
                Poll::Ready(None)
            }
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.source {
            Source::Whole(body) => SizeHint::with_exact(body.as_ref().map_or(0, |b| b.len() as u64)),
            Source::Generated { .. } | Source::Stalls(_) => SizeHint::default(),
        }
    }

    fn is_end_stream(&self) -> bool {
        matches!(self.source, Source::Whole(None))
    }
}
