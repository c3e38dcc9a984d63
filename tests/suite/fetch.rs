//! The `fetch` tool through the real binary (issue 17): the mock model calls
//! `fetch` on pages a local web server serves (tests/support/web.rs), the
//! fake editor answers the permission prompts, and the tests check what the
//! model was told, what the editor was shown and what the server saw.
//!
//! The server is on loopback, which fetch refuses unless the user allowed the
//! host: the tests allow `localhost:<port>` (or `127.0.0.1:<port>`) in the
//! prompt, and the refusal tests go to the other spelling, which the user did
//! not allow.

use std::time::Duration;

use bytes::Bytes;
use serde_json::{Value, json};

use crate::support::acp_client::{final_status, prompt, updates_for};
use crate::support::editor::{FakeEditor, Permission};
use crate::support::harness::Harness;
use crate::support::mock_openai::{text_reply, tool_call_reply, tool_result};
use crate::support::web::{Route, WebServer};

const WAIT: Duration = Duration::from_secs(10);

/// A harness and a web server; the model will call fetch once per `url`, in
/// one response, then answer "done".
async fn start(extra_toml: &str) -> (Harness, WebServer, String) {
    let mut h = Harness::with_config(extra_toml).await;
    let web = WebServer::start().await;
    let session = h.session().await;
    (h, web, session)
}

fn script_fetches(h: &Harness, urls: &[&str]) {
    let calls: Vec<(String, Value)> =
        urls.iter().enumerate().map(|(i, url)| (format!("call_{i}"), json!({ "url": url }))).collect();
    let calls: Vec<(&str, &str, Value)> = calls.iter().map(|(id, args)| (id.as_str(), "fetch", args.clone())).collect();
    h.mock.push(tool_call_reply(&calls));
    h.mock.push(text_reply("done"));
}

/// Runs one prompt, answering permissions with `answers`; returns what the
/// editor saw, the response, and the editor.
async fn run(h: &mut Harness, session: &str, answers: &[Permission]) -> (Vec<Value>, Value, FakeEditor) {
    let mut editor = FakeEditor::answering(answers);
    let id = prompt(&mut h.agent, session, "read it").await;
    let (before, response) = h.agent.response_answering(id, |request| editor.answer(request)).await;
    (before, response, editor)
}

/// What the model was told for call `n` of the scripted response.
fn told(h: &Harness, n: usize) -> String {
    let requests = h.mock.requests();
    tool_result(&requests.last().expect("a model request").body, &format!("call_{n}"))
}

const GUIDE: &str = r#"<!doctype html>
<html><head><title>Install guide</title><script>document.write("tracking")</script></head>
<body>
<nav><a href="/">Home</a> | <a href="/blog">Blog</a></nav>
<main>
<h1>Installing widgets</h1>
<p>Read <a href="https://example.com/docs/widgets">the widget docs</a> first.</p>
<pre><code class="language-rust">fn main() {
    widgets::install();
}
</code></pre>
</main>
<footer>Copyright nobody</footer>
</body></html>"#;

/// HTML comes back as Markdown (a heading, a code block and a link survive,
/// navigation does not); the call is a `fetch` with the URL in its title, the
/// prompt shows the URL and offers to remember the host, and the editor's
/// result names the final URL, the status and the size.
#[tokio::test]
async fn html_is_converted_to_markdown_and_shown_as_a_fetch() {
    let (mut h, web, session) = start("").await;
    web.route("/guide", Route::ok("text/html; charset=utf-8", GUIDE));
    let url = web.url("/guide");
    script_fetches(&h, &[&url]);
    let (before, response, editor) = run(&mut h, &session, &[Permission::Select("allow_always")]).await;
    assert_eq!(response["result"]["stopReason"], "end_turn", "{response}");

    let result = told(&h, 0);
    assert!(result.contains(&format!("URL: {url}")), "{result}");
    assert!(result.contains("Status: 200 OK"), "{result}");
    assert!(result.contains("Title: Install guide"), "{result}");
    assert!(result.contains("# Installing widgets"), "{result}");
    assert!(result.contains("```rust\nfn main() {\n    widgets::install();\n}\n```"), "{result}");
    assert!(result.contains("[the widget docs](https://example.com/docs/widgets)"), "{result}");
    for dropped in ["Home", "Blog", "tracking", "Copyright"] {
        assert!(!result.contains(dropped), "{dropped} is not page content: {result}");
    }

    let asked = editor.requests_for("session/request_permission");
    assert_eq!(asked.len(), 1);
    let call = &asked[0]["params"]["toolCall"];
    assert_eq!(call["title"], format!("Fetch {url}"));
    assert_eq!(call["kind"], "fetch");
    let options = asked[0]["params"]["options"].as_array().unwrap();
    let always = options.iter().find(|o| o["optionId"] == "allow_always").unwrap();
    assert_eq!(always["name"], format!("Always allow fetching from `localhost:{}` for this session", web.port()));

    let updates = updates_for(&before, "call_0");
    assert_eq!(updates[0]["kind"], "fetch");
    assert!(updates.iter().any(|u| u["title"] == format!("Fetch {url}")), "{updates:?}");
    assert_eq!(final_status(&before, "call_0"), "completed");
    let last = updates.iter().rev().find(|u| u["content"].is_array()).unwrap();
    let shown = last["content"][0]["content"]["text"].as_str().unwrap();
    assert!(shown.contains("200 OK") && shown.contains(&url), "{shown}");
    assert!(shown.contains(&format!("{} bytes", GUIDE.len())), "{shown}");
    assert_eq!(last["rawOutput"]["finalUrl"], url.as_str());
}

