//! HTML to Markdown for the `fetch` tool, bounded against hostile pages.
//!
//! A page is untrusted input, and the conversion is the one parser in lathe
//! that builds a tree: html5ever builds the document, htmd walks it
//! recursively (a few KiB of stack per level) into Markdown. Unbounded, a
//! 10 KB page of 2,000 nested `<div>`s overflowed the stack and aborted the
//! process, and 60,000 levels kept the tree builder busy for minutes (its
//! scope checks walk the stack of open elements for every tag). So every
//! resource the conversion uses is bounded here, for any input:
//!
//! - **Stack**: the document is at most [`MAX_DEPTH`] elements deep when
//!   htmd walks it. While parsing, a start tag that would open an element
//!   past that depth (counting the tree builder's open and active formatting
//!   elements) is dropped, its text kept; after parsing, whatever still
//!   nests deeper (the parser moves subtrees around) is flattened: the
//!   descendants of an element at that depth become its children, in
//!   document order. The walk runs on a thread of its own with
//!   [`STACK_BYTES`] of stack, far more than that depth needs.
//! - **Work while parsing**: with the stack of open elements bounded, each
//!   token costs the tree builder at most a bounded walk; the input is fed
//!   in pieces of [`CHUNK_BYTES`], and the time budget is checked between
//!   pieces, so even the tokenizer's own quadratic case (one tag with
//!   hundreds of thousands of attributes) stops at the budget.
//! - **Memory while parsing**: at most [`max_elements`] elements are
//!   created (a page can make the parser clone its formatting elements over
//!   and over); past that the rest of the page is left out. The attributes
//!   of `<html>` and `<body>` tags are dropped (the parser merges each
//!   repeated tag's attributes into the element, quadratically), and so are
//!   parse errors (nothing reads them).
//! - **Work while walking**: htmd merges adjacent inline siblings by removing
//!   them from a vector one at a time, quadratic in the number of siblings;
//!   an element with more than [`MERGE_SIBLINGS`] children gets an empty text
//!   node between its element children, so nothing is merged there. Every
//!   element handler goes through a guard that checks the budget and sums the
//!   text each element hands up: past [`MAX_COPIED_BYTES`] (deeply nested
//!   lists indent their text once per level) the walk stops.
//! - **Time**: a [`Budget`] of CPU time (this thread's, so a loaded machine
//!   does not cut a page short) and a stop flag the caller sets when the
//!   call is cancelled or the fetch's own time limit passes. The parse, the
//!   tidy-up and the walk each check it often; a stopped conversion returns
//!   [`Stopped`], and its thread ends soon after.
//!
//! The Markdown is htmd's: the page's `<main>` (or `role="main"`) when it has
//! text in it, else the whole page, with navigation, scripts, styles and forms
//! dropped, and the `<title>` apart.

use std::borrow::Cow;
use std::cell::Cell;
use std::collections::BTreeSet;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use html5ever::tendril::StrTendril;
use html5ever::tokenizer::{BufferQueue, TagKind, Token, TokenSink, TokenSinkResult, Tokenizer, TokenizerOpts};
use html5ever::tree_builder::{ElementFlags, NodeOrText, QuirksMode, Tracer, TreeBuilder, TreeBuilderOpts, TreeSink};
use html5ever::{Attribute, ExpandedName, QualName, TokenizerResult};
use markup5ever_rcdom::{Handle, Node, NodeData, RcDom};

use crate::sync::lock;

/// How deep the converted document may nest (the document node is depth 0).
/// Lighthouse flags pages deeper than 32 as excessive; real pages stay well
/// under 100. htmd needs a few KiB of stack per level (more in a debug build).
pub const MAX_DEPTH: usize = 128;

/// The stack of the converting thread: [`MAX_DEPTH`] levels of htmd's
/// recursion need well under a MiB in a release build and about 2 MiB in a
/// debug build. Only the pages touched become resident.
pub const STACK_BYTES: usize = 16 * 1024 * 1024;

/// CPU time one conversion may take. A 2 MiB documentation page converts in
/// well under half a second; only a page built to be slow comes near this.
pub const CPU_LIMIT: Duration = Duration::from_secs(5);

/// Bytes of HTML fed to the parser between two looks at the budget.
pub const CHUNK_BYTES: usize = 1024;

