//! Which model version to serve, decided from what the repository holds:
//! pure, so every rule is tested without files or libtorch.
//!
//! The config's pin wins (rollback = pin the previous version); otherwise the
//! highest version that has not been refused. A version is refused when it
//! failed to load or warm up; it stays refused until its files change (its
//! fingerprint), so a half-copied `model.pt` is tried again once the copy
//! finishes, but a broken one is not reloaded every poll.

use std::collections::BTreeMap;

/// What identifies the files of a version directory: `model.pt`'s size and
/// modification time. A rewrite changes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Fingerprint {
    pub len: u64,
    pub modified_ns: u128,
}

/// One scan of the repository.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scan {
    /// Version → its fingerprint (`None`: no readable `model.pt` yet).
    pub versions: BTreeMap<u64, Option<Fingerprint>>,
    /// The config's `version = …`.
    pub pin: Option<u64>,
}

/// Versions that failed to load, with the files they failed with.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Refusals {
    refused: BTreeMap<u64, Option<Fingerprint>>,
}

impl Refusals {
    pub fn refuse(&mut self, version: u64, fingerprint: Option<Fingerprint>) {
        self.refused.insert(version, fingerprint);
    }

    /// Refused, and its files are the ones that failed.
    pub fn is_refused(&self, version: u64, fingerprint: Option<Fingerprint>) -> bool {
        self.refused.get(&version).is_some_and(|failed| *failed == fingerprint)
    }
}

/// What the watcher does after a scan.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Serving the wanted version already, or nothing better to load.
    Keep,
    /// Load and warm this version beside the serving one, then swap.
    Load(u64),
    /// The pin names a version that is missing or refused: keep serving and
    /// say so (the operator's pin cannot be honoured yet).
    PinUnavailable(u64),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wanted {
    Version(u64),
    /// The pin names a version that is missing, incomplete or refused.
    PinUnavailable(u64),
    /// No version has a loadable `model.pt`.
    Nothing,
}

/// The version the repository asks for: the pin, or the highest version
/// with a `model.pt` that is not refused.
pub fn wanted(scan: &Scan, refusals: &Refusals) -> Wanted {
    if let Some(pin) = scan.pin {
        return match scan.versions.get(&pin) {
            Some(fp @ Some(_)) if !refusals.is_refused(pin, *fp) => Wanted::Version(pin),
            _ => Wanted::PinUnavailable(pin),
        };
    }
    scan.versions
        .iter()
        .rev()
        .find(|(v, fp)| fp.is_some() && !refusals.is_refused(**v, **fp))
        .map_or(Wanted::Nothing, |(v, _)| Wanted::Version(*v))
}

/// What to do given the serving version (None before the first load).
pub fn decide(scan: &Scan, refusals: &Refusals, serving: Option<u64>) -> Decision {
    match wanted(scan, refusals) {
        Wanted::Version(v) if Some(v) == serving => Decision::Keep,
        Wanted::Version(v) => Decision::Load(v),
        Wanted::Nothing => Decision::Keep,
        Wanted::PinUnavailable(pin) => Decision::PinUnavailable(pin),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fp(n: u64) -> Option<Fingerprint> {
        Some(Fingerprint { len: n, modified_ns: 1 })
    }

    fn scan(versions: &[(u64, Option<Fingerprint>)], pin: Option<u64>) -> Scan {
        Scan { versions: versions.iter().copied().collect(), pin }
    }

    #[test]
    fn the_highest_complete_version_is_wanted() {
        let s = scan(&[(1, fp(1)), (2, fp(2)), (3, None)], None);
        assert_eq!(decide(&s, &Refusals::default(), None), Decision::Load(2));
        assert_eq!(decide(&s, &Refusals::default(), Some(2)), Decision::Keep);
        assert_eq!(decide(&s, &Refusals::default(), Some(1)), Decision::Load(2));
    }

    #[test]
    fn a_refused_version_is_skipped_until_its_files_change() {
        let mut refusals = Refusals::default();
        refusals.refuse(3, fp(30));
        let s = scan(&[(2, fp(2)), (3, fp(30))], None);
        assert_eq!(decide(&s, &refusals, Some(2)), Decision::Keep, "the old one keeps serving");
        assert_eq!(decide(&s, &refusals, None), Decision::Load(2), "at start, the next best");
        let rewritten = scan(&[(2, fp(2)), (3, fp(31))], None);
        assert_eq!(decide(&rewritten, &refusals, Some(2)), Decision::Load(3));
    }

    #[test]
    fn a_pin_rolls_back_and_a_bad_pin_keeps_what_serves() {
        let mut refusals = Refusals::default();
        let s = scan(&[(1, fp(1)), (2, fp(2))], Some(1));
        assert_eq!(decide(&s, &refusals, Some(2)), Decision::Load(1));
        assert_eq!(decide(&s, &refusals, Some(1)), Decision::Keep);
        let missing = scan(&[(1, fp(1)), (2, fp(2))], Some(7));
        assert_eq!(decide(&missing, &refusals, Some(2)), Decision::PinUnavailable(7));
        refusals.refuse(1, fp(1));
        assert_eq!(decide(&s, &refusals, Some(2)), Decision::PinUnavailable(1));
    }

    #[test]
    fn nothing_loadable_keeps_whatever_serves() {
        let s = scan(&[(1, None)], None);
        assert_eq!(decide(&s, &Refusals::default(), Some(1)), Decision::Keep);
        assert_eq!(wanted(&s, &Refusals::default()), Wanted::Nothing);
    }
}
