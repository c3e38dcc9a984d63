//! `lathe chat` (issue 13) driven through a pseudo-terminal: a prompt
//! streamed and rendered as Markdown, a permission answered by one key, a
//! long command's question that still fits the screen (issue 29), Ctrl-C
//! cancelling a running shell command, Ctrl-D (or Ctrl-C twice at the
//! prompt) quitting with 0, and a clear refusal without a terminal.

use std::process::Stdio;
use std::time::Duration;

use expectrl::process::unix::WaitStatus;
use expectrl::{ControlCode, Expect, Session};
use serde_json::json;

use super::term_exec::Term;
use super::term_exec::sigint::{dead, dies, sleeper, wait_for_pid};
use crate::support::mock_openai::{text_reply, tool_call_reply, tool_result};

type Pty = expectrl::session::OsSession;

/// `lathe chat <args>` on a pseudo-terminal of its own.
fn spawn_chat(term: &Term, args: &[&str]) -> Pty {
    let mut command = term.std_command(&[&["chat"], args].concat());
    command.env("TERM", "xterm-256color");
    let mut pty = Session::spawn(command).expect("spawn lathe chat on a pty");
    pty.set_expect_timeout(Some(Duration::from_secs(30)));
    pty.expect("lathe chat").expect("the banner");
    pty
}

/// Waits for the prompt of the line editor.
fn prompt(pty: &mut Pty) {
    pty.expect("› ").expect("the line editor's prompt");
}

