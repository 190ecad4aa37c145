//! The TorchScript modules of each model kind, through libtorch (tch), on CPU or CUDA.
//!
//! Everything here blocks, so it runs on a dedicated thread, never on the
//! async runtime. A text batch is padded to its longest row (not to a fixed
//! length) and passed as `(input_ids, attention_mask)`; the model returns
//! one pooled, normalised embedding per row. An image batch is uint8 RGB
//! `[rows, size, size, 3]` (the version's `input.toml`); the model normalises
//! and returns class probabilities, of which the top k are answered.

use crate::config::DeviceChoice;
use std::path::Path;
use tch::{CModule, Device, Kind, Tensor};

/// `[PAD]` of BERT-style vocabularies; masked out, so its value never counts.
pub const PAD_ID: i64 = 0;

#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error("loading {path}: {source}")]
    Load { path: String, source: tch::TchError },
    #[error("model call failed: {0}")]
    Forward(tch::TchError),
    /// The batch did not fit: the memory guard refused it, or libtorch's
    /// allocator failed. Split and retried, unlike the other errors.
    #[error("out of device memory: {0}")]
    OutOfMemory(String),
    #[error("CUDA was asked for, but libtorch sees no CUDA device")]
    NoCuda,
    #[error("model returned shape {got:?}, expected [{rows}, dim]")]
    BadShape { got: Vec<i64>, rows: usize },
    #[error("labels: {0}")]
    Labels(String),
    #[error("warm-up failed: {0}")]
    WarmUp(String),
    #[error("{0}")]
    Incompatible(String),
}

impl From<tch::TchError> for EngineError {
    fn from(e: tch::TchError) -> Self {
        let message = e.to_string();
        if super::memory::is_out_of_memory(&message) {
            // The first line names the allocation; the rest is a C++ backtrace.
            Self::OutOfMemory(message.lines().next().unwrap_or_default().to_owned())
        } else {
            Self::Forward(e)
        }
    }
}

pub fn choose_device(choice: DeviceChoice) -> Result<Device, EngineError> {
    if choice != DeviceChoice::Cpu {
        load_cuda_backend();
    }
    match choice {
        DeviceChoice::Cpu => Ok(Device::Cpu),
        DeviceChoice::Auto => Ok(Device::cuda_if_available()),
        DeviceChoice::Cuda if tch::Cuda::is_available() => Ok(Device::Cuda(0)),
        DeviceChoice::Cuda => Err(EngineError::NoCuda),
    }
}

/// Makes libtorch's CUDA backend available to a binary linked against a
/// CPU libtorch, when the libtorch found at run time has one: its kernels
/// register themselves as `libtorch_cuda.so` loads. This is how one build
/// serves on CPU and on CUDA machines (LD_LIBRARY_PATH picks the libtorch,
/// see scripts/gpu-check.sh). Loading fails harmlessly where there is none.
fn load_cuda_backend() {
    static LOADED: std::sync::Once = std::sync::Once::new();
    LOADED.call_once(|| {
        use libloading::os::unix::{Library, RTLD_GLOBAL, RTLD_NOW};
        // SAFETY: libtorch_cuda's initialisers only register kernels with
        // the libtorch this process already uses; the library stays loaded
        // for the life of the process (forgotten, never unloaded).
        match unsafe { Library::open(Some("libtorch_cuda.so"), RTLD_NOW | RTLD_GLOBAL) } {
            Ok(library) => {
                std::mem::forget(library);
                tracing::info!("libtorch_cuda.so loaded");
            }
            Err(e) => tracing::debug!(error = %e, "no libtorch_cuda.so: CPU only"),
        }
    });
}

/// A padded batch: row-major `rows × len` ids and the matching 0/1 mask.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Padded {
    pub ids: Vec<i64>,
    pub mask: Vec<i64>,
    pub rows: usize,
    pub len: usize,
}

