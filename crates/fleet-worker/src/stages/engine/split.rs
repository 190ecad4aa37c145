//! Running a batch that may not fit in device memory: split in half and
//! retry, down to single rows. Pure over the model call (a closure), so the
//! rule is tested without libtorch; the engine gives it the real call.
//!
//! Out of memory is not the rows' fault, so rows are never failed for it
//! while a smaller batch could still run; only a row that does not fit on
//! its own is answered with an error. Any other failure retries each row
//! alone once, so one bad row cannot fail its neighbours.

/// One model call: one output per row it is given.
pub type ModelCall<'a, I, O> = dyn FnMut(&[I]) -> Result<Vec<O>, CallError> + 'a;

/// Why one model call failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CallError {
    /// The batch needs more device memory than the worker may use.
    OutOfMemory(String),
    Failed(String),
}

/// Why one row got no output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RowFailure {
    /// Alone, it still does not fit.
    OutOfMemory(String),
    Failed(String),
}

impl RowFailure {
    pub fn message(&self) -> String {
        match self {
            Self::OutOfMemory(m) => format!("does not fit in device memory on its own: {m}"),
            Self::Failed(m) => m.clone(),
        }
    }
}

#[derive(Debug)]
pub struct SplitRun<O> {
    /// One result per input row, in row order.
    pub outputs: Vec<Result<O, RowFailure>>,
    /// How many times a batch was halved.
    pub splits: usize,
    /// Rows handed to the model over every call (retries included).
    pub rows_called: usize,
    /// After a split: the most rows that ran in one call (at least 1). The
    /// caller remembers it as the row cap for batches of this shape.
    pub row_cap: Option<usize>,
}

/// Runs `rows` through `call`, halving on out-of-memory. `call` returns one
/// output per row it is given.
pub fn run_with_split<I, O>(rows: &[I], call: &mut ModelCall<'_, I, O>) -> SplitRun<O> {
    let mut run = Run { outputs: Vec::with_capacity(rows.len()), splits: 0, rows_called: 0, largest_fit: 0 };
    run.go(rows, call);
    let row_cap = (run.splits > 0).then_some(run.largest_fit.max(1));
    SplitRun { outputs: run.outputs, splits: run.splits, rows_called: run.rows_called, row_cap }
}

struct Run<O> {
    outputs: Vec<Result<O, RowFailure>>,
    splits: usize,
    rows_called: usize,
    largest_fit: usize,
}

impl<O> Run<O> {
    fn go<I>(&mut self, rows: &[I], call: &mut ModelCall<'_, I, O>) {
        if rows.is_empty() {
            return;
        }
        match self.call(rows, call) {
            Ok(outputs) => self.outputs.extend(outputs.into_iter().map(Ok)),
            Err(CallError::OutOfMemory(_)) if rows.len() > 1 => {
                self.splits += 1;
                let (left, right) = rows.split_at(rows.len() / 2);
                self.go(left, call);
                self.go(right, call);
            }
            Err(CallError::OutOfMemory(m)) => self.outputs.push(Err(RowFailure::OutOfMemory(m))),
            Err(CallError::Failed(m)) if rows.len() > 1 => {
                tracing::warn!(error = %m, rows = rows.len(), "batch failed; retrying rows one by one");
                for row in rows.chunks(1) {
                    let output = match self.call(row, call) {
                        Ok(mut outputs) => Ok(outputs.remove(0)),
                        Err(CallError::OutOfMemory(m)) => Err(RowFailure::OutOfMemory(m)),
                        Err(CallError::Failed(m)) => Err(RowFailure::Failed(m)),
                    };
                    self.outputs.push(output);
                }
            }
            Err(CallError::Failed(m)) => self.outputs.push(Err(RowFailure::Failed(m))),
        }
    }

