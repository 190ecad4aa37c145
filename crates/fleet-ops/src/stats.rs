//! Order statistics the fleet's tools and the worker's tuners share, so a
//! benchmark's figure and a tuner's decision use one rule.

/// The median: the middle value, the mean of the middle two of an even
/// count; 0 for none. Sorting by `total_cmp` keeps a NaN from panicking
/// (it sorts last, past every real value).
pub fn median(values: &[f64]) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let n = sorted.len();
    if n == 0 {
        return 0.0;
    }
    (sorted[(n - 1) / 2] + sorted[n / 2]) / 2.0
}

#[cfg(test)]
mod tests {
    use super::median;

    #[test]
    fn an_odd_count_takes_the_middle_and_an_even_one_the_mean_of_the_middle_two() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), 2.5);
        assert_eq!(median(&[7.0]), 7.0);
    }

    #[test]
    fn nothing_has_a_median_of_zero() {
        assert_eq!(median(&[]), 0.0);
    }

    #[test]
    fn a_few_outliers_do_not_move_it() {
        assert_eq!(median(&[1.0, 1.0, 1.0, 1.0, 100.0, 100.0, 1.0]), 1.0);
    }
}
