//! Deliberate defects for proving the test harnesses (feature `test-faults`, never in a
//! release build): with the fault on, the crash suite must fail.

#[cfg(feature = "test-faults")]
static DROP_APPLY_FLUSH: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Turns on or off the "drop the flush of applied redo entries" defect.
#[cfg(feature = "test-faults")]
pub fn set_drop_apply_flush(on: bool) {
    DROP_APPLY_FLUSH.store(on, std::sync::atomic::Ordering::SeqCst);
}

#[inline(always)]
pub(crate) fn drop_apply_flush() -> bool {
    #[cfg(feature = "test-faults")]
    {
        DROP_APPLY_FLUSH.load(std::sync::atomic::Ordering::Relaxed)
    }
    #[cfg(not(feature = "test-faults"))]
    {
        false
    }
}
