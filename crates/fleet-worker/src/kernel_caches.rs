//! How many planned kernels libtorch may keep, set before it starts.
//!
//! libtorch keeps the kernels it plans for each input shape in two caches:
//! oneDNN's (`ONEDNN_PRIMITIVE_CACHE_CAPACITY`, one per process) and, for
//! bf16, ideep's (`LRU_CACHE_CAPACITY`, one per thread that plans: the
//! engine's, and the warm-up's), 1 024 entries each by default. Both read
//! their capacity from the environment at their first use, so the worker
//! sets it before any libtorch work and before any other thread exists.
//!
//! A text batch's shape is its rows × its longest text, so a text worker
//! meets new shapes for as long as it runs and its heap climbs until both
//! caches are full, by hundreds of MiB in bf16. A small bound costs the
//! batches almost nothing (`make bench-shapes`; docs/benchmarks.md, "What
//! libtorch keeps per batch shape"): the layers of one batch share their
//! shapes. An
//! image model's shapes are few (its batch sizes) and its heap does not
//! climb, while each of its batches plans kernels for dozens of layers, so
//! a small bound could make every batch plan again: it keeps libtorch's
//! capacity.

use crate::config::ModelKind;
use std::path::Path;

/// oneDNN's cache of planned primitives.
pub const ONEDNN_CAPACITY_VAR: &str = "ONEDNN_PRIMITIVE_CACHE_CAPACITY";
/// The same setting under oneDNN's older name, which it still reads (after
/// the new one): an operator's value under either stands.
const ONEDNN_CAPACITY_OLD_VAR: &str = "DNNL_PRIMITIVE_CACHE_CAPACITY";
/// ideep's cache (libtorch's layer over oneDNN, used in bf16).
pub const IDEEP_CAPACITY_VAR: &str = "LRU_CACHE_CAPACITY";
/// Entries per cache for a text model under `auto`: the measured bound.
pub const TEXT_MODEL_ENTRIES: usize = 64;

/// `--kernel-cache-capacity`: `auto`, `libtorch`, or a number of entries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KernelCacheCapacity {
    /// [`TEXT_MODEL_ENTRIES`] for a text model, libtorch's for an image model.
    Auto,
    /// Leave both caches at libtorch's defaults.
    Libtorch,
    /// This many entries in each cache.
    Entries(usize),
}

impl std::str::FromStr for KernelCacheCapacity {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "auto" => Ok(Self::Auto),
            "libtorch" => Ok(Self::Libtorch),
            // At least 1: the two libraries read 0 differently (oneDNN:
            // no cache), and turning caching off slows every bf16 batch
            // (docs/benchmarks.md); whoever wants it sets the
            // variables themselves.
            n => match n.parse() {
                Ok(entries) if entries >= 1 => Ok(Self::Entries(entries)),
                _ => Err(format!("expected auto, libtorch or a number of entries (at least 1), got {n:?}")),
            },
        }
    }
}

