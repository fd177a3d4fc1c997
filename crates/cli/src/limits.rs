//! The per-run limit flags of `run`, `reopen`, `demo` and `serve`, turned
//! into [`korvus_command::Limits`].

use std::time::Duration;

use clap::Args;
use korvus_command::{Cpu, Limits};

/// A limit that may be `none`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Limit<T>(pub(crate) Option<T>);

/// How much of the host one run may use.
#[derive(Debug, Args)]
pub(crate) struct LimitArgs {
    /// Memory of one run's processes together, resident plus swap (`4GiB`,
    /// `512MiB`, … or `none`). Needs a writable cgroup (v2 delegated, or
    /// v1); without one the run goes on and its log says the limit is not
    /// in force.
    #[arg(long, value_name = "SIZE", default_value = "4GiB", value_parser = size)]
    pub(crate) memory_limit: Limit<u64>,
    /// Processes and threads of one run at once (or `none`).
    #[arg(long, value_name = "N", default_value = "1024", value_parser = count)]
    pub(crate) task_limit: Limit<u64>,
    /// CPUs' worth of time one run may use, e.g. `1.5` (or `none`).
    #[arg(long, value_name = "CPUS", default_value = "none", value_parser = cpus)]
    pub(crate) cpu_limit: Limit<f64>,
    /// Size of one run's scratch dir, in allocated blocks (or `none`).
    #[arg(long, value_name = "SIZE", default_value = "10GiB", value_parser = size)]
    pub(crate) scratch_limit: Limit<u64>,
    /// Stop a run that prints nothing and uses no CPU time for this many
    /// seconds (`none`: never); it ends `failed` / `stalled`.
    #[arg(long, value_name = "SECONDS", default_value = "900", value_parser = count)]
    pub(crate) stall_timeout: Limit<u64>,
    /// Fail a run before its agent starts when the memory, task or CPU
    /// limits cannot be put in force, instead of running it without them.
    #[arg(long)]
    pub(crate) require_limits: bool,
}

impl LimitArgs {
    /// The limits these flags ask for.
    pub(crate) fn limits(&self) -> Limits {
        let limits = Limits::default()
            .memory(self.memory_limit.0)
            .tasks(self.task_limit.0)
            .cpu(self.cpu_limit.0.map(Cpu::Cores))
            .scratch(self.scratch_limit.0)
            .stall(self.stall_timeout.0.map(Duration::from_secs));
        if self.require_limits {
            limits.required()
        } else {
            limits
        }
    }
}

fn none<T>(text: &str) -> Option<Limit<T>> {
    text.eq_ignore_ascii_case("none").then_some(Limit(None))
}

/// `4GiB`, `512M`, `100k`, `1073741824` (binary units; `B`/`iB` optional).
fn size(text: &str) -> Result<Limit<u64>, String> {
    if let Some(n) = none(text) {
        return Ok(n);
    }
    let t = text.trim();
    let digits = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (number, unit) = t.split_at(digits);
    let number: u64 = number
        .parse()
        .map_err(|_| format!("`{text}` is not a size: write e.g. 4GiB, 512MiB or none"))?;
    let unit = unit.trim().to_ascii_lowercase();
    let shift = match unit.trim_end_matches('b').trim_end_matches('i') {
        "" => 0,
        "k" => 10,
        "m" => 20,
        "g" => 30,
        "t" => 40,
        _ => return Err(format!("`{text}`: unknown unit (use KiB, MiB, GiB or TiB)")),
    };
    number
        .checked_mul(1 << shift)
        .filter(|&b| b > 0)
        .map(|b| Limit(Some(b)))
        .ok_or_else(|| format!("`{text}`: a size above zero that fits 64 bits"))
}

/// A positive whole number, or `none`.
fn count(text: &str) -> Result<Limit<u64>, String> {
    if let Some(n) = none(text) {
        return Ok(n);
    }
    match text.trim().parse::<u64>() {
        Ok(n) if n > 0 => Ok(Limit(Some(n))),
        _ => Err(format!(
            "`{text}` is not a whole number above zero (or none)"
        )),
    }
}

/// A positive number of CPUs, or `none`.
fn cpus(text: &str) -> Result<Limit<f64>, String> {
    if let Some(n) = none(text) {
        return Ok(n);
    }
    match text.trim().parse::<f64>() {
        Ok(n) if n.is_finite() && n > 0.0 => Ok(Limit(Some(n))),
        _ => Err(format!(
            "`{text}` is not a number of CPUs above zero (or none)"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_take_binary_units_and_none() {
        assert_eq!(size("4GiB"), Ok(Limit(Some(4 << 30))));
        assert_eq!(size("512M"), Ok(Limit(Some(512 << 20))));
        assert_eq!(size("100kb"), Ok(Limit(Some(100 << 10))));
        assert_eq!(size("4096"), Ok(Limit(Some(4096))));
        assert_eq!(size("none"), Ok(Limit(None)));
        assert!(size("4 parsecs").is_err());
        assert!(size("0").is_err());
        assert!(size("99999999999T").is_err());
    }

    #[test]
    fn counts_and_cpus_refuse_zero() {
        assert_eq!(count("64"), Ok(Limit(Some(64))));
        assert!(count("0").is_err());
        assert_eq!(cpus("1.5"), Ok(Limit(Some(1.5))));
        assert!(cpus("-1").is_err());
        assert!(cpus("NaN").is_err());
    }
}
