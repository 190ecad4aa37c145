//! The text workload of benchmarks and load tests: a fixed, seeded set of
//! real-looking English texts whose token lengths are mixed like production
//! text.
//!
//! Lengths are drawn from a two-part mixture: 85 % short texts (queries,
//! titles, chat lines: log-normal, median 14 tokens, σ 0.5) and 15 % long
//! ones (reviews, descriptions, documents: log-normal, median 110 tokens,
//! σ 0.7), clipped to 4..=512. Each text is made of real sentences from the
//! demo corpus, drawn at random and cut to the drawn length in words; its
//! true length is what the tokenizer then says.

use rand::rngs::StdRng;
use rand::seq::IndexedRandom;
use rand::{Rng, SeedableRng};
use rand_distr::{Distribution, LogNormal};

pub const SHORT_SHARE: f64 = 0.85;
/// Words per token for English under a WordPiece vocabulary, roughly.
const WORDS_PER_TOKEN: f64 = 0.75;

/// `count` texts built from `corpus` sentences, the same for the same seed.
pub fn generate(corpus: &[String], count: usize, seed: u64) -> Vec<String> {
    let mut rng = StdRng::seed_from_u64(seed);
    let short = LogNormal::new(14f64.ln(), 0.5).expect("valid log-normal");
    let long = LogNormal::new(110f64.ln(), 0.7).expect("valid log-normal");
    (0..count)
        .map(|_| {
            let tokens = if rng.random_bool(SHORT_SHARE) { short.sample(&mut rng) } else { long.sample(&mut rng) };
            let words = ((tokens.clamp(4.0, 512.0) - 2.0) * WORDS_PER_TOKEN).round().max(1.0) as usize;
            text_of_words(corpus, words, &mut rng)
        })
        .collect()
}

/// The comparison workload of `loadtest peer`: lengths in words drawn from
/// one log-normal, median `median_words` and σ `sigma`, clipped to
/// 1..=`max_words` (median ~15 words with a tail to ~380: chat lines and
/// queries, with some reviews and documents among them).
pub fn generate_words(
    corpus: &[String],
    count: usize,
    seed: u64,
    median_words: f64,
    sigma: f64,
    max_words: usize,
) -> Vec<String> {
    let mut rng = StdRng::seed_from_u64(seed);
    let lengths = LogNormal::new(median_words.ln(), sigma).expect("valid log-normal");
    (0..count)
        .map(|_| {
            let words = lengths.sample(&mut rng).round().clamp(1.0, max_words as f64) as usize;
            text_of_words(corpus, words, &mut rng)
        })
        .collect()
}

fn text_of_words(corpus: &[String], words: usize, rng: &mut StdRng) -> String {
    let mut out: Vec<&str> = Vec::with_capacity(words);
    while out.len() < words {
        let Some(sentence) = corpus.choose(rng) else { break };
        out.extend(sentence.split_whitespace());
    }
    out.truncate(words);
    out.join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn corpus() -> Vec<String> {
        vec!["The cat sat on the mat.".into(), "Markets rallied after the central bank spoke.".into()]
    }

    #[test]
    fn the_same_seed_gives_the_same_workload() {
        assert_eq!(generate(&corpus(), 50, 7), generate(&corpus(), 50, 7));
        assert_ne!(generate(&corpus(), 50, 7), generate(&corpus(), 50, 8));
    }

    #[test]
    fn most_texts_are_short_with_a_long_tail() {
        let texts = generate(&corpus(), 2000, 1);
        let words: Vec<usize> = texts.iter().map(|t| t.split_whitespace().count()).collect();
        let short = words.iter().filter(|&&w| w <= 20).count() as f64 / words.len() as f64;
        assert!(short > 0.75, "short share {short}");
        assert!(words.iter().any(|&w| w > 200), "no long tail");
        assert!(words.iter().all(|&w| (1..=384).contains(&w)));
    }

    #[test]
    fn word_lengths_have_the_median_and_the_tail_asked_for() {
        let texts = generate_words(&corpus(), 4000, 3, 15.0, 1.05, 380);
        let mut words: Vec<usize> = texts.iter().map(|t| t.split_whitespace().count()).collect();
        words.sort_unstable();
        let median = words[words.len() / 2];
        assert!((12..=18).contains(&median), "median {median}");
        assert!(*words.last().unwrap() <= 380);
        assert!(words[words.len() * 999 / 1000] > 150, "a long tail");
    }
}
