//! ACP dispatch: arbitrary bytes as the editor's side of the real
//! `lathe::serve`, with a model endpoint that refuses connections
//! (`http://127.0.0.1:9/v1`). It must never panic, must end when its input
//! ends, and must only ever write lines of JSON-RPC.
//!
//! To get past "unknown session", the input is fed one line at a time and the
//! text `@sid` in a line is replaced by the id of the last session lathe
//! created (read from its output so far), so seeds and mutations can prompt,
//! cancel and set modes on a real session (see `seeds/acp_dispatch/` and
//! `dict/acp.dict`).

#![no_main]

use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use libfuzzer_sys::fuzz_target;
use tokio::io::{AsyncWrite, AsyncWriteExt};

/// lathe's output, shared with the driver.
#[derive(Clone, Default)]
struct Output(Arc<Mutex<Vec<u8>>>);

impl Output {
    fn bytes(&self) -> std::sync::MutexGuard<'_, Vec<u8>> {
        self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The last `"sessionId":"…"` lathe wrote.
    fn last_session_id(&self) -> Option<Vec<u8>> {
        const KEY: &[u8] = b"\"sessionId\":\"";
        let out = self.bytes();
        let at = out.windows(KEY.len()).rposition(|w| w == KEY)? + KEY.len();
        let len = out[at..].iter().position(|&b| b == b'"')?;
        Some(out[at..at + len].to_vec())
    }
}

impl AsyncWrite for Output {
    fn poll_write(self: Pin<&mut Self>, _: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        self.bytes().extend_from_slice(buf);
        Poll::Ready(Ok(buf.len()))
    }
    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

const BASE_CONFIG: &str = r#"
default_model = "m"
[models.m]
base_url = "http://127.0.0.1:9/v1"
model = "fuzz-model"
context_window = 32768
max_output_tokens = 1024
[protocol]
max_message_bytes = 4096
[network]
connect_timeout_secs = 1
response_timeout_secs = 1
stream_idle_timeout_secs = 1
"#;

fn config() -> lathe::config::Config {
    let path = std::path::Path::new("fuzz.toml");
    let env = |_: &str| None;
    // Retries (when this lathe has them) off: a refused connection then fails the turn at once.
    let with_retries_off = format!("{BASE_CONFIG}max_retries = 0\n");
    lathe::config::Config::from_toml_str(&with_retries_off, path, &env)
        .or_else(|_| lathe::config::Config::from_toml_str(BASE_CONFIG, path, &env))
        .unwrap()
}

fn replace_session_placeholder(line: &[u8], session_id: Option<&[u8]>) -> Vec<u8> {
    const PLACEHOLDER: &[u8] = b"@sid";
    let Some(id) = session_id else { return line.to_vec() };
    let mut out = Vec::with_capacity(line.len());
    let mut rest = line;
    while let Some(at) = rest.windows(PLACEHOLDER.len()).position(|w| w == PLACEHOLDER) {
        out.extend_from_slice(&rest[..at]);
        out.extend_from_slice(id);
        rest = &rest[at + PLACEHOLDER.len()..];
    }
    out.extend_from_slice(rest);
    out
}

thread_local! {
    static RUNTIME: tokio::runtime::Runtime =
        tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    static CONFIG: lathe::config::Config = config();
}

fuzz_target!(|data: &[u8]| {
    let config = CONFIG.with(Clone::clone);
    let output = Output::default();
    RUNTIME.with(|runtime| {
        runtime.block_on(async {
            let (mut editor, agent) = tokio::io::duplex(64 * 1024);
            let serve = lathe::serve(config, agent, output.clone(), std::future::pending());
            let drive = async {
                for line in data.split_inclusive(|&b| b == b'\n') {
                    let line = replace_session_placeholder(line, output.last_session_id().as_deref());
                    if editor.write_all(&line).await.is_err() {
                        break;
                    }
                    // Let lathe read and answer before the next line (a current-thread
                    // runtime: this is deterministic).
                    for _ in 0..8 {
                        tokio::task::yield_now().await;
                    }
                }
                drop(editor);
            };
            let both = async { tokio::join!(serve, drive).0 };
            match tokio::time::timeout(Duration::from_secs(20), both).await {
                Ok(result) => result.unwrap(),
                Err(_) => panic!("lathe::serve did not end within 20 s of its input ending"),
            }
        });
    });
    let out = output.bytes();
    for line in out.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
        let message: serde_json::Value =
            serde_json::from_slice(line).unwrap_or_else(|err| panic!("lathe wrote a line that is not JSON: {err}"));
        assert_eq!(message["jsonrpc"], "2.0", "{message}");
    }
    assert!(out.is_empty() || out.ends_with(b"\n"), "lathe's output ends mid-line");
});
