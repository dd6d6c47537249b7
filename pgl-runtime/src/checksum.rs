//! Checksums: Adler-32 (RFC 1950) for object payloads, with an O(edit) patch, and CRC-32
//! for log seals and pool headers.
//!
//! Invariant: every function here is a pure function of the bytes it describes. In
//! particular, if `sum == adler32(msg)` and `msg2` is `msg` with the bytes at
//! `start..start + old.len()` replaced by `new`, then
//! `adler32_patch(sum, msg.len(), start, old, new) == adler32(msg2)`, so a checksum kept up
//! to date by patches never differs from a full recompute.

/// The Adler-32 modulus: the largest prime below 2^16.
const MOD: u64 = 65_521;

/// Splits an Adler-32 checksum into its halves `(a, b)`, with `a = 1 + Σ x_i` and
/// `b = Σ_k a_k`, both mod [`MOD`] when the checksum is valid.
fn halves(sum: u32) -> (u64, u64) {
    (u64::from(sum & 0xffff), u64::from(sum >> 16))
}

/// Adler-32 of `data` (RFC 1950), via simd-adler32 (the hot path).
#[must_use]
pub fn adler32(data: &[u8]) -> u32 {
    adler32_continue(1, data)
}

/// Below this many bytes a scalar loop beats the SIMD kernel's set-up cost.
const SCALAR_BELOW: usize = 64;

/// Continues an Adler-32 whose state so far is `state` (the checksum of the bytes before).
///
/// `adler32_continue(adler32(a), b) == adler32(a ++ b)`, and `adler32_continue(1, b)` is
/// `adler32(b)`.
#[must_use]
pub fn adler32_continue(state: u32, data: &[u8]) -> u32 {
    if data.len() < SCALAR_BELOW {
        return adler32_small(state, data);
    }
    let mut hasher = simd_adler32::Adler32::from_checksum(state);
    hasher.write(data);
    hasher.finish()
}

/// The low byte of each 16-bit lane (the SWAR sums below work in 16-bit lanes).
const BYTES: u64 = 0x00ff_00ff_00ff_00ff;
/// Times this, the top 16-bit lane of a product collects the sum of every lane.
const ONES: u64 = 0x0001_0001_0001_0001;
/// Lane m of this times lane i lands in lane i + m: the top lane collects lane i times
/// 3 - m = i, so the top lane of `lanes * INDEX` is `Σ i·lane_i`.
const INDEX: u64 = 0x0000_0001_0002_0003;

/// A little-endian word's bytes paired in 16-bit lanes: `(pair, odd)`, lane i of `pair`
/// holding bytes 2i and 2i + 1 summed (at most 510), of `odd` byte 2i + 1.
#[inline]
fn split_pairs(w: u64) -> (u64, u64) {
    let odd = (w >> 8) & BYTES;
    ((w & BYTES) + odd, odd)
}

/// `adler32_continue` below `SCALAR_BELOW` bytes: eight bytes at a time in SWAR, as
/// `adler32_le_words` sums its words (a byte loop took ~4 instructions a byte: ~190 for
/// the 48-byte payload of a small node, checked on every open), then the last few one
/// at a time.
///
/// Eight bytes `x_0..x_7` move `a` by `S = Σ x_i` and `b` by `8a + 8S - T`, with
/// `T = Σ i·x_i` (`b` adds `a` after each byte). In 16-bit lanes, `pair` holds
/// `x_2j + x_2j+1` and `odd` holds `x_2j+1`: `S` is the sum of `pair`'s lanes and
/// `T = 2·Σ j·pair_j + Σ odd_j`.
#[inline]
fn adler32_small(state: u32, data: &[u8]) -> u32 {
    // No overflow: both halves start below 2^16, and at most 63 bytes of <= 255 are
    // added (`a` stays below 2^17, `b` below 2^23).
    let (mut a, mut b) = (u64::from(state & 0xffff), u64::from(state >> 16));
    let mut words = data.chunks_exact(8);
    for w in &mut words {
        let mut le = [0u8; 8];
        le.copy_from_slice(w);
        // Lanes of at most 510: every product lane below stays under 2^16 (at most
        // 6 · 510), so no carry crosses into the top lane.
        let (pair, odd) = split_pairs(u64::from_le_bytes(le));
        let sum = pair.wrapping_mul(ONES) >> 48;
        let weighted = 2 * (pair.wrapping_mul(INDEX) >> 48) + (odd.wrapping_mul(ONES) >> 48);
        // `weighted <= 7 * sum`: no underflow.
        b += 8 * a + 8 * sum - weighted;
        a += sum;
    }
    for &x in words.remainder() {
        a += u64::from(x);
        b += a;
    }
    ((b % MOD) << 16 | (a % MOD)) as u32
}

