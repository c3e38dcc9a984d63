//! MCP's older HTTP+SSE transport (protocol version 2024-11-05), which rmcp
//! no longer ships: the client GETs an event stream whose first `endpoint`
//! event names the URL to POST messages to; the server's messages arrive as
//! `message` events on the stream.
//!
//! [`open`] does the GET and waits for the endpoint (so a wrong URL fails with
//! the HTTP status, within the start-up timeout; an endpoint on another origin
//! is refused, since our headers go there), then bridges the stream to a byte
//! pipe that rmcp reads and writes as newline-delimited JSON-RPC: each event's
//! JSON goes in as one line, each line rmcp writes is POSTed. POSTs go one at
//! a time, in order, so a cancellation never overtakes its request; one that
//! fails answers its request with a JSON-RPC error, so the caller hears why
//! instead of waiting. When the event stream ends, the pipe closes and rmcp
//! sees the server as gone. This module knows HTTP and SSE, not what the
//! messages mean.

use futures_util::StreamExt;
use serde_json::{Value, json};
use sse_stream::SseStream;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, DuplexStream};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::connection::error_chain;

/// Bytes buffered in the pipe between the bridge and rmcp.
const PIPE_BYTES: usize = 256 * 1024;

/// A running bridge; dropping it closes the stream and the pipe.
pub(super) struct Bridge {
    _task: AbortOnDrop,
}

/// Opens the event stream at `url`, waits for its `endpoint` event, and
/// starts the bridge. Returns it and rmcp's end of the pipe. The error says
/// what went wrong, for the user.
pub(super) async fn open(
    client: &reqwest::Client,
    url: &str,
    headers: &[(String, String)],
) -> Result<(Bridge, DuplexStream), String> {
    let base = reqwest::Url::parse(url).map_err(|err| format!("{url} is not a valid URL ({err})"))?;
    let mut request = client.get(base.clone()).header("Accept", "text/event-stream");
    for (name, value) in headers {
        request = request.header(name, value);
    }
    let response = request.send().await.map_err(|err| format!("cannot reach {url}: {}", error_chain(&err)))?;
    let status = response.status();
    if !status.is_success() {
        return Err(format!("{url} answered HTTP {status} to the event-stream request"));
    }
    let mut events = SseStream::from_bytes_stream(response.bytes_stream());
    let endpoint = loop {
        match events.next().await {
            Some(Ok(event)) if event.event.as_deref() == Some("endpoint") => {
                let target = event.data.unwrap_or_default();
                break base
                    .join(target.trim())
                    .map_err(|err| format!("the server named \"{target}\" as its endpoint, not a URL ({err})"))?;
            }
            Some(Ok(_)) => {}
            Some(Err(err)) => return Err(format!("the event stream at {url} broke: {err}")),
            None => return Err(format!("the event stream at {url} ended before naming its endpoint")),
        }
    };
    // Our headers (a token, say) go to the endpoint too: only to the same origin.
    if endpoint.origin() != base.origin() {
        return Err(format!("the server named {endpoint} as its endpoint, which is not on the origin of {url}"));
    }
    let (ours, theirs) = tokio::io::duplex(PIPE_BYTES);
    let link = Link { client: client.clone(), endpoint, headers: headers.to_vec() };
    let task = AbortOnDrop(tokio::spawn(link.run(events, ours)));
    Ok((Bridge { _task: task }, theirs))
}

