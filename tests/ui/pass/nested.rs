// Structs that contain other derived structs, by value, as arrays and in generic ones.
use pgl::Persistent;

#[derive(Persistent)]
#[repr(C)]
pub struct Point {
    pub x: i32,
    pub y: i32,
}

#[derive(Persistent)]
#[repr(C)]
pub struct Segment {
    pub from: Point,
    pub to: Point,
}

#[derive(Persistent)]
#[repr(C)]
pub struct Polygon {
    pub corners: [Point; 6],
    pub edges: [Segment; 6],
    pub count: u64,
}

const _: u64 = Polygon::LAYOUT;

fn main() {
    assert_ne!(Segment::LAYOUT, Point::LAYOUT);
    assert_ne!(Segment::TYPE_ID, Point::TYPE_ID);
}
