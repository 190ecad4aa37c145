//! The version the engine serves now, set by the engine when it swaps in a
//! handover's module: the repository watcher waits for it before loading
//! another version. (The stages tag their answers with the version of the
//! last handover that passed them: `stages::handover`.)

use crate::core::precision::Precision;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// The version being served and the precision it computes in. One atomic
/// holds both, so a reader never sees one version with another's precision.
#[derive(Debug, Clone, Default)]
pub struct ServingVersion(Arc<AtomicU64>);

/// The precision's code sits above the version's bits.
const PRECISION_SHIFT: u32 = 56;
const VERSION_MASK: u64 = (1 << PRECISION_SHIFT) - 1;

impl ServingVersion {
    pub fn new(version: u64) -> Self {
        Self(Arc::new(AtomicU64::new(version & VERSION_MASK)))
    }

    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Acquire) & VERSION_MASK
    }

    /// The version and its precision, read together.
    pub fn get_with_precision(&self) -> (u64, Precision) {
        let packed = self.0.load(Ordering::Acquire);
        (packed & VERSION_MASK, Precision::from_code(packed >> PRECISION_SHIFT))
    }

    pub fn set(&self, version: u64, precision: Precision) {
        self.0.store((precision.code() << PRECISION_SHIFT) | (version & VERSION_MASK), Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_and_precision_are_read_together() {
        let serving = ServingVersion::new(3);
        assert_eq!(serving.get_with_precision(), (3, Precision::Fp32));
        serving.set(4, Precision::Bf16);
        assert_eq!((serving.get(), serving.get_with_precision()), (4, (4, Precision::Bf16)));
    }
}