/// Adler-32 of the 20 little-endian bytes of `words` (8 each) then `tail` (4): what
/// `adler32` gives on them (an object's checksummed prefix: offset, size, type id),
/// summed a word at a time in SWAR instead of a byte at a time (the byte loop was ~75
/// instructions of every open and every commit; this is about 40).
///
/// With `x_j` the bytes and `L = 20`: `a = 1 + Σ x_j` and `b = L + Σ (L - j)·x_j`. For
/// words `k = 0, 1, 2` (the tail as the third, its upper bytes zero), each with byte sum
/// `S_k` and `T_k = Σ_i i·x_{8k+i}`: `b = L + L·ΣS_k - 8·Σ k·S_k - ΣT_k`.
#[must_use]
#[inline]
pub(crate) fn adler32_le_words(words: [u64; 2], tail: u32) -> u32 {
    const LEN: u64 = 20;
    let (p0, h0) = split_pairs(words[0]);
    let (p1, h1) = split_pairs(words[1]);
    let (p2, h2) = split_pairs(u64::from(tail));
    // Lanes summed over the words stay below 2^16 (3 * 510, and 510 + 2 * 510 for the
    // weighted one), and so does every lane of the products below (at most 6 * 1530):
    // no carry crosses a lane, and each top lane (`>> 48`) is exact.
    let all = p0 + p1 + p2;
    // Σ_k S_k, then Σ_k k·S_k.
    let sum = all.wrapping_mul(ONES) >> 48;
    let by_word = (p1 + 2 * p2).wrapping_mul(ONES) >> 48;
    // Σ_k T_k = Σ_i 2i·(even byte of lane i) + (2i + 1)·(odd byte of lane i).
    let lanes = all.wrapping_mul(INDEX) >> 48;
    let odd = (h0 + h1 + h2).wrapping_mul(ONES) >> 48;
    let a = 1 + sum;
    let b = LEN + LEN * sum - 8 * by_word - (2 * lanes + odd);
    // No reduction: `a <= 1 + 20 * 255` and `b <= 20 + 255 * (20 + 19 + ... + 1)` = 53_570,
    // both below MOD.
    (b << 16 | a) as u32
}

/// Given the Adler-32 `sum` of a message of `msg_len` bytes, returns the checksum after the
/// bytes at `start..start + old.len()` changed from `old` to `new` (old.len() == new.len(),
/// start + len <= msg_len). Cost O(old.len()), independent of msg_len.
///
/// The message itself is not needed: only `sum`, its length and the edited bytes before
/// and after. If `sum` is not the checksum of a message whose bytes at that range are
/// `old`, the result is not the checksum of anything (no panic).
///
/// # Panics
///
/// If `old.len() != new.len()`, or if `start + old.len()` exceeds `msg_len`.
#[must_use]
pub fn adler32_patch(sum: u32, msg_len: usize, start: usize, old: &[u8], new: &[u8]) -> u32 {
    let len = old.len();
    assert_eq!(
        len,
        new.len(),
        "adler32_patch: `old` and `new` must have the same length"
    );
    assert!(
        start.checked_add(len).is_some_and(|end| end <= msg_len),
        "adler32_patch: edit {start}..{start}+{len} lies outside a message of {msg_len} bytes"
    );
    if len == 0 {
        return sum;
    }
    // With d_i the change at position i of an n-byte message, A moves by Σd and B by
    // Σ(n − i)·d_i = (n − s − L)·Σd + Σ_j (L − j)·d_{s+j}. The Adler-32 of an L-byte slice
    // is a = 1 + Σx, b = L + Σ(L − j)·x_j, so both sums are differences of the halves of
    // adler32(new) and adler32(old) (the constant 1 and L cancel).
    let (old_a, old_b) = halves(adler32(old));
    let (new_a, new_b) = halves(adler32(new));
    let delta_sum = (new_a + MOD - old_a) % MOD;
    let delta_weighted = (new_b + MOD - old_b) % MOD;
    // usize -> u64 is lossless on every target Rust supports.
    let tail = (msg_len - start - len) as u64 % MOD;
    let (a, b) = halves(sum);
    let a = (a + delta_sum) % MOD;
    let b = (b + tail * delta_sum + delta_weighted) % MOD;
    // Both halves are below MOD < 2^16, so the result fits in 32 bits.
    ((b << 16) | a) as u32
}