/// The first fetch from a host asks; "always allow" covers that host (and
/// port) from then on; another spelling of it asks again.
#[tokio::test]
async fn permission_is_asked_and_remembered_per_host() {
    let (mut h, web, session) = start("").await;
    for path in ["/a", "/b", "/c"] {
        web.route(path, Route::ok("text/plain", format!("page {path}")));
    }
    let other = format!("http://127.0.0.1:{}/c", web.port());
    script_fetches(&h, &[&web.url("/a"), &web.url("/b"), &other]);
    let answers = [Permission::Select("allow_always"), Permission::Select("reject_once")];
    let (before, _, editor) = run(&mut h, &session, &answers).await;

    let asked = editor.requests_for("session/request_permission");
    let titles: Vec<&str> = asked.iter().map(|r| r["params"]["toolCall"]["title"].as_str().unwrap()).collect();
    assert_eq!(titles, [format!("Fetch {}", web.url("/a")), format!("Fetch {other}")]);
    assert!(told(&h, 0).contains("page /a"));
    assert!(told(&h, 1).contains("page /b"), "remembered: not asked again");
    assert!(told(&h, 2).contains("declined"), "{}", told(&h, 2));
    assert_eq!(final_status(&before, "call_2"), "failed");
    assert_eq!(web.requests(), ["/a", "/b"]);

    // Remembered for the session, in any mode.
    let id = h.agent.request("session/set_mode", json!({"sessionId": session, "modeId": "read-only"})).await;
    h.agent.response(id).await;
    h.mock.push(tool_call_reply(&[("call_later", "fetch", json!({ "url": web.url("/c") }))]));
    h.mock.push(text_reply("done"));
    let (_, _, editor) = run(&mut h, &session, &[]).await;
    assert!(editor.requests_for("session/request_permission").is_empty());
    let result = tool_result(&h.mock.requests().last().unwrap().body, "call_later");
    assert!(result.contains("page /c"), "{result}");
}

/// Redirects are followed (relative and absolute, up to five), and the model
/// learns where it ended up; a sixth is not followed.
#[tokio::test]
async fn a_redirect_chain_is_followed_up_to_five_hops() {
    let (mut h, web, session) = start("").await;
    web.route("/r1", Route::redirect("/r2"));
    web.route("/r2", Route::redirect(&web.url("/r3")));
    web.route("/r3", Route::redirect("final?x=1"));
    web.route("/final?x=1", Route::ok("text/markdown", "# Arrived\n"));
    for hop in 0..7 {
        web.route(&format!("/h{hop}"), Route::redirect(&format!("/h{}", hop + 1)));
    }
    script_fetches(&h, &[&web.url("/r1"), &web.url("/h0")]);
    let (before, _, _) = run(&mut h, &session, &[Permission::Select("allow_always")]).await;

    let result = told(&h, 0);
    assert!(result.contains(&format!("URL: {}", web.url("/final?x=1"))), "{result}");
    let chain = format!("Redirected from: {} -> {} -> {}", web.url("/r1"), web.url("/r2"), web.url("/r3"));
    assert!(result.contains(&chain), "{result}");
    assert!(result.contains("# Arrived"), "{result}");
    assert_eq!(final_status(&before, "call_0"), "completed");

    let result = told(&h, 1);
    assert!(result.contains("redirected more than 5 times"), "{result}");
    assert_eq!(final_status(&before, "call_1"), "failed");
    let requests = web.requests();
    assert_eq!(&requests[..4], ["/r1", "/r2", "/r3", "/final?x=1"]);
    assert_eq!(&requests[4..], ["/h0", "/h1", "/h2", "/h3", "/h4", "/h5"], "the sixth redirect is not followed");
}

