//! Cache-line write-back and ordering instructions, chosen once at run time.
//!
//! Invariant: after `flush_lines(p, n)` and `sfence()` on the same thread, the flushed lines
//! have reached the persistence domain (on real persistent memory).

use std::fmt;
use std::str::FromStr;

/// How pgl makes stores durable.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FlushMode {
    /// `clwb` + `sfence` (write back, keep the line cached): the fastest.
    Clwb,
    /// `clflushopt` + `sfence`.
    Clflushopt,
    /// `clflush` (serialising; no fence needed, one is issued anyway).
    Clflush,
    /// `msync(MS_SYNC)` of the touched pages: for pools on ordinary files.
    Msync,
    /// Nothing: stores reach media whenever the OS writes them back. For benchmarks and
    /// scratch pools only; not crash-consistent.
    None,
}

impl FlushMode {
    /// The best cache-line mode this CPU supports (clwb, else clflushopt, else clflush), or
    /// `Msync` on CPUs without cache-line flushes.
    pub fn detect() -> FlushMode {
        cpu::detect()
    }

    /// The mode named by the environment variable `PGL_FLUSH`
    /// (`clwb|clflushopt|clflush|msync|none`), if it is set and names a mode this CPU has.
    pub fn from_env() -> Option<FlushMode> {
        let m = std::env::var("PGL_FLUSH").ok()?.parse::<FlushMode>().ok()?;
        m.supported().then_some(m)
    }

    /// The mode for a pool in `file`: cache-line flushes where stores to a shared mapping
    /// reach the persistence domain (a DAX file system, where `MAP_SYNC` mappings work; and
    /// tmpfs, the usual stand-in for persistent memory), `msync` everywhere else.
    pub fn for_file(file: &std::fs::File) -> FlushMode {
        if fs::is_tmpfs(file) || fs::supports_map_sync(file) {
            Self::detect()
        } else {
            FlushMode::Msync
        }
    }

    /// Whether this CPU can run the mode.
    pub fn supported(self) -> bool {
        match self {
            FlushMode::Clwb => cpu::has_clwb(),
            FlushMode::Clflushopt => cpu::has_clflushopt(),
            FlushMode::Clflush => cpu::has_clflush(),
            FlushMode::Msync | FlushMode::None => true,
        }
    }

    /// The mode's name as `PGL_FLUSH` spells it.
    pub fn name(self) -> &'static str {
        match self {
            FlushMode::Clwb => "clwb",
            FlushMode::Clflushopt => "clflushopt",
            FlushMode::Clflush => "clflush",
            FlushMode::Msync => "msync",
            FlushMode::None => "none",
        }
    }
}

impl fmt::Display for FlushMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for FlushMode {
    type Err = crate::Error;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(match s.trim().to_ascii_lowercase().as_str() {
            "clwb" => FlushMode::Clwb,
            "clflushopt" => FlushMode::Clflushopt,
            "clflush" => FlushMode::Clflush,
            "msync" => FlushMode::Msync,
            "none" => FlushMode::None,
            other => {
                return Err(crate::Error::config(format!(
                    "unknown flush mode {other:?}; use clwb, clflushopt, clflush, msync or none"
                )))
            }
        })
    }
}

pub(super) mod fs {
    use std::os::fd::AsRawFd;

    const TMPFS_MAGIC: i64 = 0x0102_1994;

    pub(super) fn is_tmpfs(file: &std::fs::File) -> bool {
        // SAFETY: `statfs` is plain old data; zeroed is a valid value, and fstatfs only writes
        // it given a valid descriptor (which `file` owns).
        let mut st: libc::statfs = unsafe { std::mem::zeroed() };
        // SAFETY: valid descriptor and a valid out-pointer.
        let rc = unsafe { libc::fstatfs(file.as_raw_fd(), &mut st) };
        rc == 0 && st.f_type as i64 == TMPFS_MAGIC
    }

