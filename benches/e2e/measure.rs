//! The measurements of the end-to-end benchmark (issue 6), shared by the
//! benchmark binary (`benches/e2e.rs`, release build, full run) and the smoke
//! test (`tests/suite/bench_smoke.rs`, debug build, a few iterations each).
//!
//! Every measurement spawns the real `lathe` binary and drives it over stdio
//! against a mock model on loopback:
//!
//! - startup, relay latency, throughput and memory use the bench's own
//!   [`firehose`] mock (numbered deltas, send times, sub-millisecond pacing)
//!   and the [`stamped`] client (arrival stamped at `read`);
//! - cancellation, search and tokens use the tests' `MockOpenAi` (stalls, tool
//!   calls, recorded request bodies) and `AgentProcess`, on a tokio runtime.
//!
//! Nothing here asserts a timing budget: [`Report`] records figures and
//! budgets, and correctness checks (no surviving processes, byte-stable
//! prefix) as [`Check`]s. The smoke test asserts the checks and that every
//! figure has samples; the benchmark prints the verdicts.

#[path = "firehose.rs"]
pub mod firehose;
#[path = "procfs.rs"]
pub mod procfs;
#[path = "scale.rs"]
pub mod scale;
#[path = "stamped.rs"]
pub mod stamped;
#[path = "subagents.rs"]
pub mod subagents;

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::value::RawValue;
use serde_json::{Value, json};

use crate::support::acp_client::{AgentProcess, handshake, prompt};
use crate::support::mock_openai::{
    MockOpenAi, Reply as MockReply, Step, ev_role, ev_text, text_reply, tool_call_reply,
};
use firehose::{Firehose, Reply};
use stamped::{StampedAgent, chunk_sequence_numbers};

/// Every section, in the order they run.
pub const SECTIONS: [&str; 14] = [
    "startup",
    "relay",
    "throughput",
    "cancel",
    "memory",
    "search",
    "tokens",
    "journal",
    "load",
    "list",
    "many",
    "churn",
    "hooks",
    "subagents",
];

/// What to run and how much of it.
#[derive(Debug, Clone)]
pub struct Options {
    /// The `lathe` binary to measure.
    pub bin: PathBuf,
    /// A smoke run: setup work (loading the tokenizer) may overlap the
    /// measurements, which are not timed seriously.
    pub smoke: bool,
    /// Sections to run (empty: all of [`SECTIONS`]).
    pub sections: Vec<String>,
    /// Spawns measured for startup.
    pub startup_runs: usize,
    /// Deltas in the relay-latency turn.
    pub relay_deltas: usize,
    /// Pause after each relay-latency delta.
    pub relay_gap: Duration,
    /// Deltas in each throughput turn.
    pub throughput_deltas: usize,
    /// Throughput turns.
    pub throughput_runs: usize,
    /// Cancels per state.
    pub cancels: usize,
    /// Agent processes for the memory figures.
    pub memory_runs: usize,
    /// Deltas in the big memory turn.
    pub memory_big_turn: usize,
    /// Sessions opened for "after N sessions".
    pub memory_sessions: usize,
    /// Consecutive turns: RSS after the first figure is compared with after the second.
    pub memory_turns: (usize, usize),
    /// The tree searched by grep/rg and glob/fd.
    pub search_tree: PathBuf,
    /// Timed runs per search pattern and tool.
    pub search_runs: usize,
    /// Seed for the cancel points.
    pub seed: u64,
    /// Deltas in the turn whose journal is measured.
    pub journal_deltas: usize,
    /// Agent processes for the journal figure.
    pub journal_runs: usize,
    /// Turns of the session `session/load` reads.
    pub load_turns: usize,
    /// Timed loads.
    pub load_runs: usize,
    /// Saved sessions `session/list` goes over.
    pub list_sessions: usize,
    /// Processes started over them (the first without an index).
    pub list_process_runs: usize,
    /// Timed lists per process (each unfiltered and filtered).
    pub list_runs: usize,
    /// Sessions streaming at once.
    pub many_sessions: usize,
    /// Deltas each of them streams.
    pub many_deltas: usize,
    /// Pause after each of those deltas.
    pub many_gap: Duration,
    /// Sessions created and closed in one process.
    pub churn_sessions: usize,
    /// Tool calls timed with a no-op `PreToolUse` hook, and as many without.
    pub hook_calls: usize,
    /// Sub-agents streaming at once.
    pub subagent_count: usize,
    /// Deltas each sub-agent streams.
    pub subagent_deltas: usize,
    /// Pause after each of those deltas.
    pub subagent_gap: Duration,
    /// Rounds of one sub-agent, then `subagent_count`, streaming.
    pub subagent_rounds: usize,
    /// Agent processes for the sub-agents' memory figure.
    pub subagent_memory_runs: usize,
    /// Rounds of that figure per process.
    pub subagent_memory_rounds: usize,
    /// Chunks every sub-agent has streamed when RSS is read.
    pub subagent_memory_chunks: usize,
}

/// Patterns for grep and rg: a literal with a few hundred matches, a regex
/// with a few hundred, and an alternation with thousands (more than the
/// tool's 500-line cap).
pub const GREP_PATTERNS: [&str; 3] = ["fn poll_ready", r"unsafe impl.*Send for", "TODO|FIXME"];
/// The pattern for glob and fd.
pub const GLOB_PATTERN: &str = "*.rs";

impl Options {
    /// The full benchmark.
    pub fn full(bin: PathBuf) -> Options {
        let home = std::env::var_os("CARGO_HOME")
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".cargo")))
            .unwrap_or_else(|| PathBuf::from("/root/.cargo"));
        let search_tree =
            std::env::var_os("LATHE_BENCH_TREE").map_or_else(|| home.join("registry").join("src"), PathBuf::from);
        Options {
            bin,
            smoke: false,
            sections: Vec::new(),
            startup_runs: 30,
            relay_deltas: 10_000,
            relay_gap: Duration::from_micros(200),
            throughput_deltas: 100_000,
            throughput_runs: 5,
            cancels: 100,
            memory_runs: 5,
            memory_big_turn: 10_000,
            memory_sessions: 10,
            memory_turns: (20, 1000),
            search_tree,
            search_runs: 5,
            seed: 0x5eed_1a7e,
            journal_deltas: 10_000,
            journal_runs: 3,
            load_turns: 1000,
            load_runs: 20,
            list_sessions: 10_000,
            list_process_runs: 3,
            list_runs: 20,
            many_sessions: 50,
            many_deltas: 2000,
            many_gap: Duration::from_millis(5),
            churn_sessions: 10_000,
            hook_calls: 200,
            subagent_count: 4,
            subagent_deltas: 2000,
            subagent_gap: Duration::from_millis(1),
            subagent_rounds: 3,
            subagent_memory_runs: 3,
            subagent_memory_rounds: 3,
            subagent_memory_chunks: 500,
        }
    }

    /// A few iterations of everything, on this crate's own `src/`.
    pub fn smoke(bin: PathBuf) -> Options {
        Options {
            smoke: true,
            startup_runs: 2,
            relay_deltas: 200,
            throughput_deltas: 2_000,
            throughput_runs: 1,
            cancels: 2,
            memory_runs: 1,
            memory_big_turn: 500,
            memory_sessions: 2,
            memory_turns: (2, 6),
            search_tree: Path::new(env!("CARGO_MANIFEST_DIR")).join("src"),
            search_runs: 1,
            journal_deltas: 500,
            journal_runs: 1,
            load_turns: 5,
            load_runs: 2,
            list_sessions: 120,
            list_process_runs: 2,
            list_runs: 2,
            many_sessions: 3,
            many_deltas: 40,
            churn_sessions: 20,
            hook_calls: 3,
            subagent_deltas: 40,
            subagent_rounds: 1,
            subagent_memory_runs: 1,
            subagent_memory_rounds: 1,
            subagent_memory_chunks: 20,
            ..Options::full(bin)
        }
    }

    fn wants(&self, section: &str) -> bool {
        self.sections.is_empty() || self.sections.iter().any(|s| s == section)
    }
}

