//! lathe's `tracing` output, captured per test for an agent served in this
//! process: what the binary would have written to stderr.
//!
//! One subscriber is installed for the whole test binary (the first time an
//! in-process agent starts). It formats events as the binary does (the
//! `fmt` layer, without colours) and hands each to the capture registered
//! on the thread the event is emitted on, filtered the way `RUST_LOG`
//! filters the binary's logs; events on a thread with no capture are
//! dropped. Under `#[tokio::test]` (a current-thread runtime) every task of
//! the test and of the agent runs on the test's thread, so the capture sees
//! all of lathe's async code. It does not see what lathe logs from other
//! threads: its `spawn_blocking` work (reading instruction files, the store)
//! and the worker threads of a multi-thread runtime. A test that reads
//! those logs runs the binary ([`super::harness::Harness::process`]).

use std::cell::RefCell;
use std::io::Write;
use std::sync::{Arc, Mutex, MutexGuard, Once};

use tracing_subscriber::filter::Targets;
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::{Layer as _, filter};

/// The filter used when the test sets no `RUST_LOG`: lathe's own `info`
/// lines, which tests read (what `exec` and `chat` log by default; serving
/// ACP the binary logs `warn` only, see src/main.rs).
pub const DEFAULT_FILTER: &str = "warn,lathe=info";

#[derive(Clone)]
struct Sink {
    text: Arc<Mutex<String>>,
    filter: Targets,
}

thread_local! {
    /// The captures registered on this thread, the latest on top.
    static SINKS: RefCell<Vec<(u64, Sink)>> = const { RefCell::new(Vec::new()) };
}

/// Captures this thread's lathe logs while it lives.
pub struct Capture {
    id: u64,
    text: Arc<Mutex<String>>,
}

impl Capture {
    /// Starts capturing the events on this thread that `filter` (a
    /// `RUST_LOG`-style list of `target=level` directives) lets through.
    pub fn start(filter: &str) -> Capture {
        install();
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let id = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let filter: Targets = filter.parse().unwrap_or_else(|err| panic!("log filter {filter:?}: {err}"));
        let text = Arc::new(Mutex::new(String::new()));
        SINKS.with(|sinks| sinks.borrow_mut().push((id, Sink { text: Arc::clone(&text), filter })));
        Capture { id, text }
    }

    /// The shared text, which keeps filling while the capture lives.
    pub fn text(&self) -> Arc<Mutex<String>> {
        Arc::clone(&self.text)
    }
}

impl Drop for Capture {
    fn drop(&mut self) {
        // Dropped on the thread that started it (agents live on the test's thread).
        let _ = SINKS.try_with(|sinks| sinks.borrow_mut().retain(|(id, _)| *id != self.id));
    }
}

fn current() -> Option<Sink> {
    SINKS.try_with(|sinks| sinks.borrow().last().map(|(_, sink)| sink.clone())).ok().flatten()
}

/// Whether this thread's capture wants the event.
fn wanted(metadata: &tracing::Metadata<'_>) -> bool {
    SINKS
        .try_with(|sinks| {
            sinks.borrow().last().is_some_and(|(_, sink)| sink.filter.would_enable(metadata.target(), metadata.level()))
        })
        .unwrap_or(false)
}

fn install() {
    static INSTALL: Once = Once::new();
    INSTALL.call_once(|| {
        let layer = tracing_subscriber::fmt::layer()
            .with_ansi(false)
            .with_writer(ThreadSink)
            .with_filter(filter::filter_fn(wanted));
        let subscriber = tracing_subscriber::registry().with(layer);
        // Another subscriber may have been installed first (a test of its
        // own); then nothing is captured, which the log tests will show.
        let _ = tracing::subscriber::set_global_default(subscriber);
    });
}

/// Writes each formatted event into the capture of the emitting thread.
struct ThreadSink;

struct ThreadWriter(Option<Sink>);

impl<'a> MakeWriter<'a> for ThreadSink {
    type Writer = ThreadWriter;

    fn make_writer(&'a self) -> ThreadWriter {
        ThreadWriter(current())
    }
}

impl Write for ThreadWriter {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        if let Some(sink) = &self.0 {
            lock(&sink.text).push_str(&String::from_utf8_lossy(bytes));
        }
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}