    pub(in crate::persist) fn supports_map_sync(file: &std::fs::File) -> bool {
        let len = file.metadata().map(|m| m.len()).unwrap_or(0);
        if len < 4096 {
            return false;
        }
        // SAFETY: maps one page of a file we own, read-only, and unmaps it at once; no Rust
        // reference to the mapping exists.
        unsafe {
            let p = libc::mmap(
                std::ptr::null_mut(),
                4096,
                libc::PROT_READ,
                libc::MAP_SHARED_VALIDATE | libc::MAP_SYNC,
                file.as_raw_fd(),
                0,
            );
            if p == libc::MAP_FAILED {
                false
            } else {
                libc::munmap(p, 4096);
                true
            }
        }
    }
}

/// Writes back every cache line of `[p, p + len)` with the instruction of `mode`
/// (cache-line modes only; others do nothing here).
///
/// # Safety
/// `[p, p + len)` must be mapped memory of this process.
#[inline]
pub(crate) unsafe fn flush_lines(mode: FlushMode, p: *const u8, len: usize) {
    if len == 0 {
        return;
    }
    let start = (p as usize) & !63;
    let end = p as usize + len;
    let mut line = start;
    while line < end {
        // SAFETY: `line` lies in the mapped range the caller vouches for (rounded down to its
        // line, which is in the same page); cache write-back instructions do not change memory.
        unsafe { cpu::write_back(mode, line as *const u8) };
        line += 64;
    }
}

/// Asks the CPU to bring the lines of `[p, p + len)` into its cache, without waiting.
/// A hint: it never faults and changes no memory, whatever the address.
#[inline]
pub(crate) fn prefetch_lines(p: *const u8, len: usize) {
    let start = (p as usize) & !63;
    let end = p as usize + len;
    let mut line = start;
    while line < end {
        cpu::prefetch(line as *const u8);
        line += 64;
    }
}

/// Copies `src` to `dst` with non-temporal (streaming) stores where both are 16-byte
/// granules, plain stores elsewhere; returns the ranges `(ptr, len)` of up to two partial
/// head/tail pieces that went through the cache and still need a cache-line flush.
///
/// # Safety
/// `dst..dst + src.len()` must be mapped, writable memory owned by the caller.
#[inline]
pub unsafe fn stream_copy(dst: *mut u8, src: &[u8]) -> [(*const u8, usize); 2] {
    let len = src.len();
    if (dst as usize | len) & 15 == 0 {
        // Whole granules (log records, lane records): no partial piece to copy or flush.
        // SAFETY: `dst..dst + len` is the caller's; `dst` is 16-byte aligned, `len` a
        // multiple of 16.
        unsafe { cpu::stream(dst, src.as_ptr(), len) };
        return [(dst, 0), (dst, 0)];
    }
    let head = ((16 - (dst as usize & 15)) & 15).min(len);
    let body = (len - head) & !15;
    let tail = len - head - body;
    // SAFETY: all three pieces lie within `dst..dst + len` (caller's contract) and within `src`.
    unsafe {
        std::ptr::copy_nonoverlapping(src.as_ptr(), dst, head);
        cpu::stream(dst.add(head), src.as_ptr().add(head), body);
        std::ptr::copy_nonoverlapping(src.as_ptr().add(head + body), dst.add(head + body), tail);
        [
            (dst as *const u8, head),
            (dst.add(head + body) as *const u8, tail),
        ]
    }
}

/// Orders all earlier flushes of this thread before later stores.
#[inline]
pub(crate) fn sfence() {
    cpu::sfence();
}

#[cfg(target_arch = "x86_64")]
mod cpu {
    use super::FlushMode;
    use core::arch::asm;
    use core::arch::x86_64::__cpuid_count;

    fn leaf7_ebx() -> u32 {
        // `cpuid` exists on every x86_64 CPU; leaf 7 is valid when the max leaf is >= 7.
        let max = __cpuid_count(0, 0).eax;
        if max < 7 {
            return 0;
        }
        __cpuid_count(7, 0).ebx
    }

    pub(super) fn has_clwb() -> bool {
        leaf7_ebx() & (1 << 24) != 0
    }
    pub(super) fn has_clflushopt() -> bool {
        leaf7_ebx() & (1 << 23) != 0
    }
    pub(super) fn has_clflush() -> bool {
        __cpuid_count(1, 0).edx & (1 << 19) != 0
    }

    pub(super) fn detect() -> FlushMode {
        if has_clwb() {
            FlushMode::Clwb
        } else if has_clflushopt() {
            FlushMode::Clflushopt
        } else if has_clflush() {
            FlushMode::Clflush
        } else {
            FlushMode::Msync
        }
    }