// ---------------------------------------------------------------------------
// Figures, budgets, checks and the report.
// ---------------------------------------------------------------------------

/// Which statistic a budget bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stat {
    /// The median.
    Median,
    /// The 99th percentile (the 1st for higher-is-better figures).
    P99,
    /// The worst sample.
    Max,
}

/// One bound of a budget.
#[derive(Debug, Clone, Copy)]
pub struct Bound {
    /// The statistic.
    pub stat: Stat,
    /// The limit, in the figure's unit: an upper bound, or a lower bound for
    /// higher-is-better figures.
    pub limit: f64,
}

/// One measured quantity: its samples and its budget.
#[derive(Debug, Clone)]
pub struct Figure {
    /// Stable key for the JSON, e.g. `cancel.stalled_ms`.
    pub key: String,
    /// What it is, for the table.
    pub label: String,
    /// The unit of the samples.
    pub unit: &'static str,
    /// Every sample.
    pub samples: Vec<f64>,
    /// Rates: the tail that matters is the low one.
    pub higher_is_better: bool,
    /// Empty when the figure has no budget.
    pub budget: Vec<Bound>,
}

/// A figure's statistics.
#[derive(Debug, Clone, Copy)]
pub struct Summary {
    /// Samples.
    pub runs: usize,
    /// The median.
    pub median: f64,
    /// p99 of the bad tail (p1 for higher-is-better).
    pub p99: f64,
    /// The worst sample (the minimum for higher-is-better).
    pub worst: f64,
}

impl Figure {
    fn new(key: &str, label: &str, unit: &'static str, samples: Vec<f64>) -> Figure {
        Figure {
            key: key.to_owned(),
            label: label.to_owned(),
            unit,
            samples,
            higher_is_better: false,
            budget: Vec::new(),
        }
    }

    fn at_most(mut self, stat: Stat, limit: f64) -> Figure {
        self.budget.push(Bound { stat, limit });
        self
    }

    fn at_least(mut self, stat: Stat, limit: f64) -> Figure {
        self.higher_is_better = true;
        self.budget.push(Bound { stat, limit });
        self
    }

    /// Median, p99 and worst, by nearest rank.
    pub fn summary(&self) -> Summary {
        let mut sorted: Vec<f64> = self.samples.iter().copied().filter(|v| v.is_finite()).collect();
        sorted.sort_by(f64::total_cmp);
        if sorted.is_empty() {
            return Summary { runs: 0, median: f64::NAN, p99: f64::NAN, worst: f64::NAN };
        }
        let rank = |q: f64| {
            let index = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len()) - 1;
            sorted[index]
        };
        let (p99, worst) =
            if self.higher_is_better { (rank(0.01), sorted[0]) } else { (rank(0.99), sorted[sorted.len() - 1]) };
        Summary { runs: sorted.len(), median: rank(0.5), p99, worst }
    }

    /// `Some(true)` when every bound holds, `None` without a budget.
    pub fn pass(&self) -> Option<bool> {
        if self.budget.is_empty() {
            return None;
        }
        let summary = self.summary();
        Some(self.budget.iter().all(|bound| {
            let value = match bound.stat {
                Stat::Median => summary.median,
                Stat::P99 => summary.p99,
                Stat::Max => summary.worst,
            };
            if self.higher_is_better { value >= bound.limit } else { value <= bound.limit }
        }))
    }

    fn budget_text(&self) -> String {
        let op = if self.higher_is_better { "≥" } else { "≤" };
        self.budget
            .iter()
            .map(|bound| {
                let stat = match bound.stat {
                    Stat::Median => "median",
                    Stat::P99 => "p99",
                    Stat::Max => "max",
                };
                format!("{stat} {op} {}", number(bound.limit))
            })
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// A correctness check (not a timing): it must hold in smoke runs too.
#[derive(Debug, Clone)]
pub struct Check {
    /// Stable key.
    pub key: String,
    /// Whether it held.
    pub ok: bool,
    /// What was checked and what was found.
    pub detail: String,
}

/// Everything one run measured.
#[derive(Debug, Clone, Default)]
pub struct Report {
    /// The figures, in section order.
    pub figures: Vec<Figure>,
    /// Correctness checks.
    pub checks: Vec<Check>,
    /// How things were measured, where that is not obvious from the label.
    pub notes: Vec<String>,
}

impl Report {
    fn check(&mut self, key: &str, ok: bool, detail: String) {
        self.checks.push(Check { key: key.to_owned(), ok, detail });
    }

    /// The results as a Markdown table, checks and notes after it.
    pub fn table(&self) -> String {
        let mut out = String::new();
        out.push_str("| Figure | Unit | Runs | Median | p99 | Worst | Budget | Result |\n");
        out.push_str("|---|---|---:|---:|---:|---:|---|---|\n");
        for figure in &self.figures {
            let s = figure.summary();
            let result = match figure.pass() {
                Some(true) => "PASS",
                Some(false) => "MISS",
                None => "",
            };
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} | {} | {} | {} | {} |",
                figure.label,
                figure.unit,
                s.runs,
                number(s.median),
                number(s.p99),
                number(s.worst),
                figure.budget_text(),
                result
            );
        }
        if !self.checks.is_empty() {
            out.push_str("\nChecks:\n\n");
            for check in &self.checks {
                let _ = writeln!(out, "- {} `{}`: {}", if check.ok { "PASS" } else { "FAIL" }, check.key, check.detail);
            }
        }
        if !self.notes.is_empty() {
            out.push_str("\nNotes:\n\n");
            for note in &self.notes {
                let _ = writeln!(out, "- {note}");
            }
        }
        out
    }

    /// The same figures as JSON.
    pub fn to_json(&self) -> Value {
        let figures: Vec<Value> = self
            .figures
            .iter()
            .map(|figure| {
                let s = figure.summary();
                json!({
                    "key": figure.key,
                    "label": figure.label,
                    "unit": figure.unit,
                    "runs": s.runs,
                    "median": finite(s.median),
                    "p99": finite(s.p99),
                    "worst": finite(s.worst),
                    "higher_is_better": figure.higher_is_better,
                    "budget": figure.budget_text(),
                    "pass": figure.pass(),
                })
            })
            .collect();
        let checks: Vec<Value> =
            self.checks.iter().map(|c| json!({"key": c.key, "ok": c.ok, "detail": c.detail})).collect();
        json!({"figures": figures, "checks": checks, "notes": self.notes})
    }
}

fn finite(value: f64) -> Value {
    if value.is_finite() { json!(value) } else { Value::Null }
}

/// A number with a sensible number of digits.
pub fn number(value: f64) -> String {
    if !value.is_finite() {
        return "-".to_owned();
    }
    let magnitude = value.abs();
    if magnitude >= 10_000.0 {
        let whole = format!("{value:.0}");
        // Thousands separators.
        let (sign, digits) = whole.strip_prefix('-').map_or(("", whole.as_str()), |d| ("-", d));
        let mut grouped = String::new();
        for (i, c) in digits.chars().enumerate() {
            if i > 0 && (digits.len() - i) % 3 == 0 {
                grouped.push(',');
            }
            grouped.push(c);
        }
        format!("{sign}{grouped}")
    } else if magnitude >= 100.0 {
        format!("{value:.0}")
    } else if magnitude >= 10.0 {
        format!("{value:.1}")
    } else if magnitude >= 1.0 {
        format!("{value:.2}")
    } else {
        format!("{value:.3}")
    }
}

