//! [`Counters`]: usage copied onto sessions and reports.

use serde::{Deserialize, Serialize};

/// Usage counters copied onto sessions and reports.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Counters {
    /// Agent turns taken.
    pub turns: u64,
    /// Tool calls made.
    pub tool_calls: u64,
    /// Model input tokens.
    pub input_tokens: u64,
    /// Model output tokens.
    pub output_tokens: u64,
}

impl Counters {
    /// The largest value a counter column holds: stores keep counters in
    /// signed 64-bit columns (`BIGINT`), so `i64::MAX`.
    pub const MAX: u64 = i64::MAX as u64;

    /// The counters with their field names, for backends that validate ranges.
    pub fn fields(&self) -> [(&'static str, u64); 4] {
        [
            ("counters.turns", self.turns),
            ("counters.tool_calls", self.tool_calls),
            ("counters.input_tokens", self.input_tokens),
            ("counters.output_tokens", self.output_tokens),
        ]
    }

    /// A copy with every counter clamped to [`Counters::MAX`], so it passes
    /// [`validate::counters`](crate::validate::counters) on every backend.
    ///
    /// A runner may report any `u64`; an out-of-range counter would otherwise
    /// make the write `InvalidInput` on every retry. Clamping keeps the
    /// order of magnitude ("more than the column holds") instead of losing
    /// the whole settlement.
    #[must_use]
    pub fn saturating(&self) -> Self {
        Counters {
            turns: self.turns.min(Self::MAX),
            tool_calls: self.tool_calls.min(Self::MAX),
            input_tokens: self.input_tokens.min(Self::MAX),
            output_tokens: self.output_tokens.min(Self::MAX),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn saturating_clamps_every_counter_to_the_column_maximum() {
        let huge = Counters {
            turns: u64::MAX,
            tool_calls: Counters::MAX + 1,
            input_tokens: Counters::MAX,
            output_tokens: 7,
        };
        let clamped = huge.saturating();
        assert_eq!(
            clamped,
            Counters {
                turns: Counters::MAX,
                tool_calls: Counters::MAX,
                input_tokens: Counters::MAX,
                output_tokens: 7,
            }
        );
        assert!(crate::validate::counters(&clamped).is_ok());
        assert!(crate::validate::counters(&huge).is_err());
        let small = Counters {
            turns: 1,
            tool_calls: 2,
            input_tokens: 3,
            output_tokens: 4,
        };
        assert_eq!(small.saturating(), small, "in-range counters are kept");
    }
}
