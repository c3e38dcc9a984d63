//! JSON-RPC framing and classification: arbitrary bytes through
//! `rpc::LineReader` (read through a buffer of a fuzzer-chosen size, so lines
//! straddle refills anywhere) and every line through `rpc::classify`.
//!
//! Checked, besides "never panics":
//! - the lines are exactly those of a simple reference splitter (so no byte is
//!   lost, duplicated or misattributed across buffer refills, and a line is
//!   refused exactly when it is over the limit);
//! - every `Incoming` re-serialised is valid JSON that classifies again to the
//!   same message (what we dispatch is what the client sent);
//! - every answer we would write (error responses, withdrawn calls) is one
//!   line of valid JSON-RPC.
//!
//! Input layout: byte 0 picks the line limit, byte 1 the read-buffer size;
//! the rest is the stream.

#![no_main]

use libfuzzer_sys::fuzz_target;
use serde_json::{Value, json};

use lathe::rpc::{Classified, Incoming, Line, LineReader, Outbox, classify};

/// What `LineReader` must produce, written the obvious way.
fn reference_lines(input: &[u8], max: usize) -> Vec<Line> {
    let mut lines = Vec::new();
    let mut rest = input;
    while !rest.is_empty() {
        let (line, terminated, next) = match rest.iter().position(|&b| b == b'\n') {
            Some(at) => (&rest[..at], true, &rest[at + 1..]),
            None => (rest, false, &rest[rest.len()..]),
        };
        rest = next;
        if line.len() > max {
            lines.push(Line::TooLong(line.len()));
        } else if terminated && line.last() == Some(&b'\r') {
            lines.push(Line::Complete(line[..line.len() - 1].to_vec()));
        } else {
            lines.push(Line::Complete(line.to_vec()));
        }
    }
    lines
}

fn check_incoming(incoming: &Incoming, outbox: &Outbox) {
    let (id, method, params) = match incoming {
        Incoming::Request { id, method, params } => (Some(id), method, params),
        Incoming::Notification { method, params } => (None, method, params),
    };
    let mut message = json!({ "jsonrpc": "2.0", "method": method, "params": params });
    if let Some(id) = id {
        message["id"] = id.value().clone();
    }
    let text = serde_json::to_vec(&message).unwrap_or_else(|err| panic!("cannot re-serialise {incoming:?}: {err}"));
    assert!(!text.contains(&b'\n'), "a re-serialised message spans lines");
    let reparsed: Value =
        serde_json::from_slice(&text).unwrap_or_else(|err| panic!("re-serialised is not JSON: {err}"));
    assert_eq!(reparsed, message, "re-serialised JSON reads back differently");
    match (classify(&text, outbox), incoming) {
        (
            Classified::Incoming(Incoming::Request { id: id2, method: m2, params: p2 }),
            Incoming::Request { id, method, params },
        ) => {
            assert_eq!((id2.value(), &m2, &p2), (id.value(), method, params));
        }
        (
            Classified::Incoming(Incoming::Notification { method: m2, params: p2 }),
            Incoming::Notification { method, params },
        ) => {
            assert_eq!((m2, p2), (method.clone(), params.clone()));
        }
        (other, _) => panic!("{incoming:?} re-serialised classifies as {other:?}"),
    }
}

thread_local! {
    static RUNTIME: tokio::runtime::Runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
}

fuzz_target!(|data: &[u8]| {
    let Some((&[limit, capacity], input)) = data.split_first_chunk::<2>() else {
        return;
    };
    let max = [16, 64, 256, 4096][usize::from(limit % 4)];
    let capacity = 1 + usize::from(capacity);
    RUNTIME.with(|runtime| {
        runtime.block_on(async {
            let (outbox, writer) = Outbox::new();
            // Calls of ours waiting for answers (ids 0, 1, 2): responses to them are routed, not refused.
            let waiting: Vec<_> = (0..3).map(|_| outbox.request("fs/read_text_file", &json!({}))).collect();
            let mut lines = LineReader::new(tokio::io::BufReader::with_capacity(capacity, input), max);
            let mut got = Vec::new();
            while let Some(line) = lines.next_line().await.unwrap() {
                if let Line::Complete(bytes) = &line {
                    match classify(bytes, &outbox) {
                        Classified::Incoming(incoming) => check_incoming(&incoming, &outbox),
                        Classified::Malformed(id, error) => {
                            let value = id.value();
                            assert!(value.is_null() || value.is_string() || value.is_number(), "answering to id {id}");
                            outbox.respond_err(&id, &error);
                        }
                        Classified::Consumed | Classified::Ignored(_) => {}
                    }
                }
                got.push(line);
            }
            assert_eq!(got, reference_lines(input, max), "LineReader disagrees with the reference splitter");
            drop(waiting);
            drop(outbox);
            let mut written = Vec::new();
            writer.run(&mut written).await.unwrap();
            for line in written.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
                let message: Value =
                    serde_json::from_slice(line).unwrap_or_else(|err| panic!("we wrote invalid JSON: {err}"));
                assert_eq!(message["jsonrpc"], "2.0", "{message}");
                assert!(message.get("error").is_some() || message.get("method").is_some(), "{message}");
            }
        })
    });
});
