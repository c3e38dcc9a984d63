//! Decodes a model response given as raw SSE bytes, cut into chunks exactly
//! as given, through the same code a real response goes through: reqwest's
//! body stream, async-openai's SSE event stream (`eventsource-stream`:
//! `[DONE]` ends it, `keepalive` events are skipped, each event's data is
//! parsed as our [`ChatChunk`]), then [`ResponseStream::next`]'s rule
//! (undecodable events are skipped; a stream of nothing but undecodable events
//! is an error) and the agent's use of [`StreamDecoder`] (an error reported
//! inside the stream ends it).
//!
//! No server and no socket: the async-openai client gets a tower service that
//! answers with a body whose frames are the given chunks (through lathe's
//! `model::sse::without_leading_bom`, as lathe's own service does), so the
//! chunk boundaries the decoder sees are exactly the ones under test.
//!
//! This file is also compiled into the `sse_decoder` fuzz target
//! (`fuzz/fuzz_targets/sse_decoder.rs` includes it by path), so it names the
//! crate as `lathe::` and uses nothing from the rest of the test support.
//!
//! [`ResponseStream::next`]: lathe::model::ResponseStream::next

use std::sync::{Arc, Mutex};

use async_openai::config::OpenAIConfig;
use async_openai::error::OpenAIError;
use async_openai::middleware::HttpRequestFactory;
use bytes::Bytes;
use futures_util::StreamExt;
use lathe::model::decode::{ModelEvent, ModelOutput, StreamDecoder};
use lathe::model::wire::ChatChunk;

/// How a decoded stream ended.
#[derive(Debug, Clone, PartialEq, Eq)]
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
#[derive(Debug, Clone, PartialEq, Eq)]
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

/// One async-openai client whose HTTP service answers every request with the
/// body chunks put in its slot. Building the client is the costly part, so
/// one harness serves many decodes (one at a time).
pub struct SseHarness {
    client: async_openai::Client<OpenAIConfig>,
    body: Arc<Mutex<Vec<Bytes>>>,
}

impl Default for SseHarness {
    fn default() -> Self {
        Self::new()
    }
}

impl SseHarness {
    /// A harness. Decoding needs a tokio runtime (async-openai spawns a task per stream).
    pub fn new() -> Self {
        let body: Arc<Mutex<Vec<Bytes>>> = Arc::default();
        let slot = body.clone();
        let service = tower::service_fn(move |_request: HttpRequestFactory| {
            let chunks = std::mem::take(&mut *slot.lock().unwrap_or_else(std::sync::PoisonError::into_inner));
            async move {
                let frames = futures_util::stream::iter(chunks.into_iter().map(Ok::<Bytes, std::io::Error>));
                let response = http::Response::builder()
                    .status(200)
                    .header("content-type", "text/event-stream")
                    .body(reqwest::Body::wrap_stream(frames))
                    .map_err(|err| OpenAIError::InvalidArgument(err.to_string()))?;
                // What lathe's own HTTP service does with an SSE answer.
                Ok::<_, OpenAIError>(lathe::model::sse::without_leading_bom(reqwest::Response::from(response)))
            }
        });
        let config = OpenAIConfig::new().with_api_base("http://127.0.0.1:9/v1").with_api_key("");
        let client = async_openai::Client::with_config(config).with_http_service(service);
        Self { client, body }
    }

    /// Decodes a response whose body arrives as exactly these chunks.
    pub async fn decode(&self, chunks: Vec<Bytes>) -> SseOutcome {
        *self.body.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = chunks;
        let request = serde_json::json!({ "model": "m", "messages": [], "stream": true });
        let mut stream = match self.client.chat().create_stream_byot::<_, ChatChunk>(request).await {
            Ok(stream) => stream,
            Err(err) => {
                return SseOutcome { events: Vec::new(), chunks: 0, skipped: 0, end: SseEnd::Failed(err.to_string()) };
            }
        };
        let mut decoder = StreamDecoder::new("call_");
        let mut events = Vec::new();
        let (mut chunks, mut skipped) = (0, 0);
        let end = loop {
            match stream.next().await {
                Some(Ok(chunk)) => {
                    chunks += 1;
                    if let Err(reported) = decoder.push(chunk, &mut |event| events.push(event)) {
                        break SseEnd::Reported(reported.0);
                    }
                }
                Some(Err(OpenAIError::JSONDeserialize(..))) => skipped += 1,
                Some(Err(err)) => break SseEnd::Failed(err.to_string()),
                None if chunks == 0 && skipped > 0 => break SseEnd::NoChunks(skipped),
                None => break SseEnd::Finished(decoder.finish()),
            }
        };
        SseOutcome { events, chunks, skipped, end }
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
