//! Sub-agents (issue 27): the relay latency of sub-agents' streams, one
//! alone and several at once, and the memory a running sub-agent adds.
//!
//! The parent's model answers the prompt with `task` calls (the firehose's
//! tool-call reply); each sub-agent's request carries its job, which keys
//! its own firehose stream of numbered deltas. The client offers the
//! `subagents` capability, so each sub-agent's text reaches it as
//! `agent_message_chunk`s of the sub-agent's session (`<parent>.<call id>`):
//! the same stamping as the relay section, per sub-agent.

use std::collections::HashMap;
use std::sync::mpsc::{self, Receiver};
use std::time::{Duration, Instant};

use serde_json::json;

use super::firehose::{Firehose, Reply};
use super::scale::{close, is_response, session_of, sessions_dir};
use super::stamped::{StampedAgent, chunk_sequence_numbers};
use super::{Figure, Home, Options, Report, Stat, procfs, us};

/// The capabilities of a client that shows sub-agents as sessions of their own.
fn capabilities() -> serde_json::Value {
    json!({"subagents": {}})
}

/// The call id of sub-agent `k`, and its session's id under `session`.
fn call_id(k: usize) -> String {
    format!("call_{k}")
}

/// Queues the parent's `task` calls for the prompt `prompt` (one per job),
/// each job answered by its own stream; returns the receivers of the
/// streams' send times. `last`: the parent's answer after the tasks.
fn queue_tasks(
    fire: &Firehose,
    prompt: &str,
    jobs: &[String],
    deltas: usize,
    gap: Duration,
    last: bool,
) -> Vec<Receiver<Vec<Instant>>> {
    let calls = jobs
        .iter()
        .enumerate()
        .map(|(k, job)| {
            let arguments = json!({"description": format!("stream {k}"), "prompt": job}).to_string();
            (call_id(k), "task".to_owned(), arguments)
        })
        .collect();
    fire.push(Reply { calls, ..Reply::stream(0, None, Some(prompt.to_owned())) });
    let mut sent = Vec::new();
    for job in jobs {
        let (sender, receiver) = mpsc::channel();
        fire.push(Reply { sent: Some(sender), ..Reply::stream(deltas, Some(gap), Some(job.clone())) });
        sent.push(receiver);
    }
    if last {
        fire.push(Reply::stream(3, None, None));
    }
    sent
}

/// One turn in a new session whose model starts `count` sub-agents, each
/// streaming `deltas` deltas with `gap` after each. Returns the latency of
/// every delta (send → its chunk read in the sub-agent's session) and how
/// many never arrived.
fn task_turn(
    agent: &mut StampedAgent,
    fire: &Firehose,
    home: &Home,
    tag: &str,
    count: usize,
    deltas: usize,
    gap: Duration,
) -> (Vec<f64>, usize, String) {
    let session = agent.new_session(&home.project);
    let prompt = format!("delegate-{tag}-now");
    let jobs: Vec<String> = (0..count).map(|k| format!("job-{tag}-{k}-now")).collect();
    let sent = queue_tasks(fire, &prompt, &jobs, deltas, gap, true);
    let children: HashMap<String, usize> = (0..count).map(|k| (format!("{session}.{}", call_id(k)), k)).collect();
    let mut arrivals = vec![vec![None; deltas]; count];
    let mut seqs = Vec::new();
    let (id, _) = agent.prompt(&session, &prompt);
    let timeout = Duration::from_secs(60) + gap * u32::try_from(deltas * 4).unwrap_or(u32::MAX);
    let (_, response) = agent.response(id, timeout, |at, line| {
        let Some(&k) = session_of(line).and_then(|s| children.get(s)) else { return };
        seqs.clear();
        chunk_sequence_numbers(line, &mut seqs);
        for &seq in &seqs {
            if let Some(slot) = arrivals[k].get_mut(seq)
                && slot.is_none()
            {
                *slot = Some(at);
            }
        }
    });
    assert_eq!(response["result"]["stopReason"], "end_turn", "{response}\n{}", agent.stderr());
    let mut latencies = Vec::with_capacity(count * deltas);
    let mut missing = 0usize;
    for (k, receiver) in sent.iter().enumerate() {
        let sent = receiver.recv_timeout(Duration::from_secs(10)).expect("the firehose reports its send times");
        for (seq, arrival) in arrivals[k].iter().enumerate() {
            match (arrival, sent.get(seq)) {
                (Some(arrived), Some(sent)) => latencies.push(us(arrived.saturating_duration_since(*sent))),
                _ => missing += 1,
            }
        }
    }
    (latencies, missing, session)
}