    /// One model call; an output count that does not match is a failure, not
    /// a reason to misattribute answers.
    fn call<I>(&mut self, rows: &[I], call: &mut ModelCall<'_, I, O>) -> Result<Vec<O>, CallError> {
        self.rows_called += rows.len();
        let outputs = call(rows)?;
        if outputs.len() != rows.len() {
            return Err(CallError::Failed(format!("model gave {} outputs for {} rows", outputs.len(), rows.len())));
        }
        self.largest_fit = self.largest_fit.max(rows.len());
        Ok(outputs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A model that fits at most `limit` "bytes" per call (a row costs its
    /// value) and fails on rows equal to `poison`.
    fn model(limit: u32, poison: Option<u32>) -> impl FnMut(&[u32]) -> Result<Vec<u32>, CallError> {
        move |rows: &[u32]| {
            if rows.iter().sum::<u32>() > limit {
                return Err(CallError::OutOfMemory(format!("{} > {limit}", rows.iter().sum::<u32>())));
            }
            if poison.is_some_and(|p| rows.contains(&p)) {
                return Err(CallError::Failed("poisoned".into()));
            }
            Ok(rows.iter().map(|r| r * 10).collect())
        }
    }

    #[test]
    fn a_batch_that_fits_runs_once() {
        let run = run_with_split(&[1, 2, 3], &mut model(100, None));
        assert_eq!(run.outputs, vec![Ok(10), Ok(20), Ok(30)]);
        assert_eq!((run.splits, run.rows_called, run.row_cap), (0, 3, None));
    }

    #[test]
    fn a_batch_over_the_limit_is_halved_until_it_fits_and_the_fit_is_remembered() {
        let rows = [5u32; 8];
        let run = run_with_split(&rows, &mut model(10, None));
        assert!(run.outputs.iter().all(|o| *o == Ok(50)));
        assert_eq!(run.row_cap, Some(2));
        // 8 → 4+4 → 2+2+2+2: one split at 8, two at 4.
        assert_eq!(run.splits, 3);
    }

    #[test]
    fn only_a_row_too_big_on_its_own_fails_and_in_its_place() {
        let run = run_with_split(&[1, 50, 2], &mut model(10, None));
        assert_eq!(run.outputs[0], Ok(10));
        assert!(matches!(run.outputs[1], Err(RowFailure::OutOfMemory(_))));
        assert_eq!(run.outputs[2], Ok(20));
        assert_eq!(run.row_cap, Some(1));
    }

    #[test]
    fn another_failure_retries_rows_alone() {
        let run = run_with_split(&[1, 2, 3], &mut model(100, Some(2)));
        assert_eq!(run.outputs[0], Ok(10));
        assert_eq!(run.outputs[1], Err(RowFailure::Failed("poisoned".into())));
        assert_eq!(run.outputs[2], Ok(30));
        assert_eq!((run.splits, run.rows_called, run.row_cap), (0, 6, None));
    }

    #[test]
    fn a_wrong_output_count_fails_the_rows_instead_of_shifting_answers() {
        let mut short = |rows: &[u32]| Ok::<_, CallError>(rows.iter().skip(1).copied().collect::<Vec<_>>());
        let run = run_with_split(&[1, 2], &mut short);
        assert!(run.outputs.iter().all(Result::is_err), "{:?}", run.outputs);
    }

    proptest! {
        #[test]
        fn every_row_gets_exactly_its_own_answer(rows in proptest::collection::vec(1u32..40, 0..40), limit in 1u32..120) {
            let run = run_with_split(&rows, &mut model(limit, None));
            prop_assert_eq!(run.outputs.len(), rows.len());
            for (row, output) in rows.iter().zip(&run.outputs) {
                match output {
                    Ok(v) => prop_assert_eq!(*v, row * 10),
                    // Only a row that does not fit alone fails.
                    Err(RowFailure::OutOfMemory(_)) => prop_assert!(*row > limit),
                    Err(RowFailure::Failed(m)) => prop_assert!(false, "unexpected failure {}", m),
                }
            }
            // No call is wasted beyond the halving: at most 2n - 1 calls of
            // shrinking halves, each row called at most once per level.
            let levels = usize::BITS - rows.len().max(1).leading_zeros();
            prop_assert!(run.rows_called <= rows.len() * levels as usize + rows.len());
            if let Some(cap) = run.row_cap {
                prop_assert!(cap >= 1 && cap < rows.len());
            }
        }
    }
}
