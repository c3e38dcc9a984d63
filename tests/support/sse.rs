//! Decodes a model response given as raw SSE bytes, cut into chunks exactly
//! as given, through the same code a real response goes through: a reqwest
//! body whose frames are the given chunks, lathe's
//! `model::sse::without_leading_bom` (as its HTTP layer applies it), then
//! [`ResponseStream`] (`eventsource-stream` events; `[DONE]` ends it,
//! `keepalive` events and undecodable events are skipped, a stream of nothing
//! but undecodable events is an error) and the agent's use of
//! [`StreamDecoder`] (an error reported inside the stream ends it).
//!
//! No server and no socket, so the chunk boundaries the decoder sees are
//! exactly the ones under test.
//!
//! This file is also compiled into the `sse_decoder` fuzz target
//! (`fuzz/fuzz_targets/sse_decoder.rs` includes it by path), so it names the
//! crate as `lathe::` and uses nothing from the rest of the test support.

use std::time::Duration;

use bytes::Bytes;
use lathe::model::ModelError;
use lathe::model::ResponseStream;
use lathe::model::decode::{ModelEvent, ModelOutput, StreamDecoder};

/// How a decoded stream ended.
#[derive(Debug, Clone, PartialEq)]
#[allow(clippy::large_enum_variant, reason = "one per test stream; boxing it would only add noise to the tests")]
pub enum SseEnd {
    /// `[DONE]` or the end of the body: the decoder's complete output.
    Finished(ModelOutput),
    /// A chunk carried an `error` object (the agent fails the turn with it).
    Reported(String),
    /// The event stream itself failed (bytes that are not UTF-8, say).
    Failed(String),
    /// Every event was undecodable (the agent reports an invalid response).
    NoChunks(usize),
}

/// Everything one byte stream produced.
#[derive(Debug, Clone, PartialEq)]
pub struct SseOutcome {
    /// The events the user would have seen, in order.
    pub events: Vec<ModelEvent>,
    /// Events that decoded as chunks.
    pub chunks: usize,
    /// Events skipped because their data was not a chunk.
    pub skipped: usize,
    /// How it ended.
    pub end: SseEnd,
}

/// Decodes byte streams (needs a tokio runtime: the stream's idle timer).
#[derive(Debug, Default)]
pub struct SseHarness {
    /// The tools the request offered (calls written as text may name these).
    offered: Vec<String>,
}

impl SseHarness {
    /// A harness for a request that offered no tools.
    pub fn new() -> Self {
        Self::default()
    }

    /// A harness for a request that offered these tools.
    pub fn offering(tools: &[&str]) -> Self {
        Self { offered: tools.iter().map(|tool| (*tool).to_owned()).collect() }
    }

    /// Decodes a response whose body arrives as exactly these chunks.
    pub async fn decode(&self, chunks: Vec<Bytes>) -> SseOutcome {
        let frames = futures_util::stream::iter(chunks.into_iter().map(Ok::<Bytes, std::io::Error>));
        let response = match http::Response::builder()
            .status(200)
            .header("content-type", "text/event-stream")
            .body(reqwest::Body::wrap_stream(frames))
        {
            Ok(response) => reqwest::Response::from(response),
            Err(err) => {
                return SseOutcome { events: Vec::new(), chunks: 0, skipped: 0, end: SseEnd::Failed(err.to_string()) };
            }
        };
        // What lathe's own HTTP layer does with an SSE answer.
        let response = lathe::model::sse::without_leading_bom(response);
        let mut stream = ResponseStream::new(response, Duration::from_secs(60));
        // A server with no tool-call parser: calls written as text are read.
        let mut decoder =
            StreamDecoder::new("call_").offering(self.offered.iter().map(String::as_str)).recovering_text_calls(true);
        let mut events = Vec::new();
        let mut chunks = 0;
        let end = loop {
            match stream.next().await {
                Some(Ok(chunk)) => {
                    chunks += 1;
                    if let Err(reported) = decoder.push(chunk, &mut |event| events.push(event)) {
                        break SseEnd::Reported(reported.0);
                    }
                }
                Some(Err(ModelError::InvalidResponse(_))) if chunks == 0 => {
                    break SseEnd::NoChunks(stream.unreadable_events());
                }
                Some(Err(err)) => break SseEnd::Failed(err.to_string()),
                None => {
                    decoder.end(&mut |event| events.push(event));
                    break SseEnd::Finished(decoder.finish());
                }
            }
        };
        SseOutcome { events, chunks, skipped: stream.unreadable_events(), end }
    }

    /// Decodes `bytes` cut at `cuts` (byte offsets, any order; out-of-range
    /// and repeated offsets allowed: they make empty chunks).
    pub async fn decode_split(&self, bytes: &[u8], cuts: &[usize]) -> SseOutcome {
        self.decode(split(bytes, cuts)).await
    }
}

/// `bytes` cut at the given offsets (clamped to its length, sorted).
pub fn split(bytes: &[u8], cuts: &[usize]) -> Vec<Bytes> {
    let mut cuts: Vec<usize> = cuts.iter().map(|&c| c.min(bytes.len())).collect();
    cuts.sort_unstable();
    let mut chunks = Vec::with_capacity(cuts.len() + 1);
    let mut start = 0;
    for cut in cuts {
        chunks.push(Bytes::copy_from_slice(&bytes[start..cut]));
        start = cut;
    }
    chunks.push(Bytes::copy_from_slice(&bytes[start..]));
    chunks
}
