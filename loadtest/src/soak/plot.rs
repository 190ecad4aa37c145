//! A soak as pictures: each worker's memory, and latency per interval, over
//! the whole run with its faults marked, so a slope or a slow recovery can
//! be matched by eye to the fault before it.

use crate::soak::schedule::Planned;
use plotters::prelude::*;
use std::path::Path;

type PlotResult = Result<(), Box<dyn std::error::Error>>;

const SIZE: (u32, u32) = (1200, 500);
const MIB: f64 = 1024.0 * 1024.0;
const SECONDS_PER_MINUTE: f64 = 60.0;
/// Line colours, one per worker (cycled past the end).
const PALETTE: [RGBColor; 8] =
    [BLUE, RED, GREEN, MAGENTA, CYAN, RGBColor(255, 140, 0), RGBColor(128, 0, 128), RGBColor(110, 80, 40)];
const FAULT_LINE: RGBColor = RGBColor(90, 90, 90);
const FAULT_BAND: RGBColor = RGBColor(255, 165, 0);

/// RSS (MiB) over time, one line per worker (different colours, legend),
/// the faults drawn as vertical lines labelled by [`Fault::name`] at their
/// start, a shaded band over the lasting ones; x in minutes. `series` holds
/// (worker, samples of (seconds from the start, bytes)); `title` is the
/// chart's caption as given.
///
/// [`Fault::name`]: crate::soak::schedule::Fault::name
pub fn rss(path: &Path, title: &str, series: &[(String, Vec<(f64, f64)>)], faults: &[Planned]) -> PlotResult {
    let lines: Vec<Line<'_>> = series
        .iter()
        .enumerate()
        .map(|(index, (worker, samples))| Line {
            label: worker,
            points: samples.iter().map(|&(t, bytes)| (t / SECONDS_PER_MINUTE, bytes / MIB)).collect(),
            color: PALETTE[index % PALETTE.len()],
        })
        .collect();
    time_series(path, title, "RSS MiB", &lines, faults)
}

/// p50 and p99 end-to-end latency (ms) per interval over time, each point
/// (interval start s, ms), the faults marked as in [`rss`].
pub fn latency(path: &Path, title: &str, p50: &[(f64, f64)], p99: &[(f64, f64)], faults: &[Planned]) -> PlotResult {
    let in_minutes = |points: &[(f64, f64)]| -> Vec<(f64, f64)> {
        points.iter().map(|&(t, ms)| (t / SECONDS_PER_MINUTE, ms)).collect()
    };
    let lines = [
        Line { label: "p50", points: in_minutes(p50), color: BLUE },
        Line { label: "p99", points: in_minutes(p99), color: MAGENTA },
    ];
    time_series(path, title, "ms", &lines, faults)
}

/// One labelled line of a chart: (minutes, value) points.
struct Line<'a> {
    label: &'a str,
    points: Vec<(f64, f64)>,
    color: RGBColor,
}

/// A fault as drawn: its name, and its start and end in minutes.
struct Marker {
    name: &'static str,
    at: f64,
    ends: f64,
}