/// Runs the selected sections; `progress` hears what is starting.
pub fn run_all(opts: &Options, progress: &mut dyn FnMut(&str)) -> Report {
    let mut report = Report::default();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime for the bench");
    // Loading o200k_base takes seconds in a debug build: a smoke run loads it
    // on the side; a full run loads it before measuring anything.
    let tokenizer = opts.wants("tokens").then(|| std::thread::spawn(tiktoken_rs::o200k_base));
    let mut tokenizer = match tokenizer {
        Some(loading) if !opts.smoke => Some(Tokenizer::Ready(loading.join().expect("the tokenizer thread"))),
        other => other.map(Tokenizer::Loading),
    };
    for section in SECTIONS {
        if !opts.wants(section) {
            continue;
        }
        progress(section);
        match section {
            "startup" => startup(opts, &mut report),
            "relay" => relay(opts, &mut report),
            "throughput" => throughput(opts, &mut report),
            "cancel" => runtime.block_on(cancel(opts, &mut report)),
            "memory" => memory(opts, &mut report),
            "journal" => scale::journal(opts, &mut report),
            "load" => scale::load(opts, &mut report, &runtime),
            "list" => scale::list(opts, &mut report),
            "many" => scale::many(opts, &mut report),
            "churn" => scale::churn(opts, &mut report),
            "subagents" => subagents::subagents(opts, &mut report),
            "search" => runtime.block_on(search(opts, &mut report)),
            "hooks" => runtime.block_on(hooks(opts, &mut report)),
            "tokens" => {
                let bpe = match tokenizer.take().expect("the tokenizer was started") {
                    Tokenizer::Ready(bpe) => bpe,
                    Tokenizer::Loading(loading) => loading.join().expect("the tokenizer thread"),
                };
                runtime.block_on(tokens(bpe, &mut report));
            }
            _ => unreachable!("{section}"),
        }
    }
    runtime.shutdown_timeout(Duration::from_secs(1));
    report
}

// ---------------------------------------------------------------------------
// Fixtures.
// ---------------------------------------------------------------------------

/// A temporary home with a project directory and a config pointing at `base_url`.
struct Home {
    dir: tempfile::TempDir,
    project: PathBuf,
    config: PathBuf,
}

impl Home {
    fn new(base_url: &str) -> Home {
        Home::with_model_toml(base_url, "")
    }

    /// A home whose model config also has `model_toml` (e.g. `prompt = "lean"`).
    fn with_model_toml(base_url: &str, model_toml: &str) -> Home {
        let dir = tempfile::tempdir().expect("a temporary home");
        let project = dir.path().join("project");
        std::fs::create_dir_all(&project).expect("the project directory");
        let project = project.canonicalize().expect("a canonical project path");
        let config = dir.path().join("config.toml");
        // The same model entry as the tests' `write_config`.
        let text = format!(
            "default_model = \"mock\"\n[models.mock]\nbase_url = \"{base_url}\"\nmodel = \"mock-model\"\n\
             context_window = 32768\nmax_output_tokens = 1024\n{model_toml}"
        );
        std::fs::write(&config, text).expect("write the bench config");
        Home { dir, project, config }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    fn spawn(&self, opts: &Options) -> StampedAgent {
        StampedAgent::spawn(&opts.bin, &self.config, self.path())
    }
}

/// What one firehose turn gave.
struct TurnTimes {
    /// Arrival of each delta's chunk, by sequence number.
    arrivals: Vec<Option<Instant>>,
    /// Send instant of each delta (when asked for).
    sent: Vec<Instant>,
}

/// One prompt answered by `deltas` firehose deltas; waits for its response.
fn firehose_turn(
    agent: &mut StampedAgent,
    fire: &Firehose,
    session: &str,
    deltas: usize,
    gap: Option<Duration>,
) -> TurnTimes {
    let (sender, sent) = mpsc::channel();
    fire.push(Reply { sent: Some(sender), ..Reply::stream(deltas, gap, None) });
    let (id, _) = agent.prompt(session, "stream");
    let mut arrivals = vec![None; deltas];
    let mut seqs = Vec::new();
    let timeout = Duration::from_secs(60) + gap.unwrap_or_default() * u32::try_from(deltas * 4).unwrap_or(u32::MAX);
    let (_, response) = agent.response(id, timeout, |at, line| {
        seqs.clear();
        chunk_sequence_numbers(line, &mut seqs);
        for &seq in &seqs {
            if let Some(slot) = arrivals.get_mut(seq)
                && slot.is_none()
            {
                *slot = Some(at);
            }
        }
    });
    assert_eq!(response["result"]["stopReason"], "end_turn", "{response}");
    let sent = sent.recv_timeout(Duration::from_secs(10)).expect("the firehose reports its send times");
    TurnTimes { arrivals, sent }
}

/// Bytes in the regular files under `dir`.
fn tree_bytes(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else { return 0 };
    entries
        .filter_map(Result::ok)
        .map(|entry| match entry.file_type() {
            Ok(kind) if kind.is_dir() => tree_bytes(&entry.path()),
            Ok(kind) if kind.is_file() => entry.metadata().map_or(0, |m| m.len()),
            _ => 0,
        })
        .sum()
}

fn ms(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1e3
}

fn us(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1e6
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

/// xorshift64*: the cancel points, reproducible from the seed.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) % n.max(1)
    }
}

// ---------------------------------------------------------------------------
// 1. Startup.
// ---------------------------------------------------------------------------

fn startup(opts: &Options, report: &mut Report) {
    let fire = Firehose::start();
    let home = Home::new(&fire.base_url());
    let mut initialize = Vec::new();
    let mut session_new = Vec::new();
    // One unmeasured spawn first, so the binary is in the page cache.
    for run in 0..=opts.startup_runs {
        let mut agent = home.spawn(opts);
        let initialized = agent.initialize();
        let (id, _) = agent.request("session/new", json!({"cwd": home.project, "mcpServers": []}));
        let (created, _) = agent.response(id, Duration::from_secs(10), |_, _| {});
        if run > 0 {
            initialize.push(ms(initialized - agent.spawned_at));
            session_new.push(ms(created - agent.spawned_at));
        }
    }
    report.figures.push(
        Figure::new("startup.initialize_ms", "Startup: spawn → `initialize` response", "ms", initialize)
            .at_most(Stat::Median, 10.0),
    );
    report.figures.push(Figure::new(
        "startup.session_new_ms",
        "Startup: spawn → `session/new` response",
        "ms",
        session_new,
    ));
}

// ---------------------------------------------------------------------------
// 2. Relay latency.
// ---------------------------------------------------------------------------

fn relay(opts: &Options, report: &mut Report) {
    let fire = Firehose::start();
    let home = Home::new(&fire.base_url());
    let mut agent = home.spawn(opts);
    let session = agent.handshake(&home.project);
    // Warm-up: the HTTP connection is opened and the code paths are hot.
    firehose_turn(&mut agent, &fire, &session, 200, Some(opts.relay_gap));
    let turn = firehose_turn(&mut agent, &fire, &session, opts.relay_deltas, Some(opts.relay_gap));
    let mut latencies = Vec::with_capacity(opts.relay_deltas);
    let mut missing = 0usize;
    for (seq, arrival) in turn.arrivals.iter().enumerate() {
        match (arrival, turn.sent.get(seq)) {
            (Some(arrived), Some(sent)) => latencies.push(us(arrived.saturating_duration_since(*sent))),
            _ => missing += 1,
        }
    }
    report.check(
        "relay.every_delta_relayed",
        missing == 0,
        format!(
            "{} of {} deltas arrived as their own agent_message_chunk",
            opts.relay_deltas - missing,
            opts.relay_deltas
        ),
    );
    report.figures.push(
        Figure::new("relay.latency_us", "Relay latency: delta sent → `agent_message_chunk` read", "µs", latencies)
            .at_most(Stat::Median, 100.0)
            .at_most(Stat::P99, 1000.0),
    );
    report.notes.push(format!(
        "Relay: {} deltas, the mock pausing {} µs (std::thread::sleep) after each; one sample per delta.",
        opts.relay_deltas,
        opts.relay_gap.as_micros()
    ));
}

