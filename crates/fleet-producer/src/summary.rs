//! A human summary of a batch of answered requests: counts by outcome,
//! throughput, latency percentiles and, for embedding models, the nearest
//! neighbour pairs that show the vectors mean something. Pure: no I/O.

use fleet_proto::{Answer, Status};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

pub struct Summary {
    pub counts: BTreeMap<&'static str, usize>,
    pub throughput_per_s: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    /// (cosine, text a, text b), best first.
    pub neighbours: Vec<(f32, String, String)>,
}

/// `answered` pairs each input text with its answer; `wall` runs from the
/// first send to the last answer seen.
pub fn summarise(answered: &[(String, Answer)], wall: Duration, top_pairs: usize) -> Summary {
    let mut counts = BTreeMap::new();
    for (_, a) in answered {
        *counts.entry(a.status.as_str()).or_insert(0) += 1;
    }
    let mut totals: Vec<f64> = answered.iter().map(|(_, a)| a.timings_ms.total).collect();
    totals.sort_by(f64::total_cmp);
    let embedded: Vec<(&str, Vec<f32>)> = answered
        .iter()
        .filter(|(_, a)| a.status == Status::Ok)
        .filter_map(|(text, a)| embedding_of(a).map(|e| (text.as_str(), e)))
        .collect();
    Summary {
        counts,
        throughput_per_s: answered.len() as f64 / wall.as_secs_f64().max(1e-9),
        p50_ms: percentile(&totals, 0.50),
        p99_ms: percentile(&totals, 0.99),
        // Every pair is compared: `--pairs 0` skips it for large runs.
        neighbours: if top_pairs == 0 { Vec::new() } else { nearest_pairs(&embedded, top_pairs) },
    }
}

fn embedding_of(answer: &Answer) -> Option<Vec<f32>> {
    let values = answer.output.as_ref()?.get("embedding")?.as_array()?;
    values.iter().map(|v| v.as_f64().map(|x| x as f32)).collect()
}

/// Nearest-rank percentile of sorted values; 0 for none.
pub fn percentile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = (q * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

pub fn cosine(a: &[f32], b: &[f32]) -> f32 {
    let dot: f32 = a.iter().zip(b).map(|(x, y)| x * y).sum();
    let norm = |v: &[f32]| v.iter().map(|x| x * x).sum::<f32>().sqrt();
    dot / (norm(a) * norm(b)).max(1e-12)
}

/// For each text its best neighbour; the `top` most similar distinct pairs.
fn nearest_pairs(items: &[(&str, Vec<f32>)], top: usize) -> Vec<(f32, String, String)> {
    let mut pairs: Vec<(f32, usize, usize)> = Vec::new();
    for (i, (text_i, e_i)) in items.iter().enumerate() {
        let best = items
            .iter()
            .enumerate()
            .filter(|(j, (text_j, _))| *j != i && text_j != text_i)
            .map(|(j, (_, e_j))| (cosine(e_i, e_j), j))
            .max_by(|a, b| a.0.total_cmp(&b.0));
        if let Some((cos, j)) = best {
            let (lo, hi) = (i.min(j), i.max(j));
            if !pairs.iter().any(|&(_, a, b)| (a, b) == (lo, hi)) {
                pairs.push((cos, lo, hi));
            }
        }
    }
    pairs.sort_by(|a, b| b.0.total_cmp(&a.0));
    pairs.truncate(top);
    pairs.into_iter().map(|(c, i, j)| (c, items[i].0.to_owned(), items[j].0.to_owned())).collect()
}

impl Summary {
    pub fn render(&self) -> String {
        let mut out = String::new();
        let counts: Vec<String> = self.counts.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let total: usize = self.counts.values().sum();
        let _ = writeln!(out, "answers: {total} ({})", counts.join(" "));
        let _ = writeln!(out, "throughput: {:.1} requests/s (first send to last answer)", self.throughput_per_s);
        let _ = writeln!(out, "latency (ce_time to answer): p50 {:.1} ms, p99 {:.1} ms", self.p50_ms, self.p99_ms);
        if !self.neighbours.is_empty() {
            let _ = writeln!(out, "nearest neighbours by cosine similarity:");
            for (cos, a, b) in &self.neighbours {
                let _ = writeln!(out, "  {cos:.3}  {:?}\n         {:?}", clip(a), clip(b));
            }
        }
        out
    }
}

fn clip(text: &str) -> String {
    let clipped: String = text.chars().take(90).collect();
    if clipped.len() < text.len() {
        format!("{clipped}…")
    } else {
        clipped
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fleet_proto::{ErrorCode, Timings};
    use serde_json::json;

    fn ok(total: f64, embedding: &[f32]) -> Answer {
        Answer::ok("m", 1, json!({ "embedding": embedding }), Timings { total, ..Timings::default() })
    }

    #[test]
    fn percentiles_use_nearest_rank() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&v, 0.5), 50.0);
        assert_eq!(percentile(&v, 0.99), 99.0);
        assert_eq!(percentile(&[7.0], 0.99), 7.0);
        assert_eq!(percentile(&[], 0.5), 0.0);
    }

    #[test]
    fn pairs_the_closest_vectors_and_counts_outcomes() {
        let answered = vec![
            ("north".to_owned(), ok(10.0, &[1.0, 0.0])),
            ("north-ish".to_owned(), ok(20.0, &[0.9, 0.1])),
            ("east".to_owned(), ok(30.0, &[0.0, 1.0])),
            ("bad".to_owned(), Answer::error("m", 1, ErrorCode::EmptyInput, "empty", Timings::default())),
        ];
        let s = summarise(&answered, Duration::from_secs(2), 1);
        assert_eq!(s.counts.get("ok"), Some(&3));
        assert_eq!(s.counts.get("error"), Some(&1));
        assert_eq!(s.throughput_per_s, 2.0);
        assert_eq!(s.neighbours.len(), 1);
        assert_eq!((s.neighbours[0].1.as_str(), s.neighbours[0].2.as_str()), ("north", "north-ish"));
        assert!(s.render().contains("north-ish"));
    }
}
