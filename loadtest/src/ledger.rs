//! The run's books: every request sent ends as exactly one outcome, and
//! whatever is not accounted for is lost.

use std::collections::BTreeMap;

/// How one request ended, as the load generator saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Ok,
    /// An `error` answer, with its stable code.
    Error(String),
    Expired,
    /// No answer by the end of the wait.
    Missing,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Ledger {
    /// Requests the broker acknowledged.
    pub sent: u64,
    /// Requests the producer could not hand to the broker (not sent).
    pub send_failed: u64,
    pub ok: u64,
    pub error: u64,
    pub expired: u64,
    /// Messages that reached the model's dead-letter topic during the run.
    /// They carry no readable id, so each stands for one missing request.
    pub dlq: u64,
    pub missing: u64,
    pub errors_by_code: BTreeMap<String, u64>,
}

impl Ledger {
    pub fn record(&mut self, outcome: &Outcome) {
        match outcome {
            Outcome::Ok => self.ok += 1,
            Outcome::Error(code) => {
                self.error += 1;
                *self.errors_by_code.entry(code.clone()).or_default() += 1;
            }
            Outcome::Expired => self.expired += 1,
            Outcome::Missing => self.missing += 1,
        }
    }

    /// Adds another run's books to these (runs repeated to average out noise).
    pub fn add(&mut self, other: &Ledger) {
        self.sent += other.sent;
        self.send_failed += other.send_failed;
        self.ok += other.ok;
        self.error += other.error;
        self.expired += other.expired;
        self.dlq += other.dlq;
        self.missing += other.missing;
        for (code, n) in &other.errors_by_code {
            *self.errors_by_code.entry(code.clone()).or_default() += n;
        }
    }

    /// Dead letters counted against the requests that have no answer.
    pub fn dead_lettered(&self) -> u64 {
        self.dlq.min(self.missing)
    }

    /// Sent requests that ended nowhere: no answer and no dead letter.
    pub fn lost(&self) -> u64 {
        self.sent.saturating_sub(self.ok + self.error + self.expired + self.dead_lettered())
    }

    /// The ledger's last line, the one docs and CI read.
    pub fn result_line(&self) -> String {
        format!(
            "RESULT loadtest lost={} sent={} ok={} error={} expired={} dlq={}",
            self.lost(),
            self.sent,
            self.ok,
            self.error,
            self.expired,
            self.dead_lettered()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ledger(outcomes: &[Outcome], dlq: u64) -> Ledger {
        let mut ledger = Ledger { sent: outcomes.len() as u64, dlq, ..Ledger::default() };
        outcomes.iter().for_each(|o| ledger.record(o));
        ledger
    }

    #[test]
    fn every_answer_is_accounted_and_a_missing_one_is_lost() {
        let l = ledger(&[Outcome::Ok, Outcome::Expired, Outcome::Error("text_too_long".into()), Outcome::Missing], 0);
        assert_eq!((l.ok, l.expired, l.error, l.missing, l.lost()), (1, 1, 1, 1, 1));
        assert_eq!(l.errors_by_code["text_too_long"], 1);
        assert_eq!(l.result_line(), "RESULT loadtest lost=1 sent=4 ok=1 error=1 expired=1 dlq=0");
    }

    #[test]
    fn added_books_sum_every_count() {
        let mut total = ledger(&[Outcome::Ok, Outcome::Error("bad_utf8".into())], 0);
        total.add(&ledger(&[Outcome::Expired, Outcome::Error("bad_utf8".into()), Outcome::Missing], 1));
        assert_eq!((total.sent, total.ok, total.error, total.expired, total.missing, total.dlq), (5, 1, 2, 1, 1, 1));
        assert_eq!((total.errors_by_code["bad_utf8"], total.lost()), (2, 0));
    }

    #[test]
    fn a_dead_letter_accounts_for_a_missing_answer_but_never_for_more() {
        assert_eq!(ledger(&[Outcome::Ok, Outcome::Missing], 1).lost(), 0);
        let l = ledger(&[Outcome::Ok, Outcome::Missing], 5);
        assert_eq!((l.dead_lettered(), l.lost()), (1, 0));
        assert_eq!(ledger(&[Outcome::Ok, Outcome::Ok], 3).dead_lettered(), 0);
    }
}
