// The generated field accessors: getters on read handles, setters and places on writable
// ones, nested structs, arrays, typed `Oid`s, generic structs.
use pgl::{Config, Oid, Persistent, Pool};

#[derive(Persistent, Clone, Copy)]
#[repr(C)]
pub struct Point {
    pub x: i32,
    pub y: i32,
}

#[derive(Persistent, Clone, Copy)]
#[repr(C)]
pub struct Path<const N: usize> {
    pub points: [Point; N],
    pub next: Oid<Path<N>>,
}

fn edit(pool: &Pool, oid: Oid<Path<4>>) -> pgl::Result<()> {
    pool.tx(|tx| {
        let mut p = tx.open(oid)?;
        p.points_mut().at(0).set_x(1);
        p.set_points_at(1, Point { x: 2, y: 3 });
        p.set_next(Oid::NULL);
        let next: Oid<Path<4>> = *p.next();
        let _ = next;
        Ok(())
    })?;
    let r = pool.get(oid)?;
    let _: &i32 = r.points_at(0).x();
    Ok(())
}

fn main() {
    let _ = (edit, Config::small("ui"));
}
