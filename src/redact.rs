//! The one redaction of secrets. Everything lathe writes or shows that could
//! carry a secret goes through here: the trace (`--trace`), the log (stderr
//! or `--log-file`, through [`LogWriter`]), `lathe doctor`'s report, and
//! every URL from the configuration that is shown (the model picker's
//! description sent to the editor, the greeting, connection errors, through
//! [`url`]).
//!
//! Taken out:
//! - known secret values (at least [`MIN_SECRET_CHARS`] characters; shorter
//!   ones would hit too much): API keys, secret-looking model headers, every
//!   value of an MCP server's `env` and `headers` whatever its name (the
//!   config's servers from the start, the editor's as lathe learns them,
//!   [`learn`]), bearer tokens, the values of the variables lathe keeps from
//!   children as secrets, and the passwords of URLs in the config;
//! - the userinfo of any URL in any text: `http://user:pass@host` is written
//!   `http://***@host`;
//! - `Bearer <token>` anywhere;
//! - in JSON, also: every field named like a credential (`apiKey`, `token`,
//!   `password`, ...), `{"name": "GITHUB_TOKEN", "value": ...}` pairs, and
//!   every `env` and `headers` value of an `mcpServers` entry.
//!
//! A secret can also arrive in pieces, one record at a time (a model streams
//! a key it read across several deltas): [`Window`] keeps the end of each
//! streamed field and redacts what completes a secret across records, and a
//! piece that ends in the first [`HELD_PREFIX_CHARS`] or more characters of
//! a secret has them redacted at once, before the rest arrives.

use std::borrow::Cow;
use std::collections::HashMap;
use std::io::Write;
use std::sync::{Arc, PoisonError, RwLock};

use serde_json::{Map, Value};

use crate::config::{Config, McpServer, McpTransport};

/// What replaces a secret.
pub const REDACTED: &str = "[redacted]";

/// What replaces a URL's userinfo.
pub const USERINFO: &str = "***";

/// Shorter configured values are not searched for in text (too many false hits).
pub const MIN_SECRET_CHARS: usize = 6;

/// A streamed piece that ends in at least this many characters of the start
/// of a secret has them redacted before the rest of the secret arrives.
pub const HELD_PREFIX_CHARS: usize = 4;

/// The process's secrets, for the log and whatever has no config at hand.
static GLOBAL: RwLock<Option<Arc<Redactor>>> = RwLock::new(None);

/// The redactor of the secrets lathe knows of (see [`set_secrets`], [`learn`]).
pub fn global() -> Arc<Redactor> {
    GLOBAL.read().unwrap_or_else(PoisonError::into_inner).clone().unwrap_or_default()
}

/// Sets the process's secrets (the config's, see [`secrets_of`]).
pub fn set_secrets(secrets: Vec<String>) {
    *GLOBAL.write().unwrap_or_else(PoisonError::into_inner) = Some(Arc::new(Redactor::new(secrets)));
}

/// Adds secrets lathe learnt while running (the `env` and `headers` values
/// of an MCP server the editor passed).
pub fn learn(secrets: Vec<String>) {
    let mut global = GLOBAL.write().unwrap_or_else(PoisonError::into_inner);
    let known = global.as_ref().map(|redactor| redactor.secrets.clone()).unwrap_or_default();
    if secrets.iter().all(|secret| known.contains(secret) || secret.trim().chars().count() < MIN_SECRET_CHARS) {
        return;
    }
    *global = Some(Arc::new(Redactor::new(known.into_iter().chain(secrets).collect())));
}

/// A URL (or any text) with the userinfo of every URL in it written
/// [`USERINFO`]: what is shown wherever a configured URL is shown.
pub fn url(text: &str) -> String {
    userinfo(text).into_owned()
}

/// `scheme://user:pass@host` with `user:pass` replaced, for every URL in `text`.
fn userinfo(text: &str) -> Cow<'_, str> {
    if !text.contains("://") || !text.contains('@') {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len());
    let mut written = 0;
    let mut search = 0;
    while let Some(found) = text[search..].find("://") {
        let start = search + found + "://".len();
        let end = text[start..]
            .find(|c: char| c.is_whitespace() || matches!(c, '/' | '?' | '#' | '"' | '\'' | '<' | '>' | '`' | '\\'))
            .map_or(text.len(), |end| start + end);
        if let Some(at) = text[start..end].rfind('@') {
            out.push_str(&text[written..start]);
            out.push_str(USERINFO);
            written = start + at;
        }
        search = end.max(start);
    }
    out.push_str(&text[written..]);
    Cow::Owned(out)
}

