// A `Detached` from `pool.open_mut` holds a lane and a lock of the pool: the pool cannot
// be dropped while it lives.
use pgl::prelude::*;

fn main() -> pgl::Result<()> {
    let pool = Pool::create("/dev/null/never", &Config::small("ui"))?;
    let x: Oid<u64> = Oid::NULL;
    let mut d = pool.open_mut(x)?;
    drop(pool);
    *d = 1;
    d.commit()
}