/// Children of one element past which adjacent inline siblings are not merged.
pub const MERGE_SIBLINGS: usize = 64;

/// Bytes of converted text the walk may hand up from element to element, summed.
pub const MAX_COPIED_BYTES: usize = 64 * 1024 * 1024;

/// Tags whose content is never page text.
const DROPPED_TAGS: [&str; 16] = [
    "script", "style", "noscript", "template", "nav", "svg", "canvas", "iframe", "object", "embed", "form", "button",
    "select", "textarea", "input", "dialog",
];

/// The most elements the parser may create for `html`: about what a page
/// of that size made only of tags could hold (each tag is at least three
/// bytes), plus room for the elements the parser adds by itself.
pub fn max_elements(html: &str) -> usize {
    html.len() / 3 + 4096
}

/// Why a conversion stopped before its end.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Stopped {
    /// The caller stopped it (the call was cancelled, or the fetch ran out of time).
    #[error("the conversion was stopped")]
    Cancelled,
    /// It used up its CPU time.
    #[error("converting the page's HTML took more than {} s of CPU time", CPU_LIMIT.as_secs())]
    OutOfTime,
    /// The walk would copy more than [`MAX_COPIED_BYTES`].
    #[error("converting the page's HTML would copy more than {} MiB of text (its elements nest in a way that multiplies its text)", MAX_COPIED_BYTES >> 20)]
    TooMuchText,
}

impl Stopped {
    const NONE: u8 = 0;

    fn code(self) -> u8 {
        match self {
            Stopped::Cancelled => 1,
            Stopped::OutOfTime => 2,
            Stopped::TooMuchText => 3,
        }
    }

    fn from_code(code: u8) -> Option<Stopped> {
        match code {
            1 => Some(Stopped::Cancelled),
            2 => Some(Stopped::OutOfTime),
            3 => Some(Stopped::TooMuchText),
            _ => None,
        }
    }
}

/// What one conversion may spend: CPU time on its own thread, until the
/// caller stops it.
#[derive(Debug)]
pub struct Budget {
    stopped: AtomicBool,
    cpu: Duration,
    /// The thread's CPU clock when the conversion started (set on its thread).
    started: Mutex<Option<Duration>>,
}

impl Budget {
    /// A budget of `cpu` time.
    pub fn new(cpu: Duration) -> Budget {
        Budget { stopped: AtomicBool::new(false), cpu, started: Mutex::new(None) }
    }

    /// Stops the conversion (from any thread): it returns
    /// [`Stopped::Cancelled`] at its next look at the budget.
    pub fn stop(&self) {
        self.stopped.store(true, Ordering::Relaxed);
    }

    /// Whether [`Budget::stop`] was called.
    fn is_stopped(&self) -> bool {
        self.stopped.load(Ordering::Relaxed)
    }

    /// Starts counting this thread's CPU time.
    fn start(&self) {
        *lock(&self.started) = Some(thread_cpu());
    }

    /// `Err` once stopped or out of CPU time.
    fn check(&self) -> Result<(), Stopped> {
        if self.is_stopped() {
            return Err(Stopped::Cancelled);
        }
        let started = *lock(&self.started);
        match started {
            Some(started) if thread_cpu().saturating_sub(started) > self.cpu => Err(Stopped::OutOfTime),
            Some(_) | None => Ok(()),
        }
    }
}

/// The CPU time this thread has used (see [`crate::platform::cpu`]).
fn thread_cpu() -> Duration {
    crate::platform::cpu::thread_cpu()
}

/// A converted page.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Converted {
    /// The `<title>`, whitespace collapsed.
    pub title: Option<String>,
    /// The Markdown.
    pub text: String,
    /// Elements nested deeper than [`MAX_DEPTH`] were flattened.
    pub flattened: bool,
    /// The parser reached [`max_elements`]; the rest of the page is left out.
    pub cut: bool,
}

