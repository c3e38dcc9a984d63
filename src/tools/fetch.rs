//! The `fetch` tool: GET one http(s) URL and hand the model its text, HTML
//! converted to Markdown (the page's `<main>` when it has one), plain text,
//! Markdown and JSON as they are, binaries refused, the result capped.
//!
//! Owns the URL checks, the HTTP client of one call (timeouts, the system's
//! proxies, redirects followed by hand so that every hop is checked), the
//! address guard, reading a bounded body and the conversion. Everything a
//! page says is hostile input: a page (or a redirect, or a DNS answer) must
//! not make lathe probe the user's machine or network. So loopback, private,
//! link-local, unique-local, CGNAT, multicast and the other special-purpose
//! addresses are refused unless the user allowed that host ([`HostTrust`]):
//! IP literals before connecting (the URL parser has already turned the
//! decimal, octal and hex IPv4 forms into addresses), names at connect time
//! in the client's own resolver ([`GuardedResolver`]), so the addresses
//! judged are the ones connected to and a second, different DNS answer gains
//! nothing.
//!
//! It knows nothing of ACP or of the permission policy: the agent tells it,
//! through [`HostTrust`], which hosts the user allowed.

use std::collections::HashSet;
use std::fmt::Write as _;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ipnet::{Ipv4Net, Ipv6Net};
use reqwest::Url;
use reqwest::dns::{Addrs, Name, Resolve, Resolving};
use reqwest::header::{ACCEPT, CONTENT_TYPE, LOCATION};
use serde::Deserialize;
use serde_json::{Value, json};

use super::{Access, Description, DisplayContent, ToolContext, ToolLimits, ToolOutcome, html};
use crate::cancel::OrCancel as _;
use crate::errors::chain;
use crate::sync::lock;

/// Redirects followed before giving up.
pub const MAX_REDIRECTS: usize = 5;

/// What lathe says it is.
const USER_AGENT: &str = concat!("lathe/", env!("CARGO_PKG_VERSION"), " (coding agent; fetch tool)");

/// What lathe asks for: Markdown first (some documentation sites serve it),
/// then HTML and plain text.
const ACCEPTED: &str = "text/markdown, text/html;q=0.9, text/plain;q=0.8, application/json;q=0.8, */*;q=0.5";

/// Bytes of an error page (after conversion) shown with a failed status.
const ERROR_PAGE_BYTES: usize = 2048;

/// Bytes read before deciding whether a body with no useful type is text.
const SNIFF_BYTES: usize = 1024;

/// The arguments of a `fetch` call.
#[derive(Debug, Clone, Deserialize)]
pub struct FetchArgs {
    /// The http or https URL.
    url: String,
    /// Bytes of text to return at most. A number, because models send
    /// `5000.0` as often as `5000`.
    #[serde(default)]
    max_bytes: Option<f64>,
    /// Which hosts may be reached on local addresses; set by the agent after
    /// the permission check, never by the model.
    #[serde(skip)]
    trust: HostTrust,
}

impl FetchArgs {
    /// Sets what the user allowed (see [`HostTrust`]).
    pub(super) fn set_trust(&mut self, trust: HostTrust) {
        self.trust = trust;
    }

    /// The result cap this call asked for, within the limits.
    fn max_bytes(&self, limits: &ToolLimits) -> usize {
        match self.max_bytes {
            Some(asked) if asked.is_finite() && asked >= 1.0 => {
                (asked.min(limits.fetch_max_bytes as f64) as usize).max(MIN_RESULT_BYTES)
            }
            Some(_) | None => limits.fetch_default_bytes,
        }
    }
}

/// The smallest result cap a call can ask for (enough for the header lines
/// and a sentence).
const MIN_RESULT_BYTES: usize = 256;

/// The hosts on which a fetch may reach loopback, private and other local
/// addresses: the ones the user allowed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HostTrust {
    /// Hosts (`host` or `host:port`, see [`host_key`]) the user allowed for
    /// the session ("always allow").
    pub remembered: HashSet<String>,
    /// Whether the user approved this very call in a permission prompt,
    /// which showed its URL. That covers the URL's own host when the host is
    /// visibly local (an IP literal or `localhost`): the user saw where it
    /// goes. A name that only resolves to a local address is not covered, or
    /// approving a harmless-looking URL would let its DNS answer reach the
    /// local network.
    pub approved: bool,
}

impl HostTrust {
    fn allows(&self, url: &Url, first: &Url) -> bool {
        let key = host_key(url);
        self.remembered.contains(&key) || (self.approved && key == host_key(first) && is_visibly_local(first))
    }
}

/// The JSON schema of `fetch`'s arguments.
pub fn fetch_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "url": { "type": "string" },
            "max_bytes": { "type": "integer" }
        },
        "required": ["url"]
    })
}

/// Describes a call: "Fetch <url>", the URL as it will be fetched. A URL
/// lathe will not fetch is a message for the model.
pub fn describe_fetch(args: &FetchArgs) -> Result<Description, String> {
    let url = parse_url(&args.url)?;
    let host = host_key(&url);
    let local = is_visibly_local(&url);
    let mut preview = format!("GET {url}");
    if local {
        let _ = write!(preview, "\n\n`{host}` is a local address: allowing lets lathe connect to it.");
    }
    Ok(Description {
        title: format!("Fetch {url}"),
        locations: Vec::new(),
        access: Access::Fetch { url: url.to_string(), host, local },
        preview: vec![DisplayContent::Text(preview)],
    })
}

