//! The user's files, end to end: writes are atomic
//! even when the agent is SIGKILLed in the middle of them, a change the user
//! makes between the model's read and its edit is not overwritten, and
//! hostile paths (devices, FIFOs, NUL, file names that are not UTF-8) fail
//! fast or work without taking the agent down.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::acp_client::{Agent, final_status, handshake, prompt};
use crate::support::clock::FrozenClock;
use crate::support::editor::{FakeEditor, Permission};
use crate::support::harness::Harness;
use crate::support::mock_openai::{
    MockOpenAi, Reply, Step, ev_finish, ev_role, ev_tool_call_args, ev_tool_call_start, ev_usage, text_reply,
    tool_call_reply, tool_result,
};
use crate::support::testing;
use crate::support::write_config;

async fn set_mode(agent: &mut Agent, session: &str, mode: &str) {
    let id = agent.request("session/set_mode", json!({"sessionId": session, "modeId": mode})).await;
    let (_, response) = agent.response(id).await;
    assert!(response.get("result").is_some(), "{response}");
}

/// A small deterministic generator (xorshift64*), so a failing run can be replayed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, bound: u64) -> u64 {
        self.next() % bound.max(1)
    }
}

/// `lines` lines of 63 copies of `letter`.
fn uniform_text(letter: char, lines: usize) -> String {
    format!("{}\n", letter.to_string().repeat(63)).repeat(lines)
}

/// The model's call rewriting every line of a file of `from` lines into
/// `to` lines, with `edit_file`'s `replace_all` (the whole file changes, yet
/// the arguments stay small) or, when `content` is given, with `write_file`.
fn rewrite_reply(path: &str, from: char, to: char, content: Option<&str>) -> Reply {
    let (name, args) = match content {
        Some(content) => ("write_file", json!({"path": path, "content": content}).to_string()),
        None => (
            "edit_file",
            json!({
                "path": path,
                "old_string": uniform_text(from, 1),
                "new_string": uniform_text(to, 1),
                "replace_all": true,
            })
            .to_string(),
        ),
    };
    assert!(args.is_ascii(), "byte pieces are char pieces");
    // Streamed in 64 KiB pieces, as a model streams arguments (the usual
    // helper is too slow for megabytes).
    let mut steps = vec![ev_role(), ev_tool_call_start(0, "call_w", name)];
    steps.extend(
        args.as_bytes().chunks(64 * 1024).map(|piece| ev_tool_call_args(0, std::str::from_utf8(piece).unwrap())),
    );
    steps.extend([ev_finish("tool_calls"), ev_usage(10, 10), Step::Done]);
    Reply::Sse(steps)
}

/// The temporary files a write to `name` leaves in `dir` while it runs.
fn temporaries(dir: &Path, name: &str) -> Vec<PathBuf> {
    let prefix = format!(".{name}.");
    std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .filter(|entry| {
            let entry_name = entry.file_name().to_string_lossy().into_owned();
            entry_name.starts_with(&prefix) && entry_name.ends_with(".lathe-tmp")
        })
        .map(|entry| entry.path())
        .collect()
}

/// Where a file stands after a kill.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Found {
    Old,
    New,
}

fn classify(path: &Path, old: &str, new: &str, round: usize) -> Found {
    let bytes = std::fs::read(path).unwrap();
    if bytes == old.as_bytes() {
        return Found::Old;
    }
    if bytes == new.as_bytes() {
        return Found::New;
    }
    let differs =
        |text: &str| bytes.iter().zip(text.as_bytes()).position(|(a, b)| a != b).unwrap_or(bytes.len().min(text.len()));
    panic!(
        "round {round}: the file is neither the old nor the new content: {} bytes (old {}, new {}), first \
         difference at byte {} from the old and {} from the new",
        bytes.len(),
        old.len(),
        new.len(),
        differs(old),
        differs(new)
    );
}

