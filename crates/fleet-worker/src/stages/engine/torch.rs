//! The TorchScript modules of each model kind, through libtorch (tch), on CPU or CUDA.
//!
//! Everything here blocks, so it runs on a dedicated thread, never on the
//! async runtime. A text batch is padded to its longest row (not to a fixed
//! length) with the tokenizer's pad id and passed as the arguments `[text]
//! inputs` lists (ids, attention mask, token type ids). An image batch is
//! uint8 RGB `[rows, size, size, 3]`, or normalised floats `[rows, 3, size,
//! size]`, as `[image] layout` says. The module's output becomes one vector
//! per row through the task's [`Head`] (pooling, activation).

use super::error::EngineError;
use super::head::Head;
use crate::config::{DeviceChoice, ImageLayout, ModelConfig, ModelVersion, TextInput};
use crate::core::input::TextRow;
use std::path::Path;
use tch::{CModule, Device, Kind, Tensor};

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

/// Pads every row to the longest one with `pad_id`. Pure, so the padding
/// rule is testable without libtorch.
pub fn pad_to_longest(rows: &[&[i64]], pad_id: i64) -> Padded {
    let len = rows.iter().map(|r| r.len()).max().unwrap_or(0);
    let mut ids = Vec::with_capacity(rows.len() * len);
    let mut mask = Vec::with_capacity(rows.len() * len);
    for row in rows {
        ids.extend_from_slice(row);
        ids.extend(std::iter::repeat_n(pad_id, len - row.len()));
        mask.extend(std::iter::repeat_n(1, row.len()));
        mask.extend(std::iter::repeat_n(0, len - row.len()));
    }
    Padded { ids, mask, rows: rows.len(), len }
}

/// What a text module takes and how its output is read (from the config).
#[derive(Debug, Clone)]
pub struct TextSignature {
    pub inputs: Vec<TextInput>,
    pub pad_id: i64,
    pub head: Head,
}

impl TextSignature {
    /// `None` for an image model.
    pub fn of(config: &ModelConfig) -> Option<Self> {
        let text = config.text()?;
        Some(Self { inputs: text.inputs.clone(), pad_id: text.pad_id, head: Head::for_task(&config.task) })
    }
}

pub struct TextModule {
    module: CModule,
    device: Device,
    signature: TextSignature,
}

impl TextModule {
    /// The version's `model.pt`, read as its config declares.
    pub fn for_version(version: &ModelVersion, device: Device) -> Result<Self, EngineError> {
        let signature = TextSignature::of(&version.config)
            .ok_or_else(|| EngineError::Incompatible(format!("{} is not a text model", version.name)))?;
        Self::load(&version.file("model.pt"), device, signature)
    }

    pub fn load(path: &Path, device: Device, signature: TextSignature) -> Result<Self, EngineError> {
        Ok(Self { module: load_module(path, device)?, device, signature })
    }

    pub fn device(&self) -> Device {
        self.device
    }

    /// Converts the weights to `kind` (bf16, fp16). Inputs stay integer
    /// ids; outputs are read back as f32.
    pub fn convert(&mut self, kind: Kind) -> Result<(), EngineError> {
        convert_parameters(&self.module, kind)
    }

    /// Every parameter's name and shape: what `fleet-bench flops` counts the
    /// model's FLOPs from, so the count follows the module, not a guess.
    pub fn parameter_shapes(&self) -> Result<Vec<(String, Vec<i64>)>, EngineError> {
        Ok(self.module.named_parameters()?.into_iter().map(|(name, tensor)| (name, tensor.size())).collect())
    }

    /// One vector per row of single-segment ids, in row order.
    pub fn vectors(&self, rows: &[&[i64]]) -> Result<Vec<Vec<f32>>, EngineError> {
        self.vectors_of(&rows.iter().map(|ids| TextRow { ids, type_ids: None }).collect::<Vec<_>>())
    }

