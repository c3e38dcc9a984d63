//! Sessions at scale (issue 16): the journal's size, `session/load` of a
//! long session, `session/list` over many sessions, many sessions streaming
//! at once, and many sessions created and closed. Every section drives the
//! binary with the bench's own stamped client, so `LATHE_BENCH_BIN` can
//! measure another build (an older lathe for the "before" figures).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::firehose::{Firehose, Reply};
use super::stamped::{StampedAgent, chunk_sequence_numbers};
use super::{Figure, Home, Options, Report, Rng, Stat, firehose_turn, mib, ms, procfs, us};
use crate::support::mock_openai::{MockOpenAi, text_reply, tool_call_reply};

pub fn sessions_dir(home: &Path) -> PathBuf {
    home.join(".local/share/lathe/sessions")
}

fn file_len(path: &Path) -> u64 {
    std::fs::metadata(path).map_or(0, |m| m.len())
}

/// Whether `line` is the response to request `id` (not a notification that
/// happens to contain the same text).
pub fn is_response(line: &str, id: i64) -> bool {
    !line.starts_with(r#"{"jsonrpc":"2.0","method""#)
        && (line.contains(&format!(r#""id":{id},"#)) || line.ends_with(&format!(r#""id":{id}}}"#)))
}

/// The `sessionId` a line is about, without parsing it.
pub fn session_of(line: &str) -> Option<&str> {
    let start = line.find(r#""sessionId":""#)? + 13;
    let rest = &line[start..];
    Some(&rest[..rest.find('"')?])
}

pub fn close(agent: &mut StampedAgent, session: &str) {
    let (id, _) = agent.request("session/close", json!({"sessionId": session}));
    agent.response(id, Duration::from_secs(30), |_, _| {});
}

fn open_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, Iterator::count)
}

// ---------------------------------------------------------------------------
// Journal size.
// ---------------------------------------------------------------------------

/// Bytes the journal takes for a streamed answer, against the bytes of its text.
pub fn journal(opts: &Options, report: &mut Report) {
    let mut ratios = Vec::new();
    let mut bytes = Vec::new();
    for _ in 0..opts.journal_runs {
        let fire = Firehose::start();
        let home = Home::new(&fire.base_url());
        let mut agent = home.spawn(opts);
        let session = agent.handshake(&home.project);
        // The prompt's own records first, so only the answer is counted.
        firehose_turn(&mut agent, &fire, &session, 10, None);
        close(&mut agent, &session);
        let log = sessions_dir(home.path()).join(&session).join("log.jsonl");
        let before = file_len(&log);
        let session_again = {
            let (id, _) = agent.request("session/resume", json!({"sessionId": session, "cwd": home.project}));
            agent.response(id, Duration::from_secs(30), |_, _| {});
            session.clone()
        };
        firehose_turn(&mut agent, &fire, &session_again, opts.journal_deltas, None);
        close(&mut agent, &session_again);
        let grown = file_len(&log).saturating_sub(before);
        let text: usize = (0..opts.journal_deltas).map(|seq| format!("t{seq} ").len()).sum();
        ratios.push(grown as f64 / text as f64);
        bytes.push(grown as f64);
    }
    let deltas = opts.journal_deltas;
    report.figures.push(
        Figure::new(
            "journal.ratio",
            &format!("Journal: bytes logged per byte of answer text, one {deltas}-delta turn"),
            "×",
            ratios,
        )
        .at_most(Stat::Median, 1.5),
    );
    report.figures.push(Figure::new(
        "journal.bytes",
        "Journal: bytes logged for that turn (its prompt, answer, usage, transcript)",
        "bytes",
        bytes,
    ));
    report.notes.push(format!(
        "Journal: log.jsonl's growth over one turn of {deltas} firehose deltas (`t<n> `) at full speed, the session \
         closed after it (so everything is written), against the bytes of the answer's text. The growth includes \
         the prompt's records, the usage update and the transcript message."
    ));
}

// ---------------------------------------------------------------------------
// Load.
// ---------------------------------------------------------------------------

/// A session of `turns` turns, each a `read_file` call and a short answer,
/// driven through the binary; returns its id.
fn long_session(agent: &mut StampedAgent, mock: &MockOpenAi, project: &Path, turns: usize) -> String {
    std::fs::write(project.join("notes.txt"), "A line of notes.\nAnother line, a little longer.\n").unwrap();
    let session = agent.new_session(project);
    for turn in 0..turns {
        mock.push(tool_call_reply(&[(&format!("call_{turn}"), "read_file", json!({"path": "notes.txt"}))]));
        mock.push(text_reply(&format!(
            "Turn {turn}: the notes have two lines; the second is a little longer than the first, as notes go."
        )));
        let (id, _) = agent.prompt(&session, &format!("What do the notes say, turn {turn}?"));
        let (_, response) = agent.response(id, Duration::from_secs(60), |_, _| {});
        assert_eq!(response["result"]["stopReason"], "end_turn", "{response}");
    }
    close(agent, &session);
    session
}

/// `session/load` of a long session, and a cancel of another session while loads run.
pub fn load(opts: &Options, report: &mut Report, runtime: &tokio::runtime::Runtime) {
    let mock = runtime.block_on(MockOpenAi::start());
    let home = Home::new(&mock.base_url());
    let mut agent = home.spawn(opts);
    agent.initialize();
    let turns = opts.load_turns;
    let session = long_session(&mut agent, &mock, &home.project, turns);
    let log_bytes = file_len(&sessions_dir(home.path()).join(&session).join("log.jsonl"));
    drop(agent);

    // A fresh process: nothing of the session is in memory or in the page cache's favour but the file.
    let mut agent = home.spawn(opts);
    agent.initialize();
    let other = agent.new_session(&home.project);
    let mut loads = Vec::new();
    let mut first_lines = Vec::new();
    let mut replayed_lines = 0usize;
    let mut cancels = Vec::new();
    let mut cancelled_first = 0usize;
    for run in 0..=opts.load_runs {
        // Another session streams (stalled after its first chunk) while the load runs.
        mock.push(crate::support::mock_openai::Reply::Sse(vec![
            crate::support::mock_openai::ev_role(),
            crate::support::mock_openai::ev_text("streaming"),
            crate::support::mock_openai::Step::Stall,
        ]));
        let (prompt_id, _) = agent.prompt(&other, "stream");
        loop {
            let (_, line) = agent.next_line(Duration::from_secs(30)).expect("the other session's first chunk");
            if line.contains("agent_message_chunk") {
                break;
            }
        }
        let (load_id, sent) =
            agent.request("session/load", json!({"sessionId": session, "cwd": home.project, "mcpServers": []}));
        let cancel_sent =
            agent.send(&json!({"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": other}}));
        let mut first = None;
        let mut lines = 0usize;
        let mut load_done = None;
        let mut cancel_done = None;
        while load_done.is_none() || cancel_done.is_none() {
            let (at, line) = agent.next_line(Duration::from_secs(60)).expect("the load and the cancel answer");
            if is_response(&line, load_id) {
                load_done = Some(at);
            } else if is_response(&line, prompt_id) {
                assert!(line.contains("cancelled"), "{line}");
                cancel_done = Some(at);
            } else if session_of(&line) == Some(session.as_str()) && load_done.is_none() {
                first.get_or_insert(at);
                lines += 1;
            }
        }
        let (load_done, cancel_done) = (load_done.unwrap(), cancel_done.unwrap());
        if run == 0 {
            continue;
        }
        loads.push(ms(load_done - sent));
        first_lines.push(ms(first.unwrap_or(load_done) - sent));
        cancels.push(ms(cancel_done - cancel_sent));
        cancelled_first += usize::from(cancel_done < load_done);
        replayed_lines = lines;
    }
    report.figures.push(
        Figure::new(
            "load.response_ms",
            &format!("Load: `session/load` of a {turns}-turn session (tool calls included) → response"),
            "ms",
            loads,
        )
        .at_most(Stat::Median, 100.0),
    );
    report.figures.push(Figure::new(
        "load.first_line_ms",
        "Load: `session/load` → first replayed line",
        "ms",
        first_lines,
    ));
    report.figures.push(
        Figure::new("load.cancel_other_ms", "Load: cancel of another session while the load runs", "ms", cancels)
            .at_most(Stat::P99, 10.0),
    );
    report.check(
        "load.cancel_not_behind_load",
        true,
        format!(
            "the other session's cancel was answered before the load in {cancelled_first} of {} runs",
            opts.load_runs
        ),
    );
    report.notes.push(format!(
        "Load: a session of {turns} turns (each a `read_file` call and a short answer, through the binary and the \
         tests' mock), log {log_bytes} bytes, loaded {} times in a fresh process ({replayed_lines} replayed lines). \
         Time from writing `session/load` to reading its response, all the replay read before it. Each time \
         another session of the same process has a stalled turn, and `session/cancel` for it is written right after \
         the load.",
        opts.load_runs
    ));
}

// ---------------------------------------------------------------------------
// List.
// ---------------------------------------------------------------------------

/// Writes `count` saved sessions as lathe does (a folder with `meta.json`), half in each of two cwds.
fn saved_sessions(home: &Path, cwds: [&Path; 2], count: usize) {
    let root = sessions_dir(home);
    for n in 0..count {
        let id = format!("sess_{n:032x}");
        let dir = root.join(&id);
        std::fs::create_dir_all(&dir).unwrap();
        let at = humantime::format_rfc3339_seconds(
            std::time::UNIX_EPOCH + Duration::from_secs(1_760_000_000 + (n as u64 * 7919) % 5_000_000),
        )
        .to_string();
        let meta = json!({
            "sessionId": id, "cwd": cwds[n % 2], "additionalDirectories": [],
            "title": format!("Session number {n}: a title of ordinary length"),
            "createdAt": at, "updatedAt": at, "model": "mock", "mode": "ask", "thoughtLevel": null,
        });
        std::fs::write(dir.join("meta.json"), serde_json::to_vec_pretty(&meta).unwrap()).unwrap();
    }
}

/// One `session/list`; returns its time and the response.
fn list_once(agent: &mut StampedAgent, params: Value) -> (Duration, Value) {
    let (id, sent) = agent.request("session/list", params);
    let (at, response) = agent.response(id, Duration::from_secs(60), |_, _| {});
    (at - sent, response)
}

/// `session/list` over many saved sessions.
pub fn list(opts: &Options, report: &mut Report) {
    let fire = Firehose::start();
    let home = Home::new(&fire.base_url());
    let other = home.path().join("other");
    std::fs::create_dir_all(&other).unwrap();
    let count = opts.list_sessions;
    saved_sessions(home.path(), [&home.project, &other], count);
    let index = home.path().join(".local/share/lathe/sessions.index.json");

    let mut first_without_index = Vec::new();
    let mut first_with_index = Vec::new();
    let mut warm = Vec::new();
    let mut paged = Vec::new();
    let mut filtered = Vec::new();
    let mut listed_all = 0usize;
    for run in 0..opts.list_process_runs {
        if run == 0 {
            std::fs::remove_file(&index).ok();
        }
        let mut agent = home.spawn(opts);
        agent.initialize();
        let (took, _) = list_once(&mut agent, json!({}));
        if run == 0 {
            first_without_index.push(ms(took));
        } else {
            first_with_index.push(ms(took));
        }
        for _ in 0..opts.list_runs {
            warm.push(ms(list_once(&mut agent, json!({})).0));
            filtered.push(ms(list_once(&mut agent, json!({"cwd": home.project})).0));
        }
        // Every page, by cursor.
        let mut cursor = Value::Null;
        let mut seen = 0usize;
        loop {
            let params = if cursor.is_null() { json!({}) } else { json!({"cursor": cursor}) };
            let (took, response) = list_once(&mut agent, params);
            paged.push(ms(took));
            seen += response["result"]["sessions"].as_array().map_or(0, Vec::len);
            cursor = response["result"]["nextCursor"].clone();
            if cursor.is_null() || seen > count * 2 {
                break;
            }
        }
        listed_all = seen;
        // Let the index reach the disk before the next process starts.
        std::thread::sleep(Duration::from_millis(if opts.smoke { 50 } else { 2500 }));
    }
    report.check(
        "list.pages_cover_every_session",
        listed_all == count,
        format!("paging by nextCursor listed {listed_all} of {count} sessions"),
    );
    report.figures.push(Figure::new(
        "list.first_no_index_ms",
        &format!("List: first `session/list` of a process, {count} sessions, no index yet"),
        "ms",
        first_without_index,
    ));
    report.figures.push(Figure::new(
        "list.first_ms",
        &format!("List: first `session/list` of a process, {count} sessions, index saved"),
        "ms",
        first_with_index,
    ));
    report.figures.push(
        Figure::new("list.warm_ms", &format!("List: `session/list` over {count} sessions, first page"), "ms", warm)
            .at_most(Stat::Median, 50.0),
    );
    report.figures.push(
        Figure::new(
            "list.cwd_ms",
            &format!("List: `session/list` with a `cwd` filter ({} match)", count / 2),
            "ms",
            filtered,
        )
        .at_most(Stat::Median, 50.0),
    );
    report.figures.push(Figure::new("list.page_ms", "List: every page by `nextCursor`", "ms", paged));
    report.notes.push(format!(
        "List: {count} session folders written by the bench (meta.json as lathe writes it, half in each of two \
         cwds), {} processes: the first starts with no index, the others with the one the previous saved. Time \
         from writing `session/list` to reading its response (pages of 50).",
        opts.list_process_runs
    ));
}

// ---------------------------------------------------------------------------
// Many sessions streaming at once.
// ---------------------------------------------------------------------------

/// Relay latencies of `sessions` sessions streaming `deltas` deltas each at
/// once (every `gap`); with `cancels`, one more session is prompted and
/// cancelled again and again meanwhile. Returns (latencies in µs, per-session
/// time from its first delta sent to its last chunk read in ms, cancel times in ms,
/// deltas missing, cancels not answered `cancelled`).
fn streaming_at_once(
    opts: &Options,
    sessions: usize,
    deltas: usize,
    gap: Duration,
    cancels: bool,
) -> (Vec<f64>, Vec<f64>, Vec<f64>, usize, usize) {
    let fire = Firehose::start();
    let home = Home::new(&fire.base_url());
    let mut agent = home.spawn(opts);
    agent.initialize();
    let ids: Vec<String> = (0..sessions).map(|_| agent.new_session(&home.project)).collect();
    let canceller = cancels.then(|| agent.new_session(&home.project));
    // Warm-up: the connection pool and code paths.
    firehose_turn(&mut agent, &fire, &ids[0], 50, None);
    let mut sent_times = HashMap::new();
    let mut prompts = HashMap::new();
    for (n, session) in ids.iter().enumerate() {
        let (sender, receiver) = mpsc::channel();
        let key = format!("stream-{n}-now");
        fire.push(Reply { sent: Some(sender), ..Reply::stream(deltas, Some(gap), Some(key.clone())) });
        let (id, _) = agent.prompt(session, &key);
        prompts.insert(id, session.clone());
        sent_times.insert(session.clone(), receiver);
    }
    let mut arrivals: HashMap<String, Vec<Option<Instant>>> =
        ids.iter().map(|s| (s.clone(), vec![None; deltas])).collect();
    let mut answered = 0usize;
    let mut seqs = Vec::new();
    let mut rng = Rng(opts.seed);
    let mut cancel_times = Vec::new();
    let mut not_cancelled = 0usize;
    // The canceller's state: its prompt id, and when to cancel (after its first chunk).
    let mut cycle = 0usize;
    let mut current: Option<(i64, Option<Instant>, Option<Instant>)> = None;
    let deadline = Instant::now() + Duration::from_secs(120) + gap * u32::try_from(deltas * 4).unwrap_or(u32::MAX);
    while answered < sessions {
        if let Some(canceller) = &canceller
            && current.is_none()
        {
            let key = format!("cancel-{cycle}-now");
            cycle += 1;
            fire.push(Reply::stream(100_000, Some(gap), Some(key.clone())));
            let (id, _) = agent.prompt(canceller, &key);
            current = Some((id, None, None));
        }
        let wait = match current {
            Some((_, Some(at), None)) => at.saturating_duration_since(Instant::now()),
            _ => Duration::from_secs(1),
        };
        assert!(Instant::now() < deadline, "the streams did not finish\n{}", agent.stderr());
        if let Some((id, Some(at), None)) = current
            && Instant::now() >= at
        {
            let sent = agent.send(&json!({"jsonrpc": "2.0", "method": "session/cancel",
                "params": {"sessionId": canceller.as_ref().unwrap()}}));
            current = Some((id, Some(at), Some(sent)));
            continue;
        }
        let Some((at, line)) = agent.next_line(wait) else { continue };
        if let Some((id, _, cancel_sent)) = current
            && is_response(&line, id)
        {
            if let Some(sent) = cancel_sent {
                cancel_times.push(ms(at - sent));
            }
            not_cancelled += usize::from(!line.contains("\"cancelled\""));
            current = None;
            continue;
        }
        let Some(session) = session_of(&line) else {
            // A response: one of the streams ended.
            if let Ok(message) = serde_json::from_str::<Value>(&line)
                && let Some(id) = message["id"].as_i64()
                && prompts.contains_key(&id)
            {
                answered += 1;
            }
            continue;
        };
        if let Some((id, None, None)) = current
            && Some(session) == canceller.as_deref()
            && line.contains("agent_message_chunk")
        {
            let delay = Duration::from_millis(rng.below(50));
            current = Some((id, Some(Instant::now() + delay), None));
            continue;
        }
        if let Some(slots) = arrivals.get_mut(session) {
            seqs.clear();
            chunk_sequence_numbers(&line, &mut seqs);
            for &seq in &seqs {
                if let Some(slot) = slots.get_mut(seq)
                    && slot.is_none()
                {
                    *slot = Some(at);
                }
            }
        }
    }
    // Let the canceller's last turn finish.
    if let Some((id, _, _)) = current {
        agent.send(&json!({"jsonrpc": "2.0", "method": "session/cancel",
            "params": {"sessionId": canceller.as_ref().unwrap()}}));
        agent.response(id, Duration::from_secs(30), |_, _| {});
    }
    let mut latencies = Vec::new();
    let mut spans = Vec::new();
    let mut missing = 0usize;
    for session in &ids {
        let sent = sent_times[session].recv_timeout(Duration::from_secs(30)).expect("send times");
        let slots = &arrivals[session];
        for (seq, arrival) in slots.iter().enumerate() {
            match (arrival, sent.get(seq)) {
                (Some(arrived), Some(sent)) => latencies.push(us(arrived.saturating_duration_since(*sent))),
                _ => missing += 1,
            }
        }
        if let (Some(last), Some(first)) = (slots.iter().flatten().max(), sent.first()) {
            spans.push(ms(last.saturating_duration_since(*first)));
        }
    }
    (latencies, spans, cancel_times, missing, not_cancelled)
}

/// Many sessions streaming at once in one process.
pub fn many(opts: &Options, report: &mut Report) {
    let (deltas, gap, sessions) = (opts.many_deltas, opts.many_gap, opts.many_sessions);
    let (single, _, _, single_missing, _) = streaming_at_once(opts, 1, deltas, gap, false);
    let single_p99 = Figure::new("x", "x", "µs", single.clone()).summary().p99;
    let (latencies, spans, cancels, missing, not_cancelled) = streaming_at_once(opts, sessions, deltas, gap, true);
    report.check(
        "many.every_delta_relayed",
        missing == 0 && single_missing == 0,
        format!(
            "{missing} of {} deltas missing with {sessions} sessions, {single_missing} with one",
            deltas * sessions
        ),
    );
    report.check(
        "many.cancels_answered_cancelled",
        not_cancelled == 0,
        format!(
            "{} of {} cancelled prompts answered `cancelled`",
            cancels.len() - not_cancelled.min(cancels.len()),
            cancels.len()
        ),
    );
    let spread: Vec<f64> = match (spans.iter().copied().reduce(f64::min), spans.iter().copied().reduce(f64::max)) {
        (Some(min), Some(max)) if min > 0.0 => vec![max / min],
        _ => Vec::new(),
    };
    report.figures.push(Figure::new(
        "many.single_latency_us",
        &format!("Many: relay latency, 1 session ({deltas} deltas every {} ms)", gap.as_millis()),
        "µs",
        single,
    ));
    report.figures.push(
        Figure::new("many.latency_us", &format!("Many: relay latency, {sessions} sessions at once"), "µs", latencies)
            .at_most(Stat::P99, 2.0 * single_p99),
    );
    report.figures.push(
        Figure::new(
            "many.span_spread",
            &format!("Many: slowest / fastest session, first delta sent → last chunk read ({sessions} sessions)"),
            "×",
            spread,
        )
        .at_most(Stat::Max, 2.0),
    );
    report.figures.push(
        Figure::new("many.cancel_ms", "Many: cancel of one more session while the others stream", "ms", cancels)
            .at_most(Stat::P99, 10.0),
    );
    report.notes.push(format!(
        "Many: one process, {sessions} sessions each prompted at once and answered by its own firehose stream of \
         {deltas} deltas with a {} ms pause after each; latency per delta as in the relay section. The budget for \
         {sessions} sessions is 2× the single-session p99 measured just before ({}). Meanwhile one more session is \
         prompted (an endless stream), cancelled 0-49 ms after its first chunk, and prompted again; cancel time is \
         `session/cancel` written → `cancelled` read.",
        gap.as_millis(),
        super::number(single_p99)
    ));
}

// ---------------------------------------------------------------------------
// Many sessions created and closed.
// ---------------------------------------------------------------------------

/// `session/new` + `session/close`, many times in one process.
pub fn churn(opts: &Options, report: &mut Report) {
    let fire = Firehose::start();
    let home = Home::new(&fire.base_url());
    let mut agent = home.spawn(opts);
    agent.initialize();
    // Warm-up: one session with a turn, so the start figure includes a used process.
    let first = agent.new_session(&home.project);
    firehose_turn(&mut agent, &fire, &first, 10, None);
    close(&mut agent, &first);
    std::thread::sleep(Duration::from_millis(200));
    let pid = agent.pid();
    let start_rss = procfs::rss(pid).current_kib;
    let start_fds = open_fds(pid);
    let started = Instant::now();
    let count = opts.churn_sessions;
    for _ in 0..count {
        let session = agent.new_session(&home.project);
        close(&mut agent, &session);
    }
    let took = started.elapsed();
    // Closed logs and the index's save settle within the writer's timers.
    std::thread::sleep(Duration::from_millis(if opts.smoke { 50 } else { 2500 }));
    let end_rss = procfs::rss(pid).current_kib;
    let end_fds = open_fds(pid);
    report.check(
        "churn.fds_back",
        end_fds <= start_fds,
        format!("open file descriptors: {start_fds} before {count} sessions created and closed, {end_fds} after"),
    );
    report.figures.push(
        Figure::new(
            "churn.rss_growth_mib",
            &format!("Churn: RSS growth over {count} `session/new` + `session/close`"),
            "MiB",
            vec![mib(end_rss) - mib(start_rss)],
        )
        .at_most(Stat::Max, 5.0),
    );
    report.figures.push(Figure::new("churn.rss_end_mib", "Churn: RSS after them", "MiB", vec![mib(end_rss)]));
    report.figures.push(Figure::new(
        "churn.per_session_ms",
        "Churn: one `session/new` + `session/close`, mean",
        "ms",
        vec![ms(took) / count as f64],
    ));
    report.notes.push(format!(
        "Churn: one process; RSS and /proc/<pid>/fd counted after a first session with a turn was closed, and 2.5 s \
         after {count} `session/new` + `session/close` pairs sent one after the other."
    ));
}