// ---------------------------------------------------------------------------
// 3. Throughput.
// ---------------------------------------------------------------------------

fn throughput(opts: &Options, report: &mut Report) {
    let fire = Firehose::start();
    let home = Home::new(&fire.base_url());
    let mut agent = home.spawn(opts);
    let session = agent.handshake(&home.project);
    firehose_turn(&mut agent, &fire, &session, 1_000, None);
    let stored_before = tree_bytes(home.path());
    let mut rates = Vec::new();
    let mut cpu = Vec::new();
    let mut missing = 0usize;
    for _ in 0..opts.throughput_runs {
        // A fresh session per run keeps the request the same size.
        let session = agent.new_session(&home.project);
        let cpu_before = procfs::cpu_seconds(agent.pid());
        let turn = firehose_turn(&mut agent, &fire, &session, opts.throughput_deltas, None);
        let cpu_after = procfs::cpu_seconds(agent.pid());
        missing += turn.arrivals.iter().filter(|a| a.is_none()).count();
        let last = turn.arrivals.iter().flatten().max().copied().expect("some delta arrived");
        let first_sent = turn.sent[0];
        rates.push(opts.throughput_deltas as f64 / last.duration_since(first_sent).as_secs_f64());
        cpu.push((cpu_after - cpu_before) / (opts.throughput_deltas as f64 / 10_000.0));
    }
    report.check(
        "throughput.every_delta_relayed",
        missing == 0,
        format!("{missing} of {} deltas missing", opts.throughput_deltas * opts.throughput_runs),
    );
    report.figures.push(
        Figure::new(
            "throughput.deltas_per_s",
            &format!("Throughput: {} deltas at full speed", opts.throughput_deltas),
            "deltas/s",
            rates,
        )
        .at_least(Stat::Median, 50_000.0),
    );
    report.figures.push(Figure::new(
        "throughput.cpu_s_per_10k",
        "Throughput: agent CPU (user+sys) per 10,000 deltas",
        "s",
        cpu,
    ));
    let stored = tree_bytes(home.path()).saturating_sub(stored_before);
    report.figures.push(Figure::new(
        "throughput.disk_bytes_per_10k",
        "Throughput: bytes the agent left on disk per 10,000 deltas",
        "bytes",
        vec![stored as f64 / ((opts.throughput_deltas * opts.throughput_runs) as f64 / 10_000.0)],
    ));
    report.notes.push(
        "Throughput: first delta handed to the socket → last `agent_message_chunk` read; the client (the bench \
         process) shares the 2 cores with the agent. CPU from /proc/<pid>/stat utime+stime (10 ms ticks)."
            .to_owned(),
    );
}

// ---------------------------------------------------------------------------
// 4. Cancel latency.
// ---------------------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CancelState {
    Streaming,
    Stalled,
    Permission,
    Shell,
    /// `ask_user` waiting for an elicitation form's answer.
    AskUser,
    /// Two sub-agents (`task`) streaming at once (issue 27).
    SubAgents,
}

async fn cancel(opts: &Options, report: &mut Report) {
    let mut rng = Rng(opts.seed);
    for state in [
        CancelState::Streaming,
        CancelState::Stalled,
        CancelState::Permission,
        CancelState::Shell,
        CancelState::AskUser,
        CancelState::SubAgents,
    ] {
        cancel_state(opts, state, &mut rng, report).await;
    }
    report.notes.push(
        "Cancel: time from writing `session/cancel` to reading the `{\"stopReason\":\"cancelled\"}` response. \
         Cancel points are random (xorshift, fixed seed): 0-29 ms after the first chunk while streaming (a delta \
         every ~1 ms); 0-9 ms after the first chunk of a stalled stream, after `session/request_permission` \
         arrives (never answered), after the shell tool's `sleep 60` is seen running (full-auto mode), and after \
         `ask_user`'s `elicitation/create` arrives (never answered), and 0-29 ms after both of two sub-agents \
         (`task`, client capability `subagents`) have streamed a chunk (a delta every ~1 ms each)."
            .to_owned(),
    );
}

/// Waits for the first message `wanted` accepts.
async fn wait_for(agent: &mut AgentProcess, what: &str, wanted: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match agent.next_message(left).await {
            Some(message) if wanted(&message) => return message,
            Some(_) => {}
            None => panic!("no {what} within 30 s\n--- agent stderr ---\n{}", agent.stderr()),
        }
    }
}

fn is_update(message: &Value, kind: &str) -> bool {
    message["method"] == "session/update" && message["params"]["update"]["sessionUpdate"] == kind
}