/// Runs a call. Failures (a refused address, an HTTP error, a binary) are
/// outcomes the model reads; cancelling drops the connection at once.
pub async fn fetch(args: FetchArgs, ctx: &ToolContext<'_>) -> ToolOutcome {
    let url = match parse_url(&args.url) {
        Ok(url) => url,
        Err(message) => return ToolOutcome::failed(message),
    };
    let limits = ctx.limits;
    let max_bytes = args.max_bytes(limits);
    let timeout = limits.fetch_timeout;
    let work = tokio::time::timeout(timeout, fetch_page(url.clone(), &args.trust, limits, max_bytes));
    let Ok(fetched) = work.or_cancel(ctx.cancel).await else { return ToolOutcome::cancelled() };
    match fetched {
        Ok(Ok(page)) => page.outcome(&url, max_bytes, limits),
        Ok(Err(failure)) => failure.outcome(),
        Err(_) => ToolOutcome::failed(format!(
            "Fetching {url} took longer than {} s; gave up. Try again later or another URL.",
            timeout.as_secs()
        )),
    }
}

/// Parses and checks a URL the model gave.
fn parse_url(text: &str) -> Result<Url, String> {
    let shown = shorten(text.trim(), 200);
    let mut url = Url::parse(text.trim()).map_err(|err| {
        format!("\"{shown}\" is not a URL lathe can fetch ({err}). Give a full http:// or https:// URL.")
    })?;
    check_scheme(&url).map_err(|message| format!("{message} Give an http:// or https:// URL."))?;
    if url.host().is_none() {
        return Err(format!("\"{shown}\" names no host. Give a full http:// or https:// URL."));
    }
    url.set_fragment(None);
    Ok(url)
}

fn check_scheme(url: &Url) -> Result<(), String> {
    match url.scheme() {
        "http" | "https" => Ok(()),
        other => Err(format!("fetch reads http and https URLs only, not {other}: URLs.")),
    }
}

/// The host of a URL as permission rules name it: the host, with the port
/// when it is not the scheme's default (`docs.rs`, `localhost:8080`,
/// `[::1]:3000`).
pub fn host_key(url: &Url) -> String {
    let host = url.host_str().unwrap_or_default().trim_end_matches('.').to_ascii_lowercase();
    match url.port() {
        Some(port) => format!("{host}:{port}"),
        None => host,
    }
}

/// Whether the URL names a local host outright: an IP literal of a
/// special-purpose block, or `localhost` (RFC 6761: it and its subdomains are
/// always loopback).
pub fn is_visibly_local(url: &Url) -> bool {
    match url.host() {
        Some(url::Host::Ipv4(ip)) => special_purpose(IpAddr::V4(ip)).is_some(),
        Some(url::Host::Ipv6(ip)) => special_purpose(IpAddr::V6(ip)).is_some(),
        Some(url::Host::Domain(name)) => {
            let name = name.trim_end_matches('.').to_ascii_lowercase();
            name == "localhost" || name.ends_with(".localhost")
        }
        None => false,
    }
}

fn literal_ip(url: &Url) -> Option<IpAddr> {
    match url.host()? {
        url::Host::Ipv4(ip) => Some(IpAddr::V4(ip)),
        url::Host::Ipv6(ip) => Some(IpAddr::V6(ip)),
        url::Host::Domain(_) => None,
    }
}

const fn v4(a: u8, b: u8, c: u8, d: u8, len: u8) -> Ipv4Net {
    Ipv4Net::new_assert(Ipv4Addr::new(a, b, c, d), len)
}

const fn v6(segments: [u16; 8], len: u8) -> Ipv6Net {
    let [a, b, c, d, e, f, g, h] = segments;
    Ipv6Net::new_assert(Ipv6Addr::new(a, b, c, d, e, f, g, h), len)
}

/// IPv4 blocks that are not the public internet (IANA's special-purpose
/// registry, RFC 6890 and successors), with what they are.
const V4_BLOCKS: &[(Ipv4Net, &str)] = &[
    (v4(0, 0, 0, 0, 8), "an unspecified (\"this network\")"),
    (v4(10, 0, 0, 0, 8), "a private"),
    (v4(100, 64, 0, 0, 10), "a shared (carrier-grade NAT)"),
    (v4(127, 0, 0, 0, 8), "a loopback"),
    (v4(169, 254, 0, 0, 16), "a link-local"),
    (v4(172, 16, 0, 0, 12), "a private"),
    (v4(192, 0, 0, 0, 24), "an IETF protocol"),
    (v4(192, 0, 2, 0, 24), "a documentation"),
    (v4(192, 88, 99, 0, 24), "a 6to4 relay"),
    (v4(192, 168, 0, 0, 16), "a private"),
    (v4(198, 18, 0, 0, 15), "a benchmarking"),
    (v4(198, 51, 100, 0, 24), "a documentation"),
    (v4(203, 0, 113, 0, 24), "a documentation"),
    (v4(224, 0, 0, 0, 4), "a multicast"),
    (v4(240, 0, 0, 0, 4), "a reserved (or broadcast)"),
];