/// An allowed host that redirects to 127.0.0.1 (a host the user did not
/// allow) is refused before anything connects there.
#[tokio::test]
async fn a_redirect_to_127_0_0_1_is_refused() {
    let (mut h, web, session) = start("").await;
    let secret = format!("http://127.0.0.1:{}/secret", web.port());
    web.route("/go", Route::redirect(&secret));
    web.route("/secret", Route::ok("text/plain", "the secret"));
    script_fetches(&h, &[&web.url("/go")]);
    let (before, _, _) = run(&mut h, &session, &[Permission::Select("allow_always")]).await;
    let result = told(&h, 0);
    assert!(
        result.contains(&format!("Refused: 127.0.0.1:{} is 127.0.0.1, a loopback address", web.port())),
        "{result}"
    );
    assert!(!result.contains("the secret"));
    assert_eq!(final_status(&before, "call_0"), "failed");
    assert_eq!(web.requests(), ["/go"], "never connected to the refused address");
}

/// The same the other way round, where only DNS knows: an allowed
/// 127.0.0.1 redirects to the name `localhost`, which the user did not
/// allow; the client's resolver refuses its loopback answer at connect time.
#[tokio::test]
async fn a_redirect_to_a_name_that_resolves_to_loopback_is_refused_at_connect_time() {
    let (mut h, web, session) = start("").await;
    let start_url = format!("http://127.0.0.1:{}/start", web.port());
    web.route("/start", Route::redirect(&web.url("/secret")));
    web.route("/secret", Route::ok("text/plain", "the secret"));
    script_fetches(&h, &[&start_url]);
    let (_, _, _) = run(&mut h, &session, &[Permission::Select("allow_always")]).await;
    let result = told(&h, 0);
    assert!(result.contains("Refused: localhost resolves to"), "{result}");
    assert!(result.contains("a loopback address"), "{result}");
    assert_eq!(web.requests(), ["/start"]);
}

/// A 404 is reported to the model as a failure, with what the server said.
#[tokio::test]
async fn a_404_is_reported() {
    let (mut h, web, session) = start("").await;
    web.route("/gone", Route::status(404, "There is no page by that name here."));
    let not_text = Bytes::from_static(b"\x89PNG\r\n\x1a\n\0\0");
    web.route(
        "/gone.png",
        Route::Page { status: 404, headers: vec![("content-type".into(), "image/png".into())], body: not_text },
    );
    script_fetches(&h, &[&web.url("/gone"), &web.url("/gone.png")]);
    let (before, _, _) = run(&mut h, &session, &[Permission::Select("allow_always")]).await;
    let result = told(&h, 0);
    assert!(result.starts_with(&format!("HTTP 404 Not Found from {}", web.url("/gone"))), "{result}");
    assert!(result.contains("There is no page by that name here."), "{result}");
    assert_eq!(final_status(&before, "call_0"), "failed");
    // An error status is reported as such even when its body is no text.
    assert_eq!(told(&h, 1), format!("HTTP 404 Not Found from {}.", web.url("/gone.png")));
}

/// A 20 MB page: lathe reads its head only (the connection is dropped
/// long before the server is done) and tells the model how much was cut.
#[tokio::test]
async fn a_20_mb_page_is_capped_and_not_downloaded_whole() {
    let (mut h, web, session) = start("").await;
    // A hang detector, not a speed claim: a debug build converting megabytes
    // of HTML on a loaded machine can take longer than the default bound.
    h.agent.set_timeout(Duration::from_secs(60));
    let size = 20 * 1024 * 1024;
    let paragraph = Bytes::from_static(b"<p>All work and no play makes a long page.</p>\n");
    web.route("/big", Route::Generated { content_type: "text/html".into(), size, fill: paragraph });
    script_fetches(&h, &[&web.url("/big")]);
    let (before, _, _) = run(&mut h, &session, &[Permission::Select("allow_once")]).await;
    assert_eq!(final_status(&before, "call_0"), "completed");
    let result = told(&h, 0);
    assert!(result.contains("All work and no play makes a long page."), "{}", &result[..500]);
    let note = "bytes of text; the page goes on past the 2097152 bytes lathe read. Fetch again with max_bytes up to 40960 to see more.]";
    assert!(result.ends_with(note), "{}", &result[result.len() - 300..]);
    assert!(result.len() < 34 * 1024, "the default cap is 32 KiB: {} bytes", result.len());
    let sent = web.wait_for(WAIT, |sent| sent.iter().any(|s| s.path == "/big" && s.closed)).await;
    let big = sent.iter().find(|s| s.path == "/big").unwrap();
    assert!(!big.finished && big.bytes < size / 2, "the rest was never read: {big:?}");
}

