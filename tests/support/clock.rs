//! Time in the tests: real-time bounds on waits, and a frozen virtual clock
//! for the tests where time is the subject (retries, back-off, stalls,
//! timeouts, grace periods).
//!
//! # Why a frozen clock, and not tokio's auto-advance
//!
//! With `#[tokio::test(start_paused = true)]` tokio's clock stands still
//! and, whenever the runtime has nothing to run, jumps to the next timer
//! (`tokio::runtime::time::Driver::park_thread_timeout`: it polls the I/O
//! driver with a zero timeout and then advances the clock by the whole wait,
//! whether or not I/O came in). Real I/O does not count as work: every time
//! lathe waits on a socket of the mock model (or a pipe of a child) with a
//! timer pending, the clock jumps to that timer. A response timeout of 60 s
//! fires while the mock's answer is on its way over loopback, an idle
//! timeout fires between two chunks. Which timer fires first then depends on
//! how the kernel schedules the loopback delivery: tests that are
//! nondeterministic by construction (tokio issue #4522, still open).
//!
//! The way out is the one tokio documents (`tokio::time::pause`,
//! "Preventing auto-advance"): while a `spawn_blocking` task exists, a
//! current-thread runtime does not auto-advance. [`FrozenClock::hold`]
//! keeps such a task alive for the whole test, so virtual time moves only
//! when the test calls [`FrozenClock::advance`], at a point where it has
//! seen (through an event: a message from the agent, a request at the mock)
//! that the agent is waiting on a timer. Real I/O meanwhile goes at its own
//! pace. Two consequences the tests rely on:
//!
//! - A reply that arrives under a frozen clock did not wait out any timer
//!   (no timeout, back-off or grace period could have fired): "answered at
//!   once" is checked without a wall-clock bound.
//! - A wait the test does not advance never ends; a test that forgets to
//!   advance fails on the real-time bound of its wait ([`within`]).
//!
//! # Real-time bounds
//!
//! The bounds on the tests' own waits (a response, a request at the mock)
//! are hang detectors, not speed claims, and must hold whatever the
//! virtual clock does: [`within`] times them on a runtime of its own,
//! whose clock is never paused.

use std::future::Future;
use std::sync::OnceLock;
use std::time::Duration;

/// `future`'s output, or `None` if it is not ready within `bound` of real
/// time (whatever the clock of the current runtime does).
pub async fn within<F: Future>(bound: Duration, future: F) -> Option<F::Output> {
    let (expired, timed_out) = tokio::sync::oneshot::channel::<()>();
    let timer = real_time().spawn(async move {
        tokio::time::sleep(bound).await;
        let _ = expired.send(());
    });
    let _cancel_timer = AbortOnDrop(timer);
    tokio::select! {
        biased;
        output = future => Some(output),
        _ = timed_out => None,
    }
}

/// Waits until `done()` holds, looking again every few milliseconds: for
/// state only the operating system knows (a process in `/proc`, a line a
/// child appended to its log), which no event announces. Panics with
/// `what` after `bound` of real time (a hang detector).
pub async fn poll_until(what: &str, bound: Duration, done: impl FnMut() -> bool) {
    assert!(eventually(bound, done).await, "{what}: not within {bound:?}");
}

/// Whether `done()` comes to hold within `bound` of real time, looked at
/// every few milliseconds (see [`poll_until`]).
pub async fn eventually(bound: Duration, mut done: impl FnMut() -> bool) -> bool {
    let polled = within(bound, async {
        while !done() {
            // Real time between looks: a paused clock must not spin here.
            let (tick, ticked) = tokio::sync::oneshot::channel::<()>();
            let _timer = AbortOnDrop(real_time().spawn(async move {
                tokio::time::sleep(Duration::from_millis(5)).await;
                let _ = tick.send(());
            }));
            let _ = ticked.await;
        }
    })
    .await;
    polled.is_some()
}

/// A runtime whose clock is never paused, for the real-time timers above.
fn real_time() -> &'static tokio::runtime::Runtime {
    static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("test-real-time")
            .enable_time()
            .build()
            .expect("the real-time timer runtime")
    })
}

struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// A paused clock that moves only when the test says so (see the module
/// doc). Dropping it lets the runtime auto-advance again.
pub struct FrozenClock {
    /// Dropping it ends the blocking task that keeps auto-advance off.
    _release: std::sync::mpsc::Sender<()>,
    start: tokio::time::Instant,
}

impl FrozenClock {
    /// Freezes the clock of the current runtime. The test must run on a
    /// current-thread runtime started paused (`#[tokio::test(start_paused =
    /// true)]`), and call this before anything else starts a timer.
    pub async fn hold() -> FrozenClock {
        // Panics ("time is not frozen") unless the clock is paused.
        tokio::time::advance(Duration::ZERO).await;
        let (release, released) = std::sync::mpsc::channel::<()>();
        // Auto-advance is inhibited from this call until the task ends.
        drop(tokio::task::spawn_blocking(move || {
            let _ = released.recv();
        }));
        FrozenClock { _release: release, start: tokio::time::Instant::now() }
    }

    /// Moves virtual time on by `by`: every timer due by then fires the next
    /// time the runtime turns (the test then awaits what that causes).
    pub async fn advance(&self, by: Duration) {
        tokio::time::advance(by).await;
    }

    /// Virtual time since the clock was frozen: the sum of the advances.
    pub fn elapsed(&self) -> Duration {
        self.start.elapsed()
    }
}