/// IPv6 blocks that are not the public internet. IPv4-mapped addresses, NAT64
/// and 6to4 carry an IPv4 address and are judged by it (see [`special_purpose`]).
const V6_BLOCKS: &[(Ipv6Net, &str)] = &[
    (v6([0, 0, 0, 0, 0, 0, 0, 0], 128), "an unspecified"),
    (v6([0, 0, 0, 0, 0, 0, 0, 1], 128), "a loopback"),
    (v6([0, 0, 0, 0, 0, 0, 0, 0], 96), "an IPv4-compatible (deprecated)"),
    (v6([0x64, 0xff9b, 1, 0, 0, 0, 0, 0], 48), "a local-use NAT64"),
    (v6([0x100, 0, 0, 0, 0, 0, 0, 0], 64), "a discard-only"),
    (v6([0x2001, 0, 0, 0, 0, 0, 0, 0], 23), "an IETF protocol (Teredo, benchmarking)"),
    (v6([0x2001, 0xdb8, 0, 0, 0, 0, 0, 0], 32), "a documentation"),
    (v6([0x3fff, 0, 0, 0, 0, 0, 0, 0], 20), "a documentation"),
    (v6([0xfc00, 0, 0, 0, 0, 0, 0, 0], 7), "a unique-local"),
    (v6([0xfe80, 0, 0, 0, 0, 0, 0, 0], 10), "a link-local"),
    (v6([0xfec0, 0, 0, 0, 0, 0, 0, 0], 10), "a site-local (deprecated)"),
    (v6([0xff00, 0, 0, 0, 0, 0, 0, 0], 8), "a multicast"),
];

const NAT64: Ipv6Net = v6([0x64, 0xff9b, 0, 0, 0, 0, 0, 0], 96);
const SIX_TO_FOUR: Ipv6Net = v6([0x2002, 0, 0, 0, 0, 0, 0, 0], 16);

/// What kind of special-purpose address `ip` is ("a loopback", "a private",
/// ...), or `None` for a public address.
pub fn special_purpose(ip: IpAddr) -> Option<&'static str> {
    match ip {
        IpAddr::V4(ip) => V4_BLOCKS.iter().find(|(net, _)| net.contains(&ip)).map(|(_, what)| *what),
        IpAddr::V6(ip) => {
            if let Some(mapped) = ip.to_ipv4_mapped() {
                return special_purpose(IpAddr::V4(mapped));
            }
            let bits = u128::from(ip);
            if NAT64.contains(&ip) {
                return special_purpose(IpAddr::V4(Ipv4Addr::from(bits as u32)));
            }
            if SIX_TO_FOUR.contains(&ip) {
                return special_purpose(IpAddr::V4(Ipv4Addr::from((bits >> 80) as u32)));
            }
            V6_BLOCKS.iter().find(|(net, _)| net.contains(&ip)).map(|(_, what)| *what)
        }
    }
}

/// A host refused because of where it leads.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{host} {leads} {addr}, {what} address")]
pub struct Refused {
    /// The host as the URL names it.
    host: String,
    /// "is" for an IP literal, "resolves to" for a name.
    leads: &'static str,
    /// The address.
    addr: IpAddr,
    /// What kind of address it is.
    what: &'static str,
}

impl Refused {
    fn for_model(&self) -> String {
        format!(
            "Refused: {self}. lathe does not fetch from loopback, private or other local addresses unless the user \
             allowed this host (by answering \"Always allow\" when asked to fetch from it). Do not try other \
             spellings of the address; ask the user if this page is needed."
        )
    }
}

/// Keeps only the public addresses of `host`, unless the host is exempt; an
/// error when none is left.
fn screen(host: &str, addrs: Vec<SocketAddr>, exempt: bool) -> Result<Vec<SocketAddr>, Refused> {
    if exempt {
        return Ok(addrs);
    }
    let mut refused = None;
    let public: Vec<SocketAddr> = addrs
        .into_iter()
        .filter(|addr| match special_purpose(addr.ip()) {
            Some(what) => {
                refused.get_or_insert((addr.ip(), what));
                false
            }
            None => true,
        })
        .collect();
    match (public.is_empty(), refused) {
        (true, Some((addr, what))) => Err(Refused { host: host.to_owned(), leads: "resolves to", addr, what }),
        _ => Ok(public),
    }
}

/// The resolver of one fetch's client. Names resolve through the system
/// (`getaddrinfo`, like reqwest's own resolver), and only their public
/// addresses are handed to the connector, except for the names the current
/// hop may reach locally (the host the user allowed, the proxy). Judging here
/// means the addresses judged are exactly the addresses connected to.
#[derive(Debug, Default)]
struct GuardedResolver {
    exempt: Mutex<HashSet<String>>,
}

impl GuardedResolver {
    fn exempt_only(&self, names: HashSet<String>) {
        *lock(&self.exempt) = names;
    }
}

