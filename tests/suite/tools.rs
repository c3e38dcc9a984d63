//! Tools end to end: the mock model calls tools
//! (arguments split over chunks, several calls at once), the fake editor
//! answers permission, fs and terminal requests, and the tests check what the
//! editor was shown, what the model was told, and what happened on disk.
//! Item numbers refer to `acp/spec-digest.md`. The cancel tests hold a frozen
//! clock ([`FrozenClock`]): an answer that comes did not wait out a timer.

use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};

use crate::support::acp_client::{final_status, prompt, updates_for, updates_of_kind};
use crate::support::clock::{FrozenClock, poll_until};
use crate::support::commands;
use crate::support::editor::{FakeEditor, Permission};
use crate::support::harness::Harness;
use crate::support::live_processes;
use crate::support::mock_openai::{text_reply, tool_call_reply, tool_result};

/// Hang detector for waits on processes (real time).
const WAIT: Duration = Duration::from_secs(5);

async fn run(h: &mut Harness, session: &str, editor: &mut FakeEditor) -> (Vec<Value>, Value) {
    let id = prompt(&mut h.agent, session, "do it").await;
    h.agent.response_answering(id, |request| editor.answer(request)).await
}

async fn set_mode(h: &mut Harness, session: &str, mode: &str) {
    let id = h.agent.request("session/set_mode", json!({"sessionId": session, "modeId": mode})).await;
    let (_, response) = h.agent.response(id).await;
    assert!(response.get("result").is_some(), "{response}");
}

