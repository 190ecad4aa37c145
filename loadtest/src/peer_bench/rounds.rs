//! The comparison's rounds: which side runs when, each round's texts and
//! request ids, what a side measured, and the medians over the rounds
//! with the `RESULT` line. Pure, so the order and the figures are tested
//! without a fleet.

use super::Precision;
use fleet_ops::stats::median;

/// One side of the comparison.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Contender {
    Fleet,
    Peer(Precision),
}

impl Contender {
    pub fn label(self) -> &'static str {
        match self {
            Contender::Fleet => "fleet",
            Contender::Peer(Precision::Fp32) => "peer-fp32",
            Contender::Peer(Precision::Bf16) => "peer-bf16",
        }
    }
}

/// Round `round`'s order (rounds count from 1): the fleet, then the peers
/// in odd rounds, the reverse in even ones, so no side always goes first.
pub fn round_order(round: usize, peers: &[Precision]) -> Vec<Contender> {
    let mut order: Vec<Contender> =
        std::iter::once(Contender::Fleet).chain(peers.iter().map(|&p| Contender::Peer(p))).collect();
    if round % 2 == 0 {
        order.reverse();
    }
    order
}

/// The texts of round `round`, each made unique to the round and its place:
/// the fleet's feature cache (fleet:feat:*) must answer none of them, within
/// a round or from an earlier one, whatever the workload repeats.
pub fn round_texts(texts: &[String], round: usize) -> Vec<String> {
    texts.iter().enumerate().map(|(i, text)| format!("{text} #{round}-{i}")).collect()
}

/// One side's run.
#[derive(Debug, Clone)]
pub struct Side {
    pub answered: usize,
    pub seconds: f64,
    /// The first few texts' embeddings (in text order), for checking that
    /// both sides computed the same.
    pub sample: Vec<Option<Vec<f32>>>,
}

impl Side {
    pub fn per_second(&self) -> f64 {
        self.answered as f64 / self.seconds.max(1e-9)
    }
}

/// Every side's run in one round, in the order they ran.
#[derive(Debug, Clone)]
pub struct Round {
    pub number: usize,
    pub sides: Vec<(Contender, Side)>,
}

impl Round {
    pub fn side(&self, contender: Contender) -> Option<&Side> {
        self.sides.iter().find(|(c, _)| *c == contender).map(|(_, side)| side)
    }

    /// Each peer's smallest cosine against the fleet on this round's sample
    /// (the same texts: the round's own).
    pub fn cosines(&self) -> Vec<(Precision, f64)> {
        let Some(fleet) = self.side(Contender::Fleet) else {
            return Vec::new();
        };
        Precision::ALL
            .into_iter()
            .filter_map(|p| Some((p, min_cosine(&fleet.sample, &self.side(Contender::Peer(p))?.sample))))
            .collect()
    }
}

/// `round 2 peer-bf16: 3000 texts in 95.1 s (31.5/s)`.
pub fn side_line(round: usize, contender: Contender, side: &Side) -> String {
    format!(
        "round {round} {}: {} texts in {:.1} s ({:.1}/s)",
        contender.label(),
        side.answered,
        side.seconds,
        side.per_second()
    )
}

/// Request ids unique to the side and the round (`peer-bf16-r2-…`).
pub(super) fn id_prefix(contender: Contender, round: usize) -> String {
    format!("{}-r{round}", contender.label())
}

/// The smallest cosine between the two sides' answers to the same texts
/// (texts one side has no embedding of are left out).
pub fn min_cosine(a: &[Option<Vec<f32>>], b: &[Option<Vec<f32>>]) -> f64 {
    a.iter()
        .zip(b)
        .filter_map(|(x, y)| Some((x.as_ref()?, y.as_ref()?)))
        .map(|(x, y)| {
            let dot: f64 = x.iter().zip(y).map(|(p, q)| f64::from(*p) * f64::from(*q)).sum();
            let norm = |v: &[f32]| v.iter().map(|p| f64::from(*p).powi(2)).sum::<f64>().sqrt();
            dot / (norm(x) * norm(y)).max(1e-12)
        })
        .fold(f64::INFINITY, f64::min)
}

/// Each side's median rate over the rounds (the mean of the middle two of
/// an even count: one slow or fast run moves it little), texts per second.
#[derive(Debug, Clone, PartialEq)]
pub struct Medians {
    pub fleet: f64,
    /// The precisions that ran, fp32 first.
    pub peers: Vec<(Precision, f64)>,
}

impl Medians {
    pub fn of(rounds: &[Round]) -> Medians {
        let rates = |wanted: Contender| -> Vec<f64> {
            rounds
                .iter()
                .flat_map(|round| &round.sides)
                .filter(|(contender, _)| *contender == wanted)
                .map(|(_, side)| side.per_second())
                .collect()
        };
        let peers = Precision::ALL
            .into_iter()
            .map(|p| (p, rates(Contender::Peer(p))))
            .filter(|(_, rates)| !rates.is_empty())
            .map(|(p, rates)| (p, median(&rates)))
            .collect();
        Medians { fleet: median(&rates(Contender::Fleet)), peers }
    }

    /// The fastest peer (the first of equals): the one the fleet must beat.
    pub fn best_peer(&self) -> Option<(Precision, f64)> {
        self.peers.iter().copied().reduce(|best, p| if p.1 > best.1 { p } else { best })
    }
}

