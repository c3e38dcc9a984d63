//! Reasoning written into the answer text as `<think>…</think>`, the way
//! reasoning models stream it when the server does not parse it out
//! (llama.cpp with `--reasoning-format none`, vLLM without a reasoning
//! parser, older Ollama and LM Studio builds).
//!
//! Only a block that opens the answer counts (leading whitespace aside): a
//! `<think>` later in the text is the model talking about the tag. The text
//! arrives in pieces cut anywhere, tags included, so a piece that may be the
//! start of a tag is held back until the next one says. Pure: no I/O.
//!
//! Not handled: templates that put `<think>` in the prompt, so that the
//! answer holds only the closing tag (nothing marks the thought as one
//! until it is over).

const OPEN: &str = "<think>";
const CLOSE: &str = "</think>";

/// What one piece of answer text turned out to hold, in this order.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Split {
    /// Reasoning (inside the block); may be empty.
    pub reasoning: String,
    /// Answer text (after the block, or all of it); may be empty.
    pub text: String,
}

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Nothing but whitespace so far: the block may still open.
    #[default]
    Start,
    /// Just inside the block: its leading whitespace is dropped.
    Opened,
    /// Inside the block.
    Thinking,
    /// Just after the block: the whitespace between it and the answer is dropped.
    Closed,
    /// The answer; everything passes through.
    Answer,
}

/// Splits an answer's text into reasoning and answer as it streams.
#[derive(Debug, Default)]
pub struct ThinkSplitter {
    state: State,
    /// Text not yet classified: leading whitespace, or a possible tag start.
    pending: String,
}

impl ThinkSplitter {
    /// Takes the next piece of text.
    pub fn push(&mut self, piece: String) -> Split {
        if self.state == State::Answer {
            // The common case once the answer has started: no copy.
            return Split { reasoning: String::new(), text: piece };
        }
        self.pending.push_str(&piece);
        let mut split = Split::default();
        loop {
            match self.state {
                State::Start => {
                    let trimmed = self.pending.trim_start();
                    if let Some(rest) = trimmed.strip_prefix(OPEN) {
                        self.pending = rest.to_owned();
                        self.state = State::Opened;
                    } else if trimmed.is_empty() || OPEN.starts_with(trimmed) {
                        return split;
                    } else {
                        self.state = State::Answer;
                        split.text = std::mem::take(&mut self.pending);
                        return split;
                    }
                }
                State::Opened | State::Closed => {
                    let trimmed = self.pending.trim_start();
                    if trimmed.is_empty() {
                        self.pending.clear();
                        return split;
                    }
                    self.pending = trimmed.to_owned();
                    self.state = if self.state == State::Opened { State::Thinking } else { State::Answer };
                }
                State::Thinking => {
                    if let Some(at) = self.pending.find(CLOSE) {
                        split.reasoning.push_str(&self.pending[..at]);
                        self.pending.drain(..at + CLOSE.len());
                        self.state = State::Closed;
                        continue;
                    }
                    // Keep back what may be the start of the closing tag.
                    let keep = (1..CLOSE.len()).rev().find(|&n| self.pending.ends_with(&CLOSE[..n])).unwrap_or(0);
                    let cut = self.pending.len() - keep;
                    split.reasoning.push_str(&self.pending[..cut]);
                    self.pending.drain(..cut);
                    return split;
                }
                State::Answer => {
                    split.text.push_str(&self.pending);
                    self.pending.clear();
                    return split;
                }
            }
        }
    }

    /// The end of the answer: whatever was held back, as what it was.
    pub fn finish(&mut self) -> Split {
        let pending = std::mem::take(&mut self.pending);
        match self.state {
            State::Start | State::Answer => Split { reasoning: String::new(), text: pending },
            State::Opened | State::Thinking => Split { reasoning: pending, text: String::new() },
            State::Closed => Split::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The reasoning and the answer of `pieces`, each concatenated.
    fn run(pieces: &[&str]) -> (String, String) {
        let mut splitter = ThinkSplitter::default();
        let (mut reasoning, mut text) = (String::new(), String::new());
        for piece in pieces {
            let split = splitter.push((*piece).to_owned());
            reasoning.push_str(&split.reasoning);
            text.push_str(&split.text);
        }
        let split = splitter.finish();
        reasoning.push_str(&split.reasoning);
        text.push_str(&split.text);
        (reasoning, text)
    }

    #[test]
    fn a_leading_block_is_reasoning_cut_anywhere() {
        let whole = "\n<think>\nLet me see: a < b, </thin is not a tag.\n</think>\n\nThe answer.";
        let expected = ("Let me see: a < b, </thin is not a tag.\n".to_owned(), "The answer.".to_owned());
        assert_eq!(run(&[whole]), expected);
        for at in 1..whole.len() {
            assert_eq!(run(&[&whole[..at], &whole[at..]]), expected, "cut at {at}");
        }
        let chars: Vec<String> = whole.chars().map(String::from).collect();
        let pieces: Vec<&str> = chars.iter().map(String::as_str).collect();
        assert_eq!(run(&pieces), expected, "one character per piece");
    }

    #[test]
    fn prose_about_the_tag_is_text() {
        let text = "Models emit <think> blocks; this is not one.";
        assert_eq!(run(&[text]), (String::new(), text.to_owned()));
        assert_eq!(run(&["<", "b>bold</b>"]), (String::new(), "<b>bold</b>".to_owned()));
        assert_eq!(run(&["<thi"]), (String::new(), "<thi".to_owned()), "a lone tag start at the end is text");
    }

    #[test]
    fn an_unclosed_block_is_all_reasoning_and_an_empty_one_is_nothing() {
        assert_eq!(run(&["<think>still thinking</thi"]), ("still thinking</thi".to_owned(), String::new()));
        assert_eq!(run(&["<think></think>", "answer"]), (String::new(), "answer".to_owned()));
    }

    #[test]
    fn the_answer_passes_through_without_copies() {
        let mut splitter = ThinkSplitter::default();
        splitter.push("Hello".to_owned());
        let piece = String::from(", world");
        let address = piece.as_ptr();
        let split = splitter.push(piece);
        assert_eq!(split.text.as_ptr(), address);
    }
}