/// Binaries are refused with a clear message, by type or by content; a body
/// of no useful type that is text is read whole.
#[tokio::test]
async fn a_binary_is_refused() {
    let (mut h, web, session) = start("").await;
    let png = Bytes::from_static(b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR\0\0\0\x01\0\0\0\x01\x08\x06\0\0\0\x1f\x15\xc4\x89");
    web.route("/logo.png", Route::ok("image/png", png.clone()));
    web.route("/blob", Route::ok("application/octet-stream", png));
    let notes: String = (1..=500).map(|n| format!("note {n}\n")).collect();
    web.route("/notes", Route::ok("application/octet-stream", notes.clone()));
    script_fetches(&h, &[&web.url("/logo.png"), &web.url("/blob"), &web.url("/notes")]);
    let (before, _, _) = run(&mut h, &session, &[Permission::Select("allow_always")]).await;
    let result = told(&h, 0);
    assert!(result.contains(&format!("{} is not text (image/png", web.url("/logo.png"))), "{result}");
    assert!(result.contains("fetch reads web pages and text only"), "{result}");
    assert!(told(&h, 1).contains("is not text (application/octet-stream"), "{}", told(&h, 1));
    assert_eq!(final_status(&before, "call_0"), "failed");
    assert_eq!(final_status(&before, "call_1"), "failed");
    assert!(told(&h, 2).ends_with(&format!("\n{notes}")), "all of it, in order: {}", told(&h, 2));
}

/// Cancelling while a page trickles in answers `cancelled` and drops the
/// connection.
#[tokio::test]
async fn a_cancel_during_a_slow_body_drops_the_connection() {
    let (mut h, web, session) = start("").await;
    let head = Bytes::from_static(b"<html><body><h1>Slow");
    web.route("/slow", Route::Stalls { content_type: "text/html".into(), head });
    script_fetches(&h, &[&web.url("/slow")]);
    let mut editor = FakeEditor::answering(&[Permission::Select("allow_once")]);
    let id = prompt(&mut h.agent, &session, "read it").await;
    // Answer the permission prompt, then wait for the body to start.
    loop {
        let message = h.agent.next_message(WAIT).await.expect("the permission request");
        if message["method"] == "session/request_permission" {
            let crate::support::acp_client::Answer::Result(result) = editor.answer(&message) else { unreachable!() };
            h.agent.reply(&message["id"], result).await;
            break;
        }
    }
    web.wait_for(WAIT, |sent| sent.iter().any(|s| s.path == "/slow" && s.bytes > 0)).await;
    h.agent.notify("session/cancel", json!({"sessionId": session})).await;
    let (before, response) = h.agent.response(id).await;
    assert_eq!(response["result"]["stopReason"], "cancelled", "{response}");
    assert_eq!(final_status(&before, "call_0"), "failed");
    let sent = web.wait_for(WAIT, |sent| sent.iter().any(|s| s.path == "/slow" && s.closed)).await;
    assert!(sent.iter().all(|s| !s.finished), "{sent:?}");
}

/// The `[network]` timeouts are the fetch tool's too: a page that stops
/// sending for longer than `stream_idle_timeout_secs` fails the call with
/// that reason (and the turn goes on), instead of holding the turn.
#[tokio::test]
async fn a_page_that_stops_sending_fails_after_the_configured_idle_timeout() {
    let (mut h, web, session) = start("[network]\nstream_idle_timeout_secs = 1\n").await;
    let head = Bytes::from_static(b"<html><body><h1>Slow");
    web.route("/slow", Route::Stalls { content_type: "text/html".into(), head });
    script_fetches(&h, &[&web.url("/slow")]);
    let (before, response, _) = run(&mut h, &session, &[Permission::Select("allow_once")]).await;
    assert_eq!(response["result"]["stopReason"], "end_turn", "{response}");
    assert_eq!(final_status(&before, "call_0"), "failed");
    let said = told(&h, 0);
    assert!(said.contains("1 s"), "the configured idle timeout is named: {said}");
}

/// `[tools] fetch = false`: the tool is not offered, and a call to it is
/// answered like a call to any tool that does not exist.
#[tokio::test]
async fn fetch_can_be_turned_off() {
    let (mut h, web, session) = start("[tools]\nfetch = false\n").await;
    web.route("/a", Route::ok("text/plain", "page"));
    script_fetches(&h, &[&web.url("/a")]);
    let (before, _, _) = run(&mut h, &session, &[]).await;
    let offered: Vec<String> = h.mock.requests()[0].body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap().to_owned())
        .collect();
    assert!(!offered.is_empty() && !offered.iter().any(|name| name == "fetch"), "{offered:?}");
    assert!(told(&h, 0).starts_with("There is no tool named \"fetch\""), "{}", told(&h, 0));
    assert_eq!(final_status(&before, "call_0"), "failed");
    assert!(web.requests().is_empty());
}

