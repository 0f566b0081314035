//! The chart of the topic page, drawn here as SVG points from the samples
//! of `rates`.

use super::format::{ms_human, overdue};
use crate::rates::Point;

/// The chart of the topic page: enqueues and acks per second (left scale)
/// and the oldest overdue job's age (right scale), a point a minute over
/// the last hour, as SVG drawn here (numbers only reach it).
pub(super) struct Chart {
    /// `x,y x,y …` of each line, in the SVG's coordinates.
    pub(super) enqueued: String,
    pub(super) acked: String,
    pub(super) overdue: String,
    /// The top of each scale: per second, and seconds.
    pub(super) rate_max: String,
    pub(super) overdue_max: String,
    /// How many minutes it has (0: nothing to draw yet).
    pub(super) points: usize,
    /// The latest minute's figures in words (the chart's text alternative).
    pub(super) latest: String,
}

/// The chart's drawing area inside its 600 × 170 box.
const CHART_LEFT: f64 = 44.0;
const CHART_RIGHT: f64 = 556.0;
const CHART_TOP: f64 = 10.0;
const CHART_BOTTOM: f64 = 140.0;

impl Chart {
    pub(super) fn new(points: &[Point], now: u64) -> Self {
        let rate_max = points
            .iter()
            .map(|p| p.enqueued.max(p.acked))
            .fold(0.0, f64::max);
        let rate_top = nice_top(rate_max);
        let overdue_top = nice_top(points.iter().map(|p| p.overdue_s).fold(0.0, f64::max));
        let start = now.saturating_sub(3_600_000) as f64;
        let x = |at: u64| {
            let f = ((at as f64 - start) / 3_600_000.0).clamp(0.0, 1.0);
            CHART_LEFT + f * (CHART_RIGHT - CHART_LEFT)
        };
        let y = |v: f64, top: f64| CHART_BOTTOM - (v / top).min(1.0) * (CHART_BOTTOM - CHART_TOP);
        let line = |v: &dyn Fn(&Point) -> f64, top: f64| {
            points
                .iter()
                .map(|p| format!("{:.1},{:.1}", x(p.at), y(v(p), top)))
                .collect::<Vec<_>>()
                .join(" ")
        };
        Self {
            enqueued: line(&|p| p.enqueued, rate_top),
            acked: line(&|p| p.acked, rate_top),
            overdue: line(&|p| p.overdue_s, overdue_top),
            rate_max: format!("{rate_top}/s"),
            overdue_max: ms_human((overdue_top * 1000.0) as u64),
            points: points.len(),
            latest: points.last().map_or_else(
                || "no samples yet".into(),
                |p| {
                    format!(
                        "last minute: {:.1} enqueued/s, {:.1} acked/s, oldest overdue {}",
                        p.enqueued,
                        p.acked,
                        overdue((p.overdue_s * 1000.0) as u64)
                    )
                },
            ),
        }
    }
}

/// A round top for a scale at least `max` (1, 2 or 5 times a power of ten;
/// 1 for nothing).
fn nice_top(max: f64) -> f64 {
    if max <= 1.0 || !max.is_finite() {
        return 1.0;
    }
    let p = 10f64.powf(max.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|m| m * p)
        .find(|t| *t >= max)
        .unwrap_or(10.0 * p)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_chart_scales_and_places_its_points() {
        let hour = 3_600_000;
        let p = |at, enqueued, acked, overdue_s| Point {
            at,
            enqueued,
            acked,
            overdue_s,
        };
        let c = Chart::new(&[p(hour / 2, 3.0, 1.5, 0.0), p(hour, 6.0, 0.0, 12.0)], hour);
        assert_eq!(c.points, 2);
        assert_eq!(c.rate_max, "10/s", "a round top above 6");
        assert_eq!(c.overdue_max, "20.0 s");
        assert_eq!(c.enqueued, "300.0,101.0 556.0,62.0");
        assert_eq!(c.acked, "300.0,120.5 556.0,140.0");
        assert_eq!(c.overdue, "300.0,140.0 556.0,62.0");
        assert!(c.latest.contains("6.0 enqueued/s"), "{}", c.latest);
        assert_eq!(Chart::new(&[], hour).latest, "no samples yet");
        assert_eq!(nice_top(0.0), 1.0);
        assert_eq!(nice_top(1.5), 2.0);
        assert_eq!(nice_top(20.0), 20.0);
        assert_eq!(nice_top(501.0), 1000.0);
    }
}