/// The password of a URL's userinfo, as written and percent-decoded.
fn url_password(text: &str) -> Vec<String> {
    let Ok(parsed) = url::Url::parse(text) else { return Vec::new() };
    let Some(password) = parsed.password() else { return Vec::new() };
    let decoded = url::form_urlencoded::parse(format!("p={}", password.replace('+', "%2B")).as_bytes())
        .next()
        .map(|(_, value)| value.into_owned())
        .unwrap_or_default();
    vec![password.to_owned(), decoded]
}

/// The values in `config` that must never be written out: API keys,
/// secret-looking model headers, URL passwords, every MCP server's `env`
/// and `headers` values and tokens, and the values of the variables
/// children are denied as secrets.
pub fn secrets_of(config: &Config) -> Vec<String> {
    let mut secrets = Vec::new();
    for model in config.models.values() {
        secrets.extend(model.api_key.as_ref().map(|key| key.expose().to_owned()));
        secrets.extend(url_password(&model.base_url));
        for (name, value) in &model.headers {
            if secret_name(name) {
                secrets.push(value.clone());
            }
        }
    }
    for server in &config.mcp_servers {
        secrets.extend(server_secrets(server));
    }
    for name in &config.children.secret_vars {
        secrets.extend(std::env::var(name).ok());
    }
    secrets
}

/// An MCP server's secrets: every `env` and `headers` value whatever its
/// name (a `DATABASE_URL` or a `GH_PAT` is no less secret for its name), the
/// token of a bearer header, and its URL's password.
pub fn server_secrets(server: &McpServer) -> Vec<String> {
    match &server.transport {
        McpTransport::Stdio { env, .. } => env.iter().map(|(_, value)| value.clone()).collect(),
        McpTransport::Http { url, headers } | McpTransport::Sse { url, headers } => {
            let mut secrets = url_password(url);
            for (_, value) in headers {
                secrets.push(value.clone());
                secrets.extend(bearer_token(value).map(str::to_owned));
            }
            secrets
        }
    }
}

fn bearer_token(value: &str) -> Option<&str> {
    let (scheme, token) = value.trim().split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then_some(token.trim())
}

/// Whether a header, field or variable of this name holds a credential.
pub fn secret_name(name: &str) -> bool {
    let name: String = name.chars().filter(|c| c.is_ascii_alphanumeric()).collect::<String>().to_ascii_lowercase();
    ["auth", "key", "token", "secret", "password", "passwd", "cookie", "credential", "session"]
        .iter()
        .any(|word| name.contains(word))
}

/// Takes secrets out of text and JSON.
#[derive(Debug, Clone, Default)]
pub struct Redactor {
    secrets: Vec<String>,
}

impl Redactor {
    /// A redactor for these values (short and empty ones are ignored).
    pub fn new(secrets: Vec<String>) -> Redactor {
        let mut secrets: Vec<String> =
            secrets.into_iter().filter(|s| s.trim().chars().count() >= MIN_SECRET_CHARS).collect();
        // Longest first, so a key containing another is replaced whole.
        secrets.sort_by_key(|s| std::cmp::Reverse(s.len()));
        secrets.dedup();
        Redactor { secrets }
    }

    /// The longest secret, in bytes (0 with none).
    fn longest(&self) -> usize {
        self.secrets.first().map_or(0, String::len)
    }

    /// `text` with every known secret, every URL's userinfo and every bearer
    /// token replaced.
    pub fn text(&self, text: &str) -> String {
        let mut text = userinfo(text).into_owned();
        for secret in &self.secrets {
            if text.contains(secret.as_str()) {
                text = text.replace(secret.as_str(), REDACTED);
            }
        }
        redact_bearer(&text)
    }