/// Watches for the temporary file of a write to `name` on a thread of its
/// own and, `delay` after it appears (or at once, if the write was done
/// before it was seen), SIGKILLs `pid`. For a calibration run (no `pid`)
/// returns how long the temporary file lived.
fn kill_during_write(dir: PathBuf, name: String, pid: Option<u32>, delay: Duration) -> Duration {
    let deadline = Instant::now() + Duration::from_secs(60);
    // The atomic rename puts a new inode in place (mtimes can tie: coarse clock).
    let inode = || lathe::platform::stamp::FileId::of_path(&dir.join(&name)).ok();
    let before = inode();
    while temporaries(&dir, &name).is_empty() {
        assert!(Instant::now() < deadline, "no write of {name} started");
        // A small write can live and be renamed between two looks: then the
        // kill lands after it (for a killing round), which is a case too.
        if pid.is_some() && inode() != before {
            break;
        }
        std::thread::sleep(Duration::from_micros(100));
    }
    let appeared = Instant::now();
    let Some(pid) = pid else {
        while !temporaries(&dir, &name).is_empty() {
            assert!(Instant::now() < deadline, "the write of {name} never finished");
            std::thread::sleep(Duration::from_micros(100));
        }
        return appeared.elapsed();
    };
    std::thread::sleep(delay);
    testing::kill(pid).unwrap();
    delay
}

