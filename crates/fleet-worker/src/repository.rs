//! The model repository on disk (Triton-style):
//! `models/<model>/config.toml` and `models/<model>/<version>/{model.pt,…}`.
//! The highest numeric version is served unless the config pins one.

use crate::config::{ConfigError, ModelConfig};
use fleet_proto::ModelName;
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum RepositoryError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("listing {path}: {source}")]
    List { path: PathBuf, source: std::io::Error },
    #[error("{path} holds no version directory (a number, e.g. 1/)")]
    NoVersion { path: PathBuf },
    #[error("config pins version {version}, but {path} does not exist")]
    PinnedMissing { version: u64, path: PathBuf },
}

/// One version of a model, ready to be loaded.
#[derive(Debug, Clone)]
pub struct ModelVersion {
    pub name: ModelName,
    pub version: u64,
    pub dir: PathBuf,
    pub config: ModelConfig,
}

impl ModelVersion {
    pub fn file(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }
}

/// Reads the model's config and picks the version to serve.
pub fn resolve(repo: &Path, name: &ModelName) -> Result<ModelVersion, RepositoryError> {
    let model_dir = repo.join(name.as_str());
    let config = ModelConfig::load(&model_dir.join("config.toml"))?;
    let version = match config.version {
        Some(pinned) => {
            let dir = model_dir.join(pinned.to_string());
            if !dir.is_dir() {
                return Err(RepositoryError::PinnedMissing { version: pinned, path: dir });
            }
            pinned
        }
        None => highest_version(&model_dir)?,
    };
    Ok(ModelVersion { name: name.clone(), version, dir: model_dir.join(version.to_string()), config })
}

fn highest_version(model_dir: &Path) -> Result<u64, RepositoryError> {
    let entries =
        std::fs::read_dir(model_dir).map_err(|source| RepositoryError::List { path: model_dir.to_owned(), source })?;
    entries
        .filter_map(Result::ok)
        .filter(|e| e.path().is_dir())
        .filter_map(|e| e.file_name().to_str().and_then(|s| s.parse::<u64>().ok()))
        .max()
        .ok_or_else(|| RepositoryError::NoVersion { path: model_dir.to_owned() })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn repo_with(versions: &[&str], pin: Option<u64>) -> PathBuf {
        let root = std::env::temp_dir().join(format!("fleet-repo-{}-{}", std::process::id(), versions.join("_")));
        let model = root.join("m");
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(&model).unwrap();
        for v in versions {
            std::fs::create_dir_all(model.join(v)).unwrap();
        }
        let pin_line = pin.map(|v| format!("version = {v}\n")).unwrap_or_default();
        std::fs::write(
            model.join("config.toml"),
            format!(
                "kind = \"text\"\n{pin_line}[text]\nmax_seq_len = 8\n[batching]\nmax_batch_size = 2\nmax_batch_tokens = 16\nmax_attention_cells = 128\nmax_wait_ms = 1\n"
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
    fn no_version_is_an_error() {
        let root = repo_with(&[], None);
        assert!(matches!(resolve(&root, &ModelName::parse("m").unwrap()), Err(RepositoryError::NoVersion { .. })));
    }
}