/// A proxy named in the environment carries the request, even one on
/// loopback: it is the user's own configuration, not a page's doing.
#[tokio::test]
async fn the_proxy_from_the_environment_is_used() {
    let web = WebServer::start().await;
    let proxy = format!("http://localhost:{}", web.port());
    // The mock model stays direct; the page's host (reserved, never in DNS) goes through the proxy.
    let envs =
        [("http_proxy", proxy.as_str()), ("HTTP_PROXY", &proxy), ("no_proxy", "127.0.0.1"), ("NO_PROXY", "127.0.0.1")];
    // The binary: the proxy is read from the process environment.
    let mut h = Harness::process("", &envs).await;
    let session = h.session().await;
    web.route("/page", Route::ok("text/plain", "served by the proxy"));
    script_fetches(&h, &["http://docs.example.test/page"]);
    let (before, _, _) = run(&mut h, &session, &[Permission::Select("allow_once")]).await;
    let result = told(&h, 0);
    assert!(result.starts_with("URL: http://docs.example.test/page"), "{result}");
    assert!(result.ends_with("served by the proxy"), "{result}");
    assert_eq!(final_status(&before, "call_0"), "completed");
    assert_eq!(web.requests(), ["/page"]);
}

/// With a small `[context] max_tool_output_bytes`, the page is cut to fit
/// it: the model gets the head and the note, not a head and tail glued
/// together by the history's own trimming.
#[tokio::test]
async fn the_cap_fits_what_the_history_keeps() {
    let (mut h, web, session) = start("[context]\nmax_tool_output_bytes = 4096\n").await;
    let text: String = (1..=2000).map(|n| format!("line {n}\n")).collect();
    web.route("/long.txt", Route::ok("text/plain", text));
    script_fetches(&h, &[&web.url("/long.txt")]);
    run(&mut h, &session, &[Permission::Select("allow_once")]).await;
    let result = told(&h, 0);
    assert!(result.len() <= 4096 && !result.contains("omitted from the middle"), "{result}");
    assert!(result.contains("line 1\nline 2\n"), "{result}");
    assert!(result.contains("[Cut: showing the first 30"), "{result}");
}

/// A page of `depth` nested `<div>`s with a sentence at the bottom.
fn nested_page(depth: usize) -> String {
    format!("<html><body>{}<p>the bottom at {depth}</p>{}</body></html>", "<div>".repeat(depth), "</div>".repeat(depth))
}

/// A page built to kill the converter (issue 29): 2,000 nested `<div>`s
/// overflowed the stack of the HTML-to-Markdown walk and aborted lathe,
/// and 60,000 kept the tree builder busy for minutes. Through the binary:
/// both come back as Markdown, the sentence at the bottom kept, with a note
/// saying what was flattened, and lathe lives on.
#[tokio::test]
async fn deeply_nested_pages_are_flattened_not_fatal() {
    let mut h = Harness::process("", &[]).await;
    let web = WebServer::start().await;
    let session = h.session().await;
    web.route("/2000", Route::ok("text/html", nested_page(2000)));
    web.route("/60000", Route::ok("text/html", nested_page(60_000)));
    script_fetches(&h, &[&web.url("/2000"), &web.url("/60000")]);
    let (before, response, _) = run(&mut h, &session, &[Permission::Select("allow_always")]).await;
    assert_eq!(response["result"]["stopReason"], "end_turn", "{response}");
    for (n, depth) in [(0, 2000), (1, 60_000)] {
        let result = told(&h, n);
        assert!(result.contains(&format!("the bottom at {depth}")), "{result}");
        assert!(result.contains("[The page nests elements more than 128 deep; lathe flattened"), "{result}");
        assert_eq!(final_status(&before, &format!("call_{n}")), "completed");
    }
}