/// Ctrl-D at the prompt: lathe exits 0.
fn quit(pty: &mut Pty) {
    pty.send(ControlCode::EndOfTransmission).unwrap();
    let status = pty.get_process().wait().unwrap();
    assert!(matches!(status, WaitStatus::Exited(_, 0)), "{status:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prompt_is_streamed_and_rendered_and_ctrl_d_quits() {
    let term = Term::start("").await;
    term.mock.push(text_reply("Here is **very bold** text.\n\n- first item\n- second item\n"));
    let pty = tokio::task::spawn_blocking(move || {
        let mut pty = spawn_chat(&term, &[]);
        prompt(&mut pty);
        pty.send_line("explain it").unwrap();
        let seen = pty.expect("second item").unwrap();
        let shown = String::from_utf8_lossy(seen.before()).into_owned();
        assert!(shown.contains("very bold"), "{shown:?}");
        assert!(shown.contains("thinking…"), "a spinner while waiting for the first token: {shown:?}");
        assert!(!shown.contains("**very bold**"), "the Markdown was rendered, not printed: {shown:?}");
        assert!(!shown.contains("- first item"), "list items are rendered as bullets: {shown:?}");
        prompt(&mut pty);
        quit(&mut pty);
        let requests = term.mock.chat_requests();
        assert_eq!(requests.len(), 1);
        // The history file keeps what was typed.
        let history = term.home.path().join(".local/share/lathe/chat_history");
        assert!(std::fs::read_to_string(history).unwrap().contains("explain it"));
        term
    });
    pty.await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_permission_is_answered_by_one_key() {
    let term = Term::start("").await;
    term.mock.push(tool_call_reply(&[("call_w", "write_file", json!({"path": "new.txt", "content": "fresh\n"}))]));
    term.mock.push(text_reply("Written."));
    tokio::task::spawn_blocking(move || {
        let mut command = term.std_command(&["chat"]);
        command.env("TERM", "xterm-256color").env("NO_COLOR", "1");
        let mut pty = Session::spawn(command).expect("spawn lathe chat on a pty");
        pty.set_expect_timeout(Some(Duration::from_secs(30)));
        prompt(&mut pty);
        pty.send_line("make new.txt").unwrap();
        let question = pty.expect("[n]").unwrap();
        let shown = String::from_utf8_lossy(question.before()).into_owned();
        assert!(shown.contains("+fresh"), "the diff is shown before the question: {shown:?}");
        // NO_COLOR on a terminal: no colour or emphasis (the line editor's cursor moves stay).
        assert!(!shown.contains("\u{1b}[38;5") && !shown.contains("\u{1b}[1m"), "no colour with NO_COLOR: {shown:?}");
        assert!(!term.project.join("new.txt").exists(), "nothing written before the answer");
        pty.send("y").unwrap();
        pty.expect("Written.").unwrap();
        prompt(&mut pty);
        assert_eq!(std::fs::read_to_string(term.project.join("new.txt")).unwrap(), "fresh\n");
        quit(&mut pty);
    })
    .await
    .unwrap();
}

/// The question that ends `seen` (from its `? Run` line), as lines.
fn question_lines(seen: &[u8], head: &str) -> Vec<String> {
    let shown = without_escapes(&String::from_utf8_lossy(seen));
    let start = shown.rfind(head).unwrap_or_else(|| panic!("{head:?} in {shown:?}"));
    // Its first line is the first of the two `head` lines (the second is above the keys).
    let start = shown[..start].rfind(head).filter(|first| start - first < 4000).unwrap_or(start);
    shown[start..].split('\n').map(|line| line.trim_end_matches('\r').to_owned()).collect()
}

/// Issue 29: a command whose real first line is followed by 40 blank lines
/// inside a string and 30 more lines cannot push that line off a 24-row
/// terminal: the blank lines are collapsed with a count, the lines are
/// capped with "N more lines, press v to view all", the whole question fits
/// in the rows, and the line right above the keys repeats the command's
/// first line. `v` shows every line, then the title and keys again; `n`
/// rejects, and the command never runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_command_cannot_push_its_first_line_off_the_screen() {
    let term = Term::start("").await;
    let tail: String = (1..=30).map(|n| format!("echo tail {n}\n")).collect();
    let command = format!("touch pwned.txt; echo \"{}harmless\"\n{tail}", "\n".repeat(40));
    term.mock.push(tool_call_reply(&[("call_sh", "shell", json!({"command": command}))]));
    term.mock.push(text_reply("Left alone."));
    tokio::task::spawn_blocking(move || {
        let mut command = term.std_command(&["chat"]);
        command.env("TERM", "xterm-256color").env("NO_COLOR", "1");
        let mut pty = Session::spawn(command).expect("spawn lathe chat on a pty");
        pty.get_process_mut().set_window_size(80, 24).unwrap();
        pty.set_expect_timeout(Some(Duration::from_secs(30)));
        prompt(&mut pty);
        pty.send_line("tidy up").unwrap();
        let head = "? Run `touch pwned.txt; echo \"";
        let asked = pty.expect("[v] View all").unwrap();
        let lines = question_lines(asked.before(), head);
        assert!(lines[0].starts_with(head), "{lines:#?}");
        let rows: usize = lines.iter().map(|line| line.chars().count().div_ceil(80).max(1)).sum();
        assert!(rows < 24, "{rows} rows: {lines:#?}");
        assert!(lines.iter().any(|line| line.contains("… 39 blank lines")), "{lines:#?}");
        assert!(lines.iter().any(|line| line.contains("more lines, press v to view all")), "{lines:#?}");
        assert!(!lines.iter().any(|line| line.contains("echo tail 30")), "capped: {lines:#?}");
        assert!(lines[lines.len() - 2].starts_with(head), "the first line beside the keys: {lines:#?}");

        pty.send("v").unwrap();
        let all = pty.expect("[v] View all").unwrap();
        let lines = question_lines(all.before(), head);
        assert!(lines.iter().any(|line| line.contains("echo tail 30")), "every line: {lines:#?}");
        assert!(lines.iter().filter(|line| line.trim().is_empty()).count() >= 39, "{lines:#?}");
        assert!(lines[lines.len() - 2].starts_with(head), "{lines:#?}");

        pty.send("n").unwrap();
        pty.expect("Left alone.").unwrap();
        prompt(&mut pty);
        quit(&mut pty);
        assert!(!term.project.join("pwned.txt").exists(), "the command never ran");
    })
    .await
    .unwrap();
}

/// `text` without its CSI escape sequences (colours, cursor moves).
fn without_escapes(text: &str) -> String {
    let mut out = String::new();
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' && chars.peek() == Some(&'[') {
            chars.next();
            // Parameters and intermediates, then one final byte in @..~.
            for next in chars.by_ref() {
                if ('@'..='~').contains(&next) {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// `a` remembers "always allow" for file edits (the next write is not
/// asked), `d` remembers "always reject" for that command (it is refused
/// without a question the next time); the plan shows as a checklist.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn always_and_never_are_one_key_and_remembered() {
    let term = Term::start("").await;
    let write = |id: &str, path: &str| tool_call_reply(&[(id, "write_file", json!({"path": path, "content": "x\n"}))]);
    let plan = json!({"plan": [
        {"content": "write the files", "status": "completed"},
        {"content": "run the check", "status": "in_progress"},
        {"content": "report", "status": "pending"},
    ]});
    term.mock.push(write("call_a", "a.txt"));
    term.mock.push(text_reply("First written."));
    term.mock.push(write("call_b", "b.txt"));
    term.mock.push(text_reply("Second written."));
    term.mock.push(tool_call_reply(&[("call_p", "update_plan", plan)]));
    term.mock.push(tool_call_reply(&[("call_c", "shell", json!({"command": "echo checked > c.txt"}))]));
    term.mock.push(text_reply("Check refused."));
    term.mock.push(tool_call_reply(&[("call_d", "shell", json!({"command": "echo checked > c.txt"}))]));
    term.mock.push(text_reply("Refused again."));
    tokio::task::spawn_blocking(move || {
        let mut pty = spawn_chat(&term, &[]);
        prompt(&mut pty);
        pty.send_line("write a").unwrap();
        pty.expect("[n]").unwrap();
        pty.send("a").unwrap();
        pty.expect("First written.").unwrap();
        prompt(&mut pty);
        pty.send_line("write b").unwrap();
        let seen = pty.expect("Second written.").unwrap();
        let shown = String::from_utf8_lossy(seen.before()).into_owned();
        assert!(!shown.contains("[n]"), "file edits are not asked again: {shown:?}");
        assert!(term.project.join("a.txt").exists() && term.project.join("b.txt").exists());
        prompt(&mut pty);

        pty.send_line("plan and check").unwrap();
        let seen = pty.expect("[n]").unwrap();
        let coloured = String::from_utf8_lossy(seen.before()).into_owned();
        assert!(coloured.contains("\u{1b}["), "colour on a terminal (NO_COLOR unset): {coloured:?}");
        let shown = without_escapes(&coloured);
        for item in ["[x] write the files", "[~] run the check", "[ ] report"] {
            assert!(shown.contains(item), "{item:?} in the checklist: {shown:?}");
        }
        pty.send("d").unwrap();
        pty.expect("Check refused.").unwrap();
        prompt(&mut pty);
        pty.send_line("check again").unwrap();
        let seen = pty.expect("Refused again.").unwrap();
        let shown = String::from_utf8_lossy(seen.before()).into_owned();
        assert!(!shown.contains("[n]"), "the rejected command is not asked again: {shown:?}");
        assert!(!term.project.join("c.txt").exists(), "the command never ran");
        prompt(&mut pty);
        quit(&mut pty);
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ctrl_c_cancels_a_running_shell_command() {
    let term = Term::start("").await;
    term.mock.push(sleeper("call_sleep"));
    let runtime = tokio::runtime::Handle::current();
    tokio::task::spawn_blocking(move || {
        let mut pty = spawn_chat(&term, &["--mode", "full-auto"]);
        prompt(&mut pty);
        pty.send_line("build it").unwrap();
        let pid = runtime.block_on(wait_for_pid(&term.project.join("sleeper.pid")));
        assert!(!dead(pid));
        pty.send(ControlCode::EndOfText).unwrap();
        pty.expect("cancelled").unwrap();
        assert!(runtime.block_on(dies(pid)), "the shell command was killed");
        prompt(&mut pty);
        // The session goes on: the next prompt reaches the model with the interrupted turn.
        term.mock.push(text_reply("Fine."));
        pty.send_line("never mind").unwrap();
        pty.expect("Fine.").unwrap();
        prompt(&mut pty);
        quit(&mut pty);
        let requests = term.mock.chat_requests();
        assert_eq!(requests.len(), 2);
        let result = crate::support::mock_openai::tool_result(&requests[1].body, "call_sleep");
        assert!(result.to_lowercase().contains("cancel"), "{result}");
    })
    .await
    .unwrap();
}

/// Ctrl-C at the prompt clears the line and says how to quit; a line typed
/// in between starts over; a second Ctrl-C in a row quits with 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ctrl_c_twice_in_a_row_at_the_prompt_quits() {
    let term = Term::start("").await;
    tokio::task::spawn_blocking(move || {
        let mut pty = spawn_chat(&term, &[]);
        prompt(&mut pty);
        pty.send("half a thought").unwrap();
        pty.send(ControlCode::EndOfText).unwrap();
        pty.expect("Press Ctrl-C again to quit").unwrap();
        prompt(&mut pty);
        pty.send("/mode read-only\r").unwrap();
        pty.expect("Switched to Read only mode").unwrap();
        prompt(&mut pty);
        pty.send(ControlCode::EndOfText).unwrap();
        pty.expect("Press Ctrl-C again to quit").unwrap();
        prompt(&mut pty);
        pty.send(ControlCode::EndOfText).unwrap();
        let status = pty.get_process().wait().unwrap();
        assert!(matches!(status, WaitStatus::Exited(_, 0)), "{status:?}");
        assert!(term.mock.chat_requests().is_empty(), "the cleared line was never sent");
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slash_commands_complete_with_tab_and_run_without_the_model() {
    let term = Term::start("").await;
    tokio::task::spawn_blocking(move || {
        let mut pty = spawn_chat(&term, &[]);
        prompt(&mut pty);
        // Tab completes `/mod` as far as `/mode`; a second Tab lists `/mode` and `/model`.
        pty.send("/mod\t\t").unwrap();
        pty.expect("/model - ").unwrap();
        pty.send(" read-only\r").unwrap();
        pty.expect("Switched to Read only mode").unwrap();
        prompt(&mut pty);
        pty.send("/cle\t\r").unwrap();
        pty.expect("Started a fresh conversation").unwrap();
        prompt(&mut pty);
        quit(&mut pty);
        assert!(term.mock.chat_requests().is_empty(), "built-in commands reach no model");
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_refuses_without_a_terminal_and_points_at_exec() {
    let term = Term::start("").await;
    let output = term.std_command(&["chat"]).stdin(Stdio::null()).stdout(Stdio::piped()).output().unwrap();
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("terminal") && stderr.contains("lathe exec"), "{stderr}");
    assert!(term.mock.chat_requests().is_empty());
}

/// While a turn runs, a line ended with Enter steers it (the model reads it
/// in the turn's next request, and it is shown), one ended with Alt-Enter
/// waits and is the next prompt once the turn is over.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn enter_steers_the_turn_and_alt_enter_queues_the_next_prompt() {
    use crate::support::mock_openai::{
        Gate, Reply, Step, ev_finish, ev_role, ev_text, ev_tool_call_args, ev_tool_call_start,
    };
    let term = Term::start("").await;
    let gate = Gate::new();
    term.mock.push(Reply::Sse(vec![
        ev_role(),
        // A whole Markdown block, so chat renders it before the stream goes on.
        ev_text("Working on it.\n\n"),
        Step::Gate(gate.clone()),
        ev_tool_call_start(0, "call_l", "list_directory"),
        ev_tool_call_args(0, "{}"),
        ev_finish("tool_calls"),
        Step::Done,
    ]));
    term.mock.push(text_reply("Steered answer."));
    term.mock.push(text_reply("Queued answer."));
    tokio::task::spawn_blocking(move || {
        let mut pty = spawn_chat(&term, &[]);
        prompt(&mut pty);
        pty.send_line("start").unwrap();
        pty.expect("Working on it.").unwrap();
        pty.send("also this\r").unwrap();
        pty.send("and then that\u{1b}\r").unwrap();
        pty.expect("queued: and then that").unwrap();
        gate.open();
        pty.expect("Steered answer.").unwrap();
        pty.expect("Queued answer.").unwrap();
        prompt(&mut pty);
        quit(&mut pty);
        let requests = term.mock.chat_requests();
        assert_eq!(requests.len(), 3);
        let users = |n: usize| -> Vec<String> {
            requests[n].body["messages"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|m| m["role"] == "user")
                .map(|m| m["content"].as_str().unwrap().to_owned())
                .collect()
        };
        assert_eq!(users(1), ["start", "also this"], "the steer joined the running turn");
        assert_eq!(users(2).last().map(String::as_str), Some("and then that"), "the queued line came next");
    })
    .await
    .unwrap();
}

/// `/plan <prompt>` plans first: a write is refused without a question, the
/// plan is shown and asked about on the terminal, and choosing to run it
/// in accept-edits writes in the same turn.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slash_plan_plans_and_the_plan_is_approved_on_the_terminal() {
    let term = Term::start("").await;
    let write = json!({"path": "notes.txt", "content": "planned\n"});
    term.mock.push(tool_call_reply(&[("call_w1", "write_file", write.clone())]));
    term.mock.push(tool_call_reply(&[("call_x", "exit_plan_mode", json!({"plan": "1. Write notes.txt"}))]));
    term.mock.push(tool_call_reply(&[("call_w2", "write_file", write)]));
    term.mock.push(text_reply("Notes written."));
    tokio::task::spawn_blocking(move || {
        let mut pty = spawn_chat(&term, &[]);
        prompt(&mut pty);
        pty.send_line("/plan write the notes").unwrap();
        pty.expect("Run this plan?").unwrap();
        assert!(!term.project.join("notes.txt").exists(), "nothing written while planning");
        pty.expect("No, keep planning").unwrap();
        pty.send("2\r").unwrap();
        pty.expect("Notes written.").unwrap();
        prompt(&mut pty);
        quit(&mut pty);
        assert_eq!(std::fs::read_to_string(term.project.join("notes.txt")).unwrap(), "planned\n");
        let requests = term.mock.chat_requests();
        assert!(tool_result(&requests[1].body, "call_w1").contains("plan mode"));
        assert!(tool_result(&requests[3].body, "call_x").contains("accept-edits"));
    })
    .await
    .unwrap();
}

/// The model's question (`ask_user`) is a numbered list on the terminal;
/// a number picks a choice, and where a free answer is welcome the user's
/// own words are the answer. Either is the tool's result.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ask_user_is_a_numbered_question_and_the_answer_is_the_result() {
    let term = Term::start("").await;
    let which = json!({"question": "Which database?", "choices": ["Postgres", "SQLite"]});
    let free = json!({"question": "What port?", "choices": ["5432"], "free_text": true});
    term.mock.push(tool_call_reply(&[("call_q1", "ask_user", which)]));
    term.mock.push(tool_call_reply(&[("call_q2", "ask_user", free)]));
    term.mock.push(text_reply("Set up."));
    tokio::task::spawn_blocking(move || {
        let mut pty = spawn_chat(&term, &[]);
        prompt(&mut pty);
        pty.send_line("set up the database").unwrap();
        pty.expect("Which database?").unwrap();
        pty.expect("SQLite").unwrap();
        pty.send("2\r").unwrap();
        pty.expect("What port?").unwrap();
        pty.expect("your own answer").unwrap();
        pty.send("6543\r").unwrap();
        pty.expect("Set up.").unwrap();
        prompt(&mut pty);
        quit(&mut pty);
        let requests = term.mock.chat_requests();
        assert_eq!(tool_result(&requests[1].body, "call_q1"), "The user chose: SQLite");
        assert_eq!(tool_result(&requests[2].body, "call_q2"), "The user answered: 6543");
    })
    .await
    .unwrap();
}
