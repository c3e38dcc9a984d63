//! The SSE/delta decoder: arbitrary bytes as a model's response body, through
//! the real path (reqwest body, lathe's `ResponseStream` over eventsource-stream, our
//! `ChatChunk`, the skip rule, `StreamDecoder`; see `tests/support/sse.rs`),
//! once in one piece and once cut at fuzzer-chosen points. It must never
//! panic, and both must give exactly the same events and the same end.
//!
//! Input layout: byte 0 is the number of cuts (mod 16), then two bytes per
//! cut (little-endian offset, taken modulo the body length + 1); the rest is
//! the body.

#![no_main]

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;

#[path = "../../tests/support/sse.rs"]
#[allow(dead_code)]
mod sse;

use sse::{SseHarness, split};

thread_local! {
    static RUNTIME: tokio::runtime::Runtime =
        tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    static HARNESS: SseHarness = SseHarness::new();
}

fuzz_target!(|data: &[u8]| {
    let Some((&count, rest)) = data.split_first() else { return };
    let count = usize::from(count % 16);
    if rest.len() < 2 * count {
        return;
    }
    let (cut_bytes, body) = rest.split_at(2 * count);
    let cuts: Vec<usize> = cut_bytes
        .chunks_exact(2)
        .map(|pair| usize::from(u16::from_le_bytes([pair[0], pair[1]])) % (body.len() + 1))
        .collect();
    RUNTIME.with(|runtime| {
        HARNESS.with(|harness| {
            let whole = runtime.block_on(harness.decode(vec![Bytes::copy_from_slice(body)]));
            let pieces = runtime.block_on(harness.decode(split(body, &cuts)));
            assert_eq!(whole, pieces, "cut at {cuts:?}");
        })
    });
});