    /// Redacts `value` in place: credential-named fields, name/value pairs
    /// naming a credential, every `env` and `headers` value of an
    /// `mcpServers` entry, and every string as [`Redactor::text`] does.
    pub fn value(&self, value: &mut Value) {
        match value {
            Value::String(text) => *text = self.text(text),
            Value::Array(items) => items.iter_mut().for_each(|item| self.value(item)),
            Value::Object(fields) => {
                let pair_names_secret =
                    fields.get("name").and_then(Value::as_str).is_some_and(secret_name) && fields.contains_key("value");
                for (name, field) in fields.iter_mut() {
                    let hide = (field.is_string() || field.is_number())
                        && (secret_field(name) || (pair_names_secret && name == "value"));
                    if hide {
                        *field = Value::String(REDACTED.to_owned());
                    } else if name == "mcpServers" {
                        if let Value::Array(servers) = field {
                            servers.iter_mut().for_each(hide_server_values);
                        }
                        self.value(field);
                    } else {
                        self.value(field);
                    }
                }
            }
            Value::Null | Value::Bool(_) | Value::Number(_) => {}
        }
    }

    /// Bytes that may be JSON: redacted JSON if they parse, else redacted text.
    pub fn json_or_text(&self, bytes: &[u8]) -> Value {
        match serde_json::from_slice::<Value>(bytes) {
            Ok(mut value) => {
                self.value(&mut value);
                value
            }
            Err(_) => Value::String(self.text(&String::from_utf8_lossy(bytes))),
        }
    }

    /// HTTP headers as a JSON object: credential-named ones hidden, the rest redacted as text.
    pub fn headers(&self, headers: &[(String, Vec<u8>)]) -> Value {
        let mut out = Map::new();
        for (name, value) in headers {
            let shown =
                if secret_name(name) { REDACTED.to_owned() } else { self.text(&String::from_utf8_lossy(value)) };
            out.insert(name.clone(), Value::String(shown));
        }
        Value::Object(out)
    }
}

/// Hides every value of an MCP server entry's `env` and `headers` (ACP
/// sends them as `[{"name", "value"}]`; a map is hidden too).
fn hide_server_values(server: &mut Value) {
    let Value::Object(server) = server else { return };
    for key in ["env", "headers"] {
        match server.get_mut(key) {
            Some(Value::Array(pairs)) => {
                for pair in pairs {
                    if let Some(value) = pair.get_mut("value") {
                        *value = Value::String(REDACTED.to_owned());
                    }
                }
            }
            Some(Value::Object(map)) => map.values_mut().for_each(|value| *value = Value::String(REDACTED.to_owned())),
            Some(_) | None => {}
        }
    }
}

/// A JSON field that holds a credential by its very name. Narrower than
/// [`secret_name`]: `sessionId` or `max_tokens` are not secrets.
fn secret_field(name: &str) -> bool {
    let name: String = name.chars().filter(|c| c.is_ascii_alphanumeric()).collect::<String>().to_ascii_lowercase();
    matches!(
        name.as_str(),
        "authorization"
            | "proxyauthorization"
            | "apikey"
            | "xapikey"
            | "token"
            | "accesstoken"
            | "refreshtoken"
            | "idtoken"
            | "bearertoken"
            | "password"
            | "secret"
            | "clientsecret"
            | "cookie"
    )
}

/// `Bearer <token>` (any case) with the token replaced.
fn redact_bearer(text: &str) -> String {
    let lower = text.to_ascii_lowercase();
    if !lower.contains("bearer ") {
        return text.to_owned();
    }
    let mut out = String::with_capacity(text.len());
    let mut rest = 0;
    let mut search = 0;
    while let Some(found) = lower[search..].find("bearer ") {
        let start = search + found + "bearer ".len();
        let token_end = text[start..]
            .find(|c: char| c.is_whitespace() || c == '"' || c == '\'' || c == ',')
            .map_or(text.len(), |end| start + end);
        if token_end > start {
            out.push_str(&text[rest..start]);
            out.push_str(REDACTED);
            rest = token_end;
        }
        search = token_end.max(start);
    }
    out.push_str(&text[rest..]);
    out
}

/// Most streamed fields whose end is remembered; past it the oldest are forgotten.
const MAX_STREAMS: usize = 4096;

/// Secrets split across records: the end of every text field of a stream of
/// records (a model's deltas, the chunks sent to the editor), so that a
/// secret whose pieces arrive in several records is caught.
///
/// A field is one stream when it is at the same place in records of the
/// same kind: the same JSON path, the same `index` of a streamed choice or
/// tool call, the same `sessionId`, `sessionUpdate` and `toolCallId`. For
/// each new piece: a secret that began in the pieces before and ends in this
/// one has this piece's part of it redacted, and so has a piece that ends in
/// [`HELD_PREFIX_CHARS`] or more characters of the start of a secret (the
/// rest of the secret may follow in the next record; the start is redacted
/// now, before it is written).
#[derive(Debug, Default)]
pub struct Window {
    tails: HashMap<String, String>,
}