    /// One vector per row, in row order: the pooled embedding or the class
    /// scores, as the task says. Rows without segment ids are one segment.
    pub fn vectors_of(&self, rows: &[TextRow<'_>]) -> Result<Vec<Vec<f32>>, EngineError> {
        if rows.is_empty() {
            return Ok(Vec::new());
        }
        let ids: Vec<&[i64]> = rows.iter().map(|r| r.ids).collect();
        let padded = pad_to_longest(&ids, self.signature.pad_id);
        let shape = [padded.rows as i64, padded.len as i64];
        let _no_grad = tch::no_grad_guard();
        let ids = Tensor::from_slice(&padded.ids).view(shape).to_device(self.device);
        let mask = Tensor::from_slice(&padded.mask).view(shape).to_device(self.device);
        let arguments: Vec<Tensor> = self
            .signature
            .inputs
            .iter()
            .map(|input| match input {
                TextInput::InputIds => ids.shallow_clone(),
                TextInput::AttentionMask => mask.shallow_clone(),
                TextInput::TokenTypeIds => {
                    Tensor::from_slice(&padded_segments(rows, padded.len)).view(shape).to_device(self.device)
                }
            })
            .collect();
        let out = self.module.forward_ts(&arguments)?;
        host_rows(&self.signature.head.apply(&out, padded.rows, Some(&mask))?)
    }
}

/// A TorchScript file on `device`, in eval mode.
fn load_module(path: &Path, device: Device) -> Result<CModule, EngineError> {
    let mut module = CModule::load_on_device(path, device)
        .map_err(|source| EngineError::Load { path: path.display().to_string(), source })?;
    module.set_eval();
    Ok(module)
}

/// `[rows, dim]` on any device as one host vector per row.
fn host_rows(vectors: &Tensor) -> Result<Vec<Vec<f32>>, EngineError> {
    Ok(Vec::<Vec<f32>>::try_from(&vectors.to_device(Device::Cpu).contiguous())?)
}

/// Each row's segment ids (zeros where it has none), padded with 0 to `len`.
fn padded_segments(rows: &[TextRow<'_>], len: usize) -> Vec<i64> {
    let mut out = Vec::with_capacity(rows.len() * len);
    for row in rows {
        let segments = row.type_ids.unwrap_or(&[]);
        out.extend_from_slice(segments);
        out.extend(std::iter::repeat_n(0, len.saturating_sub(segments.len())));
    }
    out
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

/// What an image module takes and how its output is read (from the config).
#[derive(Debug, Clone)]
pub struct ImageSignature {
    /// Input images are `size × size` RGB.
    pub size: usize,
    pub layout: ImageLayout,
    /// Per channel, 0..1 units (`nchw_float`).
    pub mean: [f32; 3],
    pub std: [f32; 3],
    pub head: Head,
}

impl ImageSignature {
    /// `None` for a text model.
    pub fn of(config: &ModelConfig) -> Option<Self> {
        let image = config.image()?;
        Some(Self {
            size: image.size as usize,
            layout: image.layout,
            mean: image.mean.unwrap_or([0.0; 3]),
            std: image.std.unwrap_or([1.0; 3]),
            head: Head::for_task(&config.task),
        })
    }
}

pub struct ImageModule {
    module: CModule,
    device: Device,
    signature: ImageSignature,
    /// `nchw_float`: the mean and std per channel, on the device once
    /// rather than copied there with every batch.
    normalisation: Option<(Tensor, Tensor)>,
    /// What float inputs are made of: the weights' type (bf16 after `convert`).
    input_kind: Kind,
}

impl ImageModule {
    /// The version's `model.pt`, read as its config declares.
    pub fn for_version(version: &ModelVersion, device: Device) -> Result<Self, EngineError> {
        let signature = ImageSignature::of(&version.config)
            .ok_or_else(|| EngineError::Incompatible(format!("{} is not an image model", version.name)))?;
        Self::load(&version.file("model.pt"), device, signature)
    }

    pub fn load(model: &Path, device: Device, signature: ImageSignature) -> Result<Self, EngineError> {
        let normalisation = (signature.layout == ImageLayout::NchwFloat).then(|| {
            (
                Tensor::from_slice(&signature.mean).to_device(device),
                Tensor::from_slice(&signature.std).to_device(device),
            )
        });
        Ok(Self { module: load_module(model, device)?, device, signature, normalisation, input_kind: Kind::Float })
    }

    /// Converts the weights to `kind` (bf16, fp16). A uint8 input stays
    /// uint8 (the module converts it to its weights' type,
    /// export_model.py); a float input is made in `kind`.
    pub fn convert(&mut self, kind: Kind) -> Result<(), EngineError> {
        convert_parameters(&self.module, kind)?;
        self.input_kind = kind;
        Ok(())
    }

    /// One vector per image (`size² × 3` RGB bytes), in order: class scores
    /// or an embedding, as the task says.
    pub fn vectors(&self, images: &[&[u8]]) -> Result<Vec<Vec<f32>>, EngineError> {
        if images.is_empty() {
            return Ok(Vec::new());
        }
        let rows = images.len();
        let size = self.signature.size;
        let pixels: Vec<u8> = images.concat();
        if pixels.len() != rows * size * size * 3 {
            return Err(EngineError::BadShape { got: vec![pixels.len() as i64], rows });
        }
        let _no_grad = tch::no_grad_guard();
        let nhwc = Tensor::from_slice(&pixels).view([rows as i64, size as i64, size as i64, 3]).to_device(self.device);
        let input = match &self.normalisation {
            None => nhwc,
            Some((mean, std)) => {
                let unit = nhwc.to_kind(Kind::Float) / 255.0;
                ((unit - mean) / std).permute([0, 3, 1, 2]).to_kind(self.input_kind).contiguous()
            }
        };
        let out = self.module.forward_ts(&[input])?;
        host_rows(&self.signature.head.apply(&out, rows, None)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pads_each_row_to_the_longest_and_masks_the_padding() {
        let p = pad_to_longest(&[&[101, 7, 102], &[101, 102]], 1);
        assert_eq!((p.rows, p.len), (2, 3));
        assert_eq!(p.ids, vec![101, 7, 102, 101, 102, 1]);
        assert_eq!(p.mask, vec![1, 1, 1, 1, 1, 0]);
    }

    #[test]
    fn segments_pad_with_zero_and_single_segment_rows_are_zero() {
        let rows = [TextRow { ids: &[1, 2, 3], type_ids: Some(&[0, 1, 1]) }, TextRow { ids: &[1, 2], type_ids: None }];
        assert_eq!(padded_segments(&rows, 4), vec![0, 1, 1, 0, 0, 0, 0, 0]);
    }

    #[test]
    fn an_empty_batch_is_empty() {
        let p = pad_to_longest(&[], 0);
        assert_eq!((p.rows, p.len, p.ids.len()), (0, 0, 0));
    }
}
