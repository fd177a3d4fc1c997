//! Rows of the report, their statistics, and the two report files.

use std::fmt::Write as _;
use std::path::Path;

use anyhow::{Context, Result};
use serde::Serialize;

/// Median, minimum and maximum of repeated measurements.
#[derive(Debug, Clone, Copy, Serialize)]
pub(crate) struct Stats {
    pub(crate) median: f64,
    pub(crate) min: f64,
    pub(crate) max: f64,
    pub(crate) runs: usize,
}

impl Stats {
    /// Statistics of `values`; all zero for none.
    pub(crate) fn of(values: &[f64]) -> Self {
        if values.is_empty() {
            return Self {
                median: 0.0,
                min: 0.0,
                max: 0.0,
                runs: 0,
            };
        }
        let mut v = values.to_vec();
        v.sort_by(f64::total_cmp);
        let n = v.len();
        let median = if n % 2 == 1 {
            v[n / 2]
        } else {
            (v[n / 2 - 1] + v[n / 2]) / 2.0
        };
        Self {
            median,
            min: v[0],
            max: v[n - 1],
            runs: n,
        }
    }
}

/// The `q`-quantile (0..=1) of `values` by the nearest-rank method.
pub(crate) fn quantile(values: &[f64], q: f64) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let rank = (q * v.len() as f64).ceil() as usize;
    v[rank.clamp(1, v.len()) - 1]
}

/// How a row's goal is checked.
#[derive(Debug, Clone, Copy, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub(crate) enum Goal {
    /// The median ratio must be at most this.
    RatioAtMost { max: f64 },
    /// The median of "ours" must be at most this (in the row's unit), and
    /// the ratio must be at most `ratio_max` when given.
    ValueAtMost { max: f64, ratio_max: Option<f64> },
    /// Reported, no goal.
    None,
}

/// One line of the report.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Row {
    /// Which benchmark (1–7) and what is measured.
    pub(crate) bench: String,
    /// What the baseline is.
    pub(crate) baseline_name: String,
    /// What "ours" is.
    pub(crate) ours_name: String,
    /// Unit of `baseline` and `ours`.
    pub(crate) unit: String,
    pub(crate) baseline: Stats,
    pub(crate) ours: Stats,
    /// Per-run `ours / baseline`.
    pub(crate) ratio: Stats,
    pub(crate) goal: Goal,
    pub(crate) met: Option<bool>,
    /// Anything a reader needs to interpret the row.
    pub(crate) note: String,
}

impl Row {
    /// A row from paired runs: `pairs[i] = (baseline, ours)` of run `i`.
    pub(crate) fn paired(
        bench: impl Into<String>,
        baseline_name: impl Into<String>,
        ours_name: impl Into<String>,
        unit: impl Into<String>,
        pairs: &[(f64, f64)],
        goal: Goal,
    ) -> Self {
        let base: Vec<f64> = pairs.iter().map(|p| p.0).collect();
        let ours: Vec<f64> = pairs.iter().map(|p| p.1).collect();
        let ratios: Vec<f64> = pairs
            .iter()
            .map(|(b, o)| if *b == 0.0 { f64::NAN } else { o / b })
            .collect();
        let mut row = Self {
            bench: bench.into(),
            baseline_name: baseline_name.into(),
            ours_name: ours_name.into(),
            unit: unit.into(),
            baseline: Stats::of(&base),
            ours: Stats::of(&ours),
            ratio: Stats::of(&ratios),
            goal,
            met: None,
            note: String::new(),
        };
        row.met = row.check();
        row
    }

    /// Adds a note.
    pub(crate) fn note(mut self, note: impl Into<String>) -> Self {
        self.note = note.into();
        self
    }

    fn check(&self) -> Option<bool> {
        match self.goal {
            Goal::RatioAtMost { max } => Some(self.ratio.median <= max),
            Goal::ValueAtMost { max, ratio_max } => {
                Some(self.ours.median <= max && ratio_max.is_none_or(|r| self.ratio.median <= r))
            }
            Goal::None => None,
        }
    }

    fn goal_text(&self) -> String {
        match self.goal {
            Goal::RatioAtMost { max } => format!("≤ {max}×"),
            Goal::ValueAtMost {
                max,
                ratio_max: None,
            } => format!("≤ {} {}", num(max), self.unit),
            Goal::ValueAtMost {
                max,
                ratio_max: Some(r),
            } => format!("≤ {} {}, ratio ≤ {r}×", num(max), self.unit),
            Goal::None => "—".into(),
        }
    }
}

