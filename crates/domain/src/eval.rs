//! The arithmetic of evaluations: pass rates with Wilson intervals, the
//! unbiased pass@k estimator, and the paired tests `eval compare` reports.

/// The normal quantile of a two-sided 95% interval.
const Z95: f64 = 1.959_963_984_540_054;

/// The Wilson score interval (95%) of `passed` successes in `runs` trials; `(0, 1)`
/// when there are none.
pub fn wilson(passed: u64, runs: u64) -> (f64, f64) {
    if runs == 0 {
        return (0.0, 1.0);
    }
    let n = runs as f64;
    let p = passed as f64 / n;
    let z2 = Z95 * Z95;
    let denominator = 1.0 + z2 / n;
    let center = (p + z2 / (2.0 * n)) / denominator;
    let half = Z95 * (p * (1.0 - p) / n + z2 / (4.0 * n * n)).sqrt() / denominator;
    ((center - half).max(0.0), (center + half).min(1.0))
}

/// The unbiased estimate of pass@k from `runs` samples of which `passed` passed: the
/// chance that at least one of `k` drawn without replacement passes (Chen et al.'s
/// `1 - C(n-c, k) / C(n, k)`, computed as a product so it never overflows). `None`
/// when `k` is more than the runs.
pub fn pass_at_k(passed: u64, runs: u64, k: u64) -> Option<f64> {
    if k == 0 || k > runs {
        return None;
    }
    let failed = runs - passed;
    if failed < k {
        return Some(1.0);
    }
    // C(f, k) / C(n, k) = prod_{i=0}^{k-1} (f - i) / (n - i)
    let all_fail: f64 = (0..k).map(|i| (failed - i) as f64 / (runs - i) as f64).product();
    Some(1.0 - all_fail)
}

/// The two-sided exact binomial p-value of `plus` against `minus` under an even
/// chance (the sign test, and McNemar's exact test on discordant pairs); 1 with none.
pub fn sign_test(plus: u64, minus: u64) -> f64 {
    let n = plus + minus;
    if n == 0 {
        return 1.0;
    }
    let low = plus.min(minus);
    // P(X <= low) for X ~ Binomial(n, 1/2), in logs to stay finite for large n.
    let ln_half_n = -(n as f64) * std::f64::consts::LN_2;
    let mut ln_choose = 0.0; // ln C(n, 0)
    let mut tail = 0.0;
    for i in 0..=low {
        if i > 0 {
            ln_choose += ((n - i + 1) as f64).ln() - (i as f64).ln();
        }
        tail += (ln_choose + ln_half_n).exp();
    }
    (2.0 * tail).min(1.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-4
    }

    #[test]
    fn wilson_intervals_match_the_textbook() {
        // 6 of 12: 0.5 with (0.2538, 0.7462).
        let (lo, hi) = wilson(6, 12);
        assert!(close(lo, 0.2538) && close(hi, 0.7462), "{lo} {hi}");
        // 0 of 10: (0, 0.2775); 10 of 10: (0.7225, 1).
        let (lo, hi) = wilson(0, 10);
        assert!(close(lo, 0.0) && close(hi, 0.2775), "{lo} {hi}");
        let (lo, hi) = wilson(10, 10);
        assert!(close(lo, 0.7225) && close(hi, 1.0), "{lo} {hi}");
        assert_eq!(wilson(0, 0), (0.0, 1.0));
    }

    #[test]
    fn pass_at_k_is_the_chance_one_of_k_passes() {
        assert!(close(pass_at_k(1, 3, 1).expect("k=1"), 1.0 / 3.0));
        // 1 of 3 passes: two drawn miss it with chance C(2,2)/C(3,2) = 1/3.
        assert!(close(pass_at_k(1, 3, 2).expect("k=2"), 2.0 / 3.0));
        assert_eq!(pass_at_k(1, 3, 3), Some(1.0));
        assert_eq!(pass_at_k(0, 3, 3), Some(0.0));
        assert_eq!(pass_at_k(2, 3, 4), None);
        assert_eq!(pass_at_k(2, 3, 0), None);
    }

    #[test]
    fn the_sign_test_is_an_exact_binomial_tail() {
        assert_eq!(sign_test(0, 0), 1.0);
        // 8 against 0: 2 * 0.5^8 = 0.0078125.
        assert!(close(sign_test(8, 0), 0.0078125));
        assert!(close(sign_test(0, 8), 0.0078125));
        // 6 against 2: 2 * (1 + 8 + 28) / 256 = 0.2890625.
        assert!(close(sign_test(6, 2), 0.2890625));
        assert_eq!(sign_test(5, 5), 1.0);
        assert!(sign_test(3000, 2000) < 1e-10, "large counts stay finite");
    }
}
