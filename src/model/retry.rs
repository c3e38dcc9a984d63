//! When to ask the model endpoint again after a failed request, and how long
//! to wait first.
//!
//! Pure: no clock, no I/O. The turn loop (`agent`) owns the waiting, because
//! each wait must be raced against the turn's cancellation and shown to the
//! user; this module only decides. Only failures before the answer started
//! are ever offered here, so a retry never repeats content the user has seen.
//!
//! The back-off is exponential with full jitter (a uniform random wait between
//! zero and a ceiling that doubles per retry, capped), which spreads out the
//! clients a rate limit turned away together. A server's `Retry-After`
//! replaces it. Attempts and the total time spent waiting are both bounded.

use std::fmt;
use std::time::Duration;

use super::ModelError;
use crate::config::NetworkSettings;

/// The configured limits of retrying one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Retries after the first attempt; 0 disables retrying.
    pub max_retries: u32,
    /// Back-off ceiling before the first retry.
    pub initial_delay: Duration,
    /// Largest back-off ceiling.
    pub max_delay: Duration,
    /// Most time spent waiting between the attempts of one request.
    pub max_total: Duration,
}

impl RetryPolicy {
    /// The policy the `[network]` settings describe.
    pub fn from_settings(network: &NetworkSettings) -> Self {
        Self {
            max_retries: network.max_retries,
            initial_delay: network.retry_initial_delay,
            max_delay: network.retry_max_delay,
            max_total: network.retry_max_total,
        }
    }

    /// Attempts in all, the first one included.
    pub fn max_attempts(&self) -> u32 {
        self.max_retries.saturating_add(1)
    }

    /// The back-off ceiling before retry number `retry` (1-based): the initial
    /// delay doubled `retry - 1` times, capped at the maximum delay.
    pub fn ceiling(&self, retry: u32) -> Duration {
        let doublings = retry.saturating_sub(1).min(31);
        self.initial_delay.saturating_mul(1u32 << doublings).min(self.max_delay)
    }
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self::from_settings(&NetworkSettings::default())
    }
}

/// Whether a failure before the answer started is worth another attempt: rate
/// limits (429), server errors (5xx), and no connection or no answer in time.
/// Everything else (other 4xx, a context overflow, a bad key, errors reported
/// in a stream) would fail the same way again.
pub fn is_retryable(error: &ModelError) -> bool {
    match error {
        ModelError::Http { status, .. } => *status == 429 || (500..=599).contains(status),
        ModelError::Connect { .. } | ModelError::ResponseTimeout(_) => true,
        ModelError::StreamDropped(_)
        | ModelError::StreamStalled(_)
        | ModelError::Provider(_)
        | ModelError::InvalidResponse(_)
        | ModelError::NotConfigured(_)
        | ModelError::Request(_) => false,
    }
}

/// What to do after a failed attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Wait this long, then try again.
    Wait(Duration),
    /// Stop and report the failure.
    GiveUp(GiveUp),
}

/// Why retrying stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GiveUp {
    /// A retry cannot fix this failure.
    NotRetryable,
    /// Every allowed attempt failed.
    AttemptsExhausted,
    /// The total waiting budget is used up.
    BudgetExhausted {
        /// The whole budget.
        budget: Duration,
    },
    /// The endpoint asked (`Retry-After`) to wait longer than the budget has left.
    RetryAfterBeyondBudget {
        /// The wait asked for.
        asked: Duration,
        /// What was left of the budget.
        left: Duration,
    },
}

/// How the attempts at one request ended, for the final error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Exhausted {
    /// Attempts made, the first one included.
    pub attempts: u32,
    /// Why there was no further attempt.
    pub reason: GiveUp,
}

impl Exhausted {
    /// Whether the final error should mention the retries: when there were
    /// some, or when lathe declined to wait as long as the endpoint asked.
    pub fn is_noteworthy(&self) -> bool {
        self.attempts > 1 || matches!(self.reason, GiveUp::RetryAfterBeyondBudget { .. })
    }
}