/// Pads every row to the longest one. Pure, so the padding rule is testable
/// without libtorch.
pub fn pad_to_longest(rows: &[&[i64]]) -> Padded {
    let len = rows.iter().map(|r| r.len()).max().unwrap_or(0);
    let mut ids = Vec::with_capacity(rows.len() * len);
    let mut mask = Vec::with_capacity(rows.len() * len);
    for row in rows {
        ids.extend_from_slice(row);
        ids.extend(std::iter::repeat_n(PAD_ID, len - row.len()));
        mask.extend(std::iter::repeat_n(1, row.len()));
        mask.extend(std::iter::repeat_n(0, len - row.len()));
    }
    Padded { ids, mask, rows: rows.len(), len }
}

pub struct TextModule {
    module: CModule,
    device: Device,
}

impl TextModule {
    pub fn load(path: &Path, device: Device) -> Result<Self, EngineError> {
        let mut module = CModule::load_on_device(path, device)
            .map_err(|source| EngineError::Load { path: path.display().to_string(), source })?;
        module.set_eval();
        Ok(Self { module, device })
    }

    pub fn device(&self) -> Device {
        self.device
    }

    /// Converts the weights to `kind` (bf16, fp16). Inputs stay integer
    /// ids; outputs are read back as f32.
    pub fn convert(&mut self, kind: Kind) -> Result<(), EngineError> {
        convert_parameters(&self.module, kind)
    }

    /// One embedding per row, in row order.
    pub fn embed(&self, rows: &[&[i64]]) -> Result<Vec<Vec<f32>>, EngineError> {
        if rows.is_empty() {
            return Ok(Vec::new());
        }
        let padded = pad_to_longest(rows);
        let shape = [padded.rows as i64, padded.len as i64];
        let _no_grad = tch::no_grad_guard();
        let ids = Tensor::from_slice(&padded.ids).view(shape).to_device(self.device);
        let mask = Tensor::from_slice(&padded.mask).view(shape).to_device(self.device);
        let out = self.module.forward_ts(&[ids, mask])?;
        let size = out.size();
        if size.len() != 2 || size[0] != padded.rows as i64 {
            return Err(EngineError::BadShape { got: size, rows: padded.rows });
        }
        let out = out.to_device(Device::Cpu).to_kind(Kind::Float).contiguous();
        Ok(Vec::<Vec<f32>>::try_from(&out)?)
    }
}

/// Converts a module's floating-point parameters to `kind`, in place. Not
/// `CModule::to`: libtorch's `Module::to(dtype)` converts every tensor,
/// integer buffers too (BERT's position ids turn into bf16 and the
/// embedding lookup fails), where PyTorch's `nn.Module.to` converts only
/// floating-point ones. Parameters of a frozen module are constants in its
/// graph: nothing is converted then, and the outputs show it (the precision
/// check compares them with fp32's, and the speed is fp32's).
fn convert_parameters(module: &CModule, kind: Kind) -> Result<(), EngineError> {
    let _no_grad = tch::no_grad_guard();
    for (_, mut parameter) in module.named_parameters()? {
        if parameter.is_floating_point() {
            let converted = parameter.to_kind(kind);
            parameter.set_data(&converted);
        }
    }
    Ok(())
}

/// One class of an image model: `labels.txt` line `<synset>\t<names>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Label {
    pub synset: String,
    /// Comma-separated names; the first one is the label answered.
    pub names: String,
}

impl Label {
    pub fn name(&self) -> &str {
        self.names.split(',').next().unwrap_or_default().trim()
    }
}

pub fn parse_labels(text: &str) -> Result<Vec<Label>, String> {
    text.lines()
        .enumerate()
        .map(|(i, line)| match line.split_once('\t') {
            Some((synset, names)) if !synset.is_empty() && !names.trim().is_empty() => {
                Ok(Label { synset: synset.to_owned(), names: names.trim().to_owned() })
            }
            _ => Err(format!("line {}: expected <synset><TAB><names>, got {line:?}", i + 1)),
        })
        .collect()
}

/// A class and its probability.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Scored {
    pub index: usize,
    pub probability: f32,
}

pub struct ImageModule {
    module: CModule,
    device: Device,
    size: usize,
    pub labels: Vec<Label>,
}

