//! Each planned fault at its time, whoever makes it (the soak on a fleet
//! started here, or the operator's command on one elsewhere): when it
//! began and ended, and what was done or why it could not be.

use super::Injected;
use crate::soak::schedule::{Fault, Planned};
use anyhow::Result;
use std::time::Duration;
use tokio::time::Instant;

/// Makes one fault.
pub(super) trait Injector {
    /// What was done, or why it could not be.
    async fn one(&mut self, planned: &Planned) -> Result<String>;
}

/// Each planned fault at its time; what each did.
pub(super) async fn inject(plan: &[Planned], start: Instant, injector: &mut impl Injector) -> Vec<Injected> {
    let mut injected = Vec::with_capacity(plan.len());
    for planned in plan {
        tokio::time::sleep_until(start + Duration::from_secs_f64(planned.at_s)).await;
        let at_s = start.elapsed().as_secs_f64();
        tracing::info!(fault = planned.fault.name(), at_s, "fault");
        let (note, failed) = match injector.one(planned).await {
            Ok(note) => (note, false),
            Err(e) => (format!("not injected: {e:#}"), true),
        };
        if failed {
            tracing::error!(fault = planned.fault.name(), note, "a fault could not be injected");
        }
        // A burst is in the arrivals: it happens when they planned it.
        let (at_s, ended_s) = match planned.fault {
            Fault::Burst => (planned.at_s, planned.ends_s()),
            _ => (at_s, start.elapsed().as_secs_f64()),
        };
        injected.push(Injected { planned: *planned, at_s, ended_s, note, failed });
    }
    injected
}

/// What a burst's note says: it is in the arrivals from the start, so
/// nobody makes it at its time.
pub(super) fn burst_note(burst_factor: f64, planned: &Planned) -> String {
    format!("{burst_factor}x the offered rates for {:.0} s", planned.lasts_s)
}