/// `RESULT peer cpu="…" fleet_per_s=… peer_fp32_per_s=… [peer_bf16_per_s=…]
/// ratio_fp32=… ratio_best=… best=…`: medians of the rounds; a precision
/// that did not run is left out rather than written as 0.
pub fn result_line(cpu: &str, medians: &Medians) -> String {
    let ratio = |peer: f64| medians.fleet / peer.max(1e-9);
    let mut fields = vec![format!("cpu=\"{}\"", cpu.replace('"', "'")), format!("fleet_per_s={:.1}", medians.fleet)];
    fields.extend(medians.peers.iter().map(|(p, rate)| format!("peer_{}_per_s={rate:.1}", p.name())));
    if let Some((_, fp32)) = medians.peers.iter().find(|(p, _)| *p == Precision::Fp32) {
        fields.push(format!("ratio_fp32={:.2}", ratio(*fp32)));
    }
    if let Some((best, rate)) = medians.best_peer() {
        fields.push(format!("ratio_best={:.2} best={}", ratio(rate), best.name()));
    }
    format!("RESULT peer {}", fields.join(" "))
}

#[cfg(test)]
mod tests {
    use super::*;
    use fleet_proto::RequestId;

    fn side(seconds: f64) -> Side {
        Side { answered: 3000, seconds, sample: vec![] }
    }

    fn round_of(number: usize, fleet_s: f64, fp32_s: f64, bf16_s: f64) -> Round {
        let sides = vec![
            (Contender::Fleet, side(fleet_s)),
            (Contender::Peer(Precision::Fp32), side(fp32_s)),
            (Contender::Peer(Precision::Bf16), side(bf16_s)),
        ];
        Round { number, sides }
    }
    #[test]
    fn the_order_reverses_every_other_round_and_texts_and_ids_are_the_round_s_own() {
        let peers = [Precision::Fp32, Precision::Bf16];
        let labels = |round| round_order(round, &peers).into_iter().map(Contender::label).collect::<Vec<_>>();
        assert_eq!(labels(1), ["fleet", "peer-fp32", "peer-bf16"]);
        assert_eq!(labels(2), ["peer-bf16", "peer-fp32", "fleet"]);
        assert_eq!(labels(3), labels(1));
        assert_eq!(round_order(2, &[Precision::Fp32]), [Contender::Peer(Precision::Fp32), Contender::Fleet]);
        let texts = vec!["a b".to_owned(), "a b".to_owned()];
        assert_eq!(round_texts(&texts, 2), ["a b #2-0", "a b #2-1"]);
        assert_ne!(round_texts(&texts, 1), round_texts(&texts, 2));
        assert_eq!(id_prefix(Contender::Peer(Precision::Bf16), 2), "peer-bf16-r2");
        assert!(RequestId::parse(&format!("{}-2999", id_prefix(Contender::Fleet, 3))).is_ok());
    }

    #[test]
    fn a_side_s_line_is_its_rate_and_its_figure_the_median_of_the_rounds() {
        assert_eq!(
            side_line(2, Contender::Peer(Precision::Bf16), &side(95.1)),
            "round 2 peer-bf16: 3000 texts in 95.1 s (31.5/s)"
        );
        // Rates: fleet 300, 250, 400; fp32 50, 60, 40; bf16 60, 75, 30.
        let rounds = [round_of(1, 10.0, 60.0, 50.0), round_of(2, 12.0, 50.0, 40.0), round_of(3, 7.5, 75.0, 100.0)];
        let medians = Medians::of(&rounds);
        assert_eq!(medians, Medians { fleet: 300.0, peers: vec![(Precision::Fp32, 50.0), (Precision::Bf16, 60.0)] });
        assert_eq!(
            result_line("Intel(R) Xeon(R) Platinum 8481C CPU @ 2.70GHz", &medians),
            "RESULT peer cpu=\"Intel(R) Xeon(R) Platinum 8481C CPU @ 2.70GHz\" fleet_per_s=300.0 \
             peer_fp32_per_s=50.0 peer_bf16_per_s=60.0 ratio_fp32=6.00 ratio_best=5.00 best=bf16"
        );
    }

    #[test]
    fn without_bf16_the_line_leaves_it_out_and_fp32_is_the_best() {
        let medians = Medians { fleet: 300.0, peers: vec![(Precision::Fp32, 50.0)] };
        assert_eq!(
            result_line("AMD EPYC 7B13", &medians),
            "RESULT peer cpu=\"AMD EPYC 7B13\" fleet_per_s=300.0 peer_fp32_per_s=50.0 ratio_fp32=6.00 \
             ratio_best=6.00 best=fp32"
        );
        // Equal peers: fp32, the first, is named.
        let tied = Medians { fleet: 100.0, peers: vec![(Precision::Fp32, 50.0), (Precision::Bf16, 50.0)] };
        assert_eq!(tied.best_peer(), Some((Precision::Fp32, 50.0)));
    }

    #[test]
    fn each_peer_is_compared_with_the_fleet_of_its_own_round() {
        let v = vec![Some(vec![1.0, 0.0]), None];
        assert!((min_cosine(&v, &v) - 1.0).abs() < 1e-9);
        let with_sample = |seconds, sample: Vec<Option<Vec<f32>>>| Side { sample, ..side(seconds) };
        let round = Round {
            number: 1,
            sides: vec![
                (Contender::Fleet, with_sample(10.0, vec![Some(vec![1.0, 0.0])])),
                (Contender::Peer(Precision::Bf16), with_sample(50.0, vec![Some(vec![1.0, 1.0])])),
            ],
        };
        let cosines = round.cosines();
        assert_eq!(cosines.len(), 1);
        assert_eq!(cosines[0].0, Precision::Bf16);
        assert!((cosines[0].1 - std::f64::consts::FRAC_1_SQRT_2).abs() < 1e-9);
    }
}
