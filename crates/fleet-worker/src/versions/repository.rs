//! The model repository on disk (Triton-style):
//! `models/<model>/config.toml` and `models/<model>/<version>/{model.pt,…}`.
//! The highest numeric version is served unless the config pins one; which
//! one is decided by `lifecycle` from a [`scan`].

use super::lifecycle::{self, Fingerprint, Refusals, Scan, Wanted};
use crate::config::model::{ConfigError, ModelConfig, ModelVersion};
use fleet_proto::ModelName;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::UNIX_EPOCH;

#[derive(Debug, thiserror::Error)]
pub enum RepositoryError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("listing {path}: {source}")]
    List { path: PathBuf, source: std::io::Error },
    #[error("{path} holds no loadable version (a numbered directory with a model.pt, e.g. 1/model.pt)")]
    NoVersion { path: PathBuf },
    #[error("config pins version {version}, but {path} has no loadable model.pt")]
    PinnedMissing { version: u64, path: PathBuf },
}

/// Reads the model's config and lists its versions with their fingerprints.
pub fn scan(repo: &Path, name: &ModelName) -> Result<(ModelConfig, Scan), RepositoryError> {
    let model_dir = repo.join(name.as_str());
    let config = ModelConfig::load(&model_dir.join("config.toml"))?;
    let entries =
        std::fs::read_dir(&model_dir).map_err(|source| RepositoryError::List { path: model_dir.clone(), source })?;
    let versions: BTreeMap<u64, Option<Fingerprint>> = entries
        .filter_map(Result::ok)
        .filter(|e| e.path().is_dir())
        .filter_map(|e| e.file_name().to_str().and_then(|s| s.parse::<u64>().ok()))
        .map(|v| (v, fingerprint(&model_dir.join(v.to_string()).join("model.pt"))))
        .collect();
    let pin = config.version;
    Ok((config, Scan { versions, pin }))
}

/// `model.pt`'s size and modification time; `None` while it is missing.
pub fn fingerprint(model_pt: &Path) -> Option<Fingerprint> {
    let meta = std::fs::metadata(model_pt).ok()?;
    let modified_ns = meta.modified().ok()?.duration_since(UNIX_EPOCH).ok()?.as_nanos();
    Some(Fingerprint { len: meta.len(), modified_ns })
}

/// `version` of the model, with the config it is served under.
pub fn version(repo: &Path, name: &ModelName, version: u64, config: ModelConfig) -> ModelVersion {
    let dir = repo.join(name.as_str()).join(version.to_string());
    ModelVersion { name: name.clone(), version, dir, config }
}

/// Reads the model's config and picks the version to serve (the first
/// choice at start; the worker's watcher re-decides while it runs).
pub fn resolve(repo: &Path, name: &ModelName) -> Result<ModelVersion, RepositoryError> {
    resolve_with(repo, name, &Refusals::default())
}

/// Like [`resolve`], skipping the versions `refusals` holds.
pub fn resolve_with(repo: &Path, name: &ModelName, refusals: &Refusals) -> Result<ModelVersion, RepositoryError> {
    let (config, scan) = scan(repo, name)?;
    let model_dir = repo.join(name.as_str());
    match lifecycle::wanted(&scan, refusals) {
        Wanted::Version(v) => Ok(version(repo, name, v, config)),
        Wanted::PinUnavailable(pin) => {
            Err(RepositoryError::PinnedMissing { version: pin, path: model_dir.join(pin.to_string()) })
        }
        Wanted::Nothing => Err(RepositoryError::NoVersion { path: model_dir }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn repo_with(versions: &[&str], pin: Option<u64>) -> PathBuf {
        let root =
            std::env::temp_dir().join(format!("fleet-repo-{}-{}-{pin:?}", std::process::id(), versions.join("_")));
        let model = root.join("m");
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(&model).unwrap();
        for v in versions {
            std::fs::create_dir_all(model.join(v)).unwrap();
            std::fs::write(model.join(v).join("model.pt"), v).unwrap();
        }
        let pin_line = pin.map(|v| format!("version = {v}\n")).unwrap_or_default();
        std::fs::write(
            model.join("config.toml"),
            format!(
                "kind = \"text\"\n{pin_line}[text]\nmax_seq_len = 8\n[task]\ntype = \"embedding\"\n[batching]\nmax_batch_size = 2\nmax_batch_tokens = 16\nmax_attention_cells = 128\nmax_wait_ms = 1\n"
            ),
        )
        .unwrap();
        root
    }

    #[test]
    fn serves_the_highest_numeric_version() {
        let root = repo_with(&["1", "10", "2", "notes"], None);
        let v = resolve(&root, &ModelName::parse("m").unwrap()).unwrap();
        assert_eq!(v.version, 10);
        assert!(v.dir.ends_with("m/10"));
    }

    #[test]
    fn a_pin_wins_and_must_exist() {
        let root = repo_with(&["1", "2"], Some(1));
        assert_eq!(resolve(&root, &ModelName::parse("m").unwrap()).unwrap().version, 1);
        let root = repo_with(&["3"], Some(7));
        assert!(matches!(
            resolve(&root, &ModelName::parse("m").unwrap()),
            Err(RepositoryError::PinnedMissing { version: 7, .. })
        ));
    }

    #[test]
    fn a_version_without_model_pt_is_not_served_yet() {
        let root = repo_with(&["1", "2"], None);
        std::fs::remove_file(root.join("m/2/model.pt")).unwrap();
        let (_, scan) = scan(&root, &ModelName::parse("m").unwrap()).unwrap();
        assert!(scan.versions[&1].is_some() && scan.versions[&2].is_none());
        assert_eq!(resolve(&root, &ModelName::parse("m").unwrap()).unwrap().version, 1);
    }

    #[test]
    fn no_version_is_an_error() {
        let root = repo_with(&[], None);
        assert!(matches!(resolve(&root, &ModelName::parse("m").unwrap()), Err(RepositoryError::NoVersion { .. })));
    }
}