/// Lines of session `session`'s log about its sub-agents, once it is closed.
fn subagent_log_lines(agent: &mut StampedAgent, home: &Home, session: &str) -> usize {
    close(agent, session);
    let log = std::fs::read_to_string(sessions_dir(home.path()).join(session).join("log.jsonl")).unwrap_or_default();
    let child = format!("\"{session}.");
    log.lines().filter(|line| line.contains(&child)).count()
}

/// RSS with `count` sub-agents running vs none, per sub-agent, in KiB:
/// (`VmRSS`, `RssAnon`) samples.
fn memory_round(
    agent: &mut StampedAgent,
    fire: &Firehose,
    home: &Home,
    tag: &str,
    count: usize,
    opts: &Options,
) -> (f64, f64) {
    let session = agent.new_session(&home.project);
    // Settled: the last turn's connections back in the pool, the writer idle.
    std::thread::sleep(Duration::from_millis(300));
    let idle = procfs::rss(agent.pid());
    let prompt = format!("delegate-{tag}-now");
    let jobs: Vec<String> = (0..count).map(|k| format!("job-{tag}-{k}-now")).collect();
    // Endless streams: the sub-agents are still running when RSS is read.
    let _sent = queue_tasks(fire, &prompt, &jobs, 1_000_000, opts.subagent_gap, false);
    let children: HashMap<String, usize> = (0..count).map(|k| (format!("{session}.{}", call_id(k)), k)).collect();
    let (id, _) = agent.prompt(&session, &prompt);
    let mut chunks = vec![0usize; count];
    let deadline = Instant::now() + Duration::from_secs(60);
    while chunks.iter().any(|&n| n < opts.subagent_memory_chunks) {
        let left = deadline.saturating_duration_since(Instant::now());
        let Some((_, line)) = agent.next_line(left) else {
            panic!("the sub-agents did not stream: {chunks:?}\n{}", agent.stderr());
        };
        assert!(!is_response(&line, id), "the turn ended early: {line}\n{}", agent.stderr());
        if let Some(&k) = session_of(&line).and_then(|s| children.get(s))
            && line.contains(r#""sessionUpdate":"agent_message_chunk""#)
        {
            chunks[k] += 1;
        }
    }
    let running = procfs::rss(agent.pid());
    agent.send(&json!({"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": session}}));
    let (_, response) = agent.response(id, Duration::from_secs(30), |_, _| {});
    assert_eq!(response["result"]["stopReason"], "cancelled", "{response}");
    let per = |after: u64, before: u64| (after as f64 - before as f64) / count as f64;
    (per(running.current_kib, idle.current_kib), per(running.anon_kib, idle.anon_kib))
}

