//! How many FLOPs a batch of the text encoder costs, counted from the
//! module's parameters ([`ModelShape`]) rather than hard-coded, so another
//! encoder is counted as it is. Pure, so the count is tested without a model.

use anyhow::{Context, Result};
use std::collections::BTreeSet;

/// BERT's name for a layer's query projection; one per attention layer.
const QUERY_WEIGHT: &str = "attention.self.query.weight";

/// What a text encoder's FLOPs per token follow from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ModelShape {
    /// Weights of the linear layers every token goes through: every 2-D
    /// parameter but the embedding tables (looked up, not multiplied) and
    /// the pooler (it acts on [CLS] alone, and an embedding model's token
    /// outputs never reach it).
    pub linear_params: u64,
    /// Attention layers.
    pub layers: u64,
    /// Width of the attention's queries, keys and values.
    pub hidden: u64,
}

impl ModelShape {
    /// From the module's parameters (`TextModule::parameter_shapes`). Layers
    /// are the query weights, or where the names are not BERT's, the
    /// distinct numbered `layer.N` / `layers.N` blocks; the width is the
    /// query weight's output size, or else the embedding table's width.
    pub fn from_parameters(parameters: &[(String, Vec<i64>)]) -> Result<Self> {
        let linear_params = parameters
            .iter()
            .filter(|(name, shape)| shape.len() == 2 && is_per_token_linear(name))
            .map(|(_, shape)| shape.iter().product::<i64>().unsigned_abs())
            .sum();
        let queries: Vec<&Vec<i64>> = parameters
            .iter()
            .filter(|(name, shape)| shape.len() == 2 && name.ends_with(QUERY_WEIGHT))
            .map(|(_, shape)| shape)
            .collect();
        let layers = if queries.is_empty() { layer_blocks(parameters) } else { queries.len() };
        let hidden = match queries.first() {
            Some(query) => query[0],
            None => parameters
                .iter()
                .find(|(name, shape)| shape.len() == 2 && name.contains("embed"))
                .map(|(_, shape)| shape[1])
                .context("neither a query weight nor an embedding table: see --list-parameters")?,
        };
        anyhow::ensure!(layers > 0, "no attention layers found in the parameter names: see --list-parameters");
        Ok(Self { linear_params, layers: layers as u64, hidden: hidden.unsigned_abs() })
    }
}

/// A 2-D weight that multiplies every token: not an embedding table
/// (`embeddings`, `embed_tokens`) and not the [CLS]-only pooler.
fn is_per_token_linear(name: &str) -> bool {
    !name.contains("embed") && !name.contains("pooler")
}

/// Distinct `…layer.N` / `…layers.N` prefixes among the parameter names.
fn layer_blocks(parameters: &[(String, Vec<i64>)]) -> usize {
    let mut blocks = BTreeSet::new();
    for (name, _) in parameters {
        let parts: Vec<&str> = name.split('.').collect();
        let numbered = |w: &[&str]| matches!(w[0], "layer" | "layers") && w[1].parse::<u64>().is_ok();
        if let Some(at) = parts.windows(2).position(numbered) {
            blocks.insert(parts[..at + 2].join("."));
        }
    }
    blocks.len()
}

/// FLOPs of one batch of `rows` rows padded to `len` tokens: per token, 2
/// per linear weight (a multiply and an add), and per layer the two
/// attention products QKᵀ and AV, each `len × hidden` multiply-adds.
pub fn model_flops(rows: usize, len: usize, shape: &ModelShape) -> f64 {
    let (rows, len) = (rows as f64, len as f64);
    let per_token = 2.0 * shape.linear_params as f64 + 4.0 * shape.layers as f64 * len * shape.hidden as f64;
    rows * len * per_token
}

#[cfg(test)]
mod tests {
    use super::*;

    fn named(list: &[(&str, &[i64])]) -> Vec<(String, Vec<i64>)> {
        list.iter().map(|(name, shape)| (name.to_string(), shape.to_vec())).collect()
    }

    /// BERT's parameters as the export names them (the module wraps the
    /// Hugging Face model as `model`), two layers of MiniLM's width.
    fn bert_like(layers: usize) -> Vec<(String, Vec<i64>)> {
        let mut list = named(&[
            ("model.embeddings.word_embeddings.weight", &[30522, 384]),
            ("model.embeddings.position_embeddings.weight", &[512, 384]),
            ("model.embeddings.token_type_embeddings.weight", &[2, 384]),
            ("model.embeddings.LayerNorm.weight", &[384]),
            ("model.embeddings.LayerNorm.bias", &[384]),
        ]);
        for layer in 0..layers {
            let p = format!("model.encoder.layer.{layer}.");
            for (suffix, shape) in [
                ("attention.self.query.weight", vec![384, 384]),
                ("attention.self.query.bias", vec![384]),
                ("attention.self.key.weight", vec![384, 384]),
                ("attention.self.key.bias", vec![384]),
                ("attention.self.value.weight", vec![384, 384]),
                ("attention.self.value.bias", vec![384]),
                ("attention.output.dense.weight", vec![384, 384]),
                ("attention.output.dense.bias", vec![384]),
                ("attention.output.LayerNorm.weight", vec![384]),
                ("intermediate.dense.weight", vec![1536, 384]),
                ("intermediate.dense.bias", vec![1536]),
                ("output.dense.weight", vec![384, 1536]),
                ("output.dense.bias", vec![384]),
                ("output.LayerNorm.weight", vec![384]),
            ] {
                list.push((format!("{p}{suffix}"), shape));
            }
        }
        list.extend(named(&[("model.pooler.dense.weight", &[384, 384]), ("model.pooler.dense.bias", &[384])]));
        list
    }

    #[test]
    fn reads_a_bert_encoder_from_its_parameters() {
        let shape = ModelShape::from_parameters(&bert_like(2)).unwrap();
        let per_layer = 4 * 384 * 384 + 2 * 384 * 1536;
        assert_eq!(shape, ModelShape { linear_params: 2 * per_layer, layers: 2, hidden: 384 });
    }

    #[test]
    fn counts_numbered_layer_blocks_where_the_names_are_not_berts() {
        let parameters = named(&[
            ("embed_tokens.weight", &[100, 8]),
            ("layers.0.self_attn.q_proj.weight", &[8, 8]),
            ("layers.0.norm.weight", &[8]),
            ("layers.1.self_attn.q_proj.weight", &[8, 8]),
        ]);
        let shape = ModelShape::from_parameters(&parameters).unwrap();
        assert_eq!(shape, ModelShape { linear_params: 128, layers: 2, hidden: 8 });
    }

    #[test]
    fn a_module_without_layers_is_refused() {
        assert!(ModelShape::from_parameters(&named(&[("embeddings.weight", &[10, 4])])).is_err());
    }

    #[test]
    fn batch_flops_are_linear_weights_plus_attention_per_token() {
        let shape = ModelShape { linear_params: 100, layers: 1, hidden: 4 };
        // 2 rows × 8 tokens × (2·100 + 4·1·8·4).
        assert_eq!(model_flops(2, 8, &shape), 16.0 * 328.0);
        // Attention grows with the length: twice the length, more than twice the FLOPs.
        assert!(model_flops(1, 16, &shape) > 2.0 * model_flops(1, 8, &shape));
    }
}