/// A strong 32-bit checksum (CRC-32 via crc32fast) used for log seals and pool headers,
/// where Adler-32 is too weak on short inputs.
///
/// This is the IEEE CRC-32 (as in zlib, PNG and Ethernet); feeding the bytes in pieces with
/// [`Strong::update`] gives the same result as [`strong`] on all of them at once.
#[derive(Clone, Debug, Default)]
pub struct Strong(crc32fast::Hasher);

impl Strong {
    /// A checksum of no bytes yet.
    #[must_use]
    pub fn new() -> Self {
        // `Hasher::new` detects the CPU's features on every call; a clone of one made once
        // does not (a seal or a header check makes one per call).
        static PROTO: std::sync::OnceLock<crc32fast::Hasher> = std::sync::OnceLock::new();
        Self(PROTO.get_or_init(crc32fast::Hasher::new).clone())
    }

    /// Feeds `data` after the bytes fed so far.
    pub fn update(&mut self, data: &[u8]) {
        self.0.update(data);
    }

    /// The CRC-32 of all bytes fed so far.
    #[must_use]
    pub fn finish(self) -> u32 {
        self.0.finalize()
    }
}

/// The strong checksum (CRC-32) of `data`: the one-shot form of [`Strong`].
#[must_use]
pub fn strong(data: &[u8]) -> u32 {
    let mut s = Strong::new();
    s.update(data);
    s.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::collection::vec;
    use proptest::prelude::*;

    /// The independent Adler-32: the scalar `adler32` crate.
    fn oracle(data: &[u8]) -> u32 {
        adler32::RollingAdler32::from_buffer(data).hash()
    }

    /// The oracle continued from `state` over `data`.
    fn oracle_continue(state: u32, data: &[u8]) -> u32 {
        let mut rolling = adler32::RollingAdler32::from_value(state);
        rolling.update_buffer(data);
        rolling.hash()
    }

    /// The checksum after `zeros` zero bytes follow a message whose checksum is `sum`: each
    /// zero leaves `a` as it is and adds `a` to `b`. Lets a test stand for a message of
    /// several GiB without allocating it.
    fn extend_with_zeros(sum: u32, zeros: u64) -> u32 {
        let a = u64::from(sum & 0xffff);
        let b = (u64::from(sum >> 16) + (zeros % MOD) * a) % MOD;
        u32::try_from((b << 16) | a).unwrap()
    }

    /// Deterministic pseudo-random bytes (xorshift64*), so fixed tests need no RNG crate.
    fn bytes_from_seed(seed: u64, len: usize) -> Vec<u8> {
        let mut state = seed | 1;
        (0..len)
            .map(|_| {
                state ^= state >> 12;
                state ^= state << 25;
                state ^= state >> 27;
                (state.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 56) as u8
            })
            .collect()
    }

    #[test]
    fn le_words_match_the_bytes_they_stand_for() {
        let check = |w: [u64; 2], t: u32| {
            let mut bytes = Vec::new();
            bytes.extend_from_slice(&w[0].to_le_bytes());
            bytes.extend_from_slice(&w[1].to_le_bytes());
            bytes.extend_from_slice(&t.to_le_bytes());
            assert_eq!(adler32_le_words(w, t), oracle(&bytes), "{w:x?} {t:x}");
        };
        check([0, 0], 0);
        check([u64::MAX, u64::MAX], u32::MAX);
        check([0x0102_0304_0506_0708, 0x1122_3344_5566_7788], 0xdead_beef);
        for seed in 0..crate::miri_or(2000, 50) {
            let b = bytes_from_seed(seed as u64, 20);
            let w = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().unwrap());
            check(
                [w(0), w(8)],
                u32::from_le_bytes(b[16..20].try_into().unwrap()),
            );
        }
    }

    /// Below `SCALAR_BELOW` bytes the sum is taken in SWAR (`adler32_small`): every
    /// length there, from states with small and with large halves (up to 65520 each),
    /// against the oracle.
    #[test]
    fn adler32_continue_matches_oracle_below_the_simd_cut() {
        let states = [1, 0, 0xfff0_fff0, 0x1234_5678, oracle(&[0xff; 5000])];
        for (k, &state) in states.iter().enumerate() {
            for size in 0..SCALAR_BELOW + 2 {
                for data in [
                    bytes_from_seed((k * 100 + size) as u64, size),
                    vec![0xff; size],
                ] {
                    assert_eq!(
                        adler32_continue(state, &data),
                        oracle_continue(state, &data),
                        "state {state:#x}, size {size}"
                    );
                }
            }
        }
    }

    #[test]
    fn adler32_known_vectors() {
        assert_eq!(adler32(b"Wikipedia"), 0x11E6_0398);
        assert_eq!(adler32(b""), 1);
        assert_eq!(adler32::adler32(&b"Wikipedia"[..]).unwrap(), 0x11E6_0398);
        assert_eq!(adler32::adler32(&b""[..]).unwrap(), 1);
        assert_eq!(oracle(b"Wikipedia"), 0x11E6_0398);
    }

    #[test]
    fn adler32_matches_oracle_at_every_small_size_and_block_edge() {
        // 5552 is zlib's NMAX, the longest run a 32-bit accumulator can take unreduced.
        let edges = [5552, 2 * 5552, 4096, 8192];
        let near = crate::miri_or(16, 1);
        let sizes = (0..=crate::miri_or(300, 40))
            .chain(
                edges[..crate::miri_or(4, 1)]
                    .iter()
                    .flat_map(|&edge| edge - near..edge + near),
            )
            .chain([crate::miri_or(9999, 100)]);
        for size in sizes {
            let data = bytes_from_seed(size as u64, size);
            assert_eq!(adler32(&data), oracle(&data), "size {size}");
        }
    }

    #[test]
    fn adler32_matches_oracle_on_all_ones() {
        // All 0xFF bytes drive every accumulator to its largest value.
        let data = vec![0xFF; 100_000];
        let sizes = [1, 5552, 5551, 5553, 65_521, 100_000];
        for size in sizes[..crate::miri_or(6, 2)].iter().copied() {
            assert_eq!(adler32(&data[..size]), oracle(&data[..size]), "size {size}");
        }
    }

    #[test]
    fn extend_with_zeros_matches_oracle() {
        let prefix = bytes_from_seed(7, 1000);
        for zeros in [0, 1, 5552, 70_000][..crate::miri_or(4, 3)].iter().copied() {
            let mut msg = prefix.clone();
            msg.resize(prefix.len() + zeros, 0);
            assert_eq!(
                extend_with_zeros(oracle(&prefix), zeros as u64),
                oracle(&msg),
                "{zeros} zeros"
            );
        }
    }

    #[test]
    fn patch_with_empty_edit_is_identity() {
        let msg = bytes_from_seed(3, 100);
        let sum = oracle(&msg);
        for start in [0, 50, 100] {
            assert_eq!(adler32_patch(sum, msg.len(), start, &[], &[]), sum);
        }
    }

    #[test]
    #[should_panic(expected = "same length")]
    fn patch_rejects_length_mismatch() {
        let _ = adler32_patch(1, 10, 0, &[1, 2], &[1]);
    }

    #[test]
    #[should_panic(expected = "outside a message")]
    fn patch_rejects_edit_past_the_end() {
        let _ = adler32_patch(1, 10, 9, &[0, 0], &[1, 1]);
    }

    #[test]
    #[should_panic(expected = "outside a message")]
    fn patch_rejects_overflowing_range() {
        let _ = adler32_patch(1, usize::MAX, usize::MAX, &[0], &[1]);
    }

    #[cfg(target_pointer_width = "64")]
    #[test]
    #[cfg_attr(
        miri,
        ignore = "minutes under Miri; safe arithmetic that patch_matches_recompute covers"
    )]
    fn patch_in_a_message_of_several_gib() {
        // The message is head ++ 0^gap ++ body ++ 0^tail, 11 GiB in all; its checksum is
        // built from the oracle and the closed form for zero runs, never allocated.
        let gap = (5_u64 << 30) + 12_345;
        let tail = (6_u64 << 30) + 777;
        let checksum = |head: &[u8], body: &[u8]| {
            let sum = extend_with_zeros(oracle(head), gap);
            extend_with_zeros(oracle_continue(sum, body), tail)
        };
        let mut head = bytes_from_seed(11, 4096);
        let mut body = bytes_from_seed(12, 4096);
        let body_start = head.len() + gap as usize;
        let msg_len = body_start + body.len() + tail as usize;
        let mut sum = checksum(&head, &body);
        for (i, (at, len)) in [(0, 64), (4032, 64), (1, 1), (0, 4096), (100, 3000)]
            .into_iter()
            .enumerate()
        {
            let new = bytes_from_seed(100 + i as u64, len);
            sum = adler32_patch(sum, msg_len, at, &head[at..at + len], &new);
            head[at..at + len].copy_from_slice(&new);
            assert_eq!(sum, checksum(&head, &body), "head edit {i}");

            let new = vec![0xFF; len];
            sum = adler32_patch(sum, msg_len, body_start + at, &body[at..at + len], &new);
            body[at..at + len].copy_from_slice(&new);
            assert_eq!(sum, checksum(&head, &body), "body edit {i}");
        }
    }

    #[test]
    fn strong_known_vectors() {
        assert_eq!(strong(b"123456789"), 0xCBF4_3926);
        assert_eq!(strong(b""), 0);
        let mut hasher = Strong::new();
        hasher.update(b"1234");
        hasher.update(b"");
        hasher.update(b"56789");
        assert_eq!(hasher.finish(), 0xCBF4_3926);
        assert_eq!(Strong::default().finish(), 0);
    }

    /// Where an edit falls, resolved against the message length when it is applied.
    #[derive(Clone, Debug)]
    enum Place {
        Start,
        End,
        Whole,
        Anywhere,
        /// Anywhere, at most 64 bytes long.
        Short,
    }

    /// What an edit writes.
    #[derive(Clone, Debug)]
    enum Fill {
        Random(u64),
        Byte(u8),
        /// The bytes already there: a no-op edit.
        Same,
    }

    fn place() -> impl Strategy<Value = Place> {
        prop_oneof![
            Just(Place::Start),
            Just(Place::End),
            Just(Place::Whole),
            Just(Place::Anywhere),
            Just(Place::Short),
        ]
    }

    fn fill() -> impl Strategy<Value = Fill> {
        prop_oneof![
            4 => any::<u64>().prop_map(Fill::Random),
            1 => prop_oneof![Just(0_u8), Just(0xFF), any::<u8>()].prop_map(Fill::Byte),
            1 => Just(Fill::Same),
        ]
    }

    /// A message of up to `max_len` bytes: random, or all one byte (0xFF maximises every
    /// sum). Built from a seed because per-byte strategies are slow in debug builds.
    fn message(max_len: usize) -> impl Strategy<Value = Vec<u8>> {
        (0..max_len, fill()).prop_map(|(len, fill)| match fill {
            Fill::Random(seed) => bytes_from_seed(seed, len),
            Fill::Byte(byte) => vec![byte; len],
            Fill::Same => vec![0xFF; len],
        })
    }

    type Edit = (Place, usize, usize, Fill);

    fn edit() -> impl Strategy<Value = Edit> {
        (place(), any::<usize>(), any::<usize>(), fill())
    }

    /// Applies `edit` to `msg` (within `msg[..limit]`) through `adler32_patch`, and returns
    /// the patched checksum.
    fn apply(sum: u32, msg: &mut [u8], limit: usize, edit: &Edit) -> u32 {
        let (place, pos, len, fill) = edit;
        let n = limit.min(msg.len());
        let (start, len) = match place {
            Place::Start => (0, len % (n + 1)),
            Place::End => {
                let len = len % (n + 1);
                (n - len, len)
            }
            Place::Whole => (0, n),
            Place::Anywhere => {
                let start = pos % (n + 1);
                (start, len % (n - start + 1))
            }
            Place::Short => {
                let start = pos % (n + 1);
                (start, len % ((n - start).min(64) + 1))
            }
        };
        let range = start..start + len;
        let new = match fill {
            Fill::Random(seed) => bytes_from_seed(*seed, len),
            Fill::Byte(byte) => vec![*byte; len],
            Fill::Same => msg[range.clone()].to_vec(),
        };
        let patched = adler32_patch(sum, msg.len(), start, &msg[range.clone()], &new);
        msg[range].copy_from_slice(&new);
        patched
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(crate::miri_or(256, 3) as u32))]

        #[test]
        fn adler32_matches_oracle(data in message(crate::miri_or(10_000, 600))) {
            prop_assert_eq!(adler32(&data), oracle(&data));
        }

        #[test]
        fn adler32_continue_matches_concatenation(
            a in message(crate::miri_or(4096, 300)),
            b in message(crate::miri_or(4096, 300)),
        ) {
            let whole: Vec<u8> = a.iter().chain(&b).copied().collect();
            prop_assert_eq!(adler32_continue(adler32(&a), &b), oracle(&whole));
            prop_assert_eq!(adler32_continue(1, &b), oracle(&b));
        }

        #[test]
        fn patch_matches_recompute(
            mut msg in message(crate::miri_or(8192, 600)),
            edits in vec(edit(), 1..6),
        ) {
            let mut sum = oracle(&msg);
            for (i, edit) in edits.iter().enumerate() {
                sum = apply(sum, &mut msg, usize::MAX, edit);
                prop_assert_eq!(sum, oracle(&msg), "after edit {} ({:?})", i, edit);
            }
        }

        #[test]
        fn strong_incremental_matches_one_shot(
            data in message(crate::miri_or(4096, 600)),
            cuts in vec(any::<usize>(), 0..8),
        ) {
            let mut cuts: Vec<usize> = cuts.iter().map(|cut| cut % (data.len() + 1)).collect();
            cuts.push(0);
            cuts.push(data.len());
            cuts.sort_unstable();
            let mut hasher = Strong::new();
            for piece in cuts.windows(2) {
                hasher.update(&data[piece[0]..piece[1]]);
            }
            prop_assert_eq!(hasher.finish(), strong(&data));
        }
    }

    proptest! {
        // Each edit recomputes 200 KiB with the scalar oracle, slow in debug builds.
        #![proptest_config(ProptestConfig::with_cases(8))]

        #[test]
        #[cfg_attr(
            miri,
            ignore = "minutes under Miri; the paths of patch_matches_recompute, longer"
        )]
        fn patch_near_start_of_long_message(
            seed in any::<u64>(),
            edits in vec(edit(), 1..5),
        ) {
            let mut msg = bytes_from_seed(seed, 200 * 1024);
            let mut sum = oracle(&msg);
            for (i, edit) in edits.iter().enumerate() {
                sum = apply(sum, &mut msg, 4096, edit);
                prop_assert_eq!(sum, oracle(&msg), "after edit {} ({:?})", i, edit);
            }
        }
    }
}
