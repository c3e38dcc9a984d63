//! The CPU time the calling thread has used (the fetch tool's conversion
//! budget, `tools/html.rs`).
//!
//! Unix: `clock_gettime(CLOCK_THREAD_CPUTIME_ID)`. Windows: std has no
//! per-thread CPU clock and `GetThreadTimes` needs `unsafe`, so the time
//! since the thread first asked stands in for it: never less than the CPU
//! time used, so a budget ends no later than on Unix (sooner when the thread
//! waits).

use std::time::Duration;

/// This thread's CPU time so far (on Windows, see the module docs). Only
/// differences between two calls on one thread mean anything.
pub fn thread_cpu() -> Duration {
    sys::thread_cpu()
}

#[cfg(unix)]
mod sys {
    use std::time::Duration;

    pub(super) fn thread_cpu() -> Duration {
        let now = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
        Duration::new(u64::try_from(now.tv_sec).unwrap_or(0), u32::try_from(now.tv_nsec).unwrap_or(0))
    }
}

#[cfg(windows)]
mod sys {
    use std::time::{Duration, Instant};

    thread_local! {
        static FIRST: Instant = Instant::now();
    }

    pub(super) fn thread_cpu() -> Duration {
        FIRST.with(Instant::elapsed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn work_moves_the_thread_clock() {
        let before = thread_cpu();
        let mut x = 0u64;
        let started = std::time::Instant::now();
        while started.elapsed() < Duration::from_millis(30) {
            x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(7));
        }
        assert!(thread_cpu() > before, "{x}");
    }
}
