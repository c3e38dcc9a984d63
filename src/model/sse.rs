//! The body of a streamed (SSE) response, before async-openai parses it.
//!
//! eventsource-stream 0.2.3, the SSE parser under async-openai, panics on a
//! body that starts with a UTF-8 byte-order mark: it skips U+FEFF by slicing
//! one byte off a three-byte character (upstream:
//! jpopesculian/eventsource-stream#10, not merged). The panic kills the task
//! that reads the stream, so the response silently ends empty. The SSE format
//! allows one leading BOM and says to ignore it, so lathe drops it before the
//! parser sees the body, wherever the network splits its three bytes.
//! Found by the `sse_decoder` fuzz target (`fuzz/`).

use futures_util::{Stream, StreamExt};

/// U+FEFF in UTF-8.
const BOM: &[u8] = b"\xEF\xBB\xBF";

/// `response` with one leading UTF-8 byte-order mark removed from its body
/// (status, version and headers kept).
pub fn without_leading_bom(response: reqwest::Response) -> reqwest::Response {
    let (status, version, headers) = (response.status(), response.version(), response.headers().clone());
    let body = strip_leading_bom(Box::pin(response.bytes_stream()));
    let mut rebuilt = http::Response::new(reqwest::Body::wrap_stream(body));
    *rebuilt.status_mut() = status;
    *rebuilt.version_mut() = version;
    *rebuilt.headers_mut() = headers;
    reqwest::Response::from(rebuilt)
}

/// The chunks of `stream`, less one leading BOM, even one split across
/// chunks. Bytes are only held back while they could still be a BOM (at most
/// two); everything else passes through as it comes.
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
                    if held.len() < BOM.len() && BOM.starts_with(held) {
                        continue;
                    }
                    let rest = held.strip_prefix(BOM).unwrap_or(held).to_vec();
                    return Some((Ok(B::from(rest)), (stream, None)));
                }
                Some(Err(err)) => return Some((Err(err), (stream, None))),
                // The body ended within the first bytes of a BOM: pass them on
                // (the parser reports them as incomplete UTF-8, as it would have).
                None if held.is_empty() => return None,
                None => {
                    let rest = std::mem::take(held);
                    return Some((Ok(B::from(rest)), (stream, None)));
                }
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn anything_else_passes_through_unchanged() {
        for body in [&b""[..], b"d", b"\xEF", b"\xEF\xBB", b"\xEF\xBBx", b"x\xEF\xBB\xBF", b"\xEF\xBB\xBF\xEF\xBB\xBF"]
        {
            let expected = body.strip_prefix(BOM).unwrap_or(body);
            for cut in 0..=body.len() {
                let (a, b) = body.split_at(cut);
                assert_eq!(strip(&[a, b]).concat(), expected, "{body:?} cut at {cut}");
            }
        }
        // Later chunks are passed through as they are, not copied into one.
        assert_eq!(strip(&[b"ab", b"cd", b"ef"]), vec![b"ab".to_vec(), b"cd".to_vec(), b"ef".to_vec()]);
    }
}