/// The chart both plots draw: lines over minutes from 0, the faults behind
/// them. Robust to nothing at all (empty lines, no faults: bare axes over
/// 0..1) and to single points; points that are not finite are left out.
fn time_series(path: &Path, caption: &str, y_desc: &str, lines: &[Line<'_>], faults: &[Planned]) -> PlotResult {
    let finite = |&(x, y): &(f64, f64)| x.is_finite() && y.is_finite();
    let plotted: Vec<(&Line<'_>, Vec<(f64, f64)>)> =
        lines.iter().map(|line| (line, line.points.iter().copied().filter(finite).collect::<Vec<_>>())).collect();
    let markers: Vec<Marker> = faults
        .iter()
        .filter(|planned| planned.at_s.is_finite() && planned.ends_s().is_finite())
        .map(|planned| Marker {
            name: planned.fault.name(),
            at: planned.at_s / SECONDS_PER_MINUTE,
            ends: planned.ends_s() / SECONDS_PER_MINUTE,
        })
        .collect();
    let line_xs = plotted.iter().flat_map(|(_, points)| points.iter().map(|&(x, _)| x));
    let last_x = line_xs.chain(markers.iter().map(|marker| marker.ends)).fold(0.0, f64::max);
    let x_end = if last_x > 0.0 { last_x * 1.02 } else { 1.0 };
    let y_top = plotted.iter().flat_map(|(_, points)| points.iter().map(|&(_, y)| y)).fold(1.0, f64::max) * 1.1;

    let root = BitMapBackend::new(path, SIZE).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(caption, ("sans-serif", 20))
        .margin(10)
        .x_label_area_size(35)
        .y_label_area_size(70)
        .build_cartesian_2d(0.0..x_end, 0.0..y_top)?;
    chart.configure_mesh().x_desc("minutes").y_desc(y_desc).draw()?;

    // Behind the lines: a band while a lasting fault is on, a line at each
    // start, and its name beside the line (staggered, so faults close
    // together do not print over each other).
    let band = FAULT_BAND.mix(0.2).filled();
    let lasting = markers.iter().filter(|marker| marker.ends > marker.at);
    chart.draw_series(lasting.map(|marker| Rectangle::new([(marker.at, 0.0), (marker.ends, y_top)], band)))?;
    let rule = FAULT_LINE.stroke_width(1);
    let rules = markers.iter().map(|marker| PathElement::new(vec![(marker.at, 0.0), (marker.at, y_top)], rule));
    chart.draw_series(rules)?;
    let font = ("sans-serif", 13);
    let label_at = |index: usize, at: f64| (at + x_end * 0.003, y_top * (0.99 - 0.05 * (index % 3) as f64));
    let labels =
        markers.iter().enumerate().map(|(index, marker)| Text::new(marker.name, label_at(index, marker.at), font));
    chart.draw_series(labels)?;

    for (line, points) in &plotted {
        chart
            .draw_series(LineSeries::new(points.iter().copied(), line.color.stroke_width(2)))?
            .label(line.label)
            .legend(legend(line.color));
    }
    if !plotted.is_empty() {
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .border_style(BLACK)
            .background_style(WHITE.mix(0.8))
            .draw()?;
    }
    root.present()?;
    Ok(())
}

fn legend(color: RGBColor) -> impl Fn((i32, i32)) -> PathElement<(i32, i32)> {
    move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::soak::schedule::Fault;
    use std::path::PathBuf;

    /// A directory of this test's own under the system's temp dir.
    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("fleet-soak-plot-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn assert_png(path: &Path) {
        let bytes = std::fs::read(path).unwrap();
        assert!(bytes.len() > 1000, "{} is {} bytes", path.display(), bytes.len());
        assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n", "{} is not a PNG", path.display());
    }

    fn faults() -> Vec<Planned> {
        vec![
            Planned { fault: Fault::MemberJoin, at_s: 600.0, lasts_s: 0.0 },
            Planned { fault: Fault::BrokerRestart, at_s: 900.0, lasts_s: 20.0 },
            Planned { fault: Fault::Burst, at_s: 1200.0, lasts_s: 60.0 },
        ]
    }

    #[test]
    fn both_plots_draw_two_workers_and_three_faults() {
        let dir = scratch("full");
        let series: Vec<(String, Vec<(f64, f64)>)> = ["text-0", "image-0"]
            .into_iter()
            .enumerate()
            .map(|(n, worker)| {
                let base = (300.0 + 200.0 * n as f64) * MIB;
                let samples: Vec<(f64, f64)> =
                    (0..=180).map(|i| i as f64 * 10.0).map(|t| (t, base + t * 1000.0)).collect();
                (worker.to_owned(), samples)
            })
            .collect();
        rss(&dir.join("rss.png"), "soak", &series, &faults()).unwrap();
        assert_png(&dir.join("rss.png"));

        let p50: Vec<(f64, f64)> = (0..180).map(|i| (i as f64 * 10.0, 40.0 + (i % 7) as f64)).collect();
        let p99: Vec<(f64, f64)> =
            p50.iter().map(|&(t, ms)| (t, if (900.0..960.0).contains(&t) { 2400.0 } else { ms * 3.0 })).collect();
        latency(&dir.join("latency.png"), "soak", &p50, &p99, &faults()).unwrap();
        assert_png(&dir.join("latency.png"));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn both_plots_draw_bare_axes_for_empty_or_single_point_series() {
        let dir = scratch("empty");
        rss(&dir.join("rss-empty.png"), "soak", &[], &[]).unwrap();
        assert_png(&dir.join("rss-empty.png"));
        let empty_workers = vec![("text-0".to_owned(), Vec::new()), ("text-1".to_owned(), vec![(5.0, MIB)])];
        rss(&dir.join("rss-single.png"), "soak", &empty_workers, &faults()).unwrap();
        assert_png(&dir.join("rss-single.png"));
        latency(&dir.join("latency-empty.png"), "soak", &[], &[], &[]).unwrap();
        assert_png(&dir.join("latency-empty.png"));
        latency(&dir.join("latency-single.png"), "soak", &[(0.0, 0.0)], &[(0.0, f64::NAN)], &faults()).unwrap();
        assert_png(&dir.join("latency-single.png"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