/// The agent is SIGKILLed at random moments while it writes large files; the
/// file is always exactly the old or exactly the new content, and nothing but
/// hidden temporary files is ever left beside it.
///
/// Each round starts a fresh agent in full-auto mode on a file of 2–8 MiB of
/// `A` lines; the model turns every line into `B`s with one `edit_file` call
/// (`replace_all`), so the whole file changes while the call stays small.
/// Every fourth round rewrites a 512 KiB file with `write_file` instead (its
/// content travels through the model stream, ACP updates and the session
/// journal, all slow in a debug build, hence the smaller size). A thread watches for the write's temporary file
/// and kills the agent a seeded random delay after it appears, spread over
/// the temporary file's measured lifetime (write, fsync, rename) scaled to
/// the size, plus a quarter, so some kills land just after the rename.
///
/// The stress tier: it asserts that kills landed before, after and in the
/// middle of a write, a timing property a loaded machine may need dozens of
/// rounds (and seconds) to show. `.ci/run` runs it as a step of its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "stress tier: .ci/run runs it with `cargo test -- --ignored`"]
async fn sigkill_during_large_writes_never_leaves_a_torn_file() {
    // At least ROUNDS kills; more (up to MAX_ROUNDS) until kills have landed
    // before the rename, after it, and in the middle of writing: timing on a
    // loaded machine varies, and a run that never hit the write proves nothing.
    const ROUNDS: usize = 20;
    const MAX_ROUNDS: usize = 60;
    const LINE: usize = 64;
    const MIB_LINES: usize = 1024 * 1024 / LINE;
    let seed = 0x5eed_f11e_5afe_0001;
    let mut rng = Rng(seed);
    let mut h = Harness::process("", &[]).await;
    let config = h.home.path().join("config.toml").to_string_lossy().into_owned();
    let name = "big.txt";
    let target = h.project.join(name);

    let started = Instant::now();
    // How long the temporary file of a write lives, per byte: measured by an
    // uninterrupted first round, then nudged after every kill (longer after
    // one that landed before the rename, shorter after one that landed after
    // it), because disk flushes vary a lot from one write to the next.
    let mut lifetime_per_byte = 0.0;
    let mut measured_per_byte = 0.0;
    let mut tally = std::collections::BTreeMap::<(&str, Found), usize>::new();
    let (mut leftovers, mut partial_leftovers, mut total_bytes) = (0, 0, 0);
    let count = |tally: &std::collections::BTreeMap<(&str, Found), usize>, found| {
        tally.iter().filter(|((_, f), _)| *f == found).map(|(_, n)| n).sum::<usize>()
    };
    let mut rounds = 0;
    for round in 0..=MAX_ROUNDS {
        if round > ROUNDS && count(&tally, Found::Old) > 0 && count(&tally, Found::New) > 0 && partial_leftovers > 0 {
            break;
        }
        rounds = round;
        let calibrating = round == 0;
        let by_write = round % 4 == 3;
        let lines = if by_write { MIB_LINES / 2 } else { MIB_LINES * (2 + usize::try_from(rng.below(7)).unwrap()) };
        let (old, new) = (uniform_text('A', lines), uniform_text('B', lines));
        std::fs::write(&target, &old).unwrap();
        total_bytes += new.len();
        if !calibrating {
            // A fresh mock each round: it keeps every request it receives.
            h.mock = MockOpenAi::start().await;
            write_config(h.home.path(), &h.mock.base_url(), "");
            h.agent = h.agent_with(&["--config", &config]);
        }
        let session = handshake(&mut h.agent, json!({}), &h.project).await;
        set_mode(&mut h.agent, &session, "full-auto").await;
        if by_write {
            // A write over a file the model has not read is refused, so it reads first.
            h.mock.push(tool_call_reply(&[("call_r", "read_file", json!({"path": name, "limit": 1}))]));
        }
        h.mock.push(rewrite_reply(name, 'A', 'B', by_write.then_some(new.as_str())));
        // One kill in four as soon as the temporary file appears, while it is
        // being written; the others anywhere in its lifetime or a bit after.
        let window = Duration::from_secs_f64(lifetime_per_byte * new.len() as f64 * 1.5);
        let delay = match rng.below(4) {
            0 => Duration::ZERO,
            _ => Duration::from_micros(rng.below(u64::try_from(window.as_micros()).unwrap() + 1)),
        };
        let pid = (!calibrating).then(|| h.agent.pid());
        let watcher = {
            let (dir, name) = (h.project.clone(), name.to_owned());
            tokio::task::spawn_blocking(move || kill_during_write(dir, name, pid, delay))
        };
        if calibrating {
            h.mock.push(text_reply("rewritten"));
            h.agent.set_timeout(Duration::from_secs(60));
        }
        let prompt_id = prompt(&mut h.agent, &session, "rewrite it").await;
        if calibrating {
            let (messages, response) = h.agent.response(prompt_id).await;
            assert_eq!(response["result"]["stopReason"], "end_turn", "{response}");
            assert_eq!(final_status(&messages, "call_w"), "completed");
            lifetime_per_byte = watcher.await.unwrap().as_secs_f64() / new.len() as f64;
            measured_per_byte = lifetime_per_byte;
            assert_eq!(classify(&target, &old, &new, round), Found::New);
            continue;
        }
        watcher.await.unwrap();
        let exit = h.agent.wait_exit(Duration::from_secs(10)).await.expect("the killed agent exits");
        assert!(!exit.success(), "the agent was killed, not finished: {exit:?}");

        let found = classify(&target, &old, &new, round);
        lifetime_per_byte *= if found == Found::Old { 1.25 } else { 0.8 };
        *tally.entry((if by_write { "write_file" } else { "edit_file" }, found)).or_default() += 1;
        // Beside the target there are only hidden temporary files of killed writes.
        let names: Vec<OsString> = std::fs::read_dir(&h.project).unwrap().flatten().map(|e| e.file_name()).collect();
        let temps = temporaries(&h.project, name);
        assert_eq!(names.len(), 1 + temps.len(), "unexpected files: {names:?}");
        for temp in temps {
            leftovers += 1;
            if std::fs::metadata(&temp).unwrap().len() < new.len() as u64 {
                partial_leftovers += 1;
            }
            // The agent removes leftovers only once they are stale (a write
            // might still own a fresh one); the test tidies up at once.
            std::fs::remove_file(temp).unwrap();
        }
    }
    eprintln!(
        "crash test: seed {seed:#x}, {rounds} kills, {} MiB written in all, temporary file lifetime {:.1} ms/MiB \
         measured, {:.1} ms/MiB at the end: {tally:?}; {leftovers} temporary files left behind ({partial_leftovers} \
         partly written); {:?} in all",
        total_bytes >> 20,
        measured_per_byte * 1024.0 * 1024.0 * 1000.0,
        lifetime_per_byte * 1024.0 * 1024.0 * 1000.0,
        started.elapsed()
    );
    assert!(
        count(&tally, Found::Old) > 0 && count(&tally, Found::New) > 0,
        "kills land before and after the rename: {tally:?}"
    );
    assert!(partial_leftovers > 0, "some kills land in the middle of writing the temporary file");
}

