//! What `#[derive(Persistent)]` computes: type ids from the type's path (or `#[pgl(id)]`),
//! and layout fingerprints that change with every field's name, type, offset and size but
//! not with the struct's name. The golden values pin the hashing scheme: a change to them
//! makes every existing pool file unreadable, so it must be deliberate.

use core::mem::{align_of, size_of};

use pgl::__private::{fnv1a64, fold_type_id};
use pgl::{Oid, Persistent};

#[derive(Persistent)]
#[repr(C)]
pub struct Point {
    pub x: u64,
    pub y: u64,
}

#[derive(Persistent)]
#[repr(C)]
#[pgl(id = 4242)]
pub struct Pinned {
    pub a: u32,
    pub b: u32,
}

#[derive(Persistent)]
#[repr(C)]
pub struct Segment {
    pub from: Oid<Point>,
    pub to: Oid<Point>,
}

#[derive(Persistent)]
#[repr(C)]
pub struct Slot<T: Persistent, const N: usize> {
    pub items: [T; N],
}

mod v1 {
    #[derive(pgl::Persistent)]
    #[repr(C)]
    pub struct Rec {
        pub a: u32,
        pub b: u32,
    }
}
mod renamed_field {
    #[derive(pgl::Persistent)]
    #[repr(C)]
    pub struct Rec {
        pub a: u32,
        pub c: u32,
    }
}
mod retyped_field {
    #[derive(pgl::Persistent)]
    #[repr(C)]
    pub struct Rec {
        pub a: u32,
        pub b: i32,
    }
}
mod swapped_fields {
    #[derive(pgl::Persistent)]
    #[repr(C)]
    pub struct Rec {
        pub b: u32,
        pub a: u32,
    }
}
mod grown {
    #[derive(pgl::Persistent)]
    #[repr(C)]
    pub struct Rec {
        pub a: u32,
        pub b: u32,
        pub c: u64,
    }
}
mod resized_array {
    #[derive(pgl::Persistent)]
    #[repr(C)]
    pub struct Rec {
        pub a: u32,
        pub b: [u16; 2],
    }
}
mod realigned {
    #[derive(pgl::Persistent)]
    #[repr(C, align(8))]
    pub struct Rec {
        pub a: u32,
        pub b: u32,
    }
}
mod packed {
    #[derive(pgl::Persistent)]
    #[repr(C, packed)]
    pub struct Rec {
        pub a: u32,
        pub b: u32,
    }
}
mod transparent_same_bytes {
    #[derive(pgl::Persistent)]
    #[repr(C)]
    pub struct Rec(pub u32, pub u32);
}
mod other_name {
    #[derive(pgl::Persistent)]
    #[repr(C)]
    pub struct Other {
        pub a: u32,
        pub b: u32,
    }
}

#[test]
fn type_id_is_the_hash_of_the_module_path_and_name() {
    let path = concat!(module_path!(), "::Point");
    assert_eq!(Point::TYPE_ID, fold_type_id(fnv1a64(path.as_bytes(), 0)));
    assert_eq!(Point::TYPE_NAME, "Point");
    assert_ne!(Point::TYPE_ID, 0);
}

#[test]
fn explicit_id_is_used_as_is() {
    assert_eq!(Pinned::TYPE_ID, 4242);
}

#[test]
fn type_id_depends_on_the_path_not_the_layout() {
    assert_ne!(v1::Rec::TYPE_ID, renamed_field::Rec::TYPE_ID);
    assert_ne!(v1::Rec::TYPE_ID, other_name::Other::TYPE_ID);
    assert_eq!(v1::Rec::LAYOUT, other_name::Other::LAYOUT);
}

#[test]
fn layout_changes_with_every_field_property() {
    let changed = [
        ("renamed field", renamed_field::Rec::LAYOUT),
        ("retyped field", retyped_field::Rec::LAYOUT),
        ("swapped fields", swapped_fields::Rec::LAYOUT),
        ("added field", grown::Rec::LAYOUT),
        ("array instead of scalar", resized_array::Rec::LAYOUT),
        ("raised alignment", realigned::Rec::LAYOUT),
        ("tuple field names", transparent_same_bytes::Rec::LAYOUT),
    ];
    for (what, layout) in changed {
        assert_ne!(
            v1::Rec::LAYOUT,
            layout,
            "{what} must change the fingerprint"
        );
    }
    for (i, (a, la)) in changed.iter().enumerate() {
        for (b, lb) in &changed[i + 1..] {
            assert_ne!(la, lb, "{a} and {b} must have different fingerprints");
        }
    }
}

#[test]
fn packed_struct_without_holes_has_the_layout_of_its_repr_c_twin_but_lower_alignment() {
    assert_eq!(size_of::<packed::Rec>(), size_of::<v1::Rec>());
    assert_eq!(align_of::<packed::Rec>(), 1);
    assert_ne!(packed::Rec::LAYOUT, v1::Rec::LAYOUT);
}

#[test]
fn generic_instantiations_have_their_own_ids_and_layouts() {
    let ids = [
        <Slot<u8, 4> as Persistent>::TYPE_ID,
        <Slot<u8, 8> as Persistent>::TYPE_ID,
        <Slot<u16, 4> as Persistent>::TYPE_ID,
        <Slot<Point, 4> as Persistent>::TYPE_ID,
    ];
    for (i, a) in ids.iter().enumerate() {
        for b in &ids[i + 1..] {
            assert_ne!(a, b);
        }
    }
    assert_ne!(
        <Slot<u8, 4> as Persistent>::LAYOUT,
        <Slot<u8, 8> as Persistent>::LAYOUT
    );
    // Same bytes, different element type: u16 vs [u8; 2] elements differ.
    assert_ne!(
        <Slot<u16, 2> as Persistent>::LAYOUT,
        <Slot<[u8; 2], 2> as Persistent>::LAYOUT
    );
}

#[test]
fn oid_fields_are_eight_bytes() {
    assert_eq!(size_of::<Segment>(), 16);
    assert_ne!(Segment::LAYOUT, Point::LAYOUT);
}

#[test]
fn sizes_are_the_sum_of_the_fields() {
    assert_eq!(size_of::<Point>(), 16);
    assert_eq!(size_of::<grown::Rec>(), 16);
    assert_eq!(size_of::<Slot<Point, 3>>(), 48);
}

/// Golden values: these numbers are stored in every pool file's type registry.
#[test]
fn golden_values() {
    assert_eq!(
        (v1::Rec::LAYOUT, Pinned::LAYOUT),
        (GOLDEN_REC_LAYOUT, GOLDEN_REC_LAYOUT),
        "the layout fingerprint scheme changed: existing pool files will be rejected"
    );
    assert_eq!(Point::LAYOUT, GOLDEN_POINT_LAYOUT);
    // `derive_layout::Point`: the crate name is part of the path.
    assert_eq!(Point::TYPE_ID, GOLDEN_POINT_TYPE_ID);
}

const GOLDEN_REC_LAYOUT: u64 = 2275008492312924485;
const GOLDEN_POINT_LAYOUT: u64 = 1044550236743819124;
const GOLDEN_POINT_TYPE_ID: u32 = 1510212754;
