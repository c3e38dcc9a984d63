//! The body of a streamed (SSE) response, before `eventsource-stream` parses it.
//!
//! eventsource-stream 0.2.3 (the SSE parser async-openai uses too) panics on a
//! body that starts with U+FEFF (a UTF-8 byte-order mark): it skips it by
//! slicing one byte off a three-byte character (upstream:
//! jpopesculian/eventsource-stream#10, not merged). The panic kills the task
//! that reads the stream (inside async-openai, it made the response silently
//! end empty). The SSE format allows one leading BOM and says to ignore it, so
//! lathe drops it before the parser sees the body, wherever the network splits
//! its three bytes. If the
//! body then still starts with U+FEFF (a second one, which the format makes
//! part of the first line's field name, so that line is ignored), lathe puts
//! an empty comment line (`:`) before it: the same meaning, and the parser
//! never sees U+FEFF first.
//!
//! Found with the `sse_decoder` fuzz target (`fuzz/`): a single BOM while
//! writing it (its seed `04_bom_and_cr_only`), two BOMs by the fuzzer. The
//! regression tests are here and in `tests/suite/sse_split.rs`.
//!
//! The same parser re-scans everything it has buffered each time a chunk
//! arrives, so one endless line costs time quadratic in its length: a broken
//! or hostile endpoint could keep a core busy for minutes with a few MiB. A
//! line longer than [`MAX_LINE_BYTES`] ends the stream with an error instead.

use futures_util::{Stream, StreamExt};

/// U+FEFF in UTF-8.
const BOM: &[u8] = b"\xEF\xBB\xBF";

/// Longest line accepted in a streamed response. Real deltas are a few
/// hundred bytes; a whole answer in one event stays far below this.
pub const MAX_LINE_BYTES: usize = 4 * 1024 * 1024;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// `response` with its body's start fixed as [`strip_leading_bom`] does and
/// its lines bounded as [`limit_line_length`] does (status, version and
/// headers kept).
pub fn without_leading_bom(response: reqwest::Response) -> reqwest::Response {
    let (status, version, headers) = (response.status(), response.version(), response.headers().clone());
    let body = limit_line_length(strip_leading_bom(Box::pin(response.bytes_stream())), MAX_LINE_BYTES);
    let mut rebuilt = http::Response::new(reqwest::Body::wrap_stream(body));
    *rebuilt.status_mut() = status;
    *rebuilt.version_mut() = version;
    *rebuilt.headers_mut() = headers;
    reqwest::Response::from(rebuilt)
}

/// The chunks of `stream`, ended by an error as soon as a line (bytes
/// between two newlines) grows past `max_line` bytes.
pub fn limit_line_length<S, B, E>(stream: S, max_line: usize) -> impl Stream<Item = Result<B, BoxError>>
where
    S: Stream<Item = Result<B, E>>,
    B: AsRef<[u8]>,
    E: Into<BoxError>,
{
    // (bytes since the last newline, whether the stream has been ended)
    stream.scan((0usize, false), move |(run, ended), item| {
        if *ended {
            return std::future::ready(None);
        }
        let item = match item {
            Ok(chunk) => {
                let bytes = chunk.as_ref();
                // The line this chunk finishes (if any) and the one it leaves
                // open. A chunk without a newline is scanned once; with one,
                // from each end to its first and last newline.
                let (finished, open) = match bytes.iter().position(|&b| b == b'\n') {
                    Some(first) => {
                        let last = bytes.iter().rposition(|&b| b == b'\n').unwrap_or(first);
                        (*run + first, bytes.len() - last - 1)
                    }
                    None => (0, *run + bytes.len()),
                };
                *run = open;
                if finished.max(open) > max_line {
                    *ended = true;
                    // Logged too: the HTTP client wraps this error in one
                    // of its own, and only its cause says what happened.
                    tracing::warn!(max_line, "ending a model stream: a line is longer than the limit");
                    Err(format!("the endpoint sent a line longer than {max_line} bytes").into())
                } else {
                    Ok(chunk)
                }
            }
            Err(err) => Err(err.into()),
        };
        std::future::ready(Some(item))
    })
}

/// What the start of a body becomes: one leading BOM dropped, and `:\n`
/// before what is left if that still starts with a BOM.
fn fix_start(held: &[u8]) -> Vec<u8> {
    let rest = held.strip_prefix(BOM).unwrap_or(held);
    if rest.starts_with(BOM) { [b":\n", rest].concat() } else { rest.to_vec() }
}

