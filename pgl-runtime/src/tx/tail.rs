//! Objects that own a tail (`Persistent::__OWNS_TAIL`): the chain of objects an object's
//! last 8 bytes link to, each ending with the link to the next. `#[extendible]` structs
//! hang their extension groups there; the transaction walks tails to free (and `leds` to
//! copy) an object with everything it owns, groups this build does not know included.
//!
//! ```text
//! owner:  [ .. payload .. | next: u64 LE ] --> [ group | next ] --> [ group | 0 ]
//! ```
//!
//! The link belongs to pgl, not to the program: a buffer of an owner remembers the link pgl
//! set (`Buffer::link`), and dropping a handle to it puts that value back over whatever
//! the handle wrote there (`*a = *b`, `write_bytes` over the last 8 bytes), before any
//! walk, copy or commit can see the bytes. So no two owners ever link one chain, and an
//! owner's chain changes only through `leds` (`Tx::set_link`, `Tx::__alloc_linked`).
//!
//! Invariant: a walk ends at a null link; a chain longer than `MAX_TAIL` or one that
//! revisits an object is reported as `Error::Corrupt`, never followed forever. The `k`-th
//! object of an owner's tail is its extension group `k`, of type id `group_type_id(owner's
//! type id, k)` whichever build wrote it; a link to anything else (damage that no
//! checksum caught, in a pool that keeps none) is `Error::Corrupt` too, so that freeing an
//! owner never frees another object.

use super::buffer::Buffer;
use super::Tx;
use crate::persistent::{group_type_id, Persistent};
use crate::{Error, Result};

/// Bytes of the link that ends each object of a tail (and its owner).
pub(crate) const TAIL_LINK: usize = 8;

/// Most objects a tail may have before it is reported corrupt (a cycle written by a
/// scribble would otherwise never end).
const MAX_TAIL: usize = 4096;

/// The link that ends `bytes` (an object's payload), if it is long enough for one.
pub(crate) fn link_at_end(bytes: &[u8]) -> Option<u64> {
    let start = bytes.len().checked_sub(TAIL_LINK)?;
    let mut b = [0u8; TAIL_LINK];
    b.copy_from_slice(&bytes[start..]);
    Some(u64::from_le_bytes(b))
}

/// The value bytes of `buf`'s payload, which end with its link: all of it but the
/// reserve of an `#[extendible(reserve = N)]` object (`Buffer::reserve`).
pub(crate) fn value_of(buf: &Buffer) -> &[u8] {
    &buf.payload()[..buf.size.saturating_sub(buf.reserve)]
}

/// Sets the link that ends `buf`'s value to `link`, as pgl's own (kept over the
/// program's writes from now on), marking it modified if it changes. `reserve`: the
/// bytes of the payload after the value.
pub(crate) fn set_link(buf: &mut Buffer, link: u64, reserve: usize) {
    buf.link = Some(link);
    buf.reserve = reserve;
    keep_link(buf);
}

/// Puts the link pgl set back at the end of `buf`'s value if a handle wrote over it
/// (marking it modified); nothing for a buffer without one.
pub(crate) fn keep_link(buf: &mut Buffer) {
    let Some(link) = buf.link else {
        return;
    };
    let end = buf.size.saturating_sub(buf.reserve);
    let Some(start) = end.checked_sub(TAIL_LINK) else {
        return;
    };
    if link_at_end(value_of(buf)) != Some(link) {
        buf.payload_mut()[start..end].copy_from_slice(&link.to_le_bytes());
        buf.mark(start, end);
    }
}

