//! A bench-only mock of an OpenAI-compatible endpoint that streams numbered
//! text deltas and remembers when it sent each one.
//!
//! The tests' `MockOpenAi` plays scripts through hyper on tokio, where a
//! delay has millisecond granularity and "sent" means "handed to hyper". Here
//! each connection has its own OS thread writing HTTP/1.1 (chunked) and SSE
//! by hand straight to a `TCP_NODELAY` socket, so a send time is the instant
//! before the `write` system call, pacing can go below a millisecond, and a
//! full-speed reply is limited by the socket, not by the mock.
//!
//! Delta `seq` carries the text `t<seq> `, so the client can match each
//! `agent_message_chunk` to its send time with one clock (both ends live in
//! the benchmark process).

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, BufWriter, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::Sender;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How one chat-completions request is answered.
pub struct Reply {
    /// Text deltas to stream, numbered from 0.
    pub deltas: usize,
    /// Pause after each delta (`None`: as fast as the socket takes them,
    /// through a 64 KiB buffer).
    pub gap: Option<Duration>,
    /// Receives the send instant of every delta once the reply is written.
    pub sent: Option<Sender<Vec<Instant>>>,
    /// Answers only a request whose body contains this text (the prompt of
    /// one of several sessions streaming at once); `None`: the next request.
    pub key: Option<String>,
    /// Tool calls (id, name, JSON arguments) to answer with, in one response
    /// ending with `finish_reason: "tool_calls"`, instead of the deltas.
    pub calls: Vec<(String, String, String)>,
}

impl Reply {
    /// `deltas` text deltas with `gap` after each, for the request whose
    /// body contains `key` (any request with `None`).
    pub fn stream(deltas: usize, gap: Option<Duration>, key: Option<String>) -> Reply {
        Reply { deltas, gap, sent: None, key, calls: Vec::new() }
    }
}

struct Shared {
    queue: Mutex<VecDeque<Reply>>,
    stop: AtomicBool,
}

/// A running firehose; dropping it stops accepting connections.
pub struct Firehose {
    addr: SocketAddr,
    shared: Arc<Shared>,
    accept: Option<JoinHandle<()>>,
}

impl Firehose {
    /// Listens on `127.0.0.1:0`.
    pub fn start() -> Firehose {
        let listener = TcpListener::bind("127.0.0.1:0").expect("firehose: bind");
        let addr = listener.local_addr().expect("firehose: local_addr");
        let shared = Arc::new(Shared { queue: Mutex::new(VecDeque::new()), stop: AtomicBool::new(false) });
        let accept_shared = Arc::clone(&shared);
        let accept = std::thread::Builder::new()
            .name("firehose-accept".into())
            .spawn(move || {
                for stream in listener.incoming() {
                    if accept_shared.stop.load(Ordering::Acquire) {
                        return;
                    }
                    let Ok(stream) = stream else { continue };
                    let shared = Arc::clone(&accept_shared);
                    let _ = std::thread::Builder::new()
                        .name("firehose-conn".into())
                        .spawn(move || serve_connection(stream, &shared));
                }
            })
            .expect("firehose: spawn the accept thread");
        Firehose { addr, shared, accept: Some(accept) }
    }

    /// The base URL to configure, e.g. `http://127.0.0.1:PORT/v1`.
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// Queues the answer to the next request (FIFO).
    pub fn push(&self, reply: Reply) {
        self.shared.queue.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push_back(reply);
    }
}

impl Drop for Firehose {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        // Wake the accept loop so it sees the flag.
        let _ = TcpStream::connect(self.addr);
        if let Some(accept) = self.accept.take() {
            let _ = accept.join();
        }
    }
}

fn serve_connection(stream: TcpStream, shared: &Shared) {
    let _ = stream.set_nodelay(true);
    let Ok(write_half) = stream.try_clone() else { return };
    let mut reader = BufReader::new(stream);
    // One request after another on a kept-alive connection, until it closes.
    while let Some(body) = read_request(&mut reader) {
        if shared.stop.load(Ordering::Acquire) {
            return;
        }
        let reply = {
            let mut queue = shared.queue.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            let body = String::from_utf8_lossy(&body);
            let at = queue.iter().position(|reply| reply.key.as_ref().is_none_or(|key| body.contains(key.as_str())));
            at.and_then(|at| queue.remove(at))
        };
        let written = match reply {
            Some(reply) => stream_reply(&write_half, reply),
            None => {
                let body = r#"{"error":{"message":"firehose: no reply queued","type":"mock_error"}}"#;
                let response = format!(
                    "HTTP/1.1 500 Internal Server Error\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
                    body.len()
                );
                (&write_half).write_all(response.as_bytes())
            }
        };
        if written.is_err() {
            return;
        }
    }
}

