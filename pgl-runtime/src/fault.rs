//! Deliberate defects and device faults for proving the test harnesses (feature
//! `test-faults`, never in a release build): with a defect on, the crash suite must fail;
//! with a device fault on, the pool must report it.

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

#[cfg(feature = "test-faults")]
static FAIL_MSYNC: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Turns on or off the "every msync fails" fault (an I/O error of the backing device).
#[cfg(feature = "test-faults")]
pub fn set_fail_msync(on: bool) {
    FAIL_MSYNC.store(on, std::sync::atomic::Ordering::SeqCst);
}

#[inline(always)]
pub(crate) fn fail_msync() -> bool {
    #[cfg(feature = "test-faults")]
    {
        FAIL_MSYNC.load(std::sync::atomic::Ordering::Relaxed)
    }
    #[cfg(not(feature = "test-faults"))]
    {
        false
    }
}