/// Runs [`convert`] on a thread of its own with [`STACK_BYTES`] of stack
/// and hands the result to `done`. A panic in the conversion ends only that
/// thread (`done` is then never called: the caller sees its channel close).
pub fn spawn(
    html: String,
    budget: Arc<Budget>,
    done: impl FnOnce(Result<Converted, Stopped>) + Send + 'static,
) -> std::io::Result<()> {
    std::thread::Builder::new()
        .name("lathe-html".to_owned())
        .stack_size(STACK_BYTES)
        .spawn(move || done(convert(&html, &budget)))
        .map(drop)
}

/// Converts `html` to Markdown within `budget`. Run it on a thread with
/// [`STACK_BYTES`] of stack (see [`spawn`]); its CPU time is counted from
/// here.
pub fn convert(html: &str, budget: &Arc<Budget>) -> Result<Converted, Stopped> {
    budget.start();
    let parsed = parse(html, budget)?;
    let tidied = tidy(&parsed.document, budget)?;
    let (title, text) = walk(&parsed.document, &tidied.names, budget)?;
    Ok(Converted { title, text, flattened: parsed.dropped || tidied.flattened, cut: parsed.cut })
}

/// The parsed document, and what the parse left out.
struct Parsed {
    document: Handle,
    /// Start tags past the depth limit were dropped.
    dropped: bool,
    /// The element cap was reached.
    cut: bool,
}

fn parse(html: &str, budget: &Budget) -> Result<Parsed, Stopped> {
    let sink = CappedDom { dom: RcDom::default(), elements: Cell::new(0), max_elements: max_elements(html) };
    let builder = TreeBuilder::new(sink, TreeBuilderOpts { scripting_enabled: true, ..TreeBuilderOpts::default() });
    let gate = Gate { builder, max_open: MAX_DEPTH, open: Cell::new(None), dropped: Cell::new(false) };
    let tokenizer = Tokenizer::new(gate, TokenizerOpts::default());
    let input = BufferQueue::default();
    let mut rest = html;
    while !rest.is_empty() {
        budget.check()?;
        let mut end = CHUNK_BYTES.min(rest.len());
        while !rest.is_char_boundary(end) {
            end -= 1;
        }
        input.push_back(StrTendril::from_slice(&rest[..end]));
        rest = &rest[end..];
        while !matches!(tokenizer.feed(&input), TokenizerResult::Done) {}
    }
    budget.check()?;
    tokenizer.end();
    let gate = &tokenizer.sink;
    Ok(Parsed {
        document: gate.builder.sink.dom.document.clone(),
        dropped: gate.dropped.get(),
        cut: gate.builder.sink.full(),
    })
}

/// Stands between the tokenizer and the tree builder: drops a start tag that
/// would open an element past the depth limit, every token once the element
/// cap is reached, parse errors, and the attributes of `<html>` and `<body>`.
struct Gate {
    builder: TreeBuilder<Handle, CappedDom>,
    /// Open plus active formatting elements at which start tags are dropped.
    max_open: usize,
    /// The last count of those, while only dropped start tags came since.
    open: Cell<Option<usize>>,
    /// Whether a start tag was dropped.
    dropped: Cell<bool>,
}

/// Counts the handles the tree builder holds.
struct Count(Cell<usize>);

impl Tracer for Count {
    type Handle = Handle;

    fn trace_handle(&self, _node: &Handle) {
        self.0.set(self.0.get() + 1);
    }
}

impl Gate {
    /// The elements the tree builder holds: its stack of open elements, its
    /// active formatting elements (each may be cloned back onto the stack),
    /// and a few pointers (the document, head, form).
    fn open(&self) -> usize {
        if let Some(open) = self.open.get() {
            return open;
        }
        let count = Count(Cell::new(0));
        self.builder.trace_handles(&count);
        self.open.set(Some(count.0.get()));
        count.0.get()
    }
}

impl TokenSink for Gate {
    type Handle = Handle;

    fn process_token(&self, token: Token, line_number: u64) -> TokenSinkResult<Handle> {
        let token = match token {
            Token::ParseError(_) => return TokenSinkResult::Continue,
            Token::EOFToken => Token::EOFToken,
            _ if self.builder.sink.full() => return TokenSinkResult::Continue,
            Token::TagToken(mut tag) if tag.kind == TagKind::StartTag => {
                if self.open() >= self.max_open {
                    self.dropped.set(true);
                    return TokenSinkResult::Continue;
                }
                if matches!(&*tag.name, "html" | "body") {
                    tag.attrs.clear();
                }
                Token::TagToken(tag)
            }
            other => other,
        };
        self.open.set(None);
        self.builder.process_token(token, line_number)
    }