/// A clause for the end of the final error message, e.g. "gave up after 5 attempts".
impl fmt::Display for Exhausted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let attempts = self.attempts;
        match &self.reason {
            GiveUp::NotRetryable => write!(f, "after {attempts} attempts"),
            GiveUp::AttemptsExhausted => write!(f, "gave up after {attempts} attempts"),
            GiveUp::BudgetExhausted { budget } => write!(
                f,
                "gave up after {attempts} attempts: the {} retry budget (network.retry_max_total_secs) is used up",
                human(*budget)
            ),
            GiveUp::RetryAfterBeyondBudget { asked, left } => {
                let lead =
                    if attempts > 1 { format!("gave up after {attempts} attempts") } else { "not retried".into() };
                write!(
                    f,
                    "{lead}: the endpoint asked to wait {}, more than the {} left of the retry budget \
                     (network.retry_max_total_secs)",
                    human(*asked),
                    human(*left)
                )
            }
        }
    }
}

/// The retry state of one request: attempts made, time waited, the jitter source.
#[derive(Debug, Clone)]
pub struct Retrier {
    policy: RetryPolicy,
    rng: XorShift,
    attempts: u32,
    waited: Duration,
}

impl Retrier {
    /// Starts counting; `seed` drives the jitter (any value, fixed in tests).
    pub fn new(policy: RetryPolicy, seed: u64) -> Self {
        Self { policy, rng: XorShift::new(seed), attempts: 0, waited: Duration::ZERO }
    }

    /// Records a failed attempt and decides what comes next. A `Wait` is
    /// counted against the budget as soon as it is decided.
    pub fn after_failure(&mut self, error: &ModelError) -> Decision {
        self.attempts = self.attempts.saturating_add(1);
        if !is_retryable(error) {
            return Decision::GiveUp(GiveUp::NotRetryable);
        }
        if self.attempts > self.policy.max_retries {
            return Decision::GiveUp(GiveUp::AttemptsExhausted);
        }
        let left = self.policy.max_total.saturating_sub(self.waited);
        let delay = match error.retry_after() {
            // Waiting less than asked would only be turned away again.
            Some(asked) if asked > left => return Decision::GiveUp(GiveUp::RetryAfterBeyondBudget { asked, left }),
            Some(asked) => asked,
            None if left.is_zero() => {
                return Decision::GiveUp(GiveUp::BudgetExhausted { budget: self.policy.max_total });
            }
            None => self.jitter(self.policy.ceiling(self.attempts)).min(left),
        };
        self.waited += delay;
        Decision::Wait(delay)
    }

    /// Attempts made so far.
    pub fn attempts(&self) -> u32 {
        self.attempts
    }

    /// The policy in force.
    pub fn policy(&self) -> &RetryPolicy {
        &self.policy
    }

    /// Total time of the waits decided so far.
    pub fn waited(&self) -> Duration {
        self.waited
    }

    /// Full jitter: uniform in `[0, ceiling]`.
    fn jitter(&mut self, ceiling: Duration) -> Duration {
        ceiling.mul_f64(self.rng.next_unit())
    }
}

/// A fresh jitter seed, different per call (uuid v4 draws from the OS's
/// random source; no extra dependency needed).
pub fn random_seed() -> u64 {
    uuid::Uuid::new_v4().as_u64_pair().0
}