impl ImageModule {
    pub fn load(model: &Path, labels: &Path, size: u32, device: Device) -> Result<Self, EngineError> {
        let raw =
            std::fs::read_to_string(labels).map_err(|e| EngineError::Labels(format!("{}: {e}", labels.display())))?;
        let labels = parse_labels(&raw).map_err(EngineError::Labels)?;
        let mut module = CModule::load_on_device(model, device)
            .map_err(|source| EngineError::Load { path: model.display().to_string(), source })?;
        module.set_eval();
        Ok(Self { module, device, size: size as usize, labels })
    }

    /// Converts the weights to `kind` (bf16, fp16). The input stays uint8
    /// RGB: the module converts it to its weights' type (export_efficientnet.py).
    pub fn convert(&mut self, kind: Kind) -> Result<(), EngineError> {
        convert_parameters(&self.module, kind)
    }

    /// Every class's probability for each image, as f32.
    pub fn probabilities(&self, images: &[&[u8]]) -> Result<Vec<Vec<f32>>, EngineError> {
        if images.is_empty() {
            return Ok(Vec::new());
        }
        let probabilities = self.forward(images)?;
        Ok(Vec::<Vec<f32>>::try_from(&probabilities.to_device(Device::Cpu).to_kind(Kind::Float).contiguous())?)
    }

    /// The `top_k` most probable classes of each image (`size² × 3` RGB
    /// bytes), most probable first.
    pub fn classify(&self, images: &[&[u8]], top_k: usize) -> Result<Vec<Vec<Scored>>, EngineError> {
        if images.is_empty() {
            return Ok(Vec::new());
        }
        let probabilities = self.forward(images)?;
        let k = top_k.min(self.labels.len()) as i64;
        let (values, indices) = probabilities.topk(k, 1, true, true);
        let values = Vec::<Vec<f32>>::try_from(&values.to_device(Device::Cpu).to_kind(Kind::Float).contiguous())?;
        let indices = Vec::<Vec<i64>>::try_from(&indices.to_device(Device::Cpu).contiguous())?;
        Ok(values
            .into_iter()
            .zip(indices)
            .map(|(ps, is)| is.into_iter().zip(ps).map(|(i, p)| Scored { index: i as usize, probability: p }).collect())
            .collect())
    }

    /// `[rows, classes]` probabilities on the device.
    fn forward(&self, images: &[&[u8]]) -> Result<Tensor, EngineError> {
        let rows = images.len();
        let pixels: Vec<u8> = images.concat();
        let shape = [rows as i64, self.size as i64, self.size as i64, 3];
        if pixels.len() != rows * self.size * self.size * 3 {
            return Err(EngineError::BadShape { got: vec![pixels.len() as i64], rows });
        }
        let _no_grad = tch::no_grad_guard();
        let input = Tensor::from_slice(&pixels).view(shape).to_device(self.device);
        let probabilities = self.module.forward_ts(&[input])?;
        let size = probabilities.size();
        if size.len() != 2 || size[0] != rows as i64 || size[1] != self.labels.len() as i64 {
            return Err(EngineError::BadShape { got: size, rows });
        }
        Ok(probabilities)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_parse_and_name_the_first_synonym() {
        let labels = parse_labels("n07920052\tespresso\nn02123045\ttabby, tabby cat\n").unwrap();
        assert_eq!(labels.len(), 2);
        assert_eq!((labels[1].synset.as_str(), labels[1].name()), ("n02123045", "tabby"));
        assert!(parse_labels("n0 no tab here\n").unwrap_err().starts_with("line 1"));
    }

    #[test]
    fn pads_each_row_to_the_longest_and_masks_the_padding() {
        let p = pad_to_longest(&[&[101, 7, 102], &[101, 102]]);
        assert_eq!((p.rows, p.len), (2, 3));
        assert_eq!(p.ids, vec![101, 7, 102, 101, 102, PAD_ID]);
        assert_eq!(p.mask, vec![1, 1, 1, 1, 1, 0]);
    }

    #[test]
    fn an_empty_batch_is_empty() {
        let p = pad_to_longest(&[]);
        assert_eq!((p.rows, p.len, p.ids.len()), (0, 0, 0));
    }
}