impl Window {
    /// Redacts the text fields of `value`, one record of `kind` (already
    /// redacted on its own by [`Redactor::value`]), against the ends of the
    /// same fields in the records before.
    pub fn stitch(&mut self, redactor: &Redactor, kind: &str, value: &mut Value) {
        if redactor.longest() == 0 {
            return;
        }
        if self.tails.len() > MAX_STREAMS {
            self.tails.clear();
        }
        let mut path = kind.to_owned();
        self.walk(redactor, value, &mut path);
    }

    fn walk(&mut self, redactor: &Redactor, value: &mut Value, path: &mut String) {
        let len = path.len();
        match value {
            Value::String(text) => self.piece(redactor, path, text),
            Value::Array(items) => {
                for (at, item) in items.iter_mut().enumerate() {
                    match item.get("index").and_then(Value::as_u64) {
                        Some(index) => path.push_str(&format!("/i{index}")),
                        None => path.push_str(&format!("/{at}")),
                    }
                    self.walk(redactor, item, path);
                    path.truncate(len);
                }
            }
            Value::Object(fields) => {
                for key in ["sessionId", "sessionUpdate", "toolCallId"] {
                    if let Some(Value::String(id)) = fields.get(key) {
                        path.push_str(&format!("[{key}={id}]"));
                    }
                }
                let with_ids = path.len();
                for (name, field) in fields.iter_mut() {
                    path.push('/');
                    path.push_str(name);
                    self.walk(redactor, field, path);
                    path.truncate(with_ids);
                }
                path.truncate(len);
            }
            Value::Null | Value::Bool(_) | Value::Number(_) => {}
        }
    }

    /// One piece of the stream `key`.
    fn piece(&mut self, redactor: &Redactor, key: &str, piece: &mut String) {
        let tail = self.tails.remove(key).unwrap_or_default();
        let boundary = tail.len();
        let joined = format!("{tail}{piece}");
        // Byte ranges of `piece` to redact.
        let mut hidden: Vec<(usize, usize)> = Vec::new();
        for secret in &redactor.secrets {
            // Occurrences that begin before this piece and end in it.
            let mut from = floor_boundary(&joined, boundary.saturating_sub(secret.len().saturating_sub(1)));
            while let Some(found) = joined[from..].find(secret.as_str()) {
                let at = from + found;
                if at >= boundary {
                    break;
                }
                let end = at + secret.len();
                if end > boundary {
                    hidden.push((0, end - boundary));
                }
                from = at + joined[at..].chars().next().map_or(1, char::len_utf8);
            }
            // A start of this secret at the very end: the rest may follow.
            let held = secret
                .char_indices()
                .map(|(at, _)| at)
                .skip(HELD_PREFIX_CHARS)
                .filter(|&len| joined.ends_with(&secret[..len]))
                .max();
            if let Some(len) = held {
                let start = joined.len() - len;
                hidden.push((start.saturating_sub(boundary), piece.len()));
            }
        }
        let keep = floor_boundary(&joined, joined.len().saturating_sub(redactor.longest()));
        self.tails.insert(key.to_owned(), joined[keep..].to_owned());
        if hidden.is_empty() {
            return;
        }
        hidden.sort_unstable();
        let mut merged: Vec<(usize, usize)> = Vec::new();
        for (start, end) in hidden {
            match merged.last_mut() {
                Some(last) if start <= last.1 => last.1 = last.1.max(end),
                _ => merged.push((start, end)),
            }
        }
        for (start, end) in merged.into_iter().rev() {
            piece.replace_range(start..end, REDACTED);
        }
    }
}

/// The largest char boundary of `text` at or before `at`.
fn floor_boundary(text: &str, at: usize) -> usize {
    let mut at = at.min(text.len());
    while !text.is_char_boundary(at) {
        at -= 1;
    }
    at
}

/// A `tracing_subscriber` writer that redacts each log line with
/// [`global`] before it reaches the writer it wraps (stderr, the log file).
#[derive(Debug)]
pub struct LogWriter<M> {
    inner: M,
}

impl<M> LogWriter<M> {
    /// Redacts what goes to `inner`.
    pub fn new(inner: M) -> Self {
        LogWriter { inner }
    }
}