    fn end(&self) {
        self.builder.end();
    }

    fn adjusted_current_node_present_but_not_in_html_namespace(&self) -> bool {
        self.builder.adjusted_current_node_present_but_not_in_html_namespace()
    }
}

/// htmd's DOM, counting the elements created and keeping no parse errors.
struct CappedDom {
    dom: RcDom,
    elements: Cell<usize>,
    max_elements: usize,
}

impl CappedDom {
    fn full(&self) -> bool {
        self.elements.get() >= self.max_elements
    }
}

impl TreeSink for CappedDom {
    type Handle = Handle;
    type Output = Self;
    type ElemName<'a>
        = ExpandedName<'a>
    where
        Self: 'a;

    fn finish(self) -> Self {
        self
    }

    fn parse_error(&self, _msg: Cow<'static, str>) {}

    fn get_document(&self) -> Handle {
        self.dom.get_document()
    }

    fn elem_name<'a>(&'a self, target: &'a Handle) -> ExpandedName<'a> {
        self.dom.elem_name(target)
    }

    fn create_element(&self, name: QualName, attrs: Vec<Attribute>, flags: ElementFlags) -> Handle {
        self.elements.set(self.elements.get() + 1);
        self.dom.create_element(name, attrs, flags)
    }

    fn create_comment(&self, text: StrTendril) -> Handle {
        self.dom.create_comment(text)
    }

    fn create_pi(&self, target: StrTendril, data: StrTendril) -> Handle {
        self.dom.create_pi(target, data)
    }

    fn append(&self, parent: &Handle, child: NodeOrText<Handle>) {
        self.dom.append(parent, child);
    }

    fn append_based_on_parent_node(&self, element: &Handle, prev_element: &Handle, child: NodeOrText<Handle>) {
        self.dom.append_based_on_parent_node(element, prev_element, child);
    }

    fn append_doctype_to_document(&self, name: StrTendril, public_id: StrTendril, system_id: StrTendril) {
        self.dom.append_doctype_to_document(name, public_id, system_id);
    }

    fn mark_script_already_started(&self, node: &Handle) {
        self.dom.mark_script_already_started(node);
    }

    fn pop(&self, node: &Handle) {
        self.dom.pop(node);
    }

    fn get_template_contents(&self, target: &Handle) -> Handle {
        self.dom.get_template_contents(target)
    }

    fn same_node(&self, x: &Handle, y: &Handle) -> bool {
        self.dom.same_node(x, y)
    }

    fn set_quirks_mode(&self, mode: QuirksMode) {
        self.dom.set_quirks_mode(mode);
    }

    fn append_before_sibling(&self, sibling: &Handle, new_node: NodeOrText<Handle>) {
        self.dom.append_before_sibling(sibling, new_node);
    }

    fn add_attrs_if_missing(&self, target: &Handle, attrs: Vec<Attribute>) {
        self.dom.add_attrs_if_missing(target, attrs);
    }

    fn associate_with_form(&self, target: &Handle, form: &Handle, nodes: (&Handle, Option<&Handle>)) {
        self.dom.associate_with_form(target, form, nodes);
    }

    fn remove_from_parent(&self, target: &Handle) {
        self.dom.remove_from_parent(target);
    }

    fn reparent_children(&self, node: &Handle, new_parent: &Handle) {
        self.dom.reparent_children(node, new_parent);
    }

    fn is_mathml_annotation_xml_integration_point(&self, handle: &Handle) -> bool {
        self.dom.is_mathml_annotation_xml_integration_point(handle)
    }

    fn set_current_line(&self, line_number: u64) {
        self.dom.set_current_line(line_number);
    }

    fn allow_declarative_shadow_roots(&self, intended_parent: &Handle) -> bool {
        self.dom.allow_declarative_shadow_roots(intended_parent)
    }

    fn attach_declarative_shadow(&self, location: &Handle, template: &Handle, attrs: &[Attribute]) -> bool {
        self.dom.attach_declarative_shadow(location, template, attrs)
    }

    fn maybe_clone_an_option_into_selectedcontent(&self, option: &Handle) {
        self.dom.maybe_clone_an_option_into_selectedcontent(option);
    }
}

/// What the tidy-up found.
struct Tidied {
    /// Every element name in the document.
    names: BTreeSet<String>,
    /// Something was flattened.
    flattened: bool,
}

/// Nodes visited between two looks at the budget.
const NODES_PER_CHECK: usize = 4096;

/// Makes the document safe to walk, without recursion: flattens what nests
/// past [`MAX_DEPTH`], keeps htmd from merging the siblings of an element
/// with more than [`MERGE_SIBLINGS`] children, drops template contents
/// (never shown), and collects the element names.
fn tidy(document: &Handle, budget: &Budget) -> Result<Tidied, Stopped> {
    let mut names = BTreeSet::new();
    let mut flattened = false;
    let mut pending = vec![(Rc::clone(document), 0usize)];
    let mut visited = 0usize;
    while let Some((node, depth)) = pending.pop() {
        visited += 1;
        if visited.is_multiple_of(NODES_PER_CHECK) {
            budget.check()?;
        }
        if let NodeData::Element { name, template_contents, .. } = &node.data {
            if !names.contains(&*name.local) {
                names.insert(name.local.to_string());
            }
            drop(template_contents.borrow_mut().take());
        }
        if depth >= MAX_DEPTH && node.children.borrow().iter().any(|child| !child.children.borrow().is_empty()) {
            flatten(&node);
            flattened = true;
        }
        if node.children.borrow().len() > MERGE_SIBLINGS {
            separate(&node);
        }
        pending.extend(node.children.borrow().iter().map(|child| (Rc::clone(child), depth + 1)));
    }
    Ok(Tidied { names, flattened })
}

/// Makes every descendant of `node` its child, in document order, each with
/// no children of its own.
fn flatten(node: &Handle) {
    let mut flat = Vec::new();
    let mut pending: Vec<Handle> = node.children.take().into_iter().rev().collect();
    while let Some(child) = pending.pop() {
        pending.extend(child.children.take().into_iter().rev());
        child.parent.set(Some(Rc::downgrade(node)));
        flat.push(child);
    }
    *node.children.borrow_mut() = flat;
}

/// Puts an empty text node between every two adjacent element children of
/// `node`: htmd merges only adjacent elements, and an empty text adds nothing
/// to what it writes.
fn separate(node: &Handle) {
    let children = node.children.take();
    let mut separated = Vec::with_capacity(children.len() * 2);
    let mut after_element = false;
    for child in children {
        let element = matches!(child.data, NodeData::Element { .. });
        if element && after_element {
            let empty = Node::new(NodeData::Text { contents: std::cell::RefCell::new(StrTendril::new()) });
            empty.parent.set(Some(Rc::downgrade(node)));
            separated.push(empty);
        }
        after_element = element;
        separated.push(child);
    }
    *node.children.borrow_mut() = separated;
}

/// Guard calls between two looks at the CPU clock.
const CALLS_PER_CLOCK: usize = 64;

/// htmd's walk, every element through the guard. Returns the title and the
/// text (the page's main element when it has text in it).
fn walk(
    document: &Handle,
    names: &BTreeSet<String>,
    budget: &Arc<Budget>,
) -> Result<(Option<String>, String), Stopped> {
    let main: Arc<Mutex<Option<String>>> = Arc::default();
    let title: Arc<Mutex<Option<String>>> = Arc::default();
    let main_slot = Arc::clone(&main);
    let title_slot = Arc::clone(&title);
    let is_main = |element: &htmd::Element| {
        element.tag == "main"
            || element
                .attrs
                .iter()
                .any(|attr| &*attr.name.local == "role" && attr.value.trim().eq_ignore_ascii_case("main"))
    };
    let mut builder = htmd::HtmlToMarkdown::builder()
        .skip_tags(DROPPED_TAGS.to_vec())
        .add_handler(vec!["title"], move |handlers: &dyn htmd::element_handler::Handlers, element: htmd::Element| {
            let text = handlers.walk_children(element.node).content;
            let text = text.split_whitespace().collect::<Vec<_>>().join(" ");
            let mut slot = lock(&title_slot);
            if slot.is_none() && !text.is_empty() {
                *slot = Some(text);
            }
            None
        })
        .add_handler(
            vec!["main", "div", "section", "article"],
            move |handlers: &dyn htmd::element_handler::Handlers, element: htmd::Element| {
                let main = is_main(&element);
                let converted = handlers.fallback(element)?;
                if main && !converted.content.trim().is_empty() {
                    // The outermost main finishes last and wins.
                    *lock(&main_slot) = Some(converted.content.clone());
                }
                Some(converted)
            },
        );
    // The guard: the last handler added for a tag is the first called.
    let guard = Arc::new(Guard {
        budget: Arc::clone(budget),
        halted: AtomicU8::new(Stopped::NONE),
        calls: AtomicUsize::new(0),
        copied: AtomicUsize::new(0),
    });
    if !names.is_empty() {
        let tags: Vec<&str> = names.iter().map(String::as_str).collect();
        let guard = Arc::clone(&guard);
        builder =
            builder.add_handler(tags, move |handlers: &dyn htmd::element_handler::Handlers, element: htmd::Element| {
                guard.handle(handlers, element)
            });
    }
    let converter = builder.build();
    let whole = converter.tree_to_markdown(document);
    if let Some(stopped) = Stopped::from_code(guard.halted.load(Ordering::Relaxed)) {
        return Err(stopped);
    }
    let main = lock(&main).take();
    let title = lock(&title).take();
    let text = main.map_or(whole, |main| main.trim_matches('\n').to_owned());
    Ok((title, text))
}

/// Every element of the walk passes here first: once the budget is spent
/// (or the text handed up passes [`MAX_COPIED_BYTES`]) every element is
/// skipped, so the walk unwinds at once.
struct Guard {
    budget: Arc<Budget>,
    halted: AtomicU8,
    calls: AtomicUsize,
    copied: AtomicUsize,
}

impl Guard {
    fn handle(
        &self,
        handlers: &dyn htmd::element_handler::Handlers,
        element: htmd::Element,
    ) -> Option<htmd::element_handler::HandlerResult> {
        if self.halted.load(Ordering::Relaxed) != Stopped::NONE {
            return None;
        }
        let calls = self.calls.fetch_add(1, Ordering::Relaxed);
        let checked = if self.budget.is_stopped() {
            Err(Stopped::Cancelled)
        } else if calls.is_multiple_of(CALLS_PER_CLOCK) {
            self.budget.check()
        } else {
            Ok(())
        };
        if let Err(stopped) = checked {
            self.halt(stopped);
            return None;
        }
        let converted = handlers.fallback(element)?;
        let copied = self.copied.fetch_add(converted.content.len(), Ordering::Relaxed) + converted.content.len();
        if copied > MAX_COPIED_BYTES {
            self.halt(Stopped::TooMuchText);
            return None;
        }
        Some(converted)
    }