impl Resolve for GuardedResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let host = name.as_str().trim_end_matches('.').to_ascii_lowercase();
        let exempt = lock(&self.exempt).contains(&host);
        let name = name.as_str().to_owned();
        Box::pin(async move {
            let addrs: Vec<SocketAddr> = tokio::net::lookup_host((name.as_str(), 0)).await?.collect();
            match screen(&name, addrs, exempt) {
                Ok(addrs) => Ok(Box::new(addrs.into_iter()) as Addrs),
                Err(refused) => Err(Box::new(refused) as Box<dyn std::error::Error + Send + Sync>),
            }
        })
    }
}

/// Why a fetch failed, for the model.
#[derive(Debug)]
struct Failure {
    message: String,
    raw_output: Option<Value>,
}

impl Failure {
    fn new(message: impl Into<String>) -> Self {
        Self { message: message.into(), raw_output: None }
    }

    fn outcome(self) -> ToolOutcome {
        let mut outcome = ToolOutcome::failed(self.message);
        outcome.raw_output = self.raw_output;
        outcome
    }
}

impl From<Refused> for Failure {
    fn from(refused: Refused) -> Self {
        Failure::new(refused.for_model())
    }
}

/// How a body is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// Converted to Markdown.
    Html,
    /// Passed through.
    Text,
    /// Refused.
    Binary,
}

/// The kind a `Content-Type` names; `None` when it says nothing useful and
/// the body must be looked at.
fn kind_of(content_type: Option<&str>) -> Option<Kind> {
    let essence = content_type?.split(';').next().unwrap_or_default().trim().to_ascii_lowercase();
    let text_like = [
        "application/json",
        "application/ld+json",
        "application/xml",
        "application/javascript",
        "application/ecmascript",
        "application/x-javascript",
        "application/toml",
        "application/yaml",
        "application/x-yaml",
        "application/x-sh",
        "application/x-ndjson",
        "application/graphql",
        "application/sql",
    ];
    match essence.as_str() {
        "" | "application/octet-stream" | "binary/octet-stream" => None,
        "text/html" | "application/xhtml+xml" => Some(Kind::Html),
        essence if essence.starts_with("text/") => Some(Kind::Text),
        essence if text_like.contains(&essence) || essence.ends_with("+json") || essence.ends_with("+xml") => {
            Some(Kind::Text)
        }
        _ => Some(Kind::Binary),
    }
}

/// The kind of a body with no useful type, from its first bytes.
fn sniff(head: &[u8]) -> Kind {
    if head.contains(&0) {
        return Kind::Binary;
    }
    let valid = match std::str::from_utf8(head) {
        Ok(_) => true,
        // A character cut by the end of the sniffed bytes is fine.
        Err(err) => err.error_len().is_none(),
    };
    if !valid {
        return Kind::Binary;
    }
    let start = String::from_utf8_lossy(&head[..head.len().min(256)])
        .trim_start_matches('\u{feff}')
        .trim_start()
        .to_ascii_lowercase();
    if start.starts_with("<!doctype html") || start.starts_with("<html") { Kind::Html } else { Kind::Text }
}

/// A page that was read.
#[derive(Debug)]
struct Page {
    final_url: Url,
    redirects: Vec<Url>,
    status: reqwest::StatusCode,
    content_type: String,
    kind: Kind,
    /// Bytes read from the network.
    read: usize,
    /// Whether the body went on past what was read.
    cut_short: bool,
    title: Option<String>,
    text: String,
    /// What the conversion left out, said after the text.
    notes: Vec<String>,
}

impl Page {
    fn outcome(self, asked: &Url, max_bytes: usize, limits: &ToolLimits) -> ToolOutcome {
        let total = self.text.len();
        let (text, cut) = cap(&self.text, max_bytes);
        let mut header = format!("URL: {}\nStatus: {}\n", self.final_url, self.status);
        if !self.redirects.is_empty() {
            let chain: Vec<String> = self.redirects.iter().map(Url::to_string).collect();
            let _ = writeln!(header, "Redirected from: {}", chain.join(" -> "));
        }
        let how = match self.kind {
            Kind::Html => " (converted to Markdown)",
            Kind::Text | Kind::Binary => "",
        };
        let _ = writeln!(header, "Content-Type: {}{how}", self.content_type);
        if let Some(title) = &self.title {
            let _ = writeln!(header, "Title: {title}");
        }
        let mut for_model = format!("{header}\n{text}");
        let read = self.read;
        let shown = text.len();
        match (cut, self.cut_short) {
            (false, false) => {}
            (true, false) => {
                let _ = write!(for_model, "\n\n[Cut: showing the first {shown} of {total} bytes of text.");
            }
            (true, true) => {
                let _ = write!(
                    for_model,
                    "\n\n[Cut: showing the first {shown} bytes of text; the page goes on past the {read} bytes lathe read."
                );
            }
            (false, true) => {
                let _ = write!(for_model, "\n\n[Cut: the page goes on past the {read} bytes lathe read.");
            }
        }
        if cut && max_bytes < limits.fetch_max_bytes {
            let _ = write!(for_model, " Fetch again with max_bytes up to {} to see more.", limits.fetch_max_bytes);
        }
        if cut || self.cut_short {
            for_model.push(']');
        }
        for note in &self.notes {
            let _ = write!(for_model, "\n\n{note}");
        }
        let size =
            if self.cut_short { format!("first {} bytes read", self.read) } else { format!("{} bytes", self.read) };
        let summary = format!("{} {}\n{size}, {}{how}", self.status, self.final_url, self.content_type);
        ToolOutcome {
            status: super::OutcomeStatus::Completed,
            for_model,
            content: vec![DisplayContent::Text(summary)],
            locations: None,
            raw_output: Some(json!({
                "url": asked.as_str(),
                "finalUrl": self.final_url.as_str(),
                "status": self.status.as_u16(),
                "contentType": self.content_type,
                "bytesRead": self.read,
                "complete": !self.cut_short,
                "textBytes": total,
                "returnedBytes": text.len(),
            })),
        }
    }
}

