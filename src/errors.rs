//! How an error reads in a message for the user or the model: its own text
//! and then each cause, on one line. Knows nothing of which errors.

/// `err` and its causes, joined by `": "`; a cause whose text the message
/// already contains is left out (many errors repeat their cause).
pub fn chain(err: &dyn std::error::Error) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    #[derive(Debug, thiserror::Error)]
    #[error("{text}")]
    struct Layer {
        text: &'static str,
        #[source]
        cause: Option<Box<Layer>>,
    }

    fn layer(text: &'static str, cause: Option<Layer>) -> Layer {
        Layer { text, cause: cause.map(Box::new) }
    }

    #[test]
    fn causes_follow_once() {
        let err = layer("could not send", Some(layer("connect failed: refused", Some(layer("refused", None)))));
        assert_eq!(super::chain(&err), "could not send: connect failed: refused");
        assert_eq!(super::chain(&layer("alone", None)), "alone");
    }
}