/// The chunks of `stream`, less one leading BOM, and never starting with
/// U+FEFF (see the module documentation), however the first bytes are split
/// across chunks. Bytes are held back only while the start is undecided (at
/// most five); everything after passes through as it comes.
pub fn strip_leading_bom<S, B, E>(stream: S) -> impl Stream<Item = Result<B, E>>
where
    S: Stream<Item = Result<B, E>> + Unpin,
    B: AsRef<[u8]> + From<Vec<u8>>,
{
    // `Some(held)` until the start of the body is decided.
    futures_util::stream::unfold((stream.fuse(), Some(Vec::new())), |(mut stream, mut start)| async move {
        let Some(held) = start.as_mut() else {
            let item = stream.next().await?;
            return Some((item, (stream, None)));
        };
        loop {
            match stream.next().await {
                Some(Ok(chunk)) => {
                    held.extend_from_slice(chunk.as_ref());
                    // Undecided while what follows an optional first BOM could still be a BOM.
                    let rest = held.strip_prefix(BOM).unwrap_or(held);
                    if rest.len() < BOM.len() && BOM.starts_with(rest) {
                        continue;
                    }
                    return Some((Ok(B::from(fix_start(held))), (stream, None)));
                }
                Some(Err(err)) => return Some((Err(err), (stream, None))),
                // The body ended undecided: pass on what is left (a partial BOM
                // is reported by the parser as incomplete UTF-8, as it would have been).
                None => {
                    let rest = fix_start(held);
                    return (!rest.is_empty()).then(|| (Ok(B::from(rest)), (stream, None)));
                }
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limited(chunks: &[&[u8]], max: usize) -> Vec<Result<Vec<u8>, String>> {
        let items: Vec<Result<Vec<u8>, std::io::Error>> = chunks.iter().map(|c| Ok(c.to_vec())).collect();
        let stream = limit_line_length(futures_util::stream::iter(items), max);
        let out: Vec<Result<Vec<u8>, BoxError>> = futures_util::FutureExt::now_or_never(stream.collect()).unwrap();
        out.into_iter().map(|r| r.map_err(|e| e.to_string())).collect()
    }

    #[test]
    fn long_lines_end_the_stream_and_short_ones_pass() {
        let ok = limited(&[b"data: 12345\n", b"data: 1", b"2345\n\n"], 11);
        assert!(ok.iter().all(Result::is_ok), "{ok:?}");
        let cut = limited(&[b"data: 1\n", b"data: 123", b"456789", b"more\n"], 12);
        assert_eq!(cut.len(), 3, "the stream ends at the error: {cut:?}");
        assert!(cut[1].is_ok());
        assert!(cut[2].as_ref().unwrap_err().contains("longer than 12 bytes"));
        let finished_too_long = limited(&[b"data: 123456", b"789\nok\n"], 12);
        assert!(finished_too_long[1].is_err(), "a line ended by a later chunk counts whole: {finished_too_long:?}");
    }

    fn strip(chunks: &[&[u8]]) -> Vec<Vec<u8>> {
        let items: Vec<Result<Vec<u8>, ()>> = chunks.iter().map(|c| Ok(c.to_vec())).collect();
        let stream = strip_leading_bom(futures_util::stream::iter(items));
        // Every chunk is ready at once, so the stream completes on its first poll.
        let out: Vec<Result<Vec<u8>, ()>> = futures_util::FutureExt::now_or_never(stream.collect()).unwrap();
        out.into_iter().map(|c| c.unwrap()).collect()
    }

    #[test]
    fn a_leading_bom_is_dropped_wherever_it_is_split() {
        let body = b"\xEF\xBB\xBFdata: x\n\n";
        for cut in 0..=body.len() {
            let (a, b) = body.split_at(cut);
            assert_eq!(strip(&[a, b]).concat(), b"data: x\n\n", "cut at {cut}");
        }
        let bytewise: Vec<&[u8]> = body.chunks(1).collect();
        assert_eq!(strip(&bytewise).concat(), b"data: x\n\n");
    }

    /// Regression (found by the `sse_decoder` fuzz target): after the one
    /// BOM lathe drops, a second one reached the parser first and panicked it.
    #[test]
    fn a_second_bom_is_put_after_an_empty_comment_line() {
        let body = b"\xEF\xBB\xBF\xEF\xBB\xBFa: 1\r\r";
        for cut in 0..=body.len() {
            let (a, b) = body.split_at(cut);
            assert_eq!(strip(&[a, b]).concat(), b":\n\xEF\xBB\xBFa: 1\r\r", "cut at {cut}");
        }
        assert_eq!(strip(&[b"\xEF\xBB\xBF\xEF\xBB\xBF"]).concat(), b":\n\xEF\xBB\xBF");
    }

    /// Any two cuts of any of these bodies give what the rule gives for the
    /// whole body; later chunks pass through untouched.
    #[test]
    fn every_split_of_the_start_gives_the_same_bytes() {
        let bodies: [&[u8]; 12] = [
            b"",
            b"d",
            b"\xEF",
            b"\xEF\xBB",
            b"\xEF\xBBx",
            b"x\xEF\xBB\xBF",
            b"\xEF\xBB\xBF",
            b"\xEF\xBB\xBF\xEF",
            b"\xEF\xBB\xBF\xEF\xBB",
            b"\xEF\xBB\xBF\xEF\xBBx",
            b"\xEF\xBB\xBF\xEF\xBB\xBF\xEF\xBB\xBFdata: x\n\n",
            b"\xE6\x97\xA5data: \xEF\xBB\xBF\n\n",
        ];
        for body in bodies {
            let expected = fix_start(body);
            for i in 0..=body.len() {
                for j in i..=body.len() {
                    let got = strip(&[&body[..i], &body[i..j], &body[j..]]).concat();
                    assert_eq!(got, expected, "{body:?} cut at {i} and {j}");
                }
            }
        }
        assert_eq!(strip(&[b"ab", b"cd", b"ef"]), vec![b"ab".to_vec(), b"cd".to_vec(), b"ef".to_vec()]);
    }
}