/// The line shown to the user while lathe waits, e.g. "The model endpoint
/// answered HTTP 429 (rate limited); retrying in 4 s (attempt 2 of 5)…".
/// `next_attempt` is 1-based and counts the first attempt.
pub fn waiting_message(error: &ModelError, delay: Duration, next_attempt: u32, max_attempts: u32) -> String {
    let what = match error {
        ModelError::Http { status: 429, .. } => "The model endpoint answered HTTP 429 (rate limited)".to_owned(),
        ModelError::Http { status, .. } => {
            let reason = http::StatusCode::from_u16(*status)
                .ok()
                .and_then(|code| code.canonical_reason())
                .map_or_else(|| "server error".to_owned(), str::to_ascii_lowercase);
            format!("The model endpoint answered HTTP {status} ({reason})")
        }
        ModelError::Connect { detail, .. } => format!("Could not reach the model endpoint ({})", shorten(detail, 120)),
        other => {
            let mut text = shorten(&other.to_string(), 160);
            if let Some(first) = text.get(..1) {
                text = format!("{}{}", first.to_uppercase(), &text[1..]);
            }
            text
        }
    };
    let when = if delay.is_zero() { "retrying now".to_owned() } else { format!("retrying in {}", human(delay)) };
    let asked = if error.retry_after().is_some() { " as it asked" } else { "" };
    format!("{what}; {when}{asked} (attempt {next_attempt} of {max_attempts})…")
}

/// A duration for people: "250 ms", "1.5 s", "30 s".
fn human(duration: Duration) -> String {
    let seconds = duration.as_secs_f64();
    if seconds < 1.0 {
        format!("{} ms", duration.as_millis())
    } else if seconds < 10.0 && (seconds * 10.0).round() % 10.0 != 0.0 {
        format!("{seconds:.1} s")
    } else {
        format!("{} s", seconds.round())
    }
}

fn shorten(text: &str, max_chars: usize) -> String {
    match text.char_indices().nth(max_chars) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text.to_owned(),
    }
}

/// xorshift64*: plenty for spreading waits, and seedable so tests are exact.
#[derive(Debug, Clone)]
struct XorShift(u64);

impl XorShift {
    fn new(seed: u64) -> Self {
        // The all-zero state is a fixed point.
        Self(if seed == 0 { 0x9E37_79B9_7F4A_7C15 } else { seed })
    }

    fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in `[0, 1)`.
    fn next_unit(&mut self) -> f64 {
        // The top 53 bits fill an f64 mantissa exactly.
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn http(status: u16, retry_after: Option<Duration>) -> ModelError {
        ModelError::Http { status, message: "m".into(), retry_after }
    }

    fn policy(max_retries: u32, initial_ms: u64, max_ms: u64, total_ms: u64) -> RetryPolicy {
        RetryPolicy {
            max_retries,
            initial_delay: Duration::from_millis(initial_ms),
            max_delay: Duration::from_millis(max_ms),
            max_total: Duration::from_millis(total_ms),
        }
    }

    #[test]
    fn which_failures_are_retried() {
        let secs = Duration::from_secs(1);
        let table: Vec<(ModelError, bool)> = vec![
            (http(429, None), true),
            (http(500, None), true),
            (http(502, None), true),
            (http(503, Some(secs)), true),
            (http(504, None), true),
            (http(599, None), true),
            (ModelError::Connect { url: "u".into(), detail: "refused".into() }, true),
            (ModelError::ResponseTimeout(secs), true),
            (http(400, None), false),
            (http(401, None), false),
            (http(403, None), false),
            (http(404, None), false),
            (http(408, None), false),
            (http(413, None), false),
            (http(422, None), false),
            (
                ModelError::Http {
                    status: 400,
                    message: "This model's maximum context length is 8192 tokens".into(),
                    retry_after: None,
                },
                false,
            ),
            (ModelError::StreamDropped("reset".into()), false),
            (ModelError::StreamStalled(secs), false),
            (ModelError::Provider("overloaded".into()), false),
            (ModelError::InvalidResponse("junk".into()), false),
            (ModelError::NotConfigured("none".into()), false),
            (ModelError::Request("cannot encode it".into()), false),
        ];
        for (error, retryable) in table {
            assert_eq!(is_retryable(&error), retryable, "{error:?}");
        }
    }

    #[test]
    fn the_ceiling_doubles_up_to_the_maximum() {
        let policy = policy(10, 100, 1_000, 60_000);
        let ceilings: Vec<u128> = (1..=7).map(|retry| policy.ceiling(retry).as_millis()).collect();
        assert_eq!(ceilings, [100, 200, 400, 800, 1_000, 1_000, 1_000]);
        // No overflow for absurd retry numbers.
        assert_eq!(policy.ceiling(u32::MAX), Duration::from_secs(1));
        assert_eq!(RetryPolicy::default().ceiling(1), Duration::from_secs(1));
        assert_eq!(RetryPolicy::default().max_attempts(), 5);
    }

    #[test]
    fn jittered_waits_stay_within_the_ceiling_and_spread() {
        for seed in 0..200 {
            let mut retrier = Retrier::new(policy(6, 100, 1_000, 600_000), seed);
            for retry in 1..=6 {
                let Decision::Wait(delay) = retrier.after_failure(&http(503, None)) else {
                    panic!("seed {seed}: retry {retry} should wait");
                };
                assert!(delay <= retrier.policy().ceiling(retry), "seed {seed}: {delay:?} for retry {retry}");
            }
        }
        // Different seeds give different waits: that is the point of jitter.
        let first_wait = |seed| Retrier::new(policy(1, 1_000, 1_000, 60_000), seed).after_failure(&http(503, None));
        let waits: std::collections::HashSet<_> = (1..50).map(|seed| format!("{:?}", first_wait(seed))).collect();
        assert!(waits.len() > 40, "{waits:?}");
        // The same seed gives the same waits: tests and logs are reproducible.
        assert_eq!(first_wait(7), first_wait(7));
    }

    #[test]
    fn the_unit_draw_covers_the_interval() {
        let mut rng = XorShift::new(42);
        let draws: Vec<f64> = (0..10_000).map(|_| rng.next_unit()).collect();
        assert!(draws.iter().all(|d| (0.0..1.0).contains(d)));
        let mean = draws.iter().sum::<f64>() / draws.len() as f64;
        assert!((0.45..0.55).contains(&mean), "{mean}");
        assert!(draws.iter().any(|&d| d < 0.05) && draws.iter().any(|&d| d > 0.95));
    }

    #[test]
    fn retry_after_is_honoured_and_takes_precedence() {
        let mut retrier = Retrier::new(policy(3, 10, 20, 60_000), 1);
        // Longer than the back-off ceiling, and longer than max_delay: still honoured exactly.
        let asked = Duration::from_secs(7);
        assert_eq!(retrier.after_failure(&http(429, Some(asked))), Decision::Wait(asked));
        assert_eq!(retrier.after_failure(&http(503, Some(Duration::ZERO))), Decision::Wait(Duration::ZERO));
        assert_eq!(retrier.waited(), asked);
    }

    #[test]
    fn attempts_are_bounded() {
        let mut retrier = Retrier::new(policy(2, 1, 1, 60_000), 3);
        assert!(matches!(retrier.after_failure(&http(500, None)), Decision::Wait(_)));
        assert!(matches!(retrier.after_failure(&http(500, None)), Decision::Wait(_)));
        assert_eq!(retrier.after_failure(&http(500, None)), Decision::GiveUp(GiveUp::AttemptsExhausted));
        assert_eq!(retrier.attempts(), 3);
        let mut never = Retrier::new(policy(0, 1, 1, 60_000), 3);
        assert_eq!(never.after_failure(&http(503, None)), Decision::GiveUp(GiveUp::AttemptsExhausted));
        let exhausted = Exhausted { attempts: 1, reason: GiveUp::AttemptsExhausted };
        assert!(!exhausted.is_noteworthy(), "no retries happened: nothing to add to the error");
    }

    #[test]
    fn a_non_retryable_failure_stops_at_once() {
        let mut retrier = Retrier::new(policy(4, 1, 1, 60_000), 3);
        assert!(matches!(retrier.after_failure(&http(503, None)), Decision::Wait(_)));
        assert_eq!(retrier.after_failure(&http(400, None)), Decision::GiveUp(GiveUp::NotRetryable));
        let exhausted = Exhausted { attempts: retrier.attempts(), reason: GiveUp::NotRetryable };
        assert!(exhausted.is_noteworthy());
        assert_eq!(exhausted.to_string(), "after 2 attempts");
    }

    #[test]
    fn the_total_budget_is_respected() {
        // Back-off waits are cut to what is left, then the budget ends the retries.
        let mut retrier = Retrier::new(policy(100, 1_000, 1_000, 2_500), 5);
        let mut waits = Vec::new();
        let reason = loop {
            match retrier.after_failure(&http(502, None)) {
                Decision::Wait(delay) => waits.push(delay),
                Decision::GiveUp(reason) => break reason,
            }
            assert!(waits.len() < 1_000, "the budget never ran out");
        };
        assert_eq!(reason, GiveUp::BudgetExhausted { budget: Duration::from_millis(2_500) });
        assert_eq!(waits.iter().sum::<Duration>(), Duration::from_millis(2_500));
        assert_eq!(retrier.waited(), Duration::from_millis(2_500));

        // A Retry-After beyond what is left gives up now, without waiting.
        let mut retrier = Retrier::new(policy(5, 10, 10, 3_000), 5);
        assert_eq!(
            retrier.after_failure(&http(429, Some(Duration::from_secs(2)))),
            Decision::Wait(Duration::from_secs(2))
        );
        let decision = retrier.after_failure(&http(429, Some(Duration::from_secs(2))));
        let reason = GiveUp::RetryAfterBeyondBudget { asked: Duration::from_secs(2), left: Duration::from_secs(1) };
        assert_eq!(decision, Decision::GiveUp(reason.clone()));
        assert_eq!(retrier.waited(), Duration::from_secs(2));
        let text = Exhausted { attempts: 2, reason }.to_string();
        assert_eq!(
            text,
            "gave up after 2 attempts: the endpoint asked to wait 2 s, more than the 1 s left of the retry budget \
             (network.retry_max_total_secs)"
        );
        let first = Exhausted {
            attempts: 1,
            reason: GiveUp::RetryAfterBeyondBudget { asked: Duration::from_secs(600), left: Duration::from_secs(120) },
        };
        assert!(first.is_noteworthy());
        assert!(first.to_string().starts_with("not retried: the endpoint asked to wait 600 s"), "{first}");
    }

    #[test]
    fn waiting_messages_say_why() {
        let second = Duration::from_secs(4);
        assert_eq!(
            waiting_message(&http(429, None), second, 2, 5),
            "The model endpoint answered HTTP 429 (rate limited); retrying in 4 s (attempt 2 of 5)…"
        );
        assert_eq!(
            waiting_message(&http(503, Some(Duration::from_millis(1_500))), Duration::from_millis(1_500), 3, 5),
            "The model endpoint answered HTTP 503 (service unavailable); \
             retrying in 1.5 s as it asked (attempt 3 of 5)…"
        );
        let refused =
            ModelError::Connect { url: "http://x/v1".into(), detail: "Connection refused (os error 111)".into() };
        assert_eq!(
            waiting_message(&refused, Duration::from_millis(250), 2, 3),
            "Could not reach the model endpoint (Connection refused (os error 111)); \
             retrying in 250 ms (attempt 2 of 3)…"
        );
        let slow = waiting_message(&ModelError::ResponseTimeout(Duration::from_secs(300)), Duration::ZERO, 2, 2);
        assert_eq!(slow, "The model endpoint did not answer within 300 s; retrying now (attempt 2 of 2)…");
        assert_eq!(human(Duration::from_secs(30)), "30 s");
        assert_eq!(human(Duration::from_millis(9_960)), "10 s");
    }
}
