//! What turns a module's raw output into one vector per row, as the model's
//! `[task]` says: pooling and normalisation for an embedding, an activation
//! for class scores. It runs on the module's device, in fp32 whatever the
//! module's precision (a mean over 512 bf16 token vectors loses digits the
//! cosine check would see).
//!
//! The module's output shape is checked here against the task: a mismatch
//! is a [`EngineError::Signature`] naming the config key to change.

use super::error::EngineError;
use crate::config::{Activation, Pooling, TaskConfig};
use tch::{Kind, Tensor};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Head {
    Pool { pooling: Pooling, normalize: bool },
    Scores { activation: Activation },
}

impl Head {
    pub fn for_task(task: &TaskConfig) -> Self {
        match *task {
            TaskConfig::Embedding { pooling, normalize } => Self::Pool { pooling, normalize },
            TaskConfig::Classification { activation, .. } | TaskConfig::Rerank { activation, .. } => {
                Self::Scores { activation }
            }
        }
    }

    /// One vector per row, `[rows, dim]` f32 on the output's device.
    /// `mask` is the batch's `[rows, tokens]` attention mask (text models).
    pub fn apply(&self, output: &Tensor, rows: usize, mask: Option<&Tensor>) -> Result<Tensor, EngineError> {
        let size = output.size();
        if size.first() != Some(&(rows as i64)) {
            return Err(EngineError::BadShape { got: size, rows });
        }
        let output = output.f_to_kind(Kind::Float)?;
        match (*self, size.len(), mask) {
            (Self::Pool { pooling: Pooling::None, normalize }, 2, _) => Ok(normalized(output, normalize)?),
            (Self::Pool { pooling, normalize }, 3, Some(mask)) if pooling != Pooling::None => {
                Ok(normalized(pool(&output, pooling, mask)?, normalize)?)
            }
            (Self::Pool { pooling: Pooling::None, .. }, _, _) => Err(signature(
                "task.pooling",
                format!("= \"none\" expects one vector per row [rows, dim] from the module, got {size:?}"),
            )),
            (Self::Pool { pooling, .. }, _, _) => Err(signature(
                "task.pooling",
                format!(
                    "= {:?} expects token outputs [rows, tokens, dim] from a text module, got {size:?} \
                     (a module that pools itself needs pooling = \"none\")",
                    pooling.as_str()
                ),
            )),
            (Self::Scores { activation }, 2, _) => Ok(match activation {
                Activation::Softmax => output.f_softmax(1, Kind::Float)?,
                Activation::Sigmoid => output.f_sigmoid()?,
                Activation::None => output,
            }),
            (Self::Scores { .. }, _, _) => Err(signature(
                "task.type",
                format!("= \"classification\" expects class scores [rows, classes] from the module, got {size:?}"),
            )),
        }
    }
}

fn signature(key: &'static str, problem: String) -> EngineError {
    EngineError::Signature { key, problem }
}

/// `[rows, tokens, dim]` → `[rows, dim]` over the tokens `mask` keeps.
fn pool(tokens: &Tensor, pooling: Pooling, mask: &Tensor) -> Result<Tensor, tch::TchError> {
    match pooling {
        Pooling::Cls | Pooling::None => tokens.f_select(1, 0),
        Pooling::Mean => {
            let mask = mask.f_to_kind(Kind::Float)?.f_unsqueeze(-1)?;
            let summed = tokens.f_mul(&mask)?.f_sum_dim_intlist([1i64].as_slice(), false, Kind::Float)?;
            let counts = mask.f_sum_dim_intlist([1i64].as_slice(), false, Kind::Float)?.f_clamp_min(1e-9)?;
            summed.f_div(&counts)
        }
        Pooling::Last => {
            // Rows are padded on the right: a row's last real token sits at
            // (its mask's sum - 1).
            let dim = tokens.size()[2];
            let last =
                mask.f_sum_dim_intlist([1i64].as_slice(), false, Kind::Int64)?.f_sub_scalar(1)?.f_clamp_min(0)?;
            let index = last.f_view([-1, 1, 1])?.f_expand([-1, 1, dim], false)?;
            tokens.f_gather(1, &index, false)?.f_squeeze_dim(1)
        }
    }
}