fn write(project: &Path, path: &str, text: &str) {
    let path = project.join(path);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

/// Items 31, 32, 44, 50: announced, described, in progress, completed; reads inside the roots do not ask.
#[tokio::test]
async fn a_read_is_shown_the_acp_way_and_runs_without_asking() {
    let mut h = Harness::start().await;
    write(&h.project, "src/main.rs", "fn main() {\n    println!(\"hi\");\n}\n");
    let session = h.session().await;
    h.mock.push(tool_call_reply(&[("call_r", "read_file", json!({"path": "src/main.rs"}))]));
    h.mock.push(text_reply("It prints hi."));
    let mut editor = FakeEditor::default();
    let (before, response) = run(&mut h, &session, &mut editor).await;
    assert_eq!(response["result"]["stopReason"], "end_turn", "{response}");
    assert!(editor.requests.is_empty(), "no permission was asked: {:?}", editor.methods());

    let started = updates_of_kind(&before, "tool_call");
    assert_eq!(started.len(), 1);
    assert_eq!(started[0]["toolCallId"], "call_r");
    assert_eq!(started[0]["kind"], "read");
    // `pending` is the default status, which the schema leaves off the wire.
    assert!(started[0]["status"].is_null() || started[0]["status"] == "pending", "{}", started[0]);
    let updates = updates_for(&before, "call_r");
    let described =
        updates.iter().find(|u| u["title"].is_string() && u["sessionUpdate"] == "tool_call_update").unwrap();
    assert_eq!(described["title"], "Read src/main.rs");
    let path = h.project.join("src").join("main.rs");
    assert_eq!(described["locations"][0]["path"], path.to_str().unwrap());
    assert_eq!(described["rawInput"], json!({"path": "src/main.rs"}));
    let statuses: Vec<&str> = updates.iter().filter_map(|u| u["status"].as_str()).collect();
    assert_eq!(statuses, ["in_progress", "completed"]);

    let result = tool_result(&h.mock.requests()[1].body, "call_r");
    assert!(result.contains("println!(\"hi\")"), "{result}");
    assert!(result.contains("     1\t"), "line-numbered: {result}");
}

/// Two calls in one response, arguments split over chunks: both run, both results go back in order.
#[tokio::test]
async fn parallel_calls_all_run_and_answer_in_order() {
    let mut h = Harness::start().await;
    write(&h.project, "a.txt", "alpha\n");
    write(&h.project, "b.txt", "beta\n");
    let session = h.session().await;
    h.mock.push(tool_call_reply(&[
        ("call_a", "read_file", json!({"path": "a.txt"})),
        ("call_b", "read_file", json!({"path": "b.txt"})),
    ]));
    h.mock.push(text_reply("done"));
    let (before, _) = run(&mut h, &session, &mut FakeEditor::default()).await;
    assert_eq!(final_status(&before, "call_a"), "completed");
    assert_eq!(final_status(&before, "call_b"), "completed");
    let body = &h.mock.requests()[1].body;
    let roles: Vec<&str> = body["messages"].as_array().unwrap().iter().map(|m| m["role"].as_str().unwrap()).collect();
    assert_eq!(roles, ["system", "user", "assistant", "tool", "tool"]);
    assert_eq!(body["messages"][2]["tool_calls"][0]["id"], "call_a");
    assert_eq!(body["messages"][2]["tool_calls"][1]["function"]["arguments"], r#"{"path":"b.txt"}"#);
    assert!(tool_result(body, "call_a").contains("alpha"));
    assert!(tool_result(body, "call_b").contains("beta"));
}

/// An edit asks first (with the diff), and allowing it applies it (items 45, 50).
#[tokio::test]
async fn an_edit_asks_with_the_diff_and_allow_applies_it() {
    let mut h = Harness::start().await;
    write(&h.project, "lib.rs", "fn old() {}\n");
    let session = h.session().await;
    let args = json!({"path": "lib.rs", "old_string": "old", "new_string": "new"});
    h.mock.push(tool_call_reply(&[("call_e", "edit_file", args)]));
    h.mock.push(text_reply("renamed"));
    let mut editor = FakeEditor::answering(&[Permission::Select("allow_once")]);
    let (before, response) = run(&mut h, &session, &mut editor).await;
    assert_eq!(response["result"]["stopReason"], "end_turn");
    assert_eq!(std::fs::read_to_string(h.project.join("lib.rs")).unwrap(), "fn new() {}\n");

    let asked = editor.requests_for("session/request_permission");
    assert_eq!(asked.len(), 1);
    let params = &asked[0]["params"];
    assert_eq!(params["sessionId"], session.as_str());
    assert_eq!(params["toolCall"]["toolCallId"], "call_e");
    let kinds: Vec<&str> = params["options"].as_array().unwrap().iter().map(|o| o["kind"].as_str().unwrap()).collect();
    // "Always" for this session, then for this project (issue 32).
    assert_eq!(kinds, ["allow_once", "allow_always", "allow_always", "reject_once", "reject_always"]);
    let diff = &params["toolCall"]["content"][0];
    assert_eq!(diff["type"], "diff");
    assert_eq!(diff["path"], h.project.join("lib.rs").to_str().unwrap());
    assert_eq!(diff["newText"], "fn new() {}\n");

    let last = updates_for(&before, "call_e").into_iter().last().unwrap().clone();
    assert_eq!(last["status"], "completed");
    assert_eq!(last["content"][0]["type"], "diff");
    assert_eq!(last["content"][0]["oldText"], "fn old() {}\n");
}

/// Issue 31: an edit whose old_string is off in whitespace (the model
/// dropped the file's tabs for spaces and its trailing spaces) is applied as
/// meant; the permission request shows the real change to the real file
/// (tabs kept, new line in tabs), and the model is told which correction
/// was applied.
#[tokio::test]
async fn a_recovered_edit_asks_with_the_real_diff_and_tells_the_model() {
    let mut h = Harness::start().await;
    let original = "function f(x) {\n\tif (x) {  \n\t\treturn 1;\n\t}\n}\n";
    let expected = "function f(x) {\n\tif (x) {  \n\t\treturn 1;\n\t} else {\n\t\treturn 0;\n\t}\n}\n";
    write(&h.project, "f.ts", original);
    let session = h.session().await;
    let args = json!({
        "path": "f.ts",
        "old_string": "    if (x) {\n        return 1;\n    }",
        "new_string": "    if (x) {\n        return 1;\n    } else {\n        return 0;\n    }",
    });
    h.mock.push(tool_call_reply(&[("call_e", "edit_file", args)]));
    h.mock.push(text_reply("done"));
    let mut editor = FakeEditor::answering(&[Permission::Select("allow_once")]);
    let (before, response) = run(&mut h, &session, &mut editor).await;
    assert_eq!(response["result"]["stopReason"], "end_turn");
    assert_eq!(std::fs::read_to_string(h.project.join("f.ts")).unwrap(), expected);

    let asked = editor.requests_for("session/request_permission");
    assert_eq!(asked.len(), 1);
    let diff = &asked[0]["params"]["toolCall"]["content"][0];
    assert_eq!(diff["type"], "diff");
    assert_eq!(diff["path"], h.project.join("f.ts").to_str().unwrap());
    assert_eq!(diff["oldText"], original);
    assert_eq!(diff["newText"], expected);

    let result = tool_result(&h.mock.requests()[1].body, "call_e");
    assert_eq!(
        result,
        "Applied 1 edit to f.ts. old_string matched after ignoring trailing whitespace, and reading its spaces as the \
         file's tabs (4 spaces per tab), so new_string was indented with tabs too. Check the diff, and copy \
         old_string exactly from the file next time."
    );
    let last = updates_for(&before, "call_e").into_iter().last().unwrap().clone();
    assert_eq!(last["status"], "completed");
    assert_eq!(last["content"][0]["newText"], expected);
}

/// "Allow always" is remembered: the second write is not asked about.
#[tokio::test]
async fn allow_always_is_remembered_for_the_session() {
    let mut h = Harness::start().await;
    let session = h.session().await;
    h.mock.push(tool_call_reply(&[("call_1", "write_file", json!({"path": "one.txt", "content": "1"}))]));
    h.mock.push(tool_call_reply(&[("call_2", "write_file", json!({"path": "two.txt", "content": "2"}))]));
    h.mock.push(text_reply("both written"));
    let mut editor = FakeEditor::answering(&[Permission::Select("allow_always")]);
    let (before, response) = run(&mut h, &session, &mut editor).await;
    assert_eq!(response["result"]["stopReason"], "end_turn");
    assert_eq!(editor.requests_for("session/request_permission").len(), 1, "asked once");
    assert_eq!(std::fs::read_to_string(h.project.join("two.txt")).unwrap(), "2");
    let second = updates_for(&before, "call_2").into_iter().last().unwrap().clone();
    assert_eq!(second["content"][0]["type"], "diff");
    assert_eq!(second["content"][0]["oldText"], Value::Null, "a new file has no old text");
}

/// Issue 11, defect 8: "always allow" names its rule and covers exactly
/// that; the same program on a path outside the roots asks again.
#[tokio::test]
async fn always_allow_for_a_command_covers_only_what_it_says() {
    // The rule, not the sandbox, is the subject (the sandbox adds ", in the
    // sandbox" to the labels where the kernel has Landlock: sandbox.rs).
    let mut h = Harness::with_config("[sandbox]\nmode = \"off\"\n").await;
    write(&h.project, "README.md", "hello\n");
    write(h.home.path(), "secret.txt", "top secret\n");
    let session = h.session().await;
    let outside = h.home.path().join("secret.txt");
    // `cat` is a read-only program the rules know by name; cmd.exe's `type`
    // is not (they read POSIX words, tools/shell/rules.rs): on Windows the
    // rule is the exact command, which covers that command again and not
    // the same program on a file outside.
    let (again, rule) = if cfg!(windows) {
        ("type README.md", "`type README.md`")
    } else {
        ("cat -n README.md", "`cat …` inside the project")
    };
    let read_outside = format!("{} {}", commands::READ_PROGRAM, outside.display());
    h.mock.push(tool_call_reply(&[("call_1", "shell", json!({"command": commands::read("README.md")}))]));
    h.mock.push(tool_call_reply(&[("call_2", "shell", json!({"command": again}))]));
    h.mock.push(tool_call_reply(&[("call_3", "shell", json!({"command": read_outside}))]));
    h.mock.push(text_reply("done"));
    let mut editor = FakeEditor::answering(&[Permission::Select("allow_always"), Permission::Select("reject_once")]);
    let (before, response) = run(&mut h, &session, &mut editor).await;
    assert_eq!(response["result"]["stopReason"], "end_turn");
    let asked = editor.requests_for("session/request_permission");
    let asked_ids: Vec<&Value> = asked.iter().map(|r| &r["params"]["toolCall"]["toolCallId"]).collect();
    assert_eq!(asked_ids, ["call_1", "call_3"], "the covered call did not ask; the outside one did");
    assert_eq!(asked[0]["params"]["options"][1]["name"], format!("Always allow {rule} for this session"));
    assert_eq!(final_status(&before, "call_2"), "completed");
    assert!(!tool_result(&h.mock.requests()[3].body, "call_3").contains("top secret"));
}

/// A rejection leaves the file alone, tells the model, and the turn goes on.
/// (The model has read the file: a write over one it has not read is
/// refused before anything is asked.)
#[tokio::test]
async fn a_rejection_leaves_the_file_untouched_and_tells_the_model() {
    let mut h = Harness::start().await;
    write(&h.project, "keep.txt", "original\n");
    let session = h.session().await;
    h.mock.push(tool_call_reply(&[("call_r", "read_file", json!({"path": "keep.txt"}))]));
    h.mock.push(tool_call_reply(&[("call_w", "write_file", json!({"path": "keep.txt", "content": "clobbered"}))]));
    h.mock.push(text_reply("ok, I won't"));
    let mut editor = FakeEditor::answering(&[Permission::Select("reject_once")]);
    let (before, response) = run(&mut h, &session, &mut editor).await;
    assert_eq!(response["result"]["stopReason"], "end_turn");
    assert_eq!(std::fs::read_to_string(h.project.join("keep.txt")).unwrap(), "original\n");
    assert_eq!(final_status(&before, "call_w"), "failed");
    assert_eq!(editor.requests_for("session/request_permission").len(), 1);
    assert!(tool_result(&h.mock.requests()[2].body, "call_w").contains("declined"));
}

/// The editor answering `cancelled` ends the turn as cancelled (item 42).
#[tokio::test]
async fn a_cancelled_permission_ends_the_turn() {
    let mut h = Harness::start().await;
    let session = h.session().await;
    h.mock.push(tool_call_reply(&[("call_x", "shell", json!({"command": "echo hi"}))]));
    let mut editor = FakeEditor::answering(&[Permission::Cancelled]);
    let (before, response) = run(&mut h, &session, &mut editor).await;
    assert_eq!(response["result"]["stopReason"], "cancelled");
    assert_eq!(final_status(&before, "call_x"), "failed");
    assert_eq!(h.mock.requests().len(), 1, "no further model request");
}

/// session/cancel while a permission request is pending: the request is
/// withdrawn with $/cancel_request, the call fails, the turn answers cancelled at once.
#[tokio::test(start_paused = true)]
async fn cancel_while_asking_withdraws_the_question() {
    let clock = FrozenClock::hold().await;
    let mut h = Harness::start().await;
    let session = h.session().await;
    h.mock.push(tool_call_reply(&[("call_p", "write_file", json!({"path": "f.txt", "content": "x"}))]));
    h.mock.push(text_reply("unused"));
    let id = prompt(&mut h.agent, &session, "write it").await;
    let mut seen = Vec::new();
    let asked = loop {
        let message = h.agent.next_message(Duration::from_secs(5)).await.expect("a permission request");
        if message["method"] == "session/request_permission" {
            break message;
        }
        seen.push(message);
    };
    h.agent.notify("session/cancel", json!({"sessionId": session})).await;
    let (after, response) = h.agent.response(id).await;
    assert_eq!(clock.elapsed(), Duration::ZERO, "answered without waiting out a timer");
    assert_eq!(response["result"]["stopReason"], "cancelled");
    let withdrawn = after.iter().find(|m| m["method"] == "$/cancel_request").expect("$/cancel_request sent");
    assert_eq!(withdrawn["params"]["requestId"], asked["id"]);
    assert!(withdrawn.get("id").is_none(), "a notification");
    assert_eq!(final_status(&after, "call_p"), "failed");
    assert!(!h.project.join("f.txt").exists());
}

/// Read-only mode refuses writes without asking; the model is told.
#[tokio::test]
async fn read_only_mode_refuses_changes() {
    let mut h = Harness::start().await;
    let session = h.session().await;
    set_mode(&mut h, &session, "read-only").await;
    h.mock.push(tool_call_reply(&[
        ("call_w", "write_file", json!({"path": "new.txt", "content": "x"})),
        ("call_s", "shell", json!({"command": "touch made.txt"})),
    ]));
    h.mock.push(text_reply("I can't in read-only mode"));
    let mut editor = FakeEditor::default();
    let (_, response) = run(&mut h, &session, &mut editor).await;
    assert_eq!(response["result"]["stopReason"], "end_turn");
    assert!(editor.requests.is_empty(), "nothing asked: {:?}", editor.methods());
    assert!(!h.project.join("new.txt").exists() && !h.project.join("made.txt").exists());
    assert!(tool_result(&h.mock.requests()[1].body, "call_w").contains("read-only"));
}

/// Accept-edits writes inside the project without asking, but commands still ask.
#[tokio::test]
async fn accept_edits_mode_asks_only_for_commands() {
    let mut h = Harness::start().await;
    let session = h.session().await;
    set_mode(&mut h, &session, "accept-edits").await;
    h.mock.push(tool_call_reply(&[
        ("call_w", "write_file", json!({"path": "new.txt", "content": "x"})),
        ("call_s", "shell", json!({"command": "echo ran"})),
    ]));
    h.mock.push(text_reply("done"));
    let mut editor = FakeEditor::answering(&[Permission::Select("allow_once")]);
    let (_, response) = run(&mut h, &session, &mut editor).await;
    assert_eq!(response["result"]["stopReason"], "end_turn");
    let asked = editor.requests_for("session/request_permission");
    assert_eq!(asked.len(), 1);
    assert_eq!(asked[0]["params"]["toolCall"]["toolCallId"], "call_s");
    assert!(h.project.join("new.txt").exists());
    assert!(tool_result(&h.mock.requests()[1].body, "call_s").contains("ran"));
}

/// Reads outside the session roots ask (item 20); `..` counts as outside.
#[tokio::test]
async fn reads_outside_the_roots_ask() {
    let mut h = Harness::start().await;
    write(h.home.path(), "secret.txt", "top secret\n");
    let session = h.session().await;
    h.mock.push(tool_call_reply(&[("call_o", "read_file", json!({"path": "../secret.txt"}))]));
    h.mock.push(text_reply("not read"));
    let mut editor = FakeEditor::answering(&[Permission::Select("reject_once")]);
    run(&mut h, &session, &mut editor).await;
    assert_eq!(editor.requests_for("session/request_permission").len(), 1);
    assert!(!tool_result(&h.mock.requests()[1].body, "call_o").contains("top secret"));
}

/// Items 46, 48, 12: client methods are used exactly when advertised, in all
/// four combinations of fs and terminal.
#[tokio::test]
async fn client_capabilities_decide_who_reads_writes_and_runs() {
    for (fs, terminal) in [(false, false), (true, false), (false, true), (true, true)] {
        let mut h = Harness::start().await;
        write(&h.project, "notes.txt", "on disk\n");
        let caps = json!({"fs": {"readTextFile": fs, "writeTextFile": fs}, "terminal": terminal});
        let session = h.session_with(caps).await;
        set_mode(&mut h, &session, "full-auto").await;
        h.mock.push(tool_call_reply(&[
            ("call_r", "read_file", json!({"path": "notes.txt"})),
            ("call_w", "write_file", json!({"path": "out.txt", "content": "written"})),
            ("call_s", "shell", json!({"command": "echo from-shell"})),
        ]));
        h.mock.push(text_reply("done"));
        let mut editor = FakeEditor::default();
        editor.buffers.insert(h.project.join("notes.txt"), "unsaved buffer\n".to_owned());
        let (before, response) = run(&mut h, &session, &mut editor).await;
        assert_eq!(response["result"]["stopReason"], "end_turn", "fs={fs} terminal={terminal}: {response}");
        let methods = editor.methods();
        let body = &h.mock.requests()[1].body;
        let read = tool_result(body, "call_r");
        if fs {
            assert!(methods.contains(&"fs/read_text_file".to_owned()), "{methods:?}");
            assert!(methods.contains(&"fs/write_text_file".to_owned()), "{methods:?}");
            assert!(read.contains("unsaved buffer"), "reads see the editor's buffer: {read}");
        } else {
            assert!(!methods.iter().any(|m| m.starts_with("fs/")), "fs={fs}: {methods:?}");
            assert!(read.contains("on disk"), "{read}");
        }
        assert_eq!(std::fs::read_to_string(h.project.join("out.txt")).unwrap(), "written");
        assert!(tool_result(body, "call_s").contains("from-shell"), "fs={fs} terminal={terminal}");
        if terminal {
            let terminal_methods: Vec<&String> = methods.iter().filter(|m| m.starts_with("terminal/")).collect();
            assert_eq!(
                terminal_methods,
                ["terminal/create", "terminal/wait_for_exit", "terminal/output", "terminal/release"]
            );
            assert!(editor.all_terminals_released());
            let shown = updates_for(&before, "call_s");
            assert!(shown.iter().any(|u| u["content"][0]["type"] == "terminal"), "the terminal is embedded");
        } else {
            assert!(!methods.iter().any(|m| m.starts_with("terminal/")), "terminal={terminal}: {methods:?}");
        }
    }
}

/// Cancelling a running local `sleep 60` kills its whole process group, and
/// the turn answers without waiting for it (or for any timer).
#[tokio::test(start_paused = true)]
async fn cancel_kills_a_running_local_command_and_its_children() {
    let clock = FrozenClock::hold().await;
    let mut h = Harness::start().await;
    let session = h.session().await;
    set_mode(&mut h, &session, "full-auto").await;
    let sleeper = commands::sleeper("60");
    let command = commands::then(&commands::two_sleepers(&sleeper), &commands::print("never"));
    h.mock.push(tool_call_reply(&[("call_s", "shell", json!({"command": command}))]));
    let id = prompt(&mut h.agent, &session, "wait a minute").await;
    loop {
        let message = h.agent.next_message(Duration::from_secs(5)).await.expect("the command starts");
        if message["params"]["update"]["status"] == "in_progress" {
            break;
        }
    }
    poll_until("both sleeps run", WAIT, || live_processes(&sleeper.process).len() == 2).await;
    h.agent.notify("session/cancel", json!({"sessionId": session})).await;
    let (after, response) = h.agent.response(id).await;
    assert_eq!(clock.elapsed(), Duration::ZERO, "answered without waiting out a timer");
    assert_eq!(response["result"]["stopReason"], "cancelled");
    assert_eq!(final_status(&after, "call_s"), "failed");
    assert!(live_processes(&sleeper.process).is_empty(), "no process survives");
}

/// Cancelling a command running in an editor terminal releases the terminal before answering.
#[tokio::test]
async fn cancel_releases_a_client_terminal() {
    let mut h = Harness::start().await;
    let session = h.session_with(json!({"terminal": true})).await;
    set_mode(&mut h, &session, "full-auto").await;
    h.mock.push(tool_call_reply(&[("call_t", "shell", json!({"command": "sleep 60"}))]));
    let id = prompt(&mut h.agent, &session, "wait").await;
    let mut editor = FakeEditor::default();
    loop {
        let message = h.agent.next_message(Duration::from_secs(5)).await.expect("terminal requests");
        if message.get("id").is_some() && message.get("method").is_some() {
            if let crate::support::acp_client::Answer::Result(result) = editor.answer(&message) {
                h.agent.reply(&message["id"], result).await;
            }
            if message["method"] == "terminal/wait_for_exit" {
                break;
            }
        }
    }
    h.agent.notify("session/cancel", json!({"sessionId": session})).await;
    let (after, response) = h.agent.response_answering(id, |r| editor.answer(r)).await;
    assert_eq!(response["result"]["stopReason"], "cancelled");
    let release = after.iter().position(|m| m["method"] == "terminal/release").expect("terminal/release sent");
    assert!(
        after[release..].iter().all(|m| m["method"] != "session/update"
                || m["params"]["update"]["toolCallId"] == "call_t"
                // The turn's checkpoint list (`_meta`), sent as it ends.
                || !m["params"]["update"]["_meta"]["lathe"]["checkpoints"].is_null()),
        "after the release only the call's own updates: {after:#?}"
    );
    assert_eq!(final_status(&after, "call_t"), "failed");
}

/// Issue 11, defect 11: two calls with the same id in one response become
/// two ACP tool calls with distinct ids, each with a final status, and the
/// transcript sent back holds no duplicate id.
#[tokio::test]
async fn two_calls_with_one_id_stay_two_calls() {
    use crate::support::mock_openai::{Reply, Step, ev_finish, ev_role, ev_tool_call_args, ev_tool_call_start};
    let mut h = Harness::start().await;
    write(&h.project, "a.txt", "alpha\n");
    write(&h.project, "b.txt", "beta\n");
    let session = h.session().await;
    for _ in 0..2 {
        h.mock.push(Reply::Sse(vec![
            ev_role(),
            ev_tool_call_start(0, "call_0", "read_file"),
            ev_tool_call_args(0, r#"{"path": "a.txt"}"#),
            ev_tool_call_start(1, "call_0", "read_file"),
            ev_tool_call_args(1, r#"{"path": "b.txt"}"#),
            ev_finish("tool_calls"),
            Step::Done,
        ]));
    }
    h.mock.push(text_reply("done"));
    let (before, response) = run(&mut h, &session, &mut FakeEditor::default()).await;
    assert_eq!(response["result"]["stopReason"], "end_turn", "{response}");

    let started: Vec<String> =
        updates_of_kind(&before, "tool_call").iter().map(|u| u["toolCallId"].as_str().unwrap().to_owned()).collect();
    assert_eq!(started.len(), 4, "{started:?}");
    let distinct: std::collections::HashSet<&String> = started.iter().collect();
    assert_eq!(distinct.len(), 4, "every call has its own id: {started:?}");
    for id in &started {
        assert_eq!(final_status(&before, id), "completed", "{id}");
    }

    let body = &h.mock.requests()[2].body;
    let mut ids = Vec::new();
    for message in body["messages"].as_array().unwrap() {
        for call in message["tool_calls"].as_array().into_iter().flatten() {
            ids.push(call["id"].as_str().unwrap().to_owned());
        }
    }
    assert_eq!(ids, started, "the transcript uses the ids the editor saw");
    assert!(tool_result(body, &started[0]).contains("alpha"));
    assert!(tool_result(body, &started[1]).contains("beta"));
    assert!(tool_result(body, &started[2]).contains("alpha"));
    assert!(tool_result(body, &started[3]).contains("beta"));
}

/// Issue 11, defect 13: a permission request shows the whole command, every
/// line of it, and no title carries a control, ANSI or bidi character raw.
#[tokio::test]
async fn permission_prompts_show_everything() {
    let mut h = Harness::start().await;
    let session = h.session().await;
    let disguised = "echo safe\u{1b}[2K\r\u{202e}~ fr- mr";
    h.mock.push(tool_call_reply(&[
        ("call_m", "shell", json!({"command": "git status\ntouch PWN"})),
        ("call_h", "shell", json!({"command": disguised})),
    ]));
    h.mock.push(text_reply("ok"));
    let mut editor = FakeEditor::answering(&[Permission::Select("reject_once"), Permission::Select("reject_once")]);
    let (before, response) = run(&mut h, &session, &mut editor).await;
    assert_eq!(response["result"]["stopReason"], "end_turn");
    assert!(!h.project.join("PWN").exists());

    let asked = editor.requests_for("session/request_permission");
    assert_eq!(asked.len(), 2);
    let multi = &asked[0]["params"]["toolCall"];
    assert_eq!(multi["title"], "Run `git status…` (+1 more line)");
    assert_eq!(multi["content"][0]["content"]["text"], "```sh\ngit status\ntouch PWN\n```");
    let hidden = &asked[1]["params"]["toolCall"];
    assert_eq!(hidden["title"], "Run `echo safe\\u{1b}[2K\\r\\u{202e}~ fr- mr`");
    assert_eq!(hidden["content"][0]["content"]["text"], "```sh\necho safe\\u{1b}[2K\\r\\u{202e}~ fr- mr\n```");

    let raw = |c: char| c.is_control() || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}');
    let titles = before
        .iter()
        .filter_map(|m| m["params"]["update"]["title"].as_str().or(m["params"]["toolCall"]["title"].as_str()));
    for title in titles {
        assert!(!title.chars().any(raw), "{title:?}");
    }
    for option in asked.iter().flat_map(|r| r["params"]["options"].as_array().unwrap()) {
        assert!(!option["name"].as_str().unwrap().chars().any(raw), "{option}");
    }
}

/// Issue 11, defect 18: a tool call whose arguments pass the cap is not
/// kept, echoed (`rawInput`), logged or run; the model is told the limit.
#[tokio::test]
async fn oversized_tool_calls_are_refused_not_carried() {
    use crate::support::mock_openai::{Reply, Step, ev_finish, ev_role, ev_tool_call_args, ev_tool_call_start};
    let mut h = Harness::with_config("[agent]\nmax_tool_call_bytes = 65536\n").await;
    let session = h.session().await;
    set_mode(&mut h, &session, "full-auto").await;
    let mut steps = vec![ev_role(), ev_tool_call_start(0, "call_big", "write_file")];
    steps.push(ev_tool_call_args(0, r#"{"path": "big.txt", "content": ""#));
    let piece = "x".repeat(32 * 1024);
    steps.extend((0..32).map(|_| ev_tool_call_args(0, &piece)));
    steps.push(ev_tool_call_args(0, r#""}"#));
    steps.push(ev_tool_call_start(1, "call_ok", "write_file"));
    steps.push(ev_tool_call_args(1, r#"{"path": "small.txt", "content": "fine"}"#));
    steps.extend([ev_finish("tool_calls"), Step::Done]);
    h.mock.push(Reply::Sse(steps));
    h.mock.push(text_reply("I will write it in parts"));
    let (before, response) = run(&mut h, &session, &mut FakeEditor::default()).await;
    assert_eq!(response["result"]["stopReason"], "end_turn", "{response}");
    assert!(!h.project.join("big.txt").exists());
    assert_eq!(std::fs::read_to_string(h.project.join("small.txt")).unwrap(), "fine", "the other call ran");
    assert_eq!(final_status(&before, "call_big"), "failed");
    assert!(updates_for(&before, "call_big").iter().all(|u| u.get("rawInput").is_none()), "no rawInput echo");

    let body = &h.mock.requests()[1].body;
    let told = tool_result(body, "call_big");
    let sent = r#"{"path": "big.txt", "content": ""#.len() + 32 * piece.len() + 2;
    assert!(told.contains(&format!("were {sent} bytes, over the limit of 65536 bytes")), "{told}");
    assert_eq!(body["messages"][2]["tool_calls"][0]["function"]["arguments"], "{}");
    let longest = h.agent.raw_stdout_lines().iter().map(String::len).max().unwrap();
    assert!(longest < 16 * 1024, "no stdout line carries the arguments: {longest} bytes");
    h.agent.close_stdin();
    h.agent.wait_exit(Duration::from_secs(5)).await.expect("lathe exits");
    let mut logged = 0;
    let mut dirs = vec![h.home.path().join(".local/share/lathe")];
    while let Some(dir) = dirs.pop() {
        // Entries that vanish while listed (a temporary file renamed) are skipped.
        let Ok(entries) = std::fs::read_dir(dir) else { continue };
        for entry in entries.flatten() {
            if entry.path().is_dir() {
                dirs.push(entry.path());
            } else {
                logged += entry.metadata().map_or(0, |metadata| metadata.len());
            }
        }
    }
    assert!(logged < 64 * 1024, "the session data holds {logged} bytes");
}

/// Bad arguments and unknown tools are results the model can read, not a failed turn.
#[tokio::test]
async fn bad_calls_are_explained_to_the_model() {
    let mut h = Harness::start().await;
    let session = h.session().await;
    h.mock.push(crate::support::mock_openai::Reply::Sse(vec![
        crate::support::mock_openai::ev_role(),
        crate::support::mock_openai::ev_tool_call_start(0, "call_bad", "read_file"),
        crate::support::mock_openai::ev_tool_call_args(0, "{\"path\": "),
        crate::support::mock_openai::ev_tool_call_start(1, "call_unknown", "teleport"),
        crate::support::mock_openai::ev_tool_call_args(1, "{}"),
        crate::support::mock_openai::ev_finish("tool_calls"),
        crate::support::mock_openai::Step::Done,
    ]));
    h.mock.push(text_reply("let me fix that"));
    let (before, response) = run(&mut h, &session, &mut FakeEditor::default()).await;
    assert_eq!(response["result"]["stopReason"], "end_turn");
    assert_eq!(final_status(&before, "call_bad"), "failed");
    assert_eq!(final_status(&before, "call_unknown"), "failed");
    let body = &h.mock.requests()[1].body;
    assert!(tool_result(body, "call_bad").contains("not valid JSON"));
    assert!(tool_result(body, "call_unknown").contains("no tool named"));
}

/// The plan tool sends the complete plan as a `plan` update (item 33).
#[tokio::test]
async fn plans_are_sent_complete() {
    let mut h = Harness::start().await;
    let session = h.session().await;
    let plan = json!({"plan": [
        {"content": "Read the code", "status": "completed"},
        {"content": "Fix the bug", "status": "in_progress", "priority": "high"},
        {"content": "Run the tests", "status": "pending"}
    ]});
    h.mock.push(tool_call_reply(&[("call_plan", "update_plan", plan)]));
    h.mock.push(text_reply("working on it"));
    let (before, _) = run(&mut h, &session, &mut FakeEditor::default()).await;
    let plans = updates_of_kind(&before, "plan");
    assert_eq!(plans.len(), 1);
    let entries = plans[0]["entries"].as_array().unwrap();
    assert_eq!(entries.len(), 3);
    assert_eq!(entries[1], json!({"content": "Fix the bug", "priority": "high", "status": "in_progress"}));
    assert_eq!(entries[2]["priority"], "medium");
}

/// Modes and the mode config option describe the same state and stay in sync (items 51, 53, 56).
#[tokio::test]
async fn modes_and_the_mode_option_stay_in_sync() {
    let mut h = Harness::start().await;
    let id = h.agent.request("initialize", json!({"protocolVersion": 1})).await;
    h.agent.response(id).await;
    let id = h.agent.request("session/new", json!({"cwd": h.project, "mcpServers": []})).await;
    let (_, response) = h.agent.response(id).await;
    let result = &response["result"];
    let session = result["sessionId"].as_str().unwrap().to_owned();
    assert_eq!(result["modes"]["currentModeId"], "ask");
    let ids: Vec<&str> =
        result["modes"]["availableModes"].as_array().unwrap().iter().map(|m| m["id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["read-only", "plan", "ask", "accept-edits", "auto", "full-auto"]);
    let option = &result["configOptions"][1];
    assert_eq!(result["configOptions"][0]["id"], "model");
    assert_eq!(option["id"], "mode");
    assert_eq!(option["category"], "mode");
    assert_eq!(option["currentValue"], "ask");

    let id = h.agent.request("session/set_mode", json!({"sessionId": session, "modeId": "accept-edits"})).await;
    let (before, response) = h.agent.response(id).await;
    assert_eq!(response["result"], json!({}));
    let synced = updates_of_kind(&before, "config_option_update");
    assert_eq!(synced[0]["configOptions"][1]["currentValue"], "accept-edits");

    let id = h
        .agent
        .request("session/set_config_option", json!({"sessionId": session, "configId": "mode", "value": "full-auto"}))
        .await;
    let (before, response) = h.agent.response(id).await;
    assert_eq!(response["result"]["configOptions"][1]["currentValue"], "full-auto");
    assert_eq!(updates_of_kind(&before, "current_mode_update")[0]["currentModeId"], "full-auto");

    let id = h.agent.request("session/set_mode", json!({"sessionId": session, "modeId": "yolo"})).await;
    let (_, response) = h.agent.response(id).await;
    assert_eq!(response["error"]["code"], -32602);
    let id = h
        .agent
        .request("session/set_config_option", json!({"sessionId": session, "configId": "nope", "value": "x"}))
        .await;
    let (_, response) = h.agent.response(id).await;
    assert_eq!(response["error"]["code"], -32602);
}

/// Cancel while the editor is serving a file read: the read is withdrawn with
/// `$/cancel_request` and the turn answers `cancelled` at once.
#[tokio::test(start_paused = true)]
async fn cancel_while_the_editor_reads_withdraws_the_read() {
    let clock = FrozenClock::hold().await;
    let mut h = Harness::start().await;
    write(&h.project, "slow.txt", "x\n");
    let session = h.session_with(json!({"fs": {"readTextFile": true}})).await;
    h.mock.push(tool_call_reply(&[("call_r", "read_file", json!({"path": "slow.txt"}))]));
    let id = prompt(&mut h.agent, &session, "read it").await;
    let read = loop {
        let message = h.agent.next_message(Duration::from_secs(5)).await.expect("an fs request");
        if message["method"] == "fs/read_text_file" {
            break message;
        }
    };
    h.agent.notify("session/cancel", json!({"sessionId": session})).await;
    let (after, response) = h.agent.response(id).await;
    assert_eq!(clock.elapsed(), Duration::ZERO, "answered without waiting out a timer");
    assert_eq!(response["result"]["stopReason"], "cancelled");
    let withdrawn = after.iter().find(|m| m["method"] == "$/cancel_request").expect("$/cancel_request sent");
    assert_eq!(withdrawn["params"]["requestId"], read["id"]);
    assert_eq!(final_status(&after, "call_r"), "failed");
}
