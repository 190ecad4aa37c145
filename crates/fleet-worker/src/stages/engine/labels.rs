//! A classifier's labels file and its top-k answer. Pure: no libtorch.

use std::path::Path;

/// One class: a line `<names>`, or `<id><TAB><names>` (ImageNet's
/// `n07920052<TAB>espresso`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Label {
    /// The class's own identifier, when the file gives one (answered as `synset`).
    pub id: Option<String>,
    /// Comma-separated names; the first one is the label answered.
    pub names: String,
}

impl Label {
    pub fn name(&self) -> &str {
        self.names.split(',').next().unwrap_or_default().trim()
    }
}

/// One label per non-empty line, in class order.
pub fn parse_labels(text: &str) -> Result<Vec<Label>, String> {
    let labels: Vec<Label> = text
        .lines()
        .enumerate()
        .filter(|(_, line)| !line.trim().is_empty())
        .map(|(i, line)| match line.split_once('\t') {
            Some((id, names)) if !id.is_empty() && !names.trim().is_empty() => {
                Ok(Label { id: Some(id.to_owned()), names: names.trim().to_owned() })
            }
            None => Ok(Label { id: None, names: line.trim().to_owned() }),
            _ => Err(format!("line {}: expected <name> or <id><TAB><names>, got {line:?}", i + 1)),
        })
        .collect::<Result<_, _>>()?;
    if labels.is_empty() {
        return Err("no labels".into());
    }
    Ok(labels)
}

pub fn load_labels(path: &Path) -> Result<Vec<Label>, String> {
    let raw = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    parse_labels(&raw).map_err(|e| format!("{}: {e}", path.display()))
}

/// A class (or a rerank request's document) and its score.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Scored {
    pub index: usize,
    pub score: f32,
}

/// The `k` highest scores, best first (the lower index first among equals).
pub fn top_k(scores: &[f32], k: usize) -> Vec<Scored> {
    let mut order: Vec<usize> = (0..scores.len()).collect();
    order.sort_by(|&x, &y| scores[y].total_cmp(&scores[x]).then(x.cmp(&y)));
    order.into_iter().take(k).map(|index| Scored { index, score: scores[index] }).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_parse_with_or_without_an_id_and_name_the_first_synonym() {
        let labels = parse_labels("n07920052\tespresso\nn02123045\ttabby, tabby cat\n").unwrap();
        assert_eq!(labels.len(), 2);
        assert_eq!((labels[1].id.as_deref(), labels[1].name()), (Some("n02123045"), "tabby"));
        let plain = parse_labels("negative\npositive\n\n").unwrap();
        assert_eq!((plain.len(), plain[1].id.as_deref(), plain[1].name()), (2, None, "positive"));
        assert!(parse_labels("\tno id\n").unwrap_err().starts_with("line 1"));
        assert!(parse_labels("\n").is_err());
    }

    #[test]
    fn top_k_is_best_first() {
        let got = top_k(&[0.1, 0.5, 0.2, 0.5], 3);
        let indices: Vec<usize> = got.iter().map(|s| s.index).collect();
        assert_eq!(indices, vec![1, 3, 2]);
        assert_eq!(top_k(&[0.3], 5).len(), 1);
    }
}