/// What the worker does to the two variables, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CacheSetting {
    /// Set the variable to this value.
    Set { var: &'static str, entries: usize },
    /// The operator set it in the environment: theirs stands.
    Kept { var: &'static str, value: String },
    /// Nothing asked for a bound: libtorch's default.
    Default { var: &'static str },
}

/// The plan for both caches. `kind` is the model's kind where its
/// config.toml could be read (`None`: `auto` leaves the defaults, since a
/// bound sized for text could slow an image model); `env` reads the
/// environment (an empty value counts as unset, as the libraries read it).
pub fn plan(
    capacity: KernelCacheCapacity,
    kind: Option<ModelKind>,
    env: impl Fn(&str) -> Option<String>,
) -> Vec<CacheSetting> {
    let entries = match (capacity, kind) {
        (KernelCacheCapacity::Entries(n), _) => Some(n),
        (KernelCacheCapacity::Auto, Some(ModelKind::Text)) => Some(TEXT_MODEL_ENTRIES),
        (KernelCacheCapacity::Auto, _) | (KernelCacheCapacity::Libtorch, _) => None,
    };
    // Each cache: the variable the worker sets, then every name the
    // library reads it under, in the library's order.
    let caches: [(&'static str, &[&'static str]); 2] = [
        (ONEDNN_CAPACITY_VAR, &[ONEDNN_CAPACITY_VAR, ONEDNN_CAPACITY_OLD_VAR]),
        (IDEEP_CAPACITY_VAR, &[IDEEP_CAPACITY_VAR]),
    ];
    caches
        .into_iter()
        .map(|(var, names)| {
            let operators = names.iter().find_map(|&name| env(name).filter(|v| !v.is_empty()).map(|v| (name, v)));
            match (operators, entries) {
                (Some((var, value)), _) => CacheSetting::Kept { var, value },
                (None, Some(entries)) => CacheSetting::Set { var, entries },
                (None, None) => CacheSetting::Default { var },
            }
        })
        .collect()
}

/// Reads the model's kind (best effort: a repository not there yet must not
/// stop the worker here; the load reports it properly), plans, sets and
/// logs. Call from `main` before the async runtime starts: setting the
/// environment is only sound while no other thread reads it.
pub fn apply_before_libtorch(capacity: KernelCacheCapacity, model_repo: &Path, model: &str) {
    let kind = match capacity {
        KernelCacheCapacity::Auto => {
            crate::config::ModelConfig::load(&model_repo.join(model).join("config.toml")).map(|config| config.kind).ok()
        }
        _ => None,
    };
    for setting in plan(capacity, kind, |var| std::env::var(var).ok()) {
        match setting {
            CacheSetting::Set { var, entries } => {
                std::env::set_var(var, entries.to_string());
                tracing::info!(var, entries, "libtorch's kernel cache bounded");
            }
            CacheSetting::Kept { var, value } => {
                tracing::info!(var, %value, "kernel cache capacity from the environment")
            }
            CacheSetting::Default { var } => tracing::debug!(var, "kernel cache at libtorch's default"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn no_env(_: &str) -> Option<String> {
        None
    }

    fn set_entries(plan: &[CacheSetting]) -> Vec<(&'static str, usize)> {
        plan.iter()
            .filter_map(|s| match s {
                CacheSetting::Set { var, entries } => Some((*var, *entries)),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn auto_bounds_both_caches_of_a_text_model() {
        let plan = plan(KernelCacheCapacity::Auto, Some(ModelKind::Text), no_env);
        assert_eq!(set_entries(&plan), vec![(ONEDNN_CAPACITY_VAR, 64), (IDEEP_CAPACITY_VAR, 64)]);
    }

    #[test]
    fn auto_leaves_an_image_model_and_an_unread_config_at_the_defaults() {
        for kind in [Some(ModelKind::Image), None] {
            let plan = plan(KernelCacheCapacity::Auto, kind, no_env);
            assert!(plan.iter().all(|s| matches!(s, CacheSetting::Default { .. })), "{kind:?}: {plan:?}");
            assert_eq!(plan.len(), 2);
        }
    }

    #[test]
    fn a_number_applies_to_any_model_and_libtorch_to_none() {
        let plan_image = plan(KernelCacheCapacity::Entries(256), Some(ModelKind::Image), no_env);
        assert_eq!(set_entries(&plan_image), vec![(ONEDNN_CAPACITY_VAR, 256), (IDEEP_CAPACITY_VAR, 256)]);
        let plan_text = plan(KernelCacheCapacity::Libtorch, Some(ModelKind::Text), no_env);
        assert!(set_entries(&plan_text).is_empty());
    }

    #[test]
    fn the_operators_environment_stands() {
        let env = |var: &str| (var == ONEDNN_CAPACITY_VAR).then(|| "0".to_string());
        let plan = plan(KernelCacheCapacity::Entries(64), Some(ModelKind::Text), env);
        assert_eq!(
            plan,
            vec![
                CacheSetting::Kept { var: ONEDNN_CAPACITY_VAR, value: "0".into() },
                CacheSetting::Set { var: IDEEP_CAPACITY_VAR, entries: 64 },
            ]
        );
    }

    #[test]
    fn onednn_s_older_name_stands_too_and_an_empty_value_is_unset() {
        let env = |var: &str| match var {
            "DNNL_PRIMITIVE_CACHE_CAPACITY" => Some("8".to_string()),
            "LRU_CACHE_CAPACITY" => Some(String::new()),
            _ => None,
        };
        let plan = plan(KernelCacheCapacity::Auto, Some(ModelKind::Text), env);
        assert_eq!(
            plan,
            vec![
                CacheSetting::Kept { var: "DNNL_PRIMITIVE_CACHE_CAPACITY", value: "8".into() },
                CacheSetting::Set { var: IDEEP_CAPACITY_VAR, entries: 64 },
            ]
        );
    }

    #[test]
    fn the_setting_parses_its_three_forms_and_names_a_bad_one() {
        assert_eq!("auto".parse(), Ok(KernelCacheCapacity::Auto));
        assert_eq!("libtorch".parse(), Ok(KernelCacheCapacity::Libtorch));
        assert_eq!("1".parse(), Ok(KernelCacheCapacity::Entries(1)));
        for bad in ["lots", "0", "-3"] {
            let err = bad.parse::<KernelCacheCapacity>().unwrap_err();
            assert!(err.contains(bad), "{err}");
        }
    }
}
