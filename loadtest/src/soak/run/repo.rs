//! The soak's own model repository, where new versions of the text model
//! are published while it runs (a good one, a broken one): apart from the
//! run because it is the one part that writes files.

use super::local::{IMAGE_MODEL, TEXT_MODEL};
use anyhow::{Context, Result};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// The soak's model repository: the text model's config and version 1
/// (linked to the shipped export), to which versions are published while
/// it runs, and the image model as shipped.
pub struct SoakRepo {
    pub root: PathBuf,
    shipped: PathBuf,
    next_version: Mutex<u64>,
}

impl SoakRepo {
    pub(super) fn create(work_dir: &Path, shipped: &Path) -> Result<Self> {
        let shipped = shipped.canonicalize().with_context(|| format!("{} (run make setup)", shipped.display()))?;
        let root = work_dir.join("models");
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(root.join(TEXT_MODEL))?;
        std::fs::copy(shipped.join(TEXT_MODEL).join("config.toml"), root.join(TEXT_MODEL).join("config.toml"))?;
        std::os::unix::fs::symlink(shipped.join(TEXT_MODEL).join("1"), root.join(TEXT_MODEL).join("1"))?;
        std::os::unix::fs::symlink(shipped.join(IMAGE_MODEL), root.join(IMAGE_MODEL))?;
        Ok(Self { root, shipped, next_version: Mutex::new(2) })
    }

    fn take_version(&self) -> u64 {
        let mut next = self.next_version.lock().unwrap_or_else(|p| p.into_inner());
        *next += 1;
        *next - 1
    }

    /// A new version of the text model, the same export: loaded, warmed up
    /// and swapped in by every text worker.
    pub(super) fn publish_good(&self) -> Result<u64> {
        let version = self.take_version();
        let source = self.shipped.join(TEXT_MODEL).join("1");
        std::os::unix::fs::symlink(source, self.root.join(TEXT_MODEL).join(version.to_string()))?;
        Ok(version)
    }

    /// A new version whose model.pt is not a TorchScript archive: every
    /// worker must refuse it and keep serving the version it has.
    pub(super) fn publish_broken(&self) -> Result<u64> {
        let version = self.take_version();
        let dir = self.root.join(TEXT_MODEL).join(version.to_string());
        std::fs::create_dir_all(&dir)?;
        std::fs::copy(self.shipped.join(TEXT_MODEL).join("1/tokenizer.json"), dir.join("tokenizer.json"))?;
        std::fs::write(dir.join("model.pt"), b"not a TorchScript archive")?;
        Ok(version)
    }
}
