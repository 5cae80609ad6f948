//! Limits on the size of what a request may carry, checked before any work: a text (to
//! tokenize, a prompt, a message, a text to embed, a query or document to rank), the number of
//! stop strings and their length, of messages, of texts to embed or documents to rank, and of
//! tokens to detokenize. Past one, the call is `InvalidArgument` naming the limit
//! (docs/native-protocol.md, "Limits").

use crate::error::{FfiResult, TesseraError};
use crate::model::GenerateRequest;

/// Bytes of one text (UTF-8).
pub const MAX_TEXT_BYTES: usize = 8 << 20;
/// Stop strings of one generation.
pub const MAX_STOP_STRINGS: usize = 64;
/// Bytes of one stop string.
pub const MAX_STOP_BYTES: usize = 1024;
/// Messages of one conversation.
pub const MAX_MESSAGES: usize = 4096;
/// Texts of one `embed`, documents of one `rerank`.
pub const MAX_TEXTS: usize = 4096;
/// Tokens of one `detokenize`.
pub const MAX_TOKENS: usize = 1 << 20;

/// `what` (a text) within [`MAX_TEXT_BYTES`].
pub(crate) fn text(what: &str, text: &str) -> FfiResult<()> {
    at_most(what, "bytes", text.len(), MAX_TEXT_BYTES)
}

/// `n` items of `what` within `max`.
pub(crate) fn count(what: &str, n: usize, max: usize) -> FfiResult<()> {
    at_most(what, "items", n, max)
}

fn at_most(what: &str, unit: &str, n: usize, max: usize) -> FfiResult<()> {
    if n > max {
        return Err(TesseraError::invalid_argument(format!(
            "{what} has {n} {unit}: at most {max} are accepted"
        )));
    }
    Ok(())
}

/// A generation request's texts, messages and stop strings within the limits.
pub(crate) fn generate_request(r: &GenerateRequest) -> FfiResult<()> {
    if let Some(p) = &r.prompt {
        text("generate: prompt", p)?;
    }
    if let Some(m) = &r.messages {
        count("generate: messages", m.len(), MAX_MESSAGES)?;
        for (i, turn) in m.iter().enumerate() {
            text(&format!("generate: messages[{i}].content"), &turn.content)?;
        }
    }
    count("generate: stop", r.stop.len(), MAX_STOP_STRINGS)?;
    for (i, s) in r.stop.iter().enumerate() {
        at_most(&format!("generate: stop[{i}]"), "bytes", s.len(), MAX_STOP_BYTES)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_accept_up_to_the_bound_and_name_it_past() {
        assert!(text("t", &"a".repeat(MAX_TEXT_BYTES)).is_ok());
        let e = text("tokenize: text", &"a".repeat(MAX_TEXT_BYTES + 1)).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!(
                "tokenize: text has {} bytes: at most {MAX_TEXT_BYTES} are accepted",
                MAX_TEXT_BYTES + 1
            )
        );
        let stop = |n: usize, len: usize| GenerateRequest {
            prompt: Some("x".into()),
            stop: vec!["s".repeat(len); n],
            ..Default::default()
        };
        assert!(generate_request(&stop(MAX_STOP_STRINGS, MAX_STOP_BYTES)).is_ok());
        let e = generate_request(&stop(MAX_STOP_STRINGS + 1, 1)).unwrap_err();
        assert!(e.to_string().starts_with("generate: stop has 65 items"), "{e}");
        let e = generate_request(&stop(1, MAX_STOP_BYTES + 1)).unwrap_err();
        assert!(e.to_string().starts_with("generate: stop[0] has 1025 bytes"), "{e}");
        assert!(matches!(e, TesseraError::InvalidArgument { .. }));
    }
}
