//! The run as pictures: sent and answered per second with p50/p99 latency,
//! consumer lag over time, and the outcome counts.

use crate::ledger::Ledger;
use crate::timeline::Second;
use plotters::prelude::*;
use std::path::Path;

type PlotResult = Result<(), Box<dyn std::error::Error>>;

pub fn throughput_and_latency(path: &Path, title: &str, seconds: &[Second]) -> PlotResult {
    let root = BitMapBackend::new(path, (1200, 800)).into_drawing_area();
    root.fill(&WHITE)?;
    let (top, bottom) = root.split_vertically(400);
    let end = seconds.len().max(1) as f64;

    let rate_top =
        seconds.iter().map(|s| s.sent.max(s.ok + s.expired + s.error)).max().unwrap_or(1).max(1) as f64 * 1.1;
    let mut chart = ChartBuilder::on(&top)
        .caption(format!("{title}: requests per second"), ("sans-serif", 20))
        .margin(10)
        .x_label_area_size(35)
        .y_label_area_size(60)
        .build_cartesian_2d(0.0..end, 0.0..rate_top)?;
    chart.configure_mesh().x_desc("seconds").y_desc("requests/s").draw()?;
    let series = |value: fn(&Second) -> u64| seconds.iter().map(move |s| (s.second as f64, value(s) as f64));
    chart.draw_series(LineSeries::new(series(|s| s.sent), &BLUE))?.label("sent").legend(legend(BLUE));
    chart.draw_series(LineSeries::new(series(|s| s.ok), &GREEN))?.label("ok").legend(legend(GREEN));
    chart.draw_series(LineSeries::new(series(|s| s.expired), &RED))?.label("expired").legend(legend(RED));
    chart.configure_series_labels().border_style(BLACK).background_style(WHITE.mix(0.8)).draw()?;

    let latency_top = seconds.iter().filter_map(|s| s.p99_ms).fold(1.0, f64::max) * 1.1;
    let mut chart = ChartBuilder::on(&bottom)
        .caption("end-to-end latency of ok answers (by second answered)", ("sans-serif", 20))
        .margin(10)
        .x_label_area_size(35)
        .y_label_area_size(60)
        .build_cartesian_2d(0.0..end, 0.0..latency_top)?;
    chart.configure_mesh().x_desc("seconds").y_desc("ms").draw()?;
    let quantile = |value: fn(&Second) -> Option<f64>| {
        seconds.iter().filter_map(move |s| value(s).map(|ms| (s.second as f64, ms))).collect::<Vec<_>>()
    };
    chart.draw_series(LineSeries::new(quantile(|s| s.p50_ms), &BLUE))?.label("p50").legend(legend(BLUE));
    chart.draw_series(LineSeries::new(quantile(|s| s.p99_ms), &MAGENTA))?.label("p99").legend(legend(MAGENTA));
    chart.configure_series_labels().border_style(BLACK).background_style(WHITE.mix(0.8)).draw()?;
    root.present()?;
    Ok(())
}

pub fn lag(path: &Path, title: &str, seconds: &[Second]) -> PlotResult {
    let root = BitMapBackend::new(path, (1200, 400)).into_drawing_area();
    root.fill(&WHITE)?;
    let points: Vec<(f64, f64)> = seconds.iter().filter_map(|s| s.lag.map(|l| (s.second as f64, l as f64))).collect();
    let top = points.iter().map(|&(_, l)| l).fold(1.0, f64::max) * 1.1;
    let mut chart = ChartBuilder::on(&root)
        .caption(format!("{title}: consumer lag (messages not committed)"), ("sans-serif", 20))
        .margin(10)
        .x_label_area_size(35)
        .y_label_area_size(70)
        .build_cartesian_2d(0.0..seconds.len().max(1) as f64, 0.0..top)?;
    chart.configure_mesh().x_desc("seconds").y_desc("lag").draw()?;
    chart.draw_series(LineSeries::new(points, &RED))?;
    root.present()?;
    Ok(())
}

