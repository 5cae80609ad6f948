//! Stop strings split across pieces at every position: what is shown is exactly the text before
//! the first stop string, nothing of a stop string is ever shown, and text is held back only
//! while it could still be the start of one (checked against a brute-force model after every
//! piece).

use tessera_llm::stop::{StopError, StopMatcher, StopStep};

fn stops(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| s.to_string()).collect()
}

/// What may be shown after receiving `received` when no stop string has matched: all but the
/// longest suffix that is a proper prefix of a stop string (brute force over char boundaries).
fn releasable(received: &str, stops: &[String]) -> usize {
    let held = (0..=received.len())
        .filter(|&i| received.is_char_boundary(i))
        .map(|i| &received[i..])
        .filter(|suffix| {
            !suffix.is_empty()
                && stops.iter().any(|s| s.len() > suffix.len() && s.starts_with(suffix))
        })
        .map(str::len)
        .max()
        .unwrap_or(0);
    received.len() - held
}

/// The earliest full match in `text`, if any.
fn first_match(text: &str, stops: &[String]) -> Option<usize> {
    stops.iter().filter_map(|s| text.find(s.as_str())).min()
}

/// Feeds `pieces` and checks every step against the brute-force model; returns everything
/// shown (including `finish`) and whether it stopped.
fn feed(pieces: &[&str], list: &[String]) -> (String, bool) {
    let mut m = StopMatcher::new(list).unwrap();
    let mut shown = String::new();
    let mut received = String::new();
    for piece in pieces {
        received.push_str(piece);
        let StopStep { emit, stopped } = m.push(piece);
        shown.push_str(&emit);
        match first_match(&received, list) {
            Some(at) => {
                assert!(stopped, "{received:?} holds a stop string, pieces {pieces:?}");
                assert_eq!(shown, received[..at], "pieces {pieces:?}");
                // Anything after the stop never comes out.
                assert_eq!(m.push("more text"), StopStep { emit: String::new(), stopped: true });
                assert_eq!(m.finish(), "");
                return (shown, true);
            }
            None => {
                assert!(!stopped, "pieces {pieces:?}");
                assert_eq!(
                    shown,
                    received[..releasable(&received, list)],
                    "after {received:?}, pieces {pieces:?}"
                );
            }
        }
    }
    shown.push_str(&m.finish());
    assert_eq!(shown, received, "finish releases what was held");
    (shown, false)
}

/// Every split of `text` into two and into three pieces at character boundaries.
fn splits(text: &str) -> Vec<Vec<&str>> {
    let cuts: Vec<usize> = (0..=text.len()).filter(|&i| text.is_char_boundary(i)).collect();
    let mut out = vec![vec![text]];
    for &a in &cuts {
        out.push(vec![&text[..a], &text[a..]]);
        for &b in cuts.iter().filter(|&&b| b >= a) {
            out.push(vec![&text[..a], &text[a..b], &text[b..]]);
        }
    }
    out
}

#[test]
fn a_stop_string_split_at_every_position_is_found_and_never_shown() {
    let list = stops(&["<end>"]);
    let text = "Hello <en world <end> after";
    let chars: Vec<&str> = text.split_inclusive(|_| true).collect();
    let mut cases = splits(text);
    cases.push(chars);
    for pieces in &cases {
        let (shown, stopped) = feed(pieces, &list);
        assert!(stopped);
        assert_eq!(shown, "Hello <en world ");
    }
    assert!(cases.len() > 300);
}

#[test]
fn several_overlapping_and_unicode_stop_strings() {
    let list = stops(&["\n\nUser:", "User", "ab", "bc", "。", "🙂!", "xxy"]);
    for text in [
        "x a\n\nUse done",
        "say a\n\nUser: hi",
        "zzab",
        "zzbc",
        "xbbc",
        "日本語。次",
        "ok 🙂 fine 🙂!",
        "wxxxxy tail",
        "no stop",
    ] {
        for pieces in splits(text) {
            feed(&pieces, &list);
        }
    }
    // The stop that starts first wins, whatever order the list has.
    assert_eq!(feed(&["a\n\nUser: x"], &list).0, "a");
    assert_eq!(feed(&["xab", "c"], &list).0, "x");
}

#[test]
fn text_that_cannot_start_a_stop_string_passes_at_once() {
    let list = stops(&["STOP"]);
    let mut m = StopMatcher::new(&list).unwrap();
    assert_eq!(m.push("Hello, ").emit, "Hello, ");
    assert_eq!(m.push("S").emit, "");
    assert_eq!(m.push("T").emit, "");
    assert_eq!(m.push("x").emit, "STx");
    assert_eq!(m.push("ST").emit, "");
    assert_eq!(m.finish(), "ST");
    // After finish the matcher starts a new stream.
    assert_eq!(m.push("STO"), StopStep { emit: String::new(), stopped: false });
    assert_eq!(m.push("P"), StopStep { emit: String::new(), stopped: true });
    assert!(m.stopped());
}

#[test]
fn no_stop_strings_pass_everything_and_empty_ones_are_an_error() {
    let mut m = StopMatcher::new(&[]).unwrap();
    assert_eq!(m.push("anything"), StopStep { emit: "anything".into(), stopped: false });
    assert_eq!(StopMatcher::new(&stops(&["ok", ""])).unwrap_err(), StopError::Empty { index: 1 });
    assert_eq!(StopError::Empty { index: 1 }.to_string(), "stop string 1 is empty");
}