/// The user edits a file between two prompts: the model's next edit, based on
/// what it read before, is refused with the current text, and redone on it.
#[tokio::test]
async fn a_change_the_user_made_since_the_model_read_is_not_overwritten() {
    let mut h = Harness::start().await;
    let path = h.project.join("config.toml");
    std::fs::write(&path, "debug = false\nport = 8080\n").unwrap();
    let session = h.session().await;
    set_mode(&mut h.agent, &session, "accept-edits").await;

    h.mock.push(tool_call_reply(&[("call_r", "read_file", json!({"path": "config.toml"}))]));
    h.mock.push(text_reply("I see the port."));
    let id = prompt(&mut h.agent, &session, "what port?").await;
    let (_, response) = h.agent.response(id).await;
    assert_eq!(response["result"]["stopReason"], "end_turn");

    // The user changes the file in their editor.
    std::fs::write(&path, "debug = true\nport = 8080\n").unwrap();

    let edit = json!({"path": "config.toml", "old_string": "port = 8080", "new_string": "port = 9090"});
    h.mock.push(tool_call_reply(&[("call_e1", "edit_file", edit.clone())]));
    h.mock.push(tool_call_reply(&[("call_e2", "edit_file", edit)]));
    h.mock.push(text_reply("Port changed."));
    let id = prompt(&mut h.agent, &session, "use port 9090").await;
    let mut editor = FakeEditor::default();
    let (messages, response) = h.agent.response_answering(id, |request| editor.answer(request)).await;
    assert_eq!(response["result"]["stopReason"], "end_turn");
    assert_eq!(final_status(&messages, "call_e1"), "failed");
    assert_eq!(final_status(&messages, "call_e2"), "completed");

    let requests = h.mock.requests();
    let refused = tool_result(&requests[3].body, "call_e1");
    assert!(refused.starts_with("config.toml changed since you last read it"), "{refused}");
    assert!(refused.contains("     1\tdebug = true\n     2\tport = 8080"), "the current text: {refused}");
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "debug = true\nport = 9090\n", "both changes are kept");
}

/// Devices, FIFOs and NUL paths fail at once with a clear message; the turn
/// goes on. A read that waited on the FIFO (no writer ever comes) or read
/// `/dev/zero` to its end would never finish: the response wait's bound
/// fails the test; under a frozen clock no timeout can cut such a wait short.
#[tokio::test(start_paused = true)]
async fn hostile_paths_fail_fast_and_the_turn_goes_on() {
    let _clock = FrozenClock::hold().await;
    let mut h = Harness::start().await;
    let fifo = h.project.join("pipe");
    if !testing::fifo(&fifo) || !testing::devices() {
        return;
    }
    let session = h.session().await;
    set_mode(&mut h.agent, &session, "full-auto").await;
    h.mock.push(tool_call_reply(&[
        ("call_zero", "read_file", json!({"path": "/dev/zero"})),
        ("call_random", "read_file", json!({"path": "/dev/urandom"})),
        ("call_fifo", "read_file", json!({"path": "pipe"})),
        ("call_fifo_w", "write_file", json!({"path": "pipe", "content": "x"})),
        ("call_nul", "write_file", json!({"path": "a\u{0}b.txt", "content": "x"})),
        ("call_up", "read_file", json!({"path": "../../../../../../etc/hostname"})),
    ]));
    h.mock.push(text_reply("done"));
    let id = prompt(&mut h.agent, &session, "poke around").await;
    let (messages, response) = h.agent.response(id).await;
    assert_eq!(response["result"]["stopReason"], "end_turn");
    let body = &h.mock.requests()[1].body;
    for (call, expected) in [
        ("call_zero", "/dev/zero is a device, not a regular file"),
        ("call_random", "/dev/urandom is a device, not a regular file"),
        ("call_fifo", "pipe is a named pipe (FIFO), not a regular file"),
        ("call_fifo_w", "pipe is a named pipe (FIFO), not a regular file; refusing to replace it"),
        ("call_nul", "contains a NUL character"),
    ] {
        assert_eq!(final_status(&messages, call), "failed", "{call}");
        let result = tool_result(body, call);
        assert!(result.contains(expected), "{call}: {result}");
    }
    // `..` resolves to /etc/hostname, outside the project: full-auto reads it
    // (other modes ask), and the title says where it really is.
    let titles: Vec<&str> = messages
        .iter()
        .filter(|m| m["params"]["update"]["toolCallId"] == "call_up")
        .filter_map(|m| m["params"]["update"]["title"].as_str())
        .collect();
    assert!(titles.contains(&"Read /etc/hostname"), "{titles:?}");
    assert!(!h.project.join("a").exists() && std::fs::read_dir(&h.project).unwrap().count() == 1);
}