/// The head of `text`, at most `max` bytes, cut at a line end when one is
/// near; and whether anything was cut.
fn cap(text: &str, max: usize) -> (&str, bool) {
    if text.len() <= max {
        return (text, false);
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let head = &text[..end];
    match head.rfind('\n') {
        Some(line_end) if line_end >= end - end / 8 => (&head[..line_end], true),
        _ => (head, true),
    }
}

/// Follows the URL through its redirects, checking every hop, and reads the
/// final page.
async fn fetch_page(first: Url, trust: &HostTrust, limits: &ToolLimits, max_bytes: usize) -> Result<Page, Failure> {
    let resolver = Arc::new(GuardedResolver::default());
    let client = crate::http::client_builder()
        .connect_timeout(limits.fetch_connect_timeout)
        .redirect(reqwest::redirect::Policy::none())
        .dns_resolver(Arc::clone(&resolver))
        .user_agent(USER_AGENT)
        .build()
        .map_err(|err| Failure::new(format!("lathe cannot make an HTTP client: {}", chain(&err))))?;
    let proxies = hyper_util::client::proxy::matcher::Matcher::from_system();
    let mut url = first.clone();
    let mut redirects = Vec::new();
    let mut response = loop {
        let trusted = trust.allows(&url, &first);
        check_scheme(&url).map_err(|message| Failure::new(format!("Not followed: {url} ({message})")))?;
        if let Some(addr) = literal_ip(&url)
            && let Some(what) = special_purpose(addr)
            && !trusted
        {
            return Err(Refused { host: host_key(&url), leads: "is", addr, what }.into());
        }
        let mut exempt = HashSet::new();
        let host = url.host_str().unwrap_or_default().trim_end_matches('.').to_ascii_lowercase();
        if trusted {
            exempt.insert(host.clone());
        }
        let uri: Option<http::Uri> = url.as_str().parse().ok();
        if let Some(proxy) = uri.as_ref().and_then(|uri| proxies.intercept(uri)) {
            // The proxy is the user's own configuration; the target is
            // resolved by the proxy, so it is checked here, as well as can be.
            if let Some(proxy_host) = proxy.uri().host() {
                exempt.insert(proxy_host.trim_end_matches('.').to_ascii_lowercase());
            }
            if !trusted && literal_ip(&url).is_none() {
                let port = url.port_or_known_default().unwrap_or(80);
                // A name the proxy alone can resolve is not judged here.
                if let Ok(addrs) = tokio::net::lookup_host((host.as_str(), port)).await {
                    screen(&host_key(&url), addrs.collect(), false)?;
                }
            }
        }
        resolver.exempt_only(exempt);
        let response = client
            .get(url.clone())
            .header(ACCEPT, ACCEPTED)
            .send()
            .await
            .map_err(|err| send_failure(&url, &err, limits))?;
        let location = response.headers().get(LOCATION).and_then(|value| value.to_str().ok());
        match location {
            Some(location) if response.status().is_redirection() => {
                let next = url.join(location).map_err(|err| {
                    Failure::new(format!(
                        "{url} redirected to \"{}\", which is not a URL ({err}).",
                        shorten(location, 200)
                    ))
                })?;
                if redirects.len() == MAX_REDIRECTS {
                    return Err(Failure::new(format!(
                        "{first} redirected more than {MAX_REDIRECTS} times (the last hop was to {next}); gave up."
                    )));
                }
                redirects.push(std::mem::replace(&mut url, next));
                url.set_fragment(None);
            }
            Some(_) | None => break response,
        }
    };
    let status = response.status();
    let content_type =
        response.headers().get(CONTENT_TYPE).and_then(|value| value.to_str().ok()).unwrap_or_default().to_owned();
    let declared = kind_of(Some(&content_type));
    if declared == Some(Kind::Binary) && status.is_success() {
        return Err(binary(&url, &content_type, response.content_length()));
    }
    let idle = limits.fetch_idle_timeout;
    let mut body = Vec::new();
    let mut ended = match declared {
        Some(_) => false,
        None => read_at_least(&mut response, &mut body, SNIFF_BYTES, idle).await?,
    };
    let kind = declared.unwrap_or_else(|| sniff(&body));
    if kind == Kind::Binary {
        if status.is_success() {
            return Err(binary(&url, &content_type, response.content_length()));
        }
        // An error status whose body is no text: the status says it all.
        body.clear();
        ended = true;
    }
    let wanted = if !status.is_success() {
        ERROR_PAGE_BYTES * 8
    } else {
        match kind {
            Kind::Html => limits.fetch_max_html_bytes,
            // Room for a multi-byte character cut by the cap.
            Kind::Text | Kind::Binary => max_bytes + 4,
        }
    };
    if !ended {
        // One byte past the cap tells whether the page goes on.
        ended = read_at_least(&mut response, &mut body, wanted + 1, idle).await?;
    }
    drop(response);
    let more = !ended || body.len() > wanted;
    body.truncate(wanted);
    let read = body.len();
    let text = decode(&body, &content_type);
    let (title, text, notes) = match kind {
        Kind::Html => {
            let converted = convert_html(text).await?;
            let mut notes = Vec::new();
            if converted.flattened {
                notes.push(format!(
                    "[The page nests elements more than {} deep; lathe flattened what was deeper.]",
                    html::MAX_DEPTH
                ));
            }
            if converted.cut {
                notes.push(
                    "[The page made the HTML parser build more elements than a page of its size holds; \
                     lathe left out the rest of the page.]"
                        .to_owned(),
                );
            }
            (converted.title, converted.text, notes)
        }
        Kind::Text | Kind::Binary => (None, text, Vec::new()),
    };
    if !status.is_success() {
        let (excerpt, _) = cap(text.trim(), ERROR_PAGE_BYTES);
        let mut message = format!("HTTP {status} from {url}.");
        if !redirects.is_empty() {
            let _ = write!(message, " (Redirected from {first}.)");
        }
        if !excerpt.is_empty() {
            let _ = write!(message, " The server said:\n\n{excerpt}");
        }
        return Err(Failure {
            message,
            raw_output: Some(json!({"url": first.as_str(), "finalUrl": url.as_str(), "status": status.as_u16()})),
        });
    }
    let content_type = if content_type.is_empty() { "unknown".to_owned() } else { content_type };
    Ok(Page { final_url: url, redirects, status, content_type, kind, read, cut_short: more, title, text, notes })
}

fn binary(url: &Url, content_type: &str, length: Option<u64>) -> Failure {
    let what = if content_type.is_empty() { "binary data".to_owned() } else { content_type.to_owned() };
    let size = length.map(|n| format!(", {n} bytes")).unwrap_or_default();
    Failure::new(format!(
        "{url} is not text ({what}{size}); fetch reads web pages and text only. \
         If the file is needed, ask the user to download it."
    ))
}

/// Reads the body onto `body`, whole chunks, until it holds at least `want`
/// bytes or ends. Returns whether it ended.
async fn read_at_least(
    response: &mut reqwest::Response,
    body: &mut Vec<u8>,
    want: usize,
    idle: Duration,
) -> Result<bool, Failure> {
    while body.len() < want {
        match tokio::time::timeout(idle, response.chunk()).await {
            Err(_) => {
                return Err(Failure::new(format!(
                    "the server sent nothing for {} s while sending the page; gave up.",
                    idle.as_secs()
                )));
            }
            Ok(Err(err)) => return Err(Failure::new(format!("the page broke off: {}", chain(&err)))),
            Ok(Ok(None)) => return Ok(true),
            Ok(Ok(Some(chunk))) => body.extend_from_slice(&chunk),
        }
    }
    Ok(false)
}

/// The failure of sending a request, in words the model can act on.
fn send_failure(url: &Url, err: &reqwest::Error, limits: &ToolLimits) -> Failure {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(err);
    while let Some(cause) = source {
        if let Some(refused) = cause.downcast_ref::<Refused>() {
            return Failure::new(refused.for_model());
        }
        source = cause.source();
    }
    if err.is_connect() && err.is_timeout() {
        return Failure::new(format!(
            "could not connect to {} within {} s.",
            host_key(url),
            limits.fetch_connect_timeout.as_secs()
        ));
    }
    Failure::new(format!("could not fetch {url}: {}", chain(err)))
}

/// The body as text, in the charset its `Content-Type` names (a byte-order
/// mark wins; UTF-8 by default). Undecodable bytes become U+FFFD.
fn decode(body: &[u8], content_type: &str) -> String {
    let charset = content_type.split(';').skip(1).find_map(|param| {
        let (name, value) = param.split_once('=')?;
        name.trim().eq_ignore_ascii_case("charset").then(|| value.trim().trim_matches('"').to_owned())
    });
    let encoding =
        charset.and_then(|label| encoding_rs::Encoding::for_label(label.as_bytes())).unwrap_or(encoding_rs::UTF_8);
    let (text, _, _) = encoding.decode(body);
    text.into_owned()
}

/// Converts an HTML page to Markdown on a thread of its own (see
/// [`html`]): at most [`html::CPU_LIMIT`] of CPU time, stopped as soon as
/// this future is dropped (the call was cancelled, or the fetch's own time
/// limit passed).
async fn convert_html(text: String) -> Result<html::Converted, Failure> {
    /// Stops the conversion when the fetch stops waiting for it.
    struct StopOnDrop(Arc<html::Budget>);
    impl Drop for StopOnDrop {
        fn drop(&mut self) {
            self.0.stop();
        }
    }
    let budget = Arc::new(html::Budget::new(html::CPU_LIMIT));
    let stop = StopOnDrop(Arc::clone(&budget));
    let (done, converted) = tokio::sync::oneshot::channel();
    html::spawn(text, budget, move |result| {
        let _ = done.send(result);
    })
    .map_err(|err| Failure::new(format!("lathe could not start converting the page: {err}")))?;
    let converted = converted.await;
    drop(stop);
    match converted {
        Ok(Ok(converted)) => Ok(converted),
        Ok(Err(stopped)) => Err(Failure::new(format!(
            "{stopped}; gave up. The page may be built to be slow to read; try another URL, or ask the user."
        ))),
        Err(_) => Err(Failure::new("converting the page's HTML failed inside lathe; try another URL.")),
    }
}

/// At most `max` characters of `text`, marked when cut.
fn shorten(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((end, _)) => format!("{}…", &text[..end]),
        None => text.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn url(text: &str) -> Url {
        parse_url(text).unwrap()
    }

    /// Every spelling of a local address that a URL parser or a resolver
    /// accepts is judged by the address it means.
    #[test]
    fn ip_literals_are_judged_in_every_form() {
        let local = [
            ("http://127.0.0.1/", "127.0.0.1"),
            ("http://2130706433/", "127.0.0.1"),
            ("http://0x7f000001/", "127.0.0.1"),
            ("http://017700000001/", "127.0.0.1"),
            ("http://0x7f.1/", "127.0.0.1"),
            ("http://127.1/", "127.0.0.1"),
            ("http://0/", "0.0.0.0"),
            ("http://0.0.0.0:8080/", "0.0.0.0"),
            ("http://[::1]/", "::1"),
            ("http://[::]/", "::"),
            ("http://[::ffff:127.0.0.1]/", "127.0.0.1"),
            ("http://[::ffff:7f00:1]/", "127.0.0.1"),
            ("http://[::ffff:a9fe:a9fe]/", "169.254.169.254"),
            ("http://[64:ff9b::a00:1]/", "10.0.0.1"),
            ("http://[2002:c0a8:101::1]/", "192.168.1.1"),
            ("http://10.1.2.3/", "10.1.2.3"),
            ("http://172.31.255.255/", "172.31.255.255"),
            ("http://192.168.0.1/", "192.168.0.1"),
            ("http://169.254.169.254/latest/meta-data/", "169.254.169.254"),
            ("http://100.64.0.1/", "100.64.0.1"),
            ("http://224.0.0.1/", "224.0.0.1"),
            ("http://255.255.255.255/", "255.255.255.255"),
            ("http://[fd00::1]/", "fd00::1"),
            ("http://[fe80::1]/", "fe80::1"),
            ("http://[ff02::1]/", "ff02::1"),
            ("http://[2001:db8::1]/", "2001:db8::1"),
            ("http://[2001::1]/", "2001::1"),
        ];
        for (text, _) in local {
            let parsed = url(text);
            let ip = literal_ip(&parsed).unwrap_or_else(|| panic!("{text} is an IP literal"));
            assert!(special_purpose(ip).is_some(), "{text} ({ip}) is refused");
            assert!(is_visibly_local(&parsed), "{text}");
        }
        // The IPv4-mapped forms and the numeric spellings mean the address they carry.
        for (text, meant) in local {
            let ip = literal_ip(&url(text)).unwrap();
            let carried = match ip {
                IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
                IpAddr::V4(_) => ip,
            };
            if !text.contains("64:ff9b") && !text.contains("2002:") {
                assert_eq!(carried.to_string(), meant, "{text}");
            }
        }
        for public in
            ["http://93.184.215.14/", "http://[2606:4700::1111]/", "http://[::ffff:8.8.8.8]/", "http://1.1.1.1/"]
        {
            let ip = literal_ip(&url(public)).unwrap();
            assert_eq!(special_purpose(ip), None, "{public}");
            assert!(!is_visibly_local(&url(public)));
        }
        assert!(is_visibly_local(&url("http://localhost:3000/")));
        assert!(is_visibly_local(&url("http://LOCALHOST./")));
        assert!(is_visibly_local(&url("http://api.localhost/")));
        assert!(!is_visibly_local(&url("https://docs.rs/")));
    }

    #[test]
    fn only_http_urls_with_a_host_are_fetched() {
        for bad in
            ["file:///etc/passwd", "ftp://example.com/x", "gopher://x/", "data:text/plain,hi", "example.com", "http://"]
        {
            assert!(parse_url(bad).is_err(), "{bad}");
        }
        assert_eq!(url("HTTPS://Docs.RS:443/a#frag").as_str(), "https://docs.rs/a");
        assert_eq!(host_key(&url("https://docs.rs/x")), "docs.rs");
        assert_eq!(host_key(&url("http://localhost:8080/x")), "localhost:8080");
        assert_eq!(host_key(&url("http://[::1]:3000/")), "[::1]:3000");
        assert_eq!(host_key(&url("http://Example.COM./")), "example.com");
    }

    #[test]
    fn trust_covers_remembered_hosts_and_an_approved_visibly_local_one() {
        let first = url("http://localhost:8080/a");
        let approved = HostTrust { remembered: HashSet::new(), approved: true };
        assert!(approved.allows(&first, &first));
        assert!(!approved.allows(&url("http://localhost:9090/"), &first), "another port is another host");
        assert!(!approved.allows(&url("http://127.0.0.1:8080/"), &first), "a redirect elsewhere is not approved");
        let named = url("https://intranet.example/");
        assert!(!approved.allows(&named, &named), "a name that merely resolves locally is not approved by a prompt");
        let remembered = HostTrust { remembered: HashSet::from(["intranet.example".to_owned()]), approved: false };
        assert!(remembered.allows(&named, &first));
        assert!(!HostTrust::default().allows(&first, &first));
    }

    #[test]
    fn only_public_addresses_pass_the_resolver() {
        let at = |ip: &str| SocketAddr::new(ip.parse().unwrap(), 0);
        let err = screen("rebind.example", vec![at("127.0.0.1"), at("::1")], false).unwrap_err();
        assert_eq!(err.to_string(), "rebind.example resolves to 127.0.0.1, a loopback address");
        let mixed = screen("mixed.example", vec![at("10.0.0.1"), at("93.184.215.14")], false).unwrap();
        assert_eq!(mixed, vec![at("93.184.215.14")], "the private address is dropped");
        assert_eq!(screen("lan.example", vec![at("10.0.0.1")], true).unwrap(), vec![at("10.0.0.1")]);
    }

    /// The resolver itself refuses a name that resolves to loopback, unless
    /// the hop exempts it.
    #[tokio::test]
    async fn the_resolver_filters_what_the_system_answers() {
        let resolver = GuardedResolver::default();
        let name: Name = "localhost".parse().unwrap();
        let err = resolver.resolve(name).await.err().expect("localhost is refused");
        assert!(err.to_string().contains("loopback"), "{err}");
        resolver.exempt_only(HashSet::from(["localhost".to_owned()]));
        let addrs: Vec<SocketAddr> = resolver.resolve("localhost".parse().unwrap()).await.unwrap().collect();
        assert!(addrs.iter().all(|addr| addr.ip().is_loopback()) && !addrs.is_empty(), "{addrs:?}");
    }

    #[test]
    fn content_types_choose_how_a_body_is_read() {
        assert_eq!(kind_of(Some("text/html; charset=utf-8")), Some(Kind::Html));
        assert_eq!(kind_of(Some("application/xhtml+xml")), Some(Kind::Html));
        for text in
            ["text/plain", "text/markdown", "application/json", "application/vnd.api+json", "image/svg+xml", "text/css"]
        {
            assert_eq!(kind_of(Some(text)), Some(Kind::Text), "{text}");
        }
        for binary in ["image/png", "application/pdf", "application/zip", "video/mp4", "font/woff2", "application/wasm"]
        {
            assert_eq!(kind_of(Some(binary)), Some(Kind::Binary), "{binary}");
        }
        assert_eq!(kind_of(Some("application/octet-stream")), None);
        assert_eq!(kind_of(None), None);
        assert_eq!(sniff(b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR"), Kind::Binary);
        assert_eq!(sniff(b"\xff\xfe\xfd garbage"), Kind::Binary);
        assert_eq!(sniff(b"  <!DOCTYPE html><html>"), Kind::Html);
        assert_eq!(sniff("plain words, caf\u{e9}".as_bytes()), Kind::Text);
        assert_eq!(sniff(&"é".as_bytes()[..1]), Kind::Text, "a character cut by the sniffed length");
    }

    #[test]
    fn charsets_are_honoured() {
        assert_eq!(decode(b"caf\xe9", "text/plain; charset=ISO-8859-1"), "café");
        assert_eq!(decode("café".as_bytes(), "text/plain"), "café");
        assert_eq!(decode(b"\xef\xbb\xbfhi", "text/plain; charset=latin1"), "hi", "a BOM wins");
    }

    #[test]
    fn the_cap_keeps_the_head_at_a_line_end() {
        let text = "line one\nline two\nline three\n";
        assert_eq!(cap(text, 100), (text, false));
        assert_eq!(cap(text, 19), ("line one\nline two", true));
        assert_eq!(cap("a\nbbbbbbbbbbbbbbbbbbbb", 16), ("a\nbbbbbbbbbbbbbb", true), "no line end near the cap");
        let (head, cut) = cap("ééééé", 3);
        assert_eq!((head, cut), ("é", true), "never inside a character");
    }

    #[test]
    fn max_bytes_stays_within_the_limits() {
        let limits = ToolLimits::default();
        let args = |max: Option<f64>| FetchArgs { url: String::new(), max_bytes: max, trust: HostTrust::default() };
        assert_eq!(args(None).max_bytes(&limits), limits.fetch_default_bytes);
        assert_eq!(args(Some(1e12)).max_bytes(&limits), limits.fetch_max_bytes);
        assert_eq!(args(Some(10.0)).max_bytes(&limits), MIN_RESULT_BYTES);
        assert_eq!(args(Some(5000.0)).max_bytes(&limits), 5000);
        assert_eq!(args(Some(-1.0)).max_bytes(&limits), limits.fetch_default_bytes);
    }
}