async fn cancel_state(opts: &Options, state: CancelState, rng: &mut Rng, report: &mut Report) {
    let mock = MockOpenAi::start().await;
    let home = Home::new(&mock.base_url());
    let config = home.config.to_string_lossy().into_owned();
    let mut agent = AgentProcess::spawn_bin(&opts.bin, &["--config", &config], &[], home.path());
    let capabilities = match state {
        CancelState::AskUser => json!({"elicitation": {"form": {}}}),
        CancelState::SubAgents => json!({"subagents": {}}),
        CancelState::Streaming | CancelState::Stalled | CancelState::Permission | CancelState::Shell => json!({}),
    };
    let session = handshake(&mut agent, capabilities, &home.project).await;
    if state == CancelState::Shell {
        let id = agent.request("session/set_mode", json!({"sessionId": session, "modeId": "full-auto"})).await;
        let (_, response) = agent.response(id).await;
        assert!(response.get("result").is_some(), "set_mode: {response}");
    }
    let mut latencies = Vec::new();
    let mut not_cancelled = 0usize;
    let mut alive_at_response = 0usize;
    let mut alive_after_grace = 0usize;
    let mut groups_seen = 0usize;
    for i in 0..opts.cancels {
        let streaming = || {
            let mut steps = vec![ev_role()];
            for n in 0..200 {
                steps.push(ev_text(&format!("w{n} ")));
                steps.push(Step::Delay(Duration::from_millis(1)));
            }
            MockReply::Sse(steps)
        };
        let (reply, max_delay_ms) = match state {
            CancelState::SubAgents => {
                let task = |k: usize| json!({"description": format!("job {k}"), "prompt": format!("job {k} of {i}")});
                let calls = [(format!("call_t{i}a"), "task", task(0)), (format!("call_t{i}b"), "task", task(1))];
                let calls: Vec<(&str, &str, Value)> =
                    calls.iter().map(|(id, name, args)| (id.as_str(), *name, args.clone())).collect();
                mock.push(tool_call_reply(&calls));
                mock.push(streaming());
                (streaming(), 30)
            }
            CancelState::Streaming => {
                // 200 deltas (over 200 ms) outlast the latest cancel point. A
                // longer script costs the bench, not lathe: the mock drops
                // what it did not send when the agent hangs up, and dropping
                // 5,000 unsent JSON events held a bench worker for up to 20 ms
                // while the response waited in its pipe.
                let mut steps = vec![ev_role()];
                for n in 0..200 {
                    steps.push(ev_text(&format!("w{n} ")));
                    steps.push(Step::Delay(Duration::from_millis(1)));
                }
                (MockReply::Sse(steps), 30)
            }
            CancelState::Stalled => (MockReply::Sse(vec![ev_role(), ev_text("partial answ"), Step::Stall]), 10),
            CancelState::Permission => (
                tool_call_reply(&[(&format!("call_w{i}"), "write_file", json!({"path": "bench.txt", "content": "x"}))]),
                10,
            ),
            CancelState::Shell => {
                (tool_call_reply(&[(&format!("call_s{i}"), "shell", json!({"command": "sleep 60"}))]), 10)
            }
            CancelState::AskUser => {
                let question = json!({"question": "Which one?", "choices": ["this", "that"]});
                (tool_call_reply(&[(&format!("call_q{i}"), "ask_user", question)]), 10)
            }
        };
        mock.push(reply);
        let id = prompt(&mut agent, &session, "go").await;
        match state {
            CancelState::Streaming | CancelState::Stalled => {
                wait_for(&mut agent, "first chunk", |m| is_update(m, "agent_message_chunk")).await;
            }
            CancelState::Permission => {
                wait_for(&mut agent, "permission request", |m| m["method"] == "session/request_permission").await;
            }
            CancelState::AskUser => {
                wait_for(&mut agent, "elicitation", |m| m["method"] == "elicitation/create").await;
            }
            CancelState::SubAgents => {
                // Both children streaming (so neither reply is left queued
                // for the next round): a chunk from each child session.
                let mut children = std::collections::HashSet::new();
                while children.len() < 2 {
                    let chunk = wait_for(&mut agent, "a sub-agent's chunk", |m| {
                        is_update(m, "agent_message_chunk") && m["params"]["sessionId"] != session.as_str()
                    })
                    .await;
                    children.insert(chunk["params"]["sessionId"].to_string());
                }
            }
            CancelState::Shell => {
                wait_for(&mut agent, "tool call in progress", |m| {
                    is_update(m, "tool_call_update") && m["params"]["update"]["status"] == "in_progress"
                })
                .await;
            }
        }
        tokio::time::sleep(Duration::from_millis(rng.below(max_delay_ms))).await;
        let mut groups = Vec::new();
        if state == CancelState::Shell {
            groups = wait_for_sleep(agent.pid()).await;
            groups_seen += usize::from(!groups.is_empty());
        }
        let started = Instant::now();
        agent.notify("session/cancel", json!({"sessionId": session})).await;
        let (_, response) = agent.response(id).await;
        latencies.push(ms(started.elapsed()));
        if response["result"]["stopReason"] != "cancelled" {
            not_cancelled += 1;
        }
        if state == CancelState::Shell {
            alive_at_response += procfs::alive_in_groups(&groups).len();
            let deadline = Instant::now() + Duration::from_millis(500);
            let mut alive = procfs::alive_in_groups(&groups);
            while !alive.is_empty() && Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(5)).await;
                alive = procfs::alive_in_groups(&groups);
            }
            alive_after_grace += alive.len();
        }
    }
    let (key, label) = match state {
        CancelState::Streaming => ("streaming", "Cancel while streaming"),
        CancelState::Stalled => ("stalled", "Cancel while the upstream stalls"),
        CancelState::Permission => ("permission", "Cancel with a permission request pending"),
        CancelState::Shell => ("shell", "Cancel while `sleep 60` runs (shell tool)"),
        CancelState::AskUser => ("ask_user", "Cancel with an `ask_user` question open (elicitation form)"),
        CancelState::SubAgents => ("subagents", "Cancel while two sub-agents stream (`task`)"),
    };
    report.check(
        &format!("cancel.{key}.answered_cancelled"),
        not_cancelled == 0,
        format!(
            "{} of {} prompts answered {{\"stopReason\":\"cancelled\"}}",
            opts.cancels - not_cancelled,
            opts.cancels
        ),
    );
    if state == CancelState::Shell {
        report.check(
            "cancel.shell.no_survivors",
            alive_after_grace == 0 && groups_seen == opts.cancels,
            format!(
                "{groups_seen} of {} cancels had the shell's process group identified; live (non-zombie) members \
                 when the response arrived: {alive_at_response}, 500 ms later: {alive_after_grace}",
                opts.cancels
            ),
        );
    }
    report.figures.push(
        Figure::new(&format!("cancel.{key}_ms"), label, "ms", latencies)
            .at_most(Stat::P99, 10.0)
            .at_most(Stat::Max, 50.0),
    );
}