impl<'a, M: tracing_subscriber::fmt::MakeWriter<'a>> tracing_subscriber::fmt::MakeWriter<'a> for LogWriter<M> {
    type Writer = LogLine<M::Writer>;

    fn make_writer(&'a self) -> Self::Writer {
        LogLine { inner: self.inner.make_writer(), line: Vec::new() }
    }
}

/// One log event, kept until it is complete, then redacted and written.
#[derive(Debug)]
pub struct LogLine<W: Write> {
    inner: W,
    line: Vec<u8>,
}

impl<W: Write> Write for LogLine<W> {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.line.extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<W: Write> Drop for LogLine<W> {
    fn drop(&mut self) {
        if self.line.is_empty() {
            return;
        }
        let line = global().text(&String::from_utf8_lossy(&self.line));
        let _ = self.inner.write_all(line.as_bytes());
        let _ = self.inner.flush();
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn redacts_known_values_fields_pairs_and_bearer_tokens() {
        let redactor = Redactor::new(vec!["sk-live-123456".into(), "abc".into()]);
        assert_eq!(redactor.text("key sk-live-123456 here"), "key [redacted] here");
        assert_eq!(redactor.text("abc stays (too short to search for)"), "abc stays (too short to search for)");
        assert_eq!(redactor.text("Authorization: Bearer zzz9, next"), "Authorization: Bearer [redacted], next");
        let mut value = json!({
            "params": {"sessionId": "sess_1", "apiKey": "x", "mcpServers": [{
                "env": [{"name": "GITHUB_TOKEN", "value": "ghp_x"}, {"name": "PAGER", "value": "cat"}],
                "headers": [{"name": "Authorization", "value": "Basic x"}]}],
            "text": "my key is sk-live-123456"},
            "max_tokens": 100,
        });
        redactor.value(&mut value);
        assert_eq!(value["params"]["sessionId"], "sess_1");
        assert_eq!(value["params"]["apiKey"], REDACTED);
        assert_eq!(value["params"]["mcpServers"][0]["env"][0]["value"], REDACTED);
        assert_eq!(value["params"]["mcpServers"][0]["env"][1]["value"], REDACTED, "every env value of a server");
        assert_eq!(value["params"]["mcpServers"][0]["env"][1]["name"], "PAGER", "names stay");
        assert_eq!(value["params"]["mcpServers"][0]["headers"][0]["value"], REDACTED);
        assert_eq!(value["params"]["text"], "my key is [redacted]");
        assert_eq!(value["max_tokens"], 100);
        let headers = redactor.headers(&[
            ("authorization".into(), b"Bearer sk".to_vec()),
            ("x-api-key".into(), b"k".to_vec()),
            ("content-type".into(), b"application/json".to_vec()),
        ]);
        assert_eq!(
            headers,
            json!({"authorization": REDACTED, "x-api-key": REDACTED, "content-type": "application/json"})
        );
    }

    #[test]
    fn bearer_at_the_end_and_twice() {
        assert_eq!(redact_bearer("bearer a bearer b"), "bearer [redacted] bearer [redacted]");
        assert_eq!(redact_bearer("Bearer "), "Bearer ");
        assert_eq!(redact_bearer("no token"), "no token");
    }

    /// A URL's userinfo is never shown, wherever the URL is: alone, in a
    /// sentence, in JSON, several times, with an IPv6 host or a port.
    #[test]
    fn url_userinfo_is_written_as_stars() {
        assert_eq!(url("http://user:PASS@host/v1"), "http://***@host/v1");
        assert_eq!(url("https://tok@h:8443"), "https://***@h:8443");
        assert_eq!(url("http://u:p@[::1]:3000/x?q=a@b"), "http://***@[::1]:3000/x?q=a@b");
        assert_eq!(
            url("no userinfo: http://host/v1 and mail@example.com"),
            "no userinfo: http://host/v1 and mail@example.com"
        );
        assert_eq!(
            url("cannot connect to http://a:b@one/v1 (then http://c:d@two/v1)"),
            "cannot connect to http://***@one/v1 (then http://***@two/v1)"
        );
        assert_eq!(url("postgres://admin:s3cr3t@db:5432/app"), "postgres://***@db:5432/app");
        let redactor = Redactor::default();
        let mut value = json!({"url": "http://user:PASS@host/v1", "list": ["x http://a:b@c/ y"]});
        redactor.value(&mut value);
        assert_eq!(value, json!({"url": "http://***@host/v1", "list": ["x http://***@c/ y"]}));
        assert_eq!(url_password("http://user:p%40ss@host/"), vec!["p%40ss".to_owned(), "p@ss".to_owned()]);
    }

    /// A key streamed in pieces, across records, is caught however it is
    /// cut: no record written holds more than `HELD_PREFIX_CHARS - 1`
    /// characters of it.
    #[test]
    fn a_secret_split_across_records_is_caught_at_every_cut() {
        let secret = "sk-live-0123456789abcdef";
        let redactor = Redactor::new(vec![secret.to_owned()]);
        let text = format!("my key is {secret}, use it");
        let chars: Vec<(usize, char)> = text.char_indices().collect();
        // Every cut into two and three pieces.
        for a in 1..chars.len() {
            for b in a..chars.len() {
                let (a, b) = (chars[a].0, chars[b].0);
                let pieces = [&text[..a], &text[a..b], &text[b..]];
                let mut window = Window::default();
                let mut written = String::new();
                for piece in pieces {
                    let mut record = json!({"choices": [{"index": 0, "delta": {"content": piece}}]});
                    redactor.value(&mut record);
                    window.stitch(&redactor, "sse", &mut record);
                    let line = record.to_string();
                    for len in HELD_PREFIX_CHARS..=secret.len() {
                        for start in 0..=secret.len() - len {
                            assert!(
                                !line.contains(&secret[start..start + len]),
                                "{pieces:?}: a record holds {:?}: {line}",
                                &secret[start..start + len]
                            );
                        }
                    }
                    written.push_str(record["choices"][0]["delta"]["content"].as_str().unwrap());
                }
                assert!(written.starts_with("my key is ") && written.ends_with(", use it"), "{written}");
            }
        }
    }

    /// Streams are told apart: a key cut between two tool calls' arguments
    /// (different `index`) is no key, and other sessions' chunks do not
    /// break a session's stream.
    #[test]
    fn streams_are_told_apart_by_index_and_session() {
        let secret = "sk-live-0123456789abcdef";
        let redactor = Redactor::new(vec![secret.to_owned()]);
        let mut window = Window::default();
        let chunk = |session: &str, text: &str| {
            json!({"method": "session/update", "params": {"sessionId": session,
                "update": {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": text}}}})
        };
        let mut first = chunk("a", "key sk-li");
        let mut other = chunk("b", "unrelated text");
        let mut rest = chunk("a", "ve-0123456789abcdef done");
        for record in [&mut first, &mut other, &mut rest] {
            window.stitch(&redactor, "jsonrpc", record);
        }
        assert_eq!(first["params"]["update"]["content"]["text"], "key [redacted]");
        assert_eq!(other["params"]["update"]["content"]["text"], "unrelated text");
        assert_eq!(rest["params"]["update"]["content"]["text"], "[redacted] done");
        // Two calls' arguments: the second piece continues call 1, not call 0.
        let call = |index: u64, args: &str| json!({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": index, "function": {"arguments": args}}]}}]});
        let mut window = Window::default();
        let (mut a, mut b) = (call(0, "{\"k\":\"sk-li"), call(1, "ve-0123456789abcdef\"}"));
        window.stitch(&redactor, "sse", &mut a);
        window.stitch(&redactor, "sse", &mut b);
        assert_eq!(b["choices"][0]["delta"]["tool_calls"][0]["function"]["arguments"], "ve-0123456789abcdef\"}");
    }

    #[test]
    fn mcp_server_values_are_secrets_whatever_their_names() {
        let server = McpServer {
            name: "db".into(),
            transport: McpTransport::Stdio {
                command: "db-mcp".into(),
                args: Vec::new(),
                env: vec![
                    ("GH_PAT".into(), "ghp_abcdefghij".into()),
                    ("DATABASE_URL".into(), "postgres://u:pw@h/db".into()),
                ],
            },
            sandbox: false,
        };
        assert_eq!(server_secrets(&server), ["ghp_abcdefghij", "postgres://u:pw@h/db"]);
        let http = McpServer {
            name: "docs".into(),
            transport: McpTransport::Http {
                url: "https://me:hunter22@mcp.example/mcp".into(),
                headers: vec![("X-Custom".into(), "custom-value-1".into())],
            },
            sandbox: false,
        };
        assert_eq!(server_secrets(&http), ["hunter22", "hunter22", "custom-value-1"]);
    }
}