fn normalized(vectors: Tensor, normalize: bool) -> Result<Tensor, tch::TchError> {
    if !normalize {
        return Ok(vectors);
    }
    let norms = vectors
        .f_mul(&vectors)?
        .f_sum_dim_intlist([1i64].as_slice(), true, Kind::Float)?
        .f_sqrt()?
        .f_clamp_min(1e-12)?;
    vectors.f_div(&norms)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rows(t: &Tensor) -> Vec<Vec<f32>> {
        Vec::<Vec<f32>>::try_from(&t.contiguous()).unwrap()
    }

    /// Two rows of three tokens, 2 wide; the second row's last token is padding.
    fn tokens() -> (Tensor, Tensor) {
        let out = Tensor::from_slice(&[1f32, 0., 3., 0., 5., 2., 0., 4., 2., 8., 100., 100.]).view([2, 3, 2]);
        let mask = Tensor::from_slice(&[1i64, 1, 1, 1, 1, 0]).view([2, 3]);
        (out, mask)
    }

    #[test]
    fn pooling_reads_the_kept_tokens_only() {
        let (out, mask) = tokens();
        let pooled = |pooling| rows(&Head::Pool { pooling, normalize: false }.apply(&out, 2, Some(&mask)).unwrap());
        assert_eq!(pooled(Pooling::Mean), vec![vec![3., 2. / 3.], vec![1., 6.]]);
        assert_eq!(pooled(Pooling::Cls), vec![vec![1., 0.], vec![0., 4.]]);
        assert_eq!(pooled(Pooling::Last), vec![vec![5., 2.], vec![2., 8.]]);
    }

    #[test]
    fn normalised_vectors_have_unit_length() {
        let (out, mask) = tokens();
        let v = rows(&Head::Pool { pooling: Pooling::Last, normalize: true }.apply(&out, 2, Some(&mask)).unwrap());
        let length = |r: &Vec<f32>| r.iter().map(|x| x * x).sum::<f32>().sqrt();
        assert!((length(&v[0]) - 1.0).abs() < 1e-6 && (length(&v[1]) - 1.0).abs() < 1e-6);
        assert!((v[0][0] / v[0][1] - 2.5).abs() < 1e-5);
    }

    #[test]
    fn activations_make_scores() {
        let logits = Tensor::from_slice(&[0f32, 0., 2f32.ln()]).view([1, 3]);
        let softmax = rows(&Head::Scores { activation: Activation::Softmax }.apply(&logits, 1, None).unwrap());
        assert!((softmax[0][2] - 0.5).abs() < 1e-6 && (softmax[0][0] - 0.25).abs() < 1e-6);
        let sigmoid = rows(&Head::Scores { activation: Activation::Sigmoid }.apply(&logits, 1, None).unwrap());
        assert!((sigmoid[0][0] - 0.5).abs() < 1e-6 && (sigmoid[0][2] - 2. / 3.).abs() < 1e-6);
        let none = rows(&Head::Scores { activation: Activation::None }.apply(&logits, 1, None).unwrap());
        assert_eq!(none[0][0], 0.0);
    }

    #[test]
    fn a_shape_that_does_not_fit_the_task_names_the_key() {
        let (out, mask) = tokens();
        let key = |head: Head, t: &Tensor| match head.apply(t, 2, Some(&mask)) {
            Err(EngineError::Signature { key, .. }) => key,
            other => panic!("{other:?}"),
        };
        assert_eq!(key(Head::Pool { pooling: Pooling::None, normalize: true }, &out), "task.pooling");
        assert_eq!(key(Head::Scores { activation: Activation::Softmax }, &out), "task.type");
        let pooled = Tensor::from_slice(&[1f32, 2., 3., 4.]).view([2, 2]);
        assert_eq!(key(Head::Pool { pooling: Pooling::Mean, normalize: true }, &pooled), "task.pooling");
    }
}