impl<'p> Tx<'p> {
    /// The tail of the `T` at `owner`, whose link is `owner_link`: `(offset, type id,
    /// bytes)` of each separate object, in order, each verified like any read and checked
    /// to be the owner's next extension group (the first after those its reserve holds
    /// inline, which are part of the owner: see `leds::inline`; a count of them the
    /// reserve cannot hold is `Error::Corrupt`, as it would shift every group's number).
    pub(crate) fn tail<T: Persistent>(
        &self,
        owner: u64,
        owner_link: u64,
    ) -> Result<Vec<(u64, u32, Vec<u8>)>> {
        let owner_type = T::TYPE_ID;
        crate::leds::check_inline_count(owner, T::TYPE_NAME, owner_link, T::__RESERVE)?;
        let mut out: Vec<(u64, u32, Vec<u8>)> = Vec::new();
        let mut link = crate::leds::separate(owner_link);
        let inline = crate::leds::inline_count(owner_link) as u64;
        while link != 0 {
            if out.len() >= MAX_TAIL || link == owner || out.iter().any(|(o, _, _)| *o == link) {
                return Err(Error::Corrupt {
                    what: "extension chain",
                    offset: link,
                    detail: format!(
                        "the links do not end after {} groups (a cycle?); `pgl check` verifies \
                         the objects",
                        out.len()
                    ),
                    pool_file: None,
                });
            }
            let (type_id, bytes) = self.object_bytes(link)?;
            let k = inline + out.len() as u64 + 1;
            let group = group_type_id(owner_type, k);
            if type_id != group {
                return Err(Error::Corrupt {
                    what: "extension chain",
                    offset: link,
                    detail: format!(
                        "link {k} of the object at {owner:#x} points to an object of type id \
                         {type_id:#010x}, not to its extension group {k} (type id {group:#010x}): \
                         the link is damaged (`pgl check` verifies the objects); nothing was \
                         freed or copied"
                    ),
                    pool_file: None,
                });
            }
            let next = link_at_end(&bytes).ok_or_else(|| Error::Corrupt {
                what: "extension chain",
                offset: link,
                detail: format!(
                    "a {}-byte object cannot be an extension group (it ends with an 8-byte link)",
                    bytes.len()
                ),
                pool_file: None,
            })?;
            out.push((link, type_id, bytes));
            link = next;
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_link_is_the_last_eight_bytes_little_endian() {
        let mut obj = [0u8; 20];
        obj[12..].copy_from_slice(&0x1122_3344_5566_7788u64.to_le_bytes());
        assert_eq!(link_at_end(&obj), Some(0x1122_3344_5566_7788));
        assert_eq!(link_at_end(&obj[..7]), None);
        assert_eq!(link_at_end(&obj[..8]), Some(0));
    }

    #[test]
    fn a_link_written_over_is_put_back_and_marked_and_an_intact_one_left_alone() {
        use super::super::buffer::BufKind;
        let mut b = Buffer::new(4096, 24, 1, 7, BufKind::Open);
        keep_link(&mut b);
        assert!(b.dirty().is_empty(), "no link kept: nothing to do");
        set_link(&mut b, 0x40, 0);
        assert_eq!(link_at_end(b.payload()), Some(0x40));
        assert_eq!(b.dirty(), &[(16, 24)]);
        let mut c = Buffer::new(4096, 24, 1, 7, BufKind::Open);
        c.payload_mut()[16..].copy_from_slice(&0x40u64.to_le_bytes());
        c.link = Some(0x40);
        keep_link(&mut c);
        assert!(c.dirty().is_empty(), "intact: not marked");
        c.payload_mut()[20] = 0xff;
        keep_link(&mut c);
        assert_eq!(link_at_end(c.payload()), Some(0x40));
        assert_eq!(c.dirty(), &[(16, 24)]);
        // Too short to end with a link: left alone.
        let mut d = Buffer::new(4096, 4, 1, 7, BufKind::Open);
        set_link(&mut d, 0x40, 0);
        assert!(d.dirty().is_empty());
    }

    #[test]
    fn the_link_of_an_object_with_a_reserve_ends_its_value_not_its_payload() {
        use super::super::buffer::BufKind;
        // A 24-byte value (link at 16..24) and 16 bytes of reserve.
        let mut b = Buffer::new(4096, 40, 1, 7, BufKind::Open);
        b.payload_mut()[24..].fill(0xaa);
        set_link(&mut b, 0x41, 16);
        assert_eq!(link_at_end(value_of(&b)), Some(0x41));
        assert_eq!(b.dirty(), &[(16, 24)]);
        assert!(
            b.payload()[24..].iter().all(|&x| x == 0xaa),
            "the reserve untouched"
        );
        b.payload_mut()[..24].fill(0);
        keep_link(&mut b);
        assert_eq!(
            link_at_end(value_of(&b)),
            Some(0x41),
            "put back at the value's end"
        );
        assert!(b.payload()[24..].iter().all(|&x| x == 0xaa));
    }
}
