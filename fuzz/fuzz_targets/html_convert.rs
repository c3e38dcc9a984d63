//! The fetch tool's HTML-to-Markdown conversion (`lathe::tools::html`):
//! arbitrary bytes, read as a page (lossy UTF-8), through the real
//! conversion on its own thread, the way `fetch` runs it.
//!
//! Checked, besides "never panics" (a panic on the conversion thread aborts
//! the process under libFuzzer, so it is a crash) and "never overflows its
//! stack":
//! - it ends: converted, or stopped by its CPU budget (2 s here) or its cap
//!   on copied text; libFuzzer's `-timeout` catches a conversion that does
//!   not look at its budget;
//! - what the bounds change, they say: a page that was neither flattened nor
//!   cut, small enough that no element has more than `MERGE_SIBLINGS`
//!   children, converts exactly as htmd's own unbounded `convert` does with
//!   the same handlers (the gate, the tidy-up and the guard change nothing
//!   else).

#![no_main]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use libfuzzer_sys::fuzz_target;

use lathe::tools::html::{self, Budget, Converted, MERGE_SIBLINGS};

/// Tags the fetch tool drops (as `html.rs` does).
const DROPPED_TAGS: [&str; 16] = [
    "script", "style", "noscript", "template", "nav", "svg", "canvas", "iframe", "object", "embed", "form", "button",
    "select", "textarea", "input", "dialog",
];

/// htmd's own conversion with the fetch tool's handlers, no bounds: what
/// a small, ordinary page must convert to.
fn reference(page: &str) -> (Option<String>, String) {
    let main: Arc<Mutex<Option<String>>> = Arc::default();
    let title: Arc<Mutex<Option<String>>> = Arc::default();
    let (main_slot, title_slot) = (Arc::clone(&main), Arc::clone(&title));
    let converter = htmd::HtmlToMarkdown::builder()
        .skip_tags(DROPPED_TAGS.to_vec())
        .add_handler(vec!["title"], move |handlers: &dyn htmd::element_handler::Handlers, element: htmd::Element| {
            let text = handlers.walk_children(element.node).content;
            let text = text.split_whitespace().collect::<Vec<_>>().join(" ");
            let mut slot = title_slot.lock().unwrap();
            if slot.is_none() && !text.is_empty() {
                *slot = Some(text);
            }
            None
        })
        .add_handler(
            vec!["main", "div", "section", "article"],
            move |handlers: &dyn htmd::element_handler::Handlers, element: htmd::Element| {
                let is_main = element.tag == "main"
                    || element.attrs.iter().any(|attr| {
                        &*attr.name.local == "role" && attr.value.trim().eq_ignore_ascii_case("main")
                    });
                let converted = handlers.fallback(element)?;
                if is_main && !converted.content.trim().is_empty() {
                    *main_slot.lock().unwrap() = Some(converted.content.clone());
                }
                Some(converted)
            },
        )
        .build();
    let whole = converter.convert(page).unwrap_or_default();
    let main = main.lock().unwrap().take();
    let title = title.lock().unwrap().take();
    (title, main.map_or(whole, |main| main.trim_matches('\n').to_owned()))
}

fuzz_target!(|data: &[u8]| {
    let page = String::from_utf8_lossy(data).into_owned();
    let budget = Arc::new(Budget::new(Duration::from_secs(2)));
    let (done, result) = std::sync::mpsc::channel();
    html::spawn(page.clone(), budget, move |converted| {
        let _ = done.send(converted);
    })
    .expect("a thread for the conversion");
    let converted = result.recv().expect("the conversion thread ended without a panic");
    let Ok(Converted { title, text, flattened, cut }) = converted else { return };
    // Few enough tags that no element can have more than MERGE_SIBLINGS children.
    let small = page.matches('<').count() < MERGE_SIBLINGS / 2 - 2;
    if small && !flattened && !cut {
        let (done, expected) = std::sync::mpsc::channel();
        std::thread::Builder::new()
            .stack_size(html::STACK_BYTES)
            .spawn(move || {
                let _ = done.send(reference(&page));
            })
            .expect("a thread for the reference");
        let (expected_title, expected_text) = expected.recv().expect("htmd's own conversion ends");
        assert_eq!(title, expected_title, "title");
        assert_eq!(text, expected_text, "text");
    }
});