    /// # Safety
    /// `p` must point into mapped memory, and the CPU must support `mode`'s instruction.
    #[inline(always)]
    pub(super) unsafe fn write_back(mode: FlushMode, p: *const u8) {
        match mode {
            // SAFETY: the caller guarantees `p` is mapped and the instruction is supported
            // (modes are only chosen through `supported()`); clwb neither reads nor writes
            // memory architecturally.
            FlushMode::Clwb => unsafe {
                asm!("clwb [{}]", in(reg) p, options(nostack, preserves_flags));
            },
            // SAFETY: as above, for clflushopt.
            FlushMode::Clflushopt => unsafe {
                asm!("clflushopt [{}]", in(reg) p, options(nostack, preserves_flags));
            },
            // SAFETY: as above; clflush is baseline on x86_64.
            FlushMode::Clflush => unsafe { core::arch::x86_64::_mm_clflush(p) },
            FlushMode::Msync | FlushMode::None => {}
        }
    }

    #[inline(always)]
    pub(super) fn sfence() {
        // SAFETY: sfence has no memory operands and is baseline on x86_64 (SSE).
        unsafe { core::arch::x86_64::_mm_sfence() }
    }

    #[inline(always)]
    pub(super) fn prefetch(p: *const u8) {
        use core::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        // SAFETY: prefetch is a hint that never faults, whatever the address, and is
        // baseline on x86_64 (SSE).
        unsafe { _mm_prefetch::<_MM_HINT_T0>(p as *const i8) }
    }

    /// Streams `len` bytes (a multiple of 16) from `src` to the 16-byte aligned `dst`: in
    /// 32-byte stores where the CPU has AVX2 and the copy is long enough to pay for the
    /// check (two 4 KiB lane copies streamed in 16-byte stores took ~900 ns, in 32-byte
    /// ones ~680, here), else 16-byte ones.
    ///
    /// # Safety
    /// `dst` is 16-byte aligned; both ranges are valid for `len` bytes and do not overlap.
    #[inline(always)]
    pub(super) unsafe fn stream(dst: *mut u8, src: *const u8, len: usize) {
        if len >= STREAM_WIDE_MIN && std::is_x86_feature_detected!("avx2") {
            // SAFETY: the caller's contract; `len >= STREAM_WIDE_MIN` (128 > 16); AVX2 was
            // just detected.
            return unsafe { stream_avx2(dst, src, len) };
        }
        // SAFETY: the caller's contract.
        unsafe { stream_sse2(dst, src, len) }
    }

    /// Copies from which `stream` uses 32-byte stores.
    const STREAM_WIDE_MIN: usize = 128;

    /// `stream` in 16-byte stores.
    ///
    /// # Safety
    /// As `stream`.
    #[inline(always)]
    unsafe fn stream_sse2(dst: *mut u8, src: *const u8, len: usize) {
        use core::arch::x86_64::{__m128i, _mm_loadu_si128, _mm_stream_si128};
        let mut i = 0;
        while i < len {
            // SAFETY: in bounds (i + 16 <= len), dst + i is 16-byte aligned; SSE2 is baseline.
            unsafe {
                let v = _mm_loadu_si128(src.add(i) as *const __m128i);
                _mm_stream_si128(dst.add(i) as *mut __m128i, v);
            }
            i += 16;
        }
    }