/// The section: relay latency with one sub-agent streaming and with
/// `subagent_count` at once; RSS per running sub-agent.
pub fn subagents(opts: &Options, report: &mut Report) {
    let (count, deltas, gap) = (opts.subagent_count, opts.subagent_deltas, opts.subagent_gap);
    let fire = Firehose::start();
    let home = Home::new(&fire.base_url());
    let mut agent = home.spawn(opts);
    agent.initialize_with(&capabilities());
    // Warm-up: the connections to the model and the code paths.
    let _ = task_turn(&mut agent, &fire, &home, "warm", count, deltas.min(50), gap);
    let (mut single, mut several) = (Vec::new(), Vec::new());
    let (mut single_p99, mut several_p99) = (Vec::new(), Vec::new());
    let mut missing = 0usize;
    let mut log_lines = Vec::new();
    for round in 0..opts.subagent_rounds {
        let (latencies, lost, _) = task_turn(&mut agent, &fire, &home, &format!("one-{round}"), 1, deltas, gap);
        single_p99.push(Figure::new("x", "x", "µs", latencies.clone()).summary().p99);
        single.extend(latencies);
        missing += lost;
        let (latencies, lost, session) =
            task_turn(&mut agent, &fire, &home, &format!("all-{round}"), count, deltas, gap);
        several_p99.push(Figure::new("x", "x", "µs", latencies.clone()).summary().p99);
        several.extend(latencies);
        missing += lost;
        let lines = subagent_log_lines(&mut agent, &home, &session);
        log_lines.push(lines as f64 * 1000.0 / (count * deltas) as f64);
    }
    drop(agent);
    report.check(
        "subagents.every_delta_relayed",
        missing == 0,
        format!(
            "{missing} of {} sub-agent deltas did not arrive as agent_message_chunks of their sub-agent's session",
            opts.subagent_rounds * deltas * (1 + count)
        ),
    );
    let single_all_p99 = Figure::new("x", "x", "µs", single.clone()).summary().p99;
    report.figures.push(Figure::new(
        "subagents.single_latency_us",
        &format!("Sub-agents: relay latency, 1 streaming ({deltas} deltas every {} ms)", gap.as_millis()),
        "µs",
        single,
    ));
    report.figures.push(
        Figure::new(
            "subagents.latency_us",
            &format!("Sub-agents: relay latency, {count} streaming at once"),
            "µs",
            several,
        )
        .at_most(Stat::P99, 2.0 * single_all_p99),
    );
    report.figures.push(Figure::new(
        "subagents.log_lines_per_1000_deltas",
        &format!("Sub-agents: journal lines about them per 1,000 of their deltas ({count} at once)"),
        "lines",
        log_lines,
    ));

    let mut rss = Vec::new();
    let mut anon = Vec::new();
    for run in 0..opts.subagent_memory_runs {
        let mut agent = home.spawn(opts);
        agent.initialize_with(&capabilities());
        let _ = task_turn(&mut agent, &fire, &home, &format!("mem-warm-{run}"), count, deltas.min(200), gap);
        for round in 0..opts.subagent_memory_rounds {
            let (current, own) = memory_round(&mut agent, &fire, &home, &format!("mem-{run}-{round}"), count, opts);
            rss.push(current / 1024.0);
            anon.push(own / 1024.0);
        }
    }
    report.figures.push(
        Figure::new(
            "subagents.rss_per_running_mib",
            &format!("Sub-agents: `VmRSS` added per running sub-agent ({count} running vs none) / {count}"),
            "MiB",
            rss,
        )
        .at_most(Stat::Max, 1.0),
    );
    report.figures.push(Figure::new(
        "subagents.anon_per_running_mib",
        &format!("Sub-agents: `RssAnon` added per running sub-agent ({count} running vs none) / {count}"),
        "MiB",
        anon,
    ));
    let p99s = |p99s: &[f64]| p99s.iter().map(|p| super::number(*p)).collect::<Vec<_>>().join(", ");
    report.notes.push(format!(
        "Sub-agents: one process (client capability `subagents`); per round, a turn in a new session whose model \
         calls `task` once, then one calling it {count} times; each sub-agent's request is answered by its own \
         firehose stream of {deltas} deltas with a {} ms pause after each; latency = send → the \
         `agent_message_chunk` of the sub-agent's session read. p99 per round, 1 sub-agent: {}; {count}: {}. The \
         budget for {count} is 2× the p99 of the single stream over all rounds ({}). Memory: {} process(es), each \
         after a warm-up turn with {count} sub-agents; per round, `VmRSS`/`RssAnon` 300 ms after the last turn in a \
         new session, then with {count} sub-agents streaming endlessly, each past {} chunks; the difference / {count}; \
         then cancelled. Journal: the lines of the {count}-at-once session's `log.jsonl` naming a sub-agent's \
         session, once it is closed.",
        gap.as_millis(),
        p99s(&single_p99),
        p99s(&several_p99),
        super::number(single_all_p99),
        opts.subagent_memory_runs,
        opts.subagent_memory_chunks,
    ));
}
