//! The benchmark's picture: throughput and padding efficiency per strategy,
//! and throughput over the `max_batch_tokens` sweep.

use crate::measure::Measured;
use plotters::prelude::*;
use std::path::Path;

type PlotResult = Result<(), Box<dyn std::error::Error>>;

pub fn batching_png(path: &Path, strategies: &[Measured], sweep: &[(usize, Measured)]) -> PlotResult {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let root = BitMapBackend::new(path, (1500, 500)).into_drawing_area();
    root.fill(&WHITE)?;
    let panels = root.split_evenly((1, 3));
    bars(&panels[0], "throughput (sentences/s)", strategies, Measured::throughput)?;
    bars(&panels[1], "padding efficiency (real / computed tokens)", strategies, |m| m.padding_efficiency)?;
    sweep_line(&panels[2], sweep)?;
    root.present()?;
    Ok(())
}

fn bars(
    area: &DrawingArea<BitMapBackend<'_>, plotters::coord::Shift>,
    title: &str,
    data: &[Measured],
    value: impl Fn(&Measured) -> f64,
) -> PlotResult {
    let top = data.iter().map(&value).fold(0.0, f64::max) * 1.2;
    let mut chart = ChartBuilder::on(area)
        .caption(title, ("sans-serif", 20))
        .margin(15)
        .x_label_area_size(35)
        .y_label_area_size(55)
        .build_cartesian_2d((0..data.len().saturating_sub(1)).into_segmented(), 0.0..top.max(1e-9))?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_label_formatter(&|x| match x {
            SegmentValue::CenterOf(i) => data.get(*i).map(|m| m.name.clone()).unwrap_or_default(),
            _ => String::new(),
        })
        .draw()?;
    let colours = [RGBColor(200, 90, 60), RGBColor(50, 110, 180)];
    for (i, m) in data.iter().enumerate() {
        let colour = colours[i % colours.len()];
        chart.draw_series(std::iter::once(Rectangle::new(
            [(SegmentValue::Exact(i), 0.0), (SegmentValue::Exact(i + 1), value(m))],
            colour.mix(0.8).filled(),
        )))?;
        let label = format!("{:.2}", value(m));
        chart.draw_series(std::iter::once(Text::new(
            label,
            (SegmentValue::CenterOf(i), value(m) * 1.03),
            ("sans-serif", 16),
        )))?;
    }
    Ok(())
}

fn sweep_line(
    area: &DrawingArea<BitMapBackend<'_>, plotters::coord::Shift>,
    sweep: &[(usize, Measured)],
) -> PlotResult {
    let top = sweep.iter().map(|(_, m)| m.throughput()).fold(0.0, f64::max) * 1.2;
    let (lo, hi) = (
        sweep.iter().map(|(t, _)| *t).min().unwrap_or(1) as f64,
        sweep.iter().map(|(t, _)| *t).max().unwrap_or(2) as f64,
    );
    let mut chart = ChartBuilder::on(area)
        .caption("bucket batcher: max_batch_tokens sweep", ("sans-serif", 20))
        .margin(15)
        .x_label_area_size(35)
        .y_label_area_size(55)
        .build_cartesian_2d((lo * 0.8..hi * 1.25).log_scale(), 0.0..top.max(1e-9))?;
    chart
        .configure_mesh()
        .light_line_style(WHITE)
        .x_labels(8)
        .x_label_formatter(&|v| format!("{v:.0}"))
        .x_desc("max_batch_tokens (log scale)")
        .y_desc("sentences/s")
        .draw()?;
    let points: Vec<(f64, f64)> = sweep.iter().map(|(t, m)| (*t as f64, m.throughput())).collect();
    chart.draw_series(LineSeries::new(points.clone(), BLUE.stroke_width(2)))?;
    chart.draw_series(points.into_iter().map(|p| Circle::new(p, 4, BLUE.filled())))?;
    Ok(())
}
