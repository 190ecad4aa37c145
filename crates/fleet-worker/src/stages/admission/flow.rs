//! Flow control: how much a worker may hold between reading a message and
//! answering it. Pure hysteresis: at the high mark the worker stops reading
//! (librdkafka's capped prefetch fills, then the broker keeps the backlog,
//! not our memory); it reads again only once both counts are back under the
//! low-water mark, so it does not flap. It does not pause the partitions:
//! see the admission stage ([`super`]).

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlowLimits {
    /// Messages read and not yet answered.
    pub max_messages: usize,
    /// Their bytes (key + value + headers).
    pub max_bytes: usize,
    /// Resume below this share of both limits, in percent.
    pub low_water_percent: usize,
}

impl FlowLimits {
    /// `percent` of both limits (at least 1 each): the bulk lane's share of
    /// what the worker may hold.
    pub fn share(self, percent: usize) -> Self {
        Self {
            max_messages: (self.max_messages * percent / 100).max(1),
            max_bytes: (self.max_bytes * percent / 100).max(1),
            ..self
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transition {
    Pause,
    Resume,
}

#[derive(Debug)]
pub struct FlowGate {
    limits: FlowLimits,
    paused: bool,
}

impl FlowGate {
    pub fn new(limits: FlowLimits) -> Self {
        Self { limits, paused: false }
    }

    /// The message limit now (the adaptive in-flight limit moves it).
    pub fn set_max_messages(&mut self, max_messages: usize) {
        self.limits.max_messages = max_messages.max(1);
    }

    pub fn is_paused(&self) -> bool {
        self.paused
    }

    /// Whether one more message may be read now.
    pub fn may_read(&self, messages: usize, bytes: usize) -> bool {
        messages < self.limits.max_messages && bytes < self.limits.max_bytes
    }

    /// Feeds the current holdings; says when to pause or resume.
    pub fn update(&mut self, messages: usize, bytes: usize) -> Option<Transition> {
        let low = |limit: usize| limit * self.limits.low_water_percent / 100;
        if !self.paused && !self.may_read(messages, bytes) {
            self.paused = true;
            return Some(Transition::Pause);
        }
        if self.paused && messages <= low(self.limits.max_messages) && bytes <= low(self.limits.max_bytes) {
            self.paused = false;
            return Some(Transition::Resume);
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn gate() -> FlowGate {
        FlowGate::new(FlowLimits { max_messages: 100, max_bytes: 1000, low_water_percent: 50 })
    }

    #[test]
    fn a_share_scales_both_limits_and_keeps_at_least_one() {
        let limits = FlowLimits { max_messages: 100, max_bytes: 1000, low_water_percent: 50 };
        assert_eq!(limits.share(75), FlowLimits { max_messages: 75, max_bytes: 750, low_water_percent: 50 });
        assert_eq!(limits.share(0).max_messages, 1);
    }

    #[test]
    fn pauses_at_either_limit_and_resumes_below_both_low_marks() {
        let mut g = gate();
        assert_eq!(g.update(99, 10), None);
        assert_eq!(g.update(100, 10), Some(Transition::Pause));
        assert_eq!(g.update(60, 10), None, "above the low-water mark");
        assert_eq!(g.update(50, 10), Some(Transition::Resume));
        assert_eq!(g.update(1, 1000), Some(Transition::Pause), "bytes alone pause too");
        assert_eq!(g.update(1, 501), None);
        assert_eq!(g.update(1, 500), Some(Transition::Resume));
    }

    proptest! {
        /// A reader that reads only when allowed never holds more than the limit.
        #[test]
        fn holdings_never_pass_the_message_limit(steps in proptest::collection::vec(0usize..30, 1..300)) {
            let mut g = gate();
            let mut held = 0usize;
            for done in steps {
                held -= done.min(held);
                g.update(held, 0);
                if !g.is_paused() && g.may_read(held, 0) {
                    held += 1;
                }
                prop_assert!(held <= 100);
            }
        }
    }
}
