//! The length policy on the real MiniLM tokenizer: no padding, truncation
//! that keeps the special tokens and says so, or a refusal.

mod common;

use fleet_worker::stages::admission::tokenize::{TextTokenizer, TokenizeError};

const CLS: i64 = 101;
const SEP: i64 = 102;

fn tokenizer(max_seq_len: usize, truncate: bool) -> TextTokenizer {
    TextTokenizer::load(&common::model_repo().join("minilm/1/tokenizer.json"), max_seq_len, truncate)
        .expect("tokenizer (run make setup)")
}

#[test]
fn short_texts_are_not_padded() {
    let t = tokenizer(512, true).tokenize("A man is eating food.").unwrap();
    assert_eq!(t.ids.first(), Some(&CLS));
    assert_eq!(t.ids.last(), Some(&SEP));
    assert!(t.ids.len() < 16, "{} tokens: padding is on", t.ids.len());
    assert!(!t.truncated);
}

#[test]
fn long_texts_are_truncated_to_max_seq_len_and_flagged() {
    let long = "word ".repeat(100);
    let t = tokenizer(16, true).tokenize(&long).unwrap();
    assert_eq!(t.ids.len(), 16);
    assert_eq!((t.ids[0], t.ids[15]), (CLS, SEP), "special tokens survive truncation");
    assert!(t.truncated);
}

#[test]
fn long_texts_are_refused_when_truncation_is_off() {
    let long = "word ".repeat(100);
    match tokenizer(16, false).tokenize(&long) {
        Err(TokenizeError::TooLong { tokens, max }) => {
            assert_eq!(max, 16);
            assert_eq!(tokens, 102, "the whole text's length: 100 words, [CLS] and [SEP]");
        }
        other => panic!("expected TooLong, got {other:?}"),
    }
    assert!(tokenizer(16, false).tokenize("short enough").is_ok());
}
