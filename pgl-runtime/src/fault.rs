//! Deliberate defects and device faults for proving the test harnesses (feature
//! `test-faults`, never in a release build): with a defect on, the crash suite must fail;
//! with a device fault on, the pool must report it.

/// A switch: a process-wide flag tests turn on, read where the fault applies (always off
/// without the `test-faults` feature, and compiled away).
macro_rules! switch {
    ($flag:ident, $set:ident, $get:ident, $what:literal) => {
        #[cfg(feature = "test-faults")]
        static $flag: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

        #[doc = concat!("Turns on or off ", $what, ".")]
        #[cfg(feature = "test-faults")]
        pub fn $set(on: bool) {
            $flag.store(on, std::sync::atomic::Ordering::SeqCst);
        }

        #[inline(always)]
        pub(crate) fn $get() -> bool {
            #[cfg(feature = "test-faults")]
            {
                $flag.load(std::sync::atomic::Ordering::Relaxed)
            }
            #[cfg(not(feature = "test-faults"))]
            {
                false
            }
        }
    };
}

switch!(
    DROP_APPLY_FLUSH,
    set_drop_apply_flush,
    drop_apply_flush,
    "the \"drop the flush of applied redo entries\" defect"
);
switch!(
    FAIL_MSYNC,
    set_fail_msync,
    fail_msync,
    "the \"every msync fails\" fault (an I/O error of the backing device)"
);
switch!(
    FAIL_MPROTECT,
    set_fail_mprotect,
    fail_mprotect,
    "the \"every mprotect of a pool page fails\" fault (`ENOMEM`: the kernel's mapping limit)"
);
switch!(
    FAKE_LARGE_PAGES,
    set_fake_large_pages,
    fake_large_pages,
    "the \"the system's pages are 16 KiB\" fault (for the media-error handler's check)"
);
switch!(
    FAIL_GROW_EXTEND,
    set_fail_grow_extend,
    fail_grow_extend,
    "the \"extending the pool file fails\" fault (`ENOSPC`: a full file system)"
);
switch!(
    FAIL_GROW_FSYNC,
    set_fail_grow_fsync,
    fail_grow_fsync,
    "the \"the fsync of a grown pool file fails\" fault (an I/O error of the backing device)"
);
