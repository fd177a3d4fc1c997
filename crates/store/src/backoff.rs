//! [`Backoff`]: the one retry-delay policy korvus uses — doubling, capped
//! and jittered — and [`Retries`], its state within one retry loop.
//!
//! Every retry loop (a settle's store writes, the persist phase's row
//! batches, checkpoints, a forced cancel's fence of the turn log, webhook
//! deliveries, resumes of an orphaned run) takes its delays from here, so
//! replicas that failed together — a database restart — spread their
//! retries instead of arriving at once.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::time::Duration;

/// Exponential backoff with "equal jitter": the ceiling of retry `n` is
/// `first · 2ⁿ⁻¹`, at most `max`, and the wait is uniformly random between
/// half the ceiling and the ceiling. Each wait is at least half its
/// ceiling, so a bound reasoned from ceilings holds within a factor of two,
/// and never more than the ceiling, so `max` is a true maximum.
///
/// ```
/// use std::time::Duration;
/// use korvus_store::Backoff;
///
/// let policy = Backoff::new(Duration::from_millis(100), Duration::from_secs(1));
/// assert_eq!(policy.ceiling(1), Duration::from_millis(100));
/// assert_eq!(policy.ceiling(3), Duration::from_millis(400));
/// assert_eq!(policy.ceiling(30), Duration::from_secs(1));
/// let wait = policy.delay(3);
/// assert!(wait >= Duration::from_millis(200) && wait <= Duration::from_millis(400));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    first: Duration,
    max: Duration,
}

impl Backoff {
    /// The policy of korvus's own in-run retries of store and turn-log
    /// writes: 25 ms, doubling, at most 1 s (each loop also has its own
    /// overall bound).
    pub const WRITES: Self = Self::new(Duration::from_millis(25), Duration::from_secs(1));

    /// Ceilings start at `first` and double up to `max` (`max` below
    /// `first` is raised to it).
    pub const fn new(first: Duration, max: Duration) -> Self {
        let max = if max.as_nanos() < first.as_nanos() {
            first
        } else {
            max
        };
        Self { first, max }
    }

    /// The first ceiling.
    pub const fn first(&self) -> Duration {
        self.first
    }

    /// The largest ceiling.
    pub const fn max(&self) -> Duration {
        self.max
    }

    /// The ceiling of retry `retry` (1 is the first retry; 0 counts as 1).
    pub fn ceiling(&self, retry: u32) -> Duration {
        let mut ceiling = self.first;
        for _ in 1..retry {
            if ceiling >= self.max || ceiling.is_zero() {
                break;
            }
            ceiling = ceiling.saturating_mul(2);
        }
        ceiling.min(self.max)
    }

    /// The wait before retry `retry`: random in `[ceiling / 2, ceiling]`.
    pub fn delay(&self, retry: u32) -> Duration {
        let ceiling = self.ceiling(retry);
        let half = ceiling / 2;
        half + (ceiling - half).mul_f64(unit(retry))
    }

    /// The state of one retry loop under this policy.
    pub fn start(&self) -> Retries {
        Retries {
            policy: *self,
            retry: 1,
            next: self.delay(1),
        }
    }
}

/// One retry loop's place in its [`Backoff`]: [`delay`](Self::delay) is
/// the wait before the next retry, [`advance`](Self::advance) moves on
/// after a retry was made.
#[derive(Debug, Clone)]
pub struct Retries {
    policy: Backoff,
    retry: u32,
    next: Duration,
}

impl Retries {
    /// The wait before the next retry (fixed until [`advance`](Self::advance)).
    pub fn delay(&self) -> Duration {
        self.next
    }

    /// The retries made so far.
    pub fn made(&self) -> u32 {
        self.retry - 1
    }

    /// Moves on: the next retry's wait is drawn from the next ceiling.
    pub fn advance(&mut self) {
        self.retry = self.retry.saturating_add(1);
        self.next = self.policy.delay(self.retry);
    }
}

/// A number in `[0, 1)`, different per call: std's randomly keyed hasher
/// (a fresh key per `RandomState`) over `salt` is randomness enough to
/// spread retries, without a dependency.
fn unit(salt: u32) -> f64 {
    let mut hasher = RandomState::new().build_hasher();
    hasher.write_u32(salt);
    // The top 53 bits, as an f64 mantissa.
    (hasher.finish() >> 11) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ceilings_double_up_to_the_max() {
        let b = Backoff::new(Duration::from_millis(25), Duration::from_secs(1));
        let ceilings: Vec<u128> = (0..9).map(|n| b.ceiling(n).as_millis()).collect();
        assert_eq!(ceilings, [25, 25, 50, 100, 200, 400, 800, 1000, 1000]);
        assert_eq!(b.ceiling(u32::MAX), Duration::from_secs(1));
        let huge = Backoff::new(Duration::from_secs(1), Duration::MAX);
        assert_eq!(huge.ceiling(40), Duration::from_secs(1 << 39));
        assert_eq!(
            Backoff::new(Duration::ZERO, Duration::ZERO).delay(5),
            Duration::ZERO
        );
    }

    #[test]
    fn delays_stay_within_half_the_ceiling_and_the_ceiling_and_spread() {
        let b = Backoff::WRITES;
        let mut seen = std::collections::BTreeSet::new();
        for _ in 0..200 {
            let d = b.delay(4);
            assert!(d >= b.ceiling(4) / 2 && d <= b.ceiling(4), "{d:?}");
            seen.insert(d);
        }
        assert!(seen.len() > 50, "jitter spreads the waits: {}", seen.len());
    }

    #[test]
    fn a_max_below_the_first_is_raised() {
        let b = Backoff::new(Duration::from_secs(2), Duration::from_secs(1));
        assert_eq!(b.max(), Duration::from_secs(2));
        assert_eq!(b.ceiling(3), Duration::from_secs(2));
    }

    #[test]
    fn retries_advance_through_the_ceilings() {
        let mut r = Backoff::WRITES.start();
        assert_eq!(r.made(), 0);
        assert!(r.delay() <= Duration::from_millis(25));
        let first = r.delay();
        assert_eq!(r.delay(), first, "fixed until advanced");
        for _ in 0..10 {
            r.advance();
        }
        assert_eq!(r.made(), 10);
        assert!(r.delay() >= Duration::from_millis(500) && r.delay() <= Duration::from_secs(1));
    }
}