/// Waits until the agent's shell tool runs `sleep 60`; returns the process
/// groups of the processes it started for it (the `sh -c` and the `sleep`).
async fn wait_for_sleep(agent_pid: u32) -> Vec<u32> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let table = procfs::all_processes();
        let ours: Vec<procfs::Proc> = procfs::descendants(agent_pid, &table)
            .into_iter()
            .filter(|p| p.alive() && p.cmdline.iter().any(|arg| arg.contains("sleep 60") || arg == "sleep"))
            .collect();
        if ours.iter().any(|p| p.cmdline.first().is_some_and(|a| a == "sleep" || a.ends_with("/sleep"))) {
            let mut groups: Vec<u32> = ours.iter().map(|p| p.pgid).collect();
            groups.sort_unstable();
            groups.dedup();
            return groups;
        }
        if Instant::now() > deadline {
            return Vec::new();
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

// ---------------------------------------------------------------------------
// 5. Memory.
// ---------------------------------------------------------------------------

/// Drops `path`'s pages from the page cache (those no process maps), so
/// the next start reads it from disk.
#[cfg(target_os = "linux")]
fn evict_from_page_cache(path: &Path) {
    let evicted = std::fs::File::open(path)
        .and_then(|file| rustix::fs::fadvise(&file, 0, None, rustix::fs::Advice::DontNeed).map_err(Into::into));
    if let Err(err) = evicted {
        eprintln!("e2e: cannot evict {} from the page cache: {err}", path.display());
    }
}

/// `posix_fadvise` is Linux's (macOS and Windows have no call that drops one
/// file's pages): the cold start there is as warm as the cache leaves it.
#[cfg(not(target_os = "linux"))]
fn evict_from_page_cache(path: &Path) {
    eprintln!("e2e: cannot evict {} from the page cache: no posix_fadvise on this system", path.display());
}

fn memory(opts: &Options, report: &mut Report) {
    let (first, last) = opts.memory_turns;
    let mut idle_peak = Vec::new();
    let mut idle_now = Vec::new();
    let mut big_peak = Vec::new();
    let mut big_now = Vec::new();
    let mut sessions_now = Vec::new();
    let mut sessions_peak = Vec::new();
    let mut at_first = Vec::new();
    let mut at_last = Vec::new();
    let mut growth = Vec::new();
    // Where the memory is: the process's own (heap, stacks) or mapped from
    // the binary and its libraries (code the process has run).
    let mut idle_anon = Vec::new();
    let mut idle_file = Vec::new();
    let mut big_anon = Vec::new();
    let mut big_file = Vec::new();
    let mut growth_anon = Vec::new();
    let mut growth_file = Vec::new();
    for _ in 0..opts.memory_runs {
        let fire = Firehose::start();
        let home = Home::new(&fire.base_url());
        let mut agent = home.spawn(opts);
        agent.initialize();
        std::thread::sleep(Duration::from_millis(100));
        let idle = procfs::rss(agent.pid());
        idle_peak.push(mib(idle.peak_kib));
        idle_now.push(mib(idle.current_kib));
        idle_anon.push(mib(idle.anon_kib));
        idle_file.push(mib(idle.file_kib));

        let session = agent.new_session(&home.project);
        firehose_turn(&mut agent, &fire, &session, opts.memory_big_turn, None);
        let big = procfs::rss(agent.pid());
        big_peak.push(mib(big.peak_kib));
        big_now.push(mib(big.current_kib));
        big_anon.push(mib(big.anon_kib));
        big_file.push(mib(big.file_kib));

        for _ in 0..opts.memory_sessions {
            let session = agent.new_session(&home.project);
            firehose_turn(&mut agent, &fire, &session, 10, None);
        }
        let sessions = procfs::rss(agent.pid());
        sessions_now.push(mib(sessions.current_kib));
        sessions_peak.push(mib(sessions.peak_kib));

        let session = agent.new_session(&home.project);
        let mut rss_first = None;
        for turn in 1..=last {
            firehose_turn(&mut agent, &fire, &session, 10, None);
            if turn == first {
                rss_first = Some(procfs::rss(agent.pid()));
            }
        }
        let rss_first = rss_first.unwrap_or_else(|| panic!("turn {first} is past turn {last}"));
        let rss_last = procfs::rss(agent.pid());
        at_first.push(mib(rss_first.current_kib));
        at_last.push(mib(rss_last.current_kib));
        growth.push(rss_last.current_kib as f64 - rss_first.current_kib as f64);
        growth_anon.push(rss_last.anon_kib as f64 - rss_first.anon_kib as f64);
        growth_file.push(rss_last.file_kib as f64 - rss_first.file_kib as f64);
    }
    // Idle again (after the runs above, which take the binary as they find
    // it), with the binary read back from disk: a file just written
    // (by the linker, by `cp`) sits in the page cache in pieces the kernel
    // maps more of around each fault (~1 MB more of the code resident,
    // measured), until it is evicted; after a reboot it is read back, as here.
    let mut idle_read_back = Vec::new();
    for _ in 0..opts.memory_runs {
        evict_from_page_cache(&opts.bin);
        let fire = Firehose::start();
        let home = Home::new(&fire.base_url());
        let mut agent = home.spawn(opts);
        agent.initialize();
        std::thread::sleep(Duration::from_millis(100));
        idle_read_back.push(mib(procfs::rss(agent.pid()).peak_kib));
    }
    let sessions = opts.memory_sessions;
    let big = opts.memory_big_turn;
    report.figures.extend([
        Figure::new("memory.idle_peak_mib", "Memory: peak RSS (VmHWM) idle after `initialize`", "MiB", idle_peak)
            .at_most(Stat::Max, 10.0),
        Figure::new("memory.idle_rss_mib", "Memory: RSS (VmRSS) idle after `initialize`", "MiB", idle_now),
        Figure::new(
            "memory.idle_read_back_peak_mib",
            "Memory: peak RSS idle, the binary read back from disk (evicted first)",
            "MiB",
            idle_read_back,
        ),
        Figure::new("memory.idle_anon_mib", "Memory: of which its own (RssAnon), idle", "MiB", idle_anon),
        Figure::new("memory.idle_file_mib", "Memory: of which mapped from files (RssFile), idle", "MiB", idle_file),
        Figure::new("memory.big_turn_peak_mib", &format!("Memory: peak RSS after a {big}-delta turn"), "MiB", big_peak)
            .at_most(Stat::Median, 14.7)
            .at_most(Stat::Max, 20.0),
        Figure::new("memory.big_turn_rss_mib", &format!("Memory: RSS after a {big}-delta turn"), "MiB", big_now),
        Figure::new("memory.big_turn_anon_mib", "Memory: of which its own (RssAnon), after that turn", "MiB", big_anon),
        Figure::new(
            "memory.big_turn_file_mib",
            "Memory: of which mapped from files (RssFile), after that turn",
            "MiB",
            big_file,
        ),
        Figure::new(
            "memory.sessions_peak_mib",
            &format!("Memory: peak RSS after {sessions} more sessions"),
            "MiB",
            sessions_peak,
        ),
        Figure::new(
            "memory.sessions_rss_mib",
            &format!("Memory: RSS after {sessions} more sessions"),
            "MiB",
            sessions_now,
        ),
        Figure::new(
            "memory.turns_first_rss_mib",
            &format!("Memory: RSS after turn {first} of a session"),
            "MiB",
            at_first,
        ),
        Figure::new(
            "memory.turns_last_rss_mib",
            &format!("Memory: RSS after turn {last} of a session"),
            "MiB",
            at_last,
        ),
        Figure::new(
            "memory.turns_growth_kib",
            &format!("Memory: RSS growth, turn {first} → turn {last}"),
            "KiB",
            growth,
        )
        .at_most(Stat::Max, 1024.0),
        Figure::new("memory.turns_growth_anon_kib", "Memory: of which its own (RssAnon)", "KiB", growth_anon),
        Figure::new("memory.turns_growth_file_kib", "Memory: of which mapped from files (RssFile)", "KiB", growth_file),
    ]);
    report.notes.push(format!(
        "Memory: one agent process per run; VmRSS/VmHWM from /proc/<pid>/status. Idle is read 100 ms after the \
         `initialize` response; the others right after the turn's response. \"More sessions\": {sessions} \
         `session/new` + a 10-delta turn each. Growth: {last} consecutive 10-delta turns in one fresh session \
         (its history legitimately keeps two short messages per turn). \"Read back from disk\": the binary is evicted \
         from the page cache (posix_fadvise DONTNEED) before each start, as after a reboot; a file just written (by \
         the linker or cp) has more of its code mapped around each fault. MB in the budgets read as MiB. Budgets: issue 6 \
         (idle ≤ 10, big turn ≤ 20), issue 16 (big turn no worse than 14.7 at the median, growth ≤ 1 MiB)."
    ));
}

// ---------------------------------------------------------------------------
// 6. Search.
// ---------------------------------------------------------------------------

/// Runs one tool call through the agent; returns the time from its
/// `in_progress` update to its final update, the final status and its `rawOutput`.
async fn timed_tool_call(
    agent: &mut AgentProcess,
    mock: &MockOpenAi,
    session: &str,
    call: (&str, &str, Value),
) -> (Duration, String, Value) {
    mock.push(tool_call_reply(&[(call.0, call.1, call.2)]));
    mock.push(text_reply("done"));
    let id = prompt(agent, session, "search").await;
    let mut started = None;
    let mut finished = None;
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let Some(message) = agent.next_message(left).await else {
            panic!("no answer to the search prompt\n--- agent stderr ---\n{}", agent.stderr());
        };
        let at = Instant::now();
        if is_update(&message, "tool_call_update") {
            match message["params"]["update"]["status"].as_str() {
                Some("in_progress") => started = Some(at),
                Some(status @ ("completed" | "failed")) => {
                    let raw = message["params"]["update"]["rawOutput"].clone();
                    finished = Some((at, status.to_owned(), raw));
                }
                _ => {}
            }
        }
        if message.get("method").is_none() && message["id"] == json!(id) {
            assert_eq!(message["result"]["stopReason"], "end_turn", "{message}");
            break;
        }
    }
    let started = started.expect("an in_progress update");
    let (finished, status, raw) = finished.expect("a final tool call update");
    (finished - started, status, raw)
}

/// Runs `program args`, reading its output; returns the wall time and the
/// number of output lines, or `None` if it cannot run.
fn timed_command(program: &str, args: &[&str]) -> Option<(Duration, usize)> {
    let started = Instant::now();
    let output = Command::new(program).args(args).stdin(Stdio::null()).stderr(Stdio::null()).output().ok()?;
    let elapsed = started.elapsed();
    // rg exits 1 for "no match"; anything else is a failure.
    if !matches!(output.status.code(), Some(0 | 1)) {
        return None;
    }
    Some((elapsed, output.stdout.split(|&b| b == b'\n').filter(|l| !l.is_empty()).count()))
}