/// File names that are not UTF-8 do not break the search tools: each call
/// answers the model, naming the odd file as best it can, the other files
/// are still found, and the agent goes on serving.
#[tokio::test]
async fn file_names_that_are_not_utf8_do_not_break_the_search_tools() {
    let Some((mut h, session, messages)) = search_a_project_with_a_latin1_file_name().await else { return };
    let body = &h.mock.requests()[1].body;
    for call in ["call_ls", "call_glob", "call_grep"] {
        let result = tool_result(body, call);
        assert!(result.contains("plain.txt"), "{call}: {result}");
        assert!(result.contains("caf\u{FFFD}.txt"), "{call} names the odd file as best it can: {result}");
    }
    for call in ["call_ls", "call_glob"] {
        assert_eq!(final_status(&messages, call), "completed", "{call}");
    }
    h.mock.push(text_reply("still here"));
    let id = prompt(&mut h.agent, &session, "again").await;
    let (_, response) = h.agent.response(id).await;
    assert_eq!(response["result"]["stopReason"], "end_turn", "{response}");
}

/// The editor is told that every search call finished, even one whose final
/// update names a file that is not UTF-8: a path JSON cannot carry must not
/// make the whole update unencodable (it once did, for `grep`'s locations,
/// and the editor showed the call running forever).
#[tokio::test]
async fn search_calls_over_non_utf8_names_are_reported_finished() {
    let Some((_h, _session, messages)) = search_a_project_with_a_latin1_file_name().await else { return };
    for call in ["call_ls", "call_glob", "call_grep"] {
        assert_eq!(final_status(&messages, call), "completed", "{call}");
    }
}

/// A project with `café.txt` spelled in Latin-1 (not UTF-8; on Windows with
/// an unpaired surrogate for the é) and `plain.txt`, both containing
/// "needle", after one turn listing, globbing and grepping it; `None` where
/// the file system keeps no such name.
async fn search_a_project_with_a_latin1_file_name() -> Option<(Harness, String, Vec<Value>)> {
    let mut h = Harness::start().await;
    testing::non_unicode_file(&h.project, "caf", ".txt", "needle in latin-1 land\n")?;
    std::fs::write(h.project.join("plain.txt"), "needle at home\n").unwrap();
    let session = h.session().await;
    h.mock.push(tool_call_reply(&[
        ("call_ls", "list_directory", json!({"path": "."})),
        ("call_glob", "glob", json!({"pattern": "**/*.txt"})),
        ("call_grep", "grep", json!({"pattern": "needle"})),
    ]));
    h.mock.push(text_reply("found"));
    let id = prompt(&mut h.agent, &session, "find the needles").await;
    let (messages, response) = h.agent.response(id).await;
    assert_eq!(response["result"]["stopReason"], "end_turn", "{response}");
    Some((h, session, messages))
}

/// An approval is never spent on a call that cannot happen (issue 29): in
/// `ask` mode, through an editor that serves `fs/*` (as CodeCompanion and
/// agent-shell do), every refusal that does not depend on the user's answer
/// is decided before the question, and then nothing is asked: a write over
/// a file the model has not read, an edit whose text is not in the file, a
/// read of a directory outside the project, a command in a directory that
/// does not exist. The model's second write (it has the text now) asks once
/// and writes.
#[tokio::test]
async fn refusals_that_do_not_depend_on_the_answer_ask_nothing() {
    let mut h = Harness::start().await;
    let notes = h.project.join("notes.md");
    std::fs::write(&notes, "keep me\n").unwrap();
    let outside = tempfile::tempdir().unwrap();
    let outside_dir = outside.path().join("dir");
    std::fs::create_dir(&outside_dir).unwrap();
    let session = h.session_with(json!({"fs": {"readTextFile": true, "writeTextFile": true}})).await;
    let write = json!({"path": "notes.md", "content": "replaced\n"});
    h.mock.push(tool_call_reply(&[
        ("call_w1", "write_file", write.clone()),
        ("call_e", "edit_file", json!({"path": "notes.md", "old_string": "not there", "new_string": "x"})),
        ("call_r", "read_file", json!({"path": outside_dir.to_string_lossy()})),
        ("call_s", "shell", json!({"command": "ls", "cwd": "no/such/dir"})),
    ]));
    h.mock.push(tool_call_reply(&[("call_w2", "write_file", write)]));
    h.mock.push(text_reply("Replaced."));
    let id = prompt(&mut h.agent, &session, "replace the notes").await;
    let mut editor = FakeEditor::answering(&[Permission::Select("allow_once")]);
    let (messages, response) = h.agent.response_answering(id, |request| editor.answer(request)).await;
    assert_eq!(response["result"]["stopReason"], "end_turn", "{response}");

    let asked = editor.requests_for("session/request_permission");
    assert_eq!(asked.len(), 1, "only the write that can happen asks: {asked:?}");
    assert_eq!(asked[0]["params"]["toolCall"]["toolCallId"], "call_w2");
    for refused in ["call_w1", "call_e", "call_r", "call_s"] {
        assert_eq!(final_status(&messages, refused), "failed", "{refused}");
    }
    assert_eq!(final_status(&messages, "call_w2"), "completed");
    let first = &h.mock.requests()[1].body;
    let unread = tool_result(first, "call_w1");
    assert!(unread.starts_with("notes.md already exists and you have not read it yet"), "{unread}");
    assert!(unread.contains("     1\tkeep me"), "the current text: {unread}");
    assert!(tool_result(first, "call_e").contains("was not found"), "{}", tool_result(first, "call_e"));
    assert!(tool_result(first, "call_r").contains("is a directory"), "{}", tool_result(first, "call_r"));
    assert!(tool_result(first, "call_s").contains("Cannot run in"), "{}", tool_result(first, "call_s"));
    assert_eq!(std::fs::read_to_string(&notes).unwrap(), "replaced\n");
}

