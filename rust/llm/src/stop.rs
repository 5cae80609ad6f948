//! Stop strings over streamed text: matched across token boundaries and never shown.
//!
//! The generation loop pushes each token's text; the matcher passes on what is certainly not
//! part of a stop string and holds back a tail that could still become one. On a match the text
//! before it is released and the generation stops; the stop string and anything after it are
//! dropped. At the end of a generation that did not stop, [`StopMatcher::finish`] releases the
//! held tail.
//!
//! ```
//! use tessera_llm::stop::StopMatcher;
//! let mut m = StopMatcher::new(&["</s>".to_string()]).unwrap();
//! assert_eq!(m.push("Hello <").emit, "Hello ");
//! let step = m.push("/s> more");
//! assert_eq!((step.emit.as_str(), step.stopped), ("", true));
//! ```

/// A stop-string list that cannot be used.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum StopError {
    /// An empty stop string (it would match before any text).
    #[error("stop string {index} is empty")]
    Empty {
        /// Its position in the list.
        index: usize,
    },
}

/// What one [`StopMatcher::push`] releases.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct StopStep {
    /// Text to show now (possibly empty).
    pub emit: String,
    /// A stop string matched: generation ends, and nothing after `emit` is to be shown.
    pub stopped: bool,
}

/// Finds stop strings in streamed text, holding back what could be the start of one.
#[derive(Debug, Clone)]
pub struct StopMatcher {
    stops: Vec<String>,
    /// Text received but not released: always shorter than the longest stop string and a
    /// prefix of some stop string (or empty).
    held: String,
    stopped: bool,
}

impl StopMatcher {
    /// A matcher for these stop strings (none: everything passes through).
    pub fn new(stops: &[String]) -> Result<StopMatcher, StopError> {
        if let Some(index) = stops.iter().position(String::is_empty) {
            return Err(StopError::Empty { index });
        }
        Ok(StopMatcher { stops: stops.to_vec(), held: String::new(), stopped: false })
    }

    /// Takes the next piece of text. When several stop strings occur, the one that starts
    /// first wins; once stopped, every later push releases nothing.
    pub fn push(&mut self, text: &str) -> StopStep {
        if self.stopped {
            return StopStep { emit: String::new(), stopped: true };
        }
        self.held.push_str(text);
        if let Some(at) = self.stops.iter().filter_map(|s| self.held.find(s.as_str())).min() {
            self.held.truncate(at);
            self.stopped = true;
            return StopStep { emit: std::mem::take(&mut self.held), stopped: true };
        }
        let keep_from = self.held.len() - self.longest_partial_suffix();
        let emit = self.held[..keep_from].to_string();
        self.held.drain(..keep_from);
        StopStep { emit, stopped: false }
    }

    /// Ends the stream: returns the held text (empty after a stop) and readies the matcher for
    /// a new stream.
    pub fn finish(&mut self) -> String {
        let rest = if self.stopped { String::new() } else { std::mem::take(&mut self.held) };
        self.held.clear();
        self.stopped = false;
        rest
    }

    /// Whether a stop string has matched in this stream.
    pub fn stopped(&self) -> bool {
        self.stopped
    }

    /// The length of the longest suffix of `held` that is a proper prefix of a stop string.
    /// Such a suffix starts on a character boundary, because a stop string begins with one.
    fn longest_partial_suffix(&self) -> usize {
        let held = self.held.as_bytes();
        self.stops
            .iter()
            .map(|s| {
                let s = s.as_bytes();
                let longest = held.len().min(s.len() - 1);
                (1..=longest).rev().find(|&n| held[held.len() - n..] == s[..n]).unwrap_or(0)
            })
            .max()
            .unwrap_or(0)
    }
}