/// What a search tool's `rawOutput` says it found, in a few words.
fn found(raw: &Value) -> String {
    let count = |key: &str| raw.get(key).and_then(Value::as_u64);
    match (count("matches"), count("files"), count("entries")) {
        (Some(matches), Some(files), _) => format!("{matches} matching lines in {files} files"),
        (None, Some(files), _) => format!("{files} files"),
        (_, _, Some(entries)) => format!("{entries} paths"),
        _ => raw.to_string(),
    }
}

fn which(candidates: &[&'static str]) -> Option<&'static str> {
    candidates.iter().copied().find(|program| {
        Command::new(program)
            .arg("--version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    })
}

/// A search: its label, the tool, the tool's arguments, and the reference
/// program with its arguments (when installed).
type SearchJob = (String, &'static str, Value, Option<(&'static str, Vec<String>)>);

async fn search(opts: &Options, report: &mut Report) {
    let tree = opts.search_tree.canonicalize().unwrap_or_else(|err| panic!("{}: {err}", opts.search_tree.display()));
    let tree_text = tree.to_string_lossy().into_owned();
    let mock = MockOpenAi::start().await;
    let home = Home::new(&mock.base_url());
    let config = home.config.to_string_lossy().into_owned();
    let mut agent = AgentProcess::spawn_bin(&opts.bin, &["--config", &config], &[], home.path());
    agent.set_timeout(Duration::from_secs(300));
    // The tree is the session's cwd: a search inside the roots needs no permission.
    let session = handshake(&mut agent, json!({}), &tree).await;
    let rg = which(&["rg"]);
    let fd = which(&["fd", "fdfind"]);
    let mut calls = 0usize;
    let mut failed = 0usize;
    let mut jobs: Vec<SearchJob> = GREP_PATTERNS
        .iter()
        .map(|pattern| {
            (
                format!("grep `{pattern}`"),
                "grep",
                json!({"pattern": pattern, "path": tree_text}),
                rg.map(|rg| (rg, vec!["-n".to_owned(), (*pattern).to_owned(), tree_text.clone()])),
            )
        })
        .collect();
    jobs.push((
        format!("glob `{GLOB_PATTERN}`"),
        "glob",
        json!({"pattern": GLOB_PATTERN, "path": tree_text}),
        fd.map(|fd| {
            (fd, vec!["-t".to_owned(), "f".to_owned(), "-g".to_owned(), GLOB_PATTERN.to_owned(), tree_text.clone()])
        }),
    ));
    for (index, (label, tool, args, reference)) in jobs.into_iter().enumerate() {
        let key = format!("search.{tool}{index}");
        let mut ours = Vec::new();
        let mut theirs = Vec::new();
        let mut ratios = Vec::new();
        let mut reference_lines = 0;
        let mut counted = Value::Null;
        // One warm-up run each (page cache, the agent's code paths), then
        // alternate so that both see the same machine state.
        for run in 0..=opts.search_runs {
            calls += 1;
            let (lathe, status, raw) =
                timed_tool_call(&mut agent, &mock, &session, (&format!("call_{key}_{run}"), tool, args.clone())).await;
            failed += usize::from(status != "completed");
            counted = raw;
            let other = reference.as_ref().and_then(|(program, args)| {
                let args: Vec<&str> = args.iter().map(String::as_str).collect();
                timed_command(program, &args)
            });
            if run == 0 {
                continue;
            }
            ours.push(ms(lathe));
            if let Some((other, lines)) = other {
                theirs.push(ms(other));
                ratios.push(lathe.as_secs_f64() / other.as_secs_f64());
                reference_lines = lines;
            }
        }
        let tool_name = if tool == "grep" { "grep tool" } else { "glob tool" };
        report.figures.push(Figure::new(
            &format!("{key}_lathe_ms"),
            &format!("Search: {tool_name}, {label} ({})", found(&counted)),
            "ms",
            ours,
        ));
        if let Some((program, _)) = &reference {
            report.figures.push(Figure::new(
                &format!("{key}_reference_ms"),
                &format!("Search: {program}, same pattern ({reference_lines} lines of output)"),
                "ms",
                theirs,
            ));
            let ratio = Figure::new(
                &format!("{key}_ratio"),
                &format!("Search: {tool_name} / {program} wall time"),
                "×",
                ratios,
            );
            report.figures.push(if tool == "grep" { ratio.at_most(Stat::Median, 1.3) } else { ratio });
        } else {
            report.notes.push(format!(
                "Search: no {} installed; {label} has no reference figure.",
                if tool == "grep" { "rg" } else { "fd" }
            ));
        }
    }
    report.check(
        "search.tool_calls_completed",
        failed == 0,
        format!("{} of {calls} search tool calls completed", calls - failed),
    );
    report.notes.push(format!(
        "Search: tree {} (warm cache: one unmeasured run of each first, then the two alternate). lathe is timed \
         through the binary: the model calls the tool, and the time is from its `tool_call_update` `in_progress` \
         to its `completed` update as read by the client (so it includes rendering the result and writing the \
         update, not process start-up). `rg -n PATTERN TREE` and `fd -t f -g PATTERN TREE` are timed from spawn to \
         exit with their output read through a pipe. Defaults on both sides (hidden files skipped, ignore files \
         honoured). The grep tool shows at most 500 matching lines and the glob tool 1,000 paths, rg and fd print \
         everything.",
        tree.display()
    ));
}

// ---------------------------------------------------------------------------
// Hooks (issue 32).
// ---------------------------------------------------------------------------

/// The cost of a no-op `PreToolUse` hook per tool call: the same
/// `read_file` call (a small file in the project, which no mode asks about)
/// in two agents, one without hooks and one whose config has a user hook
/// `exit 0` for every tool, alternating, `hook_calls` times each. The time
/// of a call runs from its `tool_call` notification to its final update;
/// the cost is the difference within each pair (the hooked call minus the
/// plain one next to it).
async fn hooks(opts: &Options, report: &mut Report) {
    let mock = MockOpenAi::start().await;
    let plain_home = Home::new(&mock.base_url());
    let hooked_home =
        Home::with_model_toml(&mock.base_url(), "[[hooks.PreToolUse]]\nmatcher = \"*\"\ncommand = \"exit 0\"\n");
    let mut agents = Vec::new();
    for home in [&plain_home, &hooked_home] {
        std::fs::write(home.project.join("small.txt"), "one line\n").expect("the file read");
        let config = home.config.to_string_lossy().into_owned();
        let mut agent = AgentProcess::spawn(&["--config", &config], &[], home.path());
        let session = handshake(&mut agent, json!({}), &home.project).await;
        agents.push((agent, session));
    }
    let (mut plain, mut hooked, mut cost) = (Vec::new(), Vec::new(), Vec::new());
    let (mut completed, mut heard) = (0usize, 0usize);
    // One unmeasured call each first (the hook's first start pages `sh` in).
    for run in 0..=opts.hook_calls {
        let mut pair = [Duration::ZERO; 2];
        for (index, (agent, session)) in agents.iter_mut().enumerate() {
            let id = format!("call_hook{index}_{run}");
            let (took, status, shown) = hook_call(agent, &mock, session, &id).await;
            if run == 0 {
                continue;
            }
            completed += usize::from(status == "completed");
            heard += usize::from(index == 1 && shown.contains("PreToolUse hook"));
            pair[index] = took;
        }
        if run > 0 {
            plain.push(ms(pair[0]));
            hooked.push(ms(pair[1]));
            cost.push(ms(pair[1]) - ms(pair[0]));
        }
    }
    let calls = opts.hook_calls;
    report.figures.push(Figure::new(
        "hooks.plain_ms",
        "Hooks: a `read_file` call without hooks (`tool_call` → completed)",
        "ms",
        plain,
    ));
    report.figures.push(Figure::new(
        "hooks.noop_ms",
        "Hooks: the same call with a no-op `PreToolUse` hook (`exit 0`)",
        "ms",
        hooked,
    ));
    report.figures.push(Figure::new("hooks.cost_ms", "Hooks: cost of a no-op `PreToolUse` hook per call", "ms", cost));
    report.checks.push(Check {
        key: "hooks.calls".to_owned(),
        ok: completed == 2 * calls && heard == calls,
        detail: format!(
            "{completed} of {} calls completed; the hook's run was shown on {heard} of the {calls} hooked calls",
            2 * calls
        ),
    });
}

/// One `read_file` call through `agent`: the time from its `tool_call`
/// notification to its final update, its final status, and what was shown on it.
async fn hook_call(agent: &mut AgentProcess, mock: &MockOpenAi, session: &str, id: &str) -> (Duration, String, String) {
    mock.push(tool_call_reply(&[(id, "read_file", json!({"path": "small.txt"}))]));
    mock.push(text_reply("done"));
    let prompt_id = prompt(agent, session, "read it").await;
    let (mut started, mut finished) = (None, None);
    let mut shown = String::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let Some(message) = agent.next_message(left).await else {
            panic!("no answer to the hooked prompt\n--- agent stderr ---\n{}", agent.stderr());
        };
        let at = Instant::now();
        let update = &message["params"]["update"];
        if message["method"] == "session/update" && update["toolCallId"] == id {
            shown.push_str(&update["content"].to_string());
            if update["sessionUpdate"] == "tool_call" {
                started.get_or_insert(at);
            }
            if let Some(status @ ("completed" | "failed")) = update["status"].as_str() {
                finished = Some((at, status.to_owned()));
            }
        }
        if message.get("method").is_none() && message["id"] == json!(prompt_id) {
            break;
        }
    }
    let started = started.expect("a tool_call notification");
    let (finished, status) = finished.expect("a final tool call update");
    (finished - started, status, shown)
}

// ---------------------------------------------------------------------------
// 7. Tokens.
// ---------------------------------------------------------------------------

#[derive(serde::Deserialize)]
struct RequestBody<'a> {
    #[serde(borrow)]
    messages: Vec<&'a RawValue>,
    #[serde(borrow, default)]
    tools: Option<&'a RawValue>,
}

/// The o200k_base tokenizer, loaded or loading.
enum Tokenizer {
    Ready(anyhow::Result<tiktoken_rs::CoreBPE>),
    Loading(std::thread::JoinHandle<anyhow::Result<tiktoken_rs::CoreBPE>>),
}

/// The fixed prefix in both prompt profiles: the standard one (the
/// `tokens.*` figures, budget 3,000) and the lean one (`tokens.lean_*`,
/// budget 1,200, chosen with `prompt = "lean"`).
async fn tokens(bpe: anyhow::Result<tiktoken_rs::CoreBPE>, report: &mut Report) {
    let bpe = match bpe {
        Ok(bpe) => Some(bpe),
        Err(err) => {
            report.notes.push(format!("Tokens: the o200k_base tokenizer could not be loaded: {err}"));
            None
        }
    };
    prefix_tokens(bpe.as_ref(), Profile::Standard, report).await;
    prefix_tokens(bpe.as_ref(), Profile::Lean, report).await;
    report.notes.push(
        "Tokens: counted on the system prompt text plus the compact JSON of the `tools` array exactly as the mock \
         received them; providers wrap tool definitions in their own template, which adds a few tokens per tool."
            .to_owned(),
    );
}

/// The prompt profiles the tokens section measures.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Profile {
    Standard,
    Lean,
}

impl Profile {
    /// The figure keys' infix, the labels' suffix, the model's config line and the token budget.
    fn parts(self) -> (&'static str, &'static str, &'static str, f64) {
        match self {
            Profile::Standard => ("", "", "", 3000.0),
            Profile::Lean => ("lean_", ", lean profile", "prompt = \"lean\"\n", 1200.0),
        }
    }
}

async fn prefix_tokens(bpe: Option<&tiktoken_rs::CoreBPE>, profile: Profile, report: &mut Report) {
    let (key, label, model_toml, budget) = profile.parts();
    let mock = MockOpenAi::start().await;
    let home = Home::with_model_toml(&mock.base_url(), model_toml);
    let config = home.config.to_string_lossy().into_owned();
    let mut agent = AgentProcess::spawn(&["--config", &config], &[], home.path());
    let session = handshake(&mut agent, json!({}), &home.project).await;
    // Turn 1 runs a tool (two requests), turn 2 is plain text: three
    // consecutive requests of one session.
    let plan = json!({"plan": [{"content": "measure", "status": "in_progress"}]});
    mock.push(tool_call_reply(&[("call_plan", "update_plan", plan)]));
    mock.push(text_reply("planned"));
    mock.push(text_reply("second answer"));
    for text in ["make a plan", "go on"] {
        let id = prompt(&mut agent, &session, text).await;
        let (_, response) = agent.response(id).await;
        assert_eq!(response["result"]["stopReason"], "end_turn", "{response}");
    }
    let requests = mock.requests();
    assert_eq!(requests.len(), 3, "three model requests");
    let bodies: Vec<RequestBody<'_>> =
        requests.iter().map(|r| serde_json::from_str(&r.raw_body).expect("a JSON request body")).collect();
    let system_raw = bodies[0].messages[0].get();
    let tools_raw = bodies[0].tools.map_or("", RawValue::get);
    let system: Value = serde_json::from_str(system_raw).expect("the system message");
    let system_text = system["content"].as_str().unwrap_or_default();
    let stable =
        bodies.iter().all(|b| b.messages[0].get() == system_raw && b.tools.map_or("", RawValue::get) == tools_raw);
    let common_prefix = requests
        .windows(2)
        .map(|pair| pair[0].raw_body.bytes().zip(pair[1].raw_body.bytes()).take_while(|(a, b)| a == b).count())
        .min()
        .unwrap_or(0);
    let tools_count = serde_json::from_str::<Vec<Value>>(tools_raw).map_or(0, |t| t.len());
    report.check(
        &format!("tokens.{key}prefix_byte_stable"),
        stable && system["role"] == "system" && tools_count > 0,
        format!(
            "{}the system message ({} bytes) and the {tools_count} tool definitions ({} bytes) are byte-identical \
             in {} consecutive requests of one session (one after a tool call); their bodies share their first \
             {common_prefix} bytes",
            if profile == Profile::Lean { "lean profile: " } else { "" },
            system_raw.len(),
            tools_raw.len(),
            requests.len()
        ),
    );
    let bytes = (system_raw.len() + tools_raw.len()) as f64;
    report.figures.push(Figure::new(
        &format!("tokens.{key}prefix_bytes"),
        &format!("Fixed prefix{label}: system message + tool definitions, as sent"),
        "bytes",
        vec![bytes],
    ));
    let Some(bpe) = bpe else { return };
    let system_tokens = bpe.encode_ordinary(system_text).len() as f64;
    let tools_tokens = bpe.encode_ordinary(tools_raw).len() as f64;
    report.figures.push(Figure::new(
        &format!("tokens.{key}system_tokens"),
        &format!("Fixed prefix{label}: system prompt text (o200k_base)"),
        "tokens",
        vec![system_tokens],
    ));
    report.figures.push(Figure::new(
        &format!("tokens.{key}tools_tokens"),
        &format!("Fixed prefix{label}: {tools_count} tool definitions as JSON (o200k_base)"),
        "tokens",
        vec![tools_tokens],
    ));
    report.figures.push(
        Figure::new(
            &format!("tokens.{key}prefix_tokens"),
            &format!("Fixed prefix{label}: total (o200k_base)"),
            "tokens",
            vec![system_tokens + tools_tokens],
        )
        .at_most(Stat::Median, budget),
    );
}
