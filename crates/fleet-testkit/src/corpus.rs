//! The text the tests send: the demo corpus (scripts/demo-sentences.txt),
//! real sentences of varied length, and distinct texts made from it.

use std::path::PathBuf;

/// The demo corpus: real sentences.
pub fn sentences() -> Vec<String> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../scripts/demo-sentences.txt");
    std::fs::read_to_string(path).unwrap().lines().filter(|l| !l.trim().is_empty()).map(str::to_owned).collect()
}

/// `count` distinct texts of varied length, `<tag> <n>: <sentence>`: no two
/// alike within a tag or across tags (no feature-cache hits), and the same
/// tag and `n` always give the same text (a deliberate repeat).
pub fn texts(tag: &str, count: usize) -> Vec<String> {
    let sentences = sentences();
    (0..count).map(|i| format!("{tag} {i}: {}", sentences[i % sentences.len()])).collect()
}