    /// `stream` in 32-byte stores, with a 16-byte one first where `dst` is not 32-byte
    /// aligned and one last for a 16-byte tail.
    ///
    /// # Safety
    /// As `stream`, with `len` at least 16, and the CPU has AVX2.
    #[target_feature(enable = "avx2")]
    unsafe fn stream_avx2(dst: *mut u8, src: *const u8, len: usize) {
        use core::arch::x86_64::{__m256i, _mm256_loadu_si256, _mm256_stream_si256};
        let mut i = 0;
        if dst as usize & 31 != 0 {
            // SAFETY: the first 16 bytes: `dst` is 16-byte aligned, and `len` is at least 16
            // (this function's contract), so they lie in both ranges.
            unsafe { stream_sse2(dst, src, 16) };
            i = 16;
        }
        // Four stores a turn: a 1 KiB record's two lane copies are ~70 of them, and the
        // loop's own count, compare and branch were as many instructions as the copy's.
        while i + 128 <= len {
            for k in (0..128).step_by(32) {
                // SAFETY: in bounds (i + k + 32 <= i + 128 <= len); `dst + i + k` is 32-byte
                // aligned (`dst + i` is, see below); the caller checked AVX2.
                unsafe {
                    let v = _mm256_loadu_si256(src.add(i + k) as *const __m256i);
                    _mm256_stream_si256(dst.add(i + k) as *mut __m256i, v);
                }
            }
            i += 128;
        }
        while i + 32 <= len {
            // SAFETY: in bounds (i + 32 <= len); `dst + i` is 32-byte aligned (`dst` was,
            // or `dst + 16` is); the caller checked AVX2.
            unsafe {
                let v = _mm256_loadu_si256(src.add(i) as *const __m256i);
                _mm256_stream_si256(dst.add(i) as *mut __m256i, v);
            }
            i += 32;
        }
        // SAFETY: the remaining 0 or 16 bytes, in bounds, from a 16-byte aligned `dst + i`.
        unsafe { stream_sse2(dst.add(i), src.add(i), len - i) };
    }
}

#[cfg(not(target_arch = "x86_64"))]
mod cpu {
    use super::FlushMode;
    pub(super) fn has_clwb() -> bool {
        false
    }
    pub(super) fn has_clflushopt() -> bool {
        false
    }
    pub(super) fn has_clflush() -> bool {
        false
    }
    pub(super) fn detect() -> FlushMode {
        FlushMode::Msync
    }
    #[inline(always)]
    pub(super) fn prefetch(_p: *const u8) {}
    #[inline(always)]
    pub(super) unsafe fn write_back(_mode: FlushMode, _p: *const u8) {}
    #[inline(always)]
    pub(super) fn sfence() {
        std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
    }
    #[inline(always)]
    pub(super) unsafe fn stream(dst: *mut u8, src: *const u8, len: usize) {
        // SAFETY: forwarded caller contract.
        unsafe { std::ptr::copy_nonoverlapping(src, dst, len) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for m in [
            FlushMode::Clwb,
            FlushMode::Clflushopt,
            FlushMode::Clflush,
            FlushMode::Msync,
            FlushMode::None,
        ] {
            assert_eq!(m.name().parse::<FlushMode>().unwrap(), m);
        }
        assert!("bogus".parse::<FlushMode>().is_err());
    }

    #[test]
    fn detected_mode_is_supported_and_runs() {
        let m = FlushMode::detect();
        assert!(m.supported());
        let buf = vec![7u8; 4096];
        // SAFETY: `buf` is mapped memory of this process.
        unsafe { flush_lines(m, buf.as_ptr(), buf.len()) };
        sfence();
        assert_eq!(buf[100], 7);
    }

    #[test]
    fn stream_copy_copies_every_byte_at_any_alignment() {
        let src: Vec<u8> = (0..300u32).map(|i| (i * 7 + 3) as u8).collect();
        for shift in 0..17 {
            // Past 128 bytes, 32-byte stores, four a turn: lengths of whole turns, whole
            // 32-byte stores and one more 16-byte granule, at 32-byte aligned and 16-byte
            // aligned starts.
            for len in [
                0, 1, 15, 16, 17, 31, 32, 64, 100, 128, 144, 160, 255, 256, 272, 283, 288,
            ] {
                let mut dst = vec![0u8; 320];
                let at = dst.as_mut_ptr().wrapping_add(shift);
                // SAFETY: `dst` holds shift + len <= 305 bytes.
                let parts = unsafe { stream_copy(at, &src[..len]) };
                if (at as usize | len) & 15 == 0 {
                    assert_eq!(
                        parts[0].1 + parts[1].1,
                        0,
                        "whole granules: nothing to flush"
                    );
                }
                sfence();
                assert_eq!(
                    &dst[shift..shift + len],
                    &src[..len],
                    "shift {shift} len {len}"
                );
                assert!(dst[..shift].iter().all(|&b| b == 0));
                assert!(dst[shift + len..].iter().all(|&b| b == 0));
                assert!(parts[0].1 < 16 && parts[1].1 < 16);
            }
        }
    }
}