/// The CPU time lathe's process has used, in seconds (`/proc` on Linux, the
/// system's process list on Windows).
fn cpu_seconds(pid: u32) -> f64 {
    crate::support::commands::cpu_time(pid).expect("lathe's CPU time").as_secs_f64()
}

/// A 2 MB page of one tag with a quarter of a million attributes: slow to
/// convert whatever the bounds (the tokenizer checks each new attribute
/// against all the others), minutes of CPU time unbounded.
fn attribute_flood() -> String {
    let mut flood = String::from("<html><body><p ");
    let mut n = 0;
    while flood.len() < 2_000_000 {
        flood.push_str(&format!("a{n} "));
        n += 1;
    }
    flood.push_str(">text</p></body></html>");
    flood
}

/// Waits until lathe's CPU time stops growing after a conversion was
/// stopped: the conversion thread notices within milliseconds; it gets half
/// a second, then lathe must stay idle for 2 s.
async fn assert_idle_after(pid: u32, what: &str) {
    if !crate::support::commands::live_cpu_time() {
        return;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let after = cpu_seconds(pid);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let idle = cpu_seconds(pid) - after;
    assert!(idle < 0.2, "lathe used {idle:.2} s of CPU in the 2 s after {what}");
}

/// A page that is slow to convert whatever the bounds (one tag with a
/// quarter of a million attributes: the tokenizer checks each new attribute
/// against all the others) stops converting when the call is cancelled:
/// the prompt answers `cancelled` at once and lathe's CPU use stops, where
/// the conversion used to go on on a blocking thread nobody could stop.
#[tokio::test]
async fn cancelling_stops_a_slow_conversion() {
    if !crate::support::commands::live_cpu_time() {
        return;
    }
    let mut h = Harness::process("", &[]).await;
    let web = WebServer::start().await;
    let session = h.session().await;
    web.route("/flood", Route::ok("text/html", attribute_flood()));
    script_fetches(&h, &[&web.url("/flood")]);
    let mut editor = FakeEditor::answering(&[Permission::Select("allow_once")]);
    let id = prompt(&mut h.agent, &session, "read it").await;
    loop {
        let message = h.agent.next_message(WAIT).await.expect("the permission request");
        if message["method"] == "session/request_permission" {
            let crate::support::acp_client::Answer::Result(result) = editor.answer(&message) else { unreachable!() };
            h.agent.reply(&message["id"], result).await;
            break;
        }
    }
    web.wait_for(WAIT, |sent| sent.iter().any(|s| s.path == "/flood" && s.closed)).await;
    // Converting: lathe is busy.
    let pid = h.agent.pid();
    let start = cpu_seconds(pid);
    let mut waited = Duration::ZERO;
    while cpu_seconds(pid) - start < 0.3 {
        assert!(waited < Duration::from_secs(20), "lathe never got busy converting");
        tokio::time::sleep(Duration::from_millis(50)).await;
        waited += Duration::from_millis(50);
    }
    h.agent.notify("session/cancel", json!({"sessionId": session})).await;
    let (before, response) = h.agent.response(id).await;
    assert_eq!(response["result"]["stopReason"], "cancelled", "{response}");
    assert_eq!(final_status(&before, "call_0"), "failed");
    assert_idle_after(pid, "the cancel").await;
}

/// A hostile page ends the call within the fetch's own time limit
/// (`[network] response_timeout_secs`, here 3 s) with a message to the
/// model, and the conversion stops with it (issue 29): the time limit used
/// to answer the model while the conversion went on, on a blocking thread
/// nobody could stop, until it finished or aborted lathe.
#[tokio::test]
async fn a_slow_page_ends_within_the_fetch_time_limit() {
    let mut h = Harness::process("[network]\nresponse_timeout_secs = 3\n", &[]).await;
    let web = WebServer::start().await;
    let session = h.session().await;
    web.route("/flood", Route::ok("text/html", attribute_flood()));
    script_fetches(&h, &[&web.url("/flood")]);
    let (before, response, _) = run(&mut h, &session, &[Permission::Select("allow_once")]).await;
    assert_eq!(response["result"]["stopReason"], "end_turn", "{response}");
    assert_eq!(final_status(&before, "call_0"), "failed");
    let result = told(&h, 0);
    assert!(result.contains("took longer than 3 s; gave up"), "{result}");
    assert_idle_after(h.agent.pid(), "the time limit").await;
}