/// Aborts its task when dropped.
struct AbortOnDrop(JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Where the bridge POSTs.
struct Link {
    client: reqwest::Client,
    endpoint: reqwest::Url,
    headers: Vec<(String, String)>,
}

impl Link {
    async fn run<S>(self, mut events: S, pipe: DuplexStream)
    where
        S: futures_util::Stream<Item = Result<sse_stream::Sse, sse_stream::Error>> + Unpin,
    {
        let (read, mut write) = tokio::io::split(pipe);
        let mut outgoing = BufReader::new(read).lines();
        let (failed_tx, mut failed) = mpsc::unbounded_channel::<String>();
        // One POST at a time, in order: a cancellation must not overtake its request.
        let (post_tx, mut post_rx) = mpsc::unbounded_channel::<String>();
        let poster = {
            let link =
                Link { client: self.client.clone(), endpoint: self.endpoint.clone(), headers: self.headers.clone() };
            AbortOnDrop(tokio::spawn(async move {
                while let Some(line) = post_rx.recv().await {
                    link.post(line, failed_tx.clone()).await;
                }
            }))
        };
        loop {
            // Not a cancel race: three sources of lines, served as they come.
            // The bridge ends when rmcp drops its end of the pipe (the
            // session's token reaches it through the connection).
            let line = tokio::select! {
                event = events.next() => match event {
                    Some(Ok(event)) => match incoming_line(event) {
                        Some(line) => line,
                        None => continue,
                    },
                    Some(Err(err)) => {
                        tracing::warn!(endpoint = %self.endpoint, %err, "the MCP event stream broke");
                        break;
                    }
                    None => {
                        tracing::info!(endpoint = %self.endpoint, "the MCP event stream ended");
                        break;
                    }
                },
                line = outgoing.next_line() => match line {
                    Ok(Some(line)) => {
                        if post_tx.send(line).is_err() {
                            break;
                        }
                        continue;
                    }
                    // rmcp closed its end.
                    Ok(None) | Err(_) => break,
                },
                Some(line) = failed.recv() => line,
            };
            if write.write_all(format!("{line}\n").as_bytes()).await.is_err() {
                break;
            }
        }
        // Dropping the pipe tells rmcp the server is gone; the POSTs in flight go too.
        drop(poster);
    }

    /// POSTs one message; when that fails and the message was a request,
    /// sends back (on `failed`) an error response that says why.
    fn post(&self, line: String, failed: mpsc::UnboundedSender<String>) -> impl Future<Output = ()> + Send + 'static {
        let mut request =
            self.client.post(self.endpoint.clone()).header("Content-Type", "application/json").body(line.clone());
        for (name, value) in &self.headers {
            request = request.header(name, value);
        }
        let endpoint = self.endpoint.clone();
        async move {
            let problem = match request.send().await {
                Ok(response) if response.status().is_success() => return,
                Ok(response) => format!("{endpoint} answered HTTP {}", response.status()),
                Err(err) => format!("cannot reach {endpoint}: {}", error_chain(&err)),
            };
            tracing::warn!(%problem, "posting an MCP message failed");
            let message: Value = serde_json::from_str(&line).unwrap_or(Value::Null);
            if let (Some(id), Some(_)) = (message.get("id"), message.get("method")) {
                let error = json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32603, "message": problem}});
                let _ = failed.send(error.to_string());
            }
        }
    }
}

/// The line rmcp should read for one event: the JSON of a `message` event
/// (the default event type), re-encoded on one line. Other events (and data
/// that is not JSON) are skipped.
fn incoming_line(event: sse_stream::Sse) -> Option<String> {
    if !matches!(event.event.as_deref(), None | Some("message")) {
        return None;
    }
    let data = event.data?;
    match serde_json::from_str::<Value>(&data) {
        Ok(message) => Some(message.to_string()),
        Err(err) => {
            tracing::warn!(%err, "skipping an MCP event whose data is not JSON");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn message_events_become_single_lines() {
        let event = sse_stream::Sse::default().data("{\n  \"jsonrpc\": \"2.0\",\n  \"id\": 1\n}");
        assert_eq!(incoming_line(event).as_deref(), Some(r#"{"jsonrpc":"2.0","id":1}"#));
        let named = sse_stream::Sse::default().event("message").data(r#"{"jsonrpc":"2.0"}"#);
        assert!(incoming_line(named).is_some());
        assert_eq!(incoming_line(sse_stream::Sse::default().event("ping").data("{}")), None);
        assert_eq!(incoming_line(sse_stream::Sse::default().data("not json")), None);
    }
}
