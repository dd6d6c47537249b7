//! Progress shown on standard error while slow work runs.

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::time::{Duration, Instant};

/// What `slow` says while a pool opens: recovery and reconciling parity after a crash can
/// take a while on a large pool.
pub(crate) const OPENING: &str = "opening the pool (recovering it, if a crash interrupted it)";

/// Runs `work`, with a spinner saying `msg` on standard error once it has taken a second
/// (work that reports no progress of its own: opening a pool, walking a large heap).
pub(crate) fn slow<R>(msg: &'static str, work: impl FnOnce() -> R) -> R {
    let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::hidden());
    bar.set_style(
        ProgressStyle::with_template("{spinner} {msg} ({elapsed})")
            .unwrap_or_else(|_| ProgressStyle::default_spinner()),
    );
    bar.set_message(msg);
    let (done, wait) = std::sync::mpsc::channel::<()>();
    let r = std::thread::scope(|s| {
        let b = bar.clone();
        s.spawn(move || {
            if wait.recv_timeout(Duration::from_secs(1))
                == Err(std::sync::mpsc::RecvTimeoutError::Timeout)
            {
                b.set_draw_target(ProgressDrawTarget::stderr());
                b.enable_steady_tick(Duration::from_millis(200));
            }
        });
        let r = work();
        drop(done);
        r
    });
    bar.finish_and_clear();
    r
}

/// A progress bar on standard error for work that reports its progress, shown once the
/// work has taken a second (quick runs print nothing); cleared when dropped.
pub(crate) struct Bar {
    bar: ProgressBar,
    start: Instant,
    shown: bool,
}

impl Bar {
    /// A hidden bar drawn with `template` (indicatif's syntax) once it shows.
    pub(crate) fn new(template: &str) -> Bar {
        let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::hidden());
        bar.set_style(
            ProgressStyle::with_template(template).unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        Bar {
            bar,
            start: Instant::now(),
            shown: false,
        }
    }

    /// `done` of `total` units are done.
    pub(crate) fn update(&mut self, done: u64, total: u64) {
        self.bar.set_length(total);
        self.bar.set_position(done);
        if !self.shown && self.start.elapsed() > Duration::from_secs(1) {
            self.shown = true;
            self.bar.set_draw_target(ProgressDrawTarget::stderr());
            self.bar.enable_steady_tick(Duration::from_millis(200));
        }
    }
}

impl Drop for Bar {
    fn drop(&mut self) {
        self.bar.finish_and_clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slow_work_returns_its_value_whether_or_not_the_spinner_showed() {
        assert_eq!(slow("fast", || 7), 7);
        let t = Instant::now();
        assert_eq!(
            slow("slow", || {
                std::thread::sleep(Duration::from_millis(1100));
                8
            }),
            8
        );
        assert!(
            t.elapsed() < Duration::from_secs(3),
            "the spinner held it up"
        );
    }
}