    fn halt(&self, why: Stopped) {
        let _ = self.halted.compare_exchange(Stopped::NONE, why.code(), Ordering::Relaxed, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use super::*;

    /// The budget of the tests that check something else than the budget:
    /// [`CPU_LIMIT`], and on Windows, whose stand-in for the thread's CPU
    /// clock is the wall clock (`crate::platform::cpu`), six times it: a
    /// loaded machine running the debug build under wine stretched
    /// `many_siblings_convert_in_linear_time` past 5 s of wall time. The
    /// budget itself is `the_budget_and_a_stop_end_a_slow_conversion`'s.
    const TEST_LIMIT: Duration = if cfg!(windows) { Duration::from_secs(30) } else { CPU_LIMIT };

    /// Converts on a thread of its own, as the fetch tool does.
    fn run(html: String, budget: Arc<Budget>) -> Result<Converted, Stopped> {
        let (done, result) = std::sync::mpsc::channel();
        spawn(html, budget, move |converted| done.send(converted).unwrap()).unwrap();
        result.recv().expect("the conversion thread ends without a panic")
    }

    fn md(html: &str) -> Converted {
        run(html.to_owned(), Arc::new(Budget::new(TEST_LIMIT))).unwrap()
    }

    #[test]
    fn html_keeps_headings_code_and_links_and_prefers_main() {
        let html = r#"<!doctype html><html><head><title> The
            Guide </title><style>body { color: red }</style><script>alert(1)</script></head>
            <body><nav><a href="/">Home</a> <a href="/docs">Docs</a></nav>
            <main><h1>Install</h1><p>See <a href="https://example.com/docs?a=1&amp;b=2">the docs</a>.</p>
            <pre><code class="language-rust">fn main() {
    greet("hi");
}
</code></pre></main><footer>Copyright</footer></body></html>"#;
        let Converted { title, text, .. } = md(html);
        assert_eq!(title.as_deref(), Some("The Guide"));
        assert!(text.starts_with("# Install"), "{text}");
        assert!(text.contains("[the docs](https://example.com/docs?a=1&b=2)"), "{text}");
        assert!(text.contains("```rust\nfn main() {\n    greet(\"hi\");\n}\n```"), "{text}");
        for dropped in ["Home", "Docs", "Copyright", "alert", "color"] {
            assert!(!text.contains(dropped), "{dropped} dropped: {text}");
        }
        // Without a main element, the whole body (navigation still dropped).
        let text = md("<body><nav>Menu</nav><div role=\"none\"><h2>Notes</h2><p>one</p></div><p>two</p></body>").text;
        assert!(text.contains("## Notes") && text.contains("two") && !text.contains("Menu"), "{text}");
        // role="main" counts; an empty main (filled by scripts) does not.
        let text = md("<body><p>chrome</p><div role=\"main\"><p>body text</p></div></body>").text;
        assert_eq!(text, "body text");
        let text = md("<body><p>fallback</p><main> </main></body>").text;
        assert!(text.contains("fallback"), "{text}");
    }

    /// The depth of the deepest node.
    fn depth(node: &Handle) -> usize {
        let mut deepest = 0;
        let mut pending = vec![(Rc::clone(node), 0)];
        while let Some((node, depth)) = pending.pop() {
            deepest = deepest.max(depth);
            pending.extend(node.children.borrow().iter().map(|child| (Rc::clone(child), depth + 1)));
        }
        deepest
    }

    /// Hostile shapes of every kind of nesting the parser knows: each
    /// converts on the conversion's own stack (2,000 nested `<div>`s used to
    /// overflow it), keeps the text at the bottom, says it flattened, and the
    /// tree htmd walks is never deeper than the limit (plus its flattened
    /// children).
    #[test]
    fn any_nesting_is_flattened_within_the_limit() {
        let deep = 100_000;
        let shapes: Vec<(&str, String)> = vec![
            ("div", format!("{}bottom", "<div>".repeat(deep))),
            ("span (no htmd handler)", format!("{}bottom", "<span>".repeat(deep))),
            ("custom element", format!("{}bottom", "<x-a>".repeat(deep))),
            ("list", format!("{}bottom", "<ul><li>".repeat(deep / 2))),
            ("blockquote", format!("{}bottom", "<blockquote>".repeat(deep / 2))),
            ("table in div", format!("{}bottom", "<div><table><tr><td>".repeat(deep / 4))),
            (
                "formatting with distinct attributes",
                format!("{}bottom", (0..deep).map(|i| format!("<b c={i}>")).collect::<String>()),
            ),
            ("svg", format!("<svg>{}bottom", "<g>".repeat(deep))),
            ("math", format!("<math>{}bottom", "<mrow>".repeat(deep))),
            ("template", format!("{}bottom", "<template>".repeat(deep))),
            ("select and options", format!("{}bottom", "<select><option><optgroup>".repeat(deep / 4))),
            ("unclosed heading and paragraphs", format!("{}bottom", "<h1><p><pre><code>".repeat(deep / 4))),
        ];
        for (shape, html) in shapes {
            let budget = Arc::new(Budget::new(TEST_LIMIT));
            let parsed = parse(&html, &budget).unwrap();
            tidy(&parsed.document, &budget).unwrap();
            assert!(depth(&parsed.document) <= MAX_DEPTH + 1, "{shape}: {}", depth(&parsed.document));
            let converted = run(html, budget).unwrap_or_else(|stopped| panic!("{shape}: {stopped}"));
            assert!(converted.flattened, "{shape}");
            if shape != "template" && shape != "svg" && shape != "select and options" {
                assert!(converted.text.contains("bottom"), "{shape}: {}", converted.text);
            }
        }
        // Nesting within the limit is left alone.
        let converted = md(&format!("{}<p>fine</p>{}", "<div>".repeat(100), "</div>".repeat(100)));
        assert!(!converted.flattened && converted.text == "fine", "{converted:?}");
    }

    /// A page can make the parser clone its formatting elements for every
    /// paragraph (each `<div>x` reopens every `<b>` still active): the parse
    /// stops creating elements at the cap and says the rest was left out.
    #[test]
    fn formatting_clones_stop_at_the_element_cap() {
        let opened: String = (0..100).map(|i| format!("<b c={i}>")).collect();
        let html = format!("<p>{opened}</p>{}", "<div>x</div>".repeat(150_000));
        let budget = Arc::new(Budget::new(TEST_LIMIT));
        let parsed = parse(&html, &budget).unwrap();
        assert!(parsed.cut);
        let mut elements = 0;
        let mut pending = vec![Rc::clone(&parsed.document)];
        while let Some(node) = pending.pop() {
            elements += usize::from(matches!(node.data, NodeData::Element { .. }));
            pending.extend(node.children.borrow().iter().cloned());
        }
        assert!(elements <= max_elements(&html) + 2 * MAX_DEPTH, "{elements}");
        // Each of those `x` sits under a hundred `**`: the walk may also find
        // it multiplies the page's text past its cap.
        match run(html, budget) {
            Ok(converted) => assert!(converted.cut),
            Err(stopped) => assert_eq!(stopped, Stopped::TooMuchText),
        }
    }

    /// htmd merges adjacent inline siblings one removal at a time; 260,000
    /// of them used to take about 20 s. With more than `MERGE_SIBLINGS`
    /// children nothing is merged, and the text is all there.
    #[test]
    fn many_siblings_convert_in_linear_time() {
        let html = "<b>x</b>".repeat(260_000);
        let converted = md(&html);
        assert_eq!(converted.text.matches('x').count(), 260_000);
        // A few adjacent siblings are still merged, as htmd does.
        assert_eq!(md("<p><b>a</b><b>b</b></p>").text, "**ab**");
    }

    /// Lists nested to the limit and repeated indent their text once per
    /// level, and the walk hands each level's text up: past
    /// `MAX_COPIED_BYTES` it stops.
    #[test]
    fn text_multiplied_by_nesting_is_refused() {
        let chain = format!("{}{}", "<ul><li>item".repeat(MAX_DEPTH / 2), "</li></ul>".repeat(MAX_DEPTH / 2));
        let html = chain.repeat(2_000_000 / chain.len());
        assert_eq!(run(html, Arc::new(Budget::new(TEST_LIMIT))), Err(Stopped::TooMuchText));
    }

    /// One tag with 100,000 attributes (the tokenizer checks each against
    /// the others: minutes of work) stops at the CPU budget, and a stop from
    /// another thread ends it at once.
    #[test]
    fn the_budget_and_a_stop_end_a_slow_conversion() {
        let flood: String = (0..100_000).map(|i| format!(" a{i}")).collect();
        let html = format!("<p{flood}>text</p>");
        let started = Instant::now();
        assert_eq!(run(html.clone(), Arc::new(Budget::new(Duration::from_millis(200)))), Err(Stopped::OutOfTime));
        assert!(started.elapsed() < Duration::from_secs(20), "{:?}", started.elapsed());

        let budget = Arc::new(Budget::new(CPU_LIMIT));
        let (done, result) = std::sync::mpsc::channel();
        spawn(html, Arc::clone(&budget), move |converted| done.send((converted, Instant::now())).unwrap()).unwrap();
        std::thread::sleep(Duration::from_millis(100));
        let stopped_at = Instant::now();
        budget.stop();
        let (converted, ended) = result.recv().unwrap();
        assert_eq!(converted, Err(Stopped::Cancelled));
        assert!(ended.duration_since(stopped_at) < Duration::from_secs(2), "{:?}", ended.duration_since(stopped_at));

        let stopped = Budget::new(CPU_LIMIT);
        stopped.stop();
        assert_eq!(run("<p>x</p>".to_owned(), Arc::new(stopped)), Err(Stopped::Cancelled));
    }
}
