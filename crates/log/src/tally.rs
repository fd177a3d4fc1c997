//! [`TokenTally`]: a run's token counts from its events, measured figures
//! first.

use crate::event::{Author, Event, EventKind};

/// Input and output tokens, summed two ways over a run's events: as the
/// agent reported them ([`EventKind::Usage`]) and as korvus measured them
/// on the wire ([`EventKind::MeteredUsage`]).
///
/// [`tokens`](Self::tokens) is what counters hold: the measured sums when
/// calls were measured and every one whole; the larger of measured and
/// reported, per direction, when some call could not be metered whole (its
/// figures are only a lower bound, and the agent may know more); the
/// reported ones when nothing was measured. Sums saturate.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TokenTally {
    /// Input and output tokens the agent reported.
    pub reported: (u64, u64),
    /// Input and output tokens korvus measured.
    pub measured: (u64, u64),
    /// Model calls korvus measured whole.
    pub measured_calls: u64,
    /// Model calls korvus could not meter whole (their partial figures are
    /// in `measured`).
    pub unmetered_calls: u64,
}

impl TokenTally {
    /// Counts `event` if it is a usage event of either sort. A measured
    /// event counts only when korvus wrote it ([`Author::Korvus`]): an
    /// agent cannot pass its own figures off as measured.
    pub fn add(&mut self, event: &Event) {
        match &event.kind {
            EventKind::Usage {
                input_tokens,
                output_tokens,
            } => add(&mut self.reported, *input_tokens, *output_tokens),
            EventKind::MeteredUsage {
                input_tokens,
                output_tokens,
                unmetered,
                ..
            } if event.by == Some(Author::Korvus) => {
                add(&mut self.measured, *input_tokens, *output_tokens);
                let calls = if *unmetered {
                    &mut self.unmetered_calls
                } else {
                    &mut self.measured_calls
                };
                *calls = calls.saturating_add(1);
            }
            _ => {}
        }
    }

    /// Input and output tokens to count: measured when anything was.
    pub fn tokens(&self) -> (u64, u64) {
        match (self.measured_calls, self.unmetered_calls) {
            (0, 0) => self.reported,
            (_, 0) => self.measured,
            _ => (
                self.measured.0.max(self.reported.0),
                self.measured.1.max(self.reported.1),
            ),
        }
    }
}

fn add(sum: &mut (u64, u64), input: u64, output: u64) {
    sum.0 = sum.0.saturating_add(input);
    sum.1 = sum.1.saturating_add(output);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn measured_figures_win_once_any_call_was_measured() {
        let mut t = TokenTally::default();
        let add = |t: &mut TokenTally, kind| t.add(&Event::korvus(kind));
        add(
            &mut t,
            EventKind::Usage {
                input_tokens: 5,
                output_tokens: 1,
            },
        );
        assert_eq!(t.tokens(), (5, 1));
        add(
            &mut t,
            EventKind::MeteredUsage {
                input_tokens: 0,
                output_tokens: 0,
                model: None,
                unmetered: false,
            },
        );
        assert_eq!(
            t.tokens(),
            (0, 0),
            "a measured call of nothing still counts"
        );
        add(
            &mut t,
            EventKind::MeteredUsage {
                input_tokens: u64::MAX,
                output_tokens: 7,
                model: Some("m".into()),
                unmetered: false,
            },
        );
        add(
            &mut t,
            EventKind::MeteredUsage {
                input_tokens: 1,
                output_tokens: 2,
                model: None,
                unmetered: false,
            },
        );
        assert_eq!(t.tokens(), (u64::MAX, 9));
        assert_eq!(t.reported, (5, 1));
        assert_eq!(t.measured_calls, 3);
    }

    #[test]
    fn an_agents_measured_event_is_not_counted() {
        let mut t = TokenTally::default();
        let forged = EventKind::MeteredUsage {
            input_tokens: 1,
            output_tokens: 1,
            model: None,
            unmetered: false,
        };
        t.add(&Event::now(forged.clone()).by(Author::Agent));
        t.add(&Event::now(forged));
        assert_eq!(t, TokenTally::default());
    }

    #[test]
    fn a_call_not_metered_whole_keeps_the_larger_figures() {
        let mut t = TokenTally::default();
        let add = |t: &mut TokenTally, kind| t.add(&Event::korvus(kind));
        add(
            &mut t,
            EventKind::MeteredUsage {
                input_tokens: 100,
                output_tokens: 10,
                model: None,
                unmetered: false,
            },
        );
        add(
            &mut t,
            EventKind::Usage {
                input_tokens: 50,
                output_tokens: 900,
            },
        );
        assert_eq!(t.tokens(), (100, 10), "every call metered whole: measured");
        add(
            &mut t,
            EventKind::MeteredUsage {
                input_tokens: 20,
                output_tokens: 1,
                model: None,
                unmetered: true,
            },
        );
        assert_eq!(
            t.tokens(),
            (120, 900),
            "a lower bound: the larger per direction"
        );
    }
}
