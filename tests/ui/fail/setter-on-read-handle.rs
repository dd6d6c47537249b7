// A field setter called through a read-only handle (`pool.get`).
use pgl::{Config, Oid, Persistent, Pool};

#[derive(Persistent)]
#[repr(C)]
pub struct Point {
    pub x: u64,
    pub y: u64,
}

fn bump(pool: &Pool, oid: Oid<Point>) -> pgl::Result<()> {
    let mut p = pool.get(oid)?;
    p.set_x(p.x + 1);
    Ok(())
}

fn main() {
    let _ = (bump, Config::small("ui"));
}