/// The whole report.
#[derive(Debug, Serialize)]
pub(crate) struct Report {
    pub(crate) quick: bool,
    pub(crate) started_at_unix: u64,
    pub(crate) duration_secs: f64,
    pub(crate) host: String,
    pub(crate) rows: Vec<Row>,
    /// Free-form details per benchmark (e.g. the statements PostgreSQL logged).
    pub(crate) details: serde_json::Map<String, serde_json::Value>,
}

fn num(v: f64) -> String {
    if !v.is_finite() {
        return format!("{v}");
    }
    let a = v.abs();
    if a >= 1000.0 || (a == a.trunc() && a < 1e15) {
        format!("{v:.0}")
    } else if a >= 10.0 {
        format!("{v:.1}")
    } else if a >= 0.1 {
        format!("{v:.2}")
    } else {
        format!("{v:.3}")
    }
}

fn spread(s: &Stats) -> String {
    if s.runs <= 1 || s.min == s.max {
        num(s.median)
    } else {
        format!("{} ({}–{})", num(s.median), num(s.min), num(s.max))
    }
}

impl Report {
    /// The markdown table.
    pub(crate) fn markdown(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "# korvus benchmark report{}\n",
            if self.quick {
                " (--quick: tiny sizes, not for goals)"
            } else {
                ""
            }
        );
        let _ = writeln!(
            out,
            "Every figure is measured in this run; values are median (min–max) over the runs \
             shown, ratio = ours / baseline per run. Host: {}. Took {:.0} s.\n",
            self.host, self.duration_secs
        );
        let _ = writeln!(
            out,
            "| benchmark | baseline | ours | ratio median (min–max) | runs | goal | met? |"
        );
        let _ = writeln!(out, "|---|---|---|---|---|---|---|");
        for r in &self.rows {
            let met = match r.met {
                Some(true) => "yes",
                Some(false) => "**no**",
                None => "—",
            };
            let ratio = if r.ratio.median.is_nan() {
                "—".to_owned()
            } else {
                format!("{}×", spread(&r.ratio))
            };
            let _ = writeln!(
                out,
                "| {} | {}: {} {} | {}: {} {} | {} | {} | {} | {} |",
                r.bench,
                r.baseline_name,
                spread(&r.baseline),
                r.unit,
                r.ours_name,
                spread(&r.ours),
                r.unit,
                ratio,
                r.ratio.runs.max(r.ours.runs),
                r.goal_text(),
                met
            );
        }
        let notes: Vec<&Row> = self.rows.iter().filter(|r| !r.note.is_empty()).collect();
        if !notes.is_empty() {
            let _ = writeln!(out, "\nNotes:\n");
            for r in notes {
                let _ = writeln!(out, "- **{}**: {}", r.bench, r.note);
            }
        }
        out
    }

    /// Writes `report.md` and `report.json` into `dir`.
    pub(crate) fn write(&self, dir: &Path) -> Result<()> {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let md = dir.join("report.md");
        std::fs::write(&md, self.markdown())
            .with_context(|| format!("writing {}", md.display()))?;
        let json = dir.join("report.json");
        std::fs::write(&json, serde_json::to_vec_pretty(self)?)
            .with_context(|| format!("writing {}", json.display()))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stats_take_the_middle() {
        let s = Stats::of(&[3.0, 1.0, 2.0]);
        assert_eq!((s.median, s.min, s.max, s.runs), (2.0, 1.0, 3.0, 3));
        assert_eq!(Stats::of(&[1.0, 2.0, 3.0, 4.0]).median, 2.5);
    }

    #[test]
    fn quantiles_use_nearest_rank() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(quantile(&v, 0.5), 50.0);
        assert_eq!(quantile(&v, 0.99), 99.0);
        assert_eq!(quantile(&[7.0], 0.99), 7.0);
    }

    #[test]
    fn goals_are_checked_on_medians() {
        let row = Row::paired(
            "x",
            "b",
            "o",
            "ms",
            &[(10.0, 11.0), (10.0, 13.0), (10.0, 30.0)],
            Goal::RatioAtMost { max: 1.5 },
        );
        assert_eq!(row.met, Some(true));
        assert!((row.ratio.median - 1.3).abs() < 1e-9);
        let row = Row::paired(
            "y",
            "b",
            "o",
            "KiB",
            &[(1.0, 20.0)],
            Goal::ValueAtMost {
                max: 16.0,
                ratio_max: None,
            },
        );
        assert_eq!(row.met, Some(false));
        assert!(row.markdown_free_of_pipes());
    }

    impl Row {
        fn markdown_free_of_pipes(&self) -> bool {
            !self.bench.contains('|') && !self.note.contains('|')
        }
    }
}