/// The stale-file rule and the size cap are decided before the question too
/// (issue 29): in `ask` mode, a write over a file that changed in the editor
/// since the model read it, and a read of a file outside the project past
/// the size cap, are refused with nothing asked (the editor would allow
/// both), and nothing is written.
#[tokio::test]
async fn stale_and_oversized_files_are_refused_before_asking() {
    // Stale: the user changes the buffer after the model's read.
    let mut h = Harness::start().await;
    let notes = h.project.join("notes.md");
    std::fs::write(&notes, "keep me\n").unwrap();
    let session = h.session_with(json!({"fs": {"readTextFile": true, "writeTextFile": true}})).await;
    h.mock.push(tool_call_reply(&[("call_r", "read_file", json!({"path": "notes.md"}))]));
    h.mock.push(tool_call_reply(&[("call_w", "write_file", json!({"path": "notes.md", "content": "replaced\n"}))]));
    h.mock.push(text_reply("Changed meanwhile."));
    let id = prompt(&mut h.agent, &session, "replace the notes").await;
    let mut editor = FakeEditor::answering(&[Permission::Select("allow_once")]);
    let (messages, response) = h
        .agent
        .response_answering(id, |request| {
            let answer = editor.answer(request);
            if request["method"] == "fs/read_text_file" && request["params"]["path"] == notes.to_str().unwrap() {
                editor.buffers.insert(notes.clone(), "the user's edit\n".to_owned());
            }
            answer
        })
        .await;
    assert_eq!(response["result"]["stopReason"], "end_turn", "{response}");
    assert!(editor.requests_for("session/request_permission").is_empty(), "{:?}", editor.requests);
    assert_eq!(final_status(&messages, "call_w"), "failed");
    let stale = tool_result(&h.mock.chat_requests()[2].body, "call_w");
    assert!(stale.starts_with("notes.md changed since you last read it"), "{stale}");
    assert!(stale.contains("the user's edit"), "the current text: {stale}");
    assert_eq!(std::fs::read_to_string(&notes).unwrap(), "keep me\n");

    // Too large: lathe reads the disk itself (no fs/* from the editor).
    let mut h = Harness::start().await;
    let outside = tempfile::tempdir().unwrap();
    let huge = outside.path().join("huge.log");
    std::fs::File::create(&huge).unwrap().set_len(64 * 1024 * 1024 + 1).unwrap();
    let session = h.session().await;
    h.mock.push(tool_call_reply(&[("call_big", "read_file", json!({"path": huge.to_string_lossy()}))]));
    h.mock.push(text_reply("Too big."));
    let id = prompt(&mut h.agent, &session, "read the log").await;
    let mut editor = FakeEditor::answering(&[Permission::Select("allow_once")]);
    let (messages, response) = h.agent.response_answering(id, |request| editor.answer(request)).await;
    assert_eq!(response["result"]["stopReason"], "end_turn", "{response}");
    assert!(editor.requests.is_empty(), "{:?}", editor.requests);
    assert_eq!(final_status(&messages, "call_big"), "failed");
    let big = tool_result(&h.mock.chat_requests()[1].body, "call_big");
    assert!(big.contains("is too large to read"), "{big}");
}