/// Reads one request (head and body); returns the body, `None` when the
/// connection closed.
fn read_request(reader: &mut BufReader<TcpStream>) -> Option<Vec<u8>> {
    let mut content_length = 0usize;
    let mut chunked = false;
    let mut line = String::new();
    let mut first = true;
    loop {
        line.clear();
        if reader.read_line(&mut line).ok()? == 0 {
            return None;
        }
        if first {
            first = false;
            continue;
        }
        let trimmed = line.trim_end();
        if trimmed.is_empty() {
            break;
        }
        if let Some((name, value)) = trimmed.split_once(':') {
            let value = value.trim();
            if name.eq_ignore_ascii_case("content-length") {
                content_length = value.parse().ok()?;
            } else if name.eq_ignore_ascii_case("transfer-encoding") && value.eq_ignore_ascii_case("chunked") {
                chunked = true;
            }
        }
    }
    if chunked {
        let mut body = Vec::new();
        loop {
            line.clear();
            reader.read_line(&mut line).ok()?;
            let size = usize::from_str_radix(line.trim().split(';').next()?, 16).ok()?;
            let mut data = vec![0u8; size + 2];
            reader.read_exact(&mut data).ok()?;
            if size == 0 {
                return Some(body);
            }
            body.extend_from_slice(&data[..size]);
        }
    }
    let mut body = vec![0u8; content_length];
    reader.read_exact(&mut body).ok()?;
    Some(body)
}

/// A `chat.completion.chunk` event with this `delta` and `finish_reason`, as
/// one HTTP chunk.
fn event_chunk(out: &mut Vec<u8>, delta: &str, finish_reason: &str) {
    let event = format!(
        "data: {{\"id\":\"chatcmpl-bench\",\"object\":\"chat.completion.chunk\",\"created\":0,\"model\":\"mock\",\
         \"choices\":[{{\"index\":0,\"delta\":{delta},\"finish_reason\":{finish_reason}}}]}}\n\n"
    );
    raw_chunk(out, event.as_bytes());
}

fn raw_chunk(out: &mut Vec<u8>, data: &[u8]) {
    out.extend_from_slice(format!("{:x}\r\n", data.len()).as_bytes());
    out.extend_from_slice(data);
    out.extend_from_slice(b"\r\n");
}

fn stream_reply(socket: &TcpStream, reply: Reply) -> std::io::Result<()> {
    let mut head = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\n\
transfer-encoding: chunked\r\n\r\n"
        .to_vec();
    event_chunk(&mut head, r#"{"role":"assistant","content":""}"#, "null");
    if !reply.calls.is_empty() {
        for (index, (id, name, arguments)) in reply.calls.iter().enumerate() {
            let call = serde_json::json!([{
                "index": index, "id": id, "type": "function",
                "function": {"name": name, "arguments": arguments},
            }]);
            event_chunk(&mut head, &serde_json::json!({ "tool_calls": call }).to_string(), "null");
        }
        event_chunk(&mut head, "{}", "\"tool_calls\"");
        raw_chunk(&mut head, b"data: [DONE]\n\n");
        head.extend_from_slice(b"0\r\n\r\n");
        if let Some(report) = reply.sent {
            let _ = report.send(Vec::new());
        }
        let mut socket = socket;
        return socket.write_all(&head);
    }
    let mut sent = Vec::with_capacity(reply.deltas);
    let mut frame = Vec::with_capacity(256);
    let result = (|| {
        match reply.gap {
            Some(gap) => {
                let mut socket = socket;
                socket.write_all(&head)?;
                for seq in 0..reply.deltas {
                    frame.clear();
                    event_chunk(&mut frame, &format!("{{\"content\":\"t{seq} \"}}"), "null");
                    sent.push(Instant::now());
                    socket.write_all(&frame)?;
                    std::thread::sleep(gap);
                }
                let mut tail = Vec::new();
                finish(&mut tail, reply.deltas);
                socket.write_all(&tail)?;
            }
            None => {
                let mut out = BufWriter::with_capacity(64 * 1024, socket);
                out.write_all(&head)?;
                for seq in 0..reply.deltas {
                    frame.clear();
                    event_chunk(&mut frame, &format!("{{\"content\":\"t{seq} \"}}"), "null");
                    sent.push(Instant::now());
                    out.write_all(&frame)?;
                }
                let mut tail = Vec::new();
                finish(&mut tail, reply.deltas);
                out.write_all(&tail)?;
                out.flush()?;
            }
        }
        Ok(())
    })();
    if let Some(report) = reply.sent {
        let _ = report.send(sent);
    }
    result
}

/// The closing chunk, usage, `[DONE]` and the end of the chunked body.
fn finish(out: &mut Vec<u8>, deltas: usize) {
    event_chunk(out, "{}", "\"stop\"");
    let usage = format!(
        "data: {{\"id\":\"chatcmpl-bench\",\"object\":\"chat.completion.chunk\",\"created\":0,\"model\":\"mock\",\
         \"choices\":[],\"usage\":{{\"prompt_tokens\":10,\"completion_tokens\":{deltas},\"total_tokens\":{}}}}}\n\n",
        deltas + 10
    );
    raw_chunk(out, usage.as_bytes());
    raw_chunk(out, b"data: [DONE]\n\n");
    out.extend_from_slice(b"0\r\n\r\n");
}