pub fn outcomes(path: &Path, title: &str, ledger: &Ledger) -> PlotResult {
    let root = BitMapBackend::new(path, (800, 400)).into_drawing_area();
    root.fill(&WHITE)?;
    let bars = [
        ("ok", ledger.ok, GREEN),
        ("error", ledger.error, MAGENTA),
        ("expired", ledger.expired, RED),
        ("dlq", ledger.dead_lettered(), BLUE),
        ("lost", ledger.lost(), BLACK),
    ];
    let top = bars.iter().map(|b| b.1).max().unwrap_or(1).max(1) as f64 * 1.15;
    let mut chart = ChartBuilder::on(&root)
        .caption(format!("{title}: outcomes of {} sent", ledger.sent), ("sans-serif", 20))
        .margin(10)
        .x_label_area_size(35)
        .y_label_area_size(70)
        .build_cartesian_2d((0..bars.len() - 1).into_segmented(), 0.0..top)?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_label_formatter(&|x| match x {
            SegmentValue::CenterOf(i) => bars.get(*i).map_or(String::new(), |b| b.0.to_owned()),
            _ => String::new(),
        })
        .draw()?;
    for (i, (_, count, color)) in bars.iter().enumerate() {
        chart.draw_series(std::iter::once(Rectangle::new(
            [(SegmentValue::Exact(i), 0.0), (SegmentValue::Exact(i + 1), *count as f64)],
            color.filled(),
        )))?;
    }
    root.present()?;
    Ok(())
}

fn legend(color: RGBColor) -> impl Fn((i32, i32)) -> PathElement<(i32, i32)> {
    move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color)
}

/// Capacity sweep: p99 and answered rate against offered rate, a line per
/// batching setting, with the SLO marked.
pub fn capacity(path: &Path, points: &[crate::capacity::Point], slo_p99_ms: f64) -> PlotResult {
    let root = BitMapBackend::new(path, (1200, 450)).into_drawing_area();
    root.fill(&WHITE)?;
    let (left, right) = root.split_horizontally(600);
    let mut settings = Vec::new();
    for p in points {
        if !settings.contains(&p.setting) {
            settings.push(p.setting);
        }
    }
    let max_rate = points.iter().map(|p| p.offered_rps).fold(1.0, f64::max) * 1.05;
    let max_p99 = points.iter().map(|p| p.p99_ms).filter(|v| v.is_finite()).fold(slo_p99_ms, f64::max) * 1.1;
    let colors = [BLUE, GREEN, RED, MAGENTA, CYAN, BLACK];

    let mut chart = ChartBuilder::on(&left)
        .caption("p99 end to end vs offered rate", ("sans-serif", 20))
        .margin(10)
        .x_label_area_size(35)
        .y_label_area_size(60)
        .build_cartesian_2d(0.0..max_rate, 0.0..max_p99)?;
    chart.configure_mesh().x_desc("offered req/s").y_desc("p99 ms").draw()?;
    chart
        .draw_series(LineSeries::new([(0.0, slo_p99_ms), (max_rate, slo_p99_ms)], BLACK.stroke_width(1)))?
        .label("SLO")
        .legend(legend(BLACK));
    for (i, setting) in settings.iter().enumerate() {
        let color = colors[i % colors.len()];
        let line: Vec<(f64, f64)> = points
            .iter()
            .filter(|p| p.setting == *setting && p.p99_ms.is_finite())
            .map(|p| (p.offered_rps, p.p99_ms))
            .collect();
        chart.draw_series(LineSeries::new(line, color.stroke_width(2)))?.label(setting.label()).legend(legend(color));
    }
    chart.configure_series_labels().border_style(BLACK).background_style(WHITE.mix(0.8)).draw()?;

    let mut chart = ChartBuilder::on(&right)
        .caption("answered ok per second vs offered", ("sans-serif", 20))
        .margin(10)
        .x_label_area_size(35)
        .y_label_area_size(60)
        .build_cartesian_2d(0.0..max_rate, 0.0..max_rate)?;
    chart.configure_mesh().x_desc("offered req/s").y_desc("ok req/s").draw()?;
    for (i, setting) in settings.iter().enumerate() {
        let color = colors[i % colors.len()];
        let line: Vec<(f64, f64)> =
            points.iter().filter(|p| p.setting == *setting).map(|p| (p.offered_rps, p.ok_rps)).collect();
        chart.draw_series(LineSeries::new(line, color.stroke_width(2)))?.label(setting.label()).legend(legend(color));
    }
    chart.configure_series_labels().border_style(BLACK).background_style(WHITE.mix(0.8)).draw()?;
    root.present()?;
    Ok(())
}
